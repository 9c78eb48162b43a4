"""Integration fixtures: real network namespaces, veth pairs and bpffs pins.

Modules run with a chosen interpreter: Debian's /usr/bin/python3 (pyroute2
0.7) and the venv's Python (pyroute2 0.9). Tests about the kernel start the
module directly, the way ansible-core documents for debugging a module
(`python -m MODULE` with its arguments as JSON on stdin): the same module code, argument spec, check and
diff mode, without the ~1.5 s of a controller per run (in the lab's VM, --module-start=fork: forked from an
interpreter that imported what every module imports, module_starter.py). What only Ansible does
(AnsiballZ packaging, respawn under another interpreter, connection plugins,
roles) is tested through `ansible` and `ansible-playbook` (ModuleRunner's
via_ansible, test_lab, test_rollout, test_vm, molecule), and
test_module_runner shows that both ways return the same result.
"""

import atexit
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid

import pytest

import ansible
import kernel_features
from ansible_collections.ebpf.xdp.plugins.module_utils.bpf import compile as _compile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BPF_DIR = os.path.join(ROOT, "files", "bpf")
SYSTEM_PYTHON = "/usr/bin/python3"
VENV_PYTHON = sys.executable
# The interpreters modules run under: Debian's Python with its pyroute2 (0.7) and the venv's with PyPI's (0.9).
# Inside the lab's VM (make test-vm) the tests run under Debian's Python: there is only the first.
IN_VENV = sys.prefix != sys.base_prefix
PYTHONS = [pytest.param(SYSTEM_PYTHON, id="pyroute2-distro")] + (
    [pytest.param(VENV_PYTHON, id="pyroute2-pypi")] if IN_VENV else [])
PIN_ROOT_BASE = "/sys/fs/bpf/ebpf_xdp_test"


def pytest_addoption(parser):
    parser.addoption("--kernel-dependent", action="store_true",
                     help="only the tests marked kernel(feature), kernel_either(feature) or debian12(names): what "
                          "make test-vm runs on Debian 12's kernel (make test-debian12 runs them all there)")
    parser.addoption("--module-start", choices=("exec", "fork"), default="exec",
                     help="how ModuleRunner starts a module: a new interpreter for each run (python -m, as "
                          "ansible-core documents for debugging a module), or forked from one that imported what "
                          "every module imports (module_starter.py; make test-debian12, where an interpreter's start "
                          "costs a minute under emulation)")
    parser.addoption("--debian12-part", choices=("first", "second"),
                     help="make test-debian12's part (first: all but the second's) or make test-debian12-long's "
                          "(second: the tests marked long and the files of DEBIAN12_SECOND_PART)")
    parser.addoption("--vm", choices=("with", "without", "only"), default="with",
                     help="the tests that reach the lab's VM host over SSH (the vm fixture): with the others, "
                          "without them (make integration), or only them (make test-vm, which boots it once)")


def pytest_configure(config):
    MODULE_START[0] = config.getoption("module_start")
    config.addinivalue_line("markers", "kernel(feature): the test needs a kernel feature of kernel_features.PROBES; "
                            "where it is absent, the feature's refusal is asserted instead")
    config.addinivalue_line("markers", "quiet: the test measures rates or timing, or compares snapshots of the "
                            "whole host (kernel modules included); make test runs it with nothing else beside it "
                            "(make integration-quiet)")
    config.addinivalue_line("markers", "kernel_either(feature): the test asserts what the kernel does with and "
                            "without a feature of kernel_features.PROBES itself (it reads the table)")
    config.addinivalue_line("markers", "debian12(*names): a positive test of the modules and roles named, which make "
                            "test's VM step (make test-vm) runs on Debian 12's kernel: every module and role has one "
                            "(tests/unit/test_debian12_subset.py)")
    config.addinivalue_line("markers", "long: the rest of a long matrix or a long multi-run test, which make test "
                            "leaves to make test-long (the cases it keeps take each path of the matrix once); make "
                            "test-debian12-long runs them on Debian 12's kernel (the VM's over SSH among them), make test-vm and "
                            "make test-debian12 do not")
    config.addinivalue_line("markers", "controller_in_vm: in a file of HOST_CONTROLLED, a test whose Ansible runs "
                            "keep their controller inside the VM in make test-debian12 (its module needs the "
                            "controller's environment or interpreter)")


