"""The kernel feature table: what the running kernel can do, probed once per test session.

The probes are witnesses independent of the collection's own code (kernel
version, iproute2, /proc, modprobe), so a wrong probe in a module shows up
as a failing test rather than agreeing with itself. A feature a module can
load counts as present (`modprobe --dry-run` finds it): the kernel loads
act_bpf on request, and the pktgen module loads pktgen itself.

A test that depends on a feature carries `@pytest.mark.kernel("name")`
(or parameters so marked, see `needs`). Where the feature is absent, that
test runs watched (Watch, below): its own first call that needs the feature
must be refused with the collection's words (REFUSED_WITH), changing
nothing; it ends there and is counted as a refusal asserted, listed at the
end of the run. A test that asserts both cases itself, reading the table,
carries `@pytest.mark.kernel_either("name")`: make test-vm runs it on
Debian 12's kernel too. Nothing here skips.
"""

import ctypes
import glob
import os
import platform
import re
import shutil
import struct
import subprocess
import uuid

import pytest


def kernel_version(release=None):
    """(major, minor) of a release string such as 6.18.44-fc-v1045 or 6.1.0-28-amd64."""
    found = re.match(r"(\d+)\.(\d+)", release or platform.release())
    return int(found.group(1)), int(found.group(2))


def _at_least(major, minor):
    return lambda: kernel_version() >= (major, minor)


def _modprobe_finds(name):
    """Whether modprobe could load name (built in, or a module on disk)."""
    modprobe = shutil.which("modprobe") or ("/usr/sbin/modprobe" if os.path.exists("/usr/sbin/modprobe") else None)
    if not modprobe:
        return False
    return subprocess.run([modprobe, "--dry-run", "--quiet", name], capture_output=True, check=False).returncode == 0


def _pktgen():
    return os.path.isdir("/proc/net/pktgen") or _modprobe_finds("pktgen")


def _act_bpf():
    """tc itself adds a classic-BPF act_bpf action in a throwaway namespace (the kernel loads the module on
    request, so a loadable act_bpf counts)."""
    ns = "kf%s" % uuid.uuid4().hex[:8]
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        return subprocess.run(["ip", "netns", "exec", ns, "tc", "actions", "add", "action", "bpf",
                               "bytecode", "1,6 0 0 0"], capture_output=True, check=False).returncode == 0
    finally:
        subprocess.run(["ip", "netns", "del", ns], check=False)


def xdp_tools_object(name):
    """One of the XDP programs Debian's libxdp1 ships (xdp-filter's), as a file xdp-loader loads."""
    found = sorted(glob.glob("/usr/lib/*/bpf/%s.o" % name))
    assert found, "%s.o of libxdp1 is not installed (scripts/setup.sh installs it)" % name
    return found[0]


# xdp-loader refuses to run while another xdp-loader runs ("Unable to read PID from lockfile"): test workers
# take turns through this lock.
XDP_LOADER_LOCK = "/run/ebpf-xdp-tests.xdp-loader.lock"


def xdp_loader(ns, *args):
    """xdp-loader's command line in namespace ns. Through nsenter, not `ip netns exec`: that one mounts a sysfs
    of its own over /sys, which hides bpffs at /sys/fs/bpf, and libxdp then falls back to one program alone."""
    return ["flock", XDP_LOADER_LOCK, "nsenter", "--net=/run/netns/%s" % ns, "xdp-loader"] + list(args)


def _xdp_dispatcher():
    """xdp-loader (xdp-tools) loads a program through libxdp's dispatcher, on lo of a throwaway namespace: where
    the kernel refuses the dispatcher's freplace programs, it falls back to the program alone."""
    ns = "kf%s" % uuid.uuid4().hex[:8]
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        subprocess.run(["ip", "-n", ns, "link", "set", "lo", "up"], check=True)
        subprocess.run(xdp_loader(ns, "load", "-m", "skb", "lo", xdp_tools_object("xdpfilt_alw_all")),
                       capture_output=True, check=True)
        status = subprocess.run(xdp_loader(ns, "status", "lo"), capture_output=True, text=True, check=True).stdout
        # Unloaded through libxdp, which removes the dispatcher's pins (deleting the namespace would leave them).
        subprocess.run(xdp_loader(ns, "unload", "--all", "lo"), capture_output=True, check=True)
        return "xdp_dispatcher" in status
    finally:
        subprocess.run(["ip", "netns", "del", ns], check=False)


