"""ebpf.xdp.bpf_map_entry on real pinned maps: the redirect_map sample driven by modules, BTF keys, per-CPU maps,
devmap programs, and bad input that leaves the map as it was."""

import contextlib
import os
import struct

import pytest

from conftest import BPF_DIR, assert_rhythm, compile_bpf, skip_for_hardware
from test_tc_redirect_programs import eventually

from ansible_collections.ebpf.xdp.plugins.module_utils import _facts
from ansible_collections.ebpf.xdp.plugins.module_utils.host import netns as _netns
from ansible_collections.ebpf.xdp.plugins.module_utils.bpf import libbpf as _bpf, loader as _loader, pins as _pins

BPF_MAP_TYPE_HASH, BPF_MAP_TYPE_DEVMAP = 1, 14


@pytest.fixture(scope="module")
def redirect_map_obj(tmp_path_factory):
    return compile_bpf(os.path.join(BPF_DIR, "xdp_redirect_map.bpf.c"),
                       tmp_path_factory.mktemp("rmap") / "xdp_redirect_map.o", [os.path.join(BPF_DIR, "include")])


@pytest.fixture(scope="module")
def mcast_obj(tmp_path_factory):
    return compile_bpf(os.path.join(BPF_DIR, "xdp_multicast.bpf.c"),
                       tmp_path_factory.mktemp("mcast") / "xdp_multicast.o", [os.path.join(BPF_DIR, "include")])


@pytest.fixture
def mcast_maps(mcast_obj, pin_root):
    """xdp_multicast's maps pinned with their BTF, the program itself unloaded again: path by name."""
    maps_dir = os.path.join(pin_root, "maps")
    os.makedirs(maps_dir)
    with _loader.load(mcast_obj, "xdp_multicast", "xdp", maps_dir=maps_dir) as loaded:
        names = loaded.maps
    return {name: os.path.join(maps_dir, name) for name in names}


def u32(number):
    return struct.pack("<I", number)


def contents(path):
    """Raw entries of the pinned map: key -> value (a list per CPU for per-CPU maps)."""
    with _bpf.open_pinned_map(path) as pinned:
        return dict(pinned.items())


def mcast_key(kind, packed):
    return u32(kind) + packed.ljust(16, b"\0")


V4 = {"kind": 4, "addr": "239.1.1.1"}
V6 = {"kind": 6, "addr": "ff0e::1:3"}
V4_RAW = mcast_key(4, bytes([239, 1, 1, 1]))
V6_RAW = mcast_key(6, bytes.fromhex("ff0e0000000000000000000000010003"))


# ---------------------------------------------------------------- xdp_redirect_map, driven by modules only


@pytest.mark.parametrize("mode", ["native", "generic"])
def test_redirect_map_forwards_to_the_port_bpf_map_entry_sets(run_distro, chain, redirect_map_obj, drop_obj, mode):
    """tx/eth0 -> rt/eth0 (xdp_redirect_map) -> rt/eth1 -> rx/eth0 (xdp_drop_count, which a native redirect into
    the veth needs); tx_port's default entry (key 0) is set to eth1 by bpf_map_entry."""
    n = 40
    receiver = run_distro("xdp_program", dict(interface="eth0", netns=chain.rx, object=drop_obj, mode="native"))
    router = run_distro("xdp_program", dict(interface="eth0", netns=chain.rt, object=redirect_map_obj,
                                            program="xdp_redirect_map", mode=mode))
    assert router["mode"] == mode and not receiver.get("failed"), (router, receiver)
    tx_port = router["maps"]["tx_port"]

    def burst():
        sent = run_distro("xdp_trafficgen", dict(interface="eth0", netns=chain.tx, src_ip=chain.pair.tx_ip,
                                                 dst_ip=chain.pair.rx_ip, dst_mac=chain.pair.rx_mac,
                                                 protocols=["udp", "icmp"], count=n, rate=20000, engine="socket"))
        assert sent["sent"] == {"udp": n, "icmp": n}, sent

    def received():
        with _bpf.Map.from_pin(receiver["maps"]["proto_count"]) as counts:
            return _facts.read_counters(counts)

    # No entry yet: to the router's stack (miss_action), nothing reaches rx.
    burst()
    assert received() == {}

    args = dict(path=tx_port, netns=chain.rt, entries=[{"key": 0, "value": {"ifindex": "eth1"}}])
    first, second = assert_rhythm(run_distro, "bpf_map_entry", args)
    with _netns.netns(chain.rt):
        eth1 = _netns.ifindex("eth1")
    assert first["entries"] == second["entries"] == [{"key": 0, "value": {"ifindex": eth1}}]
    assert first["map"] == {"id": first["map"]["id"], "name": "tx_port", "type": "devmap", "key_size": 4,
                            "value_size": 4, "max_entries": 4096, "btf": False}
    assert contents(tx_port) == {u32(0): u32(eth1)}

    burst()
    assert eventually(received, {17: n, 1: n}) == {17: n, 1: n}
    with _bpf.Map.from_pin(router["maps"]["redirect_count"]) as redirects:
        assert _facts.read_counters(redirects) == {0: 2 * n, 1: 2 * n}

    # Taken away again: back to the stack, the program untouched.
    assert_rhythm(run_distro, "bpf_map_entry", dict(args, state="absent", entries=[{"key": 0}]))
    assert contents(tx_port) == {}
    burst()
    assert eventually(received, {17: n, 1: n}) == {17: n, 1: n}
    with _netns.netns(chain.rt):
        assert _bpf.xdp_query(_netns.ifindex("eth0"))["prog_id"] == router["id"]


