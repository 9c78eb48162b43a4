"""Map entries: inventory notation to bytes and back, from BTF type tables and from sizes; the plans."""

import struct

import pytest

from ansible_collections.ebpf.xdp.plugins.module_utils.host import netns as _netns
from ansible_collections.ebpf.xdp.plugins.module_utils.maps import btf as _btf, map_entry as _map_entry
from ansible_collections.ebpf.xdp.plugins.module_utils.maps.map_entry import MapEntryError

# The type table _bpf.map_btf reads for xdp_multicast's mcast_addrs (struct mcast_key -> __u32), trimmed.
U32 = {6: {"kind": "typedef", "name": "__u32", "type": 7},
       7: {"kind": "int", "name": "unsigned int", "size": 4, "signed": False, "bool": False, "bits": 32}}
MCAST_TYPES = {**U32, **{
    44: {"kind": "typedef", "name": "__u8", "type": 45},
    45: {"kind": "int", "name": "unsigned char", "size": 1, "signed": False, "bool": False, "bits": 8},
    50: {"kind": "struct", "name": "mcast_key", "size": 20, "members": [
        {"name": "kind", "type": 6, "bit_offset": 0, "bitfield_size": 0},
        {"name": "addr", "type": 51, "bit_offset": 32, "bitfield_size": 0}]},
    51: {"kind": "array", "name": "", "type": 44, "nelems": 16},
}}


class Resolver:
    place = "network namespace 'lab'"
    interfaces = {"eth0": 2, "eth1": 3}

    def ifindex(self, name):
        if name not in self.interfaces:
            raise _netns.NotFoundError("interface %r does not exist in %s" % (name, self.place))
        return self.interfaces[name]

    def has_device(self, index):
        return index in self.interfaces.values()

    @staticmethod
    def program_id(ref):
        return {"/sys/fs/bpf/egress": 42, 42: 42}[ref]


ENC = _btf.Encoder(Resolver())


def encode(layout, value):
    return layout.encode(value, ENC, "entries[0].key")


def u32(number):
    return struct.pack("<I", number)


# ---------------------------------------------------------------- integers


@pytest.mark.parametrize("value", [7, "7", " 0x7 ", "+7"])
def test_an_integer_in_any_of_its_spellings(value):
    assert encode(_btf.Int(4), value) == u32(7)


def test_integers_are_range_checked_by_type():
    assert encode(_btf.Int(1), 255) == b"\xff"
    assert encode(_btf.Int(2, signed=True), -2) == b"\xfe\xff"
    with pytest.raises(MapEntryError, match=r"entries\[0\].key: 256 is out of range for u8 \(0..255\)"):
        encode(_btf.Int(1), 256)
    with pytest.raises(MapEntryError, match=r"-1 is out of range for __u32 \(0..4294967295\)"):
        encode(_btf.Int(4, name="__u32"), -1)
    with pytest.raises(MapEntryError, match=r"128 is out of range for s8 \(-128..127\)"):
        encode(_btf.Int(1, signed=True), 128)


def test_a_string_with_leading_zeros_is_decimal_and_words_are_no_integers():
    assert encode(_btf.Int(4), "010") == u32(10)
    with pytest.raises(MapEntryError, match=r"'eth1' is not a value for u32; give an integer, \{ifindex: NAME\}"):
        encode(_btf.Int(4), "eth1")
    with pytest.raises(MapEntryError, match="1.5 is not a value"):
        encode(_btf.Int(4), 1.5)


def test_an_interface_resolves_to_its_index_and_an_unknown_one_says_where():
    assert encode(_btf.Int(4), {"ifindex": "eth1"}) == u32(3)
    assert encode(_btf.Int(4), {"ifindex": 9}) == u32(9)
    with pytest.raises(MapEntryError, match="interface 'nope' does not exist in network namespace 'lab'"):
        encode(_btf.Int(4), {"ifindex": "nope"})


