# -*- coding: utf-8 -*-
# Copyright (c) ebpf.xdp contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Building test frames (Ethernet + IPv4 + UDP/TCP/ICMP) and sending them raw.

Private to the ebpf.xdp collection: the interface may change without notice.
"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Iterable, Mapping

ETH_P_IP = 0x0800
ETH_P_8021Q = 0x8100
PROTOCOLS = {"icmp": 1, "tcp": 6, "udp": 17}
MIN_FRAME = 60  # without FCS


def mac_bytes(mac: str) -> bytes:
    parts = mac.split(":")
    if len(parts) != 6:
        raise ValueError("invalid MAC address %r" % mac)
    return bytes(int(p, 16) for p in parts)


def checksum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack("!%dH" % (len(data) // 2), data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def _l4(protocol: str, src_ip: str, dst_ip: str, src_port: int, dst_port: int, payload: bytes) -> bytes:
    if protocol == "icmp":
        header = struct.pack("!BBHHH", 8, 0, 0, 0x4242, 1)  # echo request
        csum = checksum(header + payload)
        return header[:2] + struct.pack("!H", csum) + header[4:] + payload
    if protocol == "udp":
        length = 8 + len(payload)
        header = struct.pack("!HHHH", src_port, dst_port, length, 0)
    else:
        length = 20 + len(payload)
        # A SYN: what a connection attempt looks like on the wire.
        header = struct.pack("!HHIIBBHHH", src_port, dst_port, 1, 0, 5 << 4, 0x02, 65535, 0, 0)
    pseudo = socket.inet_aton(src_ip) + socket.inet_aton(dst_ip) + struct.pack("!BBH", 0, PROTOCOLS[protocol], length)
    csum = checksum(pseudo + header + payload) or 0xFFFF
    offset = 6 if protocol == "udp" else 16
    return header[:offset] + struct.pack("!H", csum) + header[offset + 2:] + payload


def build_frame(protocol: str, src_mac: str, dst_mac: str, src_ip: str, dst_ip: str, src_port: int = 9,
                dst_port: int = 9, size: int = MIN_FRAME, vlan: int | None = None) -> bytes:
    """One Ethernet frame of `size` bytes (padded to the 60-byte minimum)."""
    if protocol not in PROTOCOLS:
        raise ValueError("unsupported protocol %r" % protocol)
    eth = mac_bytes(dst_mac) + mac_bytes(src_mac)
    if vlan is not None:
        eth += struct.pack("!HH", ETH_P_8021Q, vlan & 0x0FFF)
    eth += struct.pack("!H", ETH_P_IP)
    l4_header = {"udp": 8, "tcp": 20, "icmp": 8}[protocol]
    payload_len = max(0, max(size, MIN_FRAME) - len(eth) - 20 - l4_header)
    l4 = _l4(protocol, src_ip, dst_ip, src_port, dst_port, b"\0" * payload_len)
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(l4), 0, 0x4000, 64, PROTOCOLS[protocol], 0,
                     socket.inet_aton(src_ip), socket.inet_aton(dst_ip))
    ip = ip[:10] + struct.pack("!H", checksum(ip)) + ip[12:]
    return eth + ip + l4


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
            if sock.send(frame) == len(frame):
                sent[kind] += 1
        if rate:
            ahead = (i + 1) * len(pairs) / rate - (time.monotonic() - start)
            if ahead > 0:
                time.sleep(ahead)
    return sent, time.monotonic() - start
