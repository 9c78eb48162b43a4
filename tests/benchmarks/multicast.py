#!/usr/bin/env python
"""Devmap multicast on the lab's switch, side by side with a Linux bridge flooding the same ports.

    .venv/bin/python tests/benchmarks/multicast.py [--rounds 3] [--seconds 2] | --smoke

The kernel's devmap multicast work (bpf_redirect_map() with BPF_F_BROADCAST)
was measured with pktgen, 64-byte packets, on veth: bpf_redirect_map 1 -> 1
~1.6 Mpps generic / ~0.98 Mpps native, broadcast 1 -> 3 ~600 / ~480 kpps,
1 -> 9 ~125 / ~100 kpps. The same setups, each deployed with the
collection's modules on the lab's switch namespace, against a Linux bridge
flooding the same ports:

    sender eth3 -> switch eth0 ==(setup)==> switch eth1..eth9 -> members eth1..eth9

- redirect_map 1 -> 1: xdp_redirect_map on eth0, its tx_port entry 0 set to
  eth1 with ebpf.xdp.bpf_map_entry;
- broadcast 1 -> 3 and 1 -> 9: xdp_multicast on eth0 (ebpf.xdp.xdp_program,
  shared_maps) and one group (ebpf.xdp.devmap_group) keyed by the frames'
  multicast address, members eth1..eth3 or eth1..eth9, ingress excluded;
- each generic and native;
- Linux bridge 1 -> 1, 3, 9: eth0 and the member ports enslaved to a bridge
  made for the case (STP, forward delay and multicast snooping off, so a
  multicast frame floods every port), no XDP program but eth0's below.

One generator drives every case: xdp_trafficgen's XDP live-frames engine on
the sender, one CPU, 60-byte UDP to 239.1.1.1 (MAC 01:00:5e:01:01:01), for a
fixed time. Every member end counts with xdp_drop_count (dropping, native),
so what is measured is what each port delivered; "offered" is what the
generator sent. The generator's frames enter eth0 through its veth only
while eth0's NAPI runs: natively attached XDP programs do that, a generic one
does not, so eth0 has GRO on in every case (a veth then runs NAPI without
native XDP) and, where no case program sits there natively (the bridge),
xdp_drop_count in count-and-pass mode, as in forwarding.py. Cases alternate
round after round, each round starting one case later (the machines are
shared and noisy); medians and ratios to the bridge of the same fan-out are
printed, next to the kernel's figures.
"""

import argparse
import contextlib
import ctypes
import fcntl
import os
import socket
import statistics
import struct
import subprocess
import sys

from harness import ansible_cli
from harness.ansible_cli import ROOT, module, playbook, write_play

ansible_cli.import_module_utils()
# pylint: disable-next=wrong-import-position
from ansible_collections.ebpf.xdp.plugins.module_utils import _facts  # noqa: E402
from ansible_collections.ebpf.xdp.plugins.module_utils.bpf import libbpf as _bpf  # noqa: E402
from ansible_collections.ebpf.xdp.plugins.module_utils.host import netns as _netns  # noqa: E402

OBJECTS = "/var/lib/ebpf_xdp/bench"
PIN_ROOT = "/sys/fs/bpf/ebpf_xdp"
SOURCES = ("xdp_drop_count", "xdp_redirect_map", "xdp_multicast", "xdp_trafficgen")
SWITCH, MEMBERS, SENDER = "switch", "members", "sender"
INGRESS, SENDER_PORT = "eth0", "eth3"
PORTS = ["eth%d" % i for i in range(1, 10)]
BRIDGE = "brbench"
SHARED_MAPS = "bench"
GROUP_IP, GROUP_MAC, SRC_IP = "239.1.1.1", "01:00:5e:01:01:01", "10.11.4.1"
# The kernel's figures (pps, as the issue gives them), per fan-out and mode.
KERNEL = {(1, "generic"): "1.6 M", (1, "native"): "0.98 M", (3, "generic"): "600 k", (3, "native"): "480 k",
          (9, "generic"): "125 k", (9, "native"): "100 k"}