def pytest_sessionstart(session):
    """The kernel feature table first, whatever the verbosity (-q hides pytest's report header)."""
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter:
        for line in kernel_features.features().table():
            reporter.write_line(line)


def skip_for_hardware(item, what, why):
    """Skip item: this machine lacks hardware `what` (a name of kernel_features.HARDWARE), why in words. The one
    skip the tests allow, counted apart in the summary (`skipped (hardware)`), whether a marker or the test's own
    finding (a count of CPUs the marker's probe does not read) calls it."""
    item.user_properties.append(("hardware_skip", what))
    pytest.skip("this machine has no %s: %s" % (what, why))


@pytest.hookimpl(wrapper=True)
def pytest_pyfunc_call(pyfuncitem):
    """A test marked kernel(feature) on a kernel without it runs watched (kernel_features.Watch): its own first
    call that needs the feature must come back refused with the collection's words and change nothing; the test
    ends there, reported as a refusal asserted (pytest_report_teststatus), not as a pass. Hardware a machine
    lacks (a second CPU) is the one allowed skip."""
    marked = []
    for marker in pyfuncitem.iter_markers("kernel"):
        feature = marker.args[0]
        assert feature in kernel_features.PROBES, "unknown kernel feature %r" % feature
        marked.append(feature)
    lacking = kernel_features.hardware_lacking(marked)
    if lacking:
        skip_for_hardware(pyfuncitem, lacking[0], kernel_features.PROBES[lacking[0]][0])
    absent = [f for f in marked if not kernel_features.features()[f]]
    if not absent:
        return (yield)
    unknown = [f for f in absent if f not in kernel_features.REFUSED_WITH]
    if unknown:
        pytest.fail("the kernel lacks %s (%s) and kernel_features.REFUSED_WITH has no refusal for it: a test that "
                    "needs it must assert the collection's clear error where it is absent"
                    % (unknown[0], kernel_features.PROBES[unknown[0]][0]), pytrace=False)
    watch = kernel_features.start_watch(absent)
    try:
        try:
            yield
        except kernel_features.RefusalAsserted:
            pass
        except Exception as exc:  # pylint: disable=broad-except
            try:
                watch.raised(exc)
            except kernel_features.RefusalAsserted:
                pass
            else:
                raise
    finally:
        kernel_features.end_watch()
    if watch.said is None:
        pytest.fail("this kernel has no %s, and the test ran to its end without a call of its own refused: it "
                    "does not need %s (its kernel marker is wrong), or a call that needs it is not recognised "
                    "(kernel_features.NEEDED_BY)" % (" or ".join(absent), " or ".join(absent)), pytrace=False)
    # On its report, so that the run's summary lists it also when a worker ran it (pytest-xdist).
    pyfuncitem.user_properties.append(("kernel_refusal", watch.said))
    return True


def _properties(report):
    return dict(getattr(report, "user_properties", ()) or ())


@pytest.hookimpl(tryfirst=True)
def pytest_report_teststatus(report, config):  # pylint: disable=unused-argument
    """A refusal asserted and a hardware skip are counted apart from the passes and from any other skip: the
    summary line says `N passed, M refusals asserted, K skipped (hardware)`. Called where the report is shown:
    with pytest-xdist, in the main process, on the workers' reports."""
    properties = _properties(report)
    if report.when == "call" and report.passed and "kernel_refusal" in properties:
        return "refusals asserted", "R", "REFUSAL ASSERTED"
    if report.when == "call" and report.skipped and "hardware_skip" in properties:
        return "skipped (hardware)", "h", "SKIPPED (hardware)"
    return None


# (nodeid, feature, what was asserted) of each test run as its feature's refusal, for the run's summary; the
# hardware skips, and the rates excused by the load of the machine (xfail with a load average in its reason).
REFUSALS = []
HARDWARE_SKIPS = []
EXCUSED_BY_LOAD = []


def pytest_runtest_logreport(report):
    """Reports reach this process from its own tests and, under pytest-xdist, from the workers'."""
    properties = _properties(report)
    if report.when == "call" and "kernel_refusal" in properties:
        feature, said = properties["kernel_refusal"]
        REFUSALS.append((report.nodeid, feature, said))
    if report.when == "call" and report.skipped and "hardware_skip" in properties:
        # The skip's own words (skip_for_hardware: what the test found, such as a rate it measured).
        said = report.longrepr[2] if isinstance(report.longrepr, (tuple, list)) else str(report.longrepr)
        HARDWARE_SKIPS.append((report.nodeid, properties["hardware_skip"], said.replace("Skipped: ", "", 1)))
    if report.skipped and getattr(report, "wasxfail", None) and "load average" in report.wasxfail:
        EXCUSED_BY_LOAD.append((report.nodeid, report.wasxfail))


