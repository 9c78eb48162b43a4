"""hooks/observed's pure parts: what IFLA_XDP says is attached, and report(), the one shape an attachment has in
results, diffs and facts."""

from ansible_collections.ebpf.xdp.plugins.module_utils.bpf import record as _record
from ansible_collections.ebpf.xdp.plugins.module_utils.hooks import observed as _observed

XDP_NONE = {"prog_id": 0, "native_prog_id": 0, "generic_prog_id": 0, "mode": None}


def test_the_xdp_program_and_its_mode_from_ifla_xdp():
    assert _observed.xdp_live(XDP_NONE) == (0, None)
    assert _observed.xdp_live(dict(XDP_NONE, prog_id=5, mode="generic")) == (5, "generic")
    # Two programs (native and generic at once): the native one is reported first.
    assert _observed.xdp_live(dict(XDP_NONE, native_prog_id=7, generic_prog_id=8, mode="multi")) == (7, "native")
    assert _observed.xdp_live(dict(XDP_NONE, generic_prog_id=8, mode="multi")) == (8, "generic")


def test_nothing_attached_reports_only_that():
    assert _observed.report(_observed.Observed()) == {"attached": False}


def test_another_tool_s_program_is_reported_unmanaged_without_our_fields():
    foreign = _observed.Observed(prog_id=9, name="theirs", tag="ab", placement="native", holder="netlink")
    assert _observed.report(foreign) == {"attached": True, "id": 9, "name": "theirs", "tag": "ab", "mode": "native",
                                         "attach": "netlink", "link_id": None, "owner": "unmanaged"}


def test_our_program_is_reported_from_its_record_in_the_hook_s_words():
    record = {"mode": "tcx", "attach": "link", "attachment": "a", "object": "/o.o", "object_sha256": "cd" * 32,
              "program_name": "tc_drop_count", "constants": {"tc_action": 2}, "revision": 2,
              "previous": {"mode": "tcx", "revision": 1, "program_name": "tc_drop_count"}}
    ours = _observed.Observed(prog_id=11, name="tc_drop_count", tag="ef", placement="tcx", holder="link", link_id=3,
                              record=record, extra={"direction": "ingress"}, placement_key="method")
    assert isinstance(ours.record, _record.OwnershipRecord) and ours.owned
    state = _observed.report(ours)
    assert (state["method"], state["attach"], state["owner"], state["attachment"]) == ("tcx", "link", "ebpf.xdp", "a")
    assert state["direction"] == "ingress" and state["program"] == "tc_drop_count" and "mode" not in state
    assert state["revision"]["number"] == 2 and state["revision"]["method"] == "tcx"
    assert state["previous_revision"]["number"] == 1 and not state["previous_revision"]["rolled_back"]
    assert "section" not in state and "backend" not in state


def test_an_attachment_is_recorded_under_the_keys_every_release_reads():
    attachment = _observed.Attachment(holder="netlink", placement="cls_bpf", link_id=None,
                                      extra={"priority": 3, "handle": 1})
    assert attachment.as_record() == {"priority": 3, "handle": 1, "attach": "netlink", "mode": "cls_bpf",
                                      "link_id": None}
