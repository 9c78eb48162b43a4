"""Named tc attachments and their order, the pure part: names and their directories, the options' checks, which
program before/after names, whether a program is on the right side, and how a misplaced one is moved."""

import pytest

from ansible_collections.ebpf.xdp.plugins.module_utils import _datapath
from ansible_collections.ebpf.xdp.plugins.module_utils.bpf import pins as _pins
from ansible_collections.ebpf.xdp.plugins.module_utils.host import names as _names
from ansible_collections.ebpf.xdp.plugins.module_utils.hooks import (
    revisions as _revisions, tc as _tc, tc_hooks as _tc_hooks)
from ansible_collections.ebpf.xdp.plugins.module_utils.hooks.converge import MOVE, REATTACH, UPDATE_LINK, plan_swap
from ansible_collections.ebpf.xdp.plugins.module_utils.hooks.observed import HELD_BY_LINK, HookError, Observed

WHERE = "the tcx ingress hook of eth0"


# ---------------------------------------------------------------- names and directories


@pytest.mark.parametrize("name", ["a", "web-filter", "count_1", "0day", "x" * 32])
def test_usable_names(name):
    _pins.check_attachment_name(name)
    assert _pins.hook_kind(_pins.hook_dir("tc", "ingress", name)) == "tc"
    assert _pins.split_hook_dir(_pins.hook_dir("tc", "egress", name)) == ("tc_egress", name)


@pytest.mark.parametrize("name", ["", "Web", "a.b", "a/b", "a@b", "-a", "_a", "x" * 33, "é", 7, None])
def test_unusable_names_say_what_is_allowed(name):
    with pytest.raises(_names.BadNameError, match="is not a usable attachment name: 1 to 32 of a-z, 0-9, '_' and '-'"):
        _pins.check_attachment_name(name)


def test_the_unnamed_attachment_keeps_its_directory():
    assert _pins.hook_dir("tc", "ingress") == "tc_ingress" and _pins.hook_dir("xdp") == "xdp"
    assert _pins.split_hook_dir("tc_ingress") == ("tc_ingress", None)
    assert [_pins.hook_kind(d) for d in ("tc_ingress@ok", "tc_ingress@Not.Ok", "tc_sideways@ok", "clsact")] == [
        "tc", None, None, None]


def test_hook_attachments_lists_one_hook_of_an_interface(tmp_path):
    for entry in ("tc_ingress", "tc_ingress@b", "tc_ingress@a", "tc_egress@a", "xdp", "tc_ingress@Bad"):
        (tmp_path / entry).mkdir()
    (tmp_path / "clsact").write_text("")
    found = _pins.hook_attachments("/pins", str(tmp_path), "tc_ingress")
    assert list(found) == [None, "a", "b"]
    assert found["a"].directory == str(tmp_path / "tc_ingress@a") and found["a"].pin_root == "/pins"
    assert _pins.hook_attachments("/pins", str(tmp_path / "missing"), "tc_ingress") == {}


# ---------------------------------------------------------------- the options


def params(**extra):
    out = dict(verdict="drop", priority=None, handle=None, method="auto", name=None, before=None, after=None)
    out.update(extra)
    return out


@pytest.mark.parametrize("extra, message", [
    (dict(before="a", after="b"), "before and after are mutually exclusive"),
    (dict(name="web", before="web"), "before names this attachment itself"),
    (dict(after=True), "after names an attachment of ebpf.xdp on the hook by its name, or another program there"),
    (dict(before=0), "before names an attachment"),
    (dict(before=-3), "before names an attachment"),
    (dict(before=""), "before names an attachment"),
    (dict(before=["a"]), "before names an attachment"),
    (dict(method="cls_bpf", after=5), "cls_bpf filters run in priority order (after every tcx program): give "
                                      "priority instead, lower runs first"),
    (dict(method="act_bpf", before="x"), "act_bpf filters run in priority order"),
    (dict(method="act_bpf", name="x"), "name: act_bpf holds one program per hook here"),
    (dict(name="A"), "name 'A' is not a usable attachment name"),
])
def test_check_params_refuses(extra, message):
    with pytest.raises(Exception) as err:
        _tc.TcHook.check_params(params(**extra))
    assert message in str(err.value)


@pytest.mark.parametrize("extra", [dict(name="web"), dict(name="web", method="tcx", before=42),
                                   dict(after="cilium_in"), dict(name="web", method="cls_bpf", priority=3)])
def test_check_params_accepts(extra):
    _tc.TcHook.check_params(params(**extra))


def test_from_params_names_the_attachment_its_directory_and_its_order():
    [entry] = _datapath.validate({"tc": [{"interface": "eth0", "object": "/o.o", "name": "web", "after": 9}]},
                                 "/sys/fs/bpf/ebpf_xdp")["tc"]
    hook = _tc.TcHook.from_params(entry, 7, "ns1")
    assert hook.pins.directory == "/sys/fs/bpf/ebpf_xdp/ns1/eth0/tc_ingress@web" and hook.name == "tc_ingress@web"
    assert hook.clsact.path == "/sys/fs/bpf/ebpf_xdp/ns1/eth0/clsact", "one clsact record per interface"
    assert (hook.attachment, hook.order) == ("web", ("after", 9))
    identity = hook.identity()
    assert (identity["attachment"], identity["requested_before"], identity["requested_after"]) == ("web", None, 9)


