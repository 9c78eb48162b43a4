"""The rollout of deploy_xdp.yml on a generated lab of four receivers (scripts/fleet_lab.py), with real traffic.

Batches 1, 10% (1), then the other 2; every receiver runs xdp_verdict_count on eth0, whose `release`
constant is the version rolled out, and a faulty host gets xdp_action 1: it drops every frame, and the
gate's share-of-dropped-frames rule catches it. A broadcast ping from the lab's sender feeds every
receiver 200 frames/s all along.

The lab is built once for the file; each test first brings it to the state it
starts from (no program, or release 1 everywhere), so none depends on another
having run, or on their order. The fault on a later batch is marked long (make test-long): in make test the
canary's fault rolls back its batch only, and the scope all stops at batch 2.
"""

import contextlib
import json
import os
import shutil
import subprocess
import tempfile
import time
import uuid

import pytest

from conftest import ROOT, ansible_cli
from ansible_collections.ebpf.xdp.plugins.module_utils.traffic import frames as _frames, pcap as _pcap

FLEET = os.path.join(ROOT, "scripts", "fleet_lab.py")
ENV = dict(os.environ, ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json", ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
           ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"),
           ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, ".build", "collections"))
RECEIVERS = 4


def ansible_playbook(inventory, name, *extra, check=False, limit=None):
    path = name if os.path.isabs(name) else os.path.join(ROOT, "playbooks", name)
    argv = ansible_cli("ansible-playbook") + ["-i", inventory, path] + (["--limit", limit] if limit else [])
    for value in extra:
        argv += ["-e", json.dumps(value)]
    if check:
        argv.append("--check")
    proc = subprocess.run(argv, capture_output=True, text=True, env=ENV, cwd=ROOT, check=False)
    try:
        # pause prints "Pausing for N seconds" before the json callback's document.
        out = json.loads(proc.stdout[proc.stdout.find("{\n"):])
    except ValueError:
        pytest.fail(proc.stdout[-3000:] + proc.stderr[-3000:])
    return proc.returncode, out


def summary(out):
    for play in out["plays"]:
        for task in play["tasks"]:
            if task["task"]["name"].endswith("Sum up the rollout"):
                # It runs once, on the first host of the play.
                return next(iter(task["hosts"].values()))["ansible_facts"]["xdp_rollout_summary"]
    raise AssertionError("no summary")


def changed(out):
    return {host: stats["changed"] for host, stats in out["stats"].items()}


def xdp_of(inventory, hosts):
    """Each host's eth0 XDP facts."""
    argv = ansible_cli("ansible") + ["-i", inventory, ",".join(hosts), "-m", "ebpf.xdp.xdp_facts",
                                     "-a", json.dumps({"interfaces": ["eth0"]})]
    proc = subprocess.run(argv, capture_output=True, text=True, env=ENV, cwd=ROOT, check=True)
    found = json.loads(proc.stdout)["plays"][0]["tasks"][0]["hosts"]
    return {host: found[host]["ansible_facts"]["xdp"]["interfaces"]["eth0"]["xdp"] for host in hosts}


def releases(inventory, hosts):
    return {host: (prog or {}).get("constants", {}).get("release") for host, prog in xdp_of(inventory, hosts).items()}


@pytest.fixture(scope="module")
def fleet():
    prefix = "ro" + uuid.uuid4().hex[:4]
    directory = tempfile.mkdtemp(prefix="fleet-")
    hosts = ["%s%03d" % (prefix, i) for i in range(1, RECEIVERS + 1)]
    subprocess.run(["python3", FLEET, "inventory", directory, "-n", str(RECEIVERS), "--prefix", prefix], check=True)
    try:
        rc, out = ansible_playbook(directory, "lab_up.yml")
        assert rc == 0, out["stats"]
        subprocess.run(["python3", FLEET, "traffic", directory, "start"], check=True)
        yield directory, hosts
    finally:
        subprocess.run(["python3", FLEET, "traffic", directory, "stop"], check=False)
        ansible_playbook(directory, "lab_down.yml")
        for host in hosts:
            shutil.rmtree("/var/lib/ebpf_xdp/lab/" + host, ignore_errors=True)
        shutil.rmtree(directory, ignore_errors=True)


