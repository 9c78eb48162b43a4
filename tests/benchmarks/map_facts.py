#!/usr/bin/env python
"""What decoding maps through their BTF costs the facts: a program with a 65,536-entry per-CPU array of
struct counts { __u64 packets; __u64 bytes; } (every entry not zero, the worst case) and a 65,536-entry per-CPU
array of 64-bit counters (xdp-filter's filter_ports shape, which `counters` reads whole), attached in a namespace
of its own.

    .venv/bin/python tests/benchmarks/map_facts.py [--rounds 7] | --smoke

Printed: the median time of ebpf.xdp.xdp_facts' reading (_facts.snapshot, in this process) with the default
options (max_entries 1024), with maps: [] (no decoding: the facts of before), and with max_entries 65536 (every
entry decoded), the sides taken in turn round after round; and one xdp_facts module run with the defaults, as a
playbook sees it (Python's start and the module's imports included). --smoke: 2 rounds.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import time

from harness.ansible_cli import LOCALHOST, ROOT, import_module_utils, module

NETNS = "bench_mapfacts"
PIN_ROOT = "/sys/fs/bpf/ebpf_xdp_bench_mapfacts"
WORK = os.path.join(ROOT, ".build", "bench-mapfacts")
ENTRIES = 65536

PROGRAM = r"""
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct counts {
    __u64 packets;
    __u64 bytes;
};

struct {
    __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
    __type(key, __u32);
    __type(value, struct counts);
    __uint(max_entries, 65536);
} per_flow SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
    __type(key, __u32);
    __type(value, __u64);
    __uint(max_entries, 65536);
} per_port SEC(".maps");

SEC("xdp")
int xdp_map_bench(struct xdp_md *ctx)
{
    __u32 key = ctx->rx_queue_index;
    struct counts *c = bpf_map_lookup_elem(&per_flow, &key);
    __u64 *n = bpf_map_lookup_elem(&per_port, &key);

    if (c)
        c->packets++;
    if (n)
        (*n)++;
    return XDP_PASS;
}

char _license[] SEC("license") = "GPL";
"""


def setup():
    import_module_utils()
    # pylint: disable=import-outside-toplevel
    from ansible_collections.ebpf.xdp.plugins.module_utils.bpf import compile as _compile, libbpf as _bpf
    os.makedirs(WORK, exist_ok=True)
    src, obj = os.path.join(WORK, "map_bench.bpf.c"), os.path.join(WORK, "map_bench.o")
    with open(src, "w") as out:
        out.write(PROGRAM)
    subprocess.run(_compile.compile_argv("clang", src, obj, []), check=True)
    subprocess.run(["ip", "netns", "add", NETNS], check=True)
    subprocess.run(["ip", "-n", NETNS, "link", "add", "a0", "type", "veth", "peer", "name", "b0"], check=True)
    attached = module("localhost", "xdp_program", {"pin_root": PIN_ROOT, "interface": "b0", "netns": NETNS,
                                                   "object": obj, "program": "xdp_map_bench", "mode": "generic"},
                      options=LOCALHOST)
    # Every entry on every CPU not zero: nothing is left out as zero.
    for name, value in (("per_flow", (1).to_bytes(8, "little") + (64).to_bytes(8, "little")),
                        ("per_port", (1).to_bytes(8, "little"))):
        with _bpf.Map.from_pin(attached["maps"][name]) as bench_map:
            slot = value.ljust(bench_map.slot, b"\0") * bench_map.ncpus
            for key in range(ENTRIES):
                bench_map.update(key.to_bytes(4, "little"), slot)


def teardown():
    subprocess.run(["ip", "netns", "del", NETNS], capture_output=True, check=False)
    shutil.rmtree(PIN_ROOT, ignore_errors=True)


def measure(rounds):
    # pylint: disable=import-outside-toplevel
    from ansible_collections.ebpf.xdp.plugins.module_utils import _facts
    from ansible_collections.ebpf.xdp.plugins.module_utils.host import netns as _netns
    sides = {"defaults (max_entries 1024)": dict(),
             "maps: [] (no decoding, as before)": dict(maps=[]),
             "max_entries 65536 (every entry)": dict(max_entries=ENTRIES)}
    found = {name: [] for name in sides}
    names = list(sides)
    with _netns.netns(NETNS):
        for rnd in range(rounds + 1):
            for name in names[rnd % len(names):] + names[:rnd % len(names)]:
                reading = _facts.MapReading(**sides[name])
                start = time.perf_counter()
                facts = _facts.snapshot(PIN_ROOT, NETNS, [], reading=reading)
                seconds = time.perf_counter() - start
                prog = facts["interfaces"]["b0"]["xdp"]
                assert prog["counters"]["per_port"]["0"] and len(prog["counters"]["per_port"]) == ENTRIES
                if rnd:  # the first round warms the caches (map info, layouts)
                    found[name].append(seconds)
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--smoke", action="store_true", help="2 rounds: does it still work?")
    args = parser.parse_args()
    if args.smoke:
        args.rounds = 2
    teardown()
    try:
        setup()
        found = measure(args.rounds)
        for name, times in found.items():
            print("%-36s median %7.1f ms  (min %.1f, max %.1f, %d rounds)" % (
                name, 1000 * statistics.median(times), 1000 * min(times), 1000 * max(times), len(times)))
        for name, maps in (("defaults", ["*"]), ("maps: []", [])):
            start = time.monotonic()
            res = module("localhost", "xdp_facts", {"pin_root": PIN_ROOT, "netns": NETNS, "maps": maps},
                         options=LOCALHOST)
            wall = time.monotonic() - start
            per_flow = next(item for item in res["ansible_facts"]["xdp"]["interfaces"]["b0"]["xdp"]["maps"]
                            if item["name"] == "per_flow")
            print("ansible -m ebpf.xdp.xdp_facts, %s: %.2f s wall (the ansible command's start included); "
                  "per_flow: %s" % (name, wall, json.dumps({key: per_flow.get(key) for key in (
                      "entries_read", "truncated", "entries_total")})))
    finally:
        teardown()


if __name__ == "__main__":
    main()
