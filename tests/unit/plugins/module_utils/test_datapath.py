"""ebpf.xdp.datapath's pure logic: checking config entries and planning a state, no kernel."""

import pytest

from ansible_collections.ebpf.xdp.plugins.module_utils import _datapath
from ansible_collections.ebpf.xdp.plugins.module_utils._datapath import ConfigError, plan, scope, validate

PIN_ROOT = "/sys/fs/bpf/ebpf_xdp"


def xdp(interface, netns=None, **extra):
    return dict(interface=interface, netns=netns, object="/o/%s.o" % interface, **extra)


def test_entries_get_their_modules_defaults():
    out = validate({"xdp": [xdp("eth0")], "tc": [{"interface": "eth1", "object": "/o/t.o", "verdict": "ok"}]},
                   PIN_ROOT)
    [entry] = out["xdp"]
    assert (entry["mode"], entry["state"], entry["pin_root"], entry["constants"]) == ("auto", "present", PIN_ROOT, {})
    [tc] = out["tc"]
    assert (tc["direction"], tc["method"], tc["verdict"]) == ("ingress", "auto", "pass")  # ok is tc's pass
    assert out["objects"] == out["devmap_groups"] == out["map_entries"] == []


@pytest.mark.parametrize("config, message", [
    ({"xdp": [xdp("eth0"), xdp("eth1"), xdp("eth0", mode="native")]},
     "config.xdp[0] and config.xdp[2] both manage the XDP hook of eth0: give each one entry"),
    ({"xdp": [xdp("eth0", netns="a"), xdp("eth0", netns="b"), xdp("eth0", netns="a")]},
     "config.xdp[0] and config.xdp[2] both manage the XDP hook of eth0 in netns a: give each one entry"),
    ({"tc": [{"interface": "eth0", "object": "/o"}, {"interface": "eth0", "object": "/p", "direction": "egress"},
             {"interface": "eth0", "object": "/q", "direction": "ingress"}]},
     "config.tc[0] and config.tc[2] both manage the tc ingress hook of eth0: give each one entry"),
    ({"devmap_groups": [{"name": "video", "id": 3}, {"id": 3}]},
     "config.devmap_groups[0] and config.devmap_groups[1] both manage group 3 of map set multicast: give each one "
     "entry"),
    ({"objects": [{"src": "/s/a.c", "dest": "/o/a.o"}, {"src": "/s/b.c", "dest": "/o/a.o"}]},
     "config.objects[0] and config.objects[1] both manage object /o/a.o: give each one entry"),
    ({"map_entries": [{"path": "/sys/fs/bpf/m"}, {"path": "/sys/fs/bpf/m"}]},
     "config.map_entries[0] and config.map_entries[1] both manage map /sys/fs/bpf/m: give each one entry"),
    ({"tc": [{"interface": "eth0", "object": "/o", "method": "nope"}]},
     "config.tc[0]: value of method must be one of: tcx, cls_bpf, act_bpf, auto, got: nope"),
    ({"tc": [{"interface": "eth0", "object": "/o", "priority": 0}]},
     "config.tc[0]: priority must be between 1 and 65535, not 0"),
    ({"xdp": [{"object": "/o"}]}, "config.xdp[0]: missing required arguments: interface"),
    ({"xdp": [xdp("eth0", colour="red")]}, "config.xdp[0]: colour. Supported parameters include:"),
    ({"xdp": [xdp("eth0", pin_root="/elsewhere")]}, "config.xdp[0]: pin_root is set once for the task"),
    ({"xdp": [dict(interface="eth0", backend="bcc", source="/s.c")]},
     "config.xdp[0]: backend bcc is not available in ebpf.xdp.datapath; use ebpf.xdp.xdp_program for it"),
    ({"xdp": ["eth0"]}, "config.xdp[0]: an entry is a dict of xdp_program's options, not 'eth0'"),
])
def test_bad_config_names_the_entry(config, message):
    with pytest.raises(ConfigError) as err:
        validate(config, PIN_ROOT)
    assert message in str(err.value), str(err.value)


def test_scope_is_own_namespace_config_and_listed():
    validated = validate({"xdp": [xdp("eth0", netns="b"), xdp("eth1")]}, PIN_ROOT)
    assert scope(validated, ["a", "b"]) == [None, "a", "b"]