def xdp_program_on_all(inventory, args):
    """One ad-hoc ebpf.xdp.xdp_program task on every host of the inventory; {host: result}."""
    argv = ansible_cli("ansible") + ["-i", inventory, "all", "-m", "ebpf.xdp.xdp_program", "-a", json.dumps(args)]
    proc = subprocess.run(argv, capture_output=True, text=True, env=ENV, cwd=ROOT, check=False)
    found = json.loads(proc.stdout)["plays"][0]["tasks"][0]["hosts"]
    assert not any(res.get("failed") for res in found.values()), found
    return found


@pytest.fixture
def bare(fleet):
    """The fleet with no program on any receiver."""
    inventory, hosts = fleet
    xdp_program_on_all(inventory, {"interface": "eth0", "state": "absent"})
    assert set(releases(inventory, hosts).values()) == {None}
    return fleet


@pytest.fixture
def at_release_1(fleet):
    """Every receiver on release 1, whatever ran before (no run at all when that is so already)."""
    inventory, hosts = fleet
    if releases(inventory, hosts) != dict.fromkeys(hosts, 1):
        rc, out = ansible_playbook(inventory, "deploy_xdp.yml", {"fleet_release": 1})
        assert rc == 0, out["stats"]
        assert releases(inventory, hosts) == dict.fromkeys(hosts, 1)
    return fleet


def test_healthy_rollout_reaches_every_host_then_changes_nothing(bare):
    inventory, hosts = bare
    rc, out = ansible_playbook(inventory, "deploy_xdp.yml", check=True)
    assert rc == 0
    plan = summary(out)
    assert plan["check_mode"] and plan["batches"] == [hosts[:1], hosts[1:2], hosts[2:]]
    assert set(plan["would_change"]) == set(hosts)
    assert set(releases(inventory, hosts).values()) == {None}, "check mode attached"

    rc, out = ansible_playbook(inventory, "deploy_xdp.yml")
    assert rc == 0, summary(out)
    assert sorted(summary(out)["updated"]) == hosts and not summary(out)["rolled_back"]
    assert releases(inventory, hosts) == dict.fromkeys(hosts, 1)

    for check in (True, False):
        rc, out = ansible_playbook(inventory, "deploy_xdp.yml", check=check)
        assert rc == 0 and set(changed(out).values()) == {0}, changed(out)
        assert sorted(summary(out)["unchanged"]) == hosts


def rx_packets(host):
    """Frames the receiver's eth0 has received (a veth counts those its XDP program drops too)."""
    link = json.loads(subprocess.run(["ip", "-n", host, "-j", "-s", "link", "show", "eth0"], capture_output=True,
                                     text=True, check=True).stdout)[0]
    return link["stats64"]["rx"]["packets"]


@contextlib.contextmanager
def traffic_paused(inventory):
    subprocess.run(["python3", FLEET, "traffic", inventory, "stop"], check=True)
    try:
        time.sleep(0.5)  # frames in flight
        yield
    finally:
        subprocess.run(["python3", FLEET, "traffic", inventory, "start"], check=True)


def test_fault_on_the_canary_rolls_back_the_canary_only(at_release_1):
    inventory, hosts = at_release_1
    # Check mode with the fault: the plan, nothing changed, no gate, no rollback.
    rc, out = ansible_playbook(inventory, "deploy_xdp.yml", {"fleet_release": 2, "fleet_fault_hosts": hosts[:1]},
                               check=True)
    assert rc == 0 and set(summary(out)["would_change"]) == set(hosts)
    with traffic_paused(inventory):
        before, rx_before = xdp_of(inventory, hosts[:1])[hosts[0]], rx_packets(hosts[0])
    rc, out = ansible_playbook(inventory, "deploy_xdp.yml", {"fleet_release": 2, "fleet_fault_hosts": hosts[:1]})
    result = summary(out)
    assert rc != 0
    assert result["stopped_at_batch"] == 1 and result["rolled_back"] == hosts[:1]
    assert sorted(result["untouched"]) == hosts[1:] and not result["updated"]
    assert "share of dropped frames" in " ".join(result["problems"][hosts[0]])
    assert changed(out)[hosts[0]] > 0 and all(changed(out)[h] == 0 for h in hosts[1:])
    assert releases(inventory, hosts) == dict.fromkeys(hosts, 1)
    # The rolled-back canary: the same maps, whose counters went on from where they were: every frame that
    # reached eth0 in between was counted once, by release 1, the faulty release 2 (its drops) or release 1 again.
    with traffic_paused(inventory):
        after, rx_after = xdp_of(inventory, hosts[:1])[hosts[0]], rx_packets(hosts[0])
    assert after["constants"]["xdp_action"] == 2 and after["id"] != before["id"]
    assert sorted(m["id"] for m in after["maps"]) == sorted(m["id"] for m in before["maps"]), (before, after)
    counted = {key: after["counters"]["verdict_count"].get(key, 0) - before["counters"]["verdict_count"].get(key, 0)
               for key in after["counters"]["verdict_count"]}
    assert sum(counted.values()) == rx_after - rx_before > 0, (counted, rx_before, rx_after)
    assert counted.get("1", 0) > 0, "the drops of the faulty release were counted"