def test_a_devmap_value_runs_a_pinned_egress_program(run_distro, chain, mcast_obj, drop_obj, pin_root):
    """An 8-byte devmap value: the target and the pin path of an xdp/devmap program; read back as its id."""
    os.makedirs(pin_root)
    path, prog_path = os.path.join(pin_root, "ports"), os.path.join(pin_root, "egress")
    with _bpf.Map.create(BPF_MAP_TYPE_DEVMAP, "ports", 4, 8, 16) as ports:
        ports.pin(path)
    with _loader.load(mcast_obj, "xdp_egress_mac", "xdp", maps_dir=os.path.join(pin_root, "maps")) as egress:
        egress.program.pin(prog_path)
        prog_id = egress.info["id"]
    args = dict(path=path, netns=chain.rt, entries=[{"key": 1, "value": {"ifindex": "eth1", "prog": prog_path}}])
    first, _second = assert_rhythm(run_distro, "bpf_map_entry", args)
    with _netns.netns(chain.rt):
        eth1 = _netns.ifindex("eth1")
    assert first["entries"] == [{"key": 1, "value": {"ifindex": eth1, "prog": prog_id}}]
    assert contents(path) == {u32(1): u32(eth1) + u32(prog_id)}
    # The id it reads back is taken as well: no change.
    again = run_distro("bpf_map_entry", dict(args, entries=first["entries"]))
    assert again["changed"] is False, again
    # A program the kernel refuses there (not loaded for devmaps): the entry written before it is put back.
    plain = os.path.join(pin_root, "plain")
    with _loader.load(drop_obj, "xdp_drop_count", "xdp") as loaded:
        loaded.program.pin(plain)
    refused = [{"key": 2, "value": {"ifindex": "eth1"}}, {"key": 3, "value": {"ifindex": "eth1", "prog": plain}}]
    with unchanged(path):
        res = fails(run_distro, dict(args, entries=refused), "must be an XDP program loaded for devmaps")
    assert "the entries written before it (1) were put back" in res["msg"], res["msg"]
    # Without the program.
    res = run_distro("bpf_map_entry", dict(args, entries=[{"key": 1, "value": {"ifindex": "eth1"}}]))
    assert res["changed"] and contents(path) == {u32(1): u32(eth1) + u32(0)}, res


# ---------------------------------------------------------------- the four steps, on maps with BTF