GATHERED = {
    "xdp": [xdp("eth0", program=None, constants={}, mode="native"),
            xdp("eth9", program=None, constants={}, mode="auto")],
    "tc": [{"interface": "eth0", "netns": None, "object": "/o/t.o", "program": "tc_drop_count", "constants": {},
            "direction": "egress", "method": "tcx"}],
    "devmap_groups": [{"name": "video", "id": 1, "netns": None, "shared_maps": "multicast", "members": ["p1"],
                       "addresses": [], "exclude_ingress": True},
                      {"name": "audio", "id": 2, "netns": None, "shared_maps": "other", "members": ["p2"],
                       "addresses": [], "exclude_ingress": True}],
}


def steps(state, config):
    return [(section, index, params["state"], params.get("interface") or params.get("name"))
            for section, index, params in plan(state, validate(config, PIN_ROOT), GATHERED, PIN_ROOT)]


def test_merged_converges_the_declared_and_nothing_else():
    assert steps("merged", {"xdp": [xdp("eth0")]}) == [("xdp", 0, "present", "eth0")]


def test_overridden_removes_what_is_not_declared_after_the_rest_groups_first():
    assert steps("overridden", {"xdp": [xdp("eth0")], "devmap_groups": [{"name": "video", "members": ["p1"]}]}) == [
        ("xdp", 0, "present", "eth0"), ("devmap_groups", 0, "present", "video"),
        ("devmap_groups", None, "absent", "audio"), ("tc", None, "absent", "eth0"), ("xdp", None, "absent", "eth9")]


def test_replaced_empties_only_the_map_sets_it_names_and_is_exact():
    config = {"xdp": [xdp("eth0")], "devmap_groups": [{"name": "other-one", "shared_maps": "other"}]}
    planned = plan("replaced", validate(config, PIN_ROOT), GATHERED, PIN_ROOT)
    assert [(s, i, p["state"], p.get("name") or p.get("interface")) for s, i, p in planned] == [
        ("xdp", 0, "present", "eth0"), ("devmap_groups", 0, "present", "other-one"),
        ("devmap_groups", None, "absent", "audio")]
    assert planned[1][2]["exclusive"] is True


def test_deleted_removes_the_declared_or_with_none_everything_gathered():
    assert steps("deleted", {"xdp": [xdp("eth0")]}) == [("xdp", 0, "absent", "eth0")]
    # Only map entries declared: only they go (not every program gathered).
    assert [(s, i, p["state"], p["path"]) for s, i, p in plan(
        "deleted", validate({"map_entries": [{"path": "/m", "entries": [{"key": 1}]}]}, PIN_ROOT), GATHERED,
        PIN_ROOT)] == [("map_entries", 0, "absent", "/m")]
    assert steps("deleted", {}) == [("devmap_groups", None, "absent", "video"),
                                    ("devmap_groups", None, "absent", "audio"),
                                    ("tc", None, "absent", "eth0"), ("xdp", None, "absent", "eth0"),
                                    ("xdp", None, "absent", "eth9")]


def test_gathered_entries_fed_back_are_valid_config():
    validate({section: GATHERED[section] for section in GATHERED}, PIN_ROOT)
    assert set(_datapath.STATES) == {"merged", "replaced", "overridden", "deleted", "gathered"}


def test_facts_before_are_not_read_unless_asked_outside_check_mode_and_before_a_change():
    asked = dict(interfaces=[], netns=None, rate_interval=0, only_if_changing=True, maps=["*"], programs=["*"],
                 max_entries=1024, per_cpu=False)
    rehearsals = []

    def would_change(answer):
        return lambda: rehearsals.append(answer) or answer

    params = dict(pin_root="/sys/fs/bpf/x", facts_before=None)
    assert _datapath.read_facts_before(params, False, would_change(True)) is None and rehearsals == []
    params["facts_before"] = asked
    assert _datapath.read_facts_before(params, True, would_change(True)) is None and rehearsals == [], "check mode"
    assert _datapath.read_facts_before(params, False, would_change(False)) is None and rehearsals == [False]
    params["facts_before"] = dict(asked, rate_interval=-1)
    with pytest.raises(ConfigError, match="facts_before.rate_interval must not be negative"):
        _datapath.read_facts_before(params, True, would_change(True))
    params["facts_before"] = dict(asked, max_entries=0)
    with pytest.raises(ConfigError, match="facts_before.max_entries must be a positive number of entries to read "
                                          "from each map, not 0"):
        _datapath.read_facts_before(params, True, would_change(True))