def pytest_terminal_summary(terminalreporter, config):  # pylint: disable=unused-argument
    if REFUSALS:
        terminalreporter.section("kernel features absent: refusals asserted instead (%d tests)" % len(REFUSALS))
        for nodeid, feature, said in REFUSALS:
            terminalreporter.write_line("%s  [no %s] %s" % (nodeid, feature, said))
    if HARDWARE_SKIPS:
        terminalreporter.section("hardware this machine lacks: skipped (%d tests)" % len(HARDWARE_SKIPS))
        for nodeid, feature, said in HARDWARE_SKIPS:
            terminalreporter.write_line("%s  [no %s] %s" % (nodeid, feature, said))
    if EXCUSED_BY_LOAD:
        terminalreporter.section("rates below their floor, excused by the load of the machine (%d tests)"
                                 % len(EXCUSED_BY_LOAD))
        for nodeid, reason in EXCUSED_BY_LOAD:
            terminalreporter.write_line("%s  %s" % (nodeid, reason))
    # The summary line in the order `passed, refusals asserted, skipped (hardware)`: pytest puts the categories
    # it does not know after its own, in the order they were first seen.
    for key in ("refusals asserted", "skipped (hardware)"):
        if key in terminalreporter.stats:
            terminalreporter.stats[key] = terminalreporter.stats.pop(key)


def long_case(*values):
    """Parameter values that only make test-long runs (pytest.mark.long): make test keeps the cases of the matrix
    that take each of its paths."""
    return pytest.param(*values, marks=pytest.mark.long)


@pytest.fixture(scope="session")
def features():
    """The kernel feature table (kernel_features.PROBES), probed once."""
    return kernel_features.features()


# trylast: after -m has chosen, so that the one refusal kept per file is one of the tests chosen.
@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(session, config, items):  # pylint: disable=unused-argument
    """The VM tests last: the VM, booted once for them, keeps a CPU busy under emulation while it is up, which
    the rate checks of the other tests must not share. With --kernel-dependent, only the tests marked kernel or
    kernel_either, and make test's positive tests of each module and role on 6.1 (debian12), with a feature the
    kernel lacks refused once per file; --vm chooses whether the VM tests run.

    make integration-shared runs the tests on three workers (pytest-xdist, --dist loadfile): a file's tests run on
    one worker, in order, with its module fixtures set up once; tests that share fixed host state (the lab's
    namespaces) are in one file. xdist hands out the files in this order, so the files that take minutes go
    first (LONGEST_FIRST): started last, one of them would leave the other worker idle at the end. Only with
    --no-loadscope-reorder (make integration-shared, scripts/test_vm.sh): by default xdist hands out the files
    with the most tests first instead (in the VM, test_capture.py and test_faults.py before test_xdp_metrics.py)."""
    refusals_kept = set()
    part = config.getoption("debian12_part")

    def keep(item):
        on_vm = "vm" in getattr(item, "fixturenames", ())
        if part and _in_second_part(item) != (part == "second"):
            return False
        if config.getoption("kernel_dependent"):
            if not (any(any(item.iter_markers(name)) for name in ("kernel_either", "debian12"))
                    or any(m.args[0] not in kernel_features.HOST_POLICY for m in item.iter_markers("kernel"))):
                return False
            if not _one_refusal_per_file(item, refusals_kept):
                return False
        return {"with": True, "without": not on_vm, "only": on_vm}[config.getoption("vm")]

    kept = [item for item in items if keep(item)]
    if len(kept) < len(items):
        config.hook.pytest_deselected(items=[item for item in items if item not in kept])
        items[:] = kept
    items.sort(key=lambda item: ("vm" in getattr(item, "fixturenames", ()), _file_rank(item)))


# The Debian 12 VM's suite in two parts, each to fit in one CI run of 90 minutes under emulation (--debian12-part):
# the second is the tests marked long and these files, whole. Chosen by their time in the VM, where the emulated
# CPUs are the bottleneck (qemu at 165% of the two cores, the host 90-97% busy: more workers would not help), in
# worker-seconds of make test-debian12 on a fresh clone of f279bf3: test_xdp_metrics.py 1677 s, test_rollout.py
# 874 s of the first part's 8405 s; the second part's long tests took 1836 s on two workers.
DEBIAN12_SECOND_PART = ("test_xdp_metrics.py", "test_rollout.py")


