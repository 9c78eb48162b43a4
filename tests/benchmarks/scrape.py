#!/usr/bin/env python
"""The metrics exporter's scrape with many attached programs, side by side with the collection at other git
revisions.

    .venv/bin/python tests/benchmarks/scrape.py [--programs 100] [--scrapes 40] [--against REV[,REV...]]
                                                [--struct-maps] | --smoke

A network namespace of its own (bench_scrape) with veth pairs, xdp_drop_count attached to --programs of their
ends by one ebpf.xdp.datapath run (under a pin root of its own), a burst of frames from a0 into b0 so that
counters are not all zero, and one exporter per side, each reading only that namespace, on a port of its own:
this checkout's roles/xdp_metrics/files/ebpf_xdp_exporter.py with its plugins/module_utils beside it (where the
exporter imports them from when no module_utils.json bundle is there), and the same two from each REV (git
archive of this checkout). The sides are scraped in turn, round after round, so that this machine's noise falls
on all of them alike; printed are each side's median scrape time as the client sees it, the median of the
exporter's own ebpf_xdp_collect_duration_seconds, and their ratios to this checkout. Every page must show every
attached program as the collection's own (owner ebpf.xdp), or the run fails.

--struct-maps: the programs are xdp_struct_stats (below) instead of xdp_drop_count: per XDP action a per-CPU
struct of packets and bytes (as xdp-tools' xdp_stats_map), per flow (a struct key of addresses, ports and
protocol) a struct of packets, bytes and a 4-bucket size histogram, in a hash of at most 1024 flows, and
xdp_drop_count's 256-entry proto_count; the burst comes from 64 source ports. A side "this checkout, maps: []"
is the same exporter told to decode no map (the exporter of before, on the same code).

--smoke: 10 programs, 5 rounds, this checkout only.
"""

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

from harness.ansible_cli import LOCALHOST, ROOT, import_module_utils, module

NETNS = "bench_scrape"
PIN_ROOT = "/sys/fs/bpf/ebpf_xdp_bench_scrape"
FIRST_PORT = 9480
WORK = os.path.join(ROOT, ".build", "bench-scrape")


STRUCT_STATS = r"""
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/in.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>

struct action_stats { __u64 packets; __u64 bytes; };
struct flow { __u32 saddr; __u32 daddr; __u16 sport; __u16 dport; __u8 proto; __u8 pad[3]; };
struct flow_stats { __u64 packets; __u64 bytes; __u64 sizes[4]; };

struct { __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY); __type(key, __u32); __type(value, struct action_stats);
         __uint(max_entries, 5); } action_stats SEC(".maps");
struct { __uint(type, BPF_MAP_TYPE_HASH); __type(key, struct flow); __type(value, struct flow_stats);
         __uint(max_entries, 1024); } flows SEC(".maps");
struct { __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY); __type(key, __u32); __type(value, __u64);
         __uint(max_entries, 256); } proto_count SEC(".maps");

SEC("xdp")
int xdp_struct_stats(struct xdp_md *ctx)
{
    void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
    __u64 len = end - data;
    __u32 action = XDP_DROP;
    struct action_stats *stats = bpf_map_lookup_elem(&action_stats, &action);
    if (stats) {
        stats->packets++;
        stats->bytes += len;
    }
    struct ethhdr *eth = data;
    struct iphdr *ip = (void *)(eth + 1);
    struct udphdr *udp = (void *)(ip + 1);
    if ((void *)(udp + 1) > end || eth->h_proto != __builtin_bswap16(ETH_P_IP))
        return XDP_DROP;
    __u32 proto = ip->protocol;
    __u64 *count = bpf_map_lookup_elem(&proto_count, &proto);
    if (count)
        (*count)++;
    struct flow key = {.saddr = ip->saddr, .daddr = ip->daddr, .sport = udp->source, .dport = udp->dest,
                       .proto = ip->protocol};
    struct flow_stats *seen = bpf_map_lookup_elem(&flows, &key);
    if (!seen) {
        struct flow_stats fresh = {};
        bpf_map_update_elem(&flows, &key, &fresh, BPF_NOEXIST);
        seen = bpf_map_lookup_elem(&flows, &key);
    }
    if (seen) {
        __sync_fetch_and_add(&seen->packets, 1);
        __sync_fetch_and_add(&seen->bytes, len);
        __sync_fetch_and_add(&seen->sizes[len < 128 ? 0 : len < 512 ? 1 : len < 1024 ? 2 : 3], 1);
    }
    return XDP_DROP;
}
char _license[] SEC("license") = "GPL";
"""


