"""Roles that build commands from inventory values refuse names that are not names, before they change anything.

The lab role writes namespace and interface names, MACs and addresses into
`ip` arguments and `ip -batch` input; a value holding a space or a newline
was a second word or a second command there (before these checks, a MAC
"02:00:00:00:82:01\\nnetns add y" made the namespace y).
Each case runs lab_up.yml (or lab_down.yml) on an inventory of its own with
one bad value and asserts the refusal names it, and that no namespace, pin
or file appeared. The namespaces are unique per run and never created.
"""

import json
import os
import uuid

import pytest
import yaml

from conftest import ROOT, ansible_playbook, task_results

PLAYBOOKS = os.path.join(ROOT, "playbooks")
# The modules' words (module_utils/host/names), which the roles' checks use.
IFNAME = "is not an interface name: 1 to 15 bytes without '/', ':', whitespace or control characters, and not '.' " \
         "or '..'"
NETNS = "is not a network namespace name (a name under /run/netns, as `ip netns list` shows; no '/', not '.' or " \
        "'..', no control characters, at most 255 bytes)"
CHECK = "Check the names and addresses of the topology"


def netns_names():
    return sorted(os.listdir("/run/netns")) if os.path.isdir("/run/netns") else []


class Topology:
    """A two-namespace lab inventory (unique names), one value of it spoilt by the case."""

    def __init__(self, path):
        self.tag = "ri" + uuid.uuid4().hex[:6]
        self.path = str(path)
        self.sender, self.receiver = self.tag + "-s", self.tag + "-r"
        self.vars = {
            "lab_namespaces": [self.sender, self.receiver],
            "lab_links": [{"a": {"netns": self.sender, "ifname": "eth0", "mac": "02:00:00:00:81:01",
                                 "ipv4": "10.97.0.1/24"},
                           "b": {"netns": self.receiver, "ifname": "eth0", "mac": "02:00:00:00:82:01",
                                 "ipv4": "10.97.0.2/24"}}],
            "lab_pin_root": "/sys/fs/bpf/ebpf_xdp",
        }

    def run(self, playbook, check=False):
        os.makedirs(os.path.join(self.path, "group_vars"), exist_ok=True)
        with open(os.path.join(self.path, "hosts.yml"), "w") as f:
            yaml.safe_dump({"all": {"hosts": {"localhost": {"ansible_connection": "local",
                                                            "ansible_python_interpreter": "/usr/bin/python3"}}}}, f)
        with open(os.path.join(self.path, "group_vars", "all.yml"), "w") as f:
            yaml.safe_dump(self.vars, f)
        return ansible_playbook("-i", self.path, os.path.join(PLAYBOOKS, playbook), check=check, expect_ok=False)


def refused(topology, playbook, check=False):
    """Run playbook; assert it failed at the name check and nothing of the lab appeared. The check's message.

    Other tests make namespaces and pins on this machine meanwhile: only names holding the case's tag count.
    """
    out = topology.run(playbook, check=check)
    assert out["stats"]["localhost"]["failures"] == 1 and out["stats"]["localhost"]["changed"] == 0, out["stats"]
    result = task_results(out, CHECK)["localhost"]
    assert result.get("failed") and "Traceback" not in result["msg"], result
    # Nothing appeared: no namespace of the topology (or one smuggled in by a name), no pin directory.
    assert [n for n in netns_names() if topology.tag in n] == []
    pins = os.listdir("/sys/fs/bpf/ebpf_xdp") if os.path.isdir("/sys/fs/bpf/ebpf_xdp") else []
    assert [n for n in pins if topology.tag in n] == []
    return result["msg"]


@pytest.fixture(name="topology")
def topology_fixture(tmp_path):
    return Topology(tmp_path / "inventory")


@pytest.mark.parametrize("playbook,check", [("lab_up.yml", False), ("lab_up.yml", True), ("lab_down.yml", False)],
                         ids=["up", "up-check", "down"])
def test_namespace_name_with_a_space_is_refused(topology, playbook, check):
    bad = topology.receiver.replace("-", " ")
    topology.vars["lab_namespaces"][1] = bad
    topology.vars["lab_links"][0]["b"]["netns"] = bad
    msg = refused(topology, playbook, check)
    assert msg == "lab: lab_namespaces %r is not a network namespace name a role can use: it holds whitespace. " \
                  "Nothing was changed." % bad, msg


