"""The lab's VM host (scripts/vm.sh): Debian 12's stock 6.1 kernel under qemu, reached over SSH.

What this machine cannot show: the collection on a real remote host (modules
shipped over SSH and run by the host's own Python, objects compiled on the
controller). What the 6.1 kernel itself does (no tcx, act_bpf, pktgen, the
older verifier) is tested by the kernel-dependent tests, which make test-vm
runs inside the VM; what needs Ansible there is tested here, such as the
traffic roles' pktgen engine through playbooks/traffic.yml. The VM is booted once per test session
(conftest's vm fixture) unless it is up already (then it is left running). Each Ansible task costs seconds under
emulation, so every test is one playbook with few tasks; the veth pairs and
all traffic stay inside the VM.
"""

import contextlib
import json
import os
import re
import subprocess
import uuid

import pytest
import yaml

from conftest import BPF_DIR, ROOT, ansible_playbook, changed_by_host, changed_tasks, task_results

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


def role_task_result(out, role, name, host="vm"):
    """host's result of the task called name in role (shown as "ROLE : name", the role possibly by its FQCN) in
    ansible_playbook()'s output; a play's task of the same name (traffic.yml's include_role) does not count."""
    for play in out["plays"]:
        for task in play["tasks"]:
            shown_role, sep, shown_name = task["task"]["name"].partition(" : ")
            if sep and shown_name == name and shown_role.split(".")[-1] == role and host in task["hosts"]:
                return task["hosts"][host]
    raise KeyError("%s : %s" % (role, name))


PKTGEN_LOADED = "test -d /proc/net/pktgen && echo loaded || echo absent"


@contextlib.contextmanager
def root_veth(work, prefix):
    """A veth pair in the VM's own namespace, where xdp_rollout's gate reads the facts, and a pin root of its own:
    (interface, pin_root); both removed afterwards. work: a local directory for the playbooks."""
    tag = prefix + uuid.uuid4().hex[:6]
    iface, peer = tag + "-a", tag + "-b"
    pin_root = "%s/%s" % (PIN_ROOT_BASE, tag)
    playbook(os.path.join(work, "up.yml"), [{"name": "Create a veth pair in the VM", "ansible.builtin.command": {
        "argv": ["sh", "-ec", "ip link add %s type veth peer name %s; ip link set %s up; ip link set %s up"
                 % (iface, peer, iface, peer)]}}])
    try:
        yield iface, pin_root
    finally:
        playbook(os.path.join(work, "down.yml"), [{"name": "Remove the pins and the veth pair",
                                                   "ansible.builtin.command": {"argv": [
                                                       "sh", "-c", "rm -rf %s; ip link del %s; true"
                                                       % (pin_root, iface)]}}])


def deploy_vars(iface, pin_root, program):
    """deploy_xdp.yml's variables for the VM: one batch, no settling, program (an xdp_deploy_programs entry) on
    iface; the image holds the toolchain already and the VM reaches no package mirror."""
    return {"toolchain_apt_update_cache": False,
            "xdp_rollout_batches": [1], "xdp_rollout_settle": 0, "xdp_rollout_rate_interval": 0,
            "xdp_deploy_pin_root": pin_root, "xdp_deploy_programs": [dict(program, interface=iface)]}


