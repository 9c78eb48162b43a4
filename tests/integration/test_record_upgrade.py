"""An upgrade of the collection keeps every attachment: ownership records exactly as the previous release wrote them
are adopted by this one as no change (issue 39 item 3).

tests/integration/data/records_85f8564.json holds the records a real run of the collection at 85f8564 (the release
before the typed record) wrote for the scenario below: xdp_program (generic, then upgraded to revision 2), tc_program
(two named tcx programs in order, cls_bpf at a priority) and datapath
(XDP on a shared map set, a devmap group). Each record is kept as it was stored, its run's own values (program and
link ids, ifindex, paths, the namespace) replaced by placeholders.

The test attaches the same scenario with this collection, puts the old records in place of the new ones (the
placeholders filled from what is on the kernel now), and runs every task again: check mode and run, each no
change, the very programs kept, and what the facts and datapath's gathered read back the same as before.

The data file was written once, from the records this scenario left on 85f8564's collection (the capture mode of
this test at 51eced4, since removed: captured again by today's collection, the file would hold today's records and
prove nothing about an upgrade). A later release's records go in a file of their own, captured on that release.
"""

import json
import os
import re

import pytest

from test_devmap_group import mcast_obj  # noqa: F401  # pylint: disable=unused-import
from test_multicast_programs import Ports

from ansible_collections.ebpf.xdp.plugins.module_utils.bpf import libbpf as _bpf, pins as _pins

DATA = os.path.join(os.path.dirname(__file__), "data", "records_85f8564.json")
SET = "mc"
TCX_NEXT, TC_SHOT = -1, 2


@pytest.fixture
def switch():
    ports = Ports(4)
    ports.up()
    try:
        yield ports
    finally:
        ports.down()


def scenario(ports, drop_obj, tc_obj, mcast_obj, store):  # noqa: F811
    """(module, args) of every task, in order; each leaves records behind."""
    sw = ports.sw
    xdp = dict(interface="p0", netns=sw, object=drop_obj, mode="generic", object_store=store)
    tc = dict(netns=sw, object=tc_obj, program="tc_drop_count", object_store=store)
    return [
        ("xdp_program", dict(xdp, constants={"xdp_action": 2})),
        ("xdp_program", dict(xdp, constants={"xdp_action": 1})),  # revision 2, revision 1 kept as previous
        ("tc_program", dict(tc, interface="p1", method="tcx", name="a", constants={"tc_action": TCX_NEXT})),
        ("tc_program", dict(tc, interface="p1", method="tcx", name="b", after="a", constants={"tc_action": TC_SHOT})),
        ("tc_program", dict(tc, interface="p1", direction="egress", method="cls_bpf", priority=7,
                            constants={"tc_action": TCX_NEXT})),
        ("datapath", {"config": {
            "xdp": [dict(interface="p%d" % port, netns=sw, object=mcast_obj, program="xdp_multicast",
                         mode="generic", shared_maps=SET, object_store=store) for port in (2, 3)],
            "devmap_groups": [dict(name="one", netns=sw, shared_maps=SET, members=["p2", "p3"],
                                   addresses=["239.1.1.1"])]}}),
    ]


RECORD_FILES = ("owner", "clsact")  # an attachment's or a group's record; the record of a clsact qdisc we made


def records(pin_root):
    """Every ownership record under pin_root, by its path below the pin root."""
    out = {}
    for top, _dirs, files in sorted(os.walk(pin_root)):
        for name in sorted(set(files) & set(RECORD_FILES)):
            path = os.path.join(top, name)
            out[os.path.relpath(path, pin_root)] = _pins.Record(path).read()
    return out


# What the kernel numbers anew on every run, and what the toolchain makes of the same source (another clang,
# another tag and digests): at a record's top level, filled from the record this run wrote at the same path.
RUN_IDS = ("prog_id", "link_id", "ifindex")
BUILT = ("tag", "data_sha256", "object_sha256")


def run_values(pin_root, ports, paths):
    """The paths and names of one run (the pin root, the namespace, objects, the store) by placeholder."""
    values = {"{pin_root}": pin_root, "{netns}": ports.sw}
    values.update(("{%s}" % name, path) for name, path in paths.items())
    return values


def filled(value, values):
    """The data file's placeholders filled: values by placeholder, the ids among them (from the record this run
    wrote)."""
    if isinstance(value, dict):
        return {k: filled(v, values) for k, v in value.items()}
    if isinstance(value, list):
        return [filled(v, values) for v in value]
    if isinstance(value, str):
        if value in values and not isinstance(values[value], str):
            return values[value]
        return re.sub(r"\{[a-z_0-9]+\}", lambda m: values[m.group(0)], value)
    return value


def put(owner, stored):
    """Write stored at the pinned record owner byte for byte as the old release did (Record.encode's encoding)."""
    with _bpf.Map.from_pin(owner) as record_map:
        record_map.update(b"\0\0\0\0", json.dumps(stored, sort_keys=True).encode("utf-8"))


@pytest.mark.kernel("tcx")
def test_records_of_the_previous_release_are_adopted_as_no_change(run_distro, switch, drop_obj, tc_obj,
                                                                  mcast_obj, pin_root, tmp_path):  # noqa: F811
    ports = switch
    paths = {"drop_obj": drop_obj, "tc_obj": tc_obj, "mcast_obj": mcast_obj, "store": str(tmp_path / "store")}
    tasks = scenario(ports, drop_obj, tc_obj, mcast_obj, paths["store"])
    results = []
    for module, args in tasks:
        res = run_distro(module, args)
        assert res.get("changed") and not res.get("failed"), (module, args, res)
        results.append(res)
    written = records(pin_root)

    with open(DATA, encoding="utf-8") as data:
        old = json.load(data)
    values = run_values(pin_root, ports, paths)
    assert sorted(path.replace(ports.sw, "{netns}") for path in written) == sorted(old), \
        "the scenario leaves other records than the previous release's: %s" % sorted(written)
    for path, stored in old.items():
        here = os.path.join(pin_root, path.replace("{netns}", ports.sw))
        now = written[os.path.relpath(here, pin_root)]
        record_values = dict(values, **{"{%s}" % key: now[key] for key in RUN_IDS + BUILT if now.get(key) is not None})
        put(here, filled(stored, record_values))
    facts_before = run_distro("xdp_facts", dict(netns=ports.sw))
    gathered_before = run_distro("datapath", dict(state="gathered", namespaces=[ports.sw]))
    assert not facts_before.get("failed") and not gathered_before.get("failed"), (facts_before, gathered_before)
    previous_release = records(pin_root)

    for (module, args), made in list(zip(tasks, results))[1:]:  # the first task's program was upgraded by the second
        for check in (True, False):
            res = run_distro(module, args, check=check)
            assert res.get("changed") is False and not res.get("failed"), (module, args, check, res)
            if "id" in made:
                assert res["id"] == made["id"], (module, args, res)  # the very program kept
    assert records(pin_root) == previous_release  # adopted as they are: not even rewritten
    assert run_distro("xdp_facts", dict(netns=ports.sw)) == facts_before
    assert run_distro("datapath", dict(state="gathered", namespaces=[ports.sw])) == gathered_before
    # What a previous release's record says of the revisions is what this one reports.
    rollback = {k: v for k, v in tasks[1][1].items() if k not in ("object", "constants")}
    back = run_distro("xdp_program", dict(rollback, revision="previous"))
    assert back["changed"] and back["revision"]["number"] == 1 and back["revision"]["rolled_back"], back
    assert back["revision"]["constants"] == {"xdp_action": 2} and back["previous_revision"]["number"] == 2, back
