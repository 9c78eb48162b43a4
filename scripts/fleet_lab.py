"""A lab of N receiver hosts for rollouts: write its inventory, run its background traffic.

    python3 scripts/fleet_lab.py inventory DIR [--receivers N] [--prefix fleet]
    ansible-playbook -i DIR playbooks/lab_up.yml          # the namespaces, veth pairs and bridge
    python3 scripts/fleet_lab.py traffic DIR start        # broadcast frames to every receiver
    ansible-playbook -i DIR playbooks/deploy_xdp.yml      # the rollout: canary, 10%, the rest
    ansible-playbook -i DIR playbooks/deploy_xdp.yml -e fleet_release=2 -e '{"fleet_fault_hosts": ["fleet001"]}'
    python3 scripts/fleet_lab.py traffic DIR stop
    ansible-playbook -i DIR playbooks/lab_down.yml

The topology: a sender namespace PREFIX-tx whose eth0 goes into a Linux bridge
in PREFIX-hub, and one port of that bridge per receiver namespace PREFIXNNN
(its eth0, no address). Receivers are the inventory hosts (group
fleet_receivers, in xdp_hosts); sender and hub are namespaces only. The
traffic is a broadcast ping from the sender (200 frames/s), which the bridge
floods to every receiver: the XDP program of each counts what it sees.

Every receiver gets xdp_verdict_count on eth0 (group_vars/xdp_hosts.yml of
DIR), passing and counting frames, with `release` set from fleet_release
(default 1): a new release is a new revision to roll out. A host in
fleet_fault_hosts (or with fleet_fault: true) gets the faulty variant,
xdp_action 1, which drops every frame: its rollout gate fails on the share of
dropped frames. A host in fleet_drop_tcp_hosts gets a subtler faulty variant
that drops TCP frames only (drop_ip_proto 6), which the broadcast ping does
not show but a replay of mixed frames does. A host in fleet_broken_hosts
declares a program its object lacks: its converge fails. The namespaces'
names start with PREFIX, so this lab lives next to the standard one
(inventories/lab) without touching it.
"""

import argparse
import os
import signal
import subprocess
import sys

import yaml

HEADER = "# Written by scripts/fleet_lab.py; regenerate rather than edit.\n"


def topology(prefix, receivers):
    """lab_* variables of the lab role for PREFIX-tx -> PREFIX-hub (br0) -> PREFIX001..N."""
    sender, hub = prefix + "-tx", prefix + "-hub"
    names = [receiver_name(prefix, i) for i in range(1, receivers + 1)]
    links = [{"a": {"netns": sender, "ifname": "eth0", "mac": "02:00:12:00:00:01", "ipv4": "10.20.0.1/16"},
              "b": {"netns": hub, "ifname": "up0", "mac": "02:00:12:00:00:02"}}]
    for i, name in enumerate(names, 1):
        links.append({"a": {"netns": hub, "ifname": "p%d" % i, "mac": mac(0x11, i)},
                      "b": {"netns": name, "ifname": "eth0", "mac": mac(0x10, i)}})
    return {
        "lab_namespaces": [sender, hub] + names,
        "lab_links": links,
        "lab_bridges": [{"netns": hub, "ifname": "br0", "ports": ["up0"] + ["p%d" % i for i in range(1, receivers + 1)]}],
        "fleet_sender": sender,
    }


def receiver_name(prefix, number):
    return "%s%03d" % (prefix, number)


def mac(kind, number):
    return "02:00:%02x:00:%02x:%02x" % (kind, number >> 8, number & 0xff)