# The longest first: make test-vm runs these on two workers (--dist loadgroup), this one and then the benchmark's
# on one (the group: this one loads pktgen, which the benchmark would count as a kernel module it left behind)
# while the others run on the other.
@pytest.mark.xdist_group("vm_kernel_modules")
@pytest.mark.debian12("lab", "pktgen_sender", "pktgen_receiver")
def test_traffic_playbook_sends_with_pktgen_on_the_vm(vm):
    """playbooks/traffic.yml on the VM as its header and the README give it (-e traffic_senders=vms
    -e traffic_receivers=vms; the namespaces tgsend and tgrecv of group_vars/vms.yml, built by the lab role),
    with the pktgen_sender role's pktgen engine named: pktgen out of tgsend/eth0, xdp_drop_count counting on
    tgrecv/eth0 (pktgen_receiver, native mode: pktgen's shared packets must not meet generic XDP on 6.1).

    The receiver role's count, read apart from the sender role's report, must equal what the sender role says
    pktgen sent, with no error; pktgen's devices are gone afterwards. The pktgen module loads pktgen when it is
    not loaded and leaves it loaded (the role promises nothing more; the module reports module_loaded), so its
    report is checked against the kernel's state before and after, and the test then unloads pktgen again if it
    found it unloaded: the kernel-dependent tests that make test-vm runs in the VM afterwards find it as booted.
    One playbook run and two reads (each task costs seconds under emulation)."""
    before = adhoc("ansible.builtin.shell", PKTGEN_LOADED)
    assert before.get("rc") == 0, before
    loaded_before = before["stdout"] == "loaded"

    # Paced: the receiver's veth queues at most 256 frames for its XDP program, and a frame it refuses is a
    # pktgen error, not a frame sent (test_pktgen_kernel); 2000 frames/s leaves no error to explain.
    count = 4000
    try:
        out = ansible_playbook(os.path.join(ROOT, "playbooks", "traffic.yml"), extra_vars=[{
            "traffic_senders": "vms", "traffic_receivers": "vms", "pktgen_sender_engine": "pktgen",
            "pktgen_sender_count": count, "pktgen_sender_ratep": 2000}])
    finally:
        # Read first, then put pktgen back as it was found (also after a failed run).
        after = adhoc("ansible.builtin.shell", "set -e; %s; ip netns exec tgsend sh -c 'ls /proc/net/pktgen; "
                      "cat /proc/net/pktgen/kpktgend_*'%s" % (PKTGEN_LOADED, "" if loaded_before else
                                                              "; modprobe -r pktgen"))
    assert after.get("rc") == 0, after
    state, files = after["stdout_lines"][0], after["stdout"]

    sender = task_results(out, "Keep the results as facts")["vm"]["ansible_facts"]["pktgen_sender_result"]
    assert (sender["engine"], sender["method"], sender["interface"], sender["netns"]) == (
        "pktgen", "start_xmit", "eth0", "tgsend"), sender
    # errors: transmits the veth refused (its peer's 256-slot ring full), which pktgen retries until `count` went
    # out; on 6.1 in a VM that waits for its CPU, the receiver's NAPI falls behind now and then (360 of 2000 once).
    assert sender["sent"] == count and sender["protocols"] == {"udp": count}, sender
    [thread] = sender["threads"]
    assert (thread["device"], thread["sent"], thread["errors"]) == ("eth0@0", count, sender["errors"]), thread
    assert thread["result"].startswith("Result: OK: ") and sender["pps"] > 0, thread

    receiver = task_results(out, "Keep what arrived as facts")["vm"]["ansible_facts"]["pktgen_receiver_result"]
    # Every frame pktgen sent, and nothing else (IPv6 is off on the lab's interfaces): all UDP.
    assert receiver["received"] == {"eth0": {"17": count}} and receiver["total"] == {"eth0": count}, receiver

    # Set by the one sender for localhost (delegate_facts), as test_traffic_roles reads it.
    [kept] = task_results(out, "Keep the results on localhost").values()
    [row] = kept["ansible_facts"]["traffic_results"]
    assert (row["sender"], row["receiver"], row["engine"]) == ("vm/eth0", "vm/eth0", "pktgen/start_xmit"), row
    assert (row["sent"], row["received"], row["loss"]) == (count, count, 0), row

    # pktgen's module: loaded by this run only if it was not loaded, and still loaded; its devices removed.
    ran = role_task_result(out, "pktgen_sender", "Wait for the generator")
    assert ran["finished"] and ran["module_loaded"] is (not loaded_before), (loaded_before, ran)
    assert state == "loaded", after
    assert "kpktgend_0" in files and "eth0@" not in files, files


@pytest.mark.xdist_group("vm_kernel_modules")
@pytest.mark.debian12("benchmark")
def test_benchmark_role_measures_xdp_drop_on_the_vm(vm, tmp_path):
    """playbooks/benchmark.yml against the VM with its vars file (-e @playbooks/vars/benchmark_vm.yml), cut to one
    short round of XDP drop and its baseline, iptables raw drop, on a veth pair of its own (the traffic_lab pair
    is test_traffic_playbook's, which may run meanwhile): the role on 6.1 from end to end (the lock, what the
    VM holds read and put back, the sources compiled there, the generator its kernel takes, the report written
    here). Every frame a case sent must be counted at its receiver, or nearly: the emulated receiver may refuse
    a few into a full ring, and a refusal is a lost frame."""
    pair = VmPair()
    others = ["XDP drop, xdp_drop_count, generic", "XDP drop, empty program, native", "tc drop, cls_bpf",
              "nftables netdev ingress drop"]
    results_dir = tmp_path / "results"
    playbook(str(tmp_path / "up.yml"), [pair.up_task()])
    try:
        ansible_playbook(os.path.join(ROOT, "playbooks", "benchmark.yml"),
                         "-e", "@" + os.path.join(ROOT, "playbooks", "vars", "benchmark_vm.yml"), extra_vars=[{
                             "benchmark_topology_hosts": [], "benchmark_cases": ["drop"], "benchmark_repeat": 1,
                             "benchmark_seconds": 1, "benchmark_exclude": ["tc drop, tcx"] + others,
                             "benchmark_results_dir": str(results_dir),
                             "benchmark_drop": {"sender": "vm", "sender_netns": pair.tx, "sender_interface": "eth0",
                                                "receiver": "vm", "receiver_netns": pair.rx,
                                                "receiver_interface": "eth0", "src_ip": pair.tx_ip,
                                                "dst_ip": pair.rx_ip}}])
    finally:
        playbook(str(tmp_path / "down.yml"), [pair.down_task()])
    [report_dir] = results_dir.iterdir()
    assert sorted(p.name for p in report_dir.iterdir()) == ["drop.png", "report.md", "results.json"]
    report = json.loads((report_dir / "results.json").read_text())
    host = report["machine"]["hosts"]["vm"]
    assert re.fullmatch(r"6\.1\.\d+-\d+-amd64", host["kernel"]) and report["machine"]["left_behind"] == "nothing", \
        report["machine"]
    runs = {r["case"]: r for r in report["results"]}
    assert sorted(runs) == ["XDP drop, xdp_drop_count, native", "iptables raw drop"], sorted(runs)
    for run in runs.values():
        print("%s: %d sent, %d delivered, %.0f pps (%s)" % (run["case"], run["sent"], run["delivered"],
                                                            run["value"], run["generator"]["name"]))
        assert run["host"] == {"generator": "vm/" + pair.tx, "receiver": "vm/" + pair.rx}, run
        assert run["sent"] > 0 and run["sent"] * 0.9 <= run["delivered"] <= run["sent"], run


