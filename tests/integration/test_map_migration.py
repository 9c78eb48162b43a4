"""Upgrades whose maps change layout (issue 40): a program counting into `stats` (struct rec { packets; bytes; })
and its next versions (fields swapped, a field added, more entries, another map type). The pinned map is compared
with the new object's field by field before anything loads: map_migration: refuse fails naming the
map and each difference with nothing changed, where libbpf alone reused the swapped map and read its counters
scrambled, or failed with a bare EINVAL; reset starts the changed map empty and counts on; fields (the default)
carries every entry into the new layout by field name, and what is counted between the copy and the swap too."""

import json
import os
import shutil
import struct

import pytest

from conftest import PYTHONS, ROOT, assert_rhythm, compile_bpf, long_case, sh
from kernel_features import needs
from test_tc_program import filters

from ansible_collections.ebpf.xdp.plugins.module_utils.bpf import libbpf as _bpf, pins as _pins
from ansible_collections.ebpf.xdp.plugins.module_utils.host import netns as _netns


# The migration's work is libbpf's and the collection's; pyroute2 only attaches and swaps the programs, as in every
# upgrade, which test_xdp_program.py and test_tc_program.py run against both pyroute2 versions in make test. Here
# PyPI's runs the matrix in make test-long only: its 110 cases took 134 s of make integration-shared's workers.
@pytest.fixture(params=[p if i == 0 else pytest.param(*p.values, id=p.id, marks=[*p.marks, pytest.mark.long])
                        for i, p in enumerate(PYTHONS)])
def python(request):
    return request.param


PROGRAM = r"""
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/in.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

struct rec {
    REC_FIELDS
};

#ifdef KEY_FIELDS
struct key { KEY_FIELDS };
#define KEY_TYPE struct key
#else
#define KEY_TYPE __u32
#endif

struct {
    __uint(type, MAP_TYPE);
    __type(key, KEY_TYPE);
    __type(value, struct rec);
    __uint(max_entries, MAX_ENTRIES);
} stats SEC(".maps");

SEC("xdp")
int xdp_count_rec(struct xdp_md *ctx)
{
    void *data = (void *)(long)ctx->data, *data_end = (void *)(long)ctx->data_end;
    struct ethhdr *eth = data;
    struct iphdr *ip = (void *)(eth + 1);
    KEY_TYPE index;
    struct rec zero = {}, *r;

    __builtin_memset(&index, 0, sizeof(index));

    /* Only the test's UDP frames: the kernel's own (neighbour discovery) would make the counts inexact. */
    if ((void *)(ip + 1) > data_end || eth->h_proto != bpf_htons(ETH_P_IP) || ip->protocol != IPPROTO_UDP)
        return XDP_PASS;
    r = bpf_map_lookup_elem(&stats, &index);
    if (!r) {  /* a hash's first frame */
        bpf_map_update_elem(&stats, &index, &zero, BPF_NOEXIST);
        r = bpf_map_lookup_elem(&stats, &index);
    }
    if (r) {
        __sync_fetch_and_add(&r->packets, 1);
        __sync_fetch_and_add(&r->bytes, data_end - data);
    }
    return XDP_PASS;
}

char _license[] SEC("license") = "GPL";
"""

VERSIONS = {
    "v1": ("__u64 packets; __u64 bytes;", "BPF_MAP_TYPE_ARRAY", 4),
    "swapped": ("__u64 bytes; __u64 packets;", "BPF_MAP_TYPE_ARRAY", 4),
    "added": ("__u64 packets; __u64 bytes; __u64 drops;", "BPF_MAP_TYPE_ARRAY", 4),
    "grown": ("__u64 packets; __u64 bytes;", "BPF_MAP_TYPE_ARRAY", 8),
    "hash": ("__u64 packets; __u64 bytes;", "BPF_MAP_TYPE_HASH", 4),
    "percpu": ("__u64 packets; __u64 bytes;", "BPF_MAP_TYPE_PERCPU_ARRAY", 4),
    "percpu_added": ("__u64 drops; __u64 bytes; __u64 packets;", "BPF_MAP_TYPE_PERCPU_ARRAY", 4),
}
# A hash keyed by a struct, and its next version without a key field.
KEYED = {"keyed": "__u32 index; __u32 vlan;", "keyed_less": "__u32 index;"}

# What each next version changes, as the refusal says it.
CHANGES = {
    "swapped": "value field packets: int, 8 bytes at 0 -> int, 8 bytes at 8, "
               "value field bytes: int, 8 bytes at 8 -> int, 8 bytes at 0",
    "added": "value field drops added (int, 8 bytes at 16)",
    "grown": "max_entries 4 -> 8",
    "hash": "map type array -> hash",
}

SIZE = 100


