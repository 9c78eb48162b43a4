"""The kernel feature table: what the running kernel can do, probed once per test session.

The probes are witnesses independent of the collection's own code (kernel
version, iproute2, /proc, modprobe), so a wrong probe in a module shows up
as a failing test rather than agreeing with itself. A feature a module can
load counts as present (`modprobe --dry-run` finds it): the kernel loads
act_bpf on request, and the pktgen module loads pktgen itself.

A test that depends on a feature carries `@pytest.mark.kernel("name")`
(or parameters so marked, see `needs`). Where the feature is absent, that
test's body is not run: conftest runs the feature's refusal check instead
(the collection's documented clear error, nothing changed) and lists it at
the end of the run. A test that asserts both cases itself, reading the table,
carries `@pytest.mark.kernel_either("name")`: make test-vm runs it on
Debian 12's kernel too. Nothing here skips.
"""

import glob
import os
import platform
import re
import shutil
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


def _bcc():
    """bcc's Python binding in the system Python, and kernel headers somewhere bcc or the tests find them."""
    binding = subprocess.run(["/usr/bin/python3", "-c", "import bcc"], capture_output=True, check=False)
    headers = os.path.isdir("/lib/modules/%s/build" % platform.release()) or any(
        name.startswith("linux-headers-") for name in os.listdir("/usr/src") if os.path.isdir("/usr/src"))
    return binding.returncode == 0 and headers


