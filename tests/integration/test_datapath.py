"""ebpf.xdp.datapath: a host's data path in one task, against the real kernel.

A switch namespace (test_multicast_programs.Ports): ports p0..p3 whose peers
h0..h3 count what reaches them (xdp_drop_count, XDP_PASS, attached apart
from the module). The datapath declares xdp_multicast on ports with a shared
map set and two groups; frames from h0 to a group address are counted at the
members' hosts, exactly.
"""

import contextlib
import json
import os
import threading

import pytest

import pin_snapshot
from conftest import BPF_DIR, VENV_PYTHON, ModuleRunner, assert_rhythm, sh, xdp_attached
from test_devmap_group import mcast_obj  # noqa: F401  # pylint: disable=unused-import
from test_multicast_programs import Ports, counting_hosts, udp_to
from test_tc_redirect_programs import eventually
from test_xdp_dispatcher import burst, chain, component, loader_cleanup  # noqa: F401  # pylint: disable=unused-import
from kernel_features import xdp_loader, xdp_tools_object

from ansible_collections.ebpf.xdp.plugins.module_utils import _datapath, _facts
from ansible_collections.ebpf.xdp.plugins.module_utils.bpf import pins as _pins
from ansible_collections.ebpf.xdp.plugins.module_utils.hooks import converge as _converge
from ansible_collections.ebpf.xdp.plugins.module_utils.host import netns as _netns, session as _session
from ansible_collections.ebpf.xdp.plugins.module_utils.traffic import frames as _frames

SET = "mc"
ONE, ONE_MAC = "239.1.1.1", "01:00:5e:01:01:01"
TWO, TWO_MAC = "239.1.1.2", "01:00:5e:01:01:02"


@pytest.fixture
def switch(drop_obj):
    ports = Ports(4)
    ports.up()
    try:
        with contextlib.ExitStack() as stack:
            yield ports, counting_hosts(ports, drop_obj, stack)
    finally:
        ports.down()


def received(hosts):
    """UDP frames counted at h0..h3."""
    out = []
    for loaded in hosts:
        with loaded.open_map("proto_count") as counters:
            out.append((_facts.read_counters(counters) or {}).get(17, 0))
    return out


def send(ports, group_ip, group_mac, count=50):
    with _netns.netns(ports.hosts):
        sent, _seconds = _frames.send("h0", [("udp", udp_to(ports, 0, group_ip, group_mac))], count, rate=20000)
    assert set(sent.values()) == {count}, sent


def program(ports, port, mcast_obj):  # noqa: F811
    return dict(interface="p%d" % port, netns=ports.sw, object=mcast_obj, program="xdp_multicast", mode="generic",
                shared_maps=SET)


def group(ports, name, members, address):
    return dict(name=name, netns=ports.sw, shared_maps=SET, members=["p%d" % m for m in members],
                addresses=[address])


def tc_filters(ns, dev):
    """tc's own view of dev's ingress filters (the witness)."""
    return [f for f in json.loads(sh("tc", "-n", ns, "-j", "filter", "show", "dev", dev, "ingress").stdout or "[]")
            if "options" in f]


def tag(prog_id):
    return json.loads(sh("bpftool", "-j", "prog", "show", "id", str(prog_id)).stdout)["tag"]


def ids(ports):
    return [xdp_attached(ports.sw, "p%d" % port) for port in range(ports.count)]