def test_an_address_fills_an_integer_field_of_its_size_only():
    assert encode(_btf.Int(4), "10.0.0.1") == bytes([10, 0, 0, 1])
    with pytest.raises(MapEntryError, match="the IPv6 address ff0e::1 is 16 bytes; u32 is 4"):
        encode(_btf.Int(4), "ff0e::1")
    with pytest.raises(MapEntryError, match="the IPv4 address 10.0.0.1 is 4 bytes; u64 is 8"):
        encode(_btf.Int(8), "10.0.0.1")


def test_without_btf_an_integer_takes_either_sign_and_bytes_must_match_the_size():
    key = _btf.Sized(4, "key")
    assert encode(key, -1) == b"\xff" * 4 and encode(key, 0xffffffff) == b"\xff" * 4
    assert encode(key, {"hex": "0a 00 00 01"}) == bytes([10, 0, 0, 1])
    assert encode(key, {"hex": "0x0a000001"}) == bytes([10, 0, 0, 1])
    with pytest.raises(MapEntryError, match=r"\{hex: 0a00\} is 2 bytes; a 4-byte key is 4"):
        encode(key, {"hex": "0a00"})
    with pytest.raises(MapEntryError, match="4294967296 is out of range for a 4-byte key"):
        encode(key, 1 << 32)
    with pytest.raises(MapEntryError, match="not an even number of hex digits"):
        encode(key, {"hex": "abc"})
    # YAML's {hex: 0x0a} is the int 10, {hex: 10} too: not the digits written.
    for number in (10, 0x0a000001, 1.5):
        with pytest.raises(MapEntryError, match=r"is a number, not hex digits; quote the hex digits: \{hex: '0a'\}"):
            encode(key, {"hex": number})
    assert key.decode(u32(5)) == 5
    assert _btf.Sized(6, "value").decode(b"\x02\0\0\0\0\x01") == {"hex": "020000000001"}


# ---------------------------------------------------------------- BTF


def mcast_key():
    return _btf.layout_from_btf(MCAST_TYPES, 50)


def test_a_struct_key_from_btf_field_by_field():
    layout = mcast_key()
    assert layout.name == "struct mcast_key" and layout.size == 20
    v4 = encode(layout, {"kind": 4, "addr": "239.1.1.1"})
    assert v4 == u32(4) + bytes([239, 1, 1, 1]) + bytes(12)
    v6 = encode(layout, {"kind": 6, "addr": "ff0e::1:3"})
    assert v6 == u32(6) + bytes.fromhex("ff0e0000000000000000000000010003")
    assert layout.decode(v4) == {"kind": 4, "addr": {"hex": "ef010101" + "00" * 12}}
    # Fields left out are zero.
    assert encode(layout, {"kind": 1}) == u32(1) + bytes(16)
    # What decode gives is taken back.
    assert encode(layout, layout.decode(v6)) == v6


def test_struct_errors_name_the_field_and_the_known_ones():
    layout = mcast_key()
    with pytest.raises(MapEntryError, match=r"entries\[0\].key: struct mcast_key has no field address; "
                                            r"its fields are kind, addr"):
        encode(layout, {"kind": 4, "address": "239.1.1.1"})
    with pytest.raises(MapEntryError, match=r"entries\[0\].key.kind: 4294967296 is out of range for __u32"):
        encode(layout, {"kind": 1 << 32})
    with pytest.raises(MapEntryError, match=r"a dict of its fields \(kind, addr\)"):
        encode(layout, 4)
    with pytest.raises(MapEntryError, match=r"key.addr: \{hex: 0+\} is 17 bytes; __u8\[16\] has room for 16"):
        encode(layout, {"addr": {"hex": "00" * 17}})


def test_an_address_where_the_field_is_too_small():
    types = dict(MCAST_TYPES)
    types[51] = dict(types[51], nelems=4)
    types[50] = dict(types[50], size=8)
    with pytest.raises(MapEntryError, match=r"key.addr: the IPv6 address ff0e::1 is 16 bytes; __u8\[4\] has room "
                                            r"for 4"):
        encode(_btf.layout_from_btf(types, 50), {"kind": 6, "addr": "ff0e::1"})


