"""ebpf.xdp.netfilter_drop on a real veth, for each backend: the four-step rhythm for present and absent, UDP
datagrams sent across the veth dropped (the receiving socket gets none) and counted exactly, frames arriving
again once the rule is gone, other people's rules and tables left alone, rules of ours not as written put right,
and bad input refused with nothing changed.

The datagrams go from a plain UDP socket in the sender's namespace to one
bound in the receiver's. The sender knows the receiver's MAC address
(a permanent neighbour entry): the nftables drop takes ARP too, and IPv6 is
off, so the receiver's eth0 gets exactly the datagrams sent and no other
frame.
"""

import contextlib
import json
import os
import select
import socket
import subprocess
import time

import pytest

from conftest import SYSTEM_PYTHON, ModuleRunner, assert_rhythm, module_path, module_result, sh
from ansible_collections.ebpf.xdp.plugins.module_utils.host import netns as _netns

BACKENDS = ["iptables", "nftables"]
MODULE = "netfilter_drop"
COMMENT = "ebpf.xdp netfilter_drop"
PORT = 9999
PAYLOAD = 100
# What both backends count of a datagram: its IP packet (iptables at PREROUTING; nftables at ingress, where the
# Ethernet header is already pulled off).
IP_PACKET = 20 + 8 + PAYLOAD


@pytest.fixture
def pair(pair):
    sh("ip", "-n", pair.tx, "neigh", "replace", pair.rx_ip, "lladdr", pair.rx_mac, "dev", "eth0", "nud", "permanent")
    return pair


def args(pair, backend, **more):
    return dict(dict(interface="eth0", netns=pair.rx, backend=backend), **more)


def iptables_rules(ns):
    """The raw table's rules as iptables-save writes them, without counters."""
    out = sh("ip", "netns", "exec", ns, "iptables-save", "-t", "raw").stdout
    return [line for line in out.splitlines() if line.startswith("-A ")]


def nft_tables(ns):
    """(family, name) of every nftables table in ns (iptables-nft's ip raw among them)."""
    out = json.loads(sh("ip", "netns", "exec", ns, "nft", "-j", "list", "tables").stdout)["nftables"]
    return sorted((item["table"]["family"], item["table"]["name"]) for item in out if "table" in item)


def nft_table(ns, family, name):
    return sh("ip", "netns", "exec", ns, "nft", "list", "table", family, name).stdout


def ruleset(ns):
    """Everything netfilter holds in ns: the iptables raw rules and the whole nftables ruleset."""
    return iptables_rules(ns), sh("ip", "netns", "exec", ns, "nft", "list", "ruleset").stdout


def ours_present(pair, backend):
    """The witness: the rule of ours on the receiver's eth0, as iptables-save or nft list it."""
    if backend == "iptables":
        want = '-A PREROUTING -i eth0 -m comment --comment "%s" -j DROP' % COMMENT
        return [rule for rule in iptables_rules(pair.rx) if COMMENT in rule and "-i eth0 " in rule] == [want]
    if ("netdev", "ebpf_xdp_drop_eth0") not in nft_tables(pair.rx):
        return False
    text = nft_table(pair.rx, "netdev", "ebpf_xdp_drop_eth0")
    return 'hook ingress device "eth0" priority -500;' in text and "drop comment \"%s\"" % COMMENT in text


def ours_absent(pair):
    return (not [rule for rule in iptables_rules(pair.rx) if COMMENT in rule]
            and not [t for t in nft_tables(pair.rx) if t[1].startswith("ebpf_xdp_drop_")])


@contextlib.contextmanager
def listening(pair):
    """A UDP socket bound in the receiver's namespace."""
    with _netns.netns(pair.rx):
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    with sock:
        sock.bind((pair.rx_ip, PORT))
        sock.setblocking(False)
        yield sock


def send(pair, count):
    with _netns.netns(pair.tx):
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    with sock:
        for _n in range(count):
            sock.sendto(bytes(PAYLOAD), (pair.rx_ip, PORT))