@pytest.mark.debian12("datapath")
def test_merged_rhythm_then_gathered_fed_back_is_no_change(run_distro, switch, mcast_obj, tc_obj, tmp_path):  # noqa
    ports, hosts = switch
    obj = str(tmp_path / "objects" / "xdp_multicast.o")
    os.makedirs(os.path.dirname(obj))
    config = {
        "objects": [{"src": os.path.join(BPF_DIR, "xdp_multicast.bpf.c"), "dest": obj}],
        "xdp": [dict(program(ports, port, obj)) for port in range(3)],
        "tc": [dict(interface="p3", netns=ports.sw, object=tc_obj, program="tc_drop_count", method="cls_bpf",
                    constants={"tc_action": 0})],
        "devmap_groups": [group(ports, "one", [1, 2], ONE)],
    }
    first, _second = assert_rhythm(run_distro, "datapath", {"config": config})
    assert [c["entry"] for c in first["changes"]] == ["config.objects[0]", "config.xdp[0]", "config.xdp[1]",
                                                      "config.xdp[2]", "config.tc[0]", "config.devmap_groups[0]"]
    assert first["before"] == {"xdp": [], "tc": [], "devmap_groups": []}, first["before"]
    assert [e["interface"] for e in first["after"]["xdp"]] == ["p0", "p1", "p2"]
    [shown] = tc_filters(ports.sw, "p3")
    assert shown["kind"] == "bpf" and shown["options"]["prog"]["name"] == "tc_drop_count", shown
    send(ports, ONE, ONE_MAC)
    assert received(hosts) == [0, 50, 50, 0]

    gathered = run_distro("datapath", {"state": "gathered", "namespaces": [ports.sw]})
    assert not gathered["changed"] and sorted(gathered["gathered"]) == ["devmap_groups", "tc", "xdp"], gathered
    assert gathered["gathered"]["devmap_groups"][0]["members"] == ["p1", "p2"], gathered
    back = {"state": "overridden", "config": gathered["gathered"], "namespaces": [ports.sw]}
    for check in (True, False):
        res = run_distro("datapath", back, check=check)
        assert res["changed"] is False and not res.get("failed"), res
    send(ports, ONE, ONE_MAC)
    assert received(hosts) == [0, 100, 100, 0]


def test_overridden_removes_what_is_no_longer_declared_and_leaves_a_foreign_program(
        run_distro, switch, mcast_obj, drop_obj):  # noqa: F811
    ports, hosts = switch
    config = {"xdp": [program(ports, port, mcast_obj) for port in range(3)],
              "devmap_groups": [group(ports, "one", [1, 2], ONE), group(ports, "two", [1], TWO)]}
    res = run_distro("datapath", {"config": config})
    assert res["changed"] and not res.get("failed"), res
    sh("ip", "-n", ports.sw, "link", "set", "dev", "p3", "xdpgeneric", "obj", drop_obj, "sec", "xdp")
    before = ids(ports)
    send(ports, ONE, ONE_MAC)
    send(ports, TWO, TWO_MAC)
    assert received(hosts) == [0, 100, 50, 0]

    smaller = {"xdp": config["xdp"][:2], "devmap_groups": config["devmap_groups"][:1]}
    args = {"state": "overridden", "config": smaller, "namespaces": [ports.sw]}
    predicted = run_distro("datapath", args, check=True)
    assert ids(ports) == before, "check mode changed something"
    first, _second = assert_rhythm(run_distro, "datapath", args)
    gone = [c["entry"] for c in first["changes"]]
    # Check mode predicted exactly the real run's changes, and each removal's before and after.
    assert predicted["changes"] == first["changes"], (predicted["changes"], first["changes"])
    assert gone == ["group two of map set mc in netns %s (not declared)" % ports.sw,
                    "the XDP hook of p2 in netns %s (not declared)" % ports.sw], first["changes"]
    after = ids(ports)
    assert after[:2] == before[:2] and after[2] == {} and after[3] == before[3], (before, after)
    assert [g["name"] for g in first["after"]["devmap_groups"]] == ["one"]
    # The groups that stay still deliver, exactly; the one removed delivers nothing.
    send(ports, ONE, ONE_MAC)
    send(ports, TWO, TWO_MAC)
    assert received(hosts) == [0, 150, 100, 0]