def test_booleans_and_a_byte_array_that_takes_a_mac_and_a_list_of_bytes():
    flag = _btf.Int(1, name="_Bool", boolean=True)
    assert encode(flag, True) == b"\x01" and flag.decode(b"\x01") is True
    layout = _btf.Bytes(6, "__u8[6]")
    assert encode(layout, "02-00-00-00-00-01") == bytes.fromhex("020000000001")
    assert encode(layout, "02:00:00:00:00:0A") == bytes.fromhex("02000000000a")
    assert encode(layout, [1, "2", 0x3]) == bytes([1, 2, 3, 0, 0, 0])
    with pytest.raises(MapEntryError, match="not a list of byte values"):
        encode(layout, [256])
    with pytest.raises(MapEntryError, match="give an IP or MAC address"):
        encode(layout, 5)


def test_arrays_enums_and_bitfields():
    types = {**U32, **{
        8: {"kind": "enum", "name": "verdict", "size": 4, "signed": False, "values": [("PASS", 2), ("DROP", 1)]},
        9: {"kind": "array", "name": "", "type": 6, "nelems": 3},
        10: {"kind": "struct", "name": "rule", "size": 20, "members": [
            {"name": "action", "type": 8, "bit_offset": 0, "bitfield_size": 0},
            {"name": "ports", "type": 9, "bit_offset": 32, "bitfield_size": 0},
            {"name": "low", "type": 6, "bit_offset": 128, "bitfield_size": 4},
            {"name": "high", "type": 6, "bit_offset": 132, "bitfield_size": 28}]},
    }}
    layout = _btf.layout_from_btf(types, 10)
    raw = encode(layout, {"action": "DROP", "ports": [80, 443], "low": 15, "high": 1})
    assert raw == u32(1) + u32(80) + u32(443) + u32(0) + u32(0x1f)
    assert layout.decode(raw) == {"action": "DROP", "ports": [80, 443, 0], "low": 15, "high": 1}
    with pytest.raises(MapEntryError, match=r"key.low: 16 is out of range for a 4-bit field \(0..15\)"):
        encode(layout, {"low": 16})
    with pytest.raises(MapEntryError, match=r"key.ports: 4 values for __u32\[3\]"):
        encode(layout, {"ports": [1, 2, 3, 4]})


def test_anonymous_unions_flatten_and_overlapping_fields_must_agree():
    types = {**U32, **{
        20: {"kind": "union", "name": "", "size": 4, "members": [
            {"name": "fd", "type": 6, "bit_offset": 0, "bitfield_size": 0},
            {"name": "id", "type": 6, "bit_offset": 0, "bitfield_size": 0}]},
        21: {"kind": "struct", "name": "val", "size": 8, "members": [
            {"name": "ifindex", "type": 6, "bit_offset": 0, "bitfield_size": 0},
            {"name": "", "type": 20, "bit_offset": 32, "bitfield_size": 0}]},
    }}
    layout = _btf.layout_from_btf(types, 21)
    assert [f.name for f in layout.fields] == ["ifindex", "fd", "id"]
    # A field named ifindex takes an interface name alone.
    assert encode(layout, {"ifindex": "eth0", "id": 7}) == u32(2) + u32(7)
    # Every member of a union is shown, as bpftool does; given together, they must say the same.
    assert layout.decode(u32(2) + u32(7)) == {"ifindex": 2, "fd": 7, "id": 7}
    assert encode(layout, {"ifindex": 2, "fd": 7, "id": 7}) == u32(2) + u32(7)
    with pytest.raises(MapEntryError, match="fields fd and id of struct val share bytes and give them different "
                                            "values; give one of them"):
        encode(layout, {"fd": 1, "id": 2})


def test_typedefs_name_the_type_and_a_size_mismatch_falls_back_on_sizes():
    info = {"type": "hash", "key_size": 20, "value_size": 8}
    btf = {"key": 50, "value": 6, "types": MCAST_TYPES}
    key, value = _btf.layouts(info, btf)
    assert key.name == "struct mcast_key"
    # The value's BTF says 4 bytes, the map says 8: the sizes win.
    assert isinstance(value, _btf.Sized) and value.size == 8
    key, value = _btf.layouts(dict(info, key_size=4, value_size=4), None)
    assert (key.name, value.name) == ("a 4-byte key", "a 4-byte value")


