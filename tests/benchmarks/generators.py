#!/usr/bin/env python
"""Traffic generators side by side on one veth pair: xdp_trafficgen's XDP engine, its socket engine, trafgen.

    .venv/bin/python tests/benchmarks/generators.py [--rounds 3] [--seconds 3] [--cpu N] | --smoke

    tx/eth0 ==== veth ====> rx/eth0 (xdp_drop_count, native, dropping)

Two namespaces of its own (unique names, removed at the end), so the lab is
not touched. Each generator sends 60-byte UDP frames (the smallest Ethernet
frame without FCS) from one thread pinned to the same CPU, for a fixed time:

- xdp_trafficgen, engine xdp: BPF_PROG_TEST_RUN with live frames, XDP_TX out
  of tx/eth0 (ebpf.xdp.xdp_trafficgen, through Ansible as a user runs it);
- xdp_trafficgen, engine socket: a raw AF_PACKET socket, frame by frame;
- netsniff-ng's trafgen (Debian package netsniff-ng): a PF_PACKET TX ring,
  qdisc bypassed, one process (`--cpus 1`) pinned with taskset.

The receiver counts what it gets with xdp_drop_count's per-protocol map
(read through ebpf.xdp.xdp_facts before and after each run), so "delivered"
is what reached XDP on the receiving end; "offered" is what the generator
says it sent. Both are divided by the generator's own sending time (the
module's `seconds`; trafgen's per-CPU time line). The generators alternate,
each round starting with the next one (the machines are shared and noisy);
medians and ratios to trafgen are printed.
"""

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import uuid

from harness import ansible_cli
from harness.ansible_cli import ROOT

BPF = os.path.join(ROOT, "files", "bpf")
PIN_BASE = "/sys/fs/bpf/ebpf_xdp_bench"
TX_MAC, RX_MAC = "02:00:00:00:b1:01", "02:00:00:00:b1:02"
TX_IP, RX_IP = "10.97.0.1", "10.97.0.2"
FRAME = 60  # bytes without FCS: 14 Ethernet + 20 IPv4 + 8 UDP + 18 padding
TRAFGEN_PACKET = "{ eth(da=%s, sa=%s), ipv4(saddr=%s, daddr=%s), udp(sp=9, dp=9), fill(0, %d) }" % (
    RX_MAC, TX_MAC, TX_IP, RX_IP, FRAME - 42)


def sh(*argv):
    return subprocess.run(argv, check=True, capture_output=True, text=True)


def module(name, args, allow_failure=False):
    """One module run on this machine, the way a task runs it (Debian's Python, as on a lab host)."""
    return ansible_cli.module("localhost", name, args, allow_failure, options=ansible_cli.LOCALHOST)