def test_two_entries_for_one_hook_are_an_error_before_anything_changes(run_distro, switch, mcast_obj):  # noqa
    ports, _hosts = switch
    config = {"xdp": [program(ports, 0, mcast_obj), program(ports, 1, mcast_obj),
                      dict(program(ports, 0, mcast_obj), mode="native")]}
    for check in (True, False):
        res = run_distro("datapath", {"config": config}, check=check)
        assert res.get("failed") and res["msg"] == (
            "config.xdp[0] and config.xdp[2] both manage the XDP hook of p0 in netns %s: give each one entry"
            % ports.sw), res
    assert ids(ports) == [{}, {}, {}, {}]
    bad = run_distro("datapath", {"config": {"tc": [{"interface": "p0", "netns": ports.sw, "method": "nope"}]}})
    assert bad.get("failed") and bad["msg"].startswith("config.tc[0]: value of method must be one of"), bad


def test_a_failing_entry_puts_back_what_the_run_changed(run_distro, switch, mcast_obj, tmp_path):  # noqa: F811
    ports, _hosts = switch
    first = {"xdp": [program(ports, 0, mcast_obj), dict(program(ports, 1, mcast_obj), constants={})]}
    assert run_distro("datapath", {"config": first})["changed"]
    before = ids(ports)
    before_tag = tag(before[0]["generic"])
    broken = tmp_path / "broken.o"
    broken.write_bytes(b"not an object")
    # p0 upgraded (new constants), p2 attached, then p1's object fails to open: p2 goes, p0 returns.
    config = {"xdp": [dict(program(ports, 0, mcast_obj), constants={"default_group": 1}),
                      program(ports, 2, mcast_obj), dict(program(ports, 1, mcast_obj), object=str(broken))]}
    res = run_distro("datapath", {"config": config})
    assert res.get("failed") and res["msg"].startswith("config.xdp[2]: "), res
    assert res["put_back"] == ["config.xdp[1] (the XDP hook of p2 in netns %s): put back" % ports.sw,
                               "config.xdp[0] (the XDP hook of p0 in netns %s): put back" % ports.sw], res
    # p1 was never touched; p2 is bare again; p0 has its program back: the very program (its id), in the same mode.
    assert ids(ports) == before and before[2] == {}, (before, ids(ports))
    assert tag(before[0]["generic"]) == before_tag
    again = run_distro("datapath", {"config": first})
    assert again["changed"] is False, again


def in_process(config, pin_root, namespaces):
    """One datapath task in this process, as the module runs it: (result, the host session's reads and counts)."""
    params = {"config": config, "state": "overridden", "namespaces": namespaces, "sources": None, "pin_root": pin_root}
    with _session.host() as session:
        result, _warnings = _datapath.run(params, False, None, None)
    assert not result.get("failed"), result
    return result, session


def reads_of(session, kind):
    """How often the session read each record (kind "record", by path), each hook's state (kind "hook", by
    namespace, hook and ifindex; the tc dumps too: qdiscs, filters), each map set's groups (kind "map set", by
    the set's directory) or each listing of pin directories (kind "pin dirs": a hook's attachments, a set's
    groups; by directory and hook)."""
    if kind == "record":
        return {key[1]: n for key, n in session.reads.items() if key[0] == "record"}
    if kind == "map set":
        return {key[2]: n for key, n in session.reads.items() if key[0] != "record" and key[1] == _pins.MAP_SET_STATE}
    if kind == "pin dirs":
        return {key[2:]: n for key, n in session.reads.items() if key[0] != "record" and key[1] == _pins.PIN_DIRS}
    return {key: n for key, n in session.reads.items()
            if key[0] != "record" and (key[1].startswith(_session.HOOK) or key[1] in ("links", "qdiscs", "filters"))}