@pytest.mark.parametrize("playbook", ["lab_up.yml", "lab_down.yml"])
def test_namespace_name_with_a_newline_is_refused(topology, playbook):
    """Written into `ip -batch` input this name is two lines, the second making the namespace <tag>-evil (before the
    check lab_up stopped earlier, at a JSON error of its read, with no word about the name)."""
    bad = topology.receiver + "\nnetns add " + topology.tag + "-evil"
    topology.vars["lab_namespaces"][1] = bad
    topology.vars["lab_links"][0]["b"]["netns"] = bad
    msg = refused(topology, playbook)
    assert msg == "lab: lab_namespaces %r %s. Nothing was changed." % (bad, NETNS), msg
    assert not os.path.exists("/run/netns/%s-evil" % topology.tag)


@pytest.mark.parametrize("where,value,said", [
    (("lab_links", 0, "a", "ifname"), "eth0 up", "lab_links ifname 'eth0 up' " + IFNAME),
    (("lab_links", 0, "a", "ifname"), "eth0#x",
     "lab_links ifname 'eth0#x' holds one of \" ' # \\, which ip -batch reads as syntax"),
    (("lab_links", 0, "a", "ifname"), "a23456789012345x", "lab_links ifname 'a23456789012345x' " + IFNAME),
    (("lab_links", 0, "a", "ifname"), "..", "lab_links ifname '..' " + IFNAME),
    # Before the check, this MAC made the namespace <tag>-evil (`ip -batch` read its second line as a command).
    (("lab_links", 0, "b", "mac"), "02:00:00:00:82:01\nnetns add {tag}-evil",
     "lab_links mac '02:00:00:00:82:01\\nnetns add {tag}-evil' is not a MAC address: six pairs of hex digits joined "
     "by colons"),
    (("lab_links", 0, "b", "ipv4"), "10.97.0.2/24\n",
     "lab_links ipv4 '10.97.0.2/24\\n' is not an IPv4 address and /PREFIXLEN"),
    (("lab_namespaces", 0), "..", "lab_namespaces '..' " + NETNS),
    (("lab_namespaces", 0), "../../etc", "lab_namespaces '../../etc' " + NETNS),
    (("lab_pin_root",), "/sys/fs/bpf/../../..",
     "lab_pin_root '/sys/fs/bpf/../../..' has a '..' component: give the path it means without one"),
    (("lab_pin_root",), "/sys/fs/bpf/", "lab_pin_root '/sys/fs/bpf/' is not normalised (no '.', '//' or trailing "
                                        "'/'): give it as /sys/fs/bpf"),
    (("lab_pin_root",), "relative/pins", "lab_pin_root 'relative/pins' is not an absolute path: give it from / (a "
                                         "relative path depends on the directory the module runs in)"),
], ids=["ifname-space", "ifname-hash", "ifname-16", "ifname-dotdot", "mac-newline", "ipv4-newline", "netns-dotdot",
        "netns-path", "pin-root-dotdot", "pin-root-slash", "pin-root-relative"])
def test_bad_values_are_refused_by_name(topology, where, value, said):
    holder = topology.vars
    for key in where[:-1]:
        holder = holder[key]
    value, said = value.format(tag=topology.tag), said.format(tag=topology.tag)
    holder[where[-1]] = value
    if where == ("lab_namespaces", 0):
        topology.vars["lab_links"][0]["a"]["netns"] = value
    msg = refused(topology, "lab_up.yml" if where[0] != "lab_pin_root" else "lab_down.yml")
    assert msg == "lab: %s. Nothing was changed." % said, msg


def test_sysctl_climbing_out_of_net_is_refused(topology):
    """sysctl(8) swaps '.' and '/': net.//.kernel.x would be /proc/sys/net/../kernel/x, a machine-wide setting."""
    with open("/proc/sys/kernel/core_pattern") as f:
        before = f.read()
    topology.vars["lab_sysctls"] = [{"netns": topology.sender, "name": "net.//.kernel.core_pattern", "value": "x"}]
    msg = refused(topology, "lab_up.yml")
    assert msg == "lab: lab_sysctls name 'net.//.kernel.core_pattern' is not a sysctl name: it has an empty part, or a " \
                  "part that sysctl would read as '.' or '..'. Nothing was changed.", msg
    with open("/proc/sys/kernel/core_pattern") as f:
        assert f.read() == before


def test_every_bad_value_is_told_at_once(topology):
    topology.vars["lab_namespaces"] = [topology.sender + " x", topology.receiver + "\ny"]
    topology.vars["lab_links"][0]["a"]["netns"] = topology.sender + " x"
    topology.vars["lab_links"][0]["b"].update(netns=topology.receiver + "\ny", ifname="eth 0")
    msg = refused(topology, "lab_up.yml")
    assert msg == "lab: %s; %s; %s. Nothing was changed." % (
        "lab_namespaces %r is not a network namespace name a role can use: it holds whitespace" % (
            topology.sender + " x"),
        "lab_namespaces %r %s" % (topology.receiver + "\ny", NETNS), "lab_links ifname 'eth 0' " + IFNAME), msg