def _xdp_live_frames():
    """One live-frames test run (BPF_F_TEST_XDP_LIVE_FRAMES) of a two-instruction XDP program that drops its
    frame, through the bpf() syscall itself (not the collection's libbpf binding): the release alone cannot tell,
    a 6.18 host was seen refusing every such run with EPERM."""
    libc = ctypes.CDLL(None, use_errno=True)
    sys_bpf = {"x86_64": 321, "aarch64": 280}[platform.machine()]
    prog_load, prog_test_run, xdp_type, xdp_drop, live_frames = 5, 10, 6, 1, 2
    code = ctypes.create_string_buffer(struct.pack("=BBhiBBhi", 0xb7, 0, 0, xdp_drop, 0x95, 0, 0, 0))
    license_ = ctypes.create_string_buffer(b"GPL")
    attr = ctypes.create_string_buffer(struct.pack("=IIQQ", xdp_type, 2, ctypes.addressof(code),
                                                   ctypes.addressof(license_)), 128)
    fd = libc.syscall(sys_bpf, prog_load, attr, len(attr))
    assert fd >= 0, "the live-frames probe could not load its program: %s" % os.strerror(ctypes.get_errno())
    try:
        frame = ctypes.create_string_buffer(60)
        # struct bpf_attr's test: prog_fd, retval, data_size_in, data_size_out, data_in, data_out, repeat,
        # duration, ctx_size_in, ctx_size_out, ctx_in, ctx_out, flags, cpu, batch_size.
        test = struct.pack("=IIIIQQIIIIQQIII", fd, 0, len(frame), 0, ctypes.addressof(frame), 0, 1, 0, 0, 0, 0, 0,
                           live_frames, 0, 1)
        attr = ctypes.create_string_buffer(test, 128)
        return libc.syscall(sys_bpf, prog_test_run, attr, len(attr)) == 0
    finally:
        os.close(fd)


def _bcc():
    """bcc's Python binding in the system Python, and kernel headers somewhere bcc or the tests find them."""
    binding = subprocess.run(["/usr/bin/python3", "-c", "import bcc"], capture_output=True, check=False)
    headers = os.path.isdir("/lib/modules/%s/build" % platform.release()) or any(
        name.startswith("linux-headers-") for name in os.listdir("/usr/src") if os.path.isdir("/usr/src"))
    return binding.returncode == 0 and headers


def _native_cpu():
    """Not QEMU's software emulation (TCG), which names itself in the CPU's model name: the lab's VM here."""
    with open("/proc/cpuinfo") as handle:
        models = [line for line in handle if line.startswith("model name")]
    return not any("TCG" in line for line in models)


