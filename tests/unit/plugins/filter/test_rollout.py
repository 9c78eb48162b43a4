"""The pure logic of a rollout: its batches (as ansible-playbook cuts them) and its health gate."""

import pytest

from ansible.errors import AnsibleFilterError
from ansible.playbook.play import Play
from ansible.executor.playbook_executor import PlaybookExecutor

from ansible_collections.ebpf.xdp.plugins.filter.rollout import (
    replay_findings, rollout_attached, rollout_batch_unchanged, rollout_batches, rollout_changes, rollout_health,
    rollout_statuses)

HOSTS = ["h%d" % i for i in range(1, 101)]


class _Inventory:
    def __init__(self, hosts):
        self.hosts = hosts

    def get_hosts(self, pattern, order=None):  # pylint: disable=unused-argument
        return list(self.hosts)


@pytest.mark.parametrize("serial", [[1, "10%", "100%"], ["100%"], [2], [1, 3], ["30%", "50%"], ["1%"], [0]])
@pytest.mark.parametrize("count", [1, 5, 11, 100])
def test_batches_are_those_of_ansible_playbook(serial, count):
    hosts = HOSTS[:count]
    play = Play.load({"hosts": "all", "serial": serial, "tasks": []})
    executor = PlaybookExecutor.__new__(PlaybookExecutor)
    executor._inventory = _Inventory(hosts)  # pylint: disable=protected-access
    assert rollout_batches(hosts, serial) == executor._get_serialized_batches(play)  # pylint: disable=protected-access


def test_batches_of_the_default_rollout():
    assert [len(b) for b in rollout_batches(HOSTS, [1, "10%", "100%"])] == [1, 10, 89]
    assert rollout_batches(["a", "b", "c"], "100%") == [["a", "b", "c"]]
    with pytest.raises(AnsibleFilterError, match="neither a number"):
        rollout_batches(["a"], ["ten"])


FACTS = {"interfaces": {"eth0": {
    "stats": {"rx_packets": 1000},
    "rates": {"stats": {"rx_packets": 200.0, "rx_bytes": 20000.0}},
    "xdp": {"id": 42, "name": "xdp_verdict_count", "tag": "ab",
            "counters": {"verdict_count": {"2": 5000}},
            "rates": {"verdict_count": {"2": 190.0, "1": 10.0}}},
    "tc": {"ingress": [{"id": 7, "name": "redirect_xmit"}], "egress": []}}}}
DROP_SHARE = {"name": "drops", "interface": "eth0", "metric": "xdp.rates.verdict_count.1",
              "per": "xdp.rates.verdict_count", "max": 0.01}


def test_health_rules():
    assert rollout_health(FACTS, [{"interface": "eth0", "metric": "xdp.rates.verdict_count", "min": 100}]) == []
    problems = rollout_health(FACTS, [DROP_SHARE])
    assert problems == ["drops (eth0 xdp.rates.verdict_count.1): 0.05 > max 0.01"]
    # A counter that facts left out (zero) counts 0; a ratio over nothing is 0.
    assert rollout_health(FACTS, [{"interface": "eth0", "metric": "xdp.rates.verdict_count.3", "max": 0}]) == []
    assert rollout_health(FACTS, [{"interface": "eth0", "metric": "xdp.rates.verdict_count.3",
                                   "per": "xdp.rates.verdict_count.4", "max": 0}]) == []


def test_health_against_before():
    before = {"interfaces": {"eth0": {"rates": {"stats": {"rx_packets": 1000.0}}}}}
    rule = {"interface": "eth0", "metric": "rates.stats.rx_packets", "min_vs_before": 0.5, "max_vs_before": 2}
    assert rollout_health(FACTS, [rule], before)[0].endswith("0.20 of 1000 before the change, < min_vs_before 0.5")
    assert rollout_health(FACTS, [rule], {"interfaces": {"eth0": {"rates": {"stats": {"rx_packets": 150.0}}}}}) == []
    # Nothing before (no traffic, no interface): nothing to compare with.
    assert rollout_health(FACTS, [rule], {}) == []


