#!/usr/bin/env python
"""The Prometheus exporter of roles/xdp_metrics under load: scrape time and memory with 1 and 100 programs.

    .venv/bin/python tests/benchmarks/metrics.py [--programs 1,100] [--scrapes 20] | --smoke

A namespace of its own holds veth pairs; xdp_drop_count is attached
natively to 1, then to 100 of their ends with ebpf.xdp.xdp_program (one
playbook, a loop), each with its own pinned proto_count map (a per-CPU
array of 256 counters, read whole on every scrape), and a burst of frames
makes the counters non-zero. The exporter (roles/xdp_metrics/files/
ebpf_xdp_exporter.py, with the checkout's module_utils) serves on a free
loopback port; after each step it is scraped --scrapes times over HTTP, one
after the other. Printed per step: the median and the slowest scrape as the
client sees it, the exporter's own collect time (ebpf_xdp_collect_duration_seconds),
the size of the page and its number of samples, and the exporter's resident
memory after the scrapes (VmRSS) and at its peak (VmHWM). --smoke runs 1 and
5 programs with 3 scrapes.
"""

import argparse
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid

from harness.ansible_cli import BIN, COLLECTIONS, ENV, ROOT

EXPORTER = os.path.join(ROOT, "roles", "xdp_metrics", "files", "ebpf_xdp_exporter.py")
SYSTEM_PYTHON = "/usr/bin/python3"
ATTACH = """
- name: Attach xdp_drop_count
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Attach
      ebpf.xdp.xdp_program:
        interface: "{{ item }}"
        netns: "{{ bench_netns }}"
        object: "{{ bench_object }}"
        program: xdp_drop_count
        mode: native
        pin_root: "{{ bench_pin_root }}"
      loop: "{{ bench_interfaces }}"
"""

sys.path.insert(0, COLLECTIONS)
from ansible_collections.ebpf.xdp.plugins.module_utils.bpf import (  # noqa: E402 pylint: disable=wrong-import-position
    compile as _compile)


def sh(*argv):
    return subprocess.run(argv, check=True, capture_output=True, text=True).stdout


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return int(port)


