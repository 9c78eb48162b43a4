#!/usr/bin/env python
"""ebpf.xdp.replay on the lab's receiver: how fast frames go through the attached program and a candidate.

    .venv/bin/python tests/benchmarks/replay.py [--frames 100000] [--runs 3] | --smoke

The lab is brought up and the receiver converged by ebpf.xdp.xdp_deploy as the inventory says
(xdp_drop_count on eth0: count per protocol, then drop). A pcap of mixed frames (UDP, TCP and ICMP over
IPv4 and IPv6, ports varying) is written on the host, and `ansible receiver -m ebpf.xdp.replay` compares the
attached program with a real change, the same object told to pass (xdp_action 2): every frame goes from
XDP_DROP to XDP_PASS, and both programs count the same. Printed per run: the frames, the seconds the module
spent running them through both programs (its `seconds`: loading and copying the maps apart), the rate, and
the module's whole run as the controller sees it; then the comparison as --diff shows it. --smoke: 2,000
frames, one run, and the figures must be sane.
"""

import argparse
import os
import statistics
import sys
import time

from harness.ansible_cli import import_module_utils, module, playbook, write_play

RECEIVER = "receiver"
OBJECT = "/var/lib/ebpf_xdp/objects/xdp_drop_count.o"  # the lab's xdp_deploy_object_dir
PCAP = "/var/lib/ebpf_xdp/replay-bench.pcap"
DEPLOY_RECEIVER = [{"name": "Converge the receiver as the inventory says", "hosts": RECEIVER, "gather_facts": False,
                    "roles": [{"role": "ebpf.xdp.xdp_deploy"}]}]
KINDS = [("udp", 4), ("tcp", 4), ("icmp", 4), ("udp", 6), ("tcp", 6), ("icmp", 6)]


def write_sample(count):
    # pylint: disable=import-outside-toplevel
    from ansible_collections.ebpf.xdp.plugins.module_utils.traffic import frames as _frames, pcap as _pcap
    addresses = {4: ("10.0.1.1", "10.0.1.2"), 6: ("fd00:1::1", "fd00:1::2")}
    built = []
    for i in range(count):
        protocol, version = KINDS[i % len(KINDS)]
        src, dst = addresses[version]
        built.append(_frames.build_frame(protocol, "02:00:00:00:01:01", "02:00:00:00:01:02", src, dst,
                                         src_port=1024 + i % 50000, dst_port=80 + i % 7, size=100 + i % 5 * 100))
    _pcap.write(PCAP, built)


def describe(result):
    # pylint: disable=import-outside-toplevel
    from ansible_collections.ebpf.xdp.plugins.module_utils.hooks import replay as _replay
    return _replay.describe(result)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--frames", type=int, default=100000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--smoke", action="store_true", help="2,000 frames, one run: does it still work?")
    opts = parser.parse_args()
    frames, runs = (2000, 1) if opts.smoke else (opts.frames, opts.runs)
    import_module_utils()

    playbook("lab_up.yml")
    playbook(write_play("replay_bench_receiver.yml", DEPLOY_RECEIVER))
    write_sample(frames)
    args = {"interface": "eth0", "pcap": PCAP, "object": OBJECT, "program": "xdp_drop_count",
            "constants": {"xdp_action": 2}}
    rates, result = [], None
    try:
        print("the lab's receiver, eth0: xdp_drop_count (drop) against itself told to pass; %d frames" % frames)
        for run in range(runs):
            began = time.monotonic()
            result = module(RECEIVER, "replay", args)
            whole = time.monotonic() - began
            rate = result["frames"] / result["seconds"] if result["seconds"] else 0.0
            rates.append(rate)
            print("run %d: %d frames through both programs in %.2f s: %.0f frames/s (the module's run: %.2f s)"
                  % (run + 1, result["frames"], result["seconds"], rate, whole), flush=True)
    finally:
        os.unlink(PCAP)
    print("median %.0f frames/s\n" % statistics.median(rates))
    print(describe(result))
    if opts.smoke:
        wanted = {"XDP_DROP -> XDP_PASS": frames}
        found = {name: step["frames"] for name, step in result["transitions"].items()}
        if result["frames"] != frames or found != wanted or result["map_effects"] or not rates[0] > 1000:
            sys.exit("replay.py --smoke: not what the change does: %d frames, transitions %s, map effects %s, "
                     "%.0f frames/s" % (result["frames"], found, result["map_effects"], rates[0]))


if __name__ == "__main__":
    main()