# ---------------------------------------------------------------- the benchmark role

BENCHMARK_CHECK = "Check the names, addresses and directory the benchmark uses"


@pytest.mark.parametrize("extra,said", [
    ({"benchmark_objects_dir": "/var/lib/ebpf_xdp/../../../etc"},
     "benchmark_objects_dir '/var/lib/ebpf_xdp/../../../etc' has a '..' component: give the path it means without "
     "one"),
    ({"benchmark_objects_dir": "var/lib/bench"},
     "benchmark_objects_dir 'var/lib/bench' is not an absolute path: give it from / (a relative path depends on the "
     "directory the module runs in)"),
    ({"benchmark_drop": {"sender": "s", "sender_interface": "eth0; reboot", "receiver": "r",
                         "receiver_interface": "eth0", "receiver_netns": "rx\nx", "src_ip": "198.18.0.1",
                         "dst_ip": "198.18.0.2)"}},
     "netns 'rx\\nx' " + NETNS + "; interface 'eth0; reboot' " + IFNAME + "; address '198.18.0.2)' is not an IPv4 "
     "address"),
], ids=["objects-dir-dotdot", "objects-dir-relative", "names"])
def test_benchmark_refuses_bad_names_and_directories(tmp_path, extra, said):
    """The benchmark's metrics/ under benchmark_objects_dir is removed at the end, and its names go into shell lines
    (quoted), ip and trafgen's configuration: refused before the role reads or changes anything on a host."""
    play = tmp_path / "play.yml"
    play.write_text(yaml.safe_dump([{"name": "Benchmark", "hosts": "localhost", "connection": "local",
                                     "gather_facts": False, "roles": [{"role": "ebpf.xdp.benchmark"}]}]))
    results = tmp_path / "results"
    out = ansible_playbook("-i", "localhost,", str(play), expect_ok=False, extra_vars=[dict(
        {"benchmark_cases": "drop", "benchmark_results_dir": str(results), "ansible_python_interpreter":
         "/usr/bin/python3"}, **extra)])
    assert out["stats"]["localhost"]["failures"] == 1 and out["stats"]["localhost"]["changed"] == 0, out["stats"]
    result = task_results(out, BENCHMARK_CHECK)["localhost"]
    assert result["msg"] == "benchmark: %s. Nothing was changed." % said, result["msg"]
    assert not results.exists() and not os.path.exists("var/lib/bench")


# ---------------------------------------------------------------- the toolchain role

def test_toolchain_refuses_a_bpffs_path_or_mode_that_would_rewrite_its_unit(tmp_path):
    """Path and mode are written into ebpf-xdp-bpffs.service (ExecStart=/bin/sh -c '... mode=MODE ...' PATH): a
    newline would be a directive of its own, a quote a command. Refused before the first package or mount."""
    play = tmp_path / "play.yml"
    play.write_text(yaml.safe_dump([{"name": "Toolchain", "hosts": "localhost", "connection": "local",
                                     "gather_facts": False, "roles": [{"role": "ebpf.xdp.toolchain"}]}]))
    marker = tmp_path / "ran"
    out = ansible_playbook("-i", "localhost,", str(play), expect_ok=False, extra_vars=[{
        "ansible_python_interpreter": "/usr/bin/python3",
        "toolchain_bpffs_path": "/sys/fs/bpf-%s\nExecStartPost=/bin/touch %s" % (uuid.uuid4().hex[:6], marker),
        "toolchain_bpffs_mode": "0700' ; touch %s ; '" % marker}])
    assert out["stats"]["localhost"]["failures"] == 1 and out["stats"]["localhost"]["changed"] == 0, out["stats"]
    msg = task_results(out, "Check the bpffs path and mode")["localhost"]["msg"]
    assert msg.startswith("toolchain: toolchain_bpffs_path '/sys/fs/bpf-") and msg.endswith(". Nothing was changed.")
    assert "is not a usable path: no control characters (newline, NUL, ...)" in msg, msg
    assert "holds a character other than letters, digits and _ . / @ + - (it is written into a systemd unit)" in msg
    assert 'toolchain_bpffs_mode "0700\' ; touch %s ; \'" is not an octal mode such as "0700"' % marker in msg, msg
    assert not marker.exists()
    unit = "/etc/systemd/system/ebpf-xdp-bpffs.service"
    if os.path.exists(unit):
        with open(unit) as f:
            assert str(marker) not in f.read()