HOST_GROUP_VARS = {
    # The rollout's program: count per protocol and per verdict, pass.
    "xdp_deploy_objects": [{"name": "xdp_verdict_count", "src": "xdp_verdict_count.bpf.c"}],
    "xdp_deploy_programs": [{
        "interface": "eth0",
        "object": "xdp_verdict_count",
        "program": "{{ 'no_such_program' if inventory_hostname in fleet_broken_hosts else 'xdp_verdict_count' }}",
        "mode": "native",
        "constants": {"release": "{{ fleet_release | int }}",
                      "xdp_action": "{{ 1 if fleet_fault | bool else 2 }}",
                      "drop_ip_proto": "{{ 6 if inventory_hostname in fleet_drop_tcp_hosts else 0 }}"},
    }],
    # Each host compiles its own objects, as a real host does (the namespaces share this filesystem).
    "xdp_deploy_src_dir": "/var/lib/ebpf_xdp/lab/{{ inventory_hostname }}/src",
    "xdp_deploy_object_dir": "/var/lib/ebpf_xdp/lab/{{ inventory_hostname }}/objects",
    "fleet_release": 1,
    "fleet_fault_hosts": [],
    "fleet_drop_tcp_hosts": [],
    "fleet_broken_hosts": [],
    "fleet_fault": "{{ inventory_hostname in fleet_fault_hosts }}",
    # A canary, then 10% of the hosts, then the rest.
    "xdp_rollout_batches": [1, "10%", "100%"],
    "xdp_rollout_settle": 1,
    "xdp_rollout_rate_interval": 1,
    "xdp_rollout_health_rules": [
        {"name": "frames reach the program", "interface": "eth0",
         "metric": "xdp.rates.verdict_count", "min": 20},
        {"name": "share of dropped frames", "interface": "eth0",
         "metric": "xdp.rates.verdict_count.1", "per": "xdp.rates.verdict_count", "max": 0.01},
        {"name": "received frames per second against before the change", "interface": "eth0",
         "metric": "rates.stats.rx_packets", "min_vs_before": 0.5},
    ],
}


def write_inventory(directory, prefix, receivers):
    if receivers < 1:
        sys.exit("fleet_lab.py: --receivers must be at least 1")
    if len(prefix) > 10 or not prefix.replace("-", "").isalnum():
        sys.exit("fleet_lab.py: --prefix must be at most 10 letters, digits or dashes")
    os.makedirs(os.path.join(directory, "group_vars"), exist_ok=True)
    hosts = {receiver_name(prefix, i): None for i in range(1, receivers + 1)}
    inventory = {"all": {"children": {
        "lab": {"children": {"fleet_receivers": {"hosts": hosts}}},
        "xdp_hosts": {"children": {"fleet_receivers": None}},
        # No verification bursts: the rollout's gates watch the background traffic.
        "xdp_senders": {"hosts": {}},
    }}}
    lab_vars = {
        "ansible_connection": "ebpf.xdp.netns",
        "ansible_python_interpreter": "/usr/bin/python3",
        "toolchain_apt_update_cache": False,
    }
    files = {
        "hosts.yml": inventory,
        os.path.join("group_vars", "all.yml"): topology(prefix, receivers),
        os.path.join("group_vars", "lab.yml"): lab_vars,
        os.path.join("group_vars", "xdp_hosts.yml"): HOST_GROUP_VARS,
    }
    for name, content in files.items():
        with open(os.path.join(directory, name), "w", encoding="utf-8") as f:
            f.write(HEADER + "---\n" + yaml.safe_dump(content, sort_keys=False, width=120))
    print("%s: %d receivers %s..%s" % (directory, receivers, receiver_name(prefix, 1), receiver_name(prefix, receivers)))


def traffic(directory, action, rate):
    with open(os.path.join(directory, "group_vars", "all.yml"), encoding="utf-8") as f:
        sender = yaml.safe_load(f)["fleet_sender"]
    # A dot file: Ansible reads every other file of an inventory directory as inventory (this one as a host named
    # by the pid, which a run on "all" then tries to reach).
    pid_file = os.path.join(directory, ".traffic.pid")
    stop(pid_file)
    if action == "start":
        # The limited broadcast out of eth0 needs no route, address or neighbour on the receivers.
        argv = ["ip", "netns", "exec", sender, "ping", "-q", "-b", "-I", "eth0", "-i", "%g" % (1.0 / rate),
                "255.255.255.255"]
        # pylint: disable-next=consider-using-with
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        with open(pid_file, "w", encoding="utf-8") as f:
            f.write("%d\n" % proc.pid)
        print("traffic: %g frames/s from %s/eth0 to every receiver (pid %d)" % (rate, sender, proc.pid))


def stop(pid_file):
    try:
        with open(pid_file, encoding="utf-8") as f:
            pid = int(f.read())
    except (OSError, ValueError):
        return
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    os.unlink(pid_file)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    inv = sub.add_parser("inventory", help="write the inventory directory")
    inv.add_argument("directory")
    inv.add_argument("--receivers", "-n", type=int, default=4)
    inv.add_argument("--prefix", default="fleet")
    tr = sub.add_parser("traffic", help="start or stop the background traffic")
    tr.add_argument("directory")
    tr.add_argument("action", choices=["start", "stop"])
    tr.add_argument("--rate", type=float, default=200.0, help="frames per second")
    args = parser.parse_args()
    if args.command == "inventory":
        write_inventory(args.directory, args.prefix, args.receivers)
    else:
        traffic(args.directory, args.action, args.rate)


if __name__ == "__main__":
    main()