def test_ordering_on_a_kernel_without_tcx_names_the_version(monkeypatch):
    monkeypatch.setattr(_tc_hooks, "tcx_supported", lambda ifindex: False)
    monkeypatch.setattr(_tc.platform, "release", lambda: "6.1.0-28-amd64")
    hook = _tc.TcHook("eth0", 2, pins=None, clsact=None, direction="ingress", method="auto", attachment="web",
                      order=("before", "x"))
    with pytest.raises(HookError, match=r"before places a program among the programs of the tcx hook, which Linux "
                                        r"has from 6.6; this kernel is 6.1.0-28-amd64. Without tcx, order cls_bpf "
                                        r"filters by priority"):
        hook._resolve_method(None)
    with pytest.raises(HookError, match="this attachment is a cls_bpf filter"):
        hook._resolve_method({"mode": "cls_bpf"})


# ---------------------------------------------------------------- which program an anchor names


NAMES = {1: "foreign_count", 2: "tc_drop_count", 3: "tc_drop_count", 4: "cilium_in", 5: "cilium_in",
         6: "a_long_program_"}
SIBLINGS = {"first": {"mode": "tcx", "prog_id": 2}, None: {"mode": "tcx", "prog_id": 3},
            "filter": {"mode": "cls_bpf", "prog_id": 8}, "gone": {"mode": "tcx", "prog_id": 77}}


def anchor(value, tcx_ids=(2, 1, 3, 4, 5, 6), own=0, siblings=None, option="before"):
    return _tc.find_anchor(value, list(tcx_ids), own, SIBLINGS if siblings is None else siblings, NAMES.get,
                           WHERE, option)


@pytest.mark.parametrize("value, expected", [
    (1, 1),  # an id
    ("first", 2),  # an attachment of ours, by its name
    ("foreign_count", 1),  # a program by its name
    ("tc_drop_count", None),  # only ours are called so: nothing else is
    ("a_long_program_name", 6),  # the kernel keeps 15 characters of a name
    ("4", 4),  # digits: an id, when no name matches
])
def test_find_anchor(value, expected):
    if expected is None:
        with pytest.raises(HookError, match="names nothing there"):
            anchor(value)
    else:
        assert anchor(value) == expected


@pytest.mark.parametrize("value, option, own, message", [
    (99, "after", 0, "the tcx ingress hook of eth0: after names program id 99, which is not on it (it holds "
                     "tc_drop_count (id 2), foreign_count (id 1)"),
    (2, "before", 2, "before 2 is this attachment's own program"),
    ("cilium_in", "before", 0, "before 'cilium_in' names 2 programs there (ids 4, 5): name one by its id"),
    ("filter", "after", 0, "after names attachment filter of ebpf.xdp, which is not a tcx program there "
                           "(method cls_bpf)"),
    ("gone", "before", 0, "before names attachment gone of ebpf.xdp, which is not a tcx program there (not "
                          "attached)"),
    ("nothing", "before", 0, "before 'nothing' names nothing there: no attachment of ebpf.xdp with that name"),
])
def test_find_anchor_refuses_with_what_the_hook_holds(value, option, own, message):
    with pytest.raises(HookError) as err:
        anchor(value, own=own, option=option)
    assert message in str(err.value) and "nothing was changed" in str(err.value), str(err.value)


def test_an_empty_hook_says_so():
    with pytest.raises(HookError, match=r"\(it holds no program\)"):
        anchor("x", tcx_ids=(), siblings={})


@pytest.mark.parametrize("order, own, option, anchor_id, expected", [
    ([1, 2, 3], 1, "before", 3, True),  # before: anywhere before it
    ([1, 2, 3], 3, "before", 1, False),
    ([1, 2, 3], 3, "after", 1, True),
    ([1, 2, 3], 2, "after", 3, False),
    ([1, 3], 2, "after", 1, False),  # not on the hook
])
def test_in_order(order, own, option, anchor_id, expected):
    assert _tc.in_order(order, own, option, anchor_id) is expected


def test_a_tcx_program_on_the_wrong_side_is_not_in_place_and_is_moved():
    hook = _tc.TcHook("eth0", 2, pins=None, clsact=None, direction="ingress", method="tcx", attachment="web",
                      order=("before", "f"))
    ours = Observed(prog_id=5, placement="tcx", holder=HELD_BY_LINK, link_id=9, record={"prog_id": 5},
                    placement_key="method")
    hook.tcx_ids, hook.own_id, hook.anchor_id = [7, 5], 5, 7
    assert not hook.in_place(ours) and not hook.settled(ours) and hook.movable(ours)
    assert hook.switch_reason(ours) == "place (before f)"
    assert plan_swap(ours, hook.in_place(ours), False, hook.movable(ours)) == MOVE
    hook.tcx_ids = [5, 7]
    assert hook.in_place(ours) and plan_swap(ours, True, False, True) == UPDATE_LINK
    foreign = Observed(prog_id=5, placement="tcx", holder=HELD_BY_LINK, link_id=9, placement_key="method")
    assert plan_swap(foreign, False, False, hook.movable(foreign)) == REATTACH