def received(sock, expected=0, seconds=1.0):
    """Datagrams that reached sock: waits up to `seconds` for `expected` of them, then for any more."""
    count, deadline = 0, time.monotonic() + seconds
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([sock], [], [], left if count < expected else min(left, 0.2))[0]:
            return count
        while True:
            try:
                sock.recv(65535)
            except BlockingIOError:
                break
            count += 1


def counters(run, pair, backend):
    """One reading, as a benchmark takes it: the task again, no change."""
    res = run(MODULE, args(pair, backend))
    assert not res.get("failed") and res["changed"] is False, res
    return res["packets"], res["bytes"]


# ---------------------------------------------------------------- present: dropped and counted


@pytest.mark.debian12("netfilter_drop")
@pytest.mark.parametrize("backend", BACKENDS)
def test_present_drops_and_counts_exactly(run, pair, backend):
    with listening(pair) as sock:
        send(pair, 5)
        assert received(sock, 5) == 5  # the path works before the drop

        first, second = assert_rhythm(run, MODULE, args(pair, backend))
        assert ours_present(pair, backend)
        assert first["rule"] == second["rule"] and second["backend"] == backend, second
        assert first["diff"]["before"] == {"rules": []} and first["diff"]["after"] == {"rules": [first["rule"]]}

        packets, octets = counters(run, pair, backend)
        send(pair, 50)
        after = counters(run, pair, backend)
        assert received(sock) == 0
        assert after == (packets + 50, octets + 50 * IP_PACKET)

        send(pair, 7)
        assert counters(run, pair, backend) == (after[0] + 7, after[1] + 7 * IP_PACKET)
        assert received(sock) == 0


@pytest.mark.parametrize("backend", BACKENDS)
def test_check_mode_reads_the_counters_and_changes_nothing(run_distro, pair, backend):
    res = run_distro(MODULE, args(pair, backend), check=True)
    assert res["changed"] is True and (res["packets"], res["bytes"]) == (0, 0), res
    assert ours_absent(pair)
    rule = run_distro(MODULE, args(pair, backend))["rule"]
    send(pair, 3)
    before = ruleset(pair.rx)
    res = run_distro(MODULE, args(pair, backend), check=True)
    assert res["changed"] is False and (res["packets"], res["bytes"]) == (3, 3 * IP_PACKET), res
    res = run_distro(MODULE, args(pair, backend, state="absent"), check=True)
    assert res["changed"] is True and (res["packets"], res["bytes"]) == (0, 0), res
    assert res["diff"] == {"before": {"rules": [rule]}, "after": {"rules": []}}, res
    assert ruleset(pair.rx) == before


# ---------------------------------------------------------------- absent: removed, frames arrive again


@pytest.mark.parametrize("backend", BACKENDS)
def test_absent_removes_the_rule_and_frames_arrive_again(run_distro, pair, backend):
    res = run_distro(MODULE, args(pair, backend))
    assert res["changed"] and ours_present(pair, backend), res
    with listening(pair) as sock:
        send(pair, 10)
        assert received(sock) == 0

        first, second = assert_rhythm(run_distro, MODULE, args(pair, backend, state="absent"))
        assert ours_absent(pair)
        assert (first["packets"], first["bytes"], second["packets"], second["bytes"]) == (0, 0, 0, 0), first
        assert first["rule"] is None and first["diff"]["after"] == {"rules": []} and len(
            first["diff"]["before"]["rules"]) == 1, first

        send(pair, 20)
        assert received(sock, 20) == 20

        # And back: a new rule counts from 0.
        run_distro(MODULE, args(pair, backend))
        send(pair, 4)
        assert counters(run_distro, pair, backend) == (4, 4 * IP_PACKET)
        assert received(sock) == 0


def test_absent_without_the_interface_is_no_change(run_distro, pair):
    for backend in BACKENDS:
        res = run_distro(MODULE, dict(interface="gone0", netns=pair.rx, backend=backend, state="absent"))
        assert res["changed"] is False and not res.get("failed") and res["packets"] == 0, res


