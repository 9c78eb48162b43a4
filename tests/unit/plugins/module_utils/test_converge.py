"""The converger's decisions, against a fake hook adapter: pure logic, no kernel.

Every kernel-facing step (load, attach, replace, update, detach, restore)
is the fake's; what is checked is which of them the converger chooses for
each observed/desired pair, and what it reports.
"""

import contextlib

import pytest

from ansible_collections.ebpf.xdp.plugins.module_utils.hooks import converge as _converge
from ansible_collections.ebpf.xdp.plugins.module_utils.hooks.converge import (
    ATTACH, CLEAR_STALE, Converger, DETACH, DETACH_FOREIGN, Desired, LOAD, NOTHING, REATTACH, RECORD_ONLY,
    REFUSE_FOREIGN, REPLACE, UPDATE_LINK, plan_absent, plan_present, plan_swap)
from ansible_collections.ebpf.xdp.plugins.module_utils.hooks.observed import (
    Attachment, HELD_BY_LINK, HELD_BY_NETLINK, HookError, Observed)

NOTHING_THERE = Observed()
OURS_BY_LINK = Observed(prog_id=10, name="p", tag="aa", placement="native", holder=HELD_BY_LINK, link_id=3, record={})
OURS_BY_NETLINK = Observed(prog_id=10, name="p", tag="aa", placement="native", holder=HELD_BY_NETLINK, record={})
FOREIGN_NETLINK = Observed(prog_id=20, name="f", tag="bb", placement="native", holder=HELD_BY_NETLINK)
FOREIGN_LINK = Observed(prog_id=20, name="f", tag="bb", placement="native", holder=HELD_BY_LINK, link_id=9)


# ---------------------------------------------------------------- plan_* tables


@pytest.mark.parametrize("observed, force, stale, expected", [
    (NOTHING_THERE, False, False, NOTHING),
    (NOTHING_THERE, False, True, CLEAR_STALE),
    (OURS_BY_LINK, False, False, DETACH),
    (OURS_BY_NETLINK, False, True, DETACH),
    (FOREIGN_NETLINK, False, False, NOTHING),
    (FOREIGN_NETLINK, False, True, CLEAR_STALE),
    (FOREIGN_LINK, True, False, DETACH_FOREIGN),
])
def test_plan_absent(observed, force, stale, expected):
    assert plan_absent(observed, force, stale) == expected


@pytest.mark.parametrize("observed, force, matches, expected", [
    (OURS_BY_LINK, False, True, NOTHING),
    (OURS_BY_LINK, False, False, LOAD),
    (NOTHING_THERE, False, False, LOAD),
    (FOREIGN_NETLINK, False, False, REFUSE_FOREIGN),
    (FOREIGN_NETLINK, True, False, LOAD),
])
def test_plan_present(observed, force, matches, expected):
    assert plan_present(observed, force, matches) == expected


@pytest.mark.parametrize("observed, in_place, same, expected", [
    (OURS_BY_LINK, True, True, RECORD_ONLY),
    (NOTHING_THERE, True, False, ATTACH),
    (OURS_BY_LINK, True, False, UPDATE_LINK),
    (OURS_BY_LINK, False, False, REATTACH),
    (OURS_BY_NETLINK, True, False, REPLACE),
    (OURS_BY_NETLINK, False, False, REATTACH),
    (FOREIGN_NETLINK, True, False, REPLACE),
    (FOREIGN_LINK, True, False, REATTACH),
])
def test_plan_swap(observed, in_place, same, expected):
    assert plan_swap(observed, in_place, same) == expected


# ---------------------------------------------------------------- the converger with fakes


class FakeRecord:
    def __init__(self, record=None):
        self.value = record

    def exists(self):
        return self.value is not None

    def read(self):
        return self.value

    def write(self, record):
        self.value = dict(record)

    def remove(self):
        self.value = None


class FakePins:
    def __init__(self, record=None):
        self.directory = "/pins/ns/eth0/xdp"
        self.prog_path = self.directory + "/prog"
        self.link_path = self.directory + "/link"
        self.maps_dir = self.directory + "/maps"
        self.record = FakeRecord(record)
        self.made = record is not None
        self.pinned = {}
        self.held = set()  # program ids a pinned link or pinned map proves ours (holds)

    def exists(self):
        return self.made

    def holds(self, prog_id, map_ids, map_set=None):  # pylint: disable=unused-argument
        return self.made and prog_id in self.held

    def make(self, maps=True):
        created, self.made = ([] if self.made else [self.directory]), True
        return created

    def undo(self, created):
        if created:
            self.made = False

    def replace_pin(self, obj, path):
        self.pinned[path] = obj

    def remove(self, keep_maps=False):
        self.made, self.record.value = keep_maps, None


