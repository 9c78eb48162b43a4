# -*- coding: utf-8 -*-
# Copyright (c) ebpf.xdp contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Building test frames (Ethernet + IPv4/IPv6 + UDP/TCP/ICMP) and sending them raw.

Private to the ebpf.xdp collection: the interface may change without notice.
"""

from __future__ import annotations

import errno
import ipaddress
import re
import socket
import struct
import time
from collections.abc import Iterable, Mapping

ETH_P_IP = 0x0800
ETH_P_IPV6 = 0x86DD
ETH_P_8021Q = 0x8100
PROTOCOLS = {"icmp": 1, "tcp": 6, "udp": 17}
# Over IPv6, "icmp" is ICMPv6 (next header 58).
PROTOCOLS_V6 = {"icmp": 58, "tcp": 6, "udp": 17}
MIN_FRAME = 60  # without FCS
ETH_HEADER = 14
VLAN_TAG = 4
IP_HEADER = {4: 20, 6: 40}
L4_HEADER = {"udp": 8, "tcp": 20, "icmp": 8}
# Where each L4 header keeps its checksum.
CHECKSUM_OFFSET = {"udp": 6, "tcp": 16, "icmp": 2}
_MAC_BYTE = re.compile(r"[0-9A-Fa-f]{1,2}")


def mac_bytes(mac: str) -> bytes:
    """02:00:00:00:00:01 (one or two hex digits a byte, colons) as 6 bytes: the collection's one MAC parser.
    ValueError naming the text otherwise."""
    parts = str(mac).split(":")
    if len(parts) != 6 or not all(_MAC_BYTE.fullmatch(p) for p in parts):
        raise ValueError("invalid MAC address %r" % mac)
    return bytes(int(p, 16) for p in parts)


def mac_text(raw: bytes) -> str:
    """6 bytes as a MAC in canonical form (lower case, two digits a byte)."""
    return ":".join("%02x" % b for b in raw)


def ip_version(address: str) -> int:
    """4 or 6; ValueError naming the address when it is neither."""
    try:
        return ipaddress.ip_address(address).version
    except ValueError:
        raise ValueError("invalid IP address %r" % address)


def headers_size(protocol: str, version: int = 4, vlan: int | None = None) -> int:
    """Bytes of the Ethernet, VLAN, IP and L4 headers of a frame: the least it can hold."""
    return ETH_HEADER + (VLAN_TAG if vlan is not None else 0) + IP_HEADER[version] + L4_HEADER[protocol]


def min_size(protocol: str, version: int = 4, vlan: int | None = None) -> int:
    """The smallest `size` build_frame accepts: the headers, padded to Ethernet's 60 bytes."""
    return max(MIN_FRAME, headers_size(protocol, version, vlan))


def l4_offset(version: int = 4, vlan: int | None = None) -> int:
    """Where the UDP/TCP/ICMP header starts in a frame build_frame makes."""
    return ETH_HEADER + (VLAN_TAG if vlan is not None else 0) + IP_HEADER[version]