def _in_second_part(item):
    return item.get_closest_marker("long") is not None or os.path.basename(str(item.path)) in DEBIAN12_SECOND_PART


def _one_refusal_per_file(item, kept):
    """make test-vm's subset asserts a missing feature's refusal once per test file (the first test of the file that
    needs it), not in each of its tests: on 6.1, 39 of its 85 tests were the same tcx refusal, ~80 s under emulation.
    make test-debian12 (no --kernel-dependent) asserts each test's own. Tests marked debian12 or kernel_either run
    whatever the kernel lacks: they are the subset's positive tests."""
    if any(any(item.iter_markers(name)) for name in ("kernel_either", "debian12")):
        return True
    absent = tuple(sorted({marker.args[0] for marker in item.iter_markers("kernel")
                           if marker.args[0] not in kernel_features.HARDWARE
                           and not kernel_features.features()[marker.args[0]]}))
    if not absent:
        return True
    key = (str(item.path), absent)
    if key in kept:
        return False
    kept.add(key)
    return True


# The files whose tests take minutes in all (Ansible runs, the lab, a fleet), longest first: measured with
# --junitxml in make integration-shared (.build/test-logs/integration-shared.xml).
# test_xdp_dispatcher.py is the longest of make test-vm's run inside the VM (here its tests are refusals).
# test_benchmark_runs.py: two benchmark runs, one after the other (291 s at a load of 20, measured alone).
LONGEST_FIRST = ("test_xdp_metrics.py", "test_rollout.py", "test_lab.py", "test_bcc_backend.py",
                 "test_traffic_roles.py", "test_xdp_dispatcher.py", "test_benchmark_runs.py")


def _file_rank(item):
    name = os.path.basename(str(item.path))
    return LONGEST_FIRST.index(name) if name in LONGEST_FIRST else len(LONGEST_FIRST)


@pytest.fixture(scope="session")
def vm():
    """The lab's VM host (scripts/vm.sh), booted once per test session unless it is up already; powered off
    again at the end only if booted here."""
    vm_sh = os.path.join(ROOT, "scripts", "vm.sh")
    started = subprocess.run(["bash", vm_sh, "status"], capture_output=True, check=False).returncode != 0
    try:
        if started:
            proc = subprocess.run(["bash", vm_sh, "up"], capture_output=True, text=True, check=False)
            assert proc.returncode == 0, proc.stdout + proc.stderr
        yield
    finally:
        if started:
            subprocess.run(["bash", vm_sh, "down"], check=True, capture_output=True)


def ansible_env():
    """How tests run ansible and ansible-playbook: the checkout's collection, one JSON document per run
    (read at each run: a test may have set a variable for it)."""
    return dict(os.environ, ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json", ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
                ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"),
                ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, ".build", "collections"),
                ANSIBLE_INVENTORY_UNPARSED_WARNING="false", ANSIBLE_LOCALHOST_WARNING="false")


def sh(*argv, check=True):
    return subprocess.run(argv, check=check, capture_output=True, text=True)


# The files whose Ansible runs make test-debian12 makes on the machine that runs the VM (its controller there,
# tests/vm/host_controller.py, where the VM's run gives EBPF_XDP_HOST_CONTROLLER): chains of playbooks, each task
# ~1.5-2 s of controller work under emulation (an `ansible` run's own start there: ~10 s). Their own checks still
# read the VM. A test of theirs marked controller_in_vm keeps its controller in the VM: it gives the module's
# process something only a controller beside it passes on (an environment, an interpreter of its choosing).
# (test_rollout_slices.py's ansible-runner jobs go there too, through tests/benchmarks/harness's BIN.)
HOST_CONTROLLED = ("test_lab.py", "test_rollout.py", "test_traffic_roles.py", "test_role_input.py",
                   "test_xdp_metrics.py", "test_bcc_backend.py")
_HOST_CONTROLLED_NOW = [False]


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """Before the item's fixtures: whether its file's Ansible runs go to the host's controller (kept for the
    teardown of its module's fixtures, which comes before the next item's setup)."""
    _HOST_CONTROLLED_NOW[0] = (os.path.basename(str(item.path)) in HOST_CONTROLLED
                               and item.get_closest_marker("controller_in_vm") is None)


