"""The comparison of a pinned map with a new object's definition (maps/migration): layouts built in Python, the
differences said field by field, the refusal's words, and the pins a reset sets aside."""

import os

import pytest

from ansible_collections.ebpf.xdp.plugins.module_utils.host.journal import Journal
from ansible_collections.ebpf.xdp.plugins.module_utils.maps import btf as _btf, migration as _migration

U64 = _btf.Int(8, name="__u64")
U32 = _btf.Int(4, name="__u32")


def rec(*names, size=None, types=None):
    """struct rec with __u64 fields in this order (or the given layouts)."""
    layouts = types or [U64] * len(names)
    fields, offset = [], 0
    for name, layout in zip(names, layouts):
        fields.append(_btf.Field(name, layout, offset, offset * 8))
        offset += layout.size
    return _btf.Struct(size or offset, "struct rec", fields)


def stats(value, key=U32, max_entries=4, kind="array", flags=0):
    return _migration.MapShape(kind, key.size, value.size, max_entries, flags, _migration.shape(key),
                               _migration.shape(value))


def test_the_same_layout_has_no_difference():
    assert _migration.compare(stats(rec("packets", "bytes")), stats(rec("packets", "bytes"))) == []


def test_swapped_fields_of_the_same_size_are_two_differences_by_name():
    # libbpf reuses this map (same sizes): the comparison is what keeps its bytes from being read swapped.
    assert _migration.compare(stats(rec("packets", "bytes")), stats(rec("bytes", "packets"))) == [
        "value field packets: int, 8 bytes at 0 -> int, 8 bytes at 8",
        "value field bytes: int, 8 bytes at 8 -> int, 8 bytes at 0",
    ]


def test_an_added_field_and_more_entries():
    assert _migration.compare(stats(rec("packets", "bytes")), stats(rec("packets", "bytes", "drops"))) == [
        "value field drops added (int, 8 bytes at 16)"]
    assert _migration.compare(stats(rec("packets", "bytes")), stats(rec("packets", "bytes"), max_entries=8)) == [
        "max_entries 4 -> 8"]


def test_a_removed_key_field_a_narrowed_field_and_signedness():
    key_before = rec("ifindex", "vlan", types=[U32, U32])
    key_after = rec("ifindex", types=[U32], size=8)
    assert _migration.compare(stats(rec("packets"), key=key_before), stats(rec("packets"), key=key_after)) == [
        "key field vlan removed (was int, 4 bytes at 4)"]
    signed = rec("packets", "bytes", types=[_btf.Int(8, signed=True), _btf.Int(4)], size=16)
    assert _migration.compare(stats(rec("packets", "bytes")), stats(signed)) == [
        "value field packets: int, 8 bytes at 0 -> signed int, 8 bytes at 0",
        "value field bytes: int, 8 bytes at 8 -> int, 4 bytes at 8",
    ]


def test_nested_structs_and_bitfields_are_leaves_by_path():
    inner = _btf.Struct(8, "struct pair", [_btf.Field("a", U32, 0), _btf.Field("b", U32, 4)])
    bits = _btf.Field("flag", U32, 8, 64, 1)
    value = _btf.Struct(12, "struct v", [_btf.Field("pair", inner, 0), bits])
    assert [(f.name, f.offset, f.bits) for f in _migration.shape(value)] == [
        ("pair.a", 0, 0), ("pair.b", 4, 0), ("flag", 64, 1)]


def test_a_changed_map_type_is_the_only_difference_said():
    assert _migration.compare(stats(rec("packets")), stats(rec("packets", "bytes"), kind="hash")) == [
        "map type array -> hash"]


def test_without_btf_only_sizes_and_the_rest_count():
    old = _migration.MapShape("hash", 4, 16, 4, 0)
    assert _migration.compare(old, _migration.MapShape("hash", 4, 16, 4, 0)) == []
    assert _migration.compare(old, _migration.MapShape("hash", 4, 24, 4, 1)) == [
        "value size 16 -> 24 bytes", "flags 0x0 -> 0x1"]
    # An integer value with BTF on one side only: compared by size (the whole value is one leaf).
    assert _migration.compare(old, stats(rec("a", "b"), key=U32, kind="hash")) == []


def test_the_refusal_names_each_map_each_difference_and_the_way_out():
    reviews = [_migration.Review("stats", "/pins/maps/stats", _migration.REFUSED, ["max_entries 4 -> 8"]),
               _migration.Review("other", "/pins/maps/other", _migration.KEPT)]
    message = _migration.refusal("/obj/v2.o", "/pins/maps", reviews)
    assert message == (
        "/obj/v2.o declares its maps unlike the maps pinned in /pins/maps, and the program would read their bytes "
        "through the new layout: map stats (/pins/maps/stats): max_entries 4 -> 8. Nothing was changed; "
        "map_migration: fields carries the entries over by field name, reset starts the map empty")
    assert _migration.refusal("/obj/v2.o", "/pins/maps", reviews[1:]) is None


