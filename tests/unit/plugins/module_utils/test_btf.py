"""The BTF walk on the types clang writes: layouts of a real object's maps (opened by libbpf, never loaded), the
notation they decode into, and encoding back to the same bytes."""

import struct

import pytest

from ansible_collections.ebpf.xdp.plugins.module_utils.host import netns as _netns
from ansible_collections.ebpf.xdp.plugins.module_utils.bpf import compile as _compile, libbpf as _bpf
from ansible_collections.ebpf.xdp.plugins.module_utils.maps import btf as _btf

SOURCE = r"""
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

enum verdict { V_DROP = 1, V_PASS = 2, V_LOST = -1 };
typedef char label_t[8];

struct flow_key {
    __u32 ifindex;
    __u8 proto;
    __u8 mac[6];
    label_t label;
    union {
        __u32 v4;
        __u8 octets[4];
    };
};

struct stats {
    __u64 packets;
    __u64 bytes;
    enum verdict last;
    __u32 low:4, high:27, flag:1;
    __s16 delta;
    char name[16];
    __u32 hist[4];
    struct { __u16 a; __u16 b; } pair;
    const volatile __u32 *where;
    _Bool on;
};

struct {
    __uint(type, BPF_MAP_TYPE_PERCPU_HASH);
    __type(key, struct flow_key);
    __type(value, struct stats);
    __uint(max_entries, 16);
} flows SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __type(key, enum verdict);
    __type(value, char[12]);
    __uint(max_entries, 4);
} names SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(key_size, 4);
    __uint(value_size, 8);
    __uint(max_entries, 4);
} plain SEC(".maps");

SEC("xdp")
int prog(struct xdp_md *ctx)
{
    return XDP_PASS;
}

char _license[] SEC("license") = "GPL";
"""


class Resolver:
    place = "network namespace 'lab'"

    @staticmethod
    def ifindex(name):
        if name != "eth0":
            raise _netns.NotFoundError("interface %r does not exist in %s" % (name, Resolver.place))
        return 2

    @staticmethod
    def has_device(_index):
        return True

    @staticmethod
    def program_id(ref):
        return ref


ENC = _btf.Encoder(Resolver())


@pytest.fixture(scope="module")
def tables(tmp_path_factory):
    """map name -> the BTF type table _bpf.map_btf reads, from the object clang writes."""
    tmp = tmp_path_factory.mktemp("btf")
    src, obj = tmp / "maps.bpf.c", tmp / "maps.o"
    src.write_text(SOURCE)
    # The collection's own clang command line (what bpf_object and xdp_program compile with).
    import subprocess  # pylint: disable=import-outside-toplevel
    subprocess.run(_compile.compile_argv("clang", str(src), str(obj), []), check=True)
    with _bpf.BpfObject(str(obj)) as bpf_obj:
        return {name: bpf_obj.map_btf(name) for name in ("flows", "names", "plain")}


def layouts_of(tables, name, key_size, value_size, kind="hash"):
    return _btf.layouts({"type": kind, "key_size": key_size, "value_size": value_size}, tables[name])


def test_a_struct_key_with_a_byte_array_text_and_an_anonymous_union(tables):
    key, _value = layouts_of(tables, "flows", 24, 80)
    assert key.name == "struct flow_key"
    assert [(f.name, f.offset, type(f.layout).__name__) for f in key.fields] == [
        ("ifindex", 0, "Int"), ("proto", 4, "Int"), ("mac", 5, "Bytes"), ("label", 11, "Text"),
        ("v4", 20, "Int"), ("octets", 20, "Bytes")]
    raw = key.encode({"ifindex": "eth0", "proto": 17, "mac": "02:00:00:00:00:01", "label": "web",
                      "v4": 0x0100000a}, ENC, "key")
    assert raw == struct.pack("<IB", 2, 17) + bytes.fromhex("020000000001") + b"web".ljust(9, b"\0") \
        + struct.pack("<I", 0x0100000a)
    decoded = key.decode(raw)
    # Both members of the union, as bpftool shows them; given together they agree, so they encode back.
    assert decoded == {"ifindex": 2, "proto": 17, "mac": {"hex": "020000000001"}, "label": "web", "v4": 0x0100000a,
                       "octets": {"hex": "0a000001"}}
    assert key.encode(decoded, ENC, "key") == raw


def test_a_struct_value_of_counters_enum_bitfields_text_arrays_and_a_pointer(tables):
    _key, value = layouts_of(tables, "flows", 24, 80)
    by_name = {f.name: f for f in value.fields}
    assert (by_name["low"].bit_offset, by_name["low"].bits, by_name["high"].bits, by_name["flag"].bits) == (
        160, 4, 27, 1)
    assert isinstance(by_name["last"].layout, _btf.Enum) and by_name["last"].layout.values["V_LOST"] in (-1, 2**32 - 1)
    assert isinstance(by_name["name"].layout, _btf.Text) and isinstance(by_name["hist"].layout, _btf.Array)
    assert isinstance(by_name["pair"].layout, _btf.Struct) and by_name["pair"].layout.name == "struct (anonymous)"
    assert not by_name["where"].layout.counts and by_name["on"].layout.boolean
    given = {"packets": 10, "bytes": 640, "last": "V_LOST", "low": 15, "high": 3, "flag": 1, "delta": -2,
             "name": "eth0 rx", "hist": [1, 2], "pair": {"b": 7}, "where": 0xffff888000000000, "on": True}
    raw = value.encode(given, ENC, "value")
    assert len(raw) == 80
    decoded = value.decode(raw)
    assert decoded == dict(given, hist=[1, 2, 0, 0], pair={"a": 0, "b": 7})
    assert value.encode(decoded, ENC, "value") == raw
    # An enumerator's value no enumerator has reads as a number, and writes back as one.
    other = value.encode(dict(given, last=7), ENC, "value")
    assert value.decode(other)["last"] == 7