def compile_program(struct_maps=False):
    import_module_utils()
    # pylint: disable-next=import-outside-toplevel
    from ansible_collections.ebpf.xdp.plugins.module_utils.bpf import compile as _compile
    bpf = os.path.join(ROOT, "files", "bpf")
    source = os.path.join(bpf, "xdp_drop_count.bpf.c")
    if struct_maps:
        source = os.path.join(WORK, "xdp_struct_stats.bpf.c")
        with open(source, "w", encoding="utf-8") as out:
            out.write(STRUCT_STATS)
    out = os.path.join(WORK, os.path.basename(source).replace(".bpf.c", ".o"))
    subprocess.run(_compile.compile_argv("clang", source, out, [os.path.join(bpf, "include")]), check=True)
    return out


def make_namespace(pairs):
    subprocess.run(["ip", "netns", "add", NETNS], check=True)
    commands = "link set lo up\n" + "".join("link add a%d type veth peer name b%d\nlink set a%d up\nlink set b%d up\n"
                                            % (i, i, i, i) for i in range(pairs))
    subprocess.run(["ip", "-n", NETNS, "-batch", "-"], input=commands, text=True, check=True)


def attach(obj, programs, program="xdp_drop_count"):
    pairs = (programs + 1) // 2
    ends = (["b%d" % i for i in range(pairs)] + ["a%d" % i for i in range(pairs)])[:programs]
    module("localhost", "datapath", {"pin_root": PIN_ROOT, "config": {"xdp": [
        {"interface": end, "netns": NETNS, "object": obj, "program": program, "mode": "native"}
        for end in ends]}}, options=LOCALHOST)
    ports = {"src_port": 1024, "src_port_max": 1087} if program != "xdp_drop_count" else {}
    module("localhost", "xdp_trafficgen", dict({"interface": "a0", "netns": NETNS, "src_ip": "198.18.0.1",
                                                "dst_ip": "198.18.0.2", "dst_mac": "ff:ff:ff:ff:ff:ff",
                                                "protocols": ["udp", "tcp"], "count": 1000, "engine": "socket"},
                                               **ports), options=LOCALHOST)