class Bench:
    def __init__(self, work):
        tag = uuid.uuid4().hex[:6]
        self.work = work
        self.netns = "xmb%s" % tag
        self.pin_root = "/sys/fs/bpf/ebpf_xdp_bench/%s" % tag
        self.pairs = 0
        self.attached = []
        self.port = free_port()
        self.config = os.path.join(work, "exporter.json")
        self.pid_file = os.path.join(work, "exporter.pid")
        self.object = os.path.join(work, "xdp_drop_count.o")
        self.pid = None

    def up(self):
        sh("ip", "netns", "add", self.netns)
        sh("ip", "netns", "exec", self.netns, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1")
        sh("ip", "-n", self.netns, "link", "set", "lo", "up")
        bpf = os.path.join(ROOT, "files", "bpf")
        sh(*_compile.compile_argv("clang", os.path.join(bpf, "xdp_drop_count.bpf.c"), self.object,
                                  [os.path.join(bpf, "include")]))
        with open(self.config, "w", encoding="utf-8") as out:
            json.dump({"service": "bench", "pin_root": self.pin_root, "netns": [self.netns], "port": self.port,
                       "pid_file": self.pid_file}, out)

    def interfaces(self, count):
        """count interfaces: ends of veth pairs a<i> <-> b<i> in the namespace (b ends first, a2 gets frames)."""
        while 2 * self.pairs < count:
            i = self.pairs
            sh("ip", "-n", self.netns, "link", "add", "a%d" % i, "type", "veth", "peer", "name", "b%d" % i)
            for end in ("a%d" % i, "b%d" % i):
                sh("ip", "-n", self.netns, "link", "set", end, "up")
            self.pairs += 1
        names = ["b%d" % i for i in range(self.pairs)] + ["a%d" % i for i in range(self.pairs)]
        return names[:count]

    def attach(self, count):
        todo = [name for name in self.interfaces(count) if name not in self.attached]
        playbook = os.path.join(self.work, "attach.yml")
        with open(playbook, "w", encoding="utf-8") as out:
            out.write(ATTACH)
        extra = {"bench_netns": self.netns, "bench_object": self.object, "bench_pin_root": self.pin_root,
                 "bench_interfaces": todo, "ansible_python_interpreter": SYSTEM_PYTHON}
        proc = subprocess.run([os.path.join(BIN, "ansible-playbook"), "-i", "localhost,", "-c", "local", playbook,
                               "-e", json.dumps(extra)], capture_output=True, text=True, env=ENV, cwd=ROOT,
                              check=False)
        if proc.returncode != 0:
            raise SystemExit("attaching failed:\n%s%s" % (proc.stdout[-3000:], proc.stderr[-2000:]))
        self.attached += todo
        # Frames from a0 into b0 (dropped and counted there): non-zero counters to read.
        self.burst()

    def burst(self):
        mac = sh("ip", "-n", self.netns, "-br", "link", "show", "b0").split()[2]
        argv = [os.path.join(BIN, "ansible"), "localhost", "-i", "localhost,", "-c", "local",
                "-e", "ansible_python_interpreter=%s" % SYSTEM_PYTHON, "-m", "ebpf.xdp.xdp_trafficgen",
                "-a", json.dumps({"interface": "a0", "netns": self.netns, "src_ip": "10.97.0.1",
                                  "dst_ip": "10.97.0.2", "dst_mac": mac, "protocols": ["udp", "tcp"],
                                  "count": 1000, "engine": "socket"})]
        subprocess.run(argv, capture_output=True, text=True, env=ENV, cwd=ROOT, check=True)

    def start(self):
        env = dict(os.environ, PYTHONPATH=COLLECTIONS)
        out = subprocess.run([SYSTEM_PYTHON, "-s", EXPORTER, "--config", self.config, "--start", "--log-file",
                              os.path.join(self.work, "exporter.log")], capture_output=True, text=True, env=env,
                             check=False)
        if out.returncode != 0:
            raise SystemExit("the exporter did not start: %s" % out.stderr)
        self.pid = json.loads(out.stdout)["pid"]

    def scrape(self):
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        start = time.monotonic()
        with opener.open("http://127.0.0.1:%d/metrics" % self.port, timeout=60) as resp:
            text = resp.read().decode()
        return time.monotonic() - start, text

    def memory(self):
        with open("/proc/%d/status" % self.pid, encoding="ascii") as src:
            status = dict(line.split(":", 1) for line in src.read().splitlines() if ":" in line)
        return {k: int(status[k].split()[0]) / 1024 for k in ("VmRSS", "VmHWM")}

    def measure(self, scrapes):
        seconds, collect = [], []
        for _attempt in range(scrapes):
            took, text = self.scrape()
            seconds.append(took)
            collect.append(float(re.search(r"^ebpf_xdp_collect_duration_seconds (\S+)$", text, re.M).group(1)))
        programs = len(re.findall(r"^ebpf_xdp_program_info\{", text, re.M))
        samples = sum(1 for line in text.splitlines() if line and not line.startswith("#"))
        return dict(programs=programs, scrape_median_ms=1000 * statistics.median(seconds),
                    scrape_max_ms=1000 * max(seconds), collect_median_ms=1000 * statistics.median(collect),
                    page_kib=len(text) / 1024, samples=samples, **{k + "_mib": v for k, v in self.memory().items()})

    def down(self):
        if self.pid:
            subprocess.run([SYSTEM_PYTHON, "-s", EXPORTER, "--config", self.config, "--stop"],
                           env=dict(os.environ, PYTHONPATH=COLLECTIONS), capture_output=True, check=False)
        subprocess.run(["ip", "netns", "del", self.netns], capture_output=True, check=False)
        shutil.rmtree(self.pin_root, ignore_errors=True)
        try:
            os.rmdir(os.path.dirname(self.pin_root))
        except OSError:
            pass


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--programs", default="1,100", help="program counts to measure, increasing")
    parser.add_argument("--scrapes", type=int, default=20)
    parser.add_argument("--smoke", action="store_true", help="1 and 5 programs, 3 scrapes: does it still work?")
    args = parser.parse_args()
    counts = [1, 5] if args.smoke else [int(n) for n in args.programs.split(",")]
    scrapes = 3 if args.smoke else args.scrapes
    work = tempfile.mkdtemp(prefix="xdp_metrics_bench_")
    bench = Bench(work)
    rows = []
    try:
        bench.up()
        for count in counts:
            bench.attach(count)
            if bench.pid is None:
                bench.start()
            rows.append(bench.measure(scrapes))
            if rows[-1]["programs"] != count:
                raise SystemExit("the exporter shows %d programs, %d are attached" % (rows[-1]["programs"], count))
    finally:
        bench.down()
        shutil.rmtree(work, ignore_errors=True)
    print("exporter: %d sequential scrapes per step over loopback, %d CPUs, kernel %s"
          % (scrapes, os.cpu_count(), os.uname().release))
    print("%8s %12s %10s %12s %9s %8s %8s %8s" % ("programs", "scrape ms", "max ms", "collect ms", "page KiB",
                                                  "samples", "RSS MiB", "peak MiB"))
    for row in rows:
        print("%8d %12.1f %10.1f %12.1f %9.1f %8d %8.1f %8.1f" % (
            row["programs"], row["scrape_median_ms"], row["scrape_max_ms"], row["collect_median_ms"],
            row["page_kib"], row["samples"], row["VmRSS_mib"], row["VmHWM_mib"]))
    print(json.dumps({"metrics_exporter": rows}))


if __name__ == "__main__":
    main()