def test_per_cpu_copies_sum_their_counters_and_keep_what_every_cpu_agrees_on(tables):
    _key, value = layouts_of(tables, "flows", 24, 80)
    one = value.encode({"packets": 1, "bytes": 60, "last": "V_DROP", "low": 2, "name": "a", "hist": [1]}, ENC, "v")
    two = value.encode({"packets": 2, "bytes": 120, "last": "V_PASS", "low": 3, "name": "a", "hist": [0, 5]},
                       ENC, "v")
    total = value.total([one, two])
    assert (total["packets"], total["bytes"], total["low"], total["hist"]) == (3, 180, 5, [1, 5, 0, 0])
    # An enum does not add up: CPUs that disagree give null; the same text on both is kept.
    assert (total["last"], total["name"], total["on"], total["where"]) == (None, "a", False, 0)


def test_an_enum_key_and_a_char_array_value(tables):
    key, value = layouts_of(tables, "names", 4, 12)
    assert isinstance(key, _btf.Enum) and key.decode(key.encode("V_PASS", ENC, "key")) == "V_PASS"
    assert value.decode(value.encode("backend-1", ENC, "value")) == "backend-1"
    # Text is printable ASCII up to a NUL within the array: anything else reads (and writes) as bytes.
    assert value.decode(b"abc\0x" + bytes(7)) == {"hex": "61626300780000000000000000"[:24]}
    assert value.encode({"hex": "616263007800000000000000"}, ENC, "value") == b"abc\0x" + bytes(7)
    with pytest.raises(_btf.NotationError, match=r"value: 'a-name-too-long' is 15 characters; char\[12\] holds up "
                                                 r"to 11 and the NUL that ends them"):
        value.encode("a-name-too-long", ENC, "value")
    with pytest.raises(_btf.NotationError, match="is not printable ASCII text"):
        value.encode("tab\there", ENC, "value")


def test_a_map_without_btf_reads_by_its_sizes(tables):
    assert tables["plain"] is None
    key, value = layouts_of(tables, "plain", 4, 8, "array")
    assert isinstance(key, _btf.Sized) and isinstance(value, _btf.Sized)
    assert not _btf.from_btf(value) and value.total([struct.pack("<Q", 3), struct.pack("<Q", 4)]) == 7


def test_malformed_btf_gives_no_layout_instead_of_a_traceback():
    u32 = {"kind": "int", "name": "u32", "size": 4, "signed": False, "bool": False, "bits": 32}
    past_the_end = {1: u32, 2: {"kind": "struct", "name": "s", "size": 4, "members": [
        {"name": "a", "type": 1, "bit_offset": 32, "bitfield_size": 0}]}}
    loop = {1: {"kind": "typedef", "name": "a", "type": 2}, 2: {"kind": "typedef", "name": "b", "type": 1}}
    deep = {i: {"kind": "array", "name": "", "type": i + 1, "nelems": 1} for i in range(1, 100)}
    deep[100] = u32
    for types, start in ((past_the_end, 2), (loop, 1), (deep, 1)):
        assert _btf.layout_from_btf(types, start) is None
    btf = {"key": 2, "value": 0, "types": past_the_end}
    key, _value = _btf.layouts({"type": "hash", "key_size": 4, "value_size": 4}, btf)
    assert isinstance(key, _btf.Sized)


def test_padding_that_is_not_zero_reads_as_bytes_so_that_it_writes_back():
    # struct { __u8 a; __u32 b; } has three bytes of padding after a.
    layout = _btf.Struct(8, "struct p", [_btf.Field("a", _btf.Int(1), 0, 0), _btf.Field("b", _btf.Int(4), 4, 32)])
    raw = bytes([1, 0, 7, 0]) + struct.pack("<I", 2)
    assert layout.decode(raw) == {"hex": raw.hex()} and layout.encode(layout.decode(raw), ENC, "key") == raw
    assert layout.decode(bytes([1, 0, 0, 0]) + struct.pack("<I", 2)) == {"a": 1, "b": 2}
    # A struct with a member called hex takes {hex: ...} as that member: its padding is not kept.
    named = _btf.Struct(2, "struct h", [_btf.Field("hex", _btf.Int(1), 0, 0)])
    assert named.decode(b"\x01\x09") == {"hex": 1} and named.encode({"hex": 1}, ENC, "key") == b"\x01\x00"