def ansible_cli(name):
    """The argv that starts Ansible's command `name` (ansible, ansible-playbook, ansible-inventory): the venv's
    script, or, inside the lab's VM (make test-vm, make test-debian12), where ansible-core is on PYTHONPATH without
    its scripts, its module entry (python -m ansible playbook), or for a file of HOST_CONTROLLED there,
    tests/vm/host_ansible.py (the same command on the host's controller)."""
    if _HOST_CONTROLLED_NOW[0] and os.environ.get("EBPF_XDP_HOST_CONTROLLER"):
        return [sys.executable, os.path.join(ROOT, "tests", "vm", "host_ansible.py"), name]
    script = os.path.join(os.path.dirname(VENV_PYTHON), name)
    if os.path.exists(script):
        return [script]
    return [VENV_PYTHON, "-m", "ansible", name.replace("ansible-", "") if name != "ansible" else "adhoc"]


def ansible_playbook(*args, check=False, expect_ok=True, extra_vars=()):
    """ansible-playbook ARGS (inventory, playbooks, options) with the json callback: its output.

    Each of extra_vars is passed as -e JSON. expect_ok: every host ran
    without a failure and the command exited 0.
    """
    argv = ansible_cli("ansible-playbook") + list(args)
    for extra in extra_vars:
        argv += ["-e", json.dumps(extra)]
    if check:
        argv.append("--check")
    proc = subprocess.run(argv, capture_output=True, text=True, env=ansible_env(), cwd=ROOT, check=False)
    try:
        out = json.loads(proc.stdout)
    except ValueError:
        raise AssertionError("ansible-playbook printed no JSON:\n%s\n%s" % (proc.stdout[-3000:], proc.stderr[-3000:]))
    watch = kernel_features.watching()
    if watch:  # a task refused for a feature this kernel lacks ends a watched test there
        watch.playbook_run(out)
    if expect_ok:
        failed = {h: s for h, s in out["stats"].items() if s["failures"] or s["unreachable"]}
        assert proc.returncode == 0 and not failed, json.dumps(failed) + proc.stdout[-6000:] + proc.stderr[-2000:]
    return out


def task_results(out, name):
    """{host: result} of the first task called name in ansible_playbook()'s output (a role's tasks are
    shown as "ROLE : name")."""
    for play in out["plays"]:
        for task in play["tasks"]:
            if name in (task["task"]["name"], task["task"]["name"].partition(" : ")[2]):
                return task["hosts"]
    raise KeyError(name)


def changed_by_host(out):
    """{host: number of changed tasks} of ansible_playbook()'s output."""
    return {host: stats["changed"] for host, stats in out["stats"].items()}


def changed_tasks(out):
    """{host: [(task name, what it reported)]} of the changed tasks in ansible_playbook()'s output: what an
    assertion of no change shows when it fails."""
    found = {}
    for play in out["plays"]:
        for task in play["tasks"]:
            for host, result in task["hosts"].items():
                if result.get("changed"):
                    said = {k: result[k] for k in ("changes", "diff", "msg", "cmd") if result.get(k)}
                    found.setdefault(host, []).append((task["task"]["name"], str(said)[:800]))
    return found


def module_path():
    """A PYTHONPATH with only ansible-core and this checkout's collection, for any interpreter: the system Python
    keeps Debian's pyroute2 (the venv's site-packages would put PyPI's first)."""
    path = os.path.join(ROOT, ".build", "module-path")
    os.makedirs(path, exist_ok=True)
    for name, target in (("ansible", os.path.dirname(ansible.__file__)),
                         ("ansible_collections", os.path.join(ROOT, ".build", "collections", "ansible_collections"))):
        link = os.path.join(path, name)
        if not os.path.islink(link) or os.readlink(link) != target:
            tmp = "%s.%d" % (link, os.getpid())
            os.symlink(target, tmp)
            os.replace(tmp, link)
    return path


def message_text(message):
    """A warning or deprecation as Ansible shows it: a module run alone reports them as structured summaries
    (ansible-core 2.19)."""
    return message["event"]["msg"] if isinstance(message, dict) and "event" in message else message


