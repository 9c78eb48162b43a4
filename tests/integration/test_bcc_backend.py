"""backend: bcc — bcc-dialect sources compiled on the host, through the same attach core as libbpf objects.

Real kernel, real veth, real frames. bcc compiles against kernel headers:
this kernel has no headers package, so the tests point kernel_headers at
Debian's linux-headers-*-cloud-amd64 (installed by scripts/setup.sh), as a
host in the same situation would.
"""

import glob
import json
import os
import shutil
import subprocess

import pytest

from conftest import BPF_DIR, ROOT, SYSTEM_PYTHON, VENV_PYTHON, ModuleRunner, ansible_cli, assert_rhythm, sh

BCC_SOURCE = os.path.join(BPF_DIR, "bcc", "xdp_drop_count.c")
HEADERS = sorted(glob.glob("/usr/src/linux-headers-*-cloud-amd64") + glob.glob("/usr/src/linux-headers-*-amd64"))

TC_COUNT = r"""
#include <uapi/linux/bpf.h>
#include <uapi/linux/pkt_cls.h>

BPF_ARRAY(tc_frames, u64, 1);

int tc_count(struct __sk_buff *skb)
{
    tc_frames.increment(0);
    return VERDICT;
}
"""


@pytest.fixture(scope="module", autouse=True)
def bcc_present():
    if sh(SYSTEM_PYTHON, "-c", "import bcc", check=False).returncode or not HEADERS:
        pytest.fail("backend bcc needs python3-bpfcc and linux-headers-cloud-amd64 (scripts/setup.sh installs both)")


@pytest.fixture
def src(tmp_path):
    """The collection's bcc example, copied so a test can edit it."""
    path = tmp_path / "xdp_drop_count.c"
    shutil.copy(BCC_SOURCE, path)
    return path


# Through Ansible: a module re-runs itself under the system Python (the one with bcc) by ansible-core's respawn,
# which needs the AnsiballZ payload a direct run does not have.
@pytest.fixture
def run(python, pin_root):
    return ModuleRunner(python, pin_root, via_ansible=True)


@pytest.fixture
def run_distro(pin_root):
    return ModuleRunner(SYSTEM_PYTHON, pin_root, via_ansible=True)


@pytest.fixture
def run_venv(pin_root):
    """The module under the venv's Python, which has no bcc: it must re-run itself under the system Python."""
    return ModuleRunner(VENV_PYTHON, pin_root, via_ansible=True)


def bcc_args(pair, src, **extra):
    return dict(dict(interface="eth0", netns=pair.rx, backend="bcc", source=str(src), kernel_headers=HEADERS[0],
                     mode="native"), **extra)


def static_neighbour(pair):
    """The receiver answers frames its stack takes (ICMP port unreachable, RST) without an ARP request, whose
    reply would arrive as one more frame than were sent."""
    sh("ip", "-n", pair.rx, "neigh", "replace", pair.tx_ip, "lladdr", pair.tx_mac, "dev", "eth0", "nud", "permanent")


def xdp_witness(pair):
    """The XDP program id on the receiver's eth0 as ip(8) reports it (JSON, compared whole)."""
    link = json.loads(sh("ip", "-n", pair.rx, "-d", "-j", "link", "show", "dev", "eth0").stdout)[0]
    return (link.get("xdp") or {}).get("prog", {}).get("id")


def pins(pin_root):
    return sorted(os.path.join(d, f) for d, _dirs, files in os.walk(pin_root) for f in files)


def xdp_facts(run, pair):
    return run("xdp_facts", dict(netns=pair.rx))["ansible_facts"]["xdp"]["interfaces"]["eth0"]["xdp"]


