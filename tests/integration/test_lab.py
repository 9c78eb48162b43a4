"""The lab and the main job end to end: lab_up's rhythm, the router and the
bridge between sender and receiver proven with pings that stay in the
namespaces, deploy_xdp.yml four times with witnesses that agree, an entry
taken out of the inventory going (the lab's xdp_deploy_state is overridden),
and lab_down's rhythm.

    sender eth0 ---------------------------------- eth0 receiver   10.11.0.0/24
    sender eth1 --- eth0 router eth1 ------------- eth1 receiver   10.11.1.0/24, 10.11.2.0/24
    sender eth2 --- eth0 bridge (br0) eth1 ------- eth2 receiver   10.11.3.0/24
    sender eth3 --- eth0 switch eth1..eth9 ------- eth1..eth9 members (no addresses but the sender's)

The tests share one lab (module fixture) and run in file order: the lab's own
before the deploy puts programs on it; the last one takes it down.
"""

import json
import os
import subprocess
import time

import pytest
import yaml

from conftest import (ROOT, ansible_cli, ansible_env, ansible_playbook, changed_by_host, changed_tasks, sh, task_results,
                      xdp_attached)

with open(os.path.join(ROOT, "inventories", "lab", "group_vars", "all.yml")) as f:
    NAMESPACES = yaml.safe_load(f)["lab_namespaces"]
PINGS = 3

PLAYBOOKS = os.path.join(ROOT, "playbooks")


def playbook(*names, check=False, extra_vars=None):
    return ansible_playbook(*[os.path.join(PLAYBOOKS, n) for n in names], check=check,
                            extra_vars=[extra_vars] if extra_vars else [])


def all_task_results(out, name):
    """Results per host of every run of the task called name (a role included in a loop runs it once per item)."""
    return [task["hosts"] for play in out["plays"] for task in play["tasks"]
            if name in (task["task"]["name"], task["task"]["name"].partition(" : ")[2])]


def adhoc(pattern, name, args):
    """{host: result} of one module run on the hosts of pattern."""
    argv = ansible_cli("ansible") + [pattern, "-m", name, "-a", json.dumps(args)]
    proc = subprocess.run(argv, capture_output=True, text=True, env=ansible_env(), cwd=ROOT, check=False)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    return json.loads(proc.stdout)["plays"][0]["tasks"][0]["hosts"]


def packets(ns):
    """{ifname: (tx, rx)} of the namespace's interfaces but lo."""
    links = json.loads(sh("ip", "-n", ns, "-j", "-s", "link", "show").stdout)
    return dict((link["ifname"], (link["stats64"]["tx"]["packets"], link["stats64"]["rx"]["packets"]))
                for link in links if link["ifname"] != "lo")


def grown(before, after):
    """Per interface, how many packets it sent and received in between."""
    return dict((ifname, (tx - before[ifname][0], rx - before[ifname][1])) for ifname, (tx, rx) in after.items())


def ping(ns, address):
    out = sh("ip", "netns", "exec", ns, "ping", "-c%d" % PINGS, "-i0.2", "-W2", address).stdout
    assert "%d received" % PINGS in out, out
    return out


def rhythm(name):
    """check -> run -> check -> run; the changes localhost reported at each step."""
    return [changed_by_host(playbook(name, check=check))["localhost"] for check in (True, False, True, False)]


def lab_names():
    return sorted(set(NAMESPACES) & set(os.listdir("/run/netns")))


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """The lab up (its rhythm), how quiet it is, and the extra vars of a deploy that starts from an empty object
    directory, as a fresh host does (the default /var/lib/ebpf_xdp/objects keeps what earlier runs compiled: a
    first check-mode run would then find the objects it has to predict)."""
    playbook("lab_down.yml")
    assert lab_names() == []
    up = rhythm("lab_up.yml")
    time.sleep(2)  # a bridge or an interface with IPv6 would have spoken by now
    quiet = dict((ns, packets(ns)) for ns in NAMESPACES)
    yield {"rhythm": up, "packets": quiet,
           "deploy": {"xdp_deploy_object_dir": str(tmp_path_factory.mktemp("deploy") / "objects")}}
    playbook("lab_down.yml")