@pytest.mark.debian12("bpf_map_entry")
def test_present_a_changed_value_absent_and_exclusive_on_a_struct_keyed_hash(run_distro, mcast_maps):
    """mcast_addrs: struct mcast_key {__u32 kind; __u8 addr[16];} -> __u32, encoded from the map's BTF."""
    path = mcast_maps["mcast_addrs"]
    present = dict(path=path, entries=[{"key": V4, "value": 1}, {"key": V6, "value": 2}])
    first, _second = assert_rhythm(run_distro, "bpf_map_entry", present)
    assert first["map"]["btf"] is True
    assert contents(path) == {V4_RAW: u32(1), V6_RAW: u32(2)}
    decoded = [{"key": {"kind": 4, "addr": {"hex": "ef010101" + "00" * 12}}, "value": 1},
               {"key": {"kind": 6, "addr": {"hex": "ff0e0000000000000000000000010003"}}, "value": 2}]
    assert first["entries"] == decoded

    # A changed value: only that key is written.
    changed = dict(path=path, entries=[{"key": V4, "value": "3"}])
    first, _second = assert_rhythm(run_distro, "bpf_map_entry", changed)
    assert first["updated"] == [decoded[0]["key"]] and first["deleted"] == []
    assert contents(path) == {V4_RAW: u32(3), V6_RAW: u32(2)}

    # Absent.
    absent = dict(path=path, state="absent", entries=[{"key": V6}])
    first, _second = assert_rhythm(run_distro, "bpf_map_entry", absent)
    assert first["deleted"] == [decoded[1]["key"]]
    assert contents(path) == {V4_RAW: u32(3)}

    # Exclusive: the listed entries and nothing else.
    run_distro("bpf_map_entry", dict(path=path, entries=[{"key": V6, "value": 2}, {"key": {"kind": 1}, "value": 9}]))
    assert len(contents(path)) == 3
    exclusive = dict(path=path, exclusive=True, entries=[{"key": V6, "value": 2}])
    first, _second = assert_rhythm(run_distro, "bpf_map_entry", exclusive)
    assert len(first["deleted"]) == 2
    assert contents(path) == {V6_RAW: u32(2)}


def test_diff_mode_lists_the_entries_before_and_after(run_distro, mcast_maps):
    path = mcast_maps["mcast_addrs"]
    run_distro("bpf_map_entry", dict(path=path, entries=[{"key": V4, "value": 1}]))
    res = run_distro("bpf_map_entry", dict(path=path, exclusive=True, entries=[{"key": V6, "value": 2}]),
                     check=True, diff=True)
    assert res["changed"] is True
    v4 = {"kind": 4, "addr": {"hex": "ef010101" + "00" * 12}}
    v6 = {"kind": 6, "addr": {"hex": "ff0e0000000000000000000000010003"}}
    assert res["diff"]["before"] == {"entries": [{"key": v4, "value": 1}]}
    assert res["diff"]["after"] == {"entries": [{"key": v6, "value": 2}]}
    assert res["entries"] == [{"key": v6, "value": 2}]
    # Check mode wrote nothing.
    assert contents(path) == {V4_RAW: u32(1)}


def test_check_mode_takes_no_lock(run_distro, mcast_maps):
    """Check mode writes nothing, not even the map's lock file (the real run creates it)."""
    path = mcast_maps["mcast_config"]
    with _bpf.open_pinned_map(path) as pinned:
        lock = os.path.join(_pins.LOCK_DIR, "maps", "map-%d.lock" % pinned.info["id"])
    res = run_distro("bpf_map_entry", dict(path=path, entries=[{"key": 1, "value": {"flags": 1, "members": 2}}]),
                     check=True)
    assert res["changed"] and not os.path.exists(lock), res
    assert run_distro("bpf_map_entry", dict(path=path, entries=[{"key": 1, "value": {"flags": 1, "members": 2}}]))[
        "changed"] and os.path.exists(lock)
    os.unlink(lock)