def test_health_unreadable_and_wrong_rules():
    assert rollout_health(FACTS, [{"interface": "eth9", "metric": "stats.rx_packets", "min": 1}]) == [
        "stats.rx_packets (eth9 stats.rx_packets): interface eth9 is not in the facts"]
    no_rates = {"interfaces": {"eth0": {"stats": {}, "xdp": {"counters": {}}}}}
    assert "not found" in rollout_health(no_rates, [{"interface": "eth0", "metric": "rates.stats.rx_packets", "min": 1}])[0]
    no_prog = {"interfaces": {"eth0": {"xdp": None}}}
    assert "has no" in rollout_health(no_prog, [{"interface": "eth0", "metric": "xdp.rates.x", "max": 1}])[0]
    with pytest.raises(AnsibleFilterError, match="unknown keys maximum"):
        rollout_health(FACTS, [{"interface": "eth0", "metric": "stats.rx_packets", "maximum": 1}])
    with pytest.raises(AnsibleFilterError, match="needs interface and metric"):
        rollout_health(FACTS, [{"metric": "stats.rx_packets"}])


def test_expected_programs():
    expected = [{"hook": "xdp", "interface": "eth0", "id": 42, "tag": "ab", "program_name": "xdp_verdict_count"},
                {"hook": "tc", "interface": "eth0", "direction": "ingress", "name": "first", "id": 7}]
    assert rollout_health(FACTS, [], expected=expected) == []
    problems = rollout_health(FACTS, [], expected=[dict(expected[0], id=43), dict(expected[1], direction="egress")])
    assert problems == ["eth0 XDP: program id 43 (xdp_verdict_count, tag ab) expected, found id 42 (xdp_verdict_count)",
                        "eth0 egress first: program id 7 (None, tag None) expected, found no program"]


def test_changes_and_attached_from_results():
    xdp = {"results": [
        {"item": {"interface": "eth0", "object": "o"}, "changed": True, "attached": True, "id": 1, "tag": "t",
         "name": "p", "previous_revision": {"number": 1}, "revision": {"number": 2}},
        {"item": {"interface": "eth1", "netns": "blue"}, "changed": True, "attached": True, "id": 2,
         "previous_revision": None},
        {"item": {"interface": "eth2"}, "changed": False, "attached": True, "id": 3},
        {"item": {"interface": "eth3", "state": "absent"}, "changed": True, "attached": False},
        {"item": {"interface": "eth4"}, "changed": False, "failed": True, "msg": "no"},
    ]}
    tc = {"results": [{"item": {"interface": "eth0", "direction": "egress", "priority": 5}, "changed": True,
                       "attached": True, "id": 9, "direction": "egress", "previous_revision": {"number": 3}},
                      {"item": {"interface": "eth0", "name": "second", "method": "tcx"}, "changed": False,
                       "attached": True, "id": 10, "name": "tc_drop_count"}]}
    assert rollout_changes(xdp, tc) == [
        {"hook": "xdp", "interface": "eth0", "previous": True},
        {"hook": "xdp", "interface": "eth1", "netns": "blue", "previous": False},
        {"hook": "tc", "interface": "eth0", "direction": "egress", "priority": 5, "previous": True}]
    attached = rollout_attached(xdp, tc)
    assert [(a["hook"], a["interface"], a["id"]) for a in attached] == [
        ("xdp", "eth0", 1), ("xdp", "eth1", 2), ("xdp", "eth2", 3), ("tc", "eth0", 9), ("tc", "eth0", 10)]
    assert attached[0]["revision"] == 2 and attached[3]["direction"] == "egress"
    # A named attachment keeps its name; the program's own name is program_name.
    assert (attached[0]["program_name"], "name" in attached[0]) == ("p", False)
    assert (attached[4]["name"], attached[4]["program_name"], attached[4]["direction"]) == (
        "second", "tc_drop_count", "ingress")
    assert rollout_changes({}, None) == [] and rollout_attached({"results": []}) == []


