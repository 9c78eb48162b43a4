#!/usr/bin/env python
"""Forwarding between two lab hosts, side by side: tc redirect, XDP redirect, a bridge, IP forwarding.

    .venv/bin/python tests/benchmarks/forwarding.py [--rounds 3] [--seconds 3] [--on vm] | --smoke

The setups of the kernel commit that introduced bpf_redirect() (it measured
u32 + act_bpf clone_redirect 2.0 Mpps, u32 + act_bpf redirect 2.4, cls_bpf
direct-action redirect 2.5 and a Linux bridge 2.1 on 10G ixgbe), each
deployed with the collection's own modules on the lab's router namespace,
against a bridge and plain IP forwarding between the same two hosts:

    sender eth1 -> router eth0 ==(setup)==> router eth1 -> receiver eth1
    sender eth2 -> bridge eth0 ==(br0)====> bridge eth1 -> receiver eth2

The same generator drives every case: xdp_trafficgen's XDP live-frames
engine, one CPU, 60-byte UDP, for a fixed time. The receiver counts with
xdp_drop_count (dropping), so what is measured is what the forwarder
delivers; "offered" is what the generator sent. The router's and the
bridge's ingress ports run xdp_drop_count in count-and-pass mode, the same
in every case, because a veth takes XDP frames only when its peer has an
XDP program (the XDP redirect case has its own program there). Cases alternate round after round
(the machines are shared and noisy); medians and ratios to the bridge are
printed. A case the kernel cannot run (act_bpf without CONFIG_NET_ACT_BPF)
is reported as such.

With --on vm the same lab is built inside the lab's VM host (scripts/vm.sh:
Debian 12's stock 6.1 kernel, which has act_bpf and no tcx) by the lab role,
and every module runs there over SSH with the lab host's name as its netns.
The VM is emulated (no KVM), so its absolute figures are far below this
machine's; its ratios are what compares with the commit's.

--smoke runs one short round of one case (cls_bpf redirect) and the bridge,
and fails unless both delivered frames.
"""

import argparse
import os
import statistics
import subprocess
import sys

from harness import ansible_cli
from harness.ansible_cli import ROOT, playbook

OBJECTS = "/var/lib/ebpf_xdp/bench"
SOURCES = ("xdp_drop_count", "xdp_redirect", "tc_redirect", "xdp_trafficgen")
PIN_ROOT = "/sys/fs/bpf/ebpf_xdp"

RECEIVER_MAC = {"eth1": "02:00:00:00:02:02", "eth2": "02:00:00:00:02:03"}
ROUTER_ETH0_MAC = "02:00:00:00:03:01"
# The kernel commit's Mpps on 10G ixgbe, for the table.
COMMIT = {"tc redirect, act_bpf": 2.4, "tc redirect, cls_bpf": 2.5, "tc clone_redirect, act_bpf": 2.0,
          "Linux bridge": 2.1}


class Unsupported(Exception):
    """A case this kernel cannot run; the message says why."""


# "lab" (the lab hosts are namespaces of this machine) or "vm" (the same lab inside the VM host).
SITE = {"on": "lab"}
VM = "vm"


def module(host, name, args, allow_failure=False):
    if SITE["on"] == VM:
        # A lab host inside the VM is a network namespace of that name.
        host, args = VM, dict(args, netns=host)
    return ansible_cli.module(host, name, args, allow_failure)


def prepare():
    """The lab, the objects on the hosts that need them, counters on the receiver's ports."""
    if SITE["on"] == VM:
        prepare_vm()
    else:
        playbook("lab_up.yml")
        # Lab hosts are namespaces of this machine and share its files: one compile serves them all.
        os.makedirs(OBJECTS, exist_ok=True)
        for name in SOURCES:
            module("router", "bpf_object", dict(src=os.path.join(ROOT, "files", "bpf", name + ".bpf.c"),
                                                dest="%s/%s.o" % (OBJECTS, name)))
    clear_router()
    for port in ("eth1", "eth2"):
        module("receiver", "xdp_program", dict(interface=port, object=OBJECTS + "/xdp_drop_count.o", mode="native"))
    module("bridge", "xdp_program", count_and_pass("eth0"))


def prepare_vm():
    """Boot the VM, build the lab's namespaces in it with the lab role, ship objects compiled here."""
    subprocess.run(["bash", os.path.join(ROOT, "scripts", "vm.sh"), "up"], check=True)
    playbook(ansible_cli.write_play("forwarding_vm_lab.yml", [
        {"name": "The lab inside the VM", "hosts": VM, "gather_facts": False,
         "roles": [{"role": "ebpf.xdp.lab", "vars": {"lab_state": "present"}}]}]))
    ansible_cli.module(VM, "ansible.builtin.file", dict(path=OBJECTS, state="directory", mode="0755"))
    for name in SOURCES:
        local = "%s/%s.o" % (OBJECTS, name)
        ansible_cli.module("localhost", "bpf_object", dict(src=os.path.join(ROOT, "files", "bpf", name + ".bpf.c"),
                                                           dest=local))
        ansible_cli.module(VM, "ansible.builtin.copy", dict(src=local, dest=local, mode="0644"))


def count_and_pass(interface):
    return dict(interface=interface, object=OBJECTS + "/xdp_drop_count.o", mode="native",
                constants={"xdp_action": 2})


def clear_router():
    """Nothing of ours on the router's ports (deploy_xdp.yml puts tc redirect there)."""
    for port in ("eth0", "eth1"):
        module("router", "tc_program", dict(interface=port, state="absent"))
        module("router", "xdp_program", dict(interface=port, state="absent"))