def test_an_array_of_structs_where_absent_is_zero(run_distro, mcast_maps):
    """mcast_config: __u32 -> struct mcast_group {__u16 flags; __u16 members;}; every key exists."""
    path = mcast_maps["mcast_config"]
    two = dict(path=path, entries=[{"key": 1, "value": {"flags": 1, "members": 3}}, {"key": 2, "value": {"members": 2}}])
    first, _second = assert_rhythm(run_distro, "bpf_map_entry", two)
    assert first["entries"] == [{"key": 1, "value": {"flags": 1, "members": 3}},
                                {"key": 2, "value": {"flags": 0, "members": 2}}]
    exclusive = dict(path=path, exclusive=True, entries=[{"key": 1, "value": {"flags": 1, "members": 3}}])
    first, _second = assert_rhythm(run_distro, "bpf_map_entry", exclusive)
    assert first["updated"] == [2] and first["deleted"] == []
    raw = contents(path)
    assert len(raw) == 256 and raw[u32(1)] == struct.pack("<HH", 1, 3) and raw[u32(2)] == bytes(4)
    absent = dict(path=path, state="absent", entries=[{"key": 1}])
    assert_rhythm(run_distro, "bpf_map_entry", absent)
    assert set(contents(path).values()) == {bytes(4)}


def test_a_per_cpu_value_is_written_to_every_cpu_and_compared_on_every_cpu(request, run_distro, mcast_maps):
    """mcast_frames: a PERCPU_ARRAY of __u64."""
    path = mcast_maps["mcast_frames"]
    ncpus = _bpf.num_possible_cpus()
    args = dict(path=path, entries=[{"key": 7, "value": 5}])
    first, _second = assert_rhythm(run_distro, "bpf_map_entry", args)
    assert first["entries"] == [{"key": 7, "value": 5}]
    assert contents(path)[u32(7)] == [struct.pack("<Q", 5)] * ncpus
    if ncpus < 2:
        skip_for_hardware(request.node, "two_cpus", "a second possible CPU, for a per-CPU difference to show")
    # One CPU differs: the entry is not the same any more.
    with _bpf.open_pinned_map(path) as frames:
        frames.update(u32(7), b"".join(struct.pack("<Q", 5 if cpu else 6) for cpu in range(ncpus)))
    res = run_distro("bpf_map_entry", args, check=True)
    assert res["changed"] is True
    assert run_distro("bpf_map_entry", dict(args, entries=[]))["entries"] == [
        {"key": 7, "values": [6] + [5] * (ncpus - 1)}]
    assert run_distro("bpf_map_entry", args)["changed"] is True
    assert contents(path)[u32(7)] == [struct.pack("<Q", 5)] * ncpus


# ---------------------------------------------------------------- bad input: a clear error, the map unchanged


@contextlib.contextmanager
def unchanged(*paths):
    before = [contents(path) for path in paths]
    yield
    assert [contents(path) for path in paths] == before


def fails(run, args, message):
    res = run("bpf_map_entry", args)
    assert res.get("failed") is True and res.get("changed") is False, res
    assert message in res["msg"], res["msg"]
    return res