def module_result(proc):
    """A directly started module's result as `ansible -m` would report it: MODULE FAILURE for output that is
    no JSON, changed false when not said, warnings as text; killed for a run a test killed."""
    if proc.returncode == -signal.SIGKILL:
        return {"failed": True, "killed": True, "changed": False}
    try:
        res = json.loads(proc.stdout)
    except ValueError:
        return {"failed": True, "changed": False, "msg": "MODULE FAILURE", "rc": proc.returncode,
                "module_stdout": proc.stdout, "module_stderr": proc.stderr}
    res.setdefault("changed", False)
    for key in ("warnings", "deprecations"):
        if key in res:
            res[key] = [message_text(m) for m in res[key]]
    return res


# How ModuleRunner starts a module (--module-start), and the warm starters by interpreter.
MODULE_START = ["exec"]
_STARTERS = {}
_STARTERS_LOCK = threading.Lock()


def _starter(python, pythonpath):
    """The unix socket of python's module starter (module_starter.py), started on first use: its imports take
    as long as one module's start."""
    with _STARTERS_LOCK:
        found = _STARTERS.get(python)
        if found and found[0].poll() is None:
            return found[1]
        path = "/tmp/ebpf-xdp-starter.%s" % uuid.uuid4().hex[:12]
        proc = subprocess.Popen(  # pylint: disable=consider-using-with
            [python, os.path.join(os.path.dirname(os.path.abspath(__file__)), "module_starter.py"), path],
            stdout=subprocess.PIPE, text=True, cwd="/tmp", env=dict(os.environ, PYTHONPATH=pythonpath))
        ready = proc.stdout.readline()
        assert ready == "ready\n", "the module starter of %s did not start (exit %s)" % (python, proc.poll())
        atexit.register(_stop_starter, proc, path)
        _STARTERS[python] = (proc, path)
        return path


def _stop_starter(proc, path):
    proc.terminate()
    proc.wait()
    try:
        os.unlink(path)
    except OSError:
        pass


def _forked_run(python, argv, stdin, env):
    """A module run through python's starter: what subprocess.run(argv) would have returned."""
    module = argv[-1]
    path = _starter(python, env["PYTHONPATH"])
    request = {"module": module, "stdin": stdin, "cwd": "/tmp", "env": env}
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.connect(path)
        with conn.makefile("rwb") as stream:
            stream.write(json.dumps(request).encode("utf-8", "surrogateescape") + b"\n")
            stream.flush()
            answer = json.loads(stream.readline())
    return subprocess.CompletedProcess(argv, answer["returncode"], answer["stdout"], answer["stderr"])


class ModuleRunner(object):
    """Runs ebpf.xdp modules on this machine with one interpreter: directly (see the module docstring), or
    through `ansible localhost -m` with via_ansible (for what only Ansible does, such as respawn)."""

    def __init__(self, python, pin_root, via_ansible=False, start=None):
        self.python = python
        self.pin_root = pin_root
        self.via_ansible = via_ansible
        self.start = start  # "exec" or "fork" for a direct run; the session's --module-start when None

    def __call__(self, module, args, check=False, diff=False, no_caps=False, pin=True, env=None):
        """The module's result. env: variables for the module's process (direct runs only)."""
        args = dict(args)
        # Every module with a pin_root gets the test's: what a test leaves never reaches the machine's own.
        if pin and module in ("xdp_program", "tc_program", "xdp_facts", "datapath", "devmap_group", "replay"):
            args.setdefault("pin_root", self.pin_root)
        watch = kernel_features.watching()
        if watch:  # a test of a feature this kernel lacks: this run may be the one its refusal is asserted on
            return watch.module_run(lambda: self._run(module, args, check, diff, no_caps, env), module, args, check)
        return self._run(module, args, check, diff, no_caps, env)

    def _run(self, module, args, check, diff, no_caps, env):
        # Root without capabilities: what a task without become looks like to the kernel
        # (a real unprivileged user could not even read a checkout under /root).
        prefix = ["setpriv", "--bounding-set=-all", "--inh-caps=-all"] if no_caps else []
        if not self.via_ansible:
            payload = dict(args, _ansible_check_mode=check, _ansible_diff=diff,
                           _ansible_module_name="ebpf.xdp." + module)
            # The arguments on stdin: an argument longer than a file name fails ansible-core's is-it-a-file test.
            argv = [self.python, "-m", "ansible_collections.ebpf.xdp.plugins.modules." + module]
            pythonpath = ":".join(filter(None, (module_path(), os.environ.get("PYTHONPATH"))))
            stdin = json.dumps({"ANSIBLE_MODULE_ARGS": payload})
            env = dict(os.environ, PYTHONPATH=pythonpath, **(env or {}))
            if (self.start or MODULE_START[0]) == "fork" and not prefix:
                return module_result(_forked_run(self.python, argv, stdin, env))
            proc = subprocess.run(prefix + argv, input=stdin, capture_output=True, text=True, cwd="/tmp",
                                  check=False, env=env)
            return module_result(proc)
        assert not env, "env is for direct runs"
        argv = ansible_cli("ansible") + ["localhost", "-c", "local", "-i", "localhost,",
                                         "-e", "ansible_python_interpreter=%s" % self.python,
                                         "-m", "ebpf.xdp.%s" % module, "-a", json.dumps(args)]
        if check:
            argv.append("--check")
        if diff:
            argv.append("--diff")
        proc = subprocess.run(prefix + argv, capture_output=True, text=True, env=ansible_env(), cwd="/tmp", check=False)
        try:
            out = json.loads(proc.stdout)
        except ValueError:
            raise AssertionError("ansible printed no JSON:\n%s\n%s" % (proc.stdout, proc.stderr))
        return out["plays"][0]["tasks"][0]["hosts"]["localhost"]