def tree_at(revision):
    """This checkout's files (revision None) or those of a git revision: the directory holding them."""
    if revision is None:
        return ROOT
    root = tempfile.mkdtemp(prefix="scrape-%s-" % revision, dir=WORK)
    archive = subprocess.run(["git", "-C", ROOT, "archive", revision, "roles/xdp_metrics/files", "plugins/module_utils"],
                             capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", root], input=archive, check=True)
    return root


def install_exporter(name, tree, port, extra=None):
    """The exporter of a tree with its module_utils beside it (ansible_collections/ebpf/xdp/plugins/module_utils);
    started; its configuration's path and URL."""
    home = os.path.join(WORK, name)
    shutil.rmtree(home, ignore_errors=True)
    os.makedirs(home)
    files = os.path.join(tree, "roles", "xdp_metrics", "files")
    shutil.copy(os.path.join(files, "ebpf_xdp_exporter.py"), home)
    if os.path.exists(os.path.join(files, "ebpf_xdp_web.py")):  # its server, apart since issue 37
        shutil.copy(os.path.join(files, "ebpf_xdp_web.py"), home)
    shutil.copytree(os.path.join(tree, "plugins", "module_utils"),
                    os.path.join(home, "ansible_collections", "ebpf", "xdp", "plugins", "module_utils"),
                    ignore=shutil.ignore_patterns("__pycache__", "*.md"))
    config = os.path.join(home, "config.json")
    settings = {"service": "bench-scrape-" + name, "pin_root": PIN_ROOT, "netns": [NETNS], "port": port,
                "pid_file": os.path.join(home, "exporter.pid")}
    settings.update(extra or {})
    with open(os.path.join(home, "ebpf_xdp_exporter.py"), encoding="utf-8") as src:
        if '"cache_seconds"' in src.read():
            settings["cache_seconds"] = 0  # every scrape measured collects (an exporter with the page cache)
    with open(config, "w") as out:
        json.dump(settings, out)
    proc = subprocess.run(["/usr/bin/python3", os.path.join(home, "ebpf_xdp_exporter.py"), "--config", config,
                           "--start", "--log-file", os.path.join(home, "exporter.log")],
                          capture_output=True, text=True, check=False)
    if proc.returncode:
        raise SystemExit("the exporter of %s did not start: %s%s" % (name, proc.stdout, proc.stderr))
    return config, "http://127.0.0.1:%d/metrics" % port


def stop_exporter(name, config):
    subprocess.run(["/usr/bin/python3", os.path.join(WORK, re.sub(r"[^\w.-]", "_", name), "ebpf_xdp_exporter.py"),
                    "--config", config,
                    "--stop"], capture_output=True, check=False)


def scrape(opener, url, programs, name):
    """One scrape: (seconds as the client saw them, the exporter's collect seconds)."""
    start = time.monotonic()
    with opener.open(url, timeout=60) as resp:
        page = resp.read().decode()
    seconds = time.monotonic() - start
    ours = len(re.findall(r'^ebpf_xdp_program_info\{[^}]*owner="ebpf\.xdp"', page, re.M))
    if ours != programs:
        raise SystemExit("%s's exporter shows %d programs of ebpf.xdp, %d are attached" % (name, ours, programs))
    collect = re.search(r"^ebpf_xdp_collect_duration_seconds (\S+)$", page, re.M)
    return seconds, float(collect.group(1))


def measure(sides, programs, rounds):
    """{side: [(scrape seconds, collect seconds)]}, the sides in turn (in a rotating order) round after round."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    names = list(sides)
    for name in names:  # a first scrape each, not measured: imports and the caches of a new process
        scrape(opener, sides[name], programs, name)
    found = {name: [] for name in names}
    for rnd in range(rounds):
        for name in names[rnd % len(names):] + names[:rnd % len(names)]:
            found[name].append(scrape(opener, sides[name], programs, name))
    return found


def report(found, programs, program="xdp_drop_count"):
    rows = {name: (statistics.median(s for s, _c in runs), min(s for s, _c in runs), max(s for s, _c in runs),
                   statistics.median(c for _s, c in runs)) for name, runs in found.items()}
    base = rows["this checkout"]
    print("metrics scrape, %d %s programs attached, %d rounds (each side once a round, in turn)"
          % (programs, program, len(next(iter(found.values())))))
    print("| collection | scrape ms (median) | min-max | collect ms (median) | scrape / this checkout |")
    print("|---|---:|---:|---:|---:|")
    for name, (median, low, high, collect) in rows.items():
        print("| %s | %.1f | %.1f-%.1f | %.1f | %.2f |"
              % (name, 1000 * median, 1000 * low, 1000 * high, 1000 * collect, median / base[0]))
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--programs", type=int, default=100)
    parser.add_argument("--scrapes", type=int, default=40, help="rounds: each side is scraped once a round")
    parser.add_argument("--against", default="", help="git revisions to compare with, comma-separated")
    parser.add_argument("--smoke", action="store_true", help="10 programs, 5 rounds, this checkout only")
    parser.add_argument("--struct-maps", action="store_true",
                        help="xdp_struct_stats programs (struct maps), and this checkout with maps: [] beside")
    opts = parser.parse_args()
    programs, rounds = (10, 5) if opts.smoke else (opts.programs, opts.scrapes)
    against = [] if opts.smoke else [rev for rev in opts.against.split(",") if rev]
    shutil.rmtree(WORK, ignore_errors=True)
    os.makedirs(WORK)
    started = {}
    try:
        make_namespace((programs + 1) // 2)
        program = "xdp_struct_stats" if opts.struct_maps else "xdp_drop_count"
        attach(compile_program(opts.struct_maps), programs, program)
        sides = {}
        variants = [(None, None)] + ([("this checkout, maps: []", {"maps": []})] if opts.struct_maps else []) + [
            (revision, None) for revision in against]
        for port, (revision, extra) in enumerate(variants, FIRST_PORT):
            name = revision if revision else "this checkout"
            tree = tree_at(None if extra or revision is None else revision)
            started[name], sides[name] = install_exporter(re.sub(r"[^\w.-]", "_", name), tree, port, extra)
        rows = report(measure(sides, programs, rounds), programs, program)
        if opts.smoke and not 0 < rows["this checkout"][3] < 5:
            raise SystemExit("the exporter's collect time is not sane: %.3f s" % rows["this checkout"][3])
    finally:
        for name, config in started.items():
            stop_exporter(name, config)
        subprocess.run(["ip", "netns", "del", NETNS], capture_output=True, check=False)
        shutil.rmtree(PIN_ROOT, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