def checksum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack("!%dH" % (len(data) // 2), data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def _pseudo_header(src_ip: str, dst_ip: str, number: int, length: int) -> bytes:
    src, dst = ipaddress.ip_address(src_ip), ipaddress.ip_address(dst_ip)
    if src.version == 4:
        return src.packed + dst.packed + struct.pack("!BBH", 0, number, length)
    return src.packed + dst.packed + struct.pack("!IxxxB", length, number)


def _l4(protocol: str, src_ip: str, dst_ip: str, src_port: int, dst_port: int, payload: bytes) -> bytes:
    version = ip_version(src_ip)
    if protocol == "icmp":
        # An echo request; ICMPv6 (type 128) sums a pseudo-header too, ICMP (type 8) does not.
        header = struct.pack("!BBHHH", 8 if version == 4 else 128, 0, 0, 0x4242, 1)
        pseudo = b"" if version == 4 else _pseudo_header(src_ip, dst_ip, 58, len(header) + len(payload))
        csum = checksum(pseudo + header + payload)
        return header[:2] + struct.pack("!H", csum) + header[4:] + payload
    if protocol == "udp":
        length = 8 + len(payload)
        header = struct.pack("!HHHH", src_port, dst_port, length, 0)
    else:
        length = 20 + len(payload)
        # A SYN: what a connection attempt looks like on the wire.
        header = struct.pack("!HHIIBBHHH", src_port, dst_port, 1, 0, 5 << 4, 0x02, 65535, 0, 0)
    pseudo = _pseudo_header(src_ip, dst_ip, PROTOCOLS[protocol], length)
    csum = checksum(pseudo + header + payload) or 0xFFFF
    offset = CHECKSUM_OFFSET[protocol]
    return header[:offset] + struct.pack("!H", csum) + header[offset + 2:] + payload


def build_frame(protocol: str, src_mac: str, dst_mac: str, src_ip: str, dst_ip: str, src_port: int = 9,
                dst_port: int = 9, size: int | None = None, vlan: int | None = None) -> bytes:
    """One Ethernet frame of `size` bytes (padded to the 60-byte minimum), IPv4 or IPv6 as the addresses are.

    size None is the smallest frame the headers allow. ValueError for a
    malformed address, addresses of two families, or a size too small for
    the headers.
    """
    if protocol not in PROTOCOLS:
        raise ValueError("unsupported protocol %r" % protocol)
    version = ip_version(src_ip)
    if ip_version(dst_ip) != version:
        raise ValueError("src_ip %s and dst_ip %s are not of one IP version" % (src_ip, dst_ip))
    if size is None:
        size = min_size(protocol, version, vlan)
    if size < headers_size(protocol, version, vlan):
        raise ValueError("a %s frame over IPv%d%s needs at least %d bytes, not %d" % (
            protocol, version, " with a VLAN tag" if vlan is not None else "",
            min_size(protocol, version, vlan), size))
    eth = mac_bytes(dst_mac) + mac_bytes(src_mac)
    if vlan is not None:
        eth += struct.pack("!HH", ETH_P_8021Q, vlan & 0x0FFF)
    eth += struct.pack("!H", ETH_P_IP if version == 4 else ETH_P_IPV6)
    payload_len = max(0, max(size, MIN_FRAME) - len(eth) - IP_HEADER[version] - L4_HEADER[protocol])
    l4 = _l4(protocol, src_ip, dst_ip, src_port, dst_port, b"\0" * payload_len)
    src, dst = ipaddress.ip_address(src_ip).packed, ipaddress.ip_address(dst_ip).packed
    if version == 6:
        ip = struct.pack("!IHBB16s16s", 6 << 28, len(l4), PROTOCOLS_V6[protocol], 64, src, dst)
    else:
        ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(l4), 0, 0x4000, 64, PROTOCOLS[protocol], 0, src, dst)
        ip = ip[:10] + struct.pack("!H", checksum(ip)) + ip[12:]
    return eth + ip + l4


def set_ports(frame: bytearray, offset: int, protocol: str, src_port: int, dst_port: int) -> None:
    """Rewrite a UDP/TCP frame's ports in place, updating its checksum incrementally (RFC 1624).

    The same arithmetic as files/bpf/xdp_trafficgen.bpf.c, so both engines
    vary ports the same way and a test can check one against the other.
    """
    check_at = offset + CHECKSUM_OFFSET[protocol]
    old_src, old_dst, check = struct.unpack_from("!HH", frame, offset) + struct.unpack_from("!H", frame, check_at)
    struct.pack_into("!HH", frame, offset, src_port, dst_port)
    if protocol == "udp" and check == 0:
        return  # IPv4 UDP without a checksum stays without one
    total = (~check & 0xFFFF) + (~old_src & 0xFFFF) + src_port + (~old_dst & 0xFFFF) + dst_port
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    check = ~total & 0xFFFF
    if protocol == "udp" and check == 0:
        check = 0xFFFF  # a computed 0 goes on the wire as 0xffff: 0 would mean "none"
    struct.pack_into("!H", frame, check_at, check)


def _send(sock: socket.socket, frame: bytes | bytearray) -> bool:
    """Whether the kernel took the frame whole.

    ENOBUFS is the device refusing this one frame (a veth whose peer's ring
    is full counts it in its tx_dropped): not sent, and no reason to stop.
    """
    try:
        return sock.send(frame) == len(frame)
    except OSError as exc:
        if exc.errno != errno.ENOBUFS:
            raise
        return False


def send(ifname: str, frames: Mapping[str, bytes] | Iterable[tuple[str, bytes]], count: int,
         rate: float = 0) -> tuple[dict[str, int], float]:
    """Send every frame `count` times out of ifname through an AF_PACKET socket.

    frames maps a kind (a protocol name) to its frame, or is a list of
    (kind, frame). rate (frames per second, 0 = unpaced) keeps a veth peer's
    256-slot XDP ring from overflowing, so every frame sent is a frame
    received. Returns the frames the kernel took, per kind, and the seconds
    spent sending.
    """
    with socket.socket(socket.AF_PACKET, socket.SOCK_RAW) as sock:
        sock.bind((ifname, 0))
        return send_on(sock, frames, count, rate)


def send_on(sock: socket.socket, frames: Mapping[str, bytes] | Iterable[tuple[str, bytes]], count: int,
            rate: float = 0) -> tuple[dict[str, int], float]:
    """Send `count` rounds of frames (one of each, in order) on a bound socket.

    A frame counts for its kind only when the kernel took it whole. Returns
    {kind: frames sent}, with every kind present (0 when none went out), and
    the seconds spent. A kind given twice in a list of pairs is sent, and
    counted, twice per round.
    """
    pairs = list(frames.items()) if isinstance(frames, Mapping) else list(frames)
    sent = dict.fromkeys((kind for kind, _frame in pairs), 0)
    start = time.monotonic()
    for i in range(count):
        for kind, frame in pairs:
            if _send(sock, frame):
                sent[kind] += 1
        if rate:
            ahead = (i + 1) * len(pairs) / rate - (time.monotonic() - start)
            if ahead > 0:
                time.sleep(ahead)
    return sent, time.monotonic() - start


def port_at(first: int, span: int, n: int) -> int:
    """The port of the n-th frame of a kind when ports run from `first` over `span` values."""
    return first + n % span if span > 1 else first


def send_rounds(sock: socket.socket, frames: Iterable[tuple[str, bytes, int | None]], rounds: int | None = None,
                until: float | None = None, rate: float = 0,
                ports: tuple[int, int, int, int] = (0, 1, 0, 1)) -> tuple[dict[str, int], float]:
    """Send rounds of frames (one of each kind, in order) on a bound socket, `rounds` times or until `until`.

    frames: (kind, frame, l4_offset) with l4_offset None for frames without
    ports. ports: (src first, src span, dst first, dst span); the n-th frame
    of a kind carries port_at(first, span, n), as the XDP engine's program
    does it. until is a time.monotonic() deadline. Returns {kind: frames the
    kernel took whole} and the seconds spent.
    """
    src_first, src_span, dst_first, dst_span = ports
    vary = src_span > 1 or dst_span > 1
    plan = [(kind, bytearray(frame), offset if vary else None) for kind, frame, offset in frames]
    sent = dict.fromkeys((kind for kind, _frame, _offset in plan), 0)
    start = time.monotonic()
    n = 0
    while (rounds is None or n < rounds) and (until is None or time.monotonic() < until):
        for kind, frame, offset in plan:
            if offset is not None:
                set_ports(frame, offset, kind, port_at(src_first, src_span, n), port_at(dst_first, dst_span, n))
            if _send(sock, frame):
                sent[kind] += 1
        n += 1
        if rate:
            ahead = n * len(plan) / rate - (time.monotonic() - start)
            if ahead > 0:
                time.sleep(ahead)
    return sent, time.monotonic() - start