# name -> (what it is, the probe). Kernel versions are the first upstream release with the feature.
PROBES = {
    "tcx": ("tcx links at tc ingress/egress (Linux 6.6)", _at_least(6, 6)),
    "act_bpf": ("the act_bpf tc action (CONFIG_NET_ACT_BPF, built in or loadable)", _act_bpf),
    "pktgen": ("the kernel's pktgen (/proc/net/pktgen, or pktgen.ko loadable)", _pktgen),
    "xdp_live_frames": ("BPF_PROG_TEST_RUN with BPF_F_TEST_XDP_LIVE_FRAMES (Linux 5.18), as one such run finds it",
                        _xdp_live_frames),
    "devmap_egress_prog": ("programs on devmap entries (Linux 5.8)", _at_least(5, 8)),
    "xdp_features": ("xdp_features through the netdev genetlink family (Linux 6.3)", _at_least(6, 3)),
    "xdp_veth": ("native and generic XDP on veth (Linux 4.19)", _at_least(4, 19)),
    "xdp_dispatcher": ("libxdp's multiprog dispatcher (freplace programs), as xdp-loader finds it", _xdp_dispatcher),
    # Not a feature upstream added on a day: 6.1 was seen giving every generic-mode broadcast copy the last devmap
    # egress program's writes (one shared buffer), 6.18 each its own; the releases between were not seen.
    "generic_egress_copy": ("generic-mode broadcast copies each with its own devmap egress program's writes "
                            "(seen on 6.18, not on 6.1)", _at_least(6, 18)),
    "bcc": ("bcc's Python binding and kernel headers", _bcc),
    "two_cpus": ("at least two online CPUs (hardware, not a kernel feature)", lambda: (os.cpu_count() or 1) >= 2),
    "native_cpu": ("a CPU that runs code natively, not under software emulation (hardware, not a kernel feature)",
                   _native_cpu),
}


class Features(dict):
    """{feature: present} with the release it was read on."""

    def __init__(self):
        super().__init__((name, bool(probe())) for name, (_what, probe) in PROBES.items())
        self.release = platform.release()

    def table(self):
        lines = ["kernel feature table (%s):" % self.release]
        for name, (what, _probe) in PROBES.items():
            lines.append("  %-20s %-7s %s" % (name, "yes" if self[name] else "no", what))
        return lines


_FEATURES = []


def features():
    """The session's table, probed on first use."""
    if not _FEATURES:
        _FEATURES.append(Features())
    return _FEATURES[0]


def needs(feature, *values):
    """Parameter values that need a kernel feature: pytest.param(*values, marks=kernel(feature))."""
    return pytest.param(*values, marks=pytest.mark.kernel(feature))


# ------------------------------------------------------------------ refusals
# Where a feature is absent, a test that needs it runs all the same, watched (conftest's pytest_pyfunc_call):
# its own first call that needs the feature must come back refused, with the collection's words for that
# feature, and change nothing; the test ends there and is counted as a refusal asserted, not as a pass. A
# call that needed the feature and was not refused so fails the test, and so does a test that ran to its end
# without any call refused: its marker claims a feature it never used.

# feature -> the words of the collection's refusal (a module's failed result, or the error the collection's
# code raises in a test's own process); any one of them.
REFUSED_WITH = {
    "tcx": ("needs tcx links, which Linux has from 6.6",
            "among the programs of the tcx hook, which Linux has from 6.6"),
    "act_bpf": ("no act_bpf (CONFIG_NET_ACT_BPF)",),
    "pktgen": ("has no pktgen",),
    "xdp_dispatcher": ("needs libxdp's dispatcher, which cannot work here: this kernel refuses freplace "
                       "(BPF_PROG_TYPE_EXT)",),
    "generic_egress_copy": ("a devmap egress program cannot give each copy of a frame that a generic-mode XDP "
                            "program broadcasts its own changes",),
    "xdp_live_frames": ("this kernel refuses live-frames test runs (BPF_F_TEST_XDP_LIVE_FRAMES)",),
}
# What the kernel itself answers where a test's own setup asks it directly (the libbpf binding in the test's
# process, or tc as a witness), with no module between them to word it: tcx links are an attach type 6.1 does
# not know, and tc cannot load an act_bpf action.
KERNEL_REFUSED_WITH = {
    "tcx": re.compile(r"(attach tcx_\w+ link to|query tcx_\w+ hook of) ifindex \d+: .*\(errno 22 EINVAL\)"),
    "act_bpf": re.compile(r"Error: Failed to load TC action module"),
    "xdp_live_frames": re.compile(r"test-run program \w+: [^(]*\(errno \d+ E[A-Z]+\)"),
}


def _present(args):
    return args.get("state", "present") == "present"