def test_a_reset_sets_the_pin_aside_and_its_journal_puts_it_back_or_the_commit_drops_it(tmp_path):
    pin = tmp_path / "stats"
    pin.write_text("old map")
    reset = _migration.Reset([_migration.Review("stats", str(pin), _migration.RESET_DONE),
                              _migration.Review("kept", str(tmp_path / "kept"), _migration.KEPT)])
    journal = Journal()
    reset.set_aside(journal)
    assert not pin.exists() and (tmp_path / "stats__before_reset").read_text() == "old map"
    pin.write_text("new map")  # what the load pins
    assert list(journal.undo()) == [("map stats's pin set aside", None)]
    assert pin.read_text() == "old map" and os.listdir(tmp_path) == ["stats"]

    reset = _migration.Reset([_migration.Review("stats", str(pin), _migration.RESET_DONE)])
    journal.did(lambda: None, "an earlier change")
    reset.set_aside(journal)
    pin.write_text("new map")
    reset.commit()
    assert pin.read_text() == "new map" and os.listdir(tmp_path) == ["stats"]
    # The commit is the point of no return: the journal no longer puts the old pin back; the earlier change stays.
    assert [what for _undo, what in journal.steps] == ["an earlier change"]


def test_a_set_aside_that_fails_half_way_leaves_the_pins_moved_to_its_journal(tmp_path):
    for name in ("a", "b"):
        (tmp_path / name).write_text("old " + name)
    (tmp_path / "b__before_reset").mkdir()  # what a rename cannot replace: the second set-aside fails
    (tmp_path / "b__before_reset" / "x").write_text("")
    reset = _migration.Reset([_migration.Review(name, str(tmp_path / name), _migration.RESET_DONE)
                              for name in ("a", "b")])
    journal = Journal()
    with pytest.raises(OSError):
        reset.set_aside(journal)
    assert not (tmp_path / "a").exists() and [what for _undo, what in journal.steps] == ["map a's pin set aside"]
    journal.undo()
    assert (tmp_path / "a").read_text() == "old a" and (tmp_path / "b").read_text() == "old b"


def raw(*numbers, width=8):
    return b"".join(n.to_bytes(width, "little", signed=n < 0) for n in numbers)


def test_fields_are_carried_by_name_new_ones_zero_removed_ones_dropped():
    swapped = _migration.Conversion("stats", "value", rec("packets", "bytes"), rec("bytes", "packets"), {})
    assert swapped.convert(raw(100, 10000), "entry 0") == raw(10000, 100)
    added = _migration.Conversion("stats", "value", rec("packets", "bytes"), rec("packets", "bytes", "drops"), {})
    assert added.convert(raw(100, 10000), "entry 0") == raw(100, 10000, 0)
    removed = _migration.Conversion("stats", "value", rec("packets", "bytes"), rec("bytes"), {})
    assert removed.convert(raw(100, 10000), "entry 0") == raw(10000)
    renamed = _migration.Conversion("stats", "value", rec("packets", "bytes"), rec("pkts", "bytes"),
                                    {"packets": "pkts"})
    assert renamed.convert(raw(100, 10000), "entry 0") == raw(100, 10000)
    assert renamed.words == ["value field packets renamed to pkts"]


def test_integers_widen_and_narrow_where_the_value_fits():
    narrow = _migration.Conversion("stats", "value", rec("packets", "bytes"),
                                   rec("packets", "bytes", types=[U32, U64]), {})
    assert narrow.convert(raw(7, 9), "entry 0") == raw(7, width=4) + raw(9)  # rec() packs its fields
    try:
        narrow.convert(raw(1 << 40, 9), "map stats, entry 3")
    except _migration.MigrationError as exc:
        assert str(exc) == ("map stats, entry 3: value.packets: 1099511627776 is out of range for __u32 "
                            "(0..4294967295); map_migration: reset starts the map empty")
    else:
        raise AssertionError("a value that does not fit was narrowed")


def test_counters_gained_after_the_copy_are_added_by_name():
    swapped = _migration.Conversion("stats", "value", rec("packets", "bytes"), rec("bytes", "packets"), {})
    # Copied 100/10000; the old program counted 5 more frames (500 bytes) before the swap: added where the new
    # layout has each field (bytes now first).
    assert swapped.gained(raw(100, 10000), raw(105, 10500)) == [(0, 8, 500), (8, 8, 5)]
    assert swapped.gained(raw(100, 10000), raw(100, 10000)) == []


