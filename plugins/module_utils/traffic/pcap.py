# -*- coding: utf-8 -*-
# Copyright (c) ebpf.xdp contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Classic pcap files (libpcap's format) read and written with the standard library, and what frames hold.

Private to the ebpf.xdp collection: the interface may change without notice.

The format (draft-ietf-opsawg-pcap): a 24-byte file header (magic, version
2.4, two unused words, snaplen, link type) in the writer's byte order, then
per frame a 16-byte record header (seconds, fraction, captured length,
original length) and the captured bytes. The magic says the byte order and
whether the fraction counts micro- or nanoseconds. Files are written in this
machine's byte order with microseconds, as tcpdump writes them, and read in
either order and either unit.

pcapng (Wireshark's default, magic 0x0a0d0d0a) is another format: it is
recognised only to say how to convert it. Only Ethernet captures are for us
(frames are replayed on Ethernet devices); a capture of another link type,
the usual one being tcpdump -i any's "Linux cooked" headers, is refused with
its name.

The summary helpers classify a frame as udp, tcp, icmp, icmpv6, arp or other
(over IPv4 or IPv6, past one 802.1Q/802.1ad tag) and read its 5-tuple.
"""

from __future__ import annotations

import collections
import ipaddress
import os
import struct
import time
from typing import Iterable, NamedTuple

from ansible_collections.ebpf.xdp.plugins.module_utils._errors import EbpfXdpError
from ansible_collections.ebpf.xdp.plugins.module_utils.host import files as _files

LINKTYPE_ETHERNET = 1
MAGIC_USEC = 0xA1B2C3D4
MAGIC_NSEC = 0xA1B23C4D
MAGIC_PCAPNG = 0x0A0D0D0A  # a palindrome of bytes: the same in both byte orders
# Alexey Kuznetzov's patched libpcap: records 8 bytes longer, which no current tool writes.
MAGIC_MODIFIED = 0xA1B2CD34
VERSION = (2, 4)
FILE_HEADER = 24
RECORD_HEADER = 16
MAX_SNAPLEN = 65535
# libpcap's own bound on a record: a larger one is a corrupt length field, not a frame.
MAX_RECORD = 262144
# Captured frames are other people's traffic: readable by the capturing user alone.
MODE = 0o600

# Link types a user is likely to bring instead of Ethernet, with what to do about them.
LINKTYPES = {
    0: "BSD loopback (tcpdump -i lo on BSD)",
    9: "PPP",
    101: "raw IP, without link-layer headers",
    105: "IEEE 802.11 wireless",
    113: "Linux cooked capture (tcpdump -i any)",
    127: "IEEE 802.11 with radiotap headers",
    220: "Linux USB",
    228: "raw IPv4",
    229: "raw IPv6",
    276: "Linux cooked capture v2 (tcpdump -i any)",
}
COOKED = (113, 276)

ETH_P_IP = 0x0800
ETH_P_ARP = 0x0806
ETH_P_IPV6 = 0x86DD
VLAN_TPIDS = (0x8100, 0x88A8)  # 802.1Q, 802.1ad
PROTOCOLS = ("udp", "tcp", "icmp", "icmpv6", "arp", "other")
IP_PROTOCOLS = {17: "udp", 6: "tcp", 1: "icmp", 58: "icmpv6"}
# IPv6 extension headers walked to reach the L4 header: hop-by-hop, routing, destination options.
IPV6_OPTIONS = (0, 43, 60)
IPV6_FRAGMENT = 44
IPV6_AH = 51


class PcapError(EbpfXdpError):
    """A file that is not a classic Ethernet pcap, or one that is cut short; the message names the file."""

    def __init__(self, path: str, message: str):
        super().__init__("%s: %s" % (path, message))
        self.path = path


class Record(NamedTuple):
    """One frame of a pcap file: when it was captured (seconds since the epoch), its captured bytes, and its
    length on the wire (more than len(data) when the capture's snaplen cut it)."""

    timestamp: float
    data: bytes
    length: int


# ---------------------------------------------------------------- writing


class Writer:
    """A pcap file written record by record into a temporary file beside `path`, renamed over `path` when the
    block ends without an error: a reader finds the old file or the whole new one, never half of it, and a
    failed capture leaves nothing. Frames are other people's traffic: the file is 0600 (the running user's
    alone), written never through a link and only in a directory no one else can change (host/files).

        with Writer(path, snaplen) as out:
            out.write(time.time(), frame)
    """

    def __init__(self, path: str, snaplen: int = MAX_SNAPLEN, linktype: int = LINKTYPE_ETHERNET):
        if not 0 < snaplen <= MAX_RECORD:
            raise PcapError(path, "snaplen must be between 1 and %d, not %d" % (MAX_RECORD, snaplen))
        self.path = path
        self.snaplen = snaplen
        self.linktype = linktype
        self.records = 0
        self._file = None

    def __enter__(self) -> Writer:
        directory = os.path.dirname(os.path.abspath(self.path))
        try:
            self._file = _files.AtomicFile(self.path, MODE, dir_mode=None)
        except _files.UnsafePathError as exc:
            raise PcapError(self.path, str(exc)) from None
        except OSError as exc:
            raise PcapError(self.path, "cannot write a file in %s: %s" % (directory, exc.strerror or exc))
        self._file.write(struct.pack("=IHHiIII", MAGIC_USEC, VERSION[0], VERSION[1], 0, 0, self.snaplen,
                                     self.linktype))
        return self

    def write(self, timestamp: float, data: bytes, length: int | None = None) -> None:
        """One record: `data` as captured, `length` the frame's length on the wire (default len(data))."""
        self.records += 1
        length = len(data) if length is None else length
        if len(data) > self.snaplen:
            raise PcapError(self.path, "record %d holds %d bytes, more than the file's snaplen %d"
                            % (self.records, len(data), self.snaplen))
        if length < len(data):
            raise PcapError(self.path, "record %d's original length %d is less than its %d captured bytes"
                            % (self.records, length, len(data)))
        seconds = int(timestamp)
        micros = int(round((timestamp - seconds) * 1e6))
        if micros >= 1000000:  # .9999996 rounds up into the next second
            seconds, micros = seconds + 1, micros - 1000000
        self._file.write(struct.pack("=IIII", seconds, micros, len(data), length) + data)

    def __exit__(self, exc_type, exc, tb) -> None:
        self._file.__exit__(exc_type, exc, tb)


def write(path: str, records: Iterable, snaplen: int = MAX_SNAPLEN) -> int:
    """Write an Ethernet pcap of `records`, each (timestamp, data) or (timestamp, data, original length), or
    bare bytes (timestamped now), atomically (see Writer). Returns the number of records."""
    with Writer(path, snaplen) as out:
        for record in records:
            if isinstance(record, (bytes, bytearray, memoryview)):
                out.write(time.time(), bytes(record))
            else:
                out.write(*record)
    return out.records


# ---------------------------------------------------------------- reading


def read(path: str, require_ethernet: bool = True) -> tuple[int, list[Record]]:
    """(link type, [Record]) of the classic pcap file at `path`, either byte order, micro- or nanosecond
    timestamps (a float keeps nanoseconds to about a quarter of a microsecond).

    PcapError for pcapng, anything else that is not a pcap, a file cut short
    (in its header or in a record, named), and, with require_ethernet, a
    link type other than Ethernet (named, with what to capture instead).
    """
    with open(path, "rb") as handle:
        raw = handle.read()
    order, scale, linktype, snaplen = _header(path, raw)
    if require_ethernet and linktype != LINKTYPE_ETHERNET:
        raise PcapError(path, _linktype_message(linktype))
    records = []
    record_header = struct.Struct(order + "IIII")
    offset, size = FILE_HEADER, len(raw)
    while offset < size:
        number = len(records) + 1
        if size - offset < RECORD_HEADER:
            raise PcapError(path, "truncated: record %d's header is cut short (%d of %d bytes at offset %d); the "
                                  "capture was stopped before it finished writing, or the file is still being "
                                  "written" % (number, size - offset, RECORD_HEADER, offset))
        seconds, fraction, captured, length = record_header.unpack_from(raw, offset)
        offset += RECORD_HEADER
        if captured > max(snaplen, MAX_RECORD):
            raise PcapError(path, "record %d claims %d bytes, more than the file's snaplen %d: the file is corrupt"
                            % (number, captured, snaplen))
        if size - offset < captured:
            raise PcapError(path, "truncated: record %d is cut short (%d of its %d bytes at offset %d); the "
                                  "capture was stopped before it finished writing, or the file is still being "
                                  "written" % (number, size - offset, captured, offset))
        records.append(Record(seconds + fraction / scale, raw[offset:offset + captured], max(length, captured)))
        offset += captured
    return linktype, records


def _header(path: str, raw: bytes) -> tuple[str, float, int, int]:
    """(struct byte order, fraction units per second, link type, snaplen) from the file header."""
    if not raw:
        raise PcapError(path, "empty file, not a pcap capture")
    if len(raw) < 4:
        raise PcapError(path, "not a pcap capture (%d bytes, shorter than any pcap header)" % len(raw))
    order, scale = None, None
    for candidate in ("<", ">"):
        magic = struct.unpack(candidate + "I", raw[:4])[0]
        if magic in (MAGIC_USEC, MAGIC_NSEC):
            order, scale = candidate, (1e6 if magic == MAGIC_USEC else 1e9)
        elif magic == MAGIC_MODIFIED:
            raise PcapError(path, "a modified (Kuznetzov) pcap, which is not read here; convert it to a classic "
                                  "pcap first: editcap -F pcap IN OUT")
    if raw[:4] == struct.pack(">I", MAGIC_PCAPNG):
        raise PcapError(path, "this is a pcapng file, not a classic pcap; convert it first: "
                              "tcpdump -r in.pcapng -w out.pcap, or editcap -F pcap in.pcapng out.pcap")
    if order is None:
        raise PcapError(path, "not a pcap capture (magic 0x%s, neither a pcap's a1b2c3d4 or a1b23c4d in either "
                              "byte order nor pcapng's 0a0d0d0a)" % raw[:4].hex())
    if len(raw) < FILE_HEADER:
        raise PcapError(path, "truncated: the file header is cut short (%d of %d bytes)" % (len(raw), FILE_HEADER))
    major, minor, _zone, _sigfigs, snaplen, network = struct.unpack_from(order + "HHiIII", raw, 4)
    if major != VERSION[0]:
        raise PcapError(path, "pcap version %d.%d is not read here (only %d.x)" % (major, minor, VERSION[0]))
    # The upper bits of the link-type word may carry the FCS length (draft-ietf-opsawg-pcap).
    return order, scale, network & 0xFFFF, snaplen


def linktype_name(linktype: int) -> str:
    return LINKTYPES.get(linktype, "LINKTYPE %d" % linktype)


def _linktype_message(linktype: int) -> str:
    what = "link type %d, %s" % (linktype, linktype_name(linktype)) if linktype in LINKTYPES else \
        "link type %d" % linktype
    if linktype in COOKED:
        advice = "capture on one interface instead (tcpdump -i eth0 -w out.pcap): its frames keep their Ethernet " \
                 "headers"
    else:
        advice = "capture on an Ethernet interface (or a veth) instead"
    return "%s: only Ethernet captures (link type %d) are read here; %s" % (what, LINKTYPE_ETHERNET, advice)


# ---------------------------------------------------------------- what frames hold


class FiveTuple(NamedTuple):
    """A frame's flow: its protocol (one of PROTOCOLS), source and destination addresses as text (IPv4, IPv6;
    for ARP the sender's and target's IPv4 addresses; None for frames that carry none) and UDP/TCP ports
    (None for other protocols, and for IP fragments after the first)."""

    proto: str
    src: str | None
    dst: str | None
    sport: int | None
    dport: int | None


def _l3(frame: bytes) -> tuple[int | None, int]:
    """(EtherType, offset of what follows it), past one VLAN tag; (None, 0) for a frame shorter than that."""
    if len(frame) < 14:
        return None, 0
    ethertype, offset = struct.unpack_from("!H", frame, 12)[0], 14
    if ethertype in VLAN_TPIDS:
        if len(frame) < 18:
            return None, 0
        ethertype, offset = struct.unpack_from("!H", frame, 16)[0], 18
    return ethertype, offset


def _ipv4(frame: bytes, offset: int) -> tuple[int, str, str, int | None] | None:
    """(protocol number, source, destination, L4 offset or None for a later fragment), None if cut short."""
    if len(frame) < offset + 20 or frame[offset] >> 4 != 4:
        return None
    header = (frame[offset] & 0x0F) * 4
    fragment_offset = struct.unpack_from("!H", frame, offset + 6)[0] & 0x1FFF
    src = str(ipaddress.IPv4Address(frame[offset + 12:offset + 16]))
    dst = str(ipaddress.IPv4Address(frame[offset + 16:offset + 20]))
    return frame[offset + 9], src, dst, (None if fragment_offset else offset + header)


def _ipv6(frame: bytes, offset: int) -> tuple[int, str, str, int | None] | None:
    """As _ipv4, past the extension headers that can come before the L4 header."""
    if len(frame) < offset + 40 or frame[offset] >> 4 != 6:
        return None
    src = str(ipaddress.IPv6Address(frame[offset + 8:offset + 24]))
    dst = str(ipaddress.IPv6Address(frame[offset + 24:offset + 40]))
    number, at = frame[offset + 6], offset + 40
    while number in IPV6_OPTIONS + (IPV6_FRAGMENT, IPV6_AH):
        if len(frame) < at + 8:
            return number, src, dst, None
        following = frame[at]
        if number == IPV6_FRAGMENT:
            later = struct.unpack_from("!H", frame, at + 2)[0] >> 3
            number, at = following, at + 8
            if later:
                return number, src, dst, None
        elif number == IPV6_AH:
            number, at = following, at + (frame[at + 1] + 2) * 4
        else:
            number, at = following, at + (frame[at + 1] + 1) * 8
    return number, src, dst, at


def five_tuple(frame: bytes) -> FiveTuple:
    """The frame's protocol (PROTOCOLS), addresses and ports; see FiveTuple."""
    ethertype, offset = _l3(frame)
    if ethertype == ETH_P_ARP:
        # Ethernet/IPv4 ARP: hardware type 1, protocol 0x0800, 6- and 4-byte addresses.
        if len(frame) >= offset + 28 and frame[offset + 4:offset + 6] == b"\x06\x04":
            return FiveTuple("arp", str(ipaddress.IPv4Address(frame[offset + 14:offset + 18])),
                             str(ipaddress.IPv4Address(frame[offset + 24:offset + 28])), None, None)
        return FiveTuple("arp", None, None, None, None)
    ip = _ipv4(frame, offset) if ethertype == ETH_P_IP else _ipv6(frame, offset) if ethertype == ETH_P_IPV6 else None
    if ip is None:
        return FiveTuple("other", None, None, None, None)
    number, src, dst, l4 = ip
    proto = IP_PROTOCOLS.get(number, "other")
    if (proto, ethertype) in (("icmp", ETH_P_IPV6), ("icmpv6", ETH_P_IP)):
        proto = "other"  # ICMP's number over IPv6, ICMPv6's over IPv4: neither protocol
    sport = dport = None
    if proto in ("udp", "tcp") and l4 is not None and len(frame) >= l4 + 4:
        sport, dport = struct.unpack_from("!HH", frame, l4)
    return FiveTuple(proto, src, dst, sport, dport)


def protocol(frame: bytes) -> str:
    """udp, tcp, icmp, icmpv6, arp or other."""
    return five_tuple(frame).proto


def count_protocols(frames: Iterable[bytes]) -> dict[str, int]:
    """Frames per protocol, every one of PROTOCOLS present (0 when none)."""
    counts = dict.fromkeys(PROTOCOLS, 0)
    for frame in frames:
        counts[protocol(frame)] += 1
    return counts


def count_flows(frames: Iterable[bytes]) -> collections.Counter:
    """Frames per FiveTuple."""
    return collections.Counter(five_tuple(frame) for frame in frames)
