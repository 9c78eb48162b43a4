"""Frame building: parse the bytes back and check every field and checksum."""

import socket
import struct

import pytest

from ansible_collections.ebpf.xdp.plugins.module_utils.traffic import frames as _frames


def ip_header(frame, offset=14):
    return frame[offset:offset + 20]


@pytest.mark.parametrize("protocol,number", [("udp", 17), ("tcp", 6), ("icmp", 1)])
def test_frame_fields_and_checksums(protocol, number):
    frame = _frames.build_frame(protocol, "02:00:00:00:00:01", "02:00:00:00:00:02", "10.0.0.1", "10.0.0.2")
    assert len(frame) == 60
    assert frame[:6] == bytes.fromhex("020000000002") and frame[6:12] == bytes.fromhex("020000000001")
    assert struct.unpack("!H", frame[12:14])[0] == 0x0800
    ip = ip_header(frame)
    assert ip[9] == number
    assert _frames.checksum(ip) == 0, "a valid IPv4 header sums to zero"
    total_length = struct.unpack("!H", ip[2:4])[0]
    l4 = frame[34:14 + total_length]
    if protocol == "icmp":
        assert _frames.checksum(l4) == 0
    else:
        pseudo = ip[12:20] + struct.pack("!BBH", 0, number, len(l4))
        assert _frames.checksum(pseudo + l4) == 0


def test_size_and_vlan():
    frame = _frames.build_frame("udp", "02:00:00:00:00:01", "ff:ff:ff:ff:ff:ff", "10.0.0.1", "10.0.0.2",
                                size=128, vlan=42)
    assert len(frame) == 128
    assert struct.unpack("!HH", frame[12:16]) == (0x8100, 42)
    assert struct.unpack("!H", frame[16:18])[0] == 0x0800
    assert socket.inet_ntoa(frame[18 + 16:18 + 20]) == "10.0.0.2"


def test_bad_input():
    with pytest.raises(ValueError):
        _frames.mac_bytes("02:00:00")
    # One parser for every MAC of the collection: one or two hex digits a byte, nothing else (int() would
    # have taken " a" or "+1").
    for mac in (" a:00:00:00:00:01", "+1:00:00:00:00:01", "0x:00:00:00:00:01", "02-00-00-00-00-01"):
        with pytest.raises(ValueError, match="invalid MAC address"):
            _frames.mac_bytes(mac)
    assert _frames.mac_text(_frames.mac_bytes("2:0:0:A:b:01")) == "02:00:00:0a:0b:01"
    with pytest.raises(ValueError):
        _frames.build_frame("sctp", "02:00:00:00:00:01", "02:00:00:00:00:02", "10.0.0.1", "10.0.0.2")


def test_checksum_known_value():
    # RFC 1071 example words.
    assert _frames.checksum(bytes.fromhex("0001f203f4f5f6f7")) == (~0xDDF2 & 0xFFFF)


def test_send_counts_each_kind():
    # A real local datagram socket pair stands in for the AF_PACKET socket: nothing leaves the process.
    udp, tcp, icmp = b"u" * 60, b"t" * 60, b"i" * 60
    tx, rx = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    with tx, rx:
        sent, seconds = _frames.send_on(tx, {"udp": udp, "tcp": tcp, "icmp": icmp}, 4, rate=1000)
        received = [rx.recv(100) for _frame in range(12)]
        rx.setblocking(False)
        with pytest.raises(BlockingIOError):
            rx.recv(100)
    assert sent == {"udp": 4, "tcp": 4, "icmp": 4}
    assert received == [udp, tcp, icmp] * 4, "one frame of each kind per round"
    assert seconds >= 12 / 1000.0 - 0.001, "paced at 1000 frames/s"


def test_send_counts_pairs_and_empty_bursts():
    tx, rx = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    with tx, rx:
        sent, _seconds = _frames.send_on(tx, [("udp", b"a" * 60), ("tcp", b"b" * 60), ("udp", b"c" * 60)], 2)
        assert sent == {"udp": 4, "tcp": 2}
        assert _frames.send_on(tx, {"udp": b"a" * 60, "tcp": b"b" * 60}, 0)[0] == {"udp": 0, "tcp": 0}
