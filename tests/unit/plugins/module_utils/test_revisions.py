"""Revision bookkeeping, the rollback options and the object store: pure logic and files, no kernel."""

import os

import pytest

from ansible_collections.ebpf.xdp.plugins.module_utils.hooks import revisions as _revisions
from ansible_collections.ebpf.xdp.plugins.module_utils.bpf.compile import sha256_file
from ansible_collections.ebpf.xdp.plugins.module_utils.hooks.revisions import (
    ObjectStore, RevisionError, advance, check_params, module_rules, rollback_params)


def identity(digest, **extra):
    out = {"object": "/o/prog.o", "object_sha256": digest, "program": None, "constants": {}, "resolved_constants": {},
           "shared_maps": None, "requested_mode": "auto"}
    out.update(extra)
    return out


def record(digest, **fields):
    out = dict(identity(digest), program_name="p", tag="t-" + digest, mode="native")
    out.update(fields)
    return out


def test_first_program_is_revision_one_without_previous():
    assert advance(None, identity("a"), rollback=False) == {"revision": 1, "previous": None, "rolled_back": False}


def test_a_new_program_is_a_new_revision_and_keeps_the_old_one():
    fields = advance(record("a", revision=1), identity("b"), rollback=False)
    assert fields["revision"] == 2 and not fields["rolled_back"]
    assert fields["previous"]["revision"] == 1 and fields["previous"]["object_sha256"] == "a"
    assert fields["previous"]["tag"] == "t-a" and fields["previous"]["mode"] == "native"


def test_the_same_revision_again_keeps_number_and_previous():
    old = record("b", revision=2, previous=record("a", revision=1))
    same = identity("b", resolved_constants={"x": 9})  # an ifindex resolved anew is the same revision
    assert advance(old, same, rollback=False) == {"revision": 2, "previous": old["previous"], "rolled_back": False}


def test_rollback_swaps_current_and_previous_and_says_so():
    old = record("b", revision=2, previous=dict(identity("a"), revision=1))
    fields = advance(old, identity("a"), rollback=True)
    assert fields["revision"] == 1 and fields["rolled_back"] and fields["previous"]["object_sha256"] == "b"
    rolled = dict(record("a"), **fields)
    again = advance(rolled, identity("a"), rollback=True)
    assert again == fields, "a second rollback converges to the same revision"
    forward = advance(rolled, identity("c"), rollback=False)
    assert forward["revision"] == 3 and forward["previous"]["revision"] == 1 and not forward["rolled_back"]


def test_a_rebuilt_object_of_the_same_program_keeps_the_revision():
    old = record("a", revision=4)
    assert advance(old, identity("a2"), rollback=False, new_program=False)["revision"] == 4


def test_records_from_before_revisions_count_as_revision_one():
    assert advance(record("a"), identity("b"), rollback=False)["revision"] == 2


def test_check_params():
    base = dict(state="present", object=None, program=None, constants={}, shared_maps=None)
    with pytest.raises(RevisionError, match="missing: object"):
        check_params(base)
    check_params(dict(base, revision="previous"))
    check_params(dict(base, object="/o"))
    with pytest.raises(RevisionError, match="do not give object, constants"):
        check_params(dict(base, revision="previous", object="/o", constants={"a": 1}))
    with pytest.raises(RevisionError, match="do not give section with it"):
        check_params(dict(base, revision="previous", section="xdp1"))
    with pytest.raises(RevisionError, match="state: absent"):
        check_params(dict(base, revision="previous", state="absent"))


def test_module_rules_let_revision_stand_for_the_object():
    rules = module_rules(dict(mutually_exclusive=[("object", "source")],
                              required_if=[("state", "present", ("object", "source"), True)]))
    assert rules["required_if"] == [("state", "present", ("object", "source", "revision"), True)]
    assert rules["mutually_exclusive"] == [("object", "source")]


# Digests as the store names objects (a record's digest is a path component there: nothing else is taken).
A, B, C, Z = ("%s" % c * 64 for c in "abcf")


def test_rollback_params_take_the_revision_and_its_placement(tmp_path):
    store = tmp_path / "objects"
    store.mkdir()
    (store / (A + ".o")).write_bytes(b"x")
    kept = dict(identity(A, requested_mode="generic", constants={"k": 1}), revision=1)
    params = dict(state="present", revision="previous", mode="auto", object_store=str(store))
    out = rollback_params(params, record(B, revision=2, previous=kept), "eth0")
    assert out["object"] == "/o/prog.o" and out["object_source"] == str(store / (A + ".o"))
    assert out["mode"] == "generic" and out["constants"] == {"k": 1}
    assert out["program"] is None and out["section"] is None
    # A program chosen by its section is chosen so again (its hook types it again when it loads).
    S = "e" * 64
    (store / (S + ".o")).write_bytes(b"y")
    by_section = dict(identity(S, section="xdp1"), revision=1)
    out = rollback_params(params, record(B, revision=2, previous=by_section), "eth0")
    assert out["section"] == "xdp1" and out["program"] is None and out["object_source"] == str(store / (S + ".o"))
    rolled = dict(record(A, revision=1), rolled_back=True, previous=record(B))
    assert rollback_params(params, rolled, "eth0")["object_source"] == str(store / (A + ".o")), "after a rollback: itself"
    assert rollback_params(dict(params, revision="current"), None, "eth0")["revision"] == "current"
    with pytest.raises(RevisionError, match="no previous revision is kept"):
        rollback_params(params, record(B, revision=2), "eth0")
    with pytest.raises(RevisionError, match="no program attached"):
        rollback_params(params, None, "eth0")
    with pytest.raises(RevisionError, match="not in the object store"):
        rollback_params(params, record(C, previous=dict(identity(Z), revision=1)), "eth0")
    with pytest.raises(RevisionError, match=r"^'\.\./\.\./etc/x' is not a sha256 digest"):
        rollback_params(params, record(C, previous=dict(identity("../../etc/x"), revision=1)), "eth0")


