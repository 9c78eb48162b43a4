"""playbooks/traffic.yml and the roles ebpf.xdp.pktgen_sender and ebpf.xdp.pktgen_receiver, end to end.

The shared lab is left alone: each run of this module builds a lab of its
own with playbooks/lab_up.yml from a temporary inventory (two namespaces
with unique names, three veth pairs) and removes it with lab_down.yml:

    S eth0 ------ eth0 R   the runs of traffic.yml (its first link to a receiver)
    S eth1 ------ eth1 R   the receiver role's four-step rhythm
    S eth2 ------ eth2 R   no XDP program on R: frames of engine xdp could not go there

The receiving side is witnessed apart from the roles: the xdp_drop_count
map on R/eth0 is read directly (test_xdp_trafficgen_engine.rx_counts). The
runs here name the xdp_trafficgen engine. The sender role's pktgen engine
runs where the kernel has pktgen: on the lab's VM host (Debian 12's 6.1,
pktgen as a module), through this playbook over SSH
(test_vm.py::test_traffic_playbook_sends_with_pktgen_on_the_vm); the pktgen
module alone is tested by test_pktgen_kernel.py. On a kernel without pktgen
(this machine's), asking the role for it is a clear error
(test_sender_role_bad_input).
"""

import os
import uuid

import pytest

import kernel_features
from kernel_features import needs
import yaml

from conftest import ROOT, ansible_playbook, changed_by_host, sh, task_results
from test_xdp_trafficgen_engine import rx_counts


class OwnLab:
    """A lab inventory of its own: hosts senders/S and receivers/R, namespaces named after them."""

    def __init__(self, path):
        tag = uuid.uuid4().hex[:6]
        self.path = str(path)
        self.sender, self.receiver = "tr%s-s" % tag, "tr%s-r" % tag
        links = [{"a": {"netns": self.sender, "ifname": "eth%d" % i, "mac": "02:00:00:00:71:0%d" % i,
                        "ipv4": "10.98.%d.1/24" % i},
                  "b": {"netns": self.receiver, "ifname": "eth%d" % i, "mac": "02:00:00:00:72:0%d" % i,
                        "ipv4": "10.98.%d.2/24" % i}} for i in range(3)]
        os.makedirs(os.path.join(self.path, "group_vars"))
        self._write("hosts.yml", {"all": {"children": {"lab": {"children": {
            "senders": {"hosts": {self.sender: None}}, "receivers": {"hosts": {self.receiver: None}}}}}}})
        self._write("group_vars/all.yml", {"lab_namespaces": [self.sender, self.receiver], "lab_links": links,
                                           "lab_host_links": "{{ lab_links | ebpf.xdp.link_ends(inventory_hostname) }}"})
        self._write("group_vars/lab.yml", {"ansible_connection": "ebpf.xdp.netns",
                                           "ansible_python_interpreter": "/usr/bin/python3"})

    def _write(self, name, data):
        with open(os.path.join(self.path, name), "w") as f:
            yaml.safe_dump(data, f)

    def playbook(self, playbook, *extra, check=False, expect_ok=True):
        """ansible-playbook on this inventory; the json callback's output."""
        return ansible_playbook("-i", self.path, playbook, check=check, expect_ok=expect_ok, extra_vars=extra)

    def xdp_line(self, ifname):
        out = sh("ip", "-n", self.receiver, "-d", "link", "show", ifname).stdout
        return " ".join(line.strip() for line in out.splitlines() if "prog/xdp" in line)


def playbook_path(name):
    return os.path.join(ROOT, "playbooks", name)


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    own = OwnLab(tmp_path_factory.mktemp("traffic_lab") / "inventory")
    try:
        own.playbook(playbook_path("lab_up.yml"))
        yield own
    finally:
        own.playbook(playbook_path("lab_down.yml"), expect_ok=False)
        assert not os.path.exists("/run/netns/" + own.receiver)


def traffic_results(out):
    """The rows that traffic.yml keeps on localhost (set by its one sender, delegated)."""
    [result] = task_results(out, "Keep the results on localhost").values()
    return result["ansible_facts"]["traffic_results"]


