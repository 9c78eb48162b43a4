"""The lab's VM host (scripts/vm.sh): Debian 12's stock 6.1 kernel under qemu, reached over SSH.

What this machine's kernel cannot show: the collection on a real remote host
(modules shipped over SSH and run by the host's own Python), on an older kernel
that has no tcx but has act_bpf. The VM is booted once per test session
(conftest's vm fixture) unless it is up already (then it is left running). Each Ansible task costs seconds under
emulation, so every test is one playbook with few tasks; the veth pairs and
all traffic stay inside the VM.
"""

import json
import os
import re
import subprocess
import uuid

import yaml

from conftest import BPF_DIR, ROOT

ENV = dict(os.environ, ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json", ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
           ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"),
           ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, ".build", "collections"))
BIN = os.path.join(ROOT, ".venv", "bin")
PIN_ROOT_BASE = "/sys/fs/bpf/ebpf_xdp_test"
OBJ_DIR = "/var/lib/ebpf_xdp/test"


def adhoc(module, args=""):
    proc = subprocess.run([os.path.join(BIN, "ansible"), "vm", "-m", module, "-a", args],
                          capture_output=True, text=True, env=ENV, cwd=ROOT, check=False)
    try:
        return json.loads(proc.stdout)["plays"][0]["tasks"][0]["hosts"]["vm"]
    except ValueError:
        raise AssertionError("ansible printed no JSON:\n%s\n%s" % (proc.stdout, proc.stderr))


def playbook(path, tasks):
    """Run tasks on vm as one play; returns {task name: result}. A failed task fails the test
    unless it has ignore_errors."""
    with open(path, "w") as f:
        json.dump([{"name": "On the VM", "hosts": "vm", "gather_facts": False, "tasks": tasks}], f, indent=1)
    proc = subprocess.run([os.path.join(BIN, "ansible-playbook"), path], capture_output=True, text=True,
                          env=ENV, cwd=ROOT, check=False)
    try:
        out = json.loads(proc.stdout)
    except ValueError:
        raise AssertionError("ansible-playbook printed no JSON:\n%s\n%s" % (proc.stdout, proc.stderr))
    results = {}
    for task in out["plays"][0]["tasks"]:
        results[task["task"]["name"]] = task["hosts"]["vm"]
    failed = {name: {k: r.get(k) for k in ("msg", "stderr", "unreachable") if r.get(k)}
              for name, r in results.items() if r.get("failed") or r.get("unreachable")}
    assert proc.returncode == 0, json.dumps(failed or out["stats"], indent=1) + proc.stderr[-2000:]
    return results


def shipped(tmp_path, name):
    """Compile files/bpf/NAME.bpf.c on the controller and copy the object to the VM: hosts need no clang."""
    local = str(tmp_path / (name + ".o"))
    return [
        {"name": "Compile " + name, "delegate_to": "localhost",
         "ebpf.xdp.bpf_object": {"src": os.path.join(BPF_DIR, name + ".bpf.c"), "dest": local}},
        {"name": "Copy " + name,
         "ansible.builtin.copy": {"src": local, "dest": "%s/%s.o" % (OBJ_DIR, name), "mode": "0644"}},
    ]


class VmPair:
    """A veth pair inside the VM: TAG-tx/eth0 <-> TAG-rx/eth0, addresses and MACs as in conftest.Pair."""

    def __init__(self):
        self.tag = "vm" + uuid.uuid4().hex[:6]
        self.tx, self.rx = self.tag + "-tx", self.tag + "-rx"
        self.tx_mac, self.rx_mac = "02:00:00:aa:00:01", "02:00:00:aa:00:02"
        self.tx_ip, self.rx_ip = "10.99.0.1", "10.99.0.2"
        self.pin_root = "%s/%s" % (PIN_ROOT_BASE, self.tag)
        self.namespaces = (self.tx, self.rx)

    def up_task(self):
        script = ["mkdir -p %s" % OBJ_DIR, "ip netns add %s" % self.tx, "ip netns add %s" % self.rx,
                  "ip link add eth0 netns %s address %s type veth peer name eth0 netns %s address %s"
                  % (self.tx, self.tx_mac, self.rx, self.rx_mac)]
        for ns, ip in ((self.tx, self.tx_ip), (self.rx, self.rx_ip)):
            script += ["ip netns exec %s sysctl -qw net.ipv6.conf.all.disable_ipv6=1" % ns,
                       "ip -n %s addr add %s/24 dev eth0" % (ns, ip), "ip -n %s link set eth0 up" % ns]
        return {"name": "Create a veth pair in the VM (and the objects' directory)",
                "ansible.builtin.command": {"argv": ["sh", "-ec", "\n".join(script)]}}

    def down_task(self):
        # The objects stay: other tests may be loading the same builds, and the VM's disk is thrown away anyway.
        script = "%s; rm -rf %s /sys/fs/bpf/%s; rmdir %s 2>/dev/null; true" % (
            "; ".join("ip netns del " + ns for ns in self.namespaces), self.pin_root, self.tag, PIN_ROOT_BASE)
        return {"name": "Remove the namespaces and pins",
                "ansible.builtin.command": {"argv": ["sh", "-c", script]}}