# name -> (what it is, the probe). Kernel versions are the first upstream release with the feature.
PROBES = {
    "tcx": ("tcx links at tc ingress/egress (Linux 6.6)", _at_least(6, 6)),
    "act_bpf": ("the act_bpf tc action (CONFIG_NET_ACT_BPF, built in or loadable)", _act_bpf),
    "pktgen": ("the kernel's pktgen (/proc/net/pktgen, or pktgen.ko loadable)", _pktgen),
    "xdp_live_frames": ("BPF_PROG_TEST_RUN with BPF_F_TEST_XDP_LIVE_FRAMES (Linux 5.18)", _at_least(5, 18)),
    "devmap_egress_prog": ("programs on devmap entries (Linux 5.8)", _at_least(5, 8)),
    "xdp_features": ("xdp_features through the netdev genetlink family (Linux 6.3)", _at_least(6, 3)),
    "xdp_veth": ("native and generic XDP on veth (Linux 4.19)", _at_least(4, 19)),
    "xdp_dispatcher": ("libxdp's multiprog dispatcher (freplace programs), as xdp-loader finds it", _xdp_dispatcher),
    "bcc": ("bcc's Python binding and kernel headers", _bcc),
    "two_cpus": ("at least two online CPUs (hardware, not a kernel feature)", lambda: (os.cpu_count() or 1) >= 2),
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
# What the collection says where a feature is absent: each check runs the module the way a user would, on a
# fresh veth pair, and asserts the clear error and that nothing was left behind.


def _tc_refusal(method, words, tmp_path):
    from conftest import BPF_DIR, PIN_ROOT_BASE, ModuleRunner, Pair, SYSTEM_PYTHON, VENV_PYTHON, compile_bpf, sh
    obj = compile_bpf(os.path.join(BPF_DIR, "tc_redirect.bpf.c"), tmp_path / "tc_redirect.o",
                      [os.path.join(BPF_DIR, "include")])
    pin_root = "%s/%s" % (PIN_ROOT_BASE, uuid.uuid4().hex[:8])
    pair = Pair()
    pair.up()
    try:
        for python in (SYSTEM_PYTHON, VENV_PYTHON):
            run = ModuleRunner(python, pin_root)
            for check in (True, False):
                res = run("tc_program", dict(interface="eth0", netns=pair.rx, object=obj, program="tc_drop_count",
                                             method=method), check=check)
                assert res.get("failed") and words in res["msg"], (method, check, res)
            assert sh("tc", "-n", pair.rx, "qdisc", "show", "dev", "eth0", "clsact").stdout.strip() == ""
            assert not os.path.exists(pin_root) or not any(os.scandir(pin_root)), "pins left"
    finally:
        pair.down()
        shutil.rmtree(pin_root, ignore_errors=True)
    return "tc_program method %s: %r" % (method, words)


def _pktgen_refusal(tmp_path):
    from conftest import ModuleRunner, SYSTEM_PYTHON, VENV_PYTHON
    args = {"interface": "lo", "dst_ip": "127.0.0.1", "dst_mac": "00:00:00:00:00:01", "count": 10}
    for python in (SYSTEM_PYTHON, VENV_PYTHON):
        for check in (False, True):
            res = ModuleRunner(python, str(tmp_path))("pktgen", args, check=check)
            assert res.get("failed") and "has no pktgen" in res["msg"] and "/proc/net/pktgen" in res["msg"], res
            assert ("`modprobe --dry-run pktgen` failed" if check else "`modprobe pktgen` failed") in res["msg"], res
    assert not os.path.isdir("/proc/net/pktgen"), "the refusal loaded pktgen"
    return "pktgen: 'has no pktgen' (check mode and run)"


def _dispatcher_refusal(tmp_path):
    from conftest import BPF_DIR, PIN_ROOT_BASE, ModuleRunner, Pair, SYSTEM_PYTHON, VENV_PYTHON, compile_bpf, sh
    obj = compile_bpf(os.path.join(BPF_DIR, "xdp_drop_count.bpf.c"), tmp_path / "xdp_drop_count.o",
                      [os.path.join(BPF_DIR, "include")])
    pin_root = "%s/%s" % (PIN_ROOT_BASE, uuid.uuid4().hex[:8])
    pair = Pair()
    pair.up()
    words = "needs libxdp's dispatcher, which cannot work here: this kernel refuses freplace (BPF_PROG_TYPE_EXT)"
    try:
        for python in (SYSTEM_PYTHON, VENV_PYTHON):
            run = ModuleRunner(python, pin_root)
            for check in (True, False):
                res = run("xdp_program", dict(interface="eth0", netns=pair.rx, object=obj, name="counter",
                                              priority=10), check=check)
                assert res.get("failed") and words in res["msg"] and "Nothing was changed" in res["msg"], res
            assert "prog/xdp" not in sh("ip", "-n", pair.rx, "-d", "link", "show", "eth0").stdout
            assert not os.path.exists(pin_root) or not any(os.scandir(pin_root)), "pins left"
    finally:
        pair.down()
        shutil.rmtree(pin_root, ignore_errors=True)
    return "xdp_program name: %r" % words


REFUSALS = {
    "xdp_dispatcher": _dispatcher_refusal,
    "tcx": lambda tmp_path: _tc_refusal("tcx", "needs tcx links, which Linux has from 6.6", tmp_path),
    "act_bpf": lambda tmp_path: _tc_refusal("act_bpf", "no act_bpf (CONFIG_NET_ACT_BPF)", tmp_path),
    "pktgen": _pktgen_refusal,
}


# What a machine may lack without a kernel to refuse it: a test that needs it is the one allowed skip.
HARDWARE = {"two_cpus"}

_REFUSED = {}


def refuse_instead(feature, tmp_path):
    """Run feature's refusal check, once per session (a test that needs an absent feature); what it asserted,
    in words. Hardware (a second CPU) is the one allowed skip; a kernel feature without a refusal check fails
    the test, so that none skips quietly."""
    if feature in HARDWARE:
        pytest.skip("this machine has no %s: %s" % (feature, PROBES[feature][0]))
    if feature not in REFUSALS:
        pytest.fail("the kernel lacks %s (%s) and kernel_features.REFUSALS has no refusal check for it: a test "
                    "that needs it must assert the collection's clear error where it is absent"
                    % (feature, PROBES[feature][0]), pytrace=False)
    if feature not in _REFUSED:
        _REFUSED[feature] = REFUSALS[feature](tmp_path)
    return _REFUSED[feature]