# ---------------------------------------------------------------- counts, every engine this kernel has


@pytest.mark.parametrize("engine,extra", [
    needs("xdp_live_frames", "xdp", {"pktgen_sender_count": 300000}),
    # Paced: a veth peer's XDP ring has 256 slots, and a frame it refuses is a frame never counted.
    ("socket", {"pktgen_sender_count": 3000, "pktgen_sender_ratep": 20000}),
], ids=["xdp_trafficgen-xdp", "xdp_trafficgen-socket"])
def test_generator_counts_equal_receiver_counts(lab, engine, extra):
    attached_before = bool(lab.xdp_line("eth0"))
    before = rx_counts(lab.receiver) if attached_before else {}
    # Named, not auto: auto picks pktgen on a kernel that has it (the VM's, tested in test_vm.py).
    out = lab.playbook(playbook_path("traffic.yml"), dict(extra, pktgen_sender_engine="xdp_trafficgen",
                                                          pktgen_sender_trafficgen_engine=engine))
    count = extra["pktgen_sender_count"]

    sender = task_results(out, "Keep the results as facts")[lab.sender]["ansible_facts"]["pktgen_sender_result"]
    assert (sender["engine"], sender["method"], sender["sent"], sender["protocols"]) == (
        "xdp_trafficgen", engine, count, {"udp": count}), sender
    assert sender["errors"] == 0 and sender["pps"] > 0 and sum(t["sent"] for t in sender["threads"]) == count
    receiver = task_results(out, "Keep what arrived as facts")[lab.receiver]["ansible_facts"]["pktgen_receiver_result"]
    assert receiver["received"] == {"eth0": {"17": count}} and receiver["total"] == {"eth0": count}, receiver

    [row] = traffic_results(out)
    assert row["sender"] == lab.sender + "/eth0" and row["receiver"] == lab.receiver + "/eth0", row
    assert (row["engine"], row["sent"], row["received"], row["loss"]) == ("xdp_trafficgen/" + engine, count, count, 0)
    assert row["sent_pps"] > 0 and row["received_pps"] == pytest.approx(row["sent_pps"], rel=1e-4), row
    table = task_results(out, "Show the runs")[lab.sender]["msg"].splitlines()
    assert table[0].split()[:4] == ["sender", "receiver", "engine", "sent"], table
    assert table[1].split()[:5] == [lab.sender + "/eth0", lab.receiver + "/eth0", "xdp_trafficgen/" + engine,
                                    str(count), "%.0f" % row["sent_pps"]] and table[1].endswith("0.00%"), table

    # The generator's job file is gone from the sender (the lab's hosts share this machine's file system and user).
    job = task_results(out, "Start xdp_trafficgen")[lab.sender]["ansible_job_id"]
    async_dir = os.environ.get("ANSIBLE_ASYNC_DIR", "~/.ansible_async")  # make test moves it out of the home
    assert not os.path.exists(os.path.expanduser(os.path.join(async_dir, job))), job

    # The witness: the receiver's map itself, read apart from Ansible.
    after = rx_counts(lab.receiver)
    assert after.get(17, 0) - before.get(17, 0) == count and set(after) == {17}, (before, after)

    # A generator run is an action; an attachment that was there already did not change.
    changed = changed_by_host(out)
    assert changed[lab.sender] >= 1, changed
    assert changed[lab.receiver] == 0 if attached_before else changed[lab.receiver] >= 1, changed


def test_check_mode_sends_nothing(lab):
    """Check mode: settings and the attachment checked, nothing sent, the run reported as a change."""
    before = rx_counts(lab.receiver) if lab.xdp_line("eth0") else {}
    out = lab.playbook(playbook_path("traffic.yml"), {"pktgen_sender_count": 1000}, check=True)
    assert changed_by_host(out)[lab.sender] >= 1, changed_by_host(out)
    [row] = traffic_results(out)
    assert (row["sent"], row["received"]) == (0, 0), row
    assert "check mode: nothing was sent" in task_results(out, "Show the runs")[lab.sender]["msg"]
    assert (rx_counts(lab.receiver) if lab.xdp_line("eth0") else {}) == before


