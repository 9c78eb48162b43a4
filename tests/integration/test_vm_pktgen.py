"""ebpf.xdp.pktgen: the kernel's pktgen, for real in the lab's VM (Debian 12's 6.1 has pktgen.ko), and on
this machine's kernel: a run where it has pktgen, its refusal where it has none (kernel_features).

In the VM: a veth pair with two queues per end, the receiver's eth0 counting
with xdp_drop_count in native mode (dropping) and with tc_drop_count at tc
ingress; pktgen sends out of the sender's eth0 from two CPUs (flag
QUEUE_MAP_CPU: one veth queue each, so the threads do not share a ring of
the peer), then injects into the receiver's own eth0 with xmit_mode
netif_receive, which passes tc ingress and not native XDP. The counters
must equal what pktgen's Result lines say it sent, and the sender's
tx_dropped the errors they report. Then every bad input in
one playbook, each a clear error, and pktgen left with no devices.

Generic-mode XDP is never attached where pktgen's packets could reach it:
that crashes the 6.1 kernel (the module refuses it; see _pktgen's docstring).
The refusals are tested with a generic program that nothing sends to.
"""

import time

import pytest

from test_vm import OBJ_DIR, VmPair, playbook, shipped

from conftest import ModuleRunner, VENV_PYTHON, sh

COUNT = 20000  # per thread: a few seconds under emulation
INJECT = 5000
PROC = "/proc/net/pktgen"


class QueuedPair(VmPair):
    """VmPair with two transmit and receive queues on each end: one per pktgen thread."""

    def up_task(self):
        task = super().up_task()
        script = task["ansible.builtin.command"]["argv"][2]
        queues = " numtxqueues 2 numrxqueues 2"
        task["ansible.builtin.command"]["argv"][2] = script.replace(
            "address %s type veth" % self.tx_mac, "address %s%s type veth" % (self.tx_mac, queues)).replace(
            "address %s\n" % self.rx_mac, "address %s%s\n" % (self.rx_mac, queues))
        assert task["ansible.builtin.command"]["argv"][2].count(queues) == 2, task
        return task


def witness_and_down(pair, namespaces):
    """The pair's down task, first listing pktgen's files and threads in each namespace (one task less)."""
    task = pair.down_task()
    witness = "; ".join("ip netns exec %s sh -c 'ls %s; cat %s/kpktgend_*'" % (ns, PROC, PROC) for ns in namespaces)
    task["ansible.builtin.command"]["argv"][2] = witness + "; " + task["ansible.builtin.command"]["argv"][2]
    task["name"] = "pktgen's files, then remove the pair"
    return task


def pktgen(name, **args):
    return {"name": name, "ebpf.xdp.pktgen": args, "register": name.replace(" ", "_")}


