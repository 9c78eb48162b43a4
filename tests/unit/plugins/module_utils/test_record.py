"""bpf/record: the ownership record in the collection's vocabulary, over records as the previous release stored
them (tests/integration/data/records_85f8564.json, from a real run; test_record_upgrade puts them on the kernel)."""

import json
import os

import pytest

from ansible_collections.ebpf.xdp.plugins.module_utils.bpf import pins as _pins, record as _record

DATA = os.path.join(os.path.dirname(__file__), "..", "..", "..", "integration", "data", "records_85f8564.json")
# Sample values for the placeholders of a run (see test_record_upgrade).
RUN = {"{prog_id}": 101, "{link_id}": 7, "{ifindex}": 3, "{tag}": "8877de7b525b4820",
       "{data_sha256}": "ab" * 32, "{object_sha256}": "cd" * 32}


def filled(value):
    if isinstance(value, dict):
        return {k: filled(v) for k, v in value.items()}
    return RUN.get(value, value) if isinstance(value, str) else value


def previous_release():
    with open(DATA, encoding="utf-8") as data:
        return {path: filled(stored) for path, stored in json.load(data).items()}


def test_every_record_of_the_previous_release_reads_as_it_was_stored():
    for path, stored in previous_release().items():
        record = _record.OwnershipRecord(_pins.check_record(json.loads(json.dumps(stored)), path))
        assert record == stored and json.dumps(record, sort_keys=True) == json.dumps(stored, sort_keys=True), path


def test_the_vocabulary_over_the_stored_keys():
    records = previous_release()
    upgraded = _record.OwnershipRecord(records["{netns}/p0/xdp/owner"])
    assert (upgraded.placement, upgraded.holder, upgraded.attachment) == ("generic", "link", None)
    assert (upgraded.revision, upgraded.rolled_back, upgraded.prog_id, upgraded.link_id) == (2, False, 101, 7)
    assert upgraded.previous.revision == 1 and upgraded.previous.placement == "generic"
    assert upgraded.previous.get("constants") == {"xdp_action": 2} and upgraded.previous.previous is None
    named = _record.OwnershipRecord(records["{netns}/p1/tc_ingress@b/owner"])
    assert (named.placement, named.holder, named.attachment, named.previous) == ("tcx", "link", "b", None)
    assert named.program_name == "tc_drop_count" and named.shared_maps is None
    cls_bpf = _record.OwnershipRecord(records["{netns}/p1/tc_egress/owner"])
    assert (cls_bpf.placement, cls_bpf.holder, cls_bpf.link_id, cls_bpf.get("priority")) == ("cls_bpf", "netlink",
                                                                                             None, 7)
    assert _record.OwnershipRecord(records["{netns}/p2/xdp/owner"]).shared_maps == "mc"


def test_a_record_from_before_revisions_and_names_reads_as_their_defaults():
    old = _record.OwnershipRecord({"managed_by": "ebpf.xdp", "version": 1, "mode": "tcx", "attach": "link"})
    assert (old.revision, old.previous, old.rolled_back, old.attachment) == (1, None, False, None)


def test_fields_are_stored_under_the_keys_every_release_reads():
    assert _record.stored(placement="tcx", holder="link", attachment="a", revision=2, previous=None) == \
        {"mode": "tcx", "attach": "link", "attachment": "a", "revision": 2, "previous": None}
    record = _record.OwnershipRecord({"mode": "native", "attach": "netlink", "prog_id": 4})
    moved = record.but(holder="link", link_id=9)
    assert moved == {"mode": "native", "attach": "link", "prog_id": 4, "link_id": 9} and record["attach"] == "netlink"
    assert isinstance(moved, _record.OwnershipRecord) and _record.of(moved) is moved and _record.of(None) is None
    assert _pins.RECORD_VERSION == _record.VERSION == 1  # what the previous release reads back after a downgrade


@pytest.mark.parametrize("change, words", [
    (dict(mode=1), "mode 1"),
    (dict(attach=["link"]), "attach ['link']"),
    (dict(revision="2"), "revision '2'"),
    (dict(revision=True), "revision True"),
    (dict(prog_id=1.5), "prog_id 1.5"),
    (dict(rolled_back="no"), "rolled_back 'no'"),
    (dict(previous={"revision": "one"}), "previous.revision 'one'"),
])
def test_a_field_of_a_type_no_release_writes_is_refused(change, words):
    stored = dict(previous_release()["{netns}/p0/xdp/owner"], **change)
    with pytest.raises(_pins.PinError) as caught:
        _pins.check_record(stored, "/p/owner")
    assert str(caught.value) == ("ownership record /p/owner: %s is not of a type this collection writes there; it "
                                 "was not written by this collection, remove it by hand" % words)