def tc_setup(program, method):
    def setup():
        module("router", "xdp_program", count_and_pass("eth0"))
        res = module("router", "tc_program", dict(interface="eth0", object=OBJECTS + "/tc_redirect.o",
                                                  program=program, method=method,
                                                  constants={"redirect_ifindex": {"ifindex": "eth1"}}),
                     allow_failure=True)
        if res.get("failed"):
            raise Unsupported(res["msg"])
    return setup


def xdp_redirect_setup():
    module("router", "xdp_program", dict(interface="eth0", object=OBJECTS + "/xdp_redirect.o", mode="native",
                                         constants={"redirect_ifindex": {"ifindex": "eth1"}}))


def ip_forward_setup():
    module("router", "xdp_program", count_and_pass("eth0"))


# name -> (setup, sender port, destination MAC, receiver port)
CASES = {
    "tc redirect, tcx": (tc_setup("redirect_xmit", "tcx"), "eth1", RECEIVER_MAC["eth1"], "eth1"),
    "tc redirect, cls_bpf": (tc_setup("redirect_xmit", "cls_bpf"), "eth1", RECEIVER_MAC["eth1"], "eth1"),
    "tc redirect, act_bpf": (tc_setup("redirect_xmit", "act_bpf"), "eth1", RECEIVER_MAC["eth1"], "eth1"),
    "tc clone_redirect, tcx": (tc_setup("clone_redirect_xmit", "tcx"), "eth1", RECEIVER_MAC["eth1"], "eth1"),
    "tc clone_redirect, act_bpf": (tc_setup("clone_redirect_xmit", "act_bpf"), "eth1", RECEIVER_MAC["eth1"],
                                   "eth1"),
    "XDP redirect, native": (xdp_redirect_setup, "eth1", RECEIVER_MAC["eth1"], "eth1"),
    "IP forwarding (router)": (ip_forward_setup, "eth1", ROUTER_ETH0_MAC, "eth1"),
    "Linux bridge": (lambda: None, "eth2", RECEIVER_MAC["eth2"], "eth2"),
}
# --smoke: one case and the baseline it is compared with.
SMOKE_CASES = ("tc redirect, cls_bpf", "Linux bridge")


def udp_counted(interface):
    facts = module("receiver", "xdp_facts", dict(interfaces=[interface]))["ansible_facts"]["xdp"]
    return facts["interfaces"][interface]["xdp"]["protocols"].get("udp", 0)


def run_case(name, seconds):
    """Delivered and offered frames per second for one case, or the reason it cannot run."""
    setup, port, dst_mac, receiver_port = CASES[name]
    # Every setup puts its own XDP program on eth0 (or needs none there); a tc program must go.
    module("router", "tc_program", dict(interface="eth0", state="absent"))
    try:
        setup()
    except Unsupported as exc:
        return str(exc)
    before = udp_counted(receiver_port)
    sent = module("sender", "xdp_trafficgen", dict(
        interface=port, engine="xdp", object=OBJECTS + "/xdp_trafficgen.o", cpus=[0], duration=seconds,
        protocols=["udp"], src_ip="10.11.%d.1" % (1 if port == "eth1" else 3),
        dst_ip="10.11.2.2" if port == "eth1" else "10.11.3.2", dst_mac=dst_mac))
    delivered = udp_counted(receiver_port) - before
    return {"offered": sent["total"] / sent["seconds"], "delivered": delivered / sent["seconds"],
            "loss": 1 - delivered / sent["total"] if sent["total"] else 0.0}


def report(results):
    bridge = statistics.median(r["delivered"] for r in results["Linux bridge"])
    header = ("setup", "offered Mpps", "delivered Mpps", "loss", "x bridge", "commit (Mpps)")
    print("%-28s %14s %14s %7s %12s %14s" % header)
    for name, runs in results.items():
        commit = COMMIT.get(name, "")
        if isinstance(runs, str):
            print("%-28s %s" % (name, "not on this kernel: " + runs.split(":")[-1].strip()[:70]))
            continue
        offered = statistics.median(r["offered"] for r in runs) / 1e6
        delivered = statistics.median(r["delivered"] for r in runs) / 1e6
        loss = statistics.median(r["loss"] for r in runs)
        ratio = delivered * 1e6 / bridge if bridge else 0
        print("%-28s %14.3f %14.3f %6.1f%% %12.2f %14s" % (name, offered, delivered, 100 * loss, ratio, commit))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--smoke", action="store_true", help="one short round: does the benchmark still work?")
    parser.add_argument("--on", choices=["lab", VM], default="lab",
                        help="the lab on this machine, or the same lab inside the VM host (Debian's 6.1 kernel)")
    opts = parser.parse_args()
    SITE["on"] = opts.on
    rounds, seconds = (1, 0.3) if opts.smoke else (opts.rounds, opts.seconds)
    prepare()
    results = {name: [] for name in (SMOKE_CASES if opts.smoke else CASES)}
    try:
        for _round in range(rounds):
            for name in results:
                if isinstance(results[name], str):
                    continue
                outcome = run_case(name, seconds)
                if isinstance(outcome, str):
                    results[name] = outcome
                else:
                    results[name].append(outcome)
    finally:
        clear_router()
    print("on: %s; generator: xdp_trafficgen engine xdp, 1 CPU, 60-byte UDP, %.1f s per run, %d round(s)"
          % ("the VM (Debian 6.1 kernel, emulated)" if opts.on == VM else "this machine's lab", seconds, rounds))
    report(results)
    sys.stdout.flush()
    if opts.smoke:
        # Both cases run on every kernel the collection supports: a reason instead of figures is a failure,
        # and so is a case that delivered nothing.
        for name, runs in results.items():
            if isinstance(runs, str) or not all(run["delivered"] > 0 for run in runs):
                sys.exit("forwarding.py --smoke: %s delivered nothing: %s" % (name, runs))


if __name__ == "__main__":
    main()