class FakeProgram:
    def __init__(self, prog_id):
        self.prog_id = prog_id

    def close(self):
        pass


class FakeLoaded:
    def __init__(self, prog_id, tag, data):
        self.name = "p"
        self.info = {"id": prog_id, "name": "p", "tag": tag}
        self.data_sha256 = data
        self.maps = {"counts": "/pins/ns/eth0/xdp/maps/counts"}
        self.program = FakeProgram(prog_id)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass

    def pin_maps(self):
        """Like _loader.Loaded: the maps were pinned at load."""


class FakeHook(_converge.HookAdapter):
    """In-place swaps only within the requested mode, like XDP; records every action."""

    kind = "xdp"
    name = "xdp"
    label = "XDP"
    prog_type = "xdp"
    ifname = "eth0"
    ifindex = 2

    def __init__(self, observed, mode="auto", record=None, fail_attach=False):
        self.observed = observed
        self.mode = mode
        self.pins = FakePins(record)
        self.fail_attach = fail_attach
        self.calls = []

    @classmethod
    def from_params(cls, params, ifindex, netns_key):
        return cls(Observed(), mode=params.get("mode", "auto"))

    def observe(self):
        return self.observed

    def refuse(self, observed):
        pass

    def identity(self):
        return {"requested_mode": self.mode}

    def in_place(self, observed):
        return self.mode in ("auto", observed.placement)

    def planned_placement(self, observed):
        return self.mode if self.mode != "auto" else (observed.placement or "native")

    def attach(self, prog):
        self.calls.append(("attach", prog.prog_id))
        if self.fail_attach:
            raise HookError("no native XDP support")
        return Attachment(HELD_BY_LINK, self.planned_placement(self.observed), 99)

    def replace(self, observed, prog):
        self.calls.append(("replace", observed.prog_id, prog.prog_id))
        return Attachment(HELD_BY_NETLINK, observed.placement, None)

    def update_link(self, observed, prog):
        self.calls.append(("update_link", observed.link_id, prog.prog_id))
        return Attachment(HELD_BY_LINK, observed.placement, observed.link_id)

    def detach(self, observed):
        self.calls.append(("detach", observed.prog_id))

    def restore(self, observed, old):
        self.calls.append(("restore", old.prog_id))

    @contextlib.contextmanager
    def hold(self, prog_id):
        yield FakeProgram(prog_id)


@pytest.fixture
def obj(tmp_path):
    path = tmp_path / "prog.o"
    path.write_bytes(b"object bytes")
    return str(path)


def converge(hook, obj, check_mode=False, loaded=(30, "cc", "d1"), **desired):
    loads = []

    def load(path, program, prog_type, constants, maps_dir=None, load_as=None, section=None,
             data=None):  # pylint: disable=unused-argument
        loads.append(maps_dir)
        return FakeLoaded(*loaded)

    params = dict(state="present", object=obj, program=None, constants={}, force=False, keep_maps=False)
    params.update(desired)
    converger = Converger(hook, Desired.from_params(params), check_mode, load=load)
    return converger.run(), converger.warnings, loads


def our_record(hook, obj, **extra):
    """The record a converged run leaves, as the next run reads it."""
    result, _warnings, _loads = converge(hook, obj, **extra)
    assert result["changed"], result
    return hook.pins.record.value


def test_first_attach_pins_and_records(obj):
    hook = FakeHook(NOTHING_THERE)
    result, warnings, loads = converge(hook, obj)
    assert hook.calls == [("attach", 30)] and not warnings
    assert loads == [hook.pins.maps_dir], "maps are pinned when really attaching"
    assert hook.pins.pinned[hook.pins.prog_path].prog_id == 30
    record = hook.pins.record.value
    assert record["prog_id"] == 30 and record["attach"] == HELD_BY_LINK and record["link_id"] == 99
    assert result["diff"]["before"] == {"attached": False}
    assert result["id"] == 30 and result["attach"] == HELD_BY_LINK and result["maps"] == FakeLoaded(30, "", "").maps