def test_reachable_with_the_debian_kernel_and_the_toolchain(vm):
    assert adhoc("ansible.builtin.ping")["ping"] == "pong"
    with open(os.path.join(ROOT, "roles", "toolchain", "defaults", "main.yml")) as f:
        packages = yaml.safe_load(f)["toolchain_packages"]
    with open(os.path.join(ROOT, "roles", "toolchain", "vars", "main.yml")) as f:
        packages += yaml.safe_load(f)["__toolchain_witnesses"]["Debian"]
    res = adhoc("ansible.builtin.shell", "uname -r; dpkg-query -W -f='${db:Status-Abbrev} ${Package}\\n' "
                + " ".join(packages))
    assert res.get("rc") == 0, res
    release, *status = res["stdout_lines"]
    assert re.fullmatch(r"6\.1\.\d+-\d+-amd64", release), release
    # The image holds what the toolchain role installs: the role has nothing to fetch there.
    assert sorted(line.split()[-1] for line in status if line.startswith("ii ")) == sorted(packages), status


# make test-debian12's only (marked long): make test's VM step has xdp_program's and xdp_trafficgen's positive tests
# inside the VM (test_xdp_program.py) and xdp_facts' over SSH in the deploy test below, whose gate reads the facts;
# this chain of Ansible tasks under emulation (~140 s of the loaded VM step) proved nothing more there.
@pytest.mark.long
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


@pytest.mark.debian12("toolchain", "toolchain_facts", "xdp_rollout", "xdp_deploy", "xdp_facts")
def test_deploy_xdp_over_ssh_converges_then_changes_nothing(vm, tmp_path):
    """playbooks/deploy_xdp.yml from this controller over SSH, as an operator runs it (make test-ee runs it in the
    execution environment's image, through ansible-runner and ansible-navigator): the toolchain checked, the
    programs compiled here and converged there through the rollout, its gate reading the facts back; then the
    re-run changes nothing."""
    with root_veth(str(tmp_path), "dp") as (iface, pin_root):
        run_dir = os.path.join(ROOT, ".build", "vm")
        with open(os.path.join(run_dir, "port")) as f:
            port = int(f.read())
        vm_vars = dict(deploy_vars(iface, pin_root, {"object": "xdp_drop_count", "mode": "native"}), **{
            "ansible_connection": "ansible.builtin.ssh", "ansible_host": "127.0.0.1", "ansible_port": port,
            "ansible_user": "root", "ansible_python_interpreter": "/usr/bin/python3",
            "ansible_ssh_private_key_file": os.path.join(run_dir, "id_ed25519"),
            "ansible_ssh_common_args": "-o StrictHostKeyChecking=yes -o HostKeyAlias=ebpf-xdp-vm "
                                       "-o UserKnownHostsFile=%s" % os.path.join(run_dir, "known_hosts")})
        inventory = tmp_path / "hosts.yml"
        groups = {"xdp_hosts": {"hosts": {"vm": vm_vars}}, "xdp_senders": {"hosts": {}}}
        inventory.write_text(yaml.safe_dump({"all": {"children": groups}}))
        first = ansible_playbook("-i", str(inventory), os.path.join(ROOT, "playbooks", "deploy_xdp.yml"))
        assert changed_by_host(first)["vm"] > 0, first["stats"]
        # The gate's reading of the facts: the very program the converge attached, in native mode, release 1.
        facts = task_results(first, "Read the counters after the change")["vm"]["ansible_facts"]["xdp"]
        attached = facts["interfaces"][iface]["xdp"]
        assert attached["owner"] == "ebpf.xdp" and attached["mode"] == "native", attached
        assert attached["revision"]["number"] == 1, attached

        again = ansible_playbook("-i", str(inventory), os.path.join(ROOT, "playbooks", "deploy_xdp.yml"))
        assert set(changed_by_host(again).values()) == {0}, changed_tasks(again)