def test_the_snapshot_advances_by_the_old_layouts_own_counters():
    swapped = _migration.Conversion("stats", "value", rec("packets", "bytes"), rec("bytes", "packets"), {})
    # The copy's snapshot is in the old layout: what it is advanced by sits where the old layout has each field.
    assert swapped.gained_here(raw(100, 10000), raw(105, 10500)) == [(0, 8, 5), (8, 8, 500)]
    assert swapped.gained_here(raw(100, 10000), raw(100, 10000)) == []
    assert swapped.zero_counters(raw(7, 9)) == raw(0, 0)


def test_the_adder_adds_to_several_maps_in_one_program():
    one = _migration.adder(7, 4, [(b"\0\0\0\0", None, [(0, 8, 1)])])
    both = _migration.adder(7, 4, [(b"\0\0\0\0", None, [(0, 8, 1)])], more=((9, 8, [(bytes(8), 2, [(8, 8, 1)])]),))
    # The first map's adds, then the second's (its fd, its 8-byte key, the CPU), then one XDP_PASS and exit.
    assert both.startswith(one[:-16]) and both.endswith(one[-16:]) and len(both) > len(one)
    insns = [both[i:i + 8] for i in range(0, len(both), 8)]
    assert [insn[0] for insn in insns].count(0x95) == 1
    assert int.from_bytes(insns[len(one) // 8 - 2 + 3][4:8], "little") == 9  # the second map's fd


def test_the_adder_looks_each_value_up_and_adds_atomically():
    code = _migration.adder(7, 4, [(b"\x01\0\0\0", None, [(0, 8, 500), (8, 4, -1)]), (b"\0\0\0\0", 3, [(0, 8, 1)])])
    insns = [code[i:i + 8] for i in range(0, len(code), 8)]
    opcodes = [insn[0] for insn in insns]
    # Key (ld_imm64 + stx), map fd (ld_imm64), r2 = fp - 8, lookup, skip the adds when absent, two adds; the
    # second with the CPU in r3 and bpf_map_lookup_percpu_elem; XDP_PASS.
    assert opcodes == [0x18, 0, 0x7b, 0x18, 0, 0xbf, 0x07, 0x85, 0x15, 0x18, 0, 0xdb, 0x18, 0, 0xc3,
                       0x18, 0, 0x7b, 0x18, 0, 0xbf, 0x07, 0xb7, 0x85, 0x15, 0x18, 0, 0xdb, 0xb7, 0x95]
    assert int.from_bytes(insns[8][2:4], "little", signed=True) == 6  # past two adds of 3 instructions
    assert int.from_bytes(insns[13][4:8], "little", signed=True) == -1  # -1's high word: an add of -1 wraps
    assert int.from_bytes(insns[23][4:8], "little") == 195 and int.from_bytes(insns[22][4:8], "little") == 3


def test_what_no_copy_carries_is_refused_by_name():
    key_before = rec("ifindex", "vlan", types=[U32, U32])
    for args, words in [
        (("key", key_before, rec("ifindex", types=[U32], size=8), {}),
         "map stats: key field vlan is not in the new key, and keys that differ only there would become one"),
        (("value", rec("packets"), rec("packets"), {"pakets": "packets"}),
         "map stats: map_rename names value field pakets, which the pinned map's struct rec does not have; its "
         "fields are packets"),
        (("value", rec("packets"), rec("packets"), {"packets": "pkts"}),
         "map stats: map_rename renames a field to pkts, which the new struct rec does not have"),
    ]:
        try:
            _migration.Conversion("stats", *args)
        except _migration.MigrationError as exc:
            assert str(exc).startswith(words), exc
        else:
            raise AssertionError(args)


@pytest.mark.parametrize("kind, holds", [("hash_of_maps", "maps"), ("devmap_hash", "devices and programs"),
                                         ("prog_array", "programs")])
def test_a_map_of_kernel_objects_is_refused_for_a_copy_before_any_read(kind, holds):
    """A multicast set's groups (a hash of devmaps), a devmap, a program array: their values read back as ids where
    a write takes file descriptors, so fields refuses them (naming the way out) before it opens anything."""
    info = {"type": kind, "key_size": 4, "value_size": 4, "max_entries": 4}
    with pytest.raises(_migration.MigrationError) as refused:
        _migration.Copy("mcast_groups", "/nonexistent/pin", (info, 0, None), (dict(info, max_entries=8), 0, None), {})
    assert str(refused.value) == (
        "map mcast_groups: a %s holds %s, which a copy by value cannot carry; map_migration: reset starts it empty "
        "(whoever fills it, devmap_group for a multicast set's groups, writes it again)" % (kind, holds))