# ---------------------------------------------------------------- the xdp_metrics role

def test_xdp_metrics_refuses_names_and_paths_that_would_write_elsewhere(tmp_path):
    """The service name becomes a unit file's name and its Description, the directories its ExecStart."""
    play = tmp_path / "play.yml"
    play.write_text(yaml.safe_dump([{"name": "Metrics", "hosts": "localhost", "connection": "local",
                                     "gather_facts": False, "roles": [{"role": "ebpf.xdp.xdp_metrics"}]}]))
    marker = tmp_path / "ran"
    name = "rm%s\nExecStartPre=/bin/touch %s" % (uuid.uuid4().hex[:6], marker)
    out = ansible_playbook("-i", "localhost,", str(play), expect_ok=False, extra_vars=[{
        "ansible_python_interpreter": "/usr/bin/python3", "xdp_metrics_service_name": name,
        "xdp_metrics_install_dir": "lib/metrics", "xdp_metrics_config_dir": str(tmp_path / "etc" / ".." / ".."),
        "xdp_metrics_netns": ["../../proc/1/ns/net"], "xdp_metrics_install_packages": False}])
    assert out["stats"]["localhost"]["failures"] == 1 and out["stats"]["localhost"]["changed"] == 0, out["stats"]
    msg = task_results(out, "Check the exporter's names and paths")["localhost"]["msg"]
    assert msg == (
        "xdp_metrics: xdp_metrics_service_name %s is not a service name (letters, digits, _ . @ -, first a letter "
        "or digit, at most 200); xdp_metrics_netns '../../proc/1/ns/net' %s; xdp_metrics_install_dir 'lib/metrics' "
        "is not an absolute path: give it from / (a relative path depends on the directory the module runs in); "
        "xdp_metrics_config_dir '%s/etc/../..' has a '..' component: give the path it means without one. Nothing "
        "was changed." % (json.dumps(name), NETNS, tmp_path)), msg
    assert os.listdir(tmp_path) == ["play.yml"] and not os.path.exists("lib")
    units = os.listdir("/etc/systemd/system") if os.path.isdir("/etc/systemd/system") else []
    assert [unit for unit in units if unit.startswith(name[:8])] == []


# ---------------------------------------------------------------- the traffic roles

@pytest.mark.parametrize("role,task,extra,said", [
    ("pktgen_sender", "Check the interface and namespace names",
     {"pktgen_sender_interface": "eth0\nx", "pktgen_sender_netns": "a b", "pktgen_sender_src_ip": "10.0.0.1",
      "pktgen_sender_dst_ip": "10.0.0.2", "pktgen_sender_dst_mac": "ff:ff:ff:ff:ff:ff;x"},
     "pktgen_sender: pktgen_sender_interface 'eth0\\nx' " + IFNAME + "; pktgen_sender_netns 'a b' is not a network "
     "namespace name a role can use: it holds whitespace. Nothing was sent."),
    ("pktgen_receiver", "Check the interface and namespace names",
     {"pktgen_receiver_interfaces": ["eth0", "../x"], "pktgen_receiver_netns": ".."},
     "pktgen_receiver: pktgen_receiver_interfaces '../x' " + IFNAME + "; pktgen_receiver_netns '..' " + NETNS
     + ". Nothing was changed."),
    ("traffic_check", "Check the interface and namespace names",
     {"traffic_check_interface": "eth0", "traffic_check_src_ip": "10.0.0.1", "traffic_check_dst_ip": "10.0.0.2",
      "traffic_check_receiver": "localhost", "traffic_check_receiver_interface": "a23456789012345x",
      "traffic_check_receiver_netns": "r\nx"},
     "traffic_check: traffic_check_receiver_interface(s) 'a23456789012345x' " + IFNAME
     + "; traffic_check_receiver_netns 'r\\nx' " + NETNS + ". Nothing was sent."),
], ids=["pktgen_sender", "pktgen_receiver", "traffic_check"])
def test_traffic_roles_refuse_bad_names_first(tmp_path, role, task, extra, said):
    play = tmp_path / "play.yml"
    play.write_text(yaml.safe_dump([{"name": role, "hosts": "localhost", "connection": "local",
                                     "gather_facts": False, "roles": [{"role": "ebpf.xdp." + role}]}]))
    out = ansible_playbook("-i", "localhost,", str(play), expect_ok=False,
                           extra_vars=[dict(extra, ansible_python_interpreter="/usr/bin/python3")])
    assert out["stats"]["localhost"]["failures"] == 1 and out["stats"]["localhost"]["changed"] == 0, out["stats"]
    assert task_results(out, task)["localhost"]["msg"] == said