@pytest.fixture(scope="session")
def module_start_seconds():
    """How long a module run takes here before it does anything (Python, ansible-core and the collection
    imported, bad input refused): well under a second on this machine, tens of seconds in the lab's VM under
    software emulation on a loaded host. A test's deadline for a module to get going adds three times this, so
    that it bounds what the module does rather than how fast the machine starts Python."""
    started = time.monotonic()
    res = ModuleRunner(SYSTEM_PYTHON, None)("xdp_facts", {"netns": "ebpf-xdp-no-such-ns"}, pin=False)
    assert res.get("failed"), res
    return time.monotonic() - started


@pytest.fixture(params=PYTHONS)
def python(request):
    return request.param


@pytest.fixture
def pin_root():
    path = "%s/%s" % (PIN_ROOT_BASE, uuid.uuid4().hex[:8])
    yield path
    shutil.rmtree(path, ignore_errors=True)
    try:
        os.rmdir(PIN_ROOT_BASE)  # only when no other test's pins are left
    except OSError:
        pass


@pytest.fixture
def run(python, pin_root):
    return ModuleRunner(python, pin_root)


@pytest.fixture
def run_distro(pin_root):
    return ModuleRunner(SYSTEM_PYTHON, pin_root)


XDP_MODES = {1: "native", 2: "generic", 3: "offload"}


def xdp_attached(ns, dev="eth0"):
    """The XDP programs on dev by mode ({"native": id}), parsed from `ip -d -j link show`: an id compared
    whole, never found as a substring of a line (id 12 is in "id 123")."""
    out = json.loads(sh("ip", "-n", ns, "-d", "-j", "link", "show", "dev", dev).stdout)
    xdp = out[0].get("xdp") or {}
    attached = xdp.get("attached") or ([xdp] if xdp.get("prog") else [])
    return {XDP_MODES.get(a["mode"], a["mode"]): a["prog"]["id"] for a in attached if a.get("prog")}


class Pair(object):
    """Two namespaces joined by a veth: tx/eth0 <-> rx/eth0, no IPv6, no ARP. With queues > 1, each end has that
    many transmit and receive queues (senders on different CPUs then share no ring of the peer)."""

    def __init__(self, queues=1):
        self.queues = queues
        tag = uuid.uuid4().hex[:6]
        self.tx, self.rx = "xt%s-tx" % tag, "xt%s-rx" % tag
        self.tx_mac, self.rx_mac = "02:00:00:aa:00:01", "02:00:00:aa:00:02"
        self.tx_ip, self.rx_ip = "10.99.0.1", "10.99.0.2"

    def up(self):
        for ns in (self.tx, self.rx):
            sh("ip", "netns", "add", ns)
        queues = ["numtxqueues", str(self.queues), "numrxqueues", str(self.queues)] if self.queues > 1 else []
        sh("ip", "link", "add", "eth0", "netns", self.tx, "address", self.tx_mac, *queues, "type", "veth",
           "peer", "name", "eth0", "netns", self.rx, "address", self.rx_mac, *queues)
        for ns, ip in ((self.tx, self.tx_ip), (self.rx, self.rx_ip)):
            sh("ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1")
            sh("ip", "-n", ns, "addr", "add", ip + "/24", "dev", "eth0")
            sh("ip", "-n", ns, "link", "set", "eth0", "up")
            sh("ip", "-n", ns, "link", "set", "lo", "up")

    def down(self):
        for ns in (self.tx, self.rx):
            sh("ip", "netns", "del", ns, check=False)

    def xdp_line(self, ns=None):
        """What `ip link` shows of the XDP program on eth0 (the witness)."""
        out = sh("ip", "-n", ns or self.rx, "-d", "link", "show", "eth0").stdout
        return " ".join(line.strip() for line in out.splitlines() if "prog/xdp" in line)

    def xdp_prog_id(self, ns=None, dev="eth0"):
        """The id of the one XDP program on dev (None without one), read exactly (see xdp_attached)."""
        ids = list(xdp_attached(ns or self.rx, dev).values())
        assert len(ids) <= 1, ids
        return ids[0] if ids else None

    def ip_in_receives(self):
        """IP datagrams the receiver's stack has seen (Ip: InReceives)."""
        lines = sh("ip", "netns", "exec", self.rx, "cat", "/proc/net/snmp").stdout.splitlines()
        names, values = [line.split() for line in lines if line.startswith("Ip:")][:2]
        return int(values[names.index("InReceives")])

    def burst(self, run, count=50, protocols=("udp", "tcp")):
        res = run("xdp_trafficgen", dict(interface="eth0", netns=self.tx, src_ip=self.tx_ip, dst_ip=self.rx_ip,
                                         dst_mac=self.rx_mac, protocols=list(protocols), count=count))
        assert not res.get("failed"), res
        return res