def test_pktgen_counts_equal_receiver_counters(vm, tmp_path):
    pair = QueuedPair()
    send = {"interface": "eth0", "netns": pair.tx, "dst_ip": pair.rx_ip, "dst_mac": pair.rx_mac,
            "cpus": [0, 1], "count": COUNT, "flags": ["QUEUE_MAP_CPU", "NO_TIMESTAMP"]}
    started = time.monotonic()
    block = [
        {"name": "XDP at the receiver (native, drop)", "ebpf.xdp.xdp_program": {
            "interface": "eth0", "netns": pair.rx, "object": "%s/xdp_drop_count.o" % OBJ_DIR,
            "mode": "native", "pin_root": pair.pin_root}},
        {"name": "tc ingress at the receiver (drop)", "ebpf.xdp.tc_program": {
            "interface": "eth0", "netns": pair.rx, "object": "%s/tc_redirect.o" % OBJ_DIR,
            "program": "tc_drop_count", "method": "cls_bpf", "constants": {"tc_action": 2},
            "pin_root": pair.pin_root}},
        dict(pktgen("Check mode", **send), check_mode=True),
        # The sender's counters around the send: its tx_dropped must account for pktgen's errors.
        {"name": "Read the sender before", "ebpf.xdp.xdp_facts": {
            "netns": pair.tx, "interfaces": ["eth0"], "pin_root": pair.pin_root}},
        pktgen("Send", **send),
        {"name": "Read the sender after", "ebpf.xdp.xdp_facts": {
            "netns": pair.tx, "interfaces": ["eth0"], "pin_root": pair.pin_root}},
        pktgen("Inject", interface="eth0", netns=pair.rx, dst_ip=pair.rx_ip, dst_mac=pair.rx_mac,
               xmit_mode="netif_receive", burst=8, count=INJECT),
        {"name": "Read the receiver", "ebpf.xdp.xdp_facts": {"netns": pair.rx, "pin_root": pair.pin_root}},
    ]
    tasks = [pair.up_task()] + shipped(tmp_path, "xdp_drop_count") + shipped(tmp_path, "tc_redirect") + [{
        "name": "Count at the receiver, send, inject, read", "block": block,
        "always": [witness_and_down(pair, (pair.tx, pair.rx))]}]
    results = playbook(str(tmp_path / "pktgen.yml"), tasks)
    wall = time.monotonic() - started

    check = results["Check mode"]
    assert check["changed"] and check["total"] == 0 and [t["cpu"] for t in check["threads"]] == [0, 1], check
    sent = results["Send"]
    assert sent["changed"] and not sent["stopped"] and sent["xmit_mode"] == "start_xmit", sent
    assert [(t["cpu"], t["device"], t["sent"]) for t in sent["threads"]] == [(0, "eth0@0", COUNT),
                                                                             (1, "eth0@1", COUNT)], sent
    for thread in sent["threads"]:
        assert thread["pps"] > 0 and thread["seconds"] > 0, thread
        assert thread["result"].startswith("Result: OK: ") and "%d (60byte,0frags)" % COUNT in thread["result"]
    assert sent["total"] == 2 * COUNT and sent["pps"] == sum(t["pps"] for t in sent["threads"]), sent
    # errors: transmits the veth refused, NET_XMIT_DROP when the peer's XDP ring is full (many under the
    # emulated CPU: 408341 for 100000 sent once), so zero cannot be asserted. pktgen does not count them as sent
    # and sends until `count` went through, so they cannot blur the receiver's count below; and each one is
    # a drop veth_xmit counts in the sender's tx_dropped, where nothing else adds here (eth0 in tx has no XDP
    # program of its own and nothing redirects into rx). So the errors are exactly the growth of tx_dropped:
    # every attempt is either counted by the receiver or refused by the sender's veth.
    stats = [results["Read the sender %s" % when]["ansible_facts"]["xdp"]["interfaces"]["eth0"]["stats"]
             for when in ("before", "after")]
    refused = stats[1]["tx_dropped"] - stats[0]["tx_dropped"]
    assert sum(t["errors"] for t in sent["threads"]) == sent["errors"] == refused, (sent["threads"], stats)

    injected = results["Inject"]
    [thread] = injected["threads"]
    # netif_receive: pktgen counts what the receive path dropped (here tc's TC_ACT_SHOT) as errors.
    assert thread["sent"] == INJECT and thread["errors"] == INJECT and thread["pps"] > 0, injected

    eth0 = results["Read the receiver"]["ansible_facts"]["xdp"]["interfaces"]["eth0"]
    # Everything pktgen sent reached native XDP; nothing injected did (netif_receive is after the driver)...
    assert eth0["xdp"]["protocols"] == {"udp": sent["total"]}, eth0["xdp"]
    # ...and tc ingress saw only the injected packets (XDP dropped the others before it).
    [tc] = eth0["tc"]["ingress"]
    assert tc["protocols"] == {"udp": INJECT}, tc

    # No devices left behind: the thread files list none, no eth0@N file remains.
    files = results["pktgen's files, then remove the pair"]["stdout"]
    assert "eth0@" not in files and "Stopped: \n" in files and "kpktgend_1" in files, files
    print("\npktgen result lines (VM, Debian 12 6.1 under TCG):")
    for task in ("Send", "Inject"):
        for t in results[task]["threads"]:
            print("%s %s: %s" % (task, t["device"], t["result"].replace("\n", " /")))
    print("wall time of the playbook: %.1f s" % wall)


def test_pktgen_bad_input_on_the_vm(vm, tmp_path):
    """What only the target host can answer: its devices, its CPUs, its kernel's refusals, and the targets
    the module refuses because they crash 6.1. The settings' own mistakes fail the same way everywhere and
    are tested on this machine (test_bad_settings_each_a_clear_error), where a task costs far less."""
    pair = VmPair()
    base = {"interface": "eth0", "netns": pair.tx, "dst_ip": pair.rx_ip, "dst_mac": pair.rx_mac, "count": 10}
    cases = {
        "unknown device": dict(base, interface="nosuch0"),
        "CPU not present": dict(base, cpus=[0, 63]),
        "burst on a veth": dict(base, burst=8),
        "netif_receive into generic XDP": dict(base, xmit_mode="netif_receive"),
        "out of a veth into generic XDP": dict(base, netns=pair.rx, dst_mac=pair.tx_mac),
    }
    started = time.monotonic()
    # Generic mode on the sender's eth0: the two refusals aim at it, and nothing else sends to it.
    block = [{"name": "Generic XDP on the sender", "ebpf.xdp.xdp_program": {
        "interface": "eth0", "netns": pair.tx, "object": "%s/xdp_drop_count.o" % OBJ_DIR,
        "mode": "generic", "pin_root": pair.pin_root}}]
    block += [dict(pktgen(name, **args), ignore_errors=True) for name, args in cases.items()]
    tasks = [pair.up_task()] + shipped(tmp_path, "xdp_drop_count") + [{
        "name": "Bad input", "block": block, "always": [witness_and_down(pair, (pair.tx,))]}]
    results = playbook(str(tmp_path / "bad.yml"), tasks)
    wall = time.monotonic() - started

    def msg(name):
        res = results[name]
        assert res.get("failed") and not res.get("total"), res
        return res["msg"]

    assert msg("unknown device").startswith("interface 'nosuch0' does not exist")
    assert msg("CPU not present").startswith("CPU 63 is not present or not online (online: 0-1)")
    # The kernel refuses this one: configured up to the refusal, then removed again (the files below).
    assert msg("burst on a veth").startswith("pktgen refused 'burst 8' on eth0@0 (not supported)")
    assert "IFF_TX_SKB_SHARING" in msg("burst on a veth")
    assert msg("netif_receive into generic XDP").startswith(
        "refusing xmit_mode netif_receive into veth eth0: it has a generic-mode XDP program")
    assert msg("out of a veth into generic XDP").startswith(
        "refusing to send out of veth eth0: its peer has a generic-mode XDP program")
    files = results["pktgen's files, then remove the pair"]["stdout"]
    assert "eth0@" not in files and "Stopped: \n" in files, files
    print("\nwall time of the bad-input playbook: %.1f s" % wall)