def test_store_keeps_by_digest_and_collects_what_no_record_references(tmp_path):
    src = tmp_path / "prog.o"
    src.write_bytes(b"object one")
    digest = sha256_file(str(src))
    store = ObjectStore(str(tmp_path / "objects"))
    owner = tmp_path / "owner"  # stands for a record pin: it exists
    owner.write_text("")
    store.keep(str(src), digest, str(owner))
    assert store.digests() == [digest] and oct(os.stat(store.path(digest)).st_mode & 0o777) == "0o600"
    assert oct(os.stat(store.directory).st_mode & 0o777) == "0o700"
    src.write_bytes(b"overwritten")
    store.keep_if_unchanged(str(src), "f" * 64, str(owner))  # the file no longer has that digest: nothing
    assert store.digests() == [digest]
    # A reference whose record is gone is dropped when the store is next collected.
    other = tmp_path / "gone"
    src.write_bytes(b"object two")
    second = sha256_file(str(src))
    store.keep(str(src), second, str(other))
    store.recorded(str(other))  # its run ended without writing the record
    store.release([digest], str(owner))
    assert store.digests() == [], "released, and the other's record does not exist"


def test_a_reference_whose_record_is_not_written_yet_survives_a_collection(tmp_path):
    """A run keeps its object before the swap and writes its record after it: a collection by another run in
    between (another namespace of the host releasing the same or another object) must not take the object.
    flock locks belong to open files, so the keeper's lock holds against this process's collection too."""
    src = tmp_path / "prog.o"
    src.write_bytes(b"object")
    digest = sha256_file(str(src))
    store = ObjectStore(str(tmp_path / "objects"))
    first, second = tmp_path / "first", tmp_path / "second"  # record pins, neither written yet
    store.keep(str(src), digest, str(first))
    store.keep(str(src), digest, str(second))
    store.release([digest], str(second))  # the second run failed and let go: the first is still in flight
    assert store.digests() == [digest]
    first.write_text("")  # its record is written (the test's stand-in names nothing: a shallow check keeps it)
    store.recorded(str(first))
    store.release([], str(second))
    assert store.digests() == [digest]
    first.unlink()
    store.release([], str(second))
    assert store.digests() == [], "its record gone and its run over: collected"


def test_store_refuses_a_copy_that_changed(tmp_path):
    src = tmp_path / "prog.o"
    src.write_bytes(b"bytes")
    with pytest.raises(RevisionError, match="changed while it was copied"):
        ObjectStore(str(tmp_path / "objects")).keep(str(src), "0" * 64, str(tmp_path / "owner"))
    assert os.listdir(tmp_path / "objects") == [".lock"]


def test_shapes():
    rec = record("a", revision=3, previous=dict(identity("b"), revision=2, program_name="p", mode="generic"))
    shown = _revisions.report(rec, "method")
    assert shown["revision"] == {"number": 3, "object": "/o/prog.o", "object_sha256": "a", "program": "p",
                                 "section": None, "constants": {}, "method": "native", "rolled_back": False}
    by_section = _revisions.report(record("a", program_name="_redirect_xmit", section="redirect_xmit"), "method")
    assert by_section["revision"]["program"] == "_redirect_xmit"
    assert by_section["revision"]["section"] == "redirect_xmit"
    assert shown["previous_revision"]["number"] == 2 and shown["previous_revision"]["method"] == "generic"
    assert _revisions.report(record("a"))["previous_revision"] is None


def test_the_store_leaves_files_it_did_not_make(tmp_path):
    directory = tmp_path / "objects"
    directory.mkdir()
    (directory / "xdp_drop_count.o").write_bytes(b"someone's object")
    src = tmp_path / "prog.o"
    src.write_bytes(b"object")
    store = ObjectStore(str(directory))
    store.keep(str(src), sha256_file(str(src)), str(tmp_path / "gone"))
    store.release([sha256_file(str(src))], str(tmp_path / "gone"))
    assert store.digests() == [] and (directory / "xdp_drop_count.o").exists()