# ---------------------------------------------------------------- the receiver role's configuration


def test_receiver_role_rhythm(lab, tmp_path):
    """check -> run -> check -> run: the attach changes, then nothing; check mode attaches nothing."""
    play = tmp_path / "receiver.yml"
    objects = tmp_path / "objects"
    play.write_text(yaml.safe_dump([{
        "name": "Count on eth1", "hosts": "receivers", "gather_facts": False,
        "roles": [{"role": "ebpf.xdp.pktgen_receiver", "vars": {
            "pktgen_receiver_interfaces": ["eth1"], "pktgen_receiver_action": "pass",
            "pktgen_receiver_sample_seconds": 0.2,
            # A fresh object directory: the first check has nothing compiled yet.
            "pktgen_receiver_src_dir": str(tmp_path / "src"), "pktgen_receiver_object_dir": str(objects)}}]}]))
    steps = []
    for check in (True, False, True, False):
        out = lab.playbook(str(play), check=check)
        steps.append(changed_by_host(out)[lab.receiver])
        if not steps[1:]:
            assert lab.xdp_line("eth1") == "" and not objects.exists(), "check mode attached or compiled"
    assert steps[0] > 0 and steps[1] > 0 and steps[2:] == [0, 0], steps
    assert "prog/xdp id" in lab.xdp_line("eth1")
    shown = task_results(out, "Show the rates per IP protocol")[lab.receiver]["results"][0]["msg"]
    assert shown.splitlines()[1] == "no IP frames", shown
    result = task_results(out, "Keep what arrived as facts")[lab.receiver]["ansible_facts"]["pktgen_receiver_result"]
    assert result == {"action": "pass", "received": {"eth1": {}}, "total": {"eth1": 0}, "rates": {"eth1": {}}}, result


# ---------------------------------------------------------------- bad input


# (case, variables, words of the error). Most errors are xdp_trafficgen's own (tested module-deep in
# test_xdp_trafficgen*.py); here they must come through the role, before anything is compiled or sent.
BAD = [
    ("unknown device", {"pktgen_sender_interface": "eth7"}, "interface 'eth7' does not exist"),
    ("malformed MAC", {"pktgen_sender_dst_mac": "02:00"}, "dst_mac '02:00' is not a MAC address"),
    ("malformed IP", {"pktgen_sender_dst_ip": "10.98.0"}, "dst_ip '10.98.0' is not an IPv4 or IPv6 address"),
    ("size below the minimum", {"pktgen_sender_size": 59}, "size must be between 60 and 9000 bytes for udp over IPv4"),
    ("zero count", {"pktgen_sender_count": 0}, "count must be a positive number of frames per protocol, not 0"),
    ("negative count", {"pktgen_sender_count": -5}, "count must be a positive number of frames per protocol, not -5"),
    ("a CPU that is not there", {"pktgen_sender_cpus": [4096]}, "CPU 4096 is not one this task may run on"),
    ("no XDP frames on the device", {"pktgen_sender_interface": "eth2", "pktgen_sender_dst_ip": "10.98.2.2",
                                     "pktgen_sender_src_ip": "10.98.2.1", "pktgen_sender_trafficgen_engine": "xdp"},
     # Before Linux 6.3 (no xdp_features) the peer's program and GRO are read apart; the words are the same.
     "engine xdp cannot deliver frames: veth eth2 cannot take XDP frames: its peer has neither an XDP program nor GRO"),
    ("unknown engine", {"pktgen_sender_engine": "trafgen"},
     "value of pktgen_sender_engine must be one of: auto, pktgen, xdp_trafficgen, got: trafgen"),
]
if not kernel_features.features()["pktgen"]:  # bad input only where the kernel cannot do it
    BAD.append(("pktgen absent", {"pktgen_sender_engine": "pktgen"}, "but the kernel of %(sender)s has no pktgen"))