def test_a_task_reads_each_record_and_each_hook_once(run_distro, switch, mcast_obj, tc_obj, pin_root,  # noqa: F811
                                                     features, monkeypatch):
    """The host state of a task (issue 39 item 1): a no-change overridden run over three XDP programs, four tc
    attachments (an unnamed filter on p3's ingress, three named ones on its egress, each tcx one placed after the
    one before it) and a group reads each ownership record once, each hook's kernel state once (IFLA_XDP of every
    port from one link dump, the qdisc dump, the tc hooks' filters and tcx programs), the group's map set once
    and each listing of pin directories once (the egress hook's attachments, which each placed one looks up its
    anchor among; the set's groups), however many times the gather, the holds, the converger and the gather
    after look at them; a run that upgrades p0's program reads p0's hook again only after writing it, and
    every other hook, record, map set and listing once; a run that changes the group's members reads its map
    set again only after writing it (for the gather after). A hook is held for a put-back (an fd to each of its
    pins) only right before its step changes it."""
    ports, _hosts = switch
    if features["tcx"]:
        named = [dict(name="first"), dict(name="second", after="first"), dict(name="third", after="second")]
    else:  # cls_bpf's named attachments run by priority, and nothing looks at their siblings when nothing changes
        named = [dict(name=name, priority=priority) for priority, name in enumerate(("first", "second", "third"), 1)]
    config = {"xdp": [program(ports, port, mcast_obj) for port in range(3)],
              "tc": [dict(interface="p3", netns=ports.sw, object=tc_obj, program="tc_drop_count", method="cls_bpf")]
              + [dict(entry, interface="p3", netns=ports.sw, object=tc_obj, program="tc_drop_count",
                      direction="egress", method="tcx" if features["tcx"] else "cls_bpf") for entry in named],
              "devmap_groups": [group(ports, "one", [1, 2], ONE)]}
    res = run_distro("datapath", {"config": config})
    assert res["changed"] and not res.get("failed"), res
    owners = sorted(os.path.join(base, "owner") for base, _dirs, files in os.walk(pin_root) if "owner" in files)
    assert len(owners) == 8, owners  # three XDP attachments, the four tc ones, the group
    [set_dir] = {os.path.dirname(os.path.dirname(os.path.dirname(owner))) for owner in owners if "/groups/" in owner}
    # The listings, by directory (and hook): p3's egress attachments (what a placed one looks among for its
    # anchor), the set's groups.
    egress_listing = (os.path.dirname(os.path.dirname(next(o for o in owners if "tc_egress@first" in o))),
                      "tc_egress")
    listings = ({egress_listing: 1} if features["tcx"] else {}) | {(os.path.join(set_dir, "groups"),): 1}

    held = []
    hold = _converge.hold
    monkeypatch.setattr(_converge, "hold", lambda kind, params: held.append(params["interface"]) or hold(kind, params))
    result, session = in_process(config, pin_root, [ports.sw])
    assert result["changed"] is False, result
    records, hooks = reads_of(session, "record"), reads_of(session, "hook")
    assert sorted(records) == owners and set(records.values()) == {1}, records
    tcx = [("hook:tcx", ports.ifindex[3], direction) for direction in ("ingress", "egress")] if features["tcx"] \
        else []  # tc's hooks: their tcx programs too
    assert sorted(key[1:] for key in hooks) == sorted(
        [("hook:xdp", index) for index in ports.ifindex[:3]] + [("links",), ("qdiscs",)]
        + [("filters", ports.ifindex[3], direction, 0) for direction in ("ingress", "egress")]
        + tcx), hooks
    assert set(hooks.values()) == {1}, hooks
    assert reads_of(session, "map set") == {set_dir: 1}, reads_of(session, "map set")
    assert reads_of(session, "pin dirs") == listings, reads_of(session, "pin dirs")
    assert held == [], held  # nothing changes, so no hook is held for a put-back (an fd to each of its pins)
    print("\nno-change run, 3 XDP + 4 tc + 1 group: %d bpf(), %d netlink, %d records"
          % (session.counts["bpf"], session.counts["netlink"], session.counts["record"]))

    upgraded = dict(config, xdp=[dict(config["xdp"][0], constants={"default_group": 1})] + config["xdp"][1:])
    result, session = in_process(upgraded, pin_root, [ports.sw])
    assert [c["entry"] for c in result["changes"]] == ["config.xdp[0]"], result["changes"]
    assert held == ["p0"], held  # held right before its change, and only it
    records, hooks = reads_of(session, "record"), reads_of(session, "hook")
    assert sorted(records) == owners and set(records.values()) == {1}, records  # a record written is known as written
    p0 = [key for key in hooks if key[1:] == ("hook:xdp", ports.ifindex[0])]
    assert p0 and all(n == 1 for key, n in hooks.items() if key not in p0), hooks
    assert reads_of(session, "map set") == {set_dir: 1}, reads_of(session, "map set")
    assert reads_of(session, "pin dirs") == listings, reads_of(session, "pin dirs")
    print("upgrade of one of them: %d bpf(), %d netlink, %d records"
          % (session.counts["bpf"], session.counts["netlink"], session.counts["record"]))

    smaller = dict(upgraded, devmap_groups=[dict(group(ports, "one", [1], ONE), exclusive=True)])
    result, session = in_process(smaller, pin_root, [ports.sw])
    assert [c["entry"] for c in result["changes"]] == ["config.devmap_groups[0]"], result["changes"]
    assert result["after"]["devmap_groups"][0]["members"] == ["p1"], result["after"]
    # Read by the gather and the group's converge alike, then again by the gather after, which sees the write.
    assert reads_of(session, "map set") == {set_dir: 2}, reads_of(session, "map set")
    records, hooks = reads_of(session, "record"), reads_of(session, "hook")
    assert set(records.values()) == {1} and set(hooks.values()) == {1}, (records, hooks)