def test_attach_upgrade_absent_each_with_the_rhythm_and_exact_counts(run_venv, pair, src, pin_root):
    static_neighbour(pair)
    args = bcc_args(pair, src)
    first, second = assert_rhythm(run_venv, "xdp_program", args)
    assert first["attach"] == "link" and first["mode"] == "native" and second["id"] == first["id"], first
    assert first["maps"] == {"proto_count": os.path.join(first["pin_dir"], "maps", "proto_count")}
    assert xdp_witness(pair) == first["id"]
    pair.burst(run_venv, count=30, protocols=("udp", "tcp"))
    prog = xdp_facts(run_venv, pair)
    assert prog["owner"] == "ebpf.xdp" and prog["backend"] == "bcc" and prog["source"] == str(src), prog
    assert prog["protocols"] == {"udp": 30, "tcp": 30}, prog
    assert [m["name"] for m in prog["maps"]] == ["proto_count"]
    assert pair.ip_in_receives() == 0, "XDP_DROP by default"

    # Upgrade by editing the source: count only (XDP_PASS), through the same link; counters carried over.
    src.write_text(src.read_text().replace("#define XDP_ACTION XDP_DROP", "#define XDP_ACTION XDP_PASS"))
    check = run_venv("xdp_program", args, check=True, diff=True)
    assert check["changed"] and check["diff"]["before"]["source_sha256"] != check["diff"]["after"].get(
        "source_sha256"), check
    upgraded = assert_rhythm(run_venv, "xdp_program", args)[0]
    assert upgraded["id"] != first["id"] and upgraded["link_id"] == first["link_id"], upgraded
    assert upgraded["tag"] != first["tag"]
    pair.burst(run_venv, count=20, protocols=("udp",))
    prog = xdp_facts(run_venv, pair)
    assert prog["id"] == upgraded["id"] and prog["protocols"] == {"udp": 50, "tcp": 30}, prog
    assert pair.ip_in_receives() == 20, "the new program passes frames to the stack"

    absent = assert_rhythm(run_venv, "xdp_program", dict(interface="eth0", netns=pair.rx, state="absent"))[0]
    assert absent["attached"] is False and pair.xdp_line() == "" and pins(pin_root) == []


def test_cflags_and_kernel_release_are_the_identity(run_distro, pair, src):
    args = bcc_args(pair, src)
    first = run_distro("xdp_program", args)
    assert first["changed"], first
    record = run_distro("xdp_program", args, check=True, diff=True)["diff"]["before"]
    assert record["kernel_release"] == os.uname().release and record["cflags"] == []
    # A comment changes the digest but not the instructions: the record learns it, the program stays.
    src.write_text(src.read_text() + "\n/* a comment */\n")
    same = run_distro("xdp_program", args)
    assert same["changed"] is False and same["id"] == first["id"], same
    passing = assert_rhythm(run_distro, "xdp_program", dict(args, cflags=["-DXDP_ACTION=2"]))[0]
    assert passing["id"] != first["id"]
    pair.burst(run_distro, count=10, protocols=("udp",))
    assert pair.ip_in_receives() == 10


def test_absent_with_keep_maps_then_attach_again_continues_counting(run_distro, pair, src, pin_root):
    """bcc makes new tables on every load: the kept pin's contents are copied into the new program's table."""
    args = bcc_args(pair, src)
    run_distro("xdp_program", args)
    pair.burst(run_distro, count=5, protocols=("tcp",))
    gone = run_distro("xdp_program", dict(interface="eth0", netns=pair.rx, state="absent", keep_maps=True))
    assert gone["changed"] and [os.path.basename(p) for p in pins(pin_root)] == ["proto_count"], pins(pin_root)
    again = run_distro("xdp_program", args)
    pair.burst(run_distro, count=5, protocols=("tcp",))
    prog = xdp_facts(run_distro, pair)
    assert prog["id"] == again["id"] and prog["protocols"] == {"tcp": 10}, prog


def test_bcc_and_libbpf_programs_side_by_side_in_the_facts(run_distro, pair, src, drop_obj):
    # eth0 of the receiver runs bcc's program, eth0 of the sender the libbpf one.
    bcc = run_distro("xdp_program", bcc_args(pair, src))
    libbpf = run_distro("xdp_program", dict(interface="eth0", netns=pair.tx, object=drop_obj, mode="native",
                                            constants={"xdp_action": 2}))
    assert bcc["changed"] and libbpf["changed"], (bcc, libbpf)
    pair.burst(run_distro, count=12, protocols=("udp", "tcp"))
    rx = xdp_facts(run_distro, pair)
    tx = run_distro("xdp_facts", dict(netns=pair.tx))["ansible_facts"]["xdp"]["interfaces"]["eth0"]["xdp"]
    assert rx["owner"] == tx["owner"] == "ebpf.xdp", (rx, tx)
    assert rx["backend"] == "bcc" and rx["id"] == bcc["id"] and rx["protocols"] == {"udp": 12, "tcp": 12}
    assert tx.get("backend") is None and tx["object"] == drop_obj and tx["id"] == libbpf["id"]
    # The same protocol counters, read the same way, from either front end.
    assert set(rx["counters"]) == set(tx["counters"]) == {"proto_count"}