def _tc_entries(module, args):
    """The tc attachments a run asks for, present: tc_program's own arguments, or datapath's config.tc."""
    if module == "tc_program":
        return [args] if _present(args) else []
    if module == "datapath" and args.get("state", "merged") not in ("deleted", "gathered"):
        return (args.get("config") or {}).get("tc") or []
    return []


def _xdp_entries(module, args):
    if module == "xdp_program":
        return [args] if _present(args) else []
    if module == "datapath" and args.get("state", "merged") not in ("deleted", "gathered"):
        return (args.get("config") or {}).get("xdp") or []
    return []


# feature -> whether a module run (module, its arguments) needs it: the options that ask for it.
NEEDED_BY = {
    "tcx": lambda module, args: any(e.get("method") == "tcx" or e.get("before") or e.get("after")
                                    for e in _tc_entries(module, args)),
    "act_bpf": lambda module, args: any(e.get("method") == "act_bpf" for e in _tc_entries(module, args)),
    "pktgen": lambda module, args: module == "pktgen",
    "xdp_dispatcher": lambda module, args: any(e.get("name") for e in _xdp_entries(module, args)),
    # A group given an egress program (a test marked with it has generic-mode ports in the group's map set).
    "xdp_live_frames": lambda module, args: module == "xdp_trafficgen" and args.get("engine") == "xdp",
    "generic_egress_copy": lambda module, args: module == "devmap_group" and any(
        (args.get("egress_program") or {}).values()),
}


# What a machine may lack without a kernel to refuse it: a test that needs it is the one allowed skip.
HARDWARE = {"two_cpus", "native_cpu"}
# What upstream kernels have had since before Debian 12's 6.1, and a host may still refuse by its own policy
# (this machine's 6.18 answers EPERM to every live-frames run): make test-vm's subset takes no test for them, as
# the VM's kernel does not differ there; make test-debian12 runs those tests in the VM all the same.
HOST_POLICY = {"xdp_live_frames"}


class RefusalAsserted(BaseException):
    """A watched test's own call was refused as the collection words it, and changed nothing: the test ends
    there (a BaseException, so that no `except Exception` of a test swallows it; its finally blocks and
    fixtures still clean up)."""


# The kernel modules a call of the collection can have loaded on request (tc's classifiers, actions and clsact,
# pktgen): a refused call must not have loaded them. Others are left out: the other worker's tests load modules
# of their own meanwhile (iproute2's tc loads af_alg and algif_hash to hash an object).
MODULES_ON_REQUEST = ("act_bpf", "cls_bpf", "cls_u32", "sch_ingress", "pktgen")


def _host(module, args):
    """What a refused call must leave as it found it: the programs and qdiscs of the namespaces it names, the
    pins under its pin_root, the kernel modules a call loads on request (MODULES_ON_REQUEST). pktgen only for the
    pktgen module, the one that loads it: the other worker's pktgen tests load it meanwhile."""
    on_request = [m for m in MODULES_ON_REQUEST if m != "pktgen" or module == "pktgen"]
    import pin_snapshot
    namespaces = {args.get("netns")} | {e.get("netns") for e in _tc_entries(module, args) + _xdp_entries(module, args)}
    namespaces |= set(args.get("namespaces") or ())
    namespaces = sorted(ns for ns in namespaces if ns)
    pin_root = args.get("pin_root")
    return {"programs": {ns: pin_snapshot.programs(ns) for ns in namespaces},
            "qdiscs": {ns: pin_snapshot.qdiscs(ns) for ns in namespaces},
            "pins": pin_snapshot.tree(pin_root, pinned=True) if pin_root else None,
            "modules": [m for m in pin_snapshot.kernel_modules() or () if m in on_request],
            "pktgen": os.path.isdir("/proc/net/pktgen") if module == "pktgen" else None}