def test_absent_removes_an_iptables_rule_whose_interface_is_gone(run_distro, pair):
    """iptables matches interface names, so its rule outlives the interface; absent still removes it."""
    sh("ip", "-n", pair.rx, "link", "add", "gone0", "type", "veth", "peer", "name", "gone1")
    run_distro(MODULE, dict(interface="gone0", netns=pair.rx, backend="iptables"))
    sh("ip", "-n", pair.rx, "link", "del", "gone0")
    assert [rule for rule in iptables_rules(pair.rx) if COMMENT in rule]
    assert_rhythm(run_distro, MODULE, dict(interface="gone0", netns=pair.rx, backend="iptables", state="absent"))
    assert ours_absent(pair)


# ---------------------------------------------------------------- other people's rules, and ours per interface


FOREIGN_IPTABLES = [
    ["-i", "eth0", "-j", "DROP"],  # our words without our comment
    ["-i", "eth0", "-p", "udp", "--dport", "7", "-j", "ACCEPT"],
    ["-i", "eth0", "-m", "comment", "--comment", "someone else", "-j", "DROP"],
]
FOREIGN_NFT = """
table netdev foreign {
    chain watch {
        type filter hook ingress device "eth0" priority 0; policy accept;
        counter
    }
}
table netdev ebpf_xdp_drop {
    chain c {
        type filter hook ingress device "eth0" priority 10; policy accept;
    }
}
"""


def test_other_rules_and_tables_are_left_alone(run_distro, pair):
    for rule in FOREIGN_IPTABLES:
        sh("ip", "netns", "exec", pair.rx, "iptables", "-t", "raw", "-A", "PREROUTING", *rule)
    subprocess.run(["ip", "netns", "exec", pair.rx, "nft", "-f", "-"], input=FOREIGN_NFT, text=True, check=True)
    # Ours on another interface of the namespace is not eth0's.
    for backend in BACKENDS:
        assert run_distro(MODULE, dict(interface="lo", netns=pair.rx, backend=backend))["changed"]
    foreign = (iptables_rules(pair.rx), nft_table(pair.rx, "netdev", "foreign"),
               nft_table(pair.rx, "netdev", "ebpf_xdp_drop"))
    lo_rules = [rule for rule in iptables_rules(pair.rx) if COMMENT in rule]
    assert lo_rules == ['-A PREROUTING -i lo -m comment --comment "%s" -j DROP' % COMMENT]

    for backend in BACKENDS:
        assert_rhythm(run_distro, MODULE, args(pair, backend))
        assert ours_present(pair, backend)
    # Inserted at the head, the others after it in their order.
    assert iptables_rules(pair.rx) == ['-A PREROUTING -i eth0 -m comment --comment "%s" -j DROP' % COMMENT] \
        + foreign[0]
    with listening(pair) as sock:
        send(pair, 6)
        assert received(sock) == 0
        for backend in BACKENDS:
            assert_rhythm(run_distro, MODULE, args(pair, backend, state="absent"))
        # The foreign DROP rules take over; their counters are theirs.
        send(pair, 6)
        assert received(sock) == 0

    assert [rule for rule in iptables_rules(pair.rx) if COMMENT not in rule or "-i lo" in rule] == foreign[0]
    assert nft_table(pair.rx, "netdev", "foreign").replace("packets 6 bytes %d" % (6 * IP_PACKET),
                                                           "packets 0 bytes 0") == foreign[1]
    assert nft_table(pair.rx, "netdev", "ebpf_xdp_drop") == foreign[2]
    assert ("netdev", "ebpf_xdp_drop_lo") in nft_tables(pair.rx)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_rule_of_ours_not_as_written_is_put_right(run_distro, pair, backend):
    if backend == "iptables":
        for rule in (["-p", "udp", "-m", "comment", "--comment", COMMENT, "-j", "DROP"],
                     ["-m", "comment", "--comment", COMMENT, "-j", "DROP"],
                     ["-m", "comment", "--comment", COMMENT, "-j", "DROP"]):
            sh("ip", "netns", "exec", pair.rx, "iptables", "-t", "raw", "-A", "PREROUTING", "-i", "eth0", *rule)
    else:
        subprocess.run(["ip", "netns", "exec", pair.rx, "nft", "-f", "-"], text=True, check=True, input="""
            table netdev ebpf_xdp_drop_eth0 {
                chain ingress { type filter hook ingress device "eth0" priority 0; policy accept; counter accept; }
            }""")
    first, _second = assert_rhythm(run_distro, MODULE, args(pair, backend))
    assert len(first["diff"]["before"]["rules"]) == (3 if backend == "iptables" else 1), first
    assert ours_present(pair, backend)
    send(pair, 2)
    assert counters(run_distro, pair, backend) == (2, 2 * IP_PACKET)