def waiting_on(lock_path):
    """How many processes wait for the flock on lock_path now (/proc/locks' blocked "->" lines on its inode)."""
    inode = os.stat(lock_path).st_ino
    with open("/proc/locks") as locks:
        return sum(1 for line in locks if " -> " in line and any(
            field.rsplit(":", 1)[-1] == str(inode) for field in line.split() if field.count(":") == 2))


def test_two_runs_creating_groups_in_one_set_at_once_get_distinct_ids(run_distro, switch, mcast_obj):  # noqa: F811
    """Two datapath runs, each creating a group in one map set, both read the set (their gather) before either
    writes, then take the set's lock one after the other: the second sees what the first wrote (the set's lock
    generation moved since its read) and takes the next free id; both groups deliver, exactly. A re-run of each
    is no change."""
    ports, hosts = switch
    res = run_distro("datapath", {"config": {"xdp": [program(ports, port, mcast_obj) for port in range(3)]}})
    assert res["changed"] and not res.get("failed"), res
    tasks = [{"config": {"devmap_groups": [group(ports, "one", [1], ONE)]}},
             {"config": {"devmap_groups": [group(ports, "two", [2], TWO)]}}]
    results = [None, None]
    lock_path = os.path.join(_pins.LOCK_DIR, ports.sw, _pins.shared_maps_lock(SET) + ".lock")
    with _pins.lock(ports.sw, _pins.shared_maps_lock(SET)):
        runs = [threading.Thread(target=lambda i=i: results.__setitem__(i, run_distro("datapath", tasks[i])))
                for i in range(2)]
        for thread in runs:
            thread.start()
        # Both have gathered the set (no group yet) and wait for its lock.
        assert eventually(lambda: waiting_on(lock_path), 2, timeout=60) == 2, results
    for thread in runs:
        thread.join(120)
    assert all(r and r["changed"] and not r.get("failed") for r in results), results
    gathered = run_distro("datapath", {"state": "gathered", "namespaces": [ports.sw]})
    ids_by_name = {g["name"]: g["id"] for g in gathered["gathered"]["devmap_groups"]}
    assert sorted(ids_by_name) == ["one", "two"] and sorted(ids_by_name.values()) == [1, 2], gathered
    for name, res in zip(("one", "two"), results):  # each run's after names its group by the id it took
        assert {g["name"]: g["id"] for g in res["after"]["devmap_groups"]}[name] == ids_by_name[name], res
    send(ports, ONE, ONE_MAC)
    send(ports, TWO, TWO_MAC)
    assert received(hosts) == [0, 50, 50, 0]
    for task in tasks:
        again = run_distro("datapath", task)
        assert again["changed"] is False and not again.get("failed"), again
    # Each run that wrote the set advanced its lock's generation; the runs that changed nothing left it.
    assert _pins.lock_generation(ports.sw, _pins.shared_maps_lock(SET)) == 2