@pytest.fixture
def pair():
    p = Pair()
    p.up()
    yield p
    p.down()


class Chain:
    """tx/eth0 <-> rt/eth0, rt/eth1 <-> rx/eth0: a router namespace between a sender and a receiver."""

    def __init__(self):
        self.pair = Pair()  # tx <-> rx names, MACs and addresses, reused for the two links
        self.tx, self.rt, self.rx = self.pair.tx, self.pair.tx.replace("-tx", "-rt"), self.pair.rx

    def up(self):
        for ns in (self.tx, self.rt, self.rx):
            sh("ip", "netns", "add", ns)
            sh("ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1")
        sh("ip", "link", "add", "eth0", "netns", self.tx, "address", self.pair.tx_mac, "type", "veth",
           "peer", "name", "eth0", "netns", self.rt)
        sh("ip", "link", "add", "eth1", "netns", self.rt, "type", "veth",
           "peer", "name", "eth0", "netns", self.rx, "address", self.pair.rx_mac)
        for ns, dev in ((self.tx, "eth0"), (self.rt, "eth0"), (self.rt, "eth1"), (self.rx, "eth0")):
            sh("ip", "-n", ns, "link", "set", dev, "up")

    def down(self):
        for ns in (self.tx, self.rt, self.rx):
            sh("ip", "netns", "del", ns, check=False)


@pytest.fixture
def chain():
    c = Chain()
    c.up()
    yield c
    c.down()


def compile_bpf(src, out, include_dirs=()):
    """Compile with clang directly, with the collection's own flags (not through the module)."""
    sh(*_compile.compile_argv("clang", str(src), str(out), [str(d) for d in include_dirs]))
    return str(out)


@pytest.fixture(scope="session")
def drop_obj(tmp_path_factory):
    """xdp_drop_count compiled once for the session."""
    return compile_bpf(os.path.join(BPF_DIR, "xdp_drop_count.bpf.c"),
                       tmp_path_factory.mktemp("obj") / "xdp_drop_count.o", [os.path.join(BPF_DIR, "include")])


@pytest.fixture(scope="session")
def tc_obj(tmp_path_factory):
    """files/bpf/tc_redirect.bpf.c (tc_drop_count and the redirect programs) compiled once for the session."""
    return compile_bpf(os.path.join(BPF_DIR, "tc_redirect.bpf.c"),
                       tmp_path_factory.mktemp("obj") / "tc_redirect.o", [os.path.join(BPF_DIR, "include")])


def assert_rhythm(run, module, args):
    """check -> run -> check -> run: changed, changed, not changed, not changed."""
    first_check = run(module, args, check=True)
    assert first_check.get("changed") is True and not first_check.get("failed"), first_check
    first = run(module, args)
    assert first.get("changed") is True and not first.get("failed"), first
    second_check = run(module, args, check=True)
    assert second_check.get("changed") is False and not second_check.get("failed"), second_check
    second = run(module, args)
    assert second.get("changed") is False and not second.get("failed"), second
    return first, second