def migrations(found):
    """Every map_migration report in a playbook's output (a datapath converge's changes, a loop's results), in
    the order the output has them."""
    out = []
    if isinstance(found, dict):
        if isinstance(found.get("map_migration"), list):  # not the option's value in a task's invocation
            out.extend(found["map_migration"])
        for value in found.values():
            out.extend(migrations(value))
    elif isinstance(found, list):
        for value in found:
            out.extend(migrations(value))
    return out


def map_show(map_id):
    return json.loads(subprocess.run(["bpftool", "-j", "map", "show", "id", str(map_id)], capture_output=True,
                                     text=True, check=True).stdout)


def test_a_failed_gate_migrates_a_grown_map_back_into_the_old_layout(at_release_1):
    """Release 2 grows verdict_count (VERDICT_SLOTS 8: max_entries 5 -> 8) and drops every frame on the canary:
    the upgrade migrates the counts into the grown map, the gate fails, and the automatic rollback migrates them
    back into release 1's layout (5 entries), every frame that reached eth0 meanwhile counted once, by release 1,
    the faulty release 2 or release 1 again."""
    inventory, hosts = at_release_1
    grown = {"xdp_deploy_objects": [{"name": "xdp_verdict_count", "src": "xdp_verdict_count.bpf.c",
                                     "defines": {"VERDICT_SLOTS": 8}}]}
    with traffic_paused(inventory):
        before, rx_before = xdp_of(inventory, hosts[:1])[hosts[0]], rx_packets(hosts[0])
    rc, out = ansible_playbook(inventory, "deploy_xdp.yml", {"fleet_release": 2, "fleet_fault_hosts": hosts[:1]},
                               grown)
    result = summary(out)
    assert rc != 0 and result["stopped_at_batch"] == 1 and result["rolled_back"] == hosts[:1], result
    assert "share of dropped frames" in " ".join(result["problems"][hosts[0]])
    assert releases(inventory, hosts) == dict.fromkeys(hosts, 1)
    # Forward into the grown map, then back into release 1's, each by a copy and the counts gained after it.
    # (A result can say it twice: datapath's changes and its diff.)
    moved = list(dict.fromkeys((m["map"], m["outcome"], tuple(m["changes"])) for m in migrations(out)
                               if m["outcome"] != "kept"))
    assert moved == [("verdict_count", "migrated", ("max_entries 5 -> 8",)),
                     ("verdict_count", "migrated", ("max_entries 8 -> 5",))], migrations(out)
    with traffic_paused(inventory):
        after, rx_after = xdp_of(inventory, hosts[:1])[hosts[0]], rx_packets(hosts[0])
    assert after["constants"]["xdp_action"] == 2 and after["id"] != before["id"]
    counts = {m["name"]: m["id"] for m in after["maps"]}
    assert map_show(counts["verdict_count"])["max_entries"] == 5, "release 1's layout again"
    assert counts["verdict_count"] not in [m["id"] for m in before["maps"]], "a new map, migrated twice"
    counted = {key: after["counters"]["verdict_count"].get(key, 0) - before["counters"]["verdict_count"].get(key, 0)
               for key in after["counters"]["verdict_count"]}
    assert sum(counted.values()) == rx_after - rx_before > 0, (counted, rx_before, rx_after)
    assert counted.get("1", 0) > 0, "the drops of the faulty release were counted, and carried back"
    # The rollback put release 1's program back, not its object: the grown one is still the canary's compiled
    # object, and the next run's probe says the canary would change (its objects entry). Release 1 deployed again
    # leaves the fleet as the next test's at_release_1 expects it. Not yet understood: that run's converge reports
    # the canary unchanged, and the probe after it finds nothing to change (check mode and the run disagree).
    rc, out = ansible_playbook(inventory, "deploy_xdp.yml", {"fleet_release": 1})
    assert rc == 0, summary(out)