@pytest.mark.quiet  # snapshots of the whole host
def test_a_fault_after_each_change_leaves_the_host_as_it_was(switch, mcast_obj, tc_obj, pin_root, tmp_path):  # noqa
    """An overridden run of seven changes (an upgrade of p0's program, two new XDP programs, a new tc filter, a
    group's members, a new group, p3's program no longer declared) made to fail right after its first, second,
    ... seventh change: each time the host is as before the run, by the bad-input snapshot (program ids, every
    pin by the object it holds, every pinned map's bytes) and tc's qdiscs: the upgraded and the removed
    programs are back with their ids, their maps the same maps, and the object store keeps their revisions."""
    ports, _hosts = switch
    direct = ModuleRunner(VENV_PYTHON, pin_root)
    store = str(tmp_path / "store")
    start = {"xdp": [dict(program(ports, port, mcast_obj), object_store=store) for port in (0, 3)],
             "devmap_groups": [group(ports, "one", [1], ONE)]}
    res = direct("datapath", {"config": start, "pin_root": pin_root})
    assert res["changed"] and not res.get("failed"), res
    where = {"namespaces": [ports.sw], "pin_root": pin_root, "objects": store, "cache": str(tmp_path / "none")}
    before = pin_snapshot.snapshot(where, pins_by_object=True)
    qdiscs = sh("tc", "-n", ports.sw, "qdisc", "show").stdout
    config = {"xdp": [dict(program(ports, 0, mcast_obj), object_store=store, constants={"default_group": 1})] +
              [dict(program(ports, port, mcast_obj), object_store=store) for port in (1, 2)],
              "tc": [dict(interface="p3", netns=ports.sw, object=tc_obj, program="tc_drop_count", method="cls_bpf")],
              "devmap_groups": [group(ports, "one", [1, 2], ONE), group(ports, "two", [2], TWO)]}
    args = {"state": "overridden", "config": config, "pin_root": pin_root, "namespaces": [ports.sw]}
    for n in range(1, 8):
        res = direct("datapath", args, env={_datapath.FAULT_AFTER_ENV: str(n)})
        assert res.get("failed") and "fault injected after change %d" % n in res["msg"], (n, res)
        assert len(res["put_back"]) == n and all(s.endswith(": put back") for s in res["put_back"]), (n, res)
        after = pin_snapshot.snapshot(where, pins_by_object=True)
        # The lock files of the interfaces the run touched stay in /run (empty, no state): all else is as it was.
        assert dict(after, locks=None) == dict(before, locks=None), (n, after, before)
        assert sh("tc", "-n", ports.sw, "qdisc", "show").stdout == qdiscs, n
    # Without the fault: the seven changes, then nothing to do.
    res = direct("datapath", args)
    assert len(res["changes"]) == 7 and not res.get("failed"), res
    assert direct("datapath", args)["changed"] is False