class Watch(object):
    """One test run on a kernel without some of the features it is marked with (conftest: pytest_pyfunc_call,
    ModuleRunner, ansible_playbook). Nothing is cached across tests: each asserts its own call's refusal."""

    def __init__(self, absent):
        self.absent = list(absent)
        self.said = None  # (feature, what was refused, in words) once a call was

    def words(self, text):
        """The absent feature whose refusal text carries, and the words found; (None, None) if none."""
        for feature in self.absent:
            for words in REFUSED_WITH.get(feature, ()):
                if words in text:
                    return feature, words
        return None, None

    def kernel_words(self, text):
        for feature in self.absent:
            pattern = KERNEL_REFUSED_WITH.get(feature)
            found = pattern.search(text) if pattern else None
            if found:
                return feature, found.group(0)
        return None, None

    def refused(self, feature, what):
        self.said = (feature, what)
        raise RefusalAsserted(what)

    def module_run(self, run, module, args, check):
        """run() (one module run) watched: a refusal ends the test, a run that needed an absent feature and
        was not refused with its words fails it."""
        needs = [feature for feature in self.absent if feature in NEEDED_BY and NEEDED_BY[feature](module, args)]
        before = _host(module, args)
        res = run()
        feature, words = self.words(str(res.get("msg", ""))) if res.get("failed") else (None, None)
        how = "%s%s" % (module, " (check mode)" if check else "")
        if feature:
            after = _host(module, args)
            if after != before:
                pytest.fail("%s was refused for %s (%r) but changed the host: before %s, after %s"
                            % (how, feature, words, before, after), pytrace=False)
            self.refused(feature, "%s refused: %r, nothing changed" % (how, words))
        if needs:
            pytest.fail("this kernel has no %s, so %s with %s should have been refused with %s; it returned %s"
                        % (", ".join(needs), how, _options(args), " or ".join(
                            repr(w) for f in needs for w in REFUSED_WITH.get(f, ())), _brief(res)), pytrace=False)
        return res

    def playbook_run(self, out):
        """An ansible-playbook run watched: a task failed with the refusal's words ends the test there."""
        for play in out.get("plays", ()):
            for task in play["tasks"]:
                for host, result in task["hosts"].items():
                    feature, words = self.words(str(result.get("msg", ""))) if result.get("failed") else (None, None)
                    if feature:
                        self.refused(feature, "task %r on %s refused: %r" % (task["task"]["name"], host, words))

    def raised(self, exc):
        """An error the test's own process raised (a test that uses the collection's code or the binding
        directly): the refusal if it is the collection's, or the kernel's through the binding."""
        if isinstance(exc, AssertionError):
            return
        text = "%s\n%s" % (exc, getattr(exc, "stderr", None) or "")  # a command's own words (CalledProcessError)
        feature, words = self.words(text)
        if feature:
            self.refused(feature, "%s refused in this process: %r" % (type(exc).__name__, words))
        feature, words = self.kernel_words(text)
        if feature:
            self.refused(feature, "%s: the kernel refused %r" % (type(exc).__name__, words))


def _options(args):
    """The options that say what a run asked for, for a failure's message."""
    return {k: v for k, v in args.items() if k in ("method", "name", "before", "after", "interface", "state",
                                                   "config")}


def _brief(res):
    return {k: res[k] for k in ("failed", "changed", "msg") if k in res}


_WATCH = []


def watching():
    """The running test's Watch, or None (the kernel has what the test needs)."""
    return _WATCH[0] if _WATCH else None


def start_watch(absent):
    del _WATCH[:]
    _WATCH.append(Watch(absent))
    return _WATCH[0]


def end_watch():
    del _WATCH[:]


def asserted(feature, what):
    """A test that asserts a refusal with its own words (a driver below the modules, say) ends there, counted as
    that refusal, when it runs watched on a kernel without feature; elsewhere (kernel_either) it goes on."""
    watch = watching()
    if watch and feature in watch.absent:
        watch.refused(feature, what)


def hardware_lacking(features_of_test):
    """The hardware a test needs and this machine lacks (the one allowed skip)."""
    return [f for f in features_of_test if f in HARDWARE and not features()[f]]