def test_check_mode_loads_without_pins_and_acts_on_nothing(obj):
    hook = FakeHook(NOTHING_THERE)
    result, _warnings, loads = converge(hook, obj, check_mode=True)
    assert result["changed"] and hook.calls == [] and loads == [None]
    assert hook.pins.record.value is None and not hook.pins.exists()


def test_same_identity_is_no_change_and_loads_nothing(obj):
    record = our_record(FakeHook(NOTHING_THERE), obj)
    hook = FakeHook(Observed(prog_id=30, placement="native", holder=HELD_BY_LINK, link_id=99, record=record), record=record)
    result, _warnings, loads = converge(hook, obj)
    assert result["changed"] is False and hook.calls == [] and loads == []


def test_new_constants_update_our_link_in_place(obj):
    record = our_record(FakeHook(NOTHING_THERE), obj)
    hook = FakeHook(Observed(prog_id=30, placement="native", holder=HELD_BY_LINK, link_id=99, record=record), record=record)
    result, _warnings, _loads = converge(hook, obj, loaded=(31, "cc", "d2"), constants={"xdp_action": 2})
    assert hook.calls == [("update_link", 99, 31)]
    assert result["changed"] and result["link_id"] == 99 and result["id"] == 31


def test_same_program_from_a_rebuilt_object_only_rewrites_the_record(obj, tmp_path):
    record = our_record(FakeHook(NOTHING_THERE), obj)
    rebuilt = tmp_path / "rebuilt.o"
    rebuilt.write_bytes(b"other bytes, same program")
    hook = FakeHook(Observed(prog_id=30, placement="native", holder=HELD_BY_LINK, link_id=99, record=record), record=record)
    result, _warnings, _loads = converge(hook, str(rebuilt))
    assert result["changed"] is False and hook.calls == []
    assert hook.pins.record.value["object"] == str(rebuilt) and hook.pins.record.value["prog_id"] == 30


def test_our_netlink_program_is_replaced_in_place(obj):
    hook = FakeHook(Observed(prog_id=10, placement="native", holder=HELD_BY_NETLINK, record={"tag": "old"}), record={})
    result, _warnings, _loads = converge(hook, obj)
    assert hook.calls == [("replace", 10, 30)] and result["attach"] == HELD_BY_NETLINK


def test_foreign_program_is_refused_without_force(obj):
    hook = FakeHook(FOREIGN_NETLINK)
    with pytest.raises(HookError, match="did not attach.*force: true"):
        converge(hook, obj)
    assert hook.calls == [] and not hook.pins.exists()


def test_foreign_netlink_program_is_replaced_with_force(obj):
    hook = FakeHook(FOREIGN_NETLINK)
    result, _warnings, _loads = converge(hook, obj, force=True)
    assert hook.calls == [("replace", 20, 30)] and result["diff"]["before"]["owner"] == "unmanaged"


def test_foreign_link_is_detached_then_attached_with_a_warning(obj):
    hook = FakeHook(FOREIGN_LINK)
    _result, warnings, _loads = converge(hook, obj, force=True)
    assert hook.calls == [("detach", 20), ("attach", 30)]
    assert "briefly without its XDP program while switching from a foreign link" in warnings[0]


def test_mode_switch_reattaches(obj):
    hook = FakeHook(OURS_BY_LINK, mode="generic", record={})
    result, warnings, _loads = converge(hook, obj, mode="generic")
    assert hook.calls == [("detach", 10), ("attach", 30)] and result["mode"] == "generic"
    assert "while switching mode" in warnings[0]
    assert result["interrupted"] is True


def test_absent_on_a_deleted_interface_clears_our_pins_once(obj):
    hook = FakeHook(NOTHING_THERE, record={"prog_id": 10})
    desired = Desired.from_params(dict(state="absent", object=None, program=None, constants={}, force=False,
                                       keep_maps=False))
    assert Converger(hook, desired, True).clear_gone()["changed"] and hook.pins.exists(), "check mode: kept"
    converger = Converger(hook, desired, False)
    result = converger.clear_gone()
    assert result["changed"] and not hook.pins.exists() and result["attached"] is False
    assert "does not exist (any more)" in converger.warnings[0]
    again = Converger(hook, desired, False)
    assert again.clear_gone()["changed"] is False
    assert again.warnings == ["eth0 does not exist in this network namespace; nothing of ebpf.xdp's was there to remove"]