@pytest.mark.kernel("tcx")
def test_tc_program_with_bcc_attach_upgrade_absent(run_distro, pair, tmp_path, pin_root):
    static_neighbour(pair)
    path = tmp_path / "tc_count.c"
    path.write_text(TC_COUNT)
    args = dict(interface="eth0", netns=pair.rx, backend="bcc", source=str(path), kernel_headers=HEADERS[0],
                method="tcx", cflags=["-DVERDICT=TC_ACT_OK"])
    first = assert_rhythm(run_distro, "tc_program", args)[0]
    assert first["method"] == "tcx" and first["maps"] == {
        "tc_frames": os.path.join(first["pin_dir"], "maps", "tc_frames")}, first
    pair.burst(run_distro, count=15, protocols=("udp",))
    upgraded = assert_rhythm(run_distro, "tc_program", dict(args, cflags=["-DVERDICT=TC_ACT_SHOT"]))[0]
    assert upgraded["id"] != first["id"] and upgraded["link_id"] == first["link_id"], upgraded
    pair.burst(run_distro, count=5, protocols=("udp",))
    facts = run_distro("xdp_facts", dict(netns=pair.rx))["ansible_facts"]["xdp"]["interfaces"]["eth0"]
    prog = facts["tc"]["ingress"][0]
    assert prog["owner"] == "ebpf.xdp" and prog["backend"] == "bcc", prog
    assert prog["counters"] == {"tc_frames": {"0": 20}}, prog
    assert pair.ip_in_receives() == 15, "TC_ACT_SHOT drops the last five"
    gone = assert_rhythm(run_distro, "tc_program", dict(interface="eth0", netns=pair.rx, state="absent"))[0]
    assert gone["attached"] is False and pins(pin_root) == []


# ---------------------------------------------------------------- bad input: a clear error, nothing changed


@pytest.fixture
def attached(run_distro, pair, src, pin_root):
    """A bcc program in place, to show that a failing task leaves it (ids, pins) as it was."""
    res = run_distro("xdp_program", bcc_args(pair, src))
    assert res["changed"], res
    return res


def unchanged(run, pair, pin_root, before, before_pins):
    now = xdp_facts(run, pair)
    assert now["id"] == before["id"] and now["link_id"] == before["link_id"], now
    assert pins(pin_root) == before_pins


def test_a_source_bcc_rejects_shows_the_compiler_message(run_distro, pair, src, pin_root, attached):
    before_pins = pins(pin_root)
    src.write_text(src.read_text().replace("proto_count.increment(key);", "proto_count.increment(key)\n"))
    res = run_distro("xdp_program", bcc_args(pair, src))
    assert res["failed"] and not res["changed"], res
    assert "bcc could not compile" in res["msg"] and "expected ';'" in res["msg"], res["msg"]
    assert any("error" in line for line in res["stderr_lines"]), res
    unchanged(run_distro, pair, pin_root, attached, before_pins)


def test_a_verifier_rejection_shows_the_log_tail(run_distro, pair, src, pin_root, attached):
    before_pins = pins(pin_root)
    # The bounds check removed: the verifier refuses the IPv4 header read.
    src.write_text(src.read_text().replace("if ((void *)(ip + 1) <= data_end)\n\t\t\tkey = ip->protocol;",
                                           "key = ip->protocol;"))
    res = run_distro("xdp_program", bcc_args(pair, src))
    assert res["failed"] and not res["changed"], res
    assert "the kernel rejected program xdp_drop_count" in res["msg"] and "EACCES" in res["msg"], res["msg"]
    assert any("invalid access to packet" in line for line in res["verifier_log_tail"]), res
    unchanged(run_distro, pair, pin_root, attached, before_pins)


def test_no_kernel_headers_names_both_ways_out(run_distro, pair, src, pin_root, attached, tmp_path):
    before_pins = pins(pin_root)
    # A machine without the running kernel's headers (no /lib/modules/RELEASE/build: this one, not the lab's VM,
    # which has its kernel's package) fails the same clear way when kernel_headers is omitted.
    own_headers = os.path.isdir("/lib/modules/%s/build" % os.uname().release)
    for headers in [str(tmp_path / "nowhere")] + ([] if own_headers else [None]):
        args = bcc_args(pair, src, cflags=["-DXDP_ACTION=2"], kernel_headers=headers)
        res = run_distro("xdp_program", args)
        assert res["failed"] and not res["changed"], res
        assert "linux-headers-%s" % os.uname().release in res["msg"] and "kernel_headers" in res["msg"], res["msg"]
        assert "toolchain_bcc" in res["msg"], res["msg"]
    unchanged(run_distro, pair, pin_root, attached, before_pins)