@pytest.mark.long
def test_fault_on_a_later_batch_rolls_back_that_batch(at_release_1):
    inventory, hosts = at_release_1
    rc, out = ansible_playbook(inventory, "deploy_xdp.yml", {"fleet_release": 2, "fleet_fault_hosts": hosts[1:2]})
    result = summary(out)
    assert rc != 0
    assert result["stopped_at_batch"] == 2
    assert result["updated"] == hosts[:1] and result["rolled_back"] == hosts[1:2]
    assert sorted(result["untouched"]) == hosts[2:]
    assert releases(inventory, hosts) == dict(dict.fromkeys(hosts, 1), **{hosts[0]: 2})


def task_results(out, name):
    """{host: result} of every task whose name ends with name, over the plays of a json callback document."""
    found = {}
    for play in out["plays"]:
        for task in play["tasks"]:
            if task["task"]["name"].endswith(name):
                found.update(task["hosts"])
    return found


def test_the_probe_ends_unchanged_batches_and_a_host_that_would_change_is_still_gated(at_release_1):
    """The probe play (every host's converge in check mode) before the batches: the canary's batch and the 10%'s,
    whose hosts would all stay, end without a converge, their hosts recorded unchanged; the last batch, where one
    host would change (to a faulty variant), converges and is gated as always: its gate fails, that host is
    rolled back, and the rollout stops there."""
    inventory, hosts = at_release_1
    rc, out = ansible_playbook(inventory, "deploy_xdp.yml", {"fleet_release": 1, "fleet_fault_hosts": hosts[2:3]})
    probes = task_results(out, "Ask the converge what it would change (check mode)")
    assert sorted(probes) == hosts, probes
    assert [host for host in hosts if probes[host].get("changes")] == hosts[2:3], probes
    assert not any(probe.get("changed") or probe.get("failed") for probe in probes.values()), probes
    # Batches 1 and 2 ended by the probe: no module ran there; batch 3 converged both its hosts.
    converged = task_results(out, "Converge objects, programs and groups")
    assert sorted(converged) == hosts[2:], sorted(converged)
    result = summary(out)
    assert rc != 0 and result["stopped_at_batch"] == 3, result
    assert result["batches"] == [hosts[:1], hosts[1:2], hosts[2:]], result
    assert result["rolled_back"] == hosts[2:3] and not result["updated"] and not result["untouched"], result
    assert sorted(result["unchanged"]) == hosts[:2] + hosts[3:], result
    assert "share of dropped frames" in " ".join(result["problems"][hosts[2]]), result
    assert changed(out)[hosts[2]] > 0 and all(changed(out)[host] == 0 for host in hosts if host != hosts[2])
    assert releases(inventory, hosts) == dict.fromkeys(hosts, 1)
    assert xdp_of(inventory, hosts[2:3])[hosts[2]]["constants"]["xdp_action"] == 2, "the faulty variant went"


# make test-long: rollback_scope all is the canary fault's rollback (test_fault_on_the_canary_...) over more hosts.
@pytest.mark.long
def test_fault_with_rollback_scope_all_rolls_back_every_host_that_got_it(at_release_1):
    inventory, hosts = at_release_1
    rc, out = ansible_playbook(inventory, "deploy_xdp.yml", {"fleet_release": 2}, limit=hosts[0])
    assert rc == 0 and summary(out)["updated"] == hosts[:1]
    rc, out = ansible_playbook(inventory, "deploy_xdp.yml", {"fleet_release": 3, "fleet_fault_hosts": hosts[1:2],
                                                             "xdp_rollout_rollback_scope": "all"})
    result = summary(out)
    assert rc != 0 and result["stopped_at_batch"] == 2
    assert sorted(result["rolled_back"]) == hosts[:2] and not result["updated"]
    # Back to what each had before this rollout: the first host release 2, the second release 1.
    assert releases(inventory, hosts) == dict(dict.fromkeys(hosts, 1), **{hosts[0]: 2})