@pytest.fixture(scope="module")
def objects(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("migration")
    out = {}
    for name, (fields, map_type, max_entries) in VERSIONS.items():
        source = tmp / ("%s.bpf.c" % name)
        source.write_text(PROGRAM.replace("REC_FIELDS", fields).replace("MAP_TYPE", map_type)
                          .replace("MAX_ENTRIES", str(max_entries)))
        out[name] = compile_bpf(source, tmp / ("%s.o" % name))
    for name, key_fields in KEYED.items():
        source = tmp / ("%s.bpf.c" % name)
        source.write_text("#define KEY_FIELDS %s\n" % key_fields + PROGRAM.replace("REC_FIELDS", VERSIONS["v1"][0])
                          .replace("MAP_TYPE", "BPF_MAP_TYPE_HASH").replace("MAX_ENTRIES", "4"))
        out[name] = compile_bpf(source, tmp / ("%s.o" % name))
    return out


def send(run, pair, count):
    sent = run("xdp_trafficgen", dict(interface="eth0", netns=pair.tx, src_ip=pair.tx_ip, dst_ip=pair.rx_ip,
                                      dst_mac=pair.rx_mac, protocols=["udp"], count=count, size=SIZE,
                                      engine="socket"))
    assert sent["sent"] == {"udp": count}, sent


def stats(run, pair):
    """The receiver's stats entries as xdp_facts decodes them through the pinned map's BTF."""
    facts = run("xdp_facts", dict(netns=pair.rx, maps=["stats"]))
    assert not facts.get("failed"), facts
    prog = facts["ansible_facts"]["xdp"]["interfaces"]["eth0"]["xdp"]
    return next(item for item in prog["maps"] if item["name"] == "stats")["entries"]


def host(pair, attached):
    """What an upgrade must leave alone: the program on the hook and the pinned map's bytes (bpftool as witness)."""
    return pair.xdp_prog_id(), sh("bpftool", "-j", "map", "dump", "pinned", attached["maps"]["stats"]).stdout


def untimed(reports):
    """A real run's map_migration without each migrated map's copy_to_swap_ms, asserted a time first."""
    out = []
    for report_ in reports:
        report_ = dict(report_)
        if report_["outcome"] == "migrated":
            window = report_.pop("copy_to_swap_ms")
            assert isinstance(window, float) and 0 < window < 60000, report_
        out.append(report_)
    return out


@pytest.fixture
def counting(run, pair, objects):
    """v1 on the receiver after 100 frames: its attach result."""
    args = dict(interface="eth0", netns=pair.rx, object=objects["v1"], program="xdp_count_rec")
    attached = run("xdp_program", args)
    assert attached["changed"] and not attached.get("failed"), attached
    assert attached["map_migration"] == [], "nothing was pinned before"
    send(run, pair, 100)
    assert stats(run, pair) == [{"key": 0, "value": {"packets": 100, "bytes": 100 * SIZE}}]
    return attached


@pytest.mark.parametrize("version", ["swapped", "added", "grown", "hash"])
def test_refuse_names_the_map_and_each_difference_and_changes_nothing(run, pair, objects, counting, version):
    before = host(pair, counting)
    args = dict(interface="eth0", netns=pair.rx, object=objects[version], program="xdp_count_rec")
    expected = ("%s declares its maps unlike the maps pinned in %s, and the program would read their bytes through "
                "the new layout: map stats (%s): %s. Nothing was changed; map_migration: fields carries the "
                "entries over by field name, reset starts the map empty" % (
                    objects[version], counting["maps"]["stats"].rpartition("/")[0], counting["maps"]["stats"],
                    CHANGES[version]))
    for check in (True, False):
        refused = run("xdp_program", dict(args, map_migration="refuse"), check=check)
        assert refused["failed"] and refused["msg"] == expected, refused
        assert "Traceback" not in json.dumps(refused)
        assert host(pair, counting) == before
    # The old program counts on, into its map as it was.
    send(run, pair, 50)
    assert stats(run, pair) == [{"key": 0, "value": {"packets": 150, "bytes": 150 * SIZE}}]


@pytest.mark.parametrize("version", ["swapped", "added", "grown"])
def test_reset_starts_the_changed_map_empty_and_counts_on(run, pair, objects, counting, version):
    args = dict(interface="eth0", netns=pair.rx, object=objects[version], program="xdp_count_rec",
                map_migration="reset")
    old_map = json.loads(sh("bpftool", "-j", "map", "show", "pinned", counting["maps"]["stats"]).stdout)["id"]
    first_check = run("xdp_program", args, check=True)
    assert first_check["map_migration"] == [{"map": "stats", "outcome": "reset", "changes": CHANGES[version].split(
        ", value")[:1] + ["value" + rest for rest in CHANGES[version].split(", value")[1:]]}], first_check
    first, _second = assert_rhythm(run, "xdp_program", args)
    assert first["map_migration"] == first_check["map_migration"], first
    assert first["id"] != counting["id"] and first["maps"] == counting["maps"]
    new_map = json.loads(sh("bpftool", "-j", "map", "show", "pinned", first["maps"]["stats"]).stdout)
    assert new_map["id"] != old_map and new_map["max_entries"] == VERSIONS[version][2]
    assert sh("ls", "-A", counting["maps"]["stats"].rpartition("/")[0]).stdout.split() == ["stats"], \
        "the old map's pin is gone once the new program is on the hook"
    assert stats(run, pair) == []  # an array's all-zero entries are left out
    send(run, pair, 50)
    expected = {"packets": 50, "bytes": 50 * SIZE}
    if version == "added":
        expected["drops"] = 0
    assert stats(run, pair) == [{"key": 0, "value": expected}]


def test_an_unchanged_layout_keeps_the_map_and_its_counters(run, pair, objects, counting, tmp_path):
    # Another object (another program: a volatile store more) with the same maps.
    source = tmp_path / "v1b.bpf.c"
    source.write_text(PROGRAM.replace("REC_FIELDS", VERSIONS["v1"][0]).replace("MAP_TYPE", "BPF_MAP_TYPE_ARRAY")
                      .replace("MAX_ENTRIES", "4").replace("KEY_TYPE index;", "KEY_TYPE index; volatile int unused = 1;"))
    args = dict(interface="eth0", netns=pair.rx, object=compile_bpf(source, tmp_path / "v1b.o"),
                program="xdp_count_rec")
    first, _second = assert_rhythm(run, "xdp_program", args)
    assert first["map_migration"] == [{"map": "stats", "outcome": "kept", "changes": []}], first
    send(run, pair, 50)
    assert stats(run, pair) == [{"key": 0, "value": {"packets": 150, "bytes": 150 * SIZE}}]


def second_port(pair):
    """a1 in the receiver's namespace, its veth peer b1 beside it: frames sent from b1 arrive on a1's hooks."""
    sh("ip", "-n", pair.rx, "link", "add", "a1", "type", "veth", "peer", "name", "b1")
    sh("ip", "-n", pair.rx, "link", "set", "a1", "up")
    sh("ip", "-n", pair.rx, "link", "set", "b1", "up")
    return json.loads(sh("ip", "-n", pair.rx, "-j", "link", "show", "a1").stdout)[0]["address"]


def send_a1(run, pair, a1_mac, count):
    sent = run("xdp_trafficgen", dict(interface="b1", netns=pair.rx, src_ip="10.99.0.2", dst_ip="10.99.0.1",
                                      dst_mac=a1_mac, protocols=["udp"], count=count, size=SIZE, engine="socket"))
    assert sent["sent"] == {"udp": count}, sent


def attach_shared_set(run, pair, objects):
    """eth0 and a1 each given xdp_count_rec of v1 over one map set (counters): a1's MAC, the attachments' common
    arguments and the two results."""
    a1_mac = second_port(pair)
    args = dict(netns=pair.rx, object=objects["v1"], program="xdp_count_rec", shared_maps="counters")
    attached = [run("xdp_program", dict(args, interface=ifname)) for ifname in ("eth0", "a1")]
    assert all(one["changed"] and not one.get("failed") for one in attached), attached
    return a1_mac, args, attached


def test_a_shared_map_set_migrates_with_every_attachment_that_shares_it(run, pair, objects):
    """A map set shared by eth0 and a1: eth0's upgrade to a layout with a field added moves a1 too (its own
    program from the same object, over the same new maps), predicted in check mode, in the four-step rhythm;
    a1's own task then has nothing to do, and the one map counts on for both."""
    a1_mac, args, attached = attach_shared_set(run, pair, objects)
    pin = attached[0]["maps"]["stats"]
    send(run, pair, 100)
    send_a1(run, pair, a1_mac, 30)
    before = host(pair, attached[0]), pair.xdp_prog_id(dev="a1")
    upgrade = dict(args, interface="eth0", object=objects["added"])
    predicted = run("xdp_program", upgrade, check=True)
    expected = [{"map": "stats", "outcome": "migrated", "entries_copied": 1,
                 "changes": ["value field drops added (int, 8 bytes at 16)"]}]
    assert predicted["map_migration"] == expected, predicted
    assert predicted["shared_maps_moved"] == [{"interface": "a1", "hook": "xdp", "id_before": attached[1]["id"]}]
    assert (host(pair, attached[0]), pair.xdp_prog_id(dev="a1")) == before, "check mode changes nothing"
    first, _second = assert_rhythm(run, "xdp_program", upgrade)
    assert untimed(first["map_migration"]) == expected, first
    a1_now = pair.xdp_prog_id(dev="a1")
    assert first["shared_maps_moved"] == [{"interface": "a1", "hook": "xdp", "id_before": attached[1]["id"],
                                           "id": a1_now}] and a1_now != attached[1]["id"], first
    assert sh("ls", "-A", pin.rpartition("/")[0]).stdout.split() == ["stats"]
    # a1 runs the new object already: its task with it changes nothing, in check mode or not.
    for check in (True, False):
        same = run("xdp_program", dict(upgrade, interface="a1"), check=check)
        assert same["changed"] is False and not same.get("failed") and same["id"] == a1_now, same
    assert stats(run, pair) == [{"key": 0, "value": {"packets": 130, "bytes": 130 * SIZE, "drops": 0}}]
    send_a1(run, pair, a1_mac, 20)
    send(run, pair, 10)
    assert read_u64s(pin)[bytes(4)] == (160, 160 * SIZE, 0)


def test_revision_previous_moves_a_shared_map_set_back_with_every_attachment(run, pair, objects, tmp_path):
    """The rollback of eth0's migrating upgrade of a set shared with a1 migrates the set back into v1's layout and
    puts a1's previous revision back too (the same object, from the store), in the four-step rhythm; a1's own
    rollback task then has nothing to do, and every frame counted on either side of it is there."""
    a1_mac = second_port(pair)
    store = str(tmp_path / "objects")
    args = dict(netns=pair.rx, program="xdp_count_rec", shared_maps="counters", object_store=store)
    attached = [run("xdp_program", dict(args, interface=ifname, object=objects["v1"])) for ifname in ("eth0", "a1")]
    assert all(one["changed"] and not one.get("failed") for one in attached), attached
    pin = attached[0]["maps"]["stats"]
    send(run, pair, 100)
    upgraded = run("xdp_program", dict(args, interface="eth0", object=objects["added"]))
    assert upgraded["changed"] and upgraded["shared_maps_moved"], upgraded
    send_a1(run, pair, a1_mac, 20)
    assert read_u64s(pin)[bytes(4)] == (120, 120 * SIZE, 0)
    back = dict(interface="eth0", netns=pair.rx, object_store=store, revision="previous")
    predicted = run("xdp_program", back, check=True)
    assert [m["interface"] for m in predicted["shared_maps_moved"]] == ["a1"], predicted
    rolled, _again = assert_rhythm(run, "xdp_program", back)
    assert rolled["revision"]["rolled_back"] and rolled["revision"]["object_sha256"] == \
        attached[0]["revision"]["object_sha256"], rolled
    assert untimed(rolled["map_migration"]) == [{"map": "stats", "outcome": "migrated", "entries_copied": 1,
                                                 "changes": ["value field drops removed (was int, 8 bytes at 16)"]}]
    assert pair.xdp_prog_id(dev="a1") == rolled["shared_maps_moved"][0]["id"], rolled
    for check in (True, False):
        same = run("xdp_program", dict(back, interface="a1"), check=check)
        assert same["changed"] is False and not same.get("failed") and same["revision"]["rolled_back"], same
    assert sh("ls", "-A", pin.rpartition("/")[0]).stdout.split() == ["stats"]
    assert read_u64s(pin)[bytes(4)] == (120, 120 * SIZE)
    send_a1(run, pair, a1_mac, 10)
    send(run, pair, 10)
    assert read_u64s(pin)[bytes(4)] == (140, 140 * SIZE)


def test_a_shared_map_set_is_refused_when_an_attachment_cannot_move_with_it(run, pair, objects, tmp_path):
    """a1 shares the set with a program from another object (the same maps): eth0's migrating upgrade cannot move
    it, so it is refused naming a1, in check mode too, and nothing changes."""
    second_port(pair)
    args = dict(netns=pair.rx, program="xdp_count_rec", shared_maps="counters")
    # Another program (a volatile store more) with the same maps.
    source = tmp_path / "v1b.bpf.c"
    source.write_text(PROGRAM.replace("REC_FIELDS", VERSIONS["v1"][0]).replace("MAP_TYPE", "BPF_MAP_TYPE_ARRAY")
                      .replace("MAX_ENTRIES", "4").replace("KEY_TYPE index;", "KEY_TYPE index; volatile int unused = 1;"))
    other = compile_bpf(source, tmp_path / "v1b.o")
    attached = [run("xdp_program", dict(args, interface="eth0", object=objects["v1"])),
                run("xdp_program", dict(args, interface="a1", object=other))]
    assert all(one["changed"] and not one.get("failed") for one in attached), attached
    before = host(pair, attached[0]), pair.xdp_prog_id(dev="a1")
    for check in (True, False):
        refused = run("xdp_program", dict(args, interface="eth0", object=objects["added"]), check=check)
        assert refused["failed"] and refused["msg"] == (
            "the maps of map set counters change layout, so every attachment of the set moves to the new maps with "
            "this upgrade, each loading its own program from %s; a1's attachment xdp runs a program from %s "
            "(sha256 %s), not from the object eth0 ran before. Nothing was changed; give every attachment of the set "
            "the same object, or give the changed map another name"
            % (objects["added"], other, attached[1]["revision"]["object_sha256"])), refused
        assert "Traceback" not in json.dumps(refused)
        assert (host(pair, attached[0]), pair.xdp_prog_id(dev="a1")) == before


def test_a_run_on_a_set_mate_during_the_sets_migration_waits_for_it_and_finds_it_done(run, pair, objects):
    """eth0's migrating upgrade of the set it shares with a1 (paused after its load, holding the set's lock and
    both interfaces'), and a1's own task with the same object started meanwhile: a1's run takes the set's lock
    before a1's, so it waits for eth0's to end (no run holds a lock the other waits for), then finds a1 moved
    already and changes nothing; neither waits for a timeout."""
    import threading  # pylint: disable=import-outside-toplevel
    import time  # pylint: disable=import-outside-toplevel
    from ansible_collections.ebpf.xdp.plugins.module_utils.hooks import converge as _converge  # pylint: disable=import-outside-toplevel

    a1_mac, args, attached = attach_shared_set(run, pair, objects)
    send(run, pair, 100)
    send_a1(run, pair, a1_mac, 20)
    upgrade = dict(args, object=objects["added"])
    results, took = {}, {}

    def upgrade_eth0():
        start = time.monotonic()
        results["eth0"] = run("xdp_program", dict(upgrade, interface="eth0"),
                              env={_converge.FAULT_POINT_ENV: "pause:after_load"})
        took["eth0"] = time.monotonic() - start

    thread = threading.Thread(target=upgrade_eth0)
    thread.start()
    try:
        time.sleep(1.5)  # eth0's run holds its locks and pauses
        start = time.monotonic()
        results["a1"] = run("xdp_program", dict(upgrade, interface="a1"))
        took["a1"] = time.monotonic() - start
    finally:
        thread.join()
    assert results["eth0"]["changed"] and not results["eth0"].get("failed"), results
    assert [m["interface"] for m in results["eth0"]["shared_maps_moved"]] == ["a1"], results
    assert results["a1"]["changed"] is False and not results["a1"].get("failed"), results
    assert results["a1"]["id"] == results["eth0"]["shared_maps_moved"][0]["id"] == pair.xdp_prog_id(dev="a1")
    # a1's run waited for the rest of eth0's pause, far from the 30 s of a lock timeout.
    assert took["eth0"] < 15 and 0.5 < took["a1"] < 15, took
    assert read_u64s(attached[0]["maps"]["stats"])[bytes(4)] == (120, 120 * SIZE, 0)


def test_a_lock_held_too_long_names_itself_and_its_holder(pair):
    """A run that waits (with a timeout) for a lock another run holds says which lock, which process holds it and
    what else that one holds, and what this run holds meanwhile."""
    import subprocess  # pylint: disable=import-outside-toplevel
    import sys  # pylint: disable=import-outside-toplevel

    key = "test-%s" % pair.rx
    holder = subprocess.Popen(  # pylint: disable=consider-using-with
        [sys.executable, "-c", "import sys, time\n"
         "from ansible_collections.ebpf.xdp.plugins.module_utils.bpf import pins\n"
         "with pins.lock(sys.argv[1], pins.shared_maps_lock('counters')), pins.lock(sys.argv[1], 'a1'):\n"
         "    print('held', flush=True)\n"
         "    time.sleep(30)\n", key], stdout=subprocess.PIPE, text=True,
        env=dict(os.environ, PYTHONPATH=os.path.join(ROOT, ".build", "collections")))
    try:
        assert holder.stdout.readline().strip() == "held"
        with _pins.lock(key, "eth0"):
            with pytest.raises(_pins.PinError) as waited:
                with _pins.lock(key, "a1", timeout=0.3):
                    pass
        assert str(waited.value) == (
            "interface a1 has been held for 0 s by another run (pid %d, which holds map set counters too), and this "
            "run, holding interface eth0, waits for it; nothing was changed, run again once it is over" % holder.pid)
    finally:
        holder.kill()
        holder.wait()
        # The locks' directory of this made-up namespace key: nothing else removes it.
        shutil.rmtree(os.path.dirname(_pins.lock_path(key, "a1")), ignore_errors=True)
    assert not os.path.exists(os.path.dirname(_pins.lock_path(key, "a1")))


@pytest.mark.parametrize("version", ["swapped", "added", "grown"])
def test_fields_carries_every_counter_by_name_and_counts_on(run, pair, objects, counting, version):
    args = dict(interface="eth0", netns=pair.rx, object=objects[version], program="xdp_count_rec",
                map_migration="fields")
    before = host(pair, counting)
    predicted = run("xdp_program", args, check=True)
    expected = [{"map": "stats", "outcome": "migrated", "entries_copied": 1,
                 "changes": [change if change.startswith(("value", "max")) else "value" + change
                             for change in CHANGES[version].split(", value")]}]
    assert predicted["changed"] and predicted["map_migration"] == expected, predicted
    assert host(pair, counting) == before, "check mode changes nothing"
    # --diff shows what becomes of the map next to the program replacing the old one.
    shown = run("xdp_program", args, check=True, diff=True)["diff"]
    assert shown["after"]["map_migration"] == expected and "map_migration" not in shown["before"], shown
    first, _second = assert_rhythm(run, "xdp_program", args)
    assert untimed(first["map_migration"]) == expected, first
    assert sh("ls", "-A", counting["maps"]["stats"].rpartition("/")[0]).stdout.split() == ["stats"]
    carried = {"packets": 100, "bytes": 100 * SIZE}
    if version == "added":
        carried["drops"] = 0
    # Read through the new map's BTF: exactly what the old one held, by field name.
    assert stats(run, pair) == [{"key": 0, "value": carried}]
    send(run, pair, 50)
    carried.update(packets=150, bytes=150 * SIZE)
    assert stats(run, pair) == [{"key": 0, "value": carried}]


@pytest.mark.parametrize("version, rename, message", [
    ("hash", {}, "map stats: its type changes from array to hash, which no copy carries; map_migration: reset "
                 "starts it empty"),
    ("swapped", {"stats": {"pakets": "packets"}},
     "map stats: map_rename names value field pakets, which the pinned map's struct rec does not have; its fields "
     "are packets, bytes"),
    ("swapped", {"stats": {"packets": "pkts"}},
     "map stats: map_rename renames a field to pkts, which the new struct rec does not have; its fields are bytes, "
     "packets"),
    ("swapped", {"stat": {"packets": "bytes"}}, "map_rename names map stat, which %s does not have; its maps are "
                                                "stats"),
])
def test_fields_refuses_what_no_copy_carries_and_changes_nothing(run, pair, objects, counting, version, rename,
                                                                 message):
    before = host(pair, counting)
    args = dict(interface="eth0", netns=pair.rx, object=objects[version], program="xdp_count_rec",
                map_migration="fields", map_rename=rename)
    for check in (True, False):
        refused = run("xdp_program", args, check=check)
        assert refused["failed"] and refused["msg"] == message.replace("%s", objects[version]), refused
        assert "Traceback" not in json.dumps(refused)
        assert host(pair, counting) == before


# Frames a stream sends between two looks at whether the upgrade has ended, and after it has.
BURST = 20000


def stream(netns, ifname, dst_mac, src_ip, dst_ip, stop, sending):
    """UDP frames out of netns/ifname, burst after burst, until stop is set, then one burst more (frames keep
    arriving after the upgrade): the frames the kernel took, and the monotonic times of the first and last
    burst; sending is set once the first burst is out. Sent from this process rather than by xdp_trafficgen
    (whose runs each have a count fixed before the upgrade starts, and seconds between them under emulation):
    the stream lasts as long as the upgrade does, on this machine or in the emulated VM, with no gap."""
    import socket  # pylint: disable=import-outside-toplevel
    import time  # pylint: disable=import-outside-toplevel
    from ansible_collections.ebpf.xdp.plugins.module_utils.traffic import frames as _frames  # pylint: disable=import-outside-toplevel

    src_mac = json.loads(sh("ip", "-n", netns, "-j", "link", "show", ifname).stdout)[0]["address"]
    with _netns.netns(netns):  # this thread's namespace only
        sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
        sock.bind((ifname, 0))
    frame = _frames.build_frame("udp", src_mac, dst_mac, src_ip, dst_ip, size=SIZE)
    out, started = 0, time.monotonic()
    with sock:
        while True:
            last = stop.is_set()
            out += _frames.send_on(sock, {"udp": frame}, BURST)[0]["udp"]
            sending.set()
            if last:
                return out, (started, time.monotonic())


def upgrade_under_traffic(run, pair, module, args, refused=False, env=None, a1_mac=None):
    """module upgrades with args while a stream of frames arrives at the receiver: the upgrade's result (with
    refused, its failed result instead) and the frames that went out (the kernel took them), once the stream
    has ended, with proof that the upgrade (its copy, swap and top-up) ran while they arrived. With a1_mac, a
    stream goes to a1 (a map set's other attachment) meanwhile too, and the frames out count both."""
    import threading  # pylint: disable=import-outside-toplevel
    import time  # pylint: disable=import-outside-toplevel

    stop = threading.Event()
    streams = {"eth0": (pair.tx, "eth0", pair.rx_mac, pair.tx_ip, pair.rx_ip)}
    if a1_mac:
        streams["a1"] = (pair.rx, "b1", a1_mac, "10.99.0.2", "10.99.0.1")
    ended = {}
    sending = {name: threading.Event() for name in streams}

    def sender(name):
        try:
            ended[name] = stream(*streams[name], stop, sending[name])
        finally:
            sending[name].set()  # a stream that failed has no count, which is asserted below

    threads = [threading.Thread(target=sender, args=(name,)) for name in streams]
    for thread in threads:
        thread.start()
    try:
        # Every stream's first burst out before the upgrade starts (a fixed 0.3 s was not enough for the
        # second stream's thread on the emulated CPU of make test-debian12).
        for name, event in sending.items():
            assert event.wait(120), "the stream to %s has not started in 120 s" % name
        start = time.monotonic()
        upgraded = run(module, args, env=env)
        upgrade = (start, time.monotonic())
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    assert (upgraded.get("failed") and not upgraded["changed"]) if refused else \
        (upgraded["changed"] and not upgraded.get("failed")), upgraded
    assert set(ended) == set(streams), ended  # a stream that failed left no count
    for out, (first, last) in ended.values():
        assert first < upgrade[0] < upgrade[1] < last and out >= BURST, (out, first, last, upgrade)
    return upgraded, sum(out for out, _window in ended.values())


# make test: one layout change under traffic (the tc and map set tests below are the other hooks'); make test-long
# every one.
@pytest.mark.parametrize("version", ["swapped", long_case("added"), long_case("grown")])
def test_fields_under_traffic_counts_every_frame_once(run, pair, objects, counting, version):
    """Frames keep arriving while the map is copied and the program swapped (fields swapped, a field added, more
    entries): what the old program counts after the copy is added after the swap, so the new map ends with every
    frame sent (none lost, none twice)."""
    # map_migration: fields is the default.
    upgraded, out = upgrade_under_traffic(run, pair, "xdp_program", dict(interface="eth0", netns=pair.rx,
                                                                         object=objects[version],
                                                                         program="xdp_count_rec"))
    assert upgraded["map_migration"][0]["outcome"] == "migrated", upgraded
    expected = {"packets": out + 100, "bytes": (out + 100) * SIZE}
    if version == "added":
        expected["drops"] = 0
    assert stats(run, pair) == [{"key": 0, "value": expected}]


@pytest.mark.parametrize("shared", [False, True])
def test_an_upgrade_failing_after_its_swap_under_traffic_carries_back_what_the_new_program_counted(
        run, pair, objects, shared):
    """An upgrade (fields swapped) that fails at its last step, after the swap and the top-up, while frames arrive
    (on eth0, and on a1 too when a1 shares the set): every old program goes back on its hook, and what the new
    programs counted in their moments there is added to the old map before the new one is dropped, so the old
    map ends with every frame sent, once."""
    from ansible_collections.ebpf.xdp.plugins.module_utils.hooks import converge as _converge  # pylint: disable=import-outside-toplevel

    a1_mac = second_port(pair)
    args = dict(netns=pair.rx, object=objects["v1"], program="xdp_count_rec")
    if shared:
        args["shared_maps"] = "counters"
    ports = ("eth0", "a1") if shared else ("eth0",)
    attached = [run("xdp_program", dict(args, interface=ifname)) for ifname in ports]
    assert all(one["changed"] and not one.get("failed") for one in attached), attached
    pin = attached[0]["maps"]["stats"]
    send(run, pair, 100)
    before = [pair.xdp_prog_id(dev=ifname) for ifname in ports]
    failed, out = upgrade_under_traffic(run, pair, "xdp_program", dict(args, interface="eth0", object=objects["swapped"]),
                                        refused=True, env={_converge.FAULT_POINT_ENV: "raise:before_retire"},
                                        a1_mac=a1_mac if shared else None)
    assert "fault injected at before_retire; the upgrade was undone" in failed["msg"], failed
    assert not any("could not be carried back" in w for w in failed.get("warnings", [])), failed
    assert [pair.xdp_prog_id(dev=ifname) for ifname in ports] == before
    assert sh("ls", "-A", pin.rpartition("/")[0]).stdout.split() == ["stats"]
    frames = out + 100
    assert read_u64s(pin)[bytes(4)] == (frames, frames * SIZE)


def test_a_shared_map_set_under_traffic_counts_every_frame_once(run, pair, objects):
    """A map set shared by two interfaces, each receiving frames while eth0's upgrade (fields swapped) moves both
    to the new map: until the second swap, a1's frames go to the old map and eth0's to the new one; after it,
    what the old map gained since the copy is added, so the one map ends with every frame of both, once."""

    a1_mac, args, attached = attach_shared_set(run, pair, objects)
    pin = attached[0]["maps"]["stats"]
    send(run, pair, 100)
    upgraded, out = upgrade_under_traffic(run, pair, "xdp_program",
                                          dict(args, interface="eth0", object=objects["swapped"]), a1_mac=a1_mac)
    assert upgraded["shared_maps_moved"][0]["interface"] == "a1", upgraded
    assert pair.xdp_prog_id(dev="a1") == upgraded["shared_maps_moved"][0]["id"] != attached[1]["id"]
    assert sh("ls", "-A", pin.rpartition("/")[0]).stdout.split() == ["stats"]
    # swapped: bytes first now; 100 frames before, those out on both interfaces during.
    assert read_u64s(pin)[bytes(4)] == ((out + 100) * SIZE, out + 100)


@pytest.mark.parametrize("point", ["after_load", "after_swap", "after_set_swap", "before_retire"])
def test_a_shared_map_set_upgrade_failing_at_each_step_puts_every_attachment_back(run, pair, objects, point):
    """A failure at each step of a map set's migration (after eth0's swap, a1 is still on the old map; after
    a1's, both are on the new one) puts both old programs back on their hooks and the old map under its name
    with its counters; the next run migrates both."""
    from ansible_collections.ebpf.xdp.plugins.module_utils.hooks import converge as _converge  # pylint: disable=import-outside-toplevel

    a1_mac, args, attached = attach_shared_set(run, pair, objects)
    pin = attached[0]["maps"]["stats"]
    send(run, pair, 100)
    before = host(pair, attached[0]), pair.xdp_prog_id(dev="a1"), attachment_pins(attached[0]), \
        attachment_pins(attached[1])
    upgrade = dict(args, interface="eth0", object=objects["swapped"])
    stopped = run("xdp_program", upgrade, env={_converge.FAULT_POINT_ENV: "raise:" + point})
    assert stopped.get("failed") and not stopped.get("changed"), stopped
    undone = "" if point == "after_load" else (
        "; the upgrade was undone: the old program (id %d) is back on the XDP hook of eth0 with its maps as they "
        "were, and so are the map set's other attachments (a1's XDP program id %d)"
        % (attached[0]["id"], attached[1]["id"]))
    assert stopped["msg"] == "fault injected at %s%s" % (point, undone), stopped
    assert (host(pair, attached[0]), pair.xdp_prog_id(dev="a1"), attachment_pins(attached[0]),
            attachment_pins(attached[1])) == before
    send_a1(run, pair, a1_mac, 20)
    upgraded = run("xdp_program", upgrade)
    assert upgraded["changed"] and not upgraded.get("failed") and upgraded["shared_maps_moved"], upgraded
    assert read_u64s(pin)[bytes(4)] == (120 * SIZE, 120)


# make test: killed after eth0's swap with a1 still on the old map, on both holders, either attachment's task
# first; make test-long kills it at each step.
@pytest.mark.parametrize("first", ["eth0", "a1"])
@pytest.mark.parametrize("point", [long_case("after_load"), "after_swap", long_case("after_set_swap"),
                                   long_case("after_gains_added"), long_case("before_retire")])
@pytest.mark.parametrize("kind", ["xdp", "cls_bpf"])
def test_a_shared_map_set_upgrade_killed_at_each_step_converges_with_every_counter(
        run, pair, objects, tc_objects, kind, point, first):
    """Killed (SIGKILL: no undo) at each step of a map set's migration (after eth0's swap, a1 is still on the old
    map; after a1's, both are on the new one), with frames arriving on both afterwards: whichever attachment's task
    runs next (eth0's, or a1's still on the old map) decides by the maps of both. Half moved, eth0 goes back to its
    old program and the old map with what its new program counted; both moved, the old map is dropped. Either way
    that run migrates the set whole, the other's task then changes nothing, and the one map holds every frame
    counted once."""
    from ansible_collections.ebpf.xdp.plugins.module_utils.hooks import converge as _converge  # pylint: disable=import-outside-toplevel

    a1_mac = second_port(pair)
    module, versions = ("xdp_program", objects) if kind == "xdp" else ("tc_program", tc_objects)
    args = dict(netns=pair.rx, program="%s_count_rec" % ("xdp" if kind == "xdp" else "tc"), shared_maps="counters")
    if kind != "xdp":
        args["method"] = kind
    attached = [run(module, dict(args, interface=ifname, object=versions["v1"])) for ifname in ("eth0", "a1")]
    assert all(one["changed"] and not one.get("failed") for one in attached), attached
    pin = attached[0]["maps"]["stats"]
    send(run, pair, 100)
    send_a1(run, pair, a1_mac, 20)
    stopped = run(module, dict(args, interface="eth0", object=versions["swapped"]),
                  env={_converge.FAULT_POINT_ENV: point})
    assert stopped.get("killed"), stopped
    # Counted by whichever program each hook holds, into its maps.
    send(run, pair, 10)
    send_a1(run, pair, a1_mac, 10)
    second = "a1" if first == "eth0" else "eth0"
    converged = run(module, dict(args, interface=first, object=versions["swapped"]))
    # before_retire: every program, pin and record was the new one; only the old map was left to drop.
    assert converged["changed"] is (point != "before_retire") and not converged.get("failed") \
        and converged["maps"]["stats"] == pin, converged
    said = [w.split(" (")[0].split(":")[1].strip() for w in converged.get("warnings", []) if w.startswith("map stats")]
    assert said == [{"after_load": "an upgrade stopped before its swap had set the map aside",
                     "before_retire": "an upgrade stopped after its swap left the old map set aside",
                     }.get(point, "an upgrade stopped before its end, with %s moved to the new map" % ", ".join(
                         "%s's %s program" % (ifname, "XDP" if kind == "xdp" else "tc")
                         for ifname in (("eth0",) if point == "after_swap" else ("a1", "eth0"))))], converged
    assert sh("ls", "-A", pin.rpartition("/")[0]).stdout.split() == ["stats"], "nothing set aside is left"
    on_hooks = pair.xdp_prog_id(), pair.xdp_prog_id(dev="a1")
    for check in (True, False):
        same = run(module, dict(args, interface=second, object=versions["swapped"]), check=check)
        assert same["changed"] is False and not same.get("failed"), same
    again = run(module, dict(args, interface=first, object=versions["swapped"]))
    assert again["changed"] is False and not again.get("failed"), again
    if kind == "xdp":
        assert (pair.xdp_prog_id(), pair.xdp_prog_id(dev="a1")) == on_hooks
    # swapped: bytes first now.
    assert read_u64s(pin)[bytes(4)] == (140 * SIZE, 140)
    send_a1(run, pair, a1_mac, 10)
    send(run, pair, 10)
    assert read_u64s(pin)[bytes(4)] == (160 * SIZE, 160)


@pytest.mark.parametrize("first", ["eth0", "a1"])
@pytest.mark.parametrize("point", ["after_swap", long_case("after_set_swap"), long_case("after_gains_added")])
def test_a_shared_map_set_upgrade_killed_under_traffic_counts_every_frame_once(run, pair, objects, point, first):
    """Killed between the copy and the point where the old map's gains are added, while frames arrive on both
    attachments: what each program counted, into the old map after the copy or into the new one after its swap,
    is in the one map after the next run (whichever attachment's task it is), once."""
    from ansible_collections.ebpf.xdp.plugins.module_utils.hooks import converge as _converge  # pylint: disable=import-outside-toplevel

    a1_mac, args, attached = attach_shared_set(run, pair, objects)
    pin = attached[0]["maps"]["stats"]
    send(run, pair, 100)
    upgrade = dict(args, object=objects["swapped"])
    _killed, out = upgrade_under_traffic(run, pair, "xdp_program", dict(upgrade, interface="eth0"), refused=True,
                                         env={_converge.FAULT_POINT_ENV: point}, a1_mac=a1_mac)
    converged = run("xdp_program", dict(upgrade, interface=first))
    assert converged["changed"] and not converged.get("failed"), converged
    assert any("with what the new programs counted meanwhile" in w for w in converged["warnings"]), converged
    for ifname in ("eth0", "a1"):
        assert run("xdp_program", dict(upgrade, interface=ifname))["changed"] is False
    assert sh("ls", "-A", pin.rpartition("/")[0]).stdout.split() == ["stats"]
    total = out + 100
    assert read_u64s(pin)[bytes(4)] == (total * SIZE, total)


def test_a_shared_map_set_upgrade_killed_after_adding_the_old_maps_gains_adds_them_once(run, pair, objects, tmp_path):
    """Killed right after the old map's gains (what a1, still on it after eth0's swap, counted since the copy) were
    added to the new map, before the copy's snapshot goes: the next run goes back (neither attachment is pinned
    or recorded yet) and carries back what the new programs counted beyond the snapshot, which the adds advanced
    with them (in the same kernel run): a1's 30 frames of the pause are in the one map once, not twice."""
    import threading  # pylint: disable=import-outside-toplevel
    import time  # pylint: disable=import-outside-toplevel
    from ansible_collections.ebpf.xdp.plugins.module_utils.hooks import converge as _converge  # pylint: disable=import-outside-toplevel

    a1_mac, args, attached = attach_shared_set(run, pair, objects)
    pin = attached[0]["maps"]["stats"]
    send(run, pair, 100)
    send_a1(run, pair, a1_mac, 20)
    upgrade = dict(args, object=objects["swapped"])
    resume, results = tmp_path / "resume", {}
    env = {_converge.FAULT_POINT_ENV: "pause:after_swap,after_gains_added", _converge.FAULT_RESUME_ENV: str(resume)}
    thread = threading.Thread(target=lambda: results.update(eth0=run("xdp_program", dict(upgrade, interface="eth0"),
                                                                     env=env)))
    thread.start()
    try:
        deadline = time.monotonic() + 60
        while pair.xdp_prog_id() == attached[0]["id"] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert pair.xdp_prog_id() != attached[0]["id"], "eth0's swap"
        send_a1(run, pair, a1_mac, 30)  # a1 on the old map still: its gains since the copy
        send(run, pair, 10)  # eth0's new program, into the new map
    finally:
        resume.touch()
        thread.join()
    assert results["eth0"].get("killed"), results
    send(run, pair, 10)
    send_a1(run, pair, a1_mac, 10)
    converged = run("xdp_program", dict(upgrade, interface="eth0"))
    assert converged["changed"] and not converged.get("failed"), converged
    assert any("with a1's XDP program, eth0's XDP program moved to the new map" in w and
               "with what the new programs counted meanwhile" in w for w in converged["warnings"]), converged
    for ifname in ("eth0", "a1"):
        assert run("xdp_program", dict(upgrade, interface=ifname))["changed"] is False
    assert sh("ls", "-A", pin.rpartition("/")[0]).stdout.split() == ["stats"]
    # swapped: bytes first now; 100 + 20 before, 30 + 10 in the pause, 10 + 10 after the kill.
    assert read_u64s(pin)[bytes(4)] == (180 * SIZE, 180)


def read_u64s(pin):
    """Every entry of the pinned map, read raw (no BTF): key bytes -> its value's 64-bit fields in order."""
    with _bpf.Map.from_pin(pin) as pinned:
        return {key: struct.unpack("<%dQ" % (len(value) // 8), value) for key, value in pinned.items()}


# The counting program at tc: the same maps, the frame seen as an skb (tc's verdict 0 is TC_ACT_OK).
TC_PROGRAM = PROGRAM.replace('SEC("xdp")\nint xdp_count_rec(struct xdp_md *ctx)',
                             'SEC("tc")\nint tc_count_rec(struct __sk_buff *ctx)').replace("XDP_PASS", "0")


@pytest.fixture(scope="module")
def tc_objects(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tc_migration")
    out = {}
    for name in ("v1", "swapped"):
        fields, map_type, max_entries = VERSIONS[name]
        source = tmp / ("tc_%s.bpf.c" % name)
        source.write_text(TC_PROGRAM.replace("REC_FIELDS", fields).replace("MAP_TYPE", map_type)
                          .replace("MAX_ENTRIES", str(max_entries)))
        out[name] = compile_bpf(source, tmp / ("tc_%s.o" % name))
    return out


@pytest.mark.parametrize("method", [needs("tcx", "tcx"), "cls_bpf"])
def test_tc_fields_under_traffic_counts_every_frame_once(run, pair, tc_objects, method):
    """The same upgrade at tc ingress, held by a tcx link or a cls_bpf filter: the swapped counters carried by
    name, and every frame sent while the map was copied and the program swapped counted once."""
    args = dict(interface="eth0", netns=pair.rx, program="tc_count_rec", method=method)
    attached = run("tc_program", dict(args, object=tc_objects["v1"]))
    assert attached["changed"] and not attached.get("failed") and attached["method"] == method, attached
    send(run, pair, 100)
    pin = attached["maps"]["stats"]
    assert read_u64s(pin)[bytes(4)] == (100, 100 * SIZE)
    upgraded, out = upgrade_under_traffic(run, pair, "tc_program", dict(args, object=tc_objects["swapped"]))
    assert upgraded["method"] == method and upgraded["id"] != attached["id"], upgraded
    assert upgraded["map_migration"][0]["outcome"] == "migrated", upgraded
    assert upgraded["maps"]["stats"] == pin
    # swapped: bytes first now.
    assert read_u64s(pin)[bytes(4)] == ((out + 100) * SIZE, out + 100)


@pytest.mark.parametrize("method", [needs("tcx", "tcx"), "cls_bpf"])
def test_a_shared_tc_map_set_under_traffic_counts_every_frame_once(run, pair, tc_objects, method):
    """The same at tc ingress of two interfaces sharing a map set, held by tcx links (each updated in turn) or
    cls_bpf filters (each replaced in place): both move, every frame of both counted once."""

    a1_mac = second_port(pair)
    args = dict(netns=pair.rx, program="tc_count_rec", method=method, shared_maps="counters")
    attached = [run("tc_program", dict(args, interface=ifname, object=tc_objects["v1"])) for ifname in ("eth0", "a1")]
    assert all(one["changed"] and not one.get("failed") and one["method"] == method for one in attached), attached
    pin = attached[0]["maps"]["stats"]
    send(run, pair, 100)
    upgraded, out = upgrade_under_traffic(run, pair, "tc_program",
                                          dict(args, interface="eth0", object=tc_objects["swapped"]), a1_mac=a1_mac)
    assert [(m["interface"], m["hook"]) for m in upgraded["shared_maps_moved"]] == [("a1", "tc_ingress")], upgraded
    assert upgraded["method"] == method and upgraded["maps"]["stats"] == pin, upgraded
    same = run("tc_program", dict(args, interface="a1", object=tc_objects["swapped"]))
    assert same["changed"] is False and same["id"] == upgraded["shared_maps_moved"][0]["id"], same
    # swapped: bytes first now.
    assert read_u64s(pin)[bytes(4)] == ((out + 100) * SIZE, out + 100)


FLOWS = 5000


@pytest.fixture(scope="module")
def flow_objects(tmp_path_factory):
    """A hash of 8,192 entries keyed by struct key { index; vlan; }, and its next version with a field added."""
    tmp = tmp_path_factory.mktemp("flows")
    out = {}
    for name in ("v1", "added"):
        source = tmp / ("flows_%s.bpf.c" % name)
        source.write_text("#define KEY_FIELDS __u32 index; __u32 vlan;\n" + PROGRAM.replace(
            "REC_FIELDS", VERSIONS[name][0]).replace("MAP_TYPE", "BPF_MAP_TYPE_HASH").replace("MAX_ENTRIES", "8192"))
        out[name] = compile_bpf(source, tmp / ("flows_%s.o" % name))
    return out


def test_fields_carries_thousands_of_flows_by_field_under_traffic(run, pair, flow_objects):
    """5,000 flows (written beside the one the traffic counts into, each with its own counters) carried into
    the layout with drops added, while frames arrive: every flow by field, drops zero, every frame once."""
    args = dict(interface="eth0", netns=pair.rx, program="xdp_count_rec")
    attached = run("xdp_program", dict(args, object=flow_objects["v1"]))
    assert attached["changed"] and not attached.get("failed"), attached
    pin = attached["maps"]["stats"]
    flows = {struct.pack("<II", index, 7): (index, index * 64) for index in range(1, FLOWS + 1)}
    with _bpf.Map.from_pin(pin) as pinned:
        for key, value in flows.items():
            pinned.update(key, struct.pack("<2Q", *value))
    send(run, pair, 100)
    traffic = struct.pack("<II", 0, 0)
    assert read_u64s(pin) == {**flows, traffic: (100, 100 * SIZE)}
    upgraded, out = upgrade_under_traffic(run, pair, "xdp_program", dict(args, object=flow_objects["added"]))
    assert untimed(upgraded["map_migration"]) == [{
        "map": "stats", "outcome": "migrated", "entries_copied": FLOWS + 1,
        "changes": ["value field drops added (int, 8 bytes at 16)"]}], upgraded
    assert read_u64s(pin) == {**{key: value + (0,) for key, value in flows.items()},
                              traffic: (out + 100, (out + 100) * SIZE, 0)}


def test_fields_carries_per_cpu_values_cpu_by_cpu(run, pair, objects):
    args = dict(interface="eth0", netns=pair.rx, object=objects["percpu"], program="xdp_count_rec")
    attached = run("xdp_program", args)
    assert attached["changed"] and not attached.get("failed"), attached
    send(run, pair, 100)

    def per_cpu():
        facts = run("xdp_facts", dict(netns=pair.rx, maps=["stats"], per_cpu=True))
        prog = facts["ansible_facts"]["xdp"]["interfaces"]["eth0"]["xdp"]
        entries = next(item for item in prog["maps"] if item["name"] == "stats")["entries"]
        return [(entry["key"], entry["value"], entry["values"]) for entry in entries]

    before = per_cpu()
    assert [(key, value) for key, value, _values in before] == [(0, {"packets": 100, "bytes": 100 * SIZE})]
    first, _second = assert_rhythm(run, "xdp_program", dict(args, object=objects["percpu_added"],
                                                            map_migration="fields"))
    assert first["map_migration"][0]["outcome"] == "migrated", first
    # Each CPU's copy carried by name into the new layout (drops first now), the new field zero on every CPU.
    assert per_cpu() == [(0, {"drops": 0, "bytes": 100 * SIZE, "packets": 100},
                          [{"drops": 0, "bytes": one["bytes"], "packets": one["packets"]} for one in before[0][2]])]


def test_datapath_migrates_and_a_failing_entry_after_puts_the_old_program_and_map_back(
        run, pair, objects, counting, tmp_path):
    before = host(pair, counting)
    broken = tmp_path / "broken.o"
    broken.write_bytes(b"not an object")
    entry = dict(interface="eth0", netns=pair.rx, object=objects["added"], program="xdp_count_rec")
    # The upgrade of eth0 migrates its stats; the entry after it fails (lo's object does not open): eth0 gets
    # back its very program, and its pin the old map with its counters.
    res = run("datapath", {"config": {"xdp": [entry, dict(entry, interface="lo", object=str(broken))]}})
    assert res.get("failed") and res["msg"].startswith("config.xdp[1]: "), res
    assert res["put_back"] == ["config.xdp[0] (the XDP hook of eth0 in netns %s): put back" % pair.rx,
                               "config.xdp[0]'s map stats (what the new programs counted, added to the old map): "
                               "put back"], res
    assert host(pair, counting) == before
    send(run, pair, 50)
    assert stats(run, pair) == [{"key": 0, "value": {"packets": 150, "bytes": 150 * SIZE}}]
    # The same upgrade alone goes through datapath too, in the four-step rhythm, the map carried by name.
    first, _second = assert_rhythm(run, "datapath", {"config": {"xdp": [entry]}})
    assert stats(run, pair) == [{"key": 0, "value": {"packets": 150, "bytes": 150 * SIZE, "drops": 0}}]
    changes = [change for change in first["changes"] if change["section"] == "xdp"]
    assert [untimed(change["diff"]["after"]["map_migration"]) for change in changes] == [[{
        "map": "stats", "outcome": "migrated", "changes": ["value field drops added (int, 8 bytes at 16)"],
        "entries_copied": 1}]], first


def test_datapath_puts_back_every_attachment_a_shared_map_set_migration_moved_when_a_later_entry_fails(
        run, pair, objects, tmp_path):
    """A datapath entry upgrades eth0 into a layout with a field added, which moves a1 (the set's other attachment)
    too; the entry after it fails (its object does not open): eth0 and a1 get back their very programs, their pins
    and records, and the set's pin its old map with every counter. Then the upgrade alone goes through in the
    four-step rhythm, with a1 moved again."""
    a1_mac, args, attached = attach_shared_set(run, pair, objects)
    pin = attached[0]["maps"]["stats"]
    send(run, pair, 100)
    send_a1(run, pair, a1_mac, 20)

    def host_now():
        return (host(pair, attached[0]), pair.xdp_prog_id(dev="a1"), attachment_pins(attached[0]),
                attachment_pins(attached[1]))
    before = host_now()
    broken = tmp_path / "broken.o"
    broken.write_bytes(b"not an object")
    entry = dict(args, interface="eth0", object=objects["added"])
    failing = dict(entry, interface="lo", object=str(broken), shared_maps=None)
    res = run("datapath", {"config": {"xdp": [entry, failing]}})
    assert res.get("failed") and res["msg"].startswith("config.xdp[1]: "), res
    assert "Traceback" not in json.dumps(res)
    assert res["put_back"] == [
        "config.xdp[0]'s map set: the XDP hook of a1 in netns %s: put back" % pair.rx,
        "config.xdp[0] (the XDP hook of eth0 in netns %s): put back" % pair.rx,
        "config.xdp[0]'s map stats (what the new programs counted, added to the old map): put back"], res
    assert host_now() == before
    assert sh("ls", "-A", pin.rpartition("/")[0]).stdout.split() == ["stats"]
    # Both old programs count on into the old map.
    send(run, pair, 10)
    send_a1(run, pair, a1_mac, 10)
    assert read_u64s(pin)[bytes(4)] == (140, 140 * SIZE)
    first, _second = assert_rhythm(run, "datapath", {"config": {"xdp": [entry]}})
    assert [change["entry"] for change in first["changes"]] == ["config.xdp[0]"], first
    assert pair.xdp_prog_id(dev="a1") != before[1]
    send_a1(run, pair, a1_mac, 10)
    assert read_u64s(pin)[bytes(4)] == (150, 150 * SIZE, 0)


def test_datapath_put_back_carries_back_what_the_new_programs_counted_before_the_failure(run, pair, objects, tmp_path):
    """A datapath entry migrates the map set eth0 shares with a1 (fields swapped), and the run fails after it (an
    injected fault, once 30 frames more reached each interface): the put-back puts both old programs and the old
    map back, and adds to the old map what the new programs counted in the new one meanwhile (the same carry-back
    as a failed upgrade's own), so every frame is counted once."""
    import threading  # pylint: disable=import-outside-toplevel
    import time  # pylint: disable=import-outside-toplevel
    from ansible_collections.ebpf.xdp.plugins.module_utils import _datapath  # pylint: disable=import-outside-toplevel
    from ansible_collections.ebpf.xdp.plugins.module_utils.hooks import converge as _converge  # pylint: disable=import-outside-toplevel

    a1_mac, args, attached = attach_shared_set(run, pair, objects)
    pin = attached[0]["maps"]["stats"]
    send(run, pair, 100)
    send_a1(run, pair, a1_mac, 20)
    before = pair.xdp_prog_id(), pair.xdp_prog_id(dev="a1")
    resume, results = tmp_path / "resume", {}
    env = {_datapath.FAULT_AFTER_ENV: "1", _converge.FAULT_RESUME_ENV: str(resume)}
    entry = dict(args, interface="eth0", object=objects["swapped"])
    thread = threading.Thread(target=lambda: results.update(
        res=run("datapath", {"config": {"xdp": [entry]}}, env=env)))
    thread.start()
    try:
        # The entry is over once the old map's pin is dropped (its point of no return), both programs moved.
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (
                sh("ls", "-A", pin.rpartition("/")[0]).stdout.split() != ["stats"]
                or pair.xdp_prog_id(dev="a1") == before[1] or pair.xdp_prog_id() == before[0]):
            time.sleep(0.05)
        assert pair.xdp_prog_id() != before[0] and pair.xdp_prog_id(dev="a1") != before[1], "both moved"
        time.sleep(0.5)
        send(run, pair, 30)  # counted by the new programs, in the new map
        send_a1(run, pair, a1_mac, 30)
    finally:
        resume.touch()
        thread.join()
    res = results["res"]
    assert res.get("failed") and res["msg"] == "config.xdp[0]: fault injected after change 1", res
    assert res["put_back"] == [
        "config.xdp[0]'s map set: the XDP hook of a1 in netns %s: put back" % pair.rx,
        "config.xdp[0] (the XDP hook of eth0 in netns %s): put back" % pair.rx,
        "config.xdp[0]'s map stats (what the new programs counted, added to the old map): put back"], res
    assert (pair.xdp_prog_id(), pair.xdp_prog_id(dev="a1")) == before
    assert sh("ls", "-A", pin.rpartition("/")[0]).stdout.split() == ["stats"]
    # v1's layout again: packets first; 120 before, 60 between the entry and the failure.
    assert read_u64s(pin)[bytes(4)] == (180, 180 * SIZE)
    send(run, pair, 10)
    send_a1(run, pair, a1_mac, 10)
    assert read_u64s(pin)[bytes(4)] == (200, 200 * SIZE)


def test_fields_refuses_a_key_field_removed_without_a_rule(run, pair, objects):
    args = dict(interface="eth0", netns=pair.rx, object=objects["keyed"], program="xdp_count_rec")
    attached = run("xdp_program", args)
    assert attached["changed"] and not attached.get("failed"), attached
    send(run, pair, 10)
    assert stats(run, pair) == [{"key": {"index": 0, "vlan": 0}, "value": {"packets": 10, "bytes": 10 * SIZE}}]
    before = host(pair, attached)
    for check in (True, False):
        refused = run("xdp_program", dict(args, object=objects["keyed_less"]), check=check)
        assert refused["failed"] and refused["msg"] == (
            "map stats: key field vlan is not in the new key, and keys that differ only there would become one; "
            "carry it under another name with map_rename, or map_migration: reset starts the map empty"), refused
        assert host(pair, attached) == before


@pytest.mark.kernel("xdp_dispatcher")
def test_a_named_attachment_migrates_its_maps_by_field_name(run, pair, objects):
    """A named XDP attachment (one program in libxdp's dispatcher) upgraded to the swapped layout: its stats carried
    by field name in the four-step rhythm, as an attachment of its own would be. Where the kernel cannot run the
    dispatcher, the first attach is refused in the collection's words with nothing changed (kernel_features)."""
    args = dict(interface="eth0", netns=pair.rx, object=objects["v1"], program="xdp_count_rec", name="counting",
                priority=10, mode="generic")
    attached = run("xdp_program", args)
    assert attached["changed"] and not attached.get("failed") and attached["attach"] == "dispatcher", attached
    send(run, pair, 100)
    assert read_u64s(attached["maps"]["stats"])[bytes(4)] == (100, 100 * SIZE)
    upgrade = dict(args, object=objects["swapped"])
    predicted = run("xdp_program", upgrade, check=True)
    assert [m["outcome"] for m in predicted["map_migration"]] == ["migrated"], predicted
    first, _second = assert_rhythm(run, "xdp_program", upgrade)
    assert untimed(first["map_migration"]) == [dict(predicted["map_migration"][0])], first
    assert first["maps"] == attached["maps"] and first["attach"] == "dispatcher", first
    send(run, pair, 50)
    assert read_u64s(attached["maps"]["stats"])[bytes(4)] == (150 * SIZE, 150)


@pytest.mark.parametrize("version", ["swapped", "added"])
def test_revision_previous_migrates_back_by_field_name(run, pair, objects, counting, version, tmp_path):
    """The rollback of a migrating upgrade carries the counters back into the previous layout (the previous
    object, from the object store) the same way: by field name; a field the upgrade added is dropped."""
    store = str(tmp_path / "objects")
    args = dict(interface="eth0", netns=pair.rx, object_store=store, program="xdp_count_rec")
    # counting attached v1 without this store: v1 again with it is a new revision of the same program.
    assert not run("xdp_program", dict(args, object=objects["v1"])).get("failed")
    upgraded = run("xdp_program", dict(args, object=objects[version]))
    assert upgraded["changed"] and upgraded["map_migration"][0]["outcome"] == "migrated", upgraded
    send(run, pair, 50)
    back = dict(interface="eth0", netns=pair.rx, object_store=store, revision="previous")
    predicted = run("xdp_program", back, check=True)
    expected = [{"map": "stats", "outcome": "migrated", "entries_copied": 1,
                 "changes": {"swapped": ["value field bytes: int, 8 bytes at 0 -> int, 8 bytes at 8",
                                         "value field packets: int, 8 bytes at 8 -> int, 8 bytes at 0"],
                             "added": ["value field drops removed (was int, 8 bytes at 16)"]}[version]}]
    assert predicted["changed"] and predicted["map_migration"] == expected, predicted
    rolled, again = assert_rhythm(run, "xdp_program", back)
    assert rolled["revision"]["rolled_back"] and untimed(rolled["map_migration"]) == expected, rolled
    assert again["map_migration"] == [], again
    assert rolled["maps"] == counting["maps"]
    assert sh("ls", "-A", counting["maps"]["stats"].rpartition("/")[0]).stdout.split() == ["stats"]
    # Read through v1's layout again: what v1 counted and what the upgrade counted, by name.
    assert stats(run, pair) == [{"key": 0, "value": {"packets": 150, "bytes": 150 * SIZE}}]
    send(run, pair, 50)
    assert stats(run, pair) == [{"key": 0, "value": {"packets": 200, "bytes": 200 * SIZE}}]


# The steps of a migrating upgrade, in order (hooks/converge.py's fault points): the old pin set aside, the load
# (libbpf makes the new maps, then loads the program), the copy midway, the swap, the new program pinned, the record
# written, and the old map's retirement, its point of no return.
BEFORE_SWAP = ["maps_set_aside", "after_load", "during_copy"]
AFTER_SWAP = ["after_swap", "after_gains_added", "after_attach", "after_pin", "before_record", "before_retire"]
# Killed there, the new program is on the hook with the new maps, and its record is not written yet.
RECORDED_AFTER = ["after_attach", "after_pin", "before_record"]


def pinned_names(counting):
    return sh("ls", "-A", counting["maps"]["stats"].rpartition("/")[0]).stdout.split()


def attachment_pins(attached):
    """Every pin of the attachment directory, by what it pins (kind, id), and its record by its content."""
    out = {}
    for base, _dirs, files in os.walk(attached["pin_dir"]):
        for name in files:
            path = os.path.join(base, name)
            if name == "owner":
                out[path] = _pins.Record(path).read()
            else:
                with _bpf.Fd.from_pin(path) as pinned:
                    out[path] = pinned.identity()
    return out


def stop_at(run, module, args, point, fault, old_id, label):
    """Run the upgrade stopped at point (fault: kill, SIGKILL with no undo; raise, an error with the failure path)
    and check what it leaves at once: a failure anywhere puts the old program back with its maps (the upgrade's
    message says so once the new program had been on the hook); a kill before the swap leaves the old program."""
    from ansible_collections.ebpf.xdp.plugins.module_utils.hooks import converge as _converge  # pylint: disable=import-outside-toplevel

    stopped = run(module, args, env={_converge.FAULT_POINT_ENV: point if fault == "kill" else "raise:" + point})
    if fault == "kill":
        assert stopped.get("killed"), stopped
        return
    assert stopped.get("failed") and not stopped.get("changed"), stopped
    undone = "; the upgrade was undone: the old program (id %d) is back on the %s hook of eth0 with its maps as " \
             "they were" % (old_id, label) if point in AFTER_SWAP else ""
    assert stopped["msg"] == "fault injected at %s%s" % (point, undone), stopped
    assert "Traceback" not in json.dumps(stopped)


def recovered(converged):
    """What the run after a stopped one said of the map it found set aside."""
    return [w.split(" (")[0] for w in converged.get("warnings", []) if w.startswith("map stats: an upgrade stopped")]


# make test stops it at one step before the swap and one after it, each killed and failing (the four branches
# below); make test-long at every step.
@pytest.mark.parametrize("point", [point if point in ("during_copy", "after_swap") else long_case(point)
                                   for point in BEFORE_SWAP + AFTER_SWAP])
@pytest.mark.parametrize("fault", ["kill", "raise"])
def test_a_migrating_upgrade_stopped_at_each_step_converges_with_every_counter(run, pair, objects, counting, point,
                                                                               fault):
    """Killed (SIGKILL: no undo) or failing at each step. A failure anywhere, before the swap or after it, leaves
    the old program on the hook with its map and every pin untouched (after the swap, the old program is swapped
    back in, the new map dropped). A kill before the swap leaves the map set aside, and the next run puts it back
    before it migrates again; a kill right after it (the new program neither pinned nor recorded) is gone back from
    by the next run, with what the new program counted, before it migrates again; a kill later leaves the new program
    counting into the new map, and the next run drops the old one. Either way the re-run converges with every frame counted once, and the one after changes
    nothing."""
    args = dict(interface="eth0", netns=pair.rx, object=objects["swapped"], program="xdp_count_rec")
    before, pins_before = host(pair, counting), attachment_pins(counting)
    stop_at(run, "xdp_program", args, point, fault, counting["id"], "XDP")
    if fault == "raise":
        assert host(pair, counting) == before and pinned_names(counting) == ["stats"], "its map untouched"
        assert attachment_pins(counting) == pins_before, "its link, program pin, maps and record as they were"
    elif point in BEFORE_SWAP:
        assert pair.xdp_prog_id() == counting["id"], "the old program stays on the hook"
    else:
        assert pair.xdp_prog_id() != counting["id"]
    killed = pair.xdp_prog_id()
    send(run, pair, 50)  # counted by whichever program is on the hook, into its own map
    converged = run("xdp_program", args)
    assert not converged.get("failed") and converged["maps"] == counting["maps"], converged
    if fault == "kill" and point in RECORDED_AFTER:
        # The program on the hook is the one the run would load: pinned and recorded as it is, not reloaded.
        assert converged["changed"] and converged["id"] == killed, converged
    if fault == "raise":
        assert recovered(converged) == [], "the failed run put its map back itself"
    elif point in ("after_swap", "after_gains_added"):
        # On the hook but neither pinned nor recorded, its copy's snapshot still there: back to the old program and
        # map (with what the new one counted), and migrated again.
        assert recovered(converged) == ["map stats: an upgrade stopped before its end, with eth0's XDP program moved "
                                        "to the new map"]
    elif point in AFTER_SWAP:
        assert recovered(converged) == ["map stats: an upgrade stopped after its swap left the old map set aside"]
    else:
        assert recovered(converged) == ["map stats: an upgrade stopped before its swap had set the map aside"]
    again = run("xdp_program", args)
    assert again["changed"] is False and not again.get("failed"), again
    assert pinned_names(counting) == ["stats"], "nothing set aside or half made is left"
    assert pair.xdp_prog_id() == again["id"] != counting["id"]
    assert stats(run, pair) == [{"key": 0, "value": {"bytes": 150 * SIZE, "packets": 150}}]
    send(run, pair, 50)
    assert stats(run, pair) == [{"key": 0, "value": {"bytes": 200 * SIZE, "packets": 200}}]


def test_a_recovery_converts_with_the_stopped_runs_map_rename(run, pair, objects, counting, tmp_path):
    """An upgrade that renames packets to pkts (map_rename), killed right after its swap, and 50 frames counted by
    the new program; the next run is v1's task again, which has no map_rename: it goes back to v1 and carries back
    what the new program counted through the rename the stopped run's copy kept with its snapshot, not through its
    own (none), so packets counted as pkts are not dropped."""
    source = tmp_path / "renamed.bpf.c"
    source.write_text(PROGRAM.replace("REC_FIELDS", "__u64 pkts; __u64 bytes;").replace("r->packets", "r->pkts")
                      .replace("MAP_TYPE", "BPF_MAP_TYPE_ARRAY").replace("MAX_ENTRIES", "4"))
    renamed = compile_bpf(source, tmp_path / "renamed.o")
    args = dict(interface="eth0", netns=pair.rx, program="xdp_count_rec")
    stop_at(run, "xdp_program", dict(args, object=renamed, map_rename={"stats": {"packets": "pkts"}}), "after_swap",
            "kill", counting["id"], "XDP")
    assert pinned_names(counting) == ["stats", "stats__at_copy", "stats__at_copy_rules", "stats__before_reset"]
    send(run, pair, 50)
    back = run("xdp_program", dict(args, object=objects["v1"]))
    assert not back.get("failed") and recovered(back) == [
        "map stats: an upgrade stopped before its end, with eth0's XDP program moved to the new map"], back
    assert pair.xdp_prog_id() == counting["id"] and pinned_names(counting) == ["stats"]
    assert stats(run, pair) == [{"key": 0, "value": {"packets": 150, "bytes": 150 * SIZE}}]


def test_a_migrating_upgrade_killed_before_its_record_keeps_the_program_on_the_hook(run, pair, objects, counting):
    """Killed after its swap with the new program pinned but not recorded (before_record). The next run drops the
    old map (the program on the hook uses the new one) and finds on the hook the very program it would load (same
    instructions, maps and data): it pins and records that one instead of swapping in a twin (same id after).
    It reports changed, as its check mode predicts: it completes the stopped run's record and drops its old map,
    which changes the host though not the hook. Check mode and the run after find nothing to do."""
    args = dict(interface="eth0", netns=pair.rx, object=objects["swapped"], program="xdp_count_rec")
    stop_at(run, "xdp_program", args, "before_record", "kill", counting["id"], "XDP")
    killed = pair.xdp_prog_id()
    assert killed != counting["id"]
    send(run, pair, 50)
    assert run("xdp_program", args, check=True)["changed"] is True
    converged = run("xdp_program", args)
    assert converged["changed"] and not converged.get("failed"), converged
    assert recovered(converged) == ["map stats: an upgrade stopped after its swap left the old map set aside"]
    assert converged["id"] == killed == pair.xdp_prog_id(), "the program on the hook kept, not reloaded"
    for check in (True, False):
        same = run("xdp_program", args, check=check)
        assert same["changed"] is False and not same.get("failed") and same["id"] == killed, same
    assert pinned_names(counting) == ["stats"]
    assert stats(run, pair) == [{"key": 0, "value": {"bytes": 150 * SIZE, "packets": 150}}]


def tc_on_hook(pair, method):
    """The programs on rx/eth0's tc ingress as the kernel lists them: tcx's, or the clsact filters'."""
    if method == "tcx":
        with _netns.netns(pair.rx):
            return list(_bpf.tcx_query(_netns.ifindex("eth0"), _bpf.BPF_TCX_INGRESS)["prog_ids"])
    return [f["options"]["prog"]["id"] for f in filters(pair.rx)]


# make test: after the swap, killed and failing, on each holder (the XDP test above has the steps before it);
# make test-long at each step.
@pytest.mark.parametrize("point", [long_case("after_load"), long_case("during_copy"), "after_swap",
                                   long_case("before_retire")])
@pytest.mark.parametrize("fault", ["kill", "raise"])
@pytest.mark.parametrize("method", [needs("tcx", "tcx"), "cls_bpf"])
def test_a_migrating_tc_upgrade_stopped_at_each_step_converges_with_every_counter(run_distro, pair, tc_objects,
                                                                                  method, fault, point):
    """The same at tc ingress, held by a tcx link (updated back) or a cls_bpf filter (replaced back in its place),
    under Debian's Python, at the steps issue 40 names (the XDP test above goes through every step)."""
    run = run_distro
    args = dict(interface="eth0", netns=pair.rx, program="tc_count_rec", method=method)
    attached = run("tc_program", dict(args, object=tc_objects["v1"]))
    assert attached["changed"] and not attached.get("failed") and attached["method"] == method, attached
    send(run, pair, 100)
    pin = attached["maps"]["stats"]
    before = [attached["id"]], read_u64s(pin), attachment_pins(attached)
    args["object"] = tc_objects["swapped"]
    stop_at(run, "tc_program", args, point, fault, attached["id"], "tc")
    if fault == "raise":
        assert (tc_on_hook(pair, method), read_u64s(pin), attachment_pins(attached)) == before
    elif point in BEFORE_SWAP:
        assert tc_on_hook(pair, method) == [attached["id"]]
    else:
        assert len(tc_on_hook(pair, method)) == 1 and tc_on_hook(pair, method) != [attached["id"]]
    send(run, pair, 50)
    converged = run("tc_program", args)
    assert not converged.get("failed") and converged["maps"] == attached["maps"], converged
    assert bool(recovered(converged)) == (fault == "kill"), converged
    again = run("tc_program", args)
    assert again["changed"] is False and not again.get("failed"), again
    assert tc_on_hook(pair, method) == [again["id"]] and again["id"] != attached["id"]
    assert sh("ls", "-A", pin.rpartition("/")[0]).stdout.split() == ["stats"]
    # swapped: bytes first now; 150 frames, each counted once.
    assert read_u64s(pin)[bytes(4)] == (150 * SIZE, 150)


REPLAYED = 3


@pytest.fixture
def replay_sample(pair, tmp_path):
    """A pcap of UDP frames to the receiver, as the counting program counts them."""
    from ansible_collections.ebpf.xdp.plugins.module_utils.traffic import frames as _frames, pcap as _pcap  # pylint: disable=import-outside-toplevel

    path = str(tmp_path / "udp.pcap")
    frame = _frames.build_frame("udp", pair.tx_mac, pair.rx_mac, pair.tx_ip, pair.rx_ip, size=SIZE)
    _pcap.write(path, [frame] * REPLAYED)
    return path


@pytest.fixture
def counting_in_store(run, pair, objects, tmp_path):
    """v1 on the receiver after 100 frames, its object kept in a store of the test's own (replay loads the
    attached program from there)."""
    store = str(tmp_path / "objects")
    attached = run("xdp_program", dict(interface="eth0", netns=pair.rx, object=objects["v1"], program="xdp_count_rec",
                                       object_store=store))
    assert attached["changed"] and not attached.get("failed"), attached
    send(run, pair, 100)
    return dict(attached, object_store=store)


@pytest.mark.parametrize("version", ["swapped", "added", "grown"])
def test_replay_runs_a_candidate_whose_map_changed_over_a_migrated_copy(run, pair, objects, counting_in_store,
                                                                        replay_sample, version):
    """The candidate's stats is migrated from the private copy by field name, as its upgrade would migrate the
    live one: both programs count the replayed frames alike, so, compared in the candidate's layout, no map
    effect (read through the new layout, the swapped fields would differ in every counter); nothing changes on
    the host. A program task's replay says the same before its upgrade."""
    attached = counting_in_store
    before = host(pair, attached)
    args = dict(interface="eth0", netns=pair.rx, object=objects[version], program="xdp_count_rec",
                object_store=attached["object_store"], pcap=replay_sample)
    expected = [{"map": "stats", "outcome": "migrated", "entries_copied": 1,
                 "changes": [change if change.startswith(("value", "max")) else "value" + change
                             for change in CHANGES[version].split(", value")]}]
    for check in (False, True):
        replayed = run("replay", args, check=check)
        assert not replayed.get("failed") and replayed["changed"] is False, replayed
        assert replayed["map_migration"] == expected, replayed
        assert replayed["verdicts"] == {"old": {"XDP_PASS": REPLAYED}, "new": {"XDP_PASS": REPLAYED}}, replayed
        assert replayed["map_effects"] == {}, replayed
        assert host(pair, attached) == before
    task = dict(interface="eth0", netns=pair.rx, object=objects[version], program="xdp_count_rec",
                object_store=attached["object_store"], replay=replay_sample)
    predicted = run("xdp_program", task, check=True)
    assert predicted["changed"] and predicted["replay"]["map_migration"] == expected, predicted
    assert predicted["replay"]["map_effects"] == {}, predicted
    assert host(pair, attached) == before
    assert stats(run, pair) == [{"key": 0, "value": {"packets": 100, "bytes": 100 * SIZE}}]


@pytest.mark.parametrize("extra, message", [
    ({"map_migration": "refuse"}, "%(object)s declares its maps unlike the maps pinned in %(maps)s, and the program "
                                  "would read their bytes through the new layout: map stats (%(maps)s/stats): value "
                                  "field drops added (int, 8 bytes at 16). Nothing was changed; map_migration: "
                                  "fields carries the entries over by field name, reset starts the map empty "
                                  "(map_migration: refuse)"),
    ({"map_rename": {"stat": {"packets": "pkts"}}}, "map_rename names map stat, which %(object)s does not have; its "
                                                    "maps are stats"),
    ({"map_migration": "sideways"}, "value of map_migration must be one of: fields, reset, refuse, got: sideways"),
])
def test_replay_refuses_what_the_upgrade_would_and_changes_nothing(run, pair, objects, counting_in_store,
                                                                   replay_sample, extra, message):
    attached = counting_in_store
    before = host(pair, attached)
    replayed = run("replay", dict(interface="eth0", netns=pair.rx, object=objects["added"], program="xdp_count_rec",
                                  object_store=attached["object_store"], pcap=replay_sample, **extra))
    assert replayed.get("failed") and replayed["msg"] == message % dict(
        object=objects["added"], maps=attached["maps"]["stats"].rpartition("/")[0]), replayed
    assert "Traceback" not in json.dumps(replayed)
    assert host(pair, attached) == before
    assert sh("ls", "-A", attached["pin_dir"].rpartition("/")[0].rpartition("/")[0]).stdout.split() == ["eth0"], \
        "the replay's private pins are gone"