# ---------------------------------------------------------------- revisions and datapath


def test_a_new_place_is_not_a_new_revision():
    identity = {"object_sha256": "aa", "requested_method": "tcx", "requested_before": "x", "requested_after": None}
    old = dict(identity, requested_before=None, revision=4, previous={"revision": 3})
    assert _revisions.advance(old, identity, rollback=False)["revision"] == 4


def test_datapath_keys_describe_and_gather_named_attachments():
    validated = _datapath.validate({"tc": [{"interface": "eth0", "object": "/o", "name": "a"},
                                           {"interface": "eth0", "object": "/o"},
                                           {"interface": "eth0", "object": "/o", "name": "b", "before": "a"}]},
                                   "/sys/fs/bpf/ebpf_xdp")["tc"]
    assert [_datapath.key_of("tc", p) for p in validated] == [
        (None, "eth0", "ingress", "a"), (None, "eth0", "ingress", None), (None, "eth0", "ingress", "b")]
    assert _datapath.describe("tc", (None, "eth0", "egress", "a")) == "the tc egress hook of eth0 (attachment a)"
    with pytest.raises(_datapath.ConfigError, match=r"config.tc\[0\] and config.tc\[1\] both manage the tc ingress "
                                                    r"hook of eth0 \(attachment a\) in netns n"):
        _datapath.validate({"tc": [{"interface": "eth0", "object": "/o", "name": "a", "netns": "n"},
                                   {"interface": "eth0", "object": "/p", "name": "a", "netns": "n"}]}, "/p")
    record = {"object": "/o", "program": None, "constants": {}, "direction": "ingress", "requested_method": "tcx",
              "attachment": "b", "requested_before": "a", "requested_after": None}
    assert _tc.TcHook.entry_of(record, None, "eth0", "tc_ingress@b") == {
        "interface": "eth0", "netns": None, "object": "/o", "program": None, "constants": {}, "direction": "ingress",
        "method": "tcx", "name": "b", "before": "a"}


# ---------------------------------------------------------------- tagged anchors: looked up as what they say


@pytest.mark.parametrize("value, expected", [
    ({"id": 4}, 4),
    ({"attachment": "first"}, 2),
    ({"program": "foreign_count"}, 1),
    ({"program": "a_long_program_name"}, 6),
])
def test_a_tagged_anchor_names_what_its_tag_says(value, expected):
    assert anchor(value) == expected


def test_a_tagged_anchor_is_no_guess():
    names = {**NAMES, 7: "first"}  # another tool's program called as one of our attachments
    assert anchor("first", tcx_ids=(2, 1, 7)) == 2  # plain: our attachment first
    assert _tc.find_anchor({"program": "first"}, [2, 1, 7], 0, SIBLINGS, names.get, WHERE, "before") == 7
    with pytest.raises(HookError, match=r"the tcx ingress hook of eth0: before names program '4', and no other "
                                        r"program there is called so \(it holds tc_drop_count \(id 2\)"):
        anchor({"program": "4"})  # digits are no id when tagged as a name
    with pytest.raises(HookError, match="before names attachment foreign_count of ebpf.xdp, which is not on it"):
        anchor({"attachment": "foreign_count"})  # a program's name is no attachment
    with pytest.raises(HookError, match="before names attachment filter of ebpf.xdp, which is not a tcx program"):
        anchor({"attachment": "filter"})
    with pytest.raises(HookError, match="before names program id 99, which is not on it"):
        anchor({"id": 99})


@pytest.mark.parametrize("value, message", [
    ({"attachment": "a", "id": 1}, "before takes one of {attachment: ..., program: ..., id: ...}, or a plain name "
                                   "or id, not"),
    ({"name": "a"}, "before takes one of {attachment: ..., program: ..., id: ...}"),
    ({"id": "7"}, "before: id takes a program's id, a positive integer, not '7'"),
    ({"id": True}, "before: id takes a program's id, a positive integer, not True"),
    ({"id": 0}, "before: id takes a program's id, a positive integer, not 0"),
    ({"program": ""}, "before: program takes a name, not ''"),
    ({"program": 5}, "before: program takes a name, not 5"),
    ({"attachment": "Bad.Name"}, "name 'Bad.Name' is not a usable attachment name"),
    ({"attachment": "web"}, "before names this attachment itself"),
])
def test_a_bad_tagged_anchor_is_refused(value, message):
    with pytest.raises(Exception) as err:
        _tc.TcHook.check_params(params(name="web", before=value))
    assert message in str(err.value)


def test_a_tagged_anchor_is_accepted_and_datapath_finds_the_attachment_it_names():
    for value in ({"attachment": "other"}, {"program": "web"}, {"id": 3}):
        _tc.TcHook.check_params(params(name="web", before=value))
    assert [_tc.anchor_attachment(v) for v in ("a", {"attachment": "a"}, {"program": "a"}, {"id": 3}, 3, None)] == [
        "a", "a", None, None, None, None]