def test_a_failed_converge_stops_the_rollout_and_rolls_back_its_batch(fleet):
    """The last batch's second host declares a program its object lacks: its converge fails and changes nothing
    there, the batch's other host, which took the new release, is rolled back, and the rollout stops. From
    whatever release each host is on (no deploy first): the new one is newer than all of them."""
    inventory, hosts = fleet
    before = xdp_of(inventory, hosts)
    release = max((prog or {}).get("constants", {}).get("release", 0) for prog in before.values()) + 1
    rc, out = ansible_playbook(inventory, "deploy_xdp.yml", {"fleet_release": release, "fleet_broken_hosts": hosts[3:]})
    result = summary(out)
    assert rc != 0 and result["stopped_at_batch"] == 3, result
    assert result["updated"] == hosts[:2] and result["rolled_back"] == hosts[2:3], result
    assert result["unchanged"] == hosts[3:] and not result["untouched"], result
    assert list(result["problems"]) == hosts[3:], result
    problem = result["problems"][hosts[3]][0]
    assert "converge failed" in problem and "no_such_program" in problem, problem
    after = xdp_of(inventory, hosts)
    assert [after[host]["constants"]["release"] for host in hosts[:2]] == [release] * 2, after
    # The rolled-back host runs its release from before (bare again if it was), the broken host the very
    # program it had.
    assert (after[hosts[2]] or {}).get("constants") == (before[hosts[2]] or {}).get("constants"), (before, after)
    assert (after[hosts[3]] or {}).get("id") == (before[hosts[3]] or {}).get("id"), (before, after)


def test_a_bad_argument_on_a_host_of_the_last_batch_stops_the_rollout_before_any_host_changes(at_release_1):
    """Every host's arguments (xdp_rollout's and xdp_deploy's) are checked in one task before the first batch,
    not by ansible-core as each batch starts: a bad value on a host of the last batch changes no host, and the
    message names the host, the role and the option."""
    inventory, hosts = at_release_1
    host_vars = os.path.join(inventory, "host_vars")
    os.makedirs(host_vars, exist_ok=True)
    path = os.path.join(host_vars, hosts[-1] + ".yml")
    with open(path, "w", encoding="utf-8") as handle:
        handle.write("xdp_rollout_settle: soon\nxdp_deploy_state: everything\n")
    try:
        rc, out = ansible_playbook(inventory, "deploy_xdp.yml", {"fleet_release": 2})
    finally:
        os.unlink(path)
    assert rc != 0
    failed = [(host, result.get("msg", "")) for play in out["plays"] for task in play["tasks"]
              for host, result in task["hosts"].items() if result.get("failed")]
    assert len(failed) == 1, failed
    message = failed[0][1]
    assert message.startswith("Validation of arguments failed: "), message
    assert "%s: xdp_rollout (main): " % hosts[-1] in message and "xdp_rollout_settle" in message, message
    assert "%s: xdp_deploy (main): " % hosts[-1] in message and "xdp_deploy_state" in message, message
    assert not [host for host in hosts[:-1] if host in message], message
    assert set(changed(out).values()) <= {0}, changed(out)
    assert releases(inventory, hosts) == dict.fromkeys(hosts, 1)


ROLLBACK = """
- name: Roll back
  hosts: all
  gather_facts: false
  tasks:
    - name: Put every declared program back on its previous revision
      ansible.builtin.include_role:
        name: ebpf.xdp.xdp_deploy
        tasks_from: rollback
"""


def test_rollback_entry_point_rhythm(fleet, tmp_path):
    """Two releases on one host, then the rollback entry point's four steps; the counters continue: the same
    maps (ids) carry exactly the counts they had (traffic paused while the revision is put back)."""
    inventory, hosts = fleet
    host = hosts[2]
    for release in (5, 6):
        rc, out = ansible_playbook(inventory, "deploy_xdp.yml", {"fleet_release": release}, limit=host)
        assert rc == 0 and summary(out)["updated"] == [host]
    play = tmp_path / "rollback.yml"
    play.write_text(ROLLBACK)
    with traffic_paused(inventory):
        before = xdp_of(inventory, [host])[host]
        steps = []
        for check in (True, False, True, False):
            rc, out = ansible_playbook(inventory, str(play), check=check, limit=host)
            assert rc == 0, out["stats"]
            steps.append((changed(out)[host], releases(inventory, [host])[host]))
        after = xdp_of(inventory, [host])[host]
    assert steps[0][0] > 0 and steps[0][1] == 6, "check mode put the revision back"
    assert steps[1][0] > 0 and steps[1][1] == 5
    assert steps[2:] == [(0, 5), (0, 5)]
    assert after["id"] != before["id"], "the previous revision is another program"
    assert sorted(m["id"] for m in after["maps"]) == sorted(m["id"] for m in before["maps"]), (before, after)
    assert after["counters"]["verdict_count"] == before["counters"]["verdict_count"] != {}, (before, after)