def test_an_in_place_upgrade_is_not_interrupted(obj):
    hook = FakeHook(FOREIGN_NETLINK)
    result, warnings, _loads = converge(hook, obj, force=True)
    assert result["interrupted"] is False and not warnings


def test_a_program_our_pins_hold_without_a_record_is_adopted_not_refused(obj):
    # A run killed after its attach, before its first record: the pinned link (or maps) prove it ours.
    hook = FakeHook(FOREIGN_LINK)
    hook.pins.made, hook.pins.held = True, {20}
    result, warnings, _loads = converge(hook, obj)
    assert hook.calls == [("update_link", 9, 30)] and result["interrupted"] is False
    assert "its record was not written" in warnings[0] and hook.pins.record.value["prog_id"] == 30


def test_failed_mode_switch_restores_the_old_program_and_leaves_no_pins(obj):
    hook = FakeHook(OURS_BY_LINK, mode="native", fail_attach=True)
    hook.observed = Observed(prog_id=10, placement="generic", holder=HELD_BY_LINK, link_id=3, record={})
    hook.pins = FakePins()
    with pytest.raises(HookError):
        converge(hook, obj)
    assert hook.calls == [("detach", 10), ("attach", 30), ("restore", 10)]
    assert not hook.pins.exists(), "a failed first attach removes the directories it made"


def test_absent_detaches_ours_and_removes_pins(obj):
    hook = FakeHook(OURS_BY_LINK, record={"prog_id": 10})
    result, _warnings, _loads = converge(hook, obj, state="absent")
    assert result["changed"] and hook.calls == [("detach", 10)] and not hook.pins.exists()
    assert result["diff"]["after"] == {"attached": False}


def test_absent_leaves_a_foreign_program_with_a_warning(obj):
    hook = FakeHook(FOREIGN_NETLINK)
    result, warnings, _loads = converge(hook, obj, state="absent")
    assert result["changed"] is False and hook.calls == []
    assert "not managed by ebpf.xdp" in warnings[0]


def test_absent_with_force_detaches_a_foreign_program(obj):
    hook = FakeHook(FOREIGN_LINK)
    result, _warnings, _loads = converge(hook, obj, state="absent", force=True)
    assert result["changed"] and hook.calls == [("detach", 20)]


def test_absent_clears_stale_pins_and_check_mode_only_reports(obj):
    hook = FakeHook(NOTHING_THERE, record={"prog_id": 10})
    result, _warnings, _loads = converge(hook, obj, state="absent", check_mode=True)
    assert result["changed"] and hook.pins.exists()
    result, _warnings, _loads = converge(hook, obj, state="absent")
    assert result["changed"] and not hook.pins.exists() and hook.calls == []


def test_clearing_stale_pins_under_a_foreign_program_reports_it_still_there(obj):
    hook = FakeHook(FOREIGN_NETLINK, record={"prog_id": 10})
    result, warnings, _loads = converge(hook, obj, state="absent")
    assert result["changed"] and hook.calls == [] and not hook.pins.exists()
    assert result["diff"]["after"] == result["diff"]["before"] and result["attached"] is True
    assert "not managed by ebpf.xdp" in warnings[0]


def test_a_failed_restore_says_the_hook_is_empty(obj):
    class NoRestore(FakeHook):
        def restore(self, observed, old):
            raise HookError("cannot put it back")

    hook = NoRestore(OURS_BY_LINK, mode="native", fail_attach=True)
    hook.observed = Observed(prog_id=10, placement="generic", holder=HELD_BY_LINK, link_id=3, record={})
    with pytest.raises(HookError, match="putting the old program .id 10. back failed too, so eth0 has none now"):
        converge(hook, obj)


def test_a_set_mates_hook_is_built_with_the_argument_specs_defaults():
    """A map set's migration builds each other attachment's hook from its record's entry and MATE_DEFAULTS for what
    the entry leaves out: the argument specs' own defaults, so the hook is the one its task would build."""
    from ansible_collections.ebpf.xdp.plugins.module_utils import _argspecs  # pylint: disable=import-outside-toplevel

    specs = dict(_argspecs.XDP_PROGRAM_OPTIONS)
    for name, option in _argspecs.TC_PROGRAM_OPTIONS.items():
        assert name not in specs or specs[name].get("default") == option.get("default"), name
        specs[name] = option
    assert _converge.MATE_DEFAULTS == {name: option.get("default") for name, option in specs.items()}
