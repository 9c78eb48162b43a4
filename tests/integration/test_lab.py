"""The lab's topology end to end: lab_up and lab_down rhythms, and the router
and the bridge between sender and receiver proven with pings that stay in the
namespaces.

    sender eth0 ---------------------------------- eth0 receiver   10.11.0.0/24
    sender eth1 --- eth0 router eth1 ------------- eth1 receiver   10.11.1.0/24, 10.11.2.0/24
    sender eth2 --- eth0 bridge (br0) eth1 ------- eth2 receiver   10.11.3.0/24
    sender eth3 --- eth0 switch eth1..eth9 ------- eth1..eth9 members (no addresses but the sender's)

The tests share one lab (module fixture) and run in file order; the last one
takes it down.
"""

import json
import os
import subprocess
import time

import pytest
import yaml

from conftest import ROOT, changed_by_host, sh
from test_playbooks import playbook

with open(os.path.join(ROOT, "inventories", "lab", "group_vars", "all.yml")) as f:
    NAMESPACES = yaml.safe_load(f)["lab_namespaces"]
PINGS = 3


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
def lab():
    playbook("lab_down.yml")
    assert lab_names() == []
    up = rhythm("lab_up.yml")
    time.sleep(2)  # a bridge or an interface with IPv6 would have spoken by now
    quiet = dict((ns, packets(ns)) for ns in NAMESPACES)
    yield {"rhythm": up, "packets": quiet}
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
    inventory = json.loads(subprocess.run([os.path.join(ROOT, ".venv", "bin", "ansible-inventory"), "--list"],
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
        [os.path.join(ROOT, ".venv", "bin", "ansible"), "sender", "-m", "ansible.builtin.debug", "-a",
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


def test_lab_down_rhythm(lab):
    """Last: takes the shared lab down, bridges and router included, and leaves nothing."""
    first_check, first, second_check, second = rhythm("lab_down.yml")
    assert first_check > 0 and first > 0 and second_check == 0 and second == 0, (first_check, first, second_check, second)
    assert lab_names() == []
    assert [ns for ns in NAMESPACES if os.path.exists("/sys/fs/bpf/ebpf_xdp/" + ns)] == []