def replay_gate(**source):
    """The replay gate's variables: a pcap per host, captured just before the replay (`capture`) or given."""
    gate = {"xdp_rollout_replay_pcap": "/var/lib/ebpf_xdp/replay-{{ inventory_hostname }}.pcap"}
    if source.get("capture"):
        gate["xdp_rollout_replay_capture"] = source["capture"]
    return gate


# A sample of mixed traffic for the gate: UDP, TCP, ICMP over IPv4, UDP and ICMPv6 over IPv6, a VLAN-tagged TCP
# frame, an ARP request. Broadcast frames, as the fleet's receivers see them.
MIX = [("udp", "10.20.0.1", "10.20.0.9", None)] * 5 + [("tcp", "10.20.0.1", "10.20.0.9", None)] * 3 + \
    [("icmp", "10.20.0.1", "10.20.0.9", None)] * 2 + [("udp", "fd20::1", "fd20::9", None)] * 2 + \
    [("icmp", "fd20::1", "fd20::9", None)] + [("tcp", "10.20.0.1", "10.20.0.9", 7)]
TCP_IN_MIX = 4


def write_mixed_sample(path):
    frames = [_frames.build_frame(proto, "02:00:12:00:00:01", "ff:ff:ff:ff:ff:ff", src, dst, src_port=2000 + i,
                                  dst_port=443, vlan=vlan) for i, (proto, src, dst, vlan) in enumerate(MIX)]
    # ARP request: Ethernet header, then who has 10.20.0.9, tell 10.20.0.1.
    arp = bytes.fromhex("ffffffffffff020012000001" + "0806" + "0001080006040001" + "020012000001" + "0a140001"
                        + "000000000000" + "0a140009").ljust(60, b"\0")
    return _pcap.write(path, frames + [arp])


def test_the_replay_gate_stops_a_drop_tcp_release_before_any_host_changes(at_release_1):
    """A release that drops TCP on one host: the broadcast ping would not show it (the health gate would let it
    through), a replay of mixed frames does; the rollout stops before any host changes. The same code without
    the fault then goes through the gate, replayed against frames captured just before."""
    inventory, hosts = at_release_1
    samples = ["/var/lib/ebpf_xdp/replay-%s.pcap" % host for host in hosts]
    try:
        for path in samples:
            assert write_mixed_sample(path) == len(MIX) + 1
        faulty = {"fleet_release": 2, "fleet_drop_tcp_hosts": hosts[2:3]}
        rc, out = ansible_playbook(inventory, "deploy_xdp.yml", faulty, replay_gate())
        result = summary(out)
        assert rc != 0 and result["stopped_at_batch"] == 0, result
        assert sorted(result["untouched"]) == hosts and not result["updated"], result
        assert list(result["problems"]) == hosts[2:3], result
        problem = " ".join(result["problems"][hosts[2]])
        assert "%d of %d frames would change verdict (XDP_PASS -> XDP_DROP: %d)" % (
            TCP_IN_MIX, len(MIX) + 1, TCP_IN_MIX) in problem, result
        assert problem.count(" -> ") == 1, "only the TCP frames change: %s" % problem
        assert releases(inventory, hosts) == dict.fromkeys(hosts, 1)
        # Release 2 without the fault: the same code as release 1 but for its `release` constant, so every frame
        # captured just before gets the verdict it gets now, and the rollout goes on.
        capture = {"interface": "eth0", "count": 20, "seconds": 20}
        rc, out = ansible_playbook(inventory, "deploy_xdp.yml", {"fleet_release": 2}, replay_gate(capture=capture))
        result = summary(out)
        assert rc == 0 and sorted(result["updated"]) == hosts, result
        assert releases(inventory, hosts) == dict.fromkeys(hosts, 2)
        for path in samples:
            assert len(_pcap.read(path)[1]) == 20, "the gate replayed the frames it captured, not the sample"
    finally:
        for path in samples:
            if os.path.exists(path):
                os.unlink(path)