def test_through_ansible(pair):
    """The module as Ansible ships it (AnsiballZ with its module_utils), with a diff."""
    runner = ModuleRunner(SYSTEM_PYTHON, pin_root=None, via_ansible=True)
    res = runner(MODULE, args(pair, "nftables"), diff=True)
    assert res["changed"] and res["diff"]["after"] == {"rules": [res["rule"]]}, res
    assert ours_present(pair, "nftables")
    res = runner(MODULE, args(pair, "nftables", state="absent"))
    assert res["changed"] and ours_absent(pair), res


# ---------------------------------------------------------------- bad input


@pytest.mark.parametrize("given,message", [
    (dict(interface="nosuch0"), "interface 'nosuch0' does not exist in this network namespace"),
    (dict(netns="nosuch-ns"), "network namespace 'nosuch-ns' does not exist (no /run/netns/nosuch-ns)"),
    (dict(netns="../nosuch"), "netns '../nosuch' is not a network namespace name (a name under /run/netns, as `ip "
                              "netns list` shows; no '/', not '.' or '..', no control characters, at most 255 bytes)"),
    (dict(backend="bpfilter"), "value of backend must be one of: iptables, nftables, got: bpfilter"),
    (dict(backend=None), "missing required arguments: backend"),
    (dict(interface=None), "missing required arguments: interface"),
    (dict(state="gone"), "value of state must be one of: present, absent, got: gone"),
])
@pytest.mark.parametrize("check", [True, False], ids=["check", "run"])
def test_bad_input_fails_and_changes_nothing(run_distro, pair, given, message, check):
    before = ruleset(pair.rx)
    task = {k: v for k, v in dict(args(pair, "nftables"), **given).items() if v is not None}
    res = run_distro(MODULE, task, check=check)
    assert res.get("failed") is True and res["changed"] is False and res["msg"] == message, res
    assert ruleset(pair.rx) == before


def run_without_commands(task, check=False):
    """The module in a mount namespace of its own where /usr/sbin (and /sbin, a link to it) is empty: a host
    without iptables and nft."""
    payload = dict(task, _ansible_check_mode=check, _ansible_module_name="ebpf.xdp." + MODULE)
    argv = ["unshare", "--mount", "--propagation", "private", "sh", "-c", 'mount -t tmpfs none /usr/sbin && exec "$@"',
            "sh", SYSTEM_PYTHON, "-m", "ansible_collections.ebpf.xdp.plugins.modules." + MODULE]
    proc = subprocess.run(argv, input=json.dumps({"ANSIBLE_MODULE_ARGS": payload}), capture_output=True, text=True,
                          cwd="/tmp", check=False, env=dict(os.environ, PYTHONPATH=module_path()))
    return module_result(proc)


@pytest.mark.parametrize("backend,command", [("iptables", "iptables-save"), ("nftables", "nft")])
@pytest.mark.parametrize("check", [True, False], ids=["check", "run"])
def test_missing_commands_name_the_package(pair, backend, command, check):
    before = ruleset(pair.rx)
    for state in ("present", "absent"):
        res = run_without_commands(args(pair, backend, state=state), check=check)
        assert res.get("failed") is True and res["changed"] is False, res
        assert res["msg"] == "backend %s needs the command %s, which is not installed: install the package %s " \
                             "(Debian/Ubuntu: apt-get install %s)" % (backend, command, backend, backend), res
    assert ruleset(pair.rx) == before


def test_without_privileges(run_distro, pair):
    res = run_distro(MODULE, args(pair, "iptables"), no_caps=True)
    assert res["failed"] and res["msg"].startswith("this task needs CAP_NET_ADMIN, CAP_SYS_ADMIN, which the "
                                                   "module's process lacks"), res
    assert ours_absent(pair)