def test_a_forward_declared_type_has_no_layout():
    types = {1: {"kind": "fwd", "name": "bpf_devmap_val", "type": 0}}
    assert _btf.layout_from_btf(types, 1) is None


# ---------------------------------------------------------------- devmaps


def test_a_devmap_value_is_an_ifindex_and_a_program():
    info = {"type": "devmap", "key_size": 4, "value_size": 8}
    _key, value = _btf.layouts(info, None)
    assert encode(value, {"ifindex": "eth1"}) == u32(3) + u32(0)
    assert encode(value, {"ifindex": {"ifindex": "eth1"}}) == u32(3) + u32(0)
    assert encode(value, 3) == u32(3) + u32(0)
    assert encode(value, {"ifindex": "eth1", "prog": "/sys/fs/bpf/egress"}) == u32(3) + u32(42)
    assert value.decode(u32(3) + u32(42)) == {"ifindex": 3, "prog": 42}
    assert value.prog_offsets() == [4]
    with pytest.raises(MapEntryError, match=r"entries\[0\].key.ifindex: no interface has index 9 in network "
                                            r"namespace 'lab'"):
        encode(value, 9)
    _key, four = _btf.layouts(dict(info, value_size=4), None)
    assert encode(four, {"ifindex": "eth0"}) == u32(2) and four.decode(u32(2)) == {"ifindex": 2}
    with pytest.raises(MapEntryError, match="struct bpf_devmap_val has no field prog"):
        encode(four, {"ifindex": 2, "prog": 42})


# ---------------------------------------------------------------- plans


ONE, TWO, ZERO = u32(1), u32(2), u32(0)


def test_present_writes_what_differs_only():
    current = {u32(1): (ONE,), u32(2): (ONE,)}
    assert _map_entry.plan(current, {u32(1): ONE, u32(2): TWO, u32(3): TWO}, False) == (
        {u32(2): TWO, u32(3): TWO}, [])
    assert _map_entry.plan(current, {u32(1): ONE}, False) == ({}, [])


def test_absent_deletes_what_is_there_and_exclusive_deletes_the_rest():
    current = {u32(1): (ONE,), u32(2): (ONE,)}
    assert _map_entry.plan(current, {u32(1): None, u32(5): None}, False) == ({}, [u32(1)])
    assert _map_entry.plan(current, {u32(1): TWO}, True) == ({u32(1): TWO}, [u32(2)])
    assert _map_entry.plan(current, {}, True) == ({}, [u32(1), u32(2)])


def test_in_an_array_absent_is_zero():
    current = {u32(0): (ONE,), u32(1): (ZERO,), u32(2): (TWO,)}
    assert _map_entry.plan(current, {u32(0): None, u32(1): None}, False, ZERO) == ({u32(0): ZERO}, [])
    assert _map_entry.plan(current, {u32(1): ONE}, True, ZERO) == ({u32(1): ONE, u32(0): ZERO, u32(2): ZERO}, [])


def test_per_cpu_values_are_the_same_only_on_every_cpu():
    current = {u32(1): (ONE, ONE), u32(2): (ONE, TWO)}
    assert _map_entry.plan(current, {u32(1): ONE, u32(2): ONE}, False) == ({u32(2): ONE}, [])
    assert _map_entry.after(current, {u32(2): ONE}, [], 2) == {u32(1): (ONE, ONE), u32(2): (ONE, ONE)}


def test_decoded_entries_are_ordered_by_key_and_per_cpu_values_shown_when_they_differ():
    layout = _btf.Int(4)
    contents = {u32(256): (ONE, ONE), u32(3): (ONE, TWO), u32(1): (ZERO, ZERO)}
    assert _map_entry.decode_entries(contents, layout, layout, True) == [
        {"key": 1, "value": 0}, {"key": 3, "values": [1, 2]}, {"key": 256, "value": 1}]
    assert _map_entry.decode_entries(contents, layout, layout, True, ZERO) == [
        {"key": 3, "values": [1, 2]}, {"key": 256, "value": 1}]
