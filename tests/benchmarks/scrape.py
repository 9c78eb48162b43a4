#!/usr/bin/env python
"""The metrics exporter's scrape with many attached programs, side by side with the collection at other git
revisions.

    .venv/bin/python tests/benchmarks/scrape.py [--programs 100] [--scrapes 40] [--against REV[,REV...]] | --smoke

A network namespace of its own (bench_scrape) with veth pairs, xdp_drop_count attached to --programs of their
ends by one ebpf.xdp.datapath run (under a pin root of its own), a burst of frames from a0 into b0 so that
counters are not all zero, and one exporter per side, each reading only that namespace, on a port of its own:
this checkout's roles/xdp_metrics/files/ebpf_xdp_exporter.py with its plugins/module_utils beside it (where the
exporter imports them from when no module_utils.json bundle is there), and the same two from each REV (git
archive of this checkout). The sides are scraped in turn, round after round, so that this machine's noise falls
on all of them alike; printed are each side's median scrape time as the client sees it, the median of the
exporter's own ebpf_xdp_collect_duration_seconds, and their ratios to this checkout. Every page must show every
attached program as the collection's own (owner ebpf.xdp), or the run fails.

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


def compile_program():
    import_module_utils()
    # pylint: disable-next=import-outside-toplevel
    from ansible_collections.ebpf.xdp.plugins.module_utils.bpf import compile as _compile
    out = os.path.join(WORK, "xdp_drop_count.o")
    bpf = os.path.join(ROOT, "files", "bpf")
    subprocess.run(_compile.compile_argv("clang", os.path.join(bpf, "xdp_drop_count.bpf.c"), out,
                                         [os.path.join(bpf, "include")]), check=True)
    return out


def make_namespace(pairs):
    subprocess.run(["ip", "netns", "add", NETNS], check=True)
    commands = "link set lo up\n" + "".join("link add a%d type veth peer name b%d\nlink set a%d up\nlink set b%d up\n"
                                            % (i, i, i, i) for i in range(pairs))
    subprocess.run(["ip", "-n", NETNS, "-batch", "-"], input=commands, text=True, check=True)


def attach(obj, programs):
    pairs = (programs + 1) // 2
    ends = (["b%d" % i for i in range(pairs)] + ["a%d" % i for i in range(pairs)])[:programs]
    module("localhost", "datapath", {"pin_root": PIN_ROOT, "config": {"xdp": [
        {"interface": end, "netns": NETNS, "object": obj, "program": "xdp_drop_count", "mode": "native"}
        for end in ends]}}, options=LOCALHOST)
    module("localhost", "xdp_trafficgen", {"interface": "a0", "netns": NETNS, "src_ip": "198.18.0.1",
                                           "dst_ip": "198.18.0.2", "dst_mac": "ff:ff:ff:ff:ff:ff",
                                           "protocols": ["udp", "tcp"], "count": 1000, "engine": "socket"},
           options=LOCALHOST)


def tree_at(revision):
    """This checkout's files (revision None) or those of a git revision: the directory holding them."""
    if revision is None:
        return ROOT
    root = tempfile.mkdtemp(prefix="scrape-%s-" % revision, dir=WORK)
    archive = subprocess.run(["git", "-C", ROOT, "archive", revision, "roles/xdp_metrics/files", "plugins/module_utils"],
                             capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", root], input=archive, check=True)
    return root


def install_exporter(name, tree, port):
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
    subprocess.run(["/usr/bin/python3", os.path.join(WORK, name, "ebpf_xdp_exporter.py"), "--config", config,
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


def report(found, programs):
    rows = {name: (statistics.median(s for s, _c in runs), min(s for s, _c in runs), max(s for s, _c in runs),
                   statistics.median(c for _s, c in runs)) for name, runs in found.items()}
    base = rows["this checkout"]
    print("metrics scrape, %d xdp_drop_count programs attached, %d rounds (each side once a round, in turn)"
          % (programs, len(next(iter(found.values())))))
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
    opts = parser.parse_args()
    programs, rounds = (10, 5) if opts.smoke else (opts.programs, opts.scrapes)
    against = [] if opts.smoke else [rev for rev in opts.against.split(",") if rev]
    shutil.rmtree(WORK, ignore_errors=True)
    os.makedirs(WORK)
    started = {}
    try:
        make_namespace((programs + 1) // 2)
        attach(compile_program(), programs)
        sides = {}
        for port, revision in enumerate([None] + against, FIRST_PORT):
            name = "this checkout" if revision is None else revision
            started[name], sides[name] = install_exporter(name.replace(" ", "_"), tree_at(revision), port)
        rows = report(measure(sides, programs, rounds), programs)
        if opts.smoke and not 0 < rows["this checkout"][3] < 5:
            raise SystemExit("the exporter's collect time is not sane: %.3f s" % rows["this checkout"][3])
    finally:
        for name, config in started.items():
            stop_exporter(name.replace(" ", "_"), config)
        subprocess.run(["ip", "netns", "del", NETNS], capture_output=True, check=False)
        shutil.rmtree(PIN_ROOT, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
