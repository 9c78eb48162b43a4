"""Ownership records this collection did not write (another tool's, a newer version's, a forged one) are refused
before anything in them is used, with a message naming the record, and the host is left as it was (issue 37).

A record's object digest names a file of the object store: a forged `previous` digest of "../evil" made
`revision: previous` load <store>/../evil.o, an object from outside the store.
"""

import json
import os
import shutil

import pytest

import pin_snapshot
from ansible_collections.ebpf.xdp.plugins.module_utils.bpf import libbpf as _bpf, pins as _pins


def forge(owner, record):
    """Write record at the pinned ownership record `owner` as it is, without Record.encode's own fields."""
    with _bpf.Map.from_pin(owner) as record_map:
        record_map.update(b"\0\0\0\0", json.dumps(record).encode())


@pytest.fixture
def attached(pair, drop_obj, pin_root, run_distro, tmp_path):
    """xdp_drop_count on rx/eth0 (generic), its object store in tmp_path/store, an object beside the store."""
    store = str(tmp_path / "store")
    args = dict(interface="eth0", netns=pair.rx, object=drop_obj, mode="generic", object_store=store)
    res = run_distro("xdp_program", args)
    assert res.get("changed") and not res.get("failed"), res
    shutil.copy(drop_obj, str(tmp_path / "evil.o"))
    owner = os.path.join(pin_root, pair.rx, "eth0", "xdp", "owner")
    real = _pins.Record(owner).read()
    yield args, owner, real
    forge(owner, real)


def test_records_we_did_not_write_are_refused_and_change_nothing(pair, pin_root, run_distro, tmp_path, attached):
    args, owner, real = attached
    where = {"namespaces": [pair.tx, pair.rx], "pin_root": pin_root, "objects": str(tmp_path), "cache": str(tmp_path)}
    refused = "ownership record %s " % owner
    cases = [
        (dict(real, managed_by="other-tool"), args,
         refused + "was not written by ebpf.xdp (managed_by 'other-tool'): the program there is not this "
                   "collection's; remove the record by hand if it should be"),
        (dict(real, version=7), args,
         refused + "has version 7; this collection reads version 1 to 1 (a newer ebpf.xdp wrote it? use that one)"),
        # The forged previous revision points at tmp_path/evil.o through the store's parent.
        (dict(real, previous=dict(real, object_sha256="../evil", revision=1), revision=2),
         dict(args, object=None, revision="previous"),
         "ownership record %s: previous.object_sha256 '../evil' is not a sha256 digest (64 lowercase hex digits); it "
         "was not written by this collection, remove it by hand" % owner),
    ]
    for record, task, message in cases:
        forge(owner, record)
        before = pin_snapshot.snapshot(where)
        for check in (True, False):
            res = run_distro("xdp_program", {k: v for k, v in task.items() if v is not None}, check=check)
            assert res.get("failed") and not res.get("changed") and res["msg"] == message, res
            assert pin_snapshot.snapshot(where) == before
        facts = run_distro("xdp_facts", dict(netns=pair.rx))
        assert facts.get("failed") and facts["msg"] == message, facts
    forge(owner, real)
    again = run_distro("xdp_program", args)
    assert not again.get("failed") and not again.get("changed"), again