def rhythm(module, args):
    """The four-step rhythm as tasks: check mode, run, check mode again, run again."""
    return [dict({"name": "%s %d" % (module, i), "ebpf.xdp." + module: args, "register": "step%d" % i},
                 **({"check_mode": True} if i in (1, 3) else {}))
            for i in (1, 2, 3, 4)]


def assert_rhythm(results, module):
    steps = [results["%s %d" % (module, i)] for i in (1, 2, 3, 4)]
    assert [s.get("changed") for s in steps] == [True, True, False, False], steps
    assert not any(s.get("failed") for s in steps), steps
    return steps[1]


def test_reachable_with_the_debian_kernel_and_the_toolchain(vm):
    assert adhoc("ansible.builtin.ping")["ping"] == "pong"
    with open(os.path.join(ROOT, "roles", "toolchain", "defaults", "main.yml")) as f:
        packages = yaml.safe_load(f)["toolchain_packages"]
    with open(os.path.join(ROOT, "roles", "toolchain", "vars", "Debian.yml")) as f:
        packages += yaml.safe_load(f)["__toolchain_witness_packages"]
    res = adhoc("ansible.builtin.shell", "uname -r; dpkg-query -W -f='${db:Status-Abbrev} ${Package}\\n' "
                + " ".join(packages))
    assert res.get("rc") == 0, res
    release, *status = res["stdout_lines"]
    assert re.fullmatch(r"6\.1\.\d+-\d+-amd64", release), release
    # The image holds what the toolchain role installs: the role has nothing to fetch there.
    assert sorted(line.split()[-1] for line in status if line.startswith("ii ")) == sorted(packages), status


def test_xdp_program_and_facts_over_ssh(vm, tmp_path):
    pair = VmPair()
    args = {"interface": "eth0", "netns": pair.rx, "object": "%s/xdp_drop_count.o" % OBJ_DIR,
            "program": "xdp_drop_count", "mode": "native", "pin_root": pair.pin_root}
    setup = [pair.up_task()] + shipped(tmp_path, "xdp_drop_count") + shipped(tmp_path, "xdp_trafficgen")
    tasks = rhythm("xdp_program", args) + [
        # The XDP generator too: its program must pass 6.1's verifier, older and stricter than this machine's.
        {"name": "Send 10 UDP and 10 TCP frames", "ebpf.xdp.xdp_trafficgen": {
            "interface": "eth0", "netns": pair.tx, "engine": "xdp", "object": "%s/xdp_trafficgen.o" % OBJ_DIR,
            "protocols": ["udp", "tcp"], "count": 10, "src_ip": pair.tx_ip, "dst_ip": pair.rx_ip,
            "dst_mac": pair.rx_mac}},
        {"name": "Read the facts", "ebpf.xdp.xdp_facts": {"netns": pair.rx, "pin_root": pair.pin_root}},
    ]
    results = playbook(str(tmp_path / "xdp.yml"), setup + [
        {"name": "Attach, send, read", "block": tasks, "always": [pair.down_task()]}])

    attached = assert_rhythm(results, "xdp_program")
    assert attached["mode"] == "native" and attached["attached"] is True, attached
    prog = results["Read the facts"]["ansible_facts"]["xdp"]["interfaces"]["eth0"]["xdp"]
    assert prog["id"] == attached["id"] and prog["owner"] == "ebpf.xdp" and prog["mode"] == "native", prog
    assert prog["protocols"] == {"udp": 10, "tcp": 10}, prog