def test_lab_up_rhythm(lab):
    first_check, first, second_check, second = lab["rhythm"]
    assert first_check > 0 and first > 0 and second_check == 0 and second == 0, lab["rhythm"]
    assert lab_names() == sorted(NAMESPACES)


def test_lab_sends_nothing_of_its_own(lab):
    """No ARP, ND, MLD, IGMP or STP frame on any lab interface: counters see only test traffic."""
    assert lab["packets"]["router"] == {"eth0": (0, 0), "eth1": (0, 0)}
    assert lab["packets"]["bridge"] == {"eth0": (0, 0), "eth1": (0, 0), "br0": (0, 0)}
    assert lab["packets"]["sender"] == {"eth0": (0, 0), "eth1": (0, 0), "eth2": (0, 0), "eth3": (0, 0)}
    assert lab["packets"]["receiver"] == {"eth0": (0, 0), "eth1": (0, 0), "eth2": (0, 0)}
    assert lab["packets"]["switch"] == dict(("eth%d" % i, (0, 0)) for i in range(10))
    assert lab["packets"]["members"] == dict(("eth%d" % i, (0, 0)) for i in range(1, 10))


def test_inventory_has_the_router_and_the_bridge():
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"),
               ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, ".build", "collections"))
    inventory = json.loads(subprocess.run(ansible_cli("ansible-inventory") + ["--list"],
                                          capture_output=True, text=True, env=env, cwd=ROOT, check=True).stdout)
    assert inventory["routers"]["hosts"] == ["router"]
    assert inventory["bridges"]["hosts"] == ["bridge"]
    assert set(inventory["lab"]["children"]) >= {"senders", "receivers", "routers", "bridges"}
    assert inventory["switches"]["hosts"] == ["switch"]
    assert inventory["multicast_members"]["hosts"] == ["members"]
    # The deploy playbook counts on the receivers, forwards with tc redirect on the routers, copies to
    # multicast groups on the switches, and counts the copies on the members and the sender.
    assert set(inventory["xdp_hosts"]["children"]) == {"senders", "receivers", "routers", "switches",
                                                       "multicast_members"}

    # What a play on sender finds: its first link still leads straight to the
    # receiver, and across the bridge its neighbour is the receiver's end.
    debug = subprocess.run(
        ansible_cli("ansible") + [
            "sender", "-m", "ansible.builtin.debug", "-a",
            "msg={{ [lab_host_links[0].peer.ipv4] + lab_host_neighbours | map(attribute='peer') | map(attribute='ipv4') }}"],
        capture_output=True, text=True, cwd=ROOT, check=True,
        env=dict(env, ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json", ANSIBLE_LOAD_CALLBACK_PLUGINS="1"))
    shown = json.loads(debug.stdout)["plays"][0]["tasks"][0]["hosts"]["sender"]["msg"]
    assert shown == ["10.11.0.2/24", "10.11.0.2/24", "10.11.1.254/24", "10.11.3.2/24"]


def test_router_forwards_between_its_subnets(lab):
    assert sh("ip", "netns", "exec", "router", "sysctl", "-n", "net.ipv4.ip_forward").stdout.strip() == "1"
    router_routes = sh("ip", "-n", "router", "route").stdout
    assert "10.11.1.0/24 dev eth0 " in router_routes and "10.11.2.0/24 dev eth1 " in router_routes, router_routes
    assert "10.11.2.0/24 via 10.11.1.254 dev eth1" in sh("ip", "-n", "sender", "route").stdout
    assert "10.11.1.0/24 via 10.11.2.254 dev eth1" in sh("ip", "-n", "receiver", "route").stdout

    before = dict((ns, packets(ns)) for ns in ("sender", "router", "receiver"))
    out = ping("sender", "10.11.2.2")
    assert "ttl=63" in out, "one hop: " + out
    after = dict((ns, packets(ns)) for ns in ("sender", "router", "receiver"))
    # Requests in at router eth0 and out of eth1, replies the other way; nothing on the other paths.
    assert grown(before["router"], after["router"]) == {"eth0": (PINGS, PINGS), "eth1": (PINGS, PINGS)}
    assert grown(before["sender"], after["sender"]) == {"eth0": (0, 0), "eth1": (PINGS, PINGS), "eth2": (0, 0),
                                                        "eth3": (0, 0)}
    assert grown(before["receiver"], after["receiver"]) == {"eth0": (0, 0), "eth1": (PINGS, PINGS), "eth2": (0, 0)}


def test_bridge_forwards_between_its_ports(lab):
    ports = json.loads(sh("bridge", "-n", "bridge", "-j", "link", "show").stdout)
    assert sorted((p["ifname"], p["master"], p["state"]) for p in ports) == [
        ("eth0", "br0", "forwarding"), ("eth1", "br0", "forwarding")]
    settings = json.loads(sh("ip", "-n", "bridge", "-d", "-j", "link", "show", "br0").stdout)[0]["linkinfo"]["info_data"]
    assert (settings["stp_state"], settings["forward_delay"], settings["mcast_snooping"]) == (0, 0, 0)
    # The sender reaches across the bridge without ARP: its neighbour is the receiver's end, not the bridge port.
    neigh = sh("ip", "-n", "sender", "neigh", "show", "dev", "eth2").stdout
    assert "10.11.3.2 lladdr 02:00:00:00:02:03 PERMANENT" in neigh, neigh

    before = dict((ns, packets(ns)) for ns in ("sender", "bridge", "receiver"))
    out = ping("sender", "10.11.3.2")
    assert "ttl=64" in out, "bridged, not routed: " + out
    after = dict((ns, packets(ns)) for ns in ("sender", "bridge", "receiver"))
    # br0 itself neither sends nor receives: the frames go from port to port.
    assert grown(before["bridge"], after["bridge"]) == {"eth0": (PINGS, PINGS), "eth1": (PINGS, PINGS), "br0": (0, 0)}
    assert grown(before["sender"], after["sender"]) == {"eth0": (0, 0), "eth1": (0, 0), "eth2": (PINGS, PINGS),
                                                        "eth3": (0, 0)}
    assert grown(before["receiver"], after["receiver"]) == {"eth0": (0, 0), "eth1": (0, 0), "eth2": (PINGS, PINGS)}


def test_deploy_rhythm_and_witnesses(lab):
    lab = lab["deploy"]
    assert not os.path.exists(lab["xdp_deploy_object_dir"])
    first_check = playbook("deploy_xdp.yml", check=True, extra_vars=lab)
    assert not os.path.exists(lab["xdp_deploy_object_dir"]), "check mode compiled"
    assert changed_by_host(first_check)["receiver"] > 0
    assert "prog/xdp" not in sh("ip", "-n", "receiver", "link", "show", "eth0").stdout, "check mode attached"

    first = playbook("deploy_xdp.yml", extra_vars=lab)
    assert changed_by_host(first)["receiver"] > 0
    # What the role records for the rollout's gate and rollback: each attachment it changed, and its program.
    recorded = task_results(first, "Record what this run changed")["receiver"]["ansible_facts"]
    assert [(c["hook"], c["interface"], c["previous"]) for c in recorded["xdp_deploy_changed"]] == [
        ("xdp", "eth0", False), ("xdp", "eth1", False)], recorded
    assert {a["interface"]: a["id"] for a in recorded["xdp_deploy_attached"]} == {
        dev: xdp_attached("receiver", dev)["native"] for dev in ("eth0", "eth1")}, recorded
    shown = task_results(first, "Show the receiver's counters per IP protocol")["sender"]["msg"]
    assert "proto 6: 50 packets" in shown and "proto 17: 50 packets" in shown, shown

    second_check = playbook("deploy_xdp.yml", check=True, extra_vars=lab)
    assert set(changed_by_host(second_check).values()) == {0}, changed_tasks(second_check)
    second = playbook("deploy_xdp.yml", extra_vars=lab)
    assert set(changed_by_host(second).values()) == {0}, changed_tasks(second)

    # What the facts report is what the kernel shows.
    facts = task_results(second, "Read the receiver's counters after the burst")["sender"]["ansible_facts"]["xdp"]
    prog = facts["interfaces"]["eth0"]["xdp"]
    assert prog["protocols"] == {"tcp": 100, "udp": 100}
    assert list(xdp_attached("receiver").values()) == [prog["id"]]
    bpftool = json.loads(sh("ip", "netns", "exec", "receiver", "bpftool", "-j", "net", "show", "dev", "eth0").stdout)
    assert bpftool[0]["xdp"][0]["id"] == prog["id"] and bpftool[0]["xdp"][0]["mode"] == "driver"

    # The switch's two groups: each burst was counted on every member (the role asserts it per member) ...
    checked = [item["msg"] for hosts in all_task_results(second, "Check that every frame sent was counted")
               for item in hosts["sender"]["results"]]
    assert {"eth%d udp: sent 50, counted 50" % i for i in range(1, 10)} <= set(checked), checked
    # ... the facts show both groups with what two deploys sent (50 frames to each group per run) ...
    found = adhoc("switch:sender", "ebpf.xdp.xdp_facts", {"interfaces": ["eth3"]})
    groups = {g["name"]: g for g in found["switch"]["ansible_facts"]["xdp"]["devmap_groups"]["multicast"]}
    assert [(g["id"], len(g["members"]), g["addresses"], g["exclude_ingress"], g["frames"], g["copies"])
            for g in (groups["video"], groups["flood"])] == [
        (1, 4, ["239.1.1.1", "ff0e::1:1"], True, 100, 300), (2, 10, ["ff:ff:ff:ff:ff:ff"], False, 100, 1000)]
    assert groups["flood"]["egress_program"] == "xdp_egress_mac"
    # ... and the sender's port, a member of both, got back the flood copies only (video excludes the ingress).
    assert found["sender"]["ansible_facts"]["xdp"]["interfaces"]["eth3"]["xdp"]["protocols"] == {"udp": 100}


RECEIVER_ONLY = """
- name: Converge the receiver as the inventory says
  hosts: receiver
  gather_facts: false
  roles:
    - role: ebpf.xdp.xdp_deploy
"""


def test_an_entry_taken_out_of_the_inventory_goes(lab, tmp_path):
    """xdp_deploy_state overridden (the lab's): the receiver's eth1 entry taken out, its program is removed on
    the next run; eth0's stays, the same program; check mode first, then the four-step rhythm."""
    lab = lab["deploy"]
    play = tmp_path / "receiver.yml"
    play.write_text(RECEIVER_ONLY)
    out = ansible_playbook(str(play), extra_vars=[lab])
    kept = xdp_attached("receiver", "eth0")
    assert kept and xdp_attached("receiver", "eth1"), out["stats"]
    only_eth0 = dict(lab, xdp_deploy_programs=[{"interface": "eth0", "object": "xdp_drop_count",
                                                "program": "xdp_drop_count", "mode": "native"}])
    steps, results = [], []
    for check in (True, False, True, False):
        out = ansible_playbook(str(play), check=check, extra_vars=[only_eth0])
        steps.append((changed_by_host(out)["receiver"], bool(xdp_attached("receiver", "eth1"))))
        results.append(task_results(out, "Converge objects, programs and groups")["receiver"])
    assert steps == [(1, True), (1, False), (0, False), (0, False)], steps
    assert [c["entry"] for c in results[1]["changes"]] == ["the XDP hook of eth1 (not declared)"], results[1]
    assert results[0]["changes"] == results[1]["changes"], "check mode predicted another change"
    assert [e["interface"] for e in results[3]["before"]["xdp"]] == ["eth0"], results[3]
    assert xdp_attached("receiver", "eth0") == kept
    assert not os.path.exists("/sys/fs/bpf/ebpf_xdp/receiver/eth1/xdp"), "its pins stayed"
    # Declared again: attached again.
    out = ansible_playbook(str(play), extra_vars=[lab])
    assert changed_by_host(out)["receiver"] == 1 and xdp_attached("receiver", "eth1")


def test_lab_down_rhythm(lab):
    """Last: takes the shared lab down, bridges and router included, and leaves nothing."""
    first_check, first, second_check, second = rhythm("lab_down.yml")
    assert first_check > 0 and first > 0 and second_check == 0 and second == 0, (first_check, first, second_check, second)
    assert lab_names() == []
    assert [ns for ns in NAMESPACES if os.path.exists("/sys/fs/bpf/ebpf_xdp/" + ns)] == []