SIOCETHTOOL, ETHTOOL_GGRO, ETHTOOL_SGRO = 0x8946, 0x2b, 0x2c


def ip_batch(netns, lines):
    subprocess.run(["ip", "-n", netns, "-batch", "-"], input="".join(line + "\n" for line in lines), text=True,
                   check=True)


def gro(netns, ifname, on=None):
    """GRO of the interface (ethtool's legacy GRO ioctl, no ethtool binary needed); set it when on is given."""
    value = ctypes.create_string_buffer(struct.pack("II", ETHTOOL_GGRO if on is None else ETHTOOL_SGRO, int(bool(on))))
    with _netns.netns(netns), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        fcntl.ioctl(sock, SIOCETHTOOL, struct.pack("16sP", ifname.encode(), ctypes.addressof(value)))
    return bool(struct.unpack("II", value.raw[:8])[1])


class Switch:
    """What is on the switch's eth0 now, so that a case changes only what differs from the previous one.

    A setup answers the module tasks that bring the switch from there to its case; they run in one playbook with
    the generator (an ad-hoc call per module costs a second or two each).
    """

    def __init__(self):
        self.program = None  # (object, mode) attached on eth0
        self.bridge = None  # ports of the bench bridge, or None
        self.group = None  # members of the bench group

    def attach(self, name, mode, constants=None):
        if self.program == (name, mode):
            return []
        self.program = (name, mode)
        self.group = None  # a new program may bring a new map set
        args = dict(interface=INGRESS, object="%s/%s.o" % (OBJECTS, name), mode=mode, program=name)
        if constants:
            args["constants"] = constants
        if name == "xdp_multicast":
            args["shared_maps"] = SHARED_MAPS
        return [{"name": "Attach %s (%s) on %s" % (name, mode, INGRESS), "ebpf.xdp.xdp_program": args,
                 "register": "attached"}]

    def detach(self):
        module(SWITCH, "xdp_program", dict(interface=INGRESS, state="absent"))
        self.program = None
        self.group = None

    def bridge_ports(self, ports):
        """The bench bridge over eth0 and ports, or none (ports None)."""
        if self.bridge == ports:
            return
        if self.bridge is not None:
            ip_batch(SWITCH, ["link del %s" % BRIDGE])
            self.bridge = None
        if ports is None:
            return
        ip_batch(SWITCH, ["link add %s type bridge stp_state 0 forward_delay 0 mcast_snooping 0" % BRIDGE])
        # No IPv6 on the bridge, so it sends no MLD or ND of its own.
        subprocess.run(["ip", "netns", "exec", SWITCH, "sysctl", "-qw", "net.ipv6.conf.%s.disable_ipv6=1" % BRIDGE],
                       check=True)
        ip_batch(SWITCH, ["link set %s master %s" % (port, BRIDGE) for port in [INGRESS] + ports]
                 + ["link set %s up" % BRIDGE])
        self.bridge = ports


SW = Switch()


def redirect_map_setup(mode):
    def setup():
        SW.bridge_ports(None)
        tasks = SW.attach("xdp_redirect_map", mode)
        if tasks:
            tasks.append({"name": "Send everything to %s" % PORTS[0], "ebpf.xdp.bpf_map_entry": {
                "path": "{{ attached.maps.tx_port }}", "exclusive": True,
                "entries": [{"key": 0, "value": {"ifindex": PORTS[0]}}]}})
        return tasks
    return setup


def broadcast_setup(mode, fanout):
    def setup():
        SW.bridge_ports(None)
        tasks = SW.attach("xdp_multicast", mode)
        if SW.group != fanout:
            tasks.append({"name": "The group", "ebpf.xdp.devmap_group": {
                "name": "bench", "shared_maps": SHARED_MAPS, "members": PORTS[:fanout], "addresses": [GROUP_IP],
                "exclude_ingress": True, "exclusive": True}})
            SW.group = fanout
        return tasks
    return setup