def test_tc_program_act_bpf_and_no_tcx_on_6_1(vm, tmp_path):
    pair = VmPair()
    args = {"interface": "eth0", "netns": pair.rx, "object": "%s/tc_redirect.o" % OBJ_DIR,
            "program": "tc_drop_count", "method": "act_bpf", "constants": {"tc_action": 0},
            "pin_root": pair.pin_root}
    peer = dict(args, netns=pair.tx)
    results = playbook(str(tmp_path / "tc.yml"), [pair.up_task()] + shipped(tmp_path, "tc_redirect") + [{
        "name": "Attach by act_bpf, then tcx and auto on the peer", "block": rhythm("tc_program", args) + [
            {"name": "tcx", "ebpf.xdp.tc_program": dict(peer, method="tcx"), "ignore_errors": True},
            {"name": "auto", "ebpf.xdp.tc_program": dict(peer, method="auto")},
            {"name": "Witness", "ansible.builtin.command": {
                "argv": ["tc", "-n", pair.rx, "filter", "show", "dev", "eth0", "ingress"]}},
        ],
        "always": [pair.down_task()]}])

    attached = assert_rhythm(results, "tc_program")
    assert attached["method"] == "act_bpf" and attached["attached"] is True, attached
    witness = results["Witness"]["stdout"]
    assert " u32 " in witness and "bpf tc_drop_count id %d " % attached["id"] in witness, witness

    tcx = results["tcx"]
    assert tcx["failed"] and tcx["msg"].startswith(
        "method: tcx needs tcx links, which Linux has from 6.6; this kernel is 6.1."), tcx
    auto = results["auto"]
    assert auto["changed"] and auto["method"] == "cls_bpf", auto


class VmChain(VmPair):
    """TAG-tx/eth0 <-> TAG-rt/eth0, TAG-rt/eth1 <-> TAG-rx/eth0 inside the VM: a router between the pair."""

    def __init__(self):
        super().__init__()
        self.rt = self.tag + "-rt"
        self.namespaces = (self.tx, self.rt, self.rx)

    def up_task(self):
        script = ["mkdir -p %s" % OBJ_DIR] + ["ip netns add %s" % ns for ns in self.namespaces] + [
            "ip link add eth0 netns %s address %s type veth peer name eth0 netns %s" % (self.tx, self.tx_mac, self.rt),
            "ip link add eth1 netns %s type veth peer name eth0 netns %s address %s" % (self.rt, self.rx, self.rx_mac)]
        script += ["ip netns exec %s sysctl -qw net.ipv6.conf.all.disable_ipv6=1" % ns for ns in self.namespaces]
        script += ["ip -n %s link set %s up" % end for end in
                   ((self.tx, "eth0"), (self.rt, "eth0"), (self.rt, "eth1"), (self.rx, "eth0"))]
        return {"name": "Create a router chain in the VM (and the objects' directory)",
                "ansible.builtin.command": {"argv": ["sh", "-ec", "\n".join(script)]}}


