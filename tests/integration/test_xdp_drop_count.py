"""files/bpf/xdp_drop_count.bpf.c in the kernel, through BPF_PROG_TEST_RUN.

Frames the lab cannot easily send (IPv6, QinQ, truncated, non-IP) go straight
into the loaded program; the counters are read back from its map.
"""

import struct

import pytest

from ansible_collections.ebpf.xdp.plugins.module_utils import _facts
from ansible_collections.ebpf.xdp.plugins.module_utils.bpf import loader as _loader
from ansible_collections.ebpf.xdp.plugins.module_utils.traffic import frames as _frames

XDP_DROP, XDP_PASS = 1, 2
MACS = "02:00:00:00:00:02", "02:00:00:00:00:01"


def ipv6_frame(next_header, vlan=None):
    eth = _frames.mac_bytes(MACS[0]) + _frames.mac_bytes(MACS[1])
    if vlan is not None:
        eth += struct.pack("!HH", 0x8100, vlan)
    eth += struct.pack("!H", 0x86DD)
    ip6 = struct.pack("!IHBB", 6 << 28, 8, next_header, 64) + b"\xfd" + b"\0" * 14 + b"\x01" + b"\xfd" + b"\0" * 14 + b"\x02"
    return eth + ip6 + b"\0" * 8


def qinq(frame):
    """Wrap an untagged frame in an 802.1ad outer and an 802.1Q inner tag."""
    return frame[:12] + struct.pack("!HHHH", 0x88A8, 10, 0x8100, 20) + frame[12:]


def load(drop_obj, constants=None):
    """Loaded, not attached: its maps stay out of bpffs and go with the program."""
    return _loader.load(drop_obj, "xdp_drop_count", "xdp", constants)


def counts(loaded):
    with loaded.open_map("proto_count") as proto_count:
        return _facts.read_counters(proto_count)


@pytest.mark.parametrize("action", [XDP_DROP, XDP_PASS])
def test_classifies_every_kind_of_frame(drop_obj, action):
    with load(drop_obj, {"xdp_action": action}) as loaded:
        classify(loaded, action)


def classify(loaded, action):
    udp4 = _frames.build_frame("udp", MACS[1], MACS[0], "10.0.0.1", "10.0.0.2")
    frames = {
        "ipv4 udp": (udp4, 17),
        "ipv4 tcp, 802.1Q": (_frames.build_frame("tcp", MACS[1], MACS[0], "10.0.0.1", "10.0.0.2", vlan=7), 6),
        "ipv4 icmp, QinQ": (qinq(_frames.build_frame("icmp", MACS[1], MACS[0], "10.0.0.1", "10.0.0.2")), 1),
        "ipv6 udp": (ipv6_frame(17), 17),
        "ipv6 icmpv6, 802.1Q": (ipv6_frame(58, vlan=3), 58),
        "arp": (udp4[:12] + struct.pack("!H", 0x0806) + b"\0" * 46, 0),
        "truncated ipv4": (udp4[:20], 0),
    }
    expected = {}
    for name, (frame, proto) in frames.items():
        retval, _duration = loaded.program.test_run(frame, repeat=3)
        assert retval == action, name
        expected[proto] = expected.get(proto, 0) + 3
    assert counts(loaded) == expected


def test_ipv4_header_shorter_than_20_bytes_is_not_trusted(drop_obj):
    frame = bytearray(_frames.build_frame("udp", MACS[1], MACS[0], "10.0.0.1", "10.0.0.2"))
    frame[14] = 0x44  # IHL 4: 16 bytes, below the fixed header
    with load(drop_obj) as loaded:
        loaded.program.test_run(bytes(frame))
        assert counts(loaded) == {0: 1}