def bridge_setup(fanout):
    def setup():
        SW.bridge_ports(PORTS[:fanout])
        return SW.attach("xdp_drop_count", "native", {"xdp_action": 2})
    return setup


# name -> (setup, fan-out, mode); the bridge has no XDP mode.
CASES = {}
for _mode in ("generic", "native"):
    CASES["redirect_map 1 -> 1, " + _mode] = (redirect_map_setup(_mode), 1, _mode)
    for _fanout in (3, 9):
        CASES["broadcast 1 -> %d, %s" % (_fanout, _mode)] = (broadcast_setup(_mode, _fanout), _fanout, _mode)
for _fanout in (1, 3, 9):
    CASES["Linux bridge 1 -> %d" % _fanout] = (bridge_setup(_fanout), _fanout, None)
# --smoke: one broadcast case and the bridge of the same fan-out.
SMOKE_CASES = ["broadcast 1 -> 3, native", "Linux bridge 1 -> 3"]


def counted():
    """UDP frames counted so far on every member end: the pinned proto_count maps that xdp_facts reports."""
    counts = {}
    for port in PORTS:
        with _bpf.Map.from_pin(os.path.join(PIN_ROOT, MEMBERS, port, "xdp", "maps", "proto_count")) as counters:
            counts[port] = (_facts.read_counters(counters) or {}).get(socket.IPPROTO_UDP, 0)
    return counts


# One playbook run for the work of many module calls (an ad-hoc call costs a second or two).
PREPARE = [
    {"name": "Compile the objects once (lab hosts share this machine's files)", "hosts": SWITCH,
     "gather_facts": False, "tasks": [
         {"name": "Compile", "ebpf.xdp.bpf_object": {"src": os.path.join(ROOT, "files", "bpf", "{{ item }}.bpf.c"),
                                                     "dest": OBJECTS + "/{{ item }}.o"},
          "loop": list(SOURCES)}]},
    {"name": "Nothing of ours on the switch's ports (deploy_xdp.yml puts xdp_multicast there)", "hosts": SWITCH,
     "gather_facts": False, "tasks": [
         {"name": "Read the switch", "ebpf.xdp.xdp_facts": {}},
         {"name": "Detach", "ebpf.xdp.xdp_program": {"interface": "{{ item }}", "state": "absent"},
          "loop": "{{ ansible_facts.xdp.interfaces | dict2items | selectattr('value.xdp') | map(attribute='key') }}"}]},
    {"name": "Every member end counts and drops, natively", "hosts": MEMBERS, "gather_facts": False, "tasks": [
        {"name": "Attach", "ebpf.xdp.xdp_program": {"interface": "{{ item }}", "object": OBJECTS + "/xdp_drop_count.o",
                                                    "program": "xdp_drop_count", "mode": "native"},
         "loop": PORTS}]},
]


def prepare():
    """The lab, the objects, counters on the member ends, nothing of ours on the switch but GRO on eth0."""
    playbook(os.path.join(ROOT, "playbooks", "lab_up.yml"))
    os.makedirs(OBJECTS, exist_ok=True)
    subprocess.run(["ip", "-n", SWITCH, "link", "del", BRIDGE], capture_output=True, check=False)
    playbook(write_play("multicast_bench_prepare.yml", PREPARE))
    was = gro(SWITCH, INGRESS)
    gro(SWITCH, INGRESS, True)
    return was


def clear_switch():
    """The bench's bridge and eth0's program go."""
    SW.bridge_ports(None)
    SW.detach()


