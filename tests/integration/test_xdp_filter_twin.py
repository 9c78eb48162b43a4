"""xdp-tools' own filter programs under the collection, against xdp-filter itself (issue 38 item 4).

Two twin pairs get the same filter and the same frames: on one, the xdp-tools package's object
(xdpfilt_alw_udp.o or xdpfilt_dny_udp.o) attached by ebpf.xdp.xdp_program or ebpf.xdp.datapath, its port rule
written with ebpf.xdp.bpf_map_entry and its statistics read by ebpf.xdp.xdp_facts; on the other, xdp-filter
loading the same object and setting the same rule. What `xdp-filter status` prints (packets and KiB per XDP
action, the port's hit counter) equals the facts.

xdp-filter pins its maps machine-wide under /sys/fs/bpf/xdp-filter (not per namespace): one xdp-filter runs at a
time, under the lock xdp-loader runs under (both are libxdp), and is unloaded after each test. It runs through
nsenter, not `ip netns exec` (which mounts a sysfs of its own and hides bpffs). Here libxdp's dispatcher cannot
run (ARCHITECTURE.md: its freplace probe fails), so xdp-filter attaches its program alone, as we do.
"""

import contextlib
import fcntl
import json
import os
import re
import subprocess

import pytest

from conftest import Pair, assert_rhythm, sh
from kernel_features import XDP_LOADER_LOCK, xdp_tools_object
from test_xdp_tools_maps import bpftool_stats

SIZE = 90
PORT = 53
# xdp-filter's rule flags and hit counter (xdp-filter/common_kern_user.h of xdp-tools 1.3): a destination port,
# of UDP; a rule's value is flags | hits << COUNTER_SHIFT, per CPU.
MAP_FLAG_DST, MAP_FLAG_UDP, COUNTER_SHIFT = 1 << 1, 1 << 3, 6
XDP_FILTER_STATS = "/sys/fs/bpf/xdp-filter/xdp_stats_map"
RULE = MAP_FLAG_DST | MAP_FLAG_UDP
PORT_KEY = int.from_bytes(PORT.to_bytes(2, "big"), "little")  # 53 in network byte order: 13568
# xdp_stats_map's keys (a __u32, not the enum) by name; xdp-filter status prints the first three.
ACTIONS = ("XDP_ABORTED", "XDP_DROP", "XDP_PASS", "XDP_TX", "XDP_REDIRECT")
PRINTED = ACTIONS[:3]
# The same frames to both twins: UDP to the port of the rule, UDP to another port, TCP to the port of the rule.
TRAFFIC = (("udp", PORT, 30), ("udp", PORT + 1, 20), ("tcp", PORT, 10))
# What each filter does with them (policy allow: the rule's UDP frames dropped, the rest passes; policy deny:
# only the rule's UDP frames pass).
EXPECTED = {"xdpfilt_alw_udp": {"XDP_DROP": 30, "XDP_PASS": 30},
            "xdpfilt_dny_udp": {"XDP_DROP": 30, "XDP_PASS": 30}}


