"""The comparison of a pinned map with a new object's definition (maps/migration): layouts built in Python, the
differences said field by field, the refusal's words, and the pins a reset sets aside."""

import os

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
        "through the new layout: map stats (/pins/maps/stats): max_entries 4 -> 8. Nothing was changed; set "
        "map_migration: reset to start it empty, or keep the layout")
    assert "shared map set" in _migration.refusal("/obj/v2.o", "/pins/maps", reviews, shared=True)
    assert _migration.refusal("/obj/v2.o", "/pins/maps", reviews[1:]) is None


def test_a_reset_sets_the_pin_aside_and_puts_it_back_or_drops_it(tmp_path):
    pin = tmp_path / "stats"
    pin.write_text("old map")
    reset = _migration.Reset([_migration.Review("stats", str(pin), _migration.RESET_DONE),
                              _migration.Review("kept", str(tmp_path / "kept"), _migration.KEPT)])
    reset.set_aside()
    assert not pin.exists() and (tmp_path / "stats__before_reset").read_text() == "old map"
    pin.write_text("new map")  # what the load pins
    reset.undo()
    assert pin.read_text() == "old map" and os.listdir(tmp_path) == ["stats"]

    reset = _migration.Reset([_migration.Review("stats", str(pin), _migration.RESET_DONE)])
    reset.set_aside()
    pin.write_text("new map")
    reset.commit()
    assert pin.read_text() == "new map" and os.listdir(tmp_path) == ["stats"]
