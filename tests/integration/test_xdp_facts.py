"""ebpf.xdp.xdp_facts: programs, maps and counters read from the kernel."""

import subprocess
import time

import pytest

from conftest import ROOT, SYSTEM_PYTHON, sh
from kernel_features import xdp_loader, xdp_tools_object
from ansible_collections.ebpf.xdp.plugins.module_utils import _facts
from ansible_collections.ebpf.xdp.plugins.module_utils.bpf import libbpf as _bpf

UDP = 17


def test_facts_of_an_empty_namespace(run, pair):
    facts = run("xdp_facts", dict(netns=pair.rx))
    assert facts["changed"] is False
    assert facts["ansible_facts"]["xdp"] == {"netns": pair.rx, "interfaces": {}, "unmatched": {"maps": [],
                                                                                               "programs": []}}
    named = run("xdp_facts", dict(netns=pair.rx, interfaces=["eth0"]))["ansible_facts"]["xdp"]
    assert named["interfaces"]["eth0"]["xdp"] is None
    assert named["interfaces"]["eth0"]["mac"] == pair.rx_mac


def test_missing_interface_and_netns(run_distro, pair):
    res = run_distro("xdp_facts", dict(netns=pair.rx, interfaces=["eth9"]))
    assert res["failed"] and "eth9 does not exist" in res["msg"]
    res = run_distro("xdp_facts", dict(netns="no-such-ns"))
    assert res["failed"] and "'no-such-ns' does not exist" in res["msg"]


def udp_counted(pin):
    """The UDP frames the program counted so far, read from its pinned proto_count map."""
    with _bpf.Map.from_pin(pin) as counters:
        return (_facts.read_counters(counters) or {}).get(UDP, 0)


@pytest.mark.quiet
def test_rates_from_two_samples(run_distro, pair, drop_obj):
    attached = run_distro("xdp_program", dict(interface="eth0", netns=pair.rx, object=drop_obj))
    assert attached["changed"] and not attached.get("failed"), attached
    # A steady 2000 frames/s from the sender while the facts sample for 1 s; it runs for up to 20 s, so a
    # slow module start on a loaded machine still samples while it sends, and is stopped once they are read.
    sender = subprocess.Popen([
        SYSTEM_PYTHON, "-c",
        "import sys; sys.path.insert(0, %r); "
        "from ansible_collections.ebpf.xdp.plugins.module_utils.host import netns as _netns\n"
        "from ansible_collections.ebpf.xdp.plugins.module_utils.traffic import frames as _frames\n"
        "with _netns.netns(%r):\n"
        "    f = _frames.build_frame('udp', %r, %r, %r, %r)\n"
        "    _frames.send('eth0', {'udp': f}, 40000, rate=2000)\n"
        % (ROOT + "/.build/collections", pair.tx, pair.tx_mac, pair.rx_mac, pair.tx_ip, pair.rx_ip)])
    try:
        time.sleep(0.5)
        before = udp_counted(attached["maps"]["proto_count"])
        facts = run_distro("xdp_facts", dict(netns=pair.rx, rate_interval=1))["ansible_facts"]["xdp"]
    finally:
        sender.terminate()
        sender.wait()
    prog = facts["interfaces"]["eth0"]["xdp"]
    assert 0.9 <= facts["rate_interval"] <= 2.0
    rate = prog["protocol_rates"]["udp"]
    assert 1000 <= rate <= 3000, prog
    assert prog["rates"]["proto_count"]["17"] == rate
    assert 1000 <= facts["interfaces"]["eth0"]["rates"]["stats"]["rx_packets"] <= 3000
    # The rate against the counts the facts report: it is (second sample - first sample) / rate_interval, and
    # the first sample came after `before` (read before the module started), the second is the count the facts
    # report. So rate * rate_interval frames lie between the two: at most the count less `before` (plus 2 for
    # the rounding of the rate to 0.1/s and of the interval to 1 ms). A rate of everything counted so far per
    # interval, not of the interval's frames, fails this: `before` holds the ~1000 frames of the 0.5 s above.
    counted = prog["protocols"]["udp"]
    assert rate * facts["rate_interval"] <= counted - before + 2, (rate, facts["rate_interval"], counted, before)
    final = run_distro("xdp_facts", dict(netns=pair.rx))["ansible_facts"]["xdp"]
    assert set(final["interfaces"]["eth0"]["xdp"]["protocols"]) == {"udp"}
    # Counters only grow: the facts' count is one the program had reached, not more.
    assert final["interfaces"]["eth0"]["xdp"]["protocols"]["udp"] >= counted