def xdp_filter(ns, *args, check=True):
    proc = subprocess.run(["nsenter", "--net=/run/netns/%s" % ns, "xdp-filter"] + list(args),
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0 or not check, (args, proc.stdout, proc.stderr)
    return proc.stdout


@contextlib.contextmanager
def xdp_filter_on(pair, program):
    """xdp-filter loading `program` (xdpfilt_{alw,dny}_udp) on pair.rx's eth0 with the port rule, unloaded after."""
    policy = {"alw": "allow", "dny": "deny"}[program.split("_")[1]]
    with open(XDP_LOADER_LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            xdp_filter(pair.rx, "load", "-p", policy, "-f", "udp", "-m", "skb", "eth0")
            xdp_filter(pair.rx, "port", "-m", "dst", "-p", "udp", str(PORT))
            yield
        finally:
            subprocess.run(["nsenter", "--net=/run/netns/%s" % pair.rx, "xdp-filter", "unload", "eth0"],
                           capture_output=True, check=False)
            assert not os.path.exists("/sys/fs/bpf/xdp-filter"), "xdp-filter left its pins"


def status(ns):
    """What `xdp-filter status` prints: {action: (packets, KiB)}, the loaded program's name and the port's hit
    counter."""
    # With UDP alone, status prints every section and then exits 254 (-ENOENT): it looks for the address maps
    # of the features not loaded.
    out = xdp_filter(ns, "status", check=False)
    actions = {m.group(1): (int(m.group(2)), int(m.group(3)))
               for m in re.finditer(r"^\s+(XDP_\w+)\s+(\d+) pkts\s+(\d+) KiB", out, re.M)}
    program = re.search(r"^(xdpfilt_\w+)$", out, re.M).group(1)
    hits = int(re.search(r"^\s+%d\s+dst,udp\s+(\d+)" % PORT, out, re.M).group(1))
    return actions, program, hits


def quiet(pair):
    """Each end knows the other's MAC for good: the receiver's answers to the frames (TCP resets, ICMP port
    unreachable) then send no ARP request, whose replies the filter would count at one twin and not the other."""
    for ns, ip, mac in ((pair.rx, pair.tx_ip, pair.tx_mac), (pair.tx, pair.rx_ip, pair.rx_mac)):
        sh("ip", "-n", ns, "neigh", "replace", ip, "lladdr", mac, "dev", "eth0", "nud", "permanent")


def send(run, pair):
    for protocol, port, count in TRAFFIC:
        sent = run("xdp_trafficgen", dict(interface="eth0", netns=pair.tx, src_ip=pair.tx_ip, dst_ip=pair.rx_ip,
                                          dst_mac=pair.rx_mac, protocols=[protocol], count=count, size=SIZE,
                                          dst_port=port, engine="socket"))
        assert sent["sent"] == {protocol: count}, sent


def our_statistics(run, pair):
    """The facts of our twin: {action: (packets, bytes)} of xdp_stats_map and the port's hit counter."""
    facts = run("xdp_facts", dict(netns=pair.rx, maps=["xdp_stats_map", "filter_ports"], per_cpu=True,
                                  max_entries=65536))
    assert not facts.get("failed") and not facts.get("warnings"), facts
    prog = facts["ansible_facts"]["xdp"]["interfaces"]["eth0"]["xdp"]
    maps = {item["name"]: item for item in prog["maps"]}
    stats = maps["xdp_stats_map"]
    assert (stats["btf"], stats["value_type"], stats["truncated"]) == (True, "struct xdp_stats_record", False)
    actions = {ACTIONS[entry["key"]]: (entry["value"]["rx_packets"], entry["value"]["rx_bytes"])
               for entry in stats["entries"]}
    [rule] = maps["filter_ports"]["entries"]
    assert rule["key"] == PORT_KEY and all(value & 0x3f == RULE for value in rule["values"]), rule
    return prog, actions, sum(value >> COUNTER_SHIFT for value in rule["values"])


@pytest.fixture
def twin():
    """A second pair for xdp-filter itself."""
    p = Pair()
    p.up()
    quiet(p)
    yield p
    p.down()


def deploy(run, pair, program, how):
    """xdp-tools' object on pair.rx's eth0 by xdp_program or datapath, in the four-step rhythm: the pinned
    filter_ports map's path."""
    obj = xdp_tools_object(program)
    args = dict(interface="eth0", netns=pair.rx, object=obj, program=program, mode="generic")
    if how == "xdp_program":
        first, _second = assert_rhythm(run, "xdp_program", args)
        return first["maps"]["filter_ports"]
    assert_rhythm(run, "datapath", {"config": {"xdp": [args]}})
    return os.path.join(run.pin_root, pair.rx, "eth0", "xdp", "maps", "filter_ports")


@pytest.mark.parametrize("how", ["xdp_program", "datapath"])
@pytest.mark.parametrize("program", ["xdpfilt_alw_udp", "xdpfilt_dny_udp"])
def test_xdp_tools_filter_counts_as_xdp_filter_does(run, pair, twin, program, how):
    quiet(pair)
    rule_path = deploy(run, pair, program, how)
    rule = run("bpf_map_entry", dict(path=rule_path, entries=[{"key": PORT_KEY, "value": RULE}]))
    assert rule["changed"] and not rule.get("failed"), rule
    send(run, pair)

    with xdp_filter_on(twin, program):
        send(run, twin)
        theirs, their_program, their_hits = status(twin.rx)
        # xdp-filter prints KiB; its map read by bpftool has the bytes.
        stats_id = json.loads(sh("bpftool", "-j", "map", "show", "pinned", XDP_FILTER_STATS).stdout)["id"]
        their_bytes = {ACTIONS[key]: value["rx_bytes"] for key, value in bpftool_stats(stats_id).items()}
        prog, ours, our_hits = our_statistics(run, pair)

    assert their_program == program == prog["name"] and prog["owner"] == "ebpf.xdp", (their_program, prog)
    # Every action xdp-filter prints, in packets and in KiB as it prints them (whole KiB, cut), and in bytes.
    assert sorted(theirs) == sorted(PRINTED), theirs
    for action in PRINTED:
        packets, octets = ours.get(action, (0, 0))
        assert theirs[action] == (packets, octets // 1024), (action, theirs, ours)
        assert their_bytes.get(action, 0) == octets, (action, their_bytes, ours)
    assert {action: ours[action][0] for action in EXPECTED[program]} == EXPECTED[program], ours
    assert ours["XDP_PASS"][1] + ours["XDP_DROP"][1] == sum(count for _p, _port, count in TRAFFIC) * SIZE, ours
    # The port's hit counter: its rule matched the 30 UDP frames to it, dropped or passed.
    assert their_hits == our_hits == 30, (their_hits, our_hits)