@pytest.mark.kernel("xdp_dispatcher")
def test_overridden_takes_out_an_undeclared_xdp_attachment_and_leaves_xdp_loaders(
        run_distro, pair, drop_obj, loader_cleanup):  # noqa: F811
    """Two named XDP attachments on one interface beside xdp-loader's program (libxdp's dispatcher; more in
    test_xdp_dispatcher): gathered fed back is no change; overridden without one of them takes it out of the
    dispatcher, the rest keep their ids."""
    run = run_distro
    sh(*xdp_loader(pair.rx, "load", "-m", "skb", "-P", "30", "eth0", xdp_tools_object("xdpfilt_alw_all")))
    config = {"xdp": [component(pair, drop_obj, "counter", 10), component(pair, drop_obj, "spare", 20)]}
    first = assert_rhythm(run, "datapath", {"config": config})[0]
    assert [c["entry"] for c in first["changes"]] == ["config.xdp[0]", "config.xdp[1]"], first["changes"]
    before = chain(run, pair)
    assert [c[:3] for c in before] == [("counter", 10, "ebpf.xdp"), ("spare", 20, "ebpf.xdp"),
                                       ("xdpfilt_alw_all", 30, "unmanaged")], before

    gathered = run("datapath", {"state": "gathered", "namespaces": [pair.rx]})
    assert [(e["name"], e["priority"], e["chain_call_actions"]) for e in gathered["gathered"]["xdp"]] == [
        ("counter", 10, ["pass"]), ("spare", 20, ["pass"])], gathered
    back = {"state": "overridden", "config": gathered["gathered"], "namespaces": [pair.rx]}
    for check in (True, False):
        res = run("datapath", back, check=check)
        assert res["changed"] is False and not res.get("failed"), res

    args = {"state": "overridden", "config": {"xdp": config["xdp"][:1]}, "namespaces": [pair.rx]}
    taken = assert_rhythm(run, "datapath", args)[0]
    assert [c["entry"] for c in taken["changes"]] == [
        "the XDP hook of eth0 (attachment spare) in netns %s (not declared)" % pair.rx], taken["changes"]
    after = chain(run, pair)
    assert [c[3] for c in after] == [before[0][3], before[2][3]], (before, after)
    assert burst(pair, run) == 100


def test_facts_before_are_read_just_before_the_first_change_and_only_then(run_distro, pair, drop_obj):
    """facts_before (what a rollout's gate compares with): a run that changes the program returns the old
    program's counters, exact, with rates; a run that changes nothing, and check mode, read nothing; with
    only_if_changing false a run that changes nothing reads them anyway."""
    entry = dict(interface="eth0", netns=pair.rx, object=drop_obj, mode="native", constants={"xdp_action": 2})
    facts_before = dict(netns=pair.rx, interfaces=["eth0"], rate_interval=0.2)
    first = run_distro("datapath", {"config": {"xdp": [entry]}, "facts_before": facts_before})
    assert first["changed"] and not first.get("failed"), first
    assert first["facts_before"]["interfaces"]["eth0"]["xdp"] is None, "no program before the first attach"
    assert pair.burst(run_distro, count=40, protocols=("udp",))["sent"] == {"udp": 40}
    for check in (True, False):
        unchanged = run_distro("datapath", {"config": {"xdp": [entry]}, "facts_before": facts_before}, check=check)
        assert not unchanged["changed"] and unchanged["facts_before"] is None, unchanged
    anyway = dict(facts_before, rate_interval=0, only_if_changing=False)
    unchanged = run_distro("datapath", {"config": {"xdp": [entry]}, "facts_before": anyway})
    # Counted per protocol: the UDP frames sent, exactly (the interface's own IPv6 chatter is "other").
    assert not unchanged["changed"] and unchanged["facts_before"]["interfaces"]["eth0"]["xdp"]["protocols"]["udp"] \
        == 40, unchanged
    # An upgrade (the same program, dropping): the facts are the passing program's, read before the swap.
    upgrade = {"config": {"xdp": [dict(entry, constants={"xdp_action": 1})]}, "facts_before": facts_before}
    predicted = run_distro("datapath", upgrade, check=True)
    assert predicted["changed"] and predicted["facts_before"] is None, predicted
    res = run_distro("datapath", upgrade)
    assert res["changed"] and not res.get("failed"), res
    old = res["facts_before"]["interfaces"]["eth0"]
    assert old["xdp"]["id"] == first["item_results"]["xdp"][0]["id"], (old, first["item_results"])
    assert old["xdp"]["protocols"]["udp"] == 40 and old["xdp"]["protocol_rates"]["udp"] == 0.0, old["xdp"]
    assert "rates" in old and res["facts_before"]["rate_interval"] >= 0.2, res["facts_before"]
    bad = run_distro("datapath", {"config": {"xdp": [entry]}, "facts_before": dict(facts_before, rate_interval=-1)})
    assert bad.get("failed") and "facts_before.rate_interval must not be negative" in bad["msg"], bad