def test_act_bpf_redirects_and_lifecycle_on_6_1(vm, tmp_path):
    """The kernel commit's own setup (u32 match-all + act_bpf), which this machine's kernel cannot run.

    Each redirect program on the router's eth0 in turn, each fed its own
    protocol, so one read at the end tells them apart: redirect_xmit (UDP)
    and clone_redirect_xmit (TCP) reach the receiver; redirect_ingress (ICMP)
    enters the router's eth1 receive path, where tc_drop_count counts it.
    Then the rhythm for an upgrade, for absent, and for a forced takeover of
    a u32 + act_bpf filter put there by tc itself.
    """
    chain = VmChain()
    obj = "%s/tc_redirect.o" % OBJ_DIR
    on_eth0 = {"interface": "eth0", "netns": chain.rt, "object": obj, "method": "act_bpf",
               "constants": {"redirect_ifindex": {"ifindex": "eth1"}}, "pin_root": chain.pin_root}
    counter = {"interface": "eth1", "netns": chain.rt, "object": obj, "program": "tc_drop_count",
               "method": "act_bpf", "constants": {"tc_action": 0}, "pin_root": chain.pin_root}
    send = {"interface": "eth0", "netns": chain.tx, "engine": "socket", "count": 20, "src_ip": chain.tx_ip,
            "dst_ip": chain.rx_ip, "dst_mac": chain.rx_mac}
    redirects = []
    for program, protocol in (("redirect_xmit", "udp"), ("clone_redirect_xmit", "tcp"), ("redirect_ingress", "icmp")):
        redirects += [
            {"name": "Attach " + program, "ebpf.xdp.tc_program": dict(on_eth0, program=program)},
            {"name": "Send %s through %s" % (protocol, program),
             "ebpf.xdp.xdp_trafficgen": dict(send, protocols=[protocol])},
            {"name": "Remove " + program, "ebpf.xdp.tc_program": dict(on_eth0, program=program, state="absent")}]
    foreign = "/sys/fs/bpf/%s/foreign" % chain.tag
    takeover = dict(counter, interface="eth0", priority=1, handle=1, force=True)
    setup = [chain.up_task()] + shipped(tmp_path, "tc_redirect") + shipped(tmp_path, "xdp_drop_count")
    counting = [
        {"name": "Count at the receiver", "ebpf.xdp.xdp_program": {
            "interface": "eth0", "netns": chain.rx, "object": "%s/xdp_drop_count.o" % OBJ_DIR,
            "mode": "native", "pin_root": chain.pin_root}},
        {"name": "Count at the router's eth1 ingress", "ebpf.xdp.tc_program": counter},
    ]
    reading = [
        {"name": "Read the receiver", "ebpf.xdp.xdp_facts": {"netns": chain.rx, "pin_root": chain.pin_root}},
        {"name": "Read the router", "ebpf.xdp.xdp_facts": {"netns": chain.rt, "pin_root": chain.pin_root}},
    ]
    lifecycle = rhythm("tc_program", dict(counter, constants={"tc_action": 2}))
    lifecycle += [dict(t, name="absent " + t["name"]) for t in rhythm("tc_program", dict(counter, state="absent"))]
    lifecycle.append({"name": "A filter put there by tc", "ansible.builtin.shell": (
        # nsenter, not tc -n: that mounts a fresh /sys, without the bpffs holding the pinned program.
        "mkdir -p {pins} && bpftool prog loadall {obj} {pins} type action && "
        "tc -n {ns} qdisc add dev eth0 clsact && "
        "nsenter --net=/run/netns/{ns} tc filter add dev eth0 ingress prio 1 handle ::1 u32 match u32 0 0 "
        "action bpf object-pinned {pins}/tc_drop_count && "
        "tc -n {ns} -j filter show dev eth0 ingress").format(obj=obj, pins=foreign, ns=chain.rt)})
    lifecycle += [dict(t, name="takeover " + t["name"]) for t in rhythm("tc_program", takeover)]
    lifecycle.append({"name": "Witness", "ansible.builtin.command": {
        "argv": ["tc", "-n", chain.rt, "filter", "show", "dev", "eth0", "ingress"]}})
    results = playbook(str(tmp_path / "act_bpf.yml"), setup + [
        {"name": "Redirect by act_bpf, then the lifecycle", "block": counting + redirects + reading + lifecycle,
         "always": [chain.down_task()]}])

    receiver = results["Read the receiver"]["ansible_facts"]["xdp"]["interfaces"]["eth0"]["xdp"]
    assert receiver["protocols"] == {"udp": 20, "tcp": 20}, receiver
    [eth1] = results["Read the router"]["ansible_facts"]["xdp"]["interfaces"]["eth1"]["tc"]["ingress"]
    assert eth1["method"] == "act_bpf" and eth1["protocols"] == {"icmp": 20}, eth1
    for program in ("redirect_xmit", "clone_redirect_xmit", "redirect_ingress"):
        attached = results["Attach " + program]
        assert attached["changed"] and attached["method"] == "act_bpf" and attached["verdict"] == "drop", attached
        assert results["Remove " + program]["changed"], results["Remove " + program]

    upgraded = results["tc_program 2"]
    assert [results["tc_program %d" % i]["changed"] for i in (1, 2, 3, 4)] == [True, True, False, False]
    assert upgraded["id"] != eth1["id"] and upgraded["diff"]["after"]["constants"] == {"tc_action": 2}, upgraded
    assert [results["absent tc_program %d" % i]["changed"] for i in (1, 2, 3, 4)] == [True, True, False, False]

    foreign_filter = [f for f in json.loads(results["A filter put there by tc"]["stdout"]) if "options" in f]
    [foreign_id] = [a["prog"]["id"] for f in foreign_filter for a in f["options"].get("actions", []) if a.get("prog")]
    steps = [results["takeover tc_program %d" % i] for i in (1, 2, 3, 4)]
    assert [s["changed"] for s in steps] == [True, True, False, False], steps
    taken = steps[1]
    assert taken["id"] != foreign_id and taken["method"] == "act_bpf" and taken["priority"] == 1, taken
    assert "bpf tc_drop_count id %d " % taken["id"] in results["Witness"]["stdout"], results["Witness"]
