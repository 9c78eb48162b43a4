"""host/nlmsg: netlink attributes packed and parsed with the standard library (the links' and qdiscs' dumps
and the netdev family go through them); a link's attributes as the kernel sends them: test_netlink.py."""

import struct

from ansible_collections.ebpf.xdp.plugins.module_utils.host import nlmsg as _nlmsg


def test_an_attribute_is_its_length_type_and_payload_padded_to_four_bytes():
    assert _nlmsg.attr(3, b"eth0\0") == struct.pack("=HH", 9, 3) + b"eth0\0" + b"\0\0\0"
    assert _nlmsg.attr(4, struct.pack("=I", 1500)) == struct.pack("=HHI", 8, 4, 1500)  # already aligned
    assert _nlmsg.attr(1, b"") == struct.pack("=HH", 4, 1)


def test_attributes_read_back_what_attr_packed():
    data = _nlmsg.attr(3, b"eth0\0") + _nlmsg.attr(4, struct.pack("=I", 1500)) + _nlmsg.attr(1, b"\x01")
    assert _nlmsg.attributes(data) == {3: b"eth0\0", 4: struct.pack("=I", 1500), 1: b"\x01"}


def test_only_the_wanted_types_are_kept():
    data = _nlmsg.attr(3, b"eth0\0") + _nlmsg.attr(13, struct.pack("=I", 1000))
    assert _nlmsg.attributes(data, wanted=frozenset({3})) == {3: b"eth0\0"}


def test_the_nested_and_byte_order_flags_are_not_part_of_the_type():
    nested = _nlmsg.attr(43 | 0x8000, _nlmsg.attr(1, b"\x02"))  # IFLA_XDP with NLA_F_NESTED, as sent
    assert list(_nlmsg.attributes(nested)) == [43]
    assert _nlmsg.attributes(_nlmsg.attributes(nested)[43]) == {1: b"\x02"}
    assert list(_nlmsg.attributes(_nlmsg.attr(5 | 0x4000, b"\0\0\0\1"))) == [5]  # NLA_F_NET_BYTEORDER


def test_a_window_of_the_data_is_read_and_nothing_past_it():
    header = b"\xff" * 16  # a family header before the attributes, as in an answer
    data = header + _nlmsg.attr(3, b"a\0") + _nlmsg.attr(4, b"b\0")
    first_only = 16 + len(_nlmsg.attr(3, b"a\0"))
    assert _nlmsg.attributes(data, 16, first_only) == {3: b"a\0"}
    assert _nlmsg.attributes(data, 16) == {3: b"a\0", 4: b"b\0"}


def test_a_cut_or_malformed_attribute_ends_the_parse_without_an_error():
    data = _nlmsg.attr(3, b"eth0\0")
    assert _nlmsg.attributes(data + b"\x08\x00") == {3: b"eth0\0"}  # a header cut short
    assert _nlmsg.attributes(data + struct.pack("=HH", 2, 9) + _nlmsg.attr(4, b"x")) == {3: b"eth0\0"}  # length < 4
    assert _nlmsg.attributes(b"") == {}