def test_a_host_without_the_toolchain_is_left_as_it_was_and_told_what_it_lacks(run_distro, pair, drop_obj):
    """toolchain (what ebpf.xdp.xdp_deploy checks in its converge): a host that lacks part of it - a package, a
    newer kernel - changes nothing, in check mode and for real, and the result says what it lacks; a host
    that has it converges in the same run."""
    entry = dict(interface="eth0", netns=pair.rx, object=drop_obj, mode="native")
    lacking = {"require": {"packages": ["clang", "ebpf-xdp-no-such-package"], "min_kernel": "99.1"}}
    for check in (True, False):
        res = run_distro("datapath", {"config": {"xdp": [entry]}, "toolchain": lacking}, check=check)
        assert not res["changed"] and not res.get("failed"), res
        assert res["toolchain"]["ready"] is False and res["toolchain"]["unready"] == [
            "packages not installed: ebpf-xdp-no-such-package",
            "kernel %s is older than 99.1" % os.uname().release], res["toolchain"]
        assert res["toolchain"]["packages"]["clang"], "clang, installed, is read with its version"
        assert "item_results" not in res, res
    assert xdp_attached(pair.rx, "eth0") == {}, "nothing attached"
    bad = run_distro("datapath", {"config": {"xdp": [entry]}, "toolchain": {"require": {"btf": "maybe"}}})
    assert bad.get("failed") and bad["msg"].startswith("toolchain: ") and "btf" in bad["msg"], bad
    assert xdp_attached(pair.rx, "eth0") == {}
    ready = {"require": {"packages": ["clang", "libbpf1"], "min_kernel": "5.9"}}
    first, _second = assert_rhythm(run_distro, "datapath", {"config": {"xdp": [entry]}, "toolchain": ready})
    assert xdp_attached(pair.rx, "eth0") == {"native": first["item_results"]["xdp"][0]["id"]}


def test_report_changes_says_what_changes_without_the_states_and_each_entrys_result(run_distro, pair, drop_obj):
    """report: changes (xdp_rollout's probe): the four steps' changed and changes as with report: full, without
    before, after, item_results and the diff; a bad value is refused before anything changes."""
    entry = dict(interface="eth0", netns=pair.rx, object=drop_obj, mode="native")
    args = {"config": {"xdp": [entry]}, "report": "changes"}
    bad = run_distro("datapath", dict(args, report="brief"))
    assert bad.get("failed") and "report" in bad["msg"] and "full, changes" in bad["msg"], bad
    assert xdp_attached(pair.rx, "eth0") == {}, "nothing attached"
    steps = [run_distro("datapath", args, check=check) for check in (True, False, True, False)]
    assert [step["changed"] for step in steps] == [True, True, False, False], steps
    assert [[change["entry"] for change in step["changes"]] for step in steps] == [["config.xdp[0]"]] * 2 + [[]] * 2
    for step in steps:
        assert not step.get("failed") and not {"before", "after", "item_results", "diff"} & set(step), step
        assert step["invocation"]["module_args"]["report"] == "changes", step
    assert len(json.dumps(steps[0])) < 2048, steps[0]
    full = run_distro("datapath", dict(args, report="full"), check=True)
    assert not full["changed"] and {"before", "after", "item_results", "diff"} <= set(full), full
    assert list(xdp_attached(pair.rx, "eth0")) == ["native"]