@pytest.mark.controller_in_vm
def test_bcc_absent_says_which_package(pair, src, pin_root, attached, tmp_path, monkeypatch):
    """No interpreter can import bcc: a `bcc` on PYTHONPATH that fails to import, as a host without python3-bpfcc.

    Both the module's own Python and the system Python it would re-run under
    see it, so the respawn finds nothing and the module must say what to install.
    """
    before_pins = pins(pin_root)
    stub = tmp_path / "nobcc" / "bcc"
    stub.mkdir(parents=True)
    (stub / "__init__.py").write_text("raise ImportError('No module named bcc (python3-bpfcc is not installed)')\n")
    # First on the path, before what the tests' own Python needs there (ansible-core, inside the lab's VM).
    pythonpath = os.environ.get("PYTHONPATH")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, (str(stub.parent), pythonpath))))
    for python in (VENV_PYTHON, SYSTEM_PYTHON):
        res = ModuleRunner(python, pin_root, via_ansible=True)("xdp_program", bcc_args(pair, src, cflags=["-DXDP_ACTION=2"]))
        assert res["failed"] and not res["changed"], res
        assert "python3-bpfcc" in res["msg"] and "bcc" in res["msg"], res["msg"]
    monkeypatch.undo()
    unchanged(ModuleRunner(SYSTEM_PYTHON, pin_root, via_ansible=True), pair, pin_root, attached, before_pins)


@pytest.mark.parametrize("extra, words", [
    (dict(object="/tmp/x.o"), "mutually exclusive"),
    (dict(constants={"xdp_action": 2}), "cflags (-DNAME=value)"),
    (dict(backend="libbpf", object="/tmp/x.o", source=None), "kernel_headers only apply to backend: bcc"),
    (dict(source="/nonexistent/x.c"), "bcc source file /nonexistent/x.c does not exist"),
])
def test_bad_options(run_distro, pair, src, pin_root, attached, extra, words):
    before_pins = pins(pin_root)
    args = {k: v for k, v in dict(bcc_args(pair, src), **extra).items() if v is not None}
    res = run_distro("xdp_program", args)
    assert res["failed"] and not res["changed"] and words in res["msg"], res
    unchanged(run_distro, pair, pin_root, attached, before_pins)


# ---------------------------------------------------------------- from inventory, through ebpf.xdp.xdp_deploy


def deploy(tmp_path, pair, pin_root, check=False):
    """ebpf.xdp.xdp_deploy on this machine with the bcc example declared for the receiver's eth0."""
    play = [{"hosts": "localhost", "gather_facts": False, "roles": [{"role": "ebpf.xdp.xdp_deploy"}], "vars": {
        "xdp_deploy_src_dir": str(tmp_path / "src"), "xdp_deploy_object_dir": str(tmp_path / "objects"),
        "xdp_deploy_pin_root": pin_root, "xdp_deploy_objects": [], "xdp_deploy_kernel_headers": HEADERS[0],
        "xdp_deploy_programs": [{"interface": "eth0", "netns": pair.rx, "backend": "bcc", "mode": "native",
                                 "source": "bcc/xdp_drop_count.c", "cflags": ["-DXDP_ACTION=2"]}]}}]
    path = tmp_path / "deploy.yml"
    path.write_text(json.dumps(play))
    env = dict(os.environ, ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json", ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
               ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"),
               ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, ".build", "collections"),
               ANSIBLE_LOCALHOST_WARNING="false", ANSIBLE_INVENTORY_UNPARSED_WARNING="false")
    argv = ansible_cli("ansible-playbook") + ["-c", "local", "-i", "localhost,", "-e",
                                              "ansible_python_interpreter=%s" % SYSTEM_PYTHON, str(path)]
    argv += ["--check"] if check else []
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd="/tmp", check=False)
    out = json.loads(proc.stdout)
    assert proc.returncode == 0, proc.stdout[-4000:]
    # (A meta task the controller answered, such as the role's end, has no host result.)
    by_name = {task["task"]["name"].partition(" : ")[2]: task["hosts"]["localhost"]
               for play_out in out["plays"] for task in play_out["tasks"] if "localhost" in task["hosts"]}
    # bcc programs are the role's per-item tasks; its one datapath task has nothing of them (it ships the sources
    # they compile from).
    converged = by_name["Converge objects, programs and groups"]
    assert {c["section"] for c in converged["changes"]} <= {"sources"}, converged
    if "Attach the XDP programs of backend bcc" in by_name:
        return by_name["Attach the XDP programs of backend bcc"]
    raise AssertionError("no attach task ran:\n%s" % proc.stdout[-3000:])


def test_deployed_from_inventory_by_xdp_deploy(run_distro, pair, pin_root, tmp_path):
    static_neighbour(pair)
    changes = [deploy(tmp_path, pair, pin_root, check=check)["changed"] for check in (True, False, True, False)]
    assert changes == [True, True, False, False], changes
    pair.burst(run_distro, count=8, protocols=("udp",))
    prog = xdp_facts(run_distro, pair)
    assert prog["owner"] == "ebpf.xdp" and prog["backend"] == "bcc" and prog["cflags"] == ["-DXDP_ACTION=2"]
    assert prog["source"] == str(tmp_path / "src" / "bcc" / "xdp_drop_count.c") and prog["protocols"] == {"udp": 8}
    assert pair.ip_in_receives() == 8, "XDP_ACTION=2 passes"