BAD_SETTINGS = {
    "malformed MAC": ({"dst_mac": "02:00:00:aa:00"}, "dst_mac '02:00:00:aa:00' is not a MAC address"),
    "malformed source MAC": ({"src_mac": "02:00:00:aa:00:zz"}, "src_mac '02:00:00:aa:00:zz' is not a MAC address"),
    "malformed IP": ({"dst_ip": "10.99.0.300"}, "dst_ip '10.99.0.300' is not an IP address"),
    "mixed IP versions": ({"src_ip": "fd00::1"}, "src_ip fd00::1 and dst_ip 10.99.0.2 are not of one IP version"),
    "size below the IPv4 minimum": ({"size": 57}, "size must be at least 58 bytes for UDP over IPv4"),
    "size below the IPv6 minimum": ({"dst_ip": "fd00::2", "size": 60},
                                    "size must be at least 78 bytes for UDP over IPv6"),
    "zero count": ({"count": 0}, "count must be a positive number of packets per thread, not 0"),
    "negative count": ({"count": -5}, "count must be a positive number of packets per thread, not -5"),
    "zero duration": ({"count": None, "duration": 0}, "duration must be a positive number of seconds, not 0"),
    "no count or duration": ({"count": None}, "one of the following is required: count, duration"),
    "unknown flag": ({"flags": ["NO_SUCH_FLAG"]}, "unknown pktgen flag 'NO_SUCH_FLAG'"),
    "negative CPU": ({"cpus": [-1]}, "CPU -1 is not a CPU number"),
    "a CPU twice": ({"cpus": [0, 0]}, "cpus lists CPU 0 more than once"),
    "port range upside down": ({"dst_port": 100, "dst_port_max": 50}, "dst_port_max (50) must not be below"),
    "clone_skb with netif_receive": ({"xmit_mode": "netif_receive", "clone_skb": 4},
                                     "clone_skb does not work with xmit_mode netif_receive"),
    "rate and ratep": ({"rate": 100, "ratep": 1000}, "give one of delay, rate and ratep"),
}


def test_bad_settings_each_a_clear_error(tmp_path):
    """Mistakes in the settings fail before the host is asked anything (even whether it has pktgen)."""
    run = ModuleRunner(VENV_PYTHON, str(tmp_path))
    base = {"interface": "eth0", "dst_ip": "10.99.0.2", "dst_mac": "02:00:00:aa:00:02", "count": 10}
    for name, (change, expected) in BAD_SETTINGS.items():
        args = {k: v for k, v in dict(base, **change).items() if v is not None}
        res = run("pktgen", args)
        assert res.get("failed") and expected in res["msg"], (name, res)


@pytest.mark.kernel("pktgen")
def test_pktgen_here_sends_what_the_receiver_counts(run_distro, pair, drop_obj):
    """pktgen on this machine's own kernel where it has one (loadable counts): a paced, bounded run out of a
    veth, every frame counted by xdp_drop_count on the peer. On a kernel without pktgen, conftest asserts
    the module's refusal instead (kernel_features: check mode and run, nothing loaded)."""
    count = 2000
    attached = run_distro("xdp_program", dict(interface="eth0", netns=pair.rx, object=drop_obj, mode="native"))
    assert attached["changed"] and not attached.get("failed"), attached
    # Paced: the peer's XDP ring has 256 slots, and a frame it refuses is a frame never counted.
    sent = run_distro("pktgen", dict(interface="eth0", netns=pair.tx, dst_ip=pair.rx_ip, dst_mac=pair.rx_mac,
                                     count=count, cpus=[0], ratep=20000))
    assert sent["changed"] and not sent.get("failed") and sent["total"] == count, sent
    [thread] = sent["threads"]
    assert thread["sent"] == count and thread["errors"] == 0 and thread["pps"] > 0, thread
    facts = run_distro("xdp_facts", dict(netns=pair.rx))["ansible_facts"]["xdp"]["interfaces"]["eth0"]
    assert facts["xdp"]["protocols"] == {"udp": count}, facts["xdp"]
    thread_file = sh("ip", "netns", "exec", pair.tx, "cat", PROC + "/kpktgend_0").stdout
    assert "eth0" not in thread_file, "pktgen's device left behind: " + thread_file
