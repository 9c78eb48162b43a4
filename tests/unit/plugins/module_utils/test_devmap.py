"""Pure parts of _devmap: addresses and their map keys, ids, merging, the task's normal form."""

import struct

import pytest

from ansible_collections.ebpf.xdp.plugins.module_utils.bpf import pins as _pins
from ansible_collections.ebpf.xdp.plugins.module_utils.host import names as _names
from ansible_collections.ebpf.xdp.plugins.module_utils.maps import devmap as _devmap
from ansible_collections.ebpf.xdp.plugins.module_utils.maps.devmap import GroupError


@pytest.mark.parametrize("given, normal", [
    ("239.1.1.1", "239.1.1.1"),
    ("224.0.0.251", "224.0.0.251"),
    ("FF0E:0:0::1:3", "ff0e::1:3"),
    ("ff02::1", "ff02::1"),
    ("01:00:5E:01:01:01", "01:00:5e:01:01:01"),
    ("ff:ff:ff:ff:ff:ff", "ff:ff:ff:ff:ff:ff"),
    ("33:33:0:0:0:1", "33:33:00:00:00:01"),
])
def test_multicast_addresses_are_normalized(given, normal):
    assert _devmap.normalize_address(given) == normal


@pytest.mark.parametrize("given, message", [
    ("10.1.1.1", "not a multicast address"),
    ("fd00::1", "not a multicast address"),
    ("02:00:00:00:00:01", "unicast MAC"),
    ("239.1.1", "not an IP or MAC address"),
    ("zz:00:00:00:00:01", "not an IP or MAC address"),
    ("", "not an IP or MAC address"),
])
def test_unicast_or_malformed_addresses_are_refused(given, message):
    with pytest.raises(GroupError, match=message):
        _devmap.normalize_address(given)


@pytest.mark.parametrize("address, kind, packed", [
    ("239.1.1.1", 4, bytes([239, 1, 1, 1])),
    ("ff0e::1:3", 6, bytes.fromhex("ff0e0000000000000000000000010003")),
    ("01:00:5e:01:01:01", 1, bytes.fromhex("01005e010101")),
])
def test_keys_are_struct_mcast_key_and_read_back(address, kind, packed):
    key = _devmap.address_key(address)
    assert len(key) == 20
    assert struct.unpack_from("<I", key)[0] == kind and key[4:] == packed.ljust(16, b"\0")
    assert _devmap.key_address(key) == address


def test_an_unknown_key_kind_reads_as_none():
    assert _devmap.key_address(struct.pack("<I", 9) + bytes(16)) is None


def test_addresses_sort_ipv4_then_ipv6_then_macs():
    addresses = ["ff:ff:ff:ff:ff:ff", "ff02::1", "239.1.1.2", "224.0.0.1"]
    assert sorted(addresses, key=_devmap.address_order) == ["224.0.0.1", "239.1.1.2", "ff02::1", "ff:ff:ff:ff:ff:ff"]


@pytest.mark.parametrize("group_id", [0, 256, -1])
def test_ids_out_of_range_are_refused(group_id):
    with pytest.raises(GroupError, match="out of range: ids run from 1 to 255"):
        _devmap.check_id(group_id)


def test_the_lowest_free_id():
    assert _devmap.lowest_free_id(set()) == 1
    assert _devmap.lowest_free_id({1, 2, 4}) == 3
    with pytest.raises(GroupError, match="all 255 group ids"):
        _devmap.lowest_free_id(set(range(1, 256)))


def test_merge_adds_or_replaces():
    assert _devmap.merge({1, 2}, [3], exclusive=False) == {1, 2, 3}
    assert _devmap.merge({1, 2}, [2, 3], exclusive=True) == {2, 3}
    assert _devmap.merge({1, 2}, [], exclusive=True) == set()


def test_values_have_the_kernels_layout():
    assert _devmap.member_value(7, 12) == struct.pack("<Ii", 7, 12)
    assert _devmap.config_value(_devmap.EXCLUDE_INGRESS, 3) == b"\x01\x00\x03\x00"


def test_the_task_is_normalized_once():
    desired = _devmap.Desired.from_params(dict(name="video", id=None, shared_maps=None, state="present",
                                               members=["p1", "p2", "p1"], addresses=["FF0E::1", "ff0e::1"],
                                               exclude_ingress=True, exclusive=False, egress_program=None))
    assert desired.members == ["p1", "p2"] and desired.addresses == ["ff0e::1"]
    assert desired.shared_maps == _devmap.DEFAULT_SHARED_MAPS
    with pytest.raises(GroupError):
        _devmap.Desired.from_params(dict(name=None, id=300))


def test_describe_an_absent_group():
    assert _devmap.describe(None, None, None, set(), 0, None) == {"present": False}


@pytest.mark.parametrize("name", ["", "a/b", ".", "..", "a.b", "a\n"])
def test_a_map_set_name_is_one_path_component(name):
    with pytest.raises(_names.BadNameError, match="is not a usable map set name"):
        _pins.shared_maps_dir("/sys/fs/bpf/x", "host", name)
    assert _pins.shared_maps_dir("/sys/fs/bpf/x", "host", "multicast") == "/sys/fs/bpf/x/host/shared_maps/multicast"