def test_sender_role_bad_input(lab, tmp_path):
    """Each case a clear error from the role, with nothing compiled and nothing sent."""
    objects = tmp_path / "objects"
    base = {"pktgen_sender_interface": "eth0", "pktgen_sender_src_ip": "10.98.0.1", "pktgen_sender_dst_ip": "10.98.0.2",
            "pktgen_sender_dst_mac": "02:00:00:00:72:00", "pktgen_sender_count": 100,
            "pktgen_sender_trafficgen_engine": "xdp", "pktgen_sender_engine": "xdp_trafficgen",
            "pktgen_sender_src_dir": str(tmp_path / "src"), "pktgen_sender_object_dir": str(objects)}
    tasks = []
    for case, extra, _words in BAD:
        tasks.append({"name": case, "block": [
            {"name": "Send: " + case, "ansible.builtin.include_role": {"name": "ebpf.xdp.pktgen_sender"},
             "vars": dict(base, **extra)},
            {"name": "Record no error: " + case, "ansible.builtin.set_fact": {
                "errors": "{{ errors | default({}) | combine({%r: 'no error'}) }}" % case}}],
            "rescue": [{"name": "Record the error: " + case, "ansible.builtin.set_fact": {
                "errors": "{{ errors | default({}) | combine({%r: ansible_failed_result.msg}) }}" % case}}]})
    tasks.append({"name": "Show the errors", "ansible.builtin.debug": {"var": "errors"}})
    play = tmp_path / "bad.yml"
    play.write_text(yaml.safe_dump([{"name": "Bad input", "hosts": "senders", "gather_facts": False,
                                     "tasks": tasks}]))
    before = rx_counts(lab.receiver) if lab.xdp_line("eth0") else {}

    out = lab.playbook(str(play))
    errors = task_results(out, "Show the errors")[lab.sender]["errors"]
    for case, _extra, words in BAD:
        assert words % {"sender": lab.sender} in errors[case], (case, errors[case])
    assert not objects.exists(), "a bad input compiled the generator"
    assert (rx_counts(lab.receiver) if lab.xdp_line("eth0") else {}) == before, "a bad input sent frames"


@pytest.mark.debian12("traffic_check")
def test_traffic_check_counts_every_frame_of_its_burst(run_distro, pair, drop_obj, tmp_path):
    """The role ebpf.xdp.traffic_check alone (deploy_xdp.yml's bursts), on a pair of its own rather than a lab:
    a burst out of tx/eth0, counted by xdp_drop_count on rx/eth0 through the receiver's facts read before and
    after. It only verifies: check mode sends nothing, and a run changes nothing (twice); the receiver's own map,
    read apart from the role, counted exactly what the role said was sent."""
    attached = run_distro("xdp_program", dict(interface="eth0", netns=pair.rx, object=drop_obj,
                                              program="xdp_drop_count", mode="native"))
    assert attached["changed"] and not attached.get("failed"), attached
    play = tmp_path / "traffic_check.yml"
    play.write_text(yaml.safe_dump([{
        "name": "traffic_check", "hosts": "localhost", "connection": "local", "gather_facts": False,
        "vars": {"ansible_python_interpreter": "/usr/bin/python3"},
        "roles": [{"role": "ebpf.xdp.traffic_check", "traffic_check_interface": "eth0", "traffic_check_netns": pair.tx,
                   "traffic_check_src_ip": pair.tx_ip, "traffic_check_dst_ip": pair.rx_ip,
                   "traffic_check_dst_mac": pair.rx_mac, "traffic_check_receiver": "localhost",
                   "traffic_check_receiver_interface": "eth0", "traffic_check_receiver_netns": pair.rx,
                   "traffic_check_count": 30}]}]))
    checked = ansible_playbook("-i", "localhost,", str(play), check=True)
    assert changed_by_host(checked) == {"localhost": 0}, checked["stats"]
    assert rx_counts(pair.rx) == {}
    for round_ in (1, 2):
        out = ansible_playbook("-i", "localhost,", str(play))
        assert changed_by_host(out) == {"localhost": 0}, out["stats"]
        said = [r["msg"] for r in task_results(out, "Check that every frame sent was counted")["localhost"]["results"]]
        assert said == ["eth0 udp: sent 30, counted 30", "eth0 tcp: sent 30, counted 30"], said
        assert rx_counts(pair.rx) == {6: 30 * round_, 17: 30 * round_}
