#!/usr/bin/env python
"""What carrying a map's entries into a new layout costs an upgrade (issue 40): a program whose hash map `stats`
holds N entries of struct rec { __u64 packets; __u64 bytes; } (16 bytes, keyed by __u32, 131,072 entries at
most), attached in a namespace of its own, upgraded by `ansible -m ebpf.xdp.xdp_program` to

  - fields:    the same program with the struct's fields swapped (bytes first): map_migration: fields copies every
               entry into a new map by field name, swaps the program, tops up what was counted meanwhile;
  - unchanged: another program (one store more) with the same maps: the pinned map is kept, nothing copied.

    .venv/bin/python tests/benchmarks/map_migration.py [--rounds 3] | --smoke

For N in 1, 1,000 and 100,000, the two sides are taken in turn, round after round, each on a fresh attachment
filled with N entries. Printed per N: the median wall time of the upgrade as the controller sees it (the ansible
command's start included, the same on both sides), their ratio and difference, and the window between the
copy's read of the old map and the end of the swap (the module's copy_to_swap_ms). After every fields upgrade
every entry is read back through the new layout: each carried by field name. --smoke: N of 1 and 1,000, one
round, and the figures must be sane.
"""

import argparse
import os
import shutil
import statistics
import struct
import subprocess
import time

from harness.ansible_cli import LOCALHOST, ROOT, import_module_utils, module

NETNS = "bench_mapmig"
PIN_ROOT = "/sys/fs/bpf/ebpf_xdp_bench_mapmig"
WORK = os.path.join(ROOT, ".build", "bench-mapmig")
MAX_ENTRIES = 131072

PROGRAM = r"""
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct rec {
    REC_FIELDS
};

struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __type(key, __u32);
    __type(value, struct rec);
    __uint(max_entries, MAX_ENTRIES);
} stats SEC(".maps");

SEC("xdp")
int xdp_mig_bench(struct xdp_md *ctx)
{
    __u32 key = ctx->rx_queue_index;
    struct rec *r = bpf_map_lookup_elem(&stats, &key);

    if (r) {
        __sync_fetch_and_add(&r->packets, 1);
        __sync_fetch_and_add(&r->bytes, ctx->data_end - ctx->data);
    }
    EXTRA
    return XDP_PASS;
}

char _license[] SEC("license") = "GPL";
"""

VERSIONS = {
    "v1": ("__u64 packets; __u64 bytes;", ""),
    "fields": ("__u64 bytes; __u64 packets;", ""),
    "unchanged": ("__u64 packets; __u64 bytes;", "{ volatile int unused = 1; (void)unused; }"),
}


def compile_objects():
    # pylint: disable=import-outside-toplevel
    from ansible_collections.ebpf.xdp.plugins.module_utils.bpf import compile as _compile
    os.makedirs(WORK, exist_ok=True)
    objects = {}
    for name, (fields, extra) in VERSIONS.items():
        src, obj = os.path.join(WORK, "%s.bpf.c" % name), os.path.join(WORK, "%s.o" % name)
        with open(src, "w") as out:
            out.write(PROGRAM.replace("REC_FIELDS", fields).replace("EXTRA", extra)
                      .replace("MAX_ENTRIES", str(MAX_ENTRIES)))
        subprocess.run(_compile.compile_argv("clang", src, obj, []), check=True)
        objects[name] = obj
    return objects


def teardown():
    subprocess.run(["ip", "netns", "del", NETNS], capture_output=True, check=False)
    shutil.rmtree(PIN_ROOT, ignore_errors=True)


def args(obj):
    return {"pin_root": PIN_ROOT, "interface": "b0", "netns": NETNS, "object": obj, "program": "xdp_mig_bench",
            "mode": "generic"}


def attach_filled(obj, entries):
    """v1 on a fresh veth with `entries` entries, key i holding packets i and bytes 64 i: its map's pin."""
    # pylint: disable=import-outside-toplevel
    from ansible_collections.ebpf.xdp.plugins.module_utils.bpf import libbpf as _bpf
    teardown()
    subprocess.run(["ip", "netns", "add", NETNS], check=True)
    subprocess.run(["ip", "-n", NETNS, "link", "add", "a0", "type", "veth", "peer", "name", "b0"], check=True)
    attached = module("localhost", "xdp_program", args(obj), options=LOCALHOST)
    pin = attached["maps"]["stats"]
    with _bpf.Map.from_pin(pin) as stats:
        for key in range(entries):
            stats.update(struct.pack("<I", key), struct.pack("<2Q", key, 64 * key))
    return pin


def read_back(pin):
    # pylint: disable=import-outside-toplevel
    from ansible_collections.ebpf.xdp.plugins.module_utils.bpf import libbpf as _bpf
    with _bpf.Map.from_pin(pin) as stats:
        return {struct.unpack("<I", key)[0]: struct.unpack("<2Q", value) for key, value in stats.items()}


def upgrade(objects, side, entries):
    """One upgrade of a fresh attachment holding `entries` entries: (wall seconds, copy_to_swap_ms or None)."""
    pin = attach_filled(objects["v1"], entries)
    start = time.monotonic()
    res = module("localhost", "xdp_program", args(objects[side]), options=LOCALHOST)
    wall = time.monotonic() - start
    assert res["changed"], res
    [report] = res["map_migration"]
    if side == "unchanged":
        assert report["outcome"] == "kept", report
        return wall, None
    assert report["outcome"] == "migrated" and report["entries_copied"] == entries, report
    # Every entry carried by field name: bytes first now.
    carried = read_back(pin)
    assert carried == {key: (64 * key, key) for key in range(entries)}, "entries lost or scrambled in the copy"
    window = report["copy_to_swap_ms"]
    assert 0 < window < wall * 1000, (window, wall)
    return wall, window


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--smoke", action="store_true", help="1 and 1,000 entries, one round: does it still work?")
    opts = parser.parse_args()
    sizes, rounds = ((1, 1000), 1) if opts.smoke else ((1, 1000, 100000), opts.rounds)
    import_module_utils()
    teardown()
    try:
        objects = compile_objects()
        print("%9s  %-22s %-22s %7s %9s  %s" % ("entries", "fields (median wall)", "unchanged (median wall)",
                                                "ratio", "extra", "copy to swap (median, min-max)"))
        for entries in sizes:
            walls = {"fields": [], "unchanged": []}
            windows = []
            for rnd in range(rounds):
                for side in (("fields", "unchanged") if rnd % 2 == 0 else ("unchanged", "fields")):
                    wall, window = upgrade(objects, side, entries)
                    walls[side].append(wall)
                    if window is not None:
                        windows.append(window)
            fields, unchanged = statistics.median(walls["fields"]), statistics.median(walls["unchanged"])
            # Sane: the copy costs something, and no more than the whole upgrade it is part of.
            assert fields > 0 and unchanged > 0 and all(w < 1000 * fields * 2 for w in windows), (walls, windows)
            print("%9d  %7.3f s (%d rounds)    %7.3f s (%d rounds)     %6.2fx %+6.0f ms  %.1f ms (%.1f-%.1f)" % (
                entries, fields, len(walls["fields"]), unchanged, len(walls["unchanged"]),
                fields / unchanged, 1000 * (fields - unchanged), statistics.median(windows), min(windows),
                max(windows)))
    finally:
        teardown()


if __name__ == "__main__":
    main()