def test_no_privileges(run_distro, pair):
    res = run_distro("xdp_facts", dict(netns=pair.rx), no_caps=True)
    assert res["failed"] and "needs CAP_SYS_ADMIN" in res["msg"], res


def xdp_loader_status(pair):
    """(name, priority, chain actions) of each program under xdp-loader's dispatcher line, as xdp-loader lists
    them (the witness: xdp-tools reads the dispatcher itself), and the name of the interface's XDP program."""
    out = sh(*xdp_loader(pair.rx, "status", "eth0")).stdout.splitlines()
    [main] = [line.split() for line in out if line.startswith("eth0")]
    chain = [line.split() for line in out if line.lstrip().startswith("=>")]
    # "=>  5  xdpfilt_alw_all  26  d4fe5e0b973c9290  XDP_PASS": arrow, priority, name, id, tag, actions
    return main[1], [(f[2], int(f[1]), sorted(a.lower().replace("xdp_", "") for a in f[5].split(",")))
                     for f in chain]


@pytest.mark.kernel_either("xdp_dispatcher")
def test_the_programs_of_libxdps_dispatcher_in_run_order(run_distro, pair, features):
    """Two programs loaded by xdp-loader (another tool, through libxdp) on one interface: the facts list the
    dispatcher's programs in the order they run, with their priorities and chain call actions, as xdp-loader
    does, and as programs of another tool. Where the kernel refuses the dispatcher, xdp-loader falls back to
    one program alone, which the facts report as the interface's XDP program, with no chain."""
    load = xdp_loader(pair.rx, "load", "-m", "skb")
    sh(*load, "-P", "30", "-A", "XDP_PASS,XDP_DROP", "eth0", xdp_tools_object("xdpfilt_dny_all"))
    second = sh(*load, "-P", "5", "eth0", xdp_tools_object("xdpfilt_alw_all"), check=False)
    try:
        check_dispatcher_facts(run_distro, pair, features, second)
    finally:
        # Through libxdp, which removes the dispatcher's pins below /sys/fs/bpf/xdp (the namespace's end would not).
        sh(*xdp_loader(pair.rx, "unload", "--all", "eth0"))


def check_dispatcher_facts(run_distro, pair, features, second):
    facts = run_distro("xdp_facts", dict(netns=pair.rx))
    assert not facts.get("failed") and not facts.get("warnings"), facts
    entry = facts["ansible_facts"]["xdp"]["interfaces"]["eth0"]
    main, listed = xdp_loader_status(pair)
    if not features["xdp_dispatcher"]:
        assert second.returncode != 0, "a second program without the dispatcher: %s" % second.stdout
        assert entry["xdp"]["name"] == main == "xdpfilt_dny_all" and entry["xdp_chain"] is None, entry
        assert entry["xdp"]["owner"] == "unmanaged", entry
        return
    assert second.returncode == 0, second.stderr
    assert entry["xdp"]["name"] == main == "xdp_dispatcher" and entry["xdp"]["owner"] == "unmanaged", entry
    chain = entry["xdp_chain"]
    assert [(p["name"], p["priority"], p["chain_call_actions"]) for p in chain] == listed == [
        ("xdpfilt_alw_all", 5, ["pass"]), ("xdpfilt_dny_all", 30, ["drop", "pass"])], (chain, listed)
    assert all(p["owner"] == "unmanaged" and p["attach"] == "dispatcher" and p["mode"] == "generic"
               and p["attachment"] is None for p in chain), chain
    assert len({p["id"] for p in chain} | {entry["xdp"]["id"]}) == 3, chain