class Bench:
    """The veth pair, the compiled objects, the receiver's counter."""

    def __init__(self, cpu):
        tag = uuid.uuid4().hex[:6]
        self.tx, self.rx = "gen%s-tx" % tag, "gen%s-rx" % tag
        self.pin_root = "%s/%s" % (PIN_BASE, tag)
        self.objects = tempfile.mkdtemp(prefix="generators-")
        self.cpu = cpu
        self.trafgen_conf = os.path.join(self.objects, "udp60.cfg")

    def up(self):
        for ns in (self.tx, self.rx):
            sh("ip", "netns", "add", ns)
        sh("ip", "link", "add", "eth0", "netns", self.tx, "address", TX_MAC, "type", "veth",
           "peer", "name", "eth0", "netns", self.rx, "address", RX_MAC)
        for ns, ip in ((self.tx, TX_IP), (self.rx, RX_IP)):
            sh("ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1")
            sh("ip", "-n", ns, "addr", "add", ip + "/24", "dev", "eth0")
            sh("ip", "-n", ns, "link", "set", "eth0", "up")
        for name in ("xdp_trafficgen", "xdp_drop_count"):
            module("bpf_object", dict(src=os.path.join(BPF, name + ".bpf.c"), dest=self.object(name)))
        module("xdp_program", dict(interface="eth0", netns=self.rx, object=self.object("xdp_drop_count"),
                                   mode="native", pin_root=self.pin_root))
        with open(self.trafgen_conf, "w") as f:
            f.write(TRAFGEN_PACKET + "\n")

    def down(self):
        for ns in (self.tx, self.rx):
            subprocess.run(["ip", "netns", "del", ns], check=False, capture_output=True)
        shutil.rmtree(self.pin_root, ignore_errors=True)
        shutil.rmtree(self.objects, ignore_errors=True)
        try:
            os.rmdir(PIN_BASE)  # only when no other run's pins are left
        except OSError:
            pass

    def object(self, name):
        return os.path.join(self.objects, name + ".o")

    def counted(self):
        """UDP frames xdp_drop_count counted on rx/eth0 so far."""
        facts = module("xdp_facts", dict(interfaces=["eth0"], netns=self.rx, pin_root=self.pin_root))
        return facts["ansible_facts"]["xdp"]["interfaces"]["eth0"]["xdp"]["protocols"].get("udp", 0)

    # Each generator: (frames it sent, seconds it took to send them).

    def xdp_engine(self, seconds):
        res = module("xdp_trafficgen", dict(interface="eth0", netns=self.tx, engine="xdp",
                                            object=self.object("xdp_trafficgen"), cpus=[self.cpu], duration=seconds,
                                            src_ip=TX_IP, dst_ip=RX_IP, dst_mac=RX_MAC, size=FRAME))
        return res["total"], res["seconds"]

    def socket_engine(self, seconds):
        res = module("xdp_trafficgen", dict(interface="eth0", netns=self.tx, engine="socket", cpus=[self.cpu],
                                            duration=seconds, src_ip=TX_IP, dst_ip=RX_IP, dst_mac=RX_MAC,
                                            size=FRAME))
        return res["total"], res["seconds"]

    def trafgen(self, seconds):
        # SIGINT is how trafgen is stopped: it then prints what it sent, and per CPU for how long.
        proc = subprocess.run(["ip", "netns", "exec", self.tx, "timeout", "-s", "INT", str(seconds),
                               "taskset", "-c", str(self.cpu), "trafgen", "--dev", "eth0", "--conf", self.trafgen_conf,
                               "--cpus", "1", "--no-sock-mem", "--notouch-irq"],
                              capture_output=True, text=True, check=False)
        out = proc.stdout + proc.stderr
        sent = re.search(r"(\d+) packets outgoing", out)
        took = re.search(r"(\d+) sec, (\d+) usec on CPU\d+", out)
        if not sent or not took:
            raise SystemExit("trafgen printed no result (exit %d):\n%s" % (proc.returncode, out[-2000:]))
        return int(sent.group(1)), int(took.group(1)) + int(took.group(2)) / 1e6


GENERATORS = {
    "xdp_trafficgen, engine xdp": Bench.xdp_engine,
    "xdp_trafficgen, engine socket": Bench.socket_engine,
    "trafgen (netsniff-ng)": Bench.trafgen,
}
BASE = "trafgen (netsniff-ng)"


def run_one(bench, name, seconds):
    before = bench.counted()
    sent, took = GENERATORS[name](bench, seconds)
    delivered = bench.counted() - before
    return {"offered": sent / took, "delivered": delivered / took, "loss": 1 - delivered / sent if sent else 0.0}


def report(results, seconds, rounds, cpu):
    print("generators: 60-byte UDP, 1 thread on CPU %d, %.1f s per run, %d round(s), kernel %s"
          % (cpu, seconds, rounds, os.uname().release))
    print("receiver: xdp_drop_count (native, drop) on the veth peer; delivered = counted there")
    base = statistics.median(r["delivered"] for r in results[BASE])
    header = ("generator", "offered Mpps", "delivered Mpps", "(min - max)", "loss", "x trafgen")
    print("%-30s %13s %15s %15s %7s %10s" % header)
    for name, runs in results.items():
        offered = statistics.median(r["offered"] for r in runs)
        delivered = [r["delivered"] / 1e6 for r in runs]
        loss = statistics.median(r["loss"] for r in runs)
        print("%-30s %13.3f %15.3f %15s %6.1f%% %10.2f" % (
            name, offered / 1e6, statistics.median(delivered), "%.3f - %.3f" % (min(delivered), max(delivered)),
            100 * loss, statistics.median(delivered) * 1e6 / base if base else 0.0))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--cpu", type=int, help="CPU every generator runs on (default: the first allowed)")
    parser.add_argument("--smoke", action="store_true", help="one short round: does the benchmark still work?")
    opts = parser.parse_args()
    rounds, seconds = (1, 0.5) if opts.smoke else (opts.rounds, opts.seconds)
    if not shutil.which("trafgen"):
        raise SystemExit("trafgen not found: apt-get install netsniff-ng (scripts/setup.sh installs it)")
    cpu = opts.cpu if opts.cpu is not None else min(os.sched_getaffinity(0))
    bench = Bench(cpu)
    results = {name: [] for name in GENERATORS}
    try:
        bench.up()
        names = list(GENERATORS)
        for index in range(rounds):
            # Each round starts with the next generator: none always runs first or last.
            for name in names[index % len(names):] + names[:index % len(names)]:
                results[name].append(run_one(bench, name, seconds))
    finally:
        bench.down()
    report(results, seconds, rounds, cpu)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