def run_case(name, seconds, before):
    """(per-port delivered pps, offered pps, non-members' frames), and the counts after."""
    setup, fanout, _mode = CASES[name]
    plays = []
    tasks = setup()
    if tasks:
        plays.append({"name": "Set up " + name, "hosts": SWITCH, "gather_facts": False, "tasks": tasks})
    plays.append({"name": "Generate", "hosts": SENDER, "gather_facts": False, "tasks": [
        {"name": "Send", "ebpf.xdp.xdp_trafficgen": dict(
            interface=SENDER_PORT, engine="xdp", object=OBJECTS + "/xdp_trafficgen.o", cpus=[0], duration=seconds,
            protocols=["udp"], src_ip=SRC_IP, dst_ip=GROUP_IP, dst_mac=GROUP_MAC)}]})
    out = playbook(write_play("multicast_bench_case.yml", plays))
    sent = out["plays"][-1]["tasks"][0]["hosts"][SENDER]
    after = counted()
    grown = {port: after[port] - before[port] for port in PORTS}
    members = [grown[port] / sent["seconds"] for port in PORTS[:fanout]]
    return {"ports": members, "offered": sent["total"] / sent["seconds"],
            "strays": sum(grown[port] for port in PORTS[fanout:])}, after


def fmt(pps):
    return "%.2f M" % (pps / 1e6) if pps >= 1e6 else "%.0f k" % (pps / 1e3)


def report(results):
    bridge = {CASES[name][1]: statistics.median(sum(r["ports"]) for r in runs)
              for name, runs in results.items() if CASES[name][2] is None}
    header = ("setup", "offered", "per port", "min port", "total", "x bridge", "kernel", "strays")
    print("%-26s %10s %10s %10s %10s %9s %8s %7s" % header)
    for name, runs in results.items():
        _setup, fanout, mode = CASES[name]
        total = statistics.median(sum(r["ports"]) for r in runs)
        per_port = statistics.median(statistics.mean(r["ports"]) for r in runs)
        lowest = statistics.median(min(r["ports"]) for r in runs)
        offered = statistics.median(r["offered"] for r in runs)
        strays = max(r["strays"] for r in runs)
        ratio = "%.2f" % (total / bridge[fanout]) if bridge.get(fanout) else "-"
        print("%-26s %10s %10s %10s %10s %9s %8s %7d" % (name, fmt(offered), fmt(per_port), fmt(lowest), fmt(total),
                                                         ratio, KERNEL.get((fanout, mode), ""), strays))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--smoke", action="store_true", help="one short round: does the benchmark still work?")
    opts = parser.parse_args()
    rounds, seconds = (1, 0.3) if opts.smoke else (opts.rounds, opts.seconds)
    gro_was = prepare()
    names = SMOKE_CASES if opts.smoke else list(CASES)
    results = {name: [] for name in names}
    try:
        counts = counted()
        for round_no in range(rounds):
            # Each round starts one case later: no case always runs right after the same one.
            shift = round_no % len(names)
            for name in names[shift:] + names[:shift]:
                outcome, counts = run_case(name, seconds, counts)
                results[name].append(outcome)
    finally:
        with contextlib.suppress(SystemExit):
            clear_switch()
        gro(SWITCH, INGRESS, gro_was)
    print("on: this machine's lab (switch namespace); generator: xdp_trafficgen engine xdp, 1 CPU, 60-byte UDP to "
          "%s, %.1f s per run, %d round(s)" % (GROUP_IP, seconds, rounds))
    print("pps delivered to each member end (xdp_drop_count); x bridge: total against the bridge of the same "
          "fan-out; kernel: the devmap multicast commit's pktgen figures; strays: frames on non-members")
    report(results)
    sys.stdout.flush()
    if opts.smoke:
        for name, runs in results.items():
            if not all(min(run["ports"]) > 0 and run["strays"] == 0 for run in runs):
                sys.exit("multicast.py --smoke: %s: a member got nothing, or a non-member got frames: %s"
                         % (name, runs))


if __name__ == "__main__":
    main()