def test_bad_input_is_a_clear_error_and_leaves_the_map_as_it_was(run_distro, mcast_maps, chain, redirect_map_obj):
    names = ("mcast_addrs", "mcast_config", "mcast_port_mac", "mcast_frames")
    addrs, config, port_mac, frames = (mcast_maps[name] for name in names)
    run_distro("bpf_map_entry", dict(path=addrs, entries=[{"key": V4, "value": 1}]))
    router = run_distro("xdp_program", dict(interface="eth0", netns=chain.rt, object=redirect_map_obj,
                                            program="xdp_redirect_map", mode="generic"))
    tx_port = router["maps"]["tx_port"]
    # Each task lists a good entry first: nothing of it is written either.
    good = {"key": V6, "value": 2}
    with unchanged(addrs, config, port_mac, frames, tx_port):
        fails(run_distro, dict(path=os.path.join(os.path.dirname(addrs), "nothing")),
              "no pinned map at %s: nothing is pinned there" % os.path.join(os.path.dirname(addrs), "nothing"))
        fails(run_distro, dict(path=os.path.dirname(addrs)), "is a directory, not a pinned map")
        fails(run_distro, dict(path=os.path.join(router["pin_dir"], "prog")), "is a pinned prog, not a map")
        fails(run_distro, dict(path="/etc/hostname"), "not a pinned BPF object")
        fails(run_distro, dict(path=tx_port, netns=chain.rt, entries=[{"key": 0, "value": {"ifindex": "eth1"}},
                                                                      {"key": 1, "value": {"ifindex": "nope"}}]),
              "entries[1].value.ifindex: interface 'nope' does not exist in network namespace '%s'" % chain.rt)
        # tx_port has no BTF: 4-byte keys and values.
        fails(run_distro, dict(path=tx_port, netns=chain.rt, entries=[{"key": {"hex": "0000"}, "value": 1}]),
              "entries[0].key: {hex: 0000} is 2 bytes; a 4-byte key is 4")
        fails(run_distro, dict(path=tx_port, netns=chain.rt, entries=[{"key": "ff0e::1", "value": 1}]),
              "entries[0].key: the IPv6 address ff0e::1 is 16 bytes; a 4-byte key is 4")
        fails(run_distro, dict(path=tx_port, netns=chain.rt, entries=[{"key": 4096, "value": {"ifindex": "eth1"}}]),
              "entries[0].key: 4096 is out of range for tx_port, a devmap of 4096 entries (0..4095)")
        fails(run_distro, dict(path=frames, entries=[{"key": 1, "value": {"hex": "01"}}]),
              "entries[0].value: {hex: 01} is 1 bytes; __u64 is 8")
        fails(run_distro, dict(path=addrs, entries=[good, {"key": {"kind": 4, "address": "239.1.1.2"}, "value": 1}]),
              "entries[1].key: struct mcast_key has no field address; its fields are kind, addr")
        fails(run_distro, dict(path=config, entries=[{"key": 1, "value": {"members": 1}},
                                                     {"key": 2, "value": {"flags": 70000}}]),
              "entries[1].value.flags: 70000 is out of range for __u16 (0..65535)")
        fails(run_distro, dict(path=config, entries=[{"key": 256, "value": {"members": 1}}]),
              "entries[0].key: 256 is out of range for mcast_config, a array of 256 entries (0..255)")
        fails(run_distro, dict(path=port_mac, entries=[{"key": 1, "value": {"addr": "02:00:00:00:00:01"}},
                                                       {"key": 2, "value": {"addr": "ff0e::1"}}]),
              "entries[1].value.addr: the IPv6 address ff0e::1 is 16 bytes; __u8[6] has room for 6")
        fails(run_distro, dict(path=addrs, netns="no-such-netns-mapentry", entries=[good]),
              "network namespace 'no-such-netns-mapentry' does not exist")
        fails(run_distro, dict(path=addrs, entries=[good, {"key": V6, "value": 3}]),
              "entries[1]: the same key as entries[0]")
        fails(run_distro, dict(path=addrs, state="absent", entries=[{"key": V4, "value": 1}]),
              "entries[0]: state=absent takes keys only")
        fails(run_distro, dict(path=addrs, entries=[{"key": V4}]), "entries[0]: state=present needs a value")
        fails(run_distro, dict(path=addrs, state="absent", exclusive=True), "exclusive applies to state=present only")
        fails(run_distro, dict(path=mcast_maps["mcast_groups"], entries=[{"key": 1, "value": 1}]),
              "is a hash_of_maps map; bpf_map_entry manages hash, array")


def test_a_hash_map_that_would_overflow_is_refused_before_anything_is_written(run_distro, pin_root):
    os.makedirs(pin_root)
    path = os.path.join(pin_root, "small")
    with _bpf.Map.create(BPF_MAP_TYPE_HASH, "small", 4, 4, 2) as small:
        small.update(u32(1), u32(1))
        small.pin(path)
    with unchanged(path):
        fails(run_distro, dict(path=path, entries=[{"key": 2, "value": 2}, {"key": 3, "value": 3}]),
              "small holds at most 2 entries; this task would leave 3 in it")
    # Exclusive makes room first.
    entries = [{"key": 2, "value": 2}, {"key": 3, "value": 3}]
    res = run_distro("bpf_map_entry", dict(path=path, exclusive=True, entries=entries))
    assert res["changed"] and contents(path) == {u32(2): u32(2), u32(3): u32(3)}, res


def test_without_privileges_it_says_so(run_distro, mcast_maps):
    res = run_distro("bpf_map_entry", dict(path=mcast_maps["mcast_addrs"]), no_caps=True)
    assert res.get("failed") and "needs CAP_BPF" in res["msg"], res
