#!/usr/bin/env python
"""What backend: bcc costs per load: the same program through bcc and through a cached libbpf object.

    .venv/bin/python tests/benchmarks/bcc_load.py [--rounds 5] [--headers DIR] | --smoke

The program is xdp_drop_count in both dialects: files/bpf/bcc/xdp_drop_count.c
(bcc, compiled on every load) and files/bpf/xdp_drop_count.bpf.c (compiled
once by ebpf.xdp.bpf_object; later tasks find it in the object cache). Each
round makes both modules really load: the action flips between XDP_DROP and
XDP_PASS (bcc: cflags -DXDP_ACTION=N; libbpf: constants xdp_action), so
every xdp_program task loads, verifies and swaps a program on a veth of a
namespace of its own, through Debian's Python. Printed, as medians over the
rounds:

  - task: the xdp_program task as a controller sees it (ansible start-up included);
  - libbpf task + bpf_object: the same plus the bpf_object task that finds
    the object in its cache, the whole cost of a libbpf deploy step;
  - load only: _bcc.load and _loader.load in one process (compile + load,
    or open + load), without ansible or attach.

--smoke runs one round.
"""

import argparse
import glob
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

from harness.ansible_cli import LOCALHOST, ROOT, import_module_utils, module

SYSTEM_PYTHON = "/usr/bin/python3"
BCC_SOURCE = os.path.join(ROOT, "files", "bpf", "bcc", "xdp_drop_count.c")
BPF_SOURCE = os.path.join(ROOT, "files", "bpf", "xdp_drop_count.bpf.c")
INCLUDE = os.path.join(ROOT, "files", "bpf", "include")
# Loading in one process, under the Python that has bcc; prints two durations in seconds.
LOAD_ONLY = """
import sys, time
sys.path.insert(0, %(collections)r)
from ansible_collections.ebpf.xdp.plugins.module_utils.bpf import bcc as _bcc, loader as _loader
start = time.monotonic()
with _bcc.load(%(source)r, "xdp_drop_count", "xdp", ["-DXDP_ACTION=%(action)d"], %(headers)r):
    bcc = time.monotonic() - start
start = time.monotonic()
with _loader.load(%(object)r, "xdp_drop_count", "xdp", {"xdp_action": %(action)d}):
    libbpf = time.monotonic() - start
print(bcc, libbpf)
"""


def sh(*argv):
    return subprocess.run(argv, check=True, capture_output=True, text=True).stdout


def timed(*args, **kwargs):
    start = time.monotonic()
    result = module("localhost", *args, options=LOCALHOST, **kwargs)
    return time.monotonic() - start, result


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--headers", help="kernel_headers for bcc (default: the first /usr/src/linux-headers-*-amd64 "
                                          "when /lib/modules/$(uname -r)/build does not exist)")
    parser.add_argument("--smoke", action="store_true", help="one round")
    opts = parser.parse_args()
    rounds = 1 if opts.smoke else opts.rounds
    headers = opts.headers
    if headers is None and not os.path.exists("/lib/modules/%s/build" % os.uname().release):
        found = sorted(glob.glob("/usr/src/linux-headers-*-amd64"))
        headers = found[0] if found else None
    import_module_utils()

    tag = uuid.uuid4().hex[:6]
    ns = "bccb" + tag
    pin_root = "/sys/fs/bpf/ebpf_xdp_bench_bcc_" + tag
    work = tempfile.mkdtemp(prefix="bcc_load_")
    sh("ip", "netns", "add", ns)
    try:
        sh("ip", "-n", ns, "link", "add", "eth0", "type", "veth", "peer", "name", "eth1")
        sh("ip", "-n", ns, "link", "set", "eth0", "up")
        sh("ip", "-n", ns, "link", "set", "eth1", "up")
        obj = os.path.join(work, "xdp_drop_count.o")
        compile_args = dict(src=BPF_SOURCE, dest=obj, include_dirs=[INCLUDE])
        module("localhost", "bpf_object", compile_args, options=LOCALHOST)
        base = dict(netns=ns, mode="native", pin_root=pin_root)
        bcc_args = dict(base, interface="eth0", backend="bcc", source=BCC_SOURCE, kernel_headers=headers)
        libbpf_args = dict(base, interface="eth1", object=obj, program="xdp_drop_count")
        times = {"bcc task": [], "libbpf task": [], "libbpf task + bpf_object": [], "bcc load only": [],
                 "libbpf load only": []}
        for i in range(rounds):
            action = 2 if i % 2 == 0 else 1
            seconds, result = timed("xdp_program", dict(bcc_args, cflags=["-DXDP_ACTION=%d" % action]))
            assert result["changed"], result
            times["bcc task"].append(seconds)
            cached, result = timed("bpf_object", compile_args)
            assert not result["changed"], result
            seconds, result = timed("xdp_program", dict(libbpf_args, constants={"xdp_action": action}))
            assert result["changed"], result
            times["libbpf task"].append(seconds)
            times["libbpf task + bpf_object"].append(seconds + cached)
            out = sh(SYSTEM_PYTHON, "-c", LOAD_ONLY % dict(collections=os.path.join(ROOT, ".build", "collections"),
                                                           source=BCC_SOURCE, action=action, headers=headers,
                                                           object=obj))
            bcc, libbpf = (float(x) for x in out.split())
            times["bcc load only"].append(bcc)
            times["libbpf load only"].append(libbpf)
        print("xdp_drop_count, %d round(s), kernel %s, headers %s"
              % (rounds, os.uname().release, headers or "/lib/modules"))
        print("%-28s %10s %10s" % ("", "median s", "max s"))
        for name, values in times.items():
            print("%-28s %10.3f %10.3f" % (name, statistics.median(values), max(values)))
        med = {name: statistics.median(values) for name, values in times.items()}
        print("bcc task / libbpf task: %.2fx; / (libbpf task + cached bpf_object): %.2fx; load only: %.0fx" % (
            med["bcc task"] / med["libbpf task"], med["bcc task"] / med["libbpf task + bpf_object"],
            med["bcc load only"] / med["libbpf load only"]))
    finally:
        for iface in ("eth0", "eth1"):
            module("localhost", "xdp_program", dict(interface=iface, netns=ns, state="absent", pin_root=pin_root),
                   options=LOCALHOST, allow_failure=True)
        sh("ip", "netns", "del", ns)
        subprocess.run(["rm", "-rf", work, pin_root], check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