def test_replay_findings_count_what_is_not_allowed():
    results = [
        {"item": {"hook": "xdp", "interface": "eth0"}, "compared": True, "frames": 20,
         "transitions": {"XDP_PASS -> XDP_DROP": {"frames": 4}, "XDP_DROP -> XDP_PASS": {"frames": 2}}},
        {"item": {"hook": "tc", "interface": "eth1", "direction": "egress"}, "compared": False, "reason": "new"},
        {"item": {"hook": "xdp", "interface": "eth2"}, "failed": True, "msg": "map jumps is a prog_array"},
    ]
    found = replay_findings(results, 0, ["XDP_DROP -> XDP_PASS"])
    assert [f["problem"] for f in found] == [
        "replay of eth0 xdp: 4 of 20 frames would change verdict (XDP_PASS -> XDP_DROP: 4), more than 0",
        "",
        "replay of eth2 xdp failed: map jumps is a prog_array"]
    assert found[0]["changed_verdicts"] == 4 and found[1]["compared"] is False
    assert replay_findings(results[:1], 4, ["XDP_DROP -> XDP_PASS"])[0]["problem"] == ""
    assert replay_findings(results[:1], 5)[0]["problem"].startswith("replay of eth0 xdp: 6 of 20")


def _converged(**result):
    return dict({"changed": False, "item_results": {"xdp": [], "tc": []}}, **result)


@pytest.mark.parametrize("hostvars, unchanged", [
    ({"h1": {"__xdp_deploy_datapath": _converged()}, "h2": {"__xdp_deploy_datapath": _converged()}}, True),
    ({"h1": {"__xdp_deploy_datapath": _converged()}, "h2": {"__xdp_deploy_datapath": _converged(changed=True)}},
     False),
    ({"h1": {"__xdp_deploy_datapath": _converged()}, "h2": {"__xdp_deploy_datapath": _converged(failed=True)}},
     False),
    # a host the converge found without the toolchain, to be prepared and converged again
    ({"h1": {"__xdp_deploy_datapath": _converged(toolchain={"missing": ["clang"]})},
      "h2": {"__xdp_deploy_datapath": _converged()}}, False),
    # a host that did not run it (skipped: bcc entries, prepared first; or unreachable)
    ({"h1": {"__xdp_deploy_datapath": {"skipped": True, "changed": False}},
      "h2": {"__xdp_deploy_datapath": _converged()}}, False),
    ({"h1": {}, "h2": {"__xdp_deploy_datapath": _converged()}}, False),
    # bcc entries have tasks of their own after the converge
    ({"h1": {"__xdp_deploy_datapath": _converged(), "xdp_deploy_programs": [{"interface": "eth0"}]},
      "h2": {"__xdp_deploy_datapath": _converged(), "xdp_deploy_tc_programs": [{"backend": "bcc"}]}}, False),
])
def test_a_batch_is_unchanged_when_every_converge_ran_changed_nothing_and_has_nothing_more(hostvars, unchanged):
    assert rollout_batch_unchanged(["h1", "h2"], hostvars) is unchanged


def test_statuses_of_a_rollout_in_one_pass():
    hostvars = {"h1": {"xdp_rollout_status": "updated", "xdp_rollout_problems": []},
                "h2": {"xdp_rollout_status": "rolled_back", "xdp_rollout_problems": ["share of dropped frames"]},
                "h3": {"xdp_rollout_status": "unchanged"},
                "h4": {},
                "h5": {"xdp_rollout_status": "rollback_failed", "xdp_rollout_problems": ["a", "b"]}}
    assert rollout_statuses(["h1", "h2", "h3", "h4", "h5"], hostvars) == {
        "updated": ["h1"], "unchanged": ["h3"], "would_change": [], "rolled_back": ["h2"],
        "rollback_failed": ["h5"], "untouched": ["h4"],
        "problems": {"h2": ["share of dropped frames"], "h5": ["a", "b"]}}


@pytest.mark.parametrize("probe, unchanged", [
    (_converged(), True),
    # the probe (check mode) found a change to make: its changes, its changed hidden by changed_when
    (_converged(changes=[{"entry": "config.xdp[0]"}]), False),
    # a probe that failed or did not reach the host (ignore_unreachable) says nothing
    (_converged(failed=True), False),
    ({"unreachable": True, "msg": "no such namespace"}, False),
    ({"skipped": True, "changed": False}, False),
])
def test_a_batch_is_unchanged_by_its_probe_when_no_host_would_change(probe, unchanged):
    """The probe's result, registered as xdp_deploy_probe, read instead of the converge's: the converge has not run."""
    hostvars = {"h1": {"xdp_deploy_probe": _converged()}, "h2": {"xdp_deploy_probe": probe}}
    assert rollout_batch_unchanged(["h1", "h2"], hostvars, "xdp_deploy_probe") is unchanged
    assert rollout_batch_unchanged(["h1", "h2"], hostvars) is False
