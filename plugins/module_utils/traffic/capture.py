# -*- coding: utf-8 -*-
# Copyright (c) ebpf.xdp contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""ebpf.xdp.capture: a bounded sample of an interface's frames, written as a pcap file.

Private to the ebpf.xdp collection: the interface may change without notice.

One AF_PACKET socket (SOCK_RAW, ETH_P_ALL) bound to the interface inside its
namespace, read from Python: the interface and its programs stay exactly as
they were (nothing attached, no promiscuous mode), which is what a sample
taken beside a running data path needs. The price is where the socket sits:
the kernel hands it a received frame after XDP (native XDP in the driver,
generic XDP at the top of the receive path) and before tc ingress, and a
sent frame after tc egress; frames XDP drops, redirects or transmits are not
seen. On a veth, what arrives before XDP is what the peer sends: capture
there with direction out.

The kernel strips a VLAN tag into the frame's metadata before the socket
sees it; PACKET_AUXDATA gives it back and it is put back into the bytes, as
libpcap does, so the file holds the frame as it was on the wire. Times are
the kernel's receive timestamps (SO_TIMESTAMPNS).
"""

from __future__ import annotations

import errno
import os
import socket
import struct
import time
from dataclasses import dataclass, field

from ansible_collections.ebpf.xdp.plugins.module_utils.host import files as _files, netns as _netns
from ansible_collections.ebpf.xdp.plugins.module_utils.traffic import pcap as _pcap
from ansible_collections.ebpf.xdp.plugins.module_utils._errors import EbpfXdpError

DIRECTIONS = ("in", "out", "both")
DEFAULT_COUNT = 1000
DEFAULT_SECONDS = 10.0
DEFAULT_SNAPLEN = 2048

ETH_P_ALL = 0x0003
SOL_PACKET = 263
PACKET_AUXDATA = 8
PACKET_STATISTICS = 6
PACKET_OUTGOING = 4
PACKET_IGNORE_OUTGOING = 23
SO_RCVBUFFORCE = 33
SO_TIMESTAMPNS = 35
# struct tpacket_auxdata: status, len, snaplen, mac, net, vlan_tci, vlan_tpid.
AUXDATA = struct.Struct("=IIIHHHH")
TP_STATUS_VLAN_VALID = 0x10
TP_STATUS_VLAN_TPID_VALID = 0x40
# struct timespec as SO_TIMESTAMPNS delivers it (two C longs).
TIMESPEC = struct.Struct("@ll")
# struct tpacket_stats: frames handed to the socket, frames dropped for want of room in its buffer.
TPACKET_STATS = struct.Struct("=II")
# Room for the socket to queue frames while Python writes the file: the default (about 200 KiB) holds a few
# hundred small frames, fewer than a burst from a generator.
RCVBUF = 16 << 20
# Bytes received of every frame whatever the snaplen, so the protocol and port filters see the headers
# (Ethernet, a VLAN tag, IPv6 with extension headers, the ports).
FILTER_BYTES = 256


class CaptureError(EbpfXdpError):
    """Settings that cannot be captured with, or a place the file cannot be written."""


@dataclass
class Settings:
    """What to capture and where to write it, validated; built from the module's parameters by from_params."""

    interface: str
    path: str
    netns: str | None = None
    count: int = DEFAULT_COUNT
    seconds: float = DEFAULT_SECONDS
    direction: str = "in"
    protocols: list[str] = field(default_factory=lambda: list(_pcap.PROTOCOLS))
    ports: list[int] = field(default_factory=list)
    snaplen: int = DEFAULT_SNAPLEN

    @classmethod
    def from_params(cls, params: dict) -> Settings:
        settings = cls(**{k: params[k] for k in cls.__dataclass_fields__ if params.get(k) is not None})
        settings.validate()
        return settings

    def validate(self) -> None:
        """Everything that can be checked without the interface; CaptureError names the setting."""
        if self.count <= 0:
            raise CaptureError("count must be a positive number of frames, not %d" % self.count)
        if not self.seconds > 0:
            raise CaptureError("seconds must be a positive number of seconds, not %s" % self.seconds)
        if not 0 < self.snaplen <= _pcap.MAX_SNAPLEN:
            raise CaptureError("snaplen must be between 1 and %d bytes, not %d" % (_pcap.MAX_SNAPLEN, self.snaplen))
        if self.direction not in DIRECTIONS:
            raise CaptureError("direction must be one of %s, not %r" % (", ".join(DIRECTIONS), self.direction))
        if not self.protocols:
            raise CaptureError("protocols must list at least one of %s" % ", ".join(_pcap.PROTOCOLS))
        unknown = [p for p in self.protocols if p not in _pcap.PROTOCOLS]
        if unknown:
            raise CaptureError("protocols must be among %s, not %s" % (", ".join(_pcap.PROTOCOLS), ", ".join(unknown)))
        wrong = [port for port in self.ports if not 0 <= port <= 65535]
        if wrong:
            raise CaptureError("ports must be between 0 and 65535, not %s" % ", ".join(map(str, wrong)))
        if self.ports and not {"udp", "tcp"} & set(self.protocols):
            # Nothing could ever match: only UDP and TCP frames have ports.
            raise CaptureError("ports match UDP and TCP frames only, and protocols lists neither udp nor tcp")

    def check_path(self) -> None:
        """The file's directory must exist (nothing creates it), and the path must not be a directory."""
        directory = os.path.dirname(os.path.abspath(self.path))
        if not os.path.isdir(directory):
            raise CaptureError("cannot write %s: its directory %s does not exist" % (self.path, directory))
        if os.path.isdir(self.path):
            raise CaptureError("cannot write %s: it is a directory; give the path of the pcap file" % self.path)
        if os.path.islink(self.path):
            raise CaptureError("cannot write %s: it is a symbolic link (to %s); the capture never writes through a "
                               "link: remove it or give the real path" % (self.path, os.readlink(self.path)))
        if not os.access(directory, os.W_OK | os.X_OK):
            raise CaptureError("cannot write %s: no permission to create files in %s" % (self.path, directory))
        try:  # before any frame is captured, in check mode too: the Writer checks again when it writes
            os.close(_files.open_directory(directory, create_mode=None))
        except _files.UnsafePathError as exc:
            raise CaptureError("cannot write %s: %s" % (self.path, exc)) from None

    def wants(self, pkttype: int, frame: bytes) -> str | None:
        """The frame's protocol when the settings keep it, else None."""
        outgoing = pkttype == PACKET_OUTGOING
        if self.direction == "in" and outgoing or self.direction == "out" and not outgoing:
            return None
        flow = _pcap.five_tuple(frame)
        if flow.proto not in self.protocols:
            return None
        if self.ports and not (flow.sport in self.ports or flow.dport in self.ports):
            return None
        return flow.proto


def open_socket(interface: str, incoming_only: bool = False) -> socket.socket:
    """A packet socket for every frame of `interface` (in the current namespace), with VLAN tags in its
    ancillary data, kernel timestamps and a large buffer; incoming_only: the kernel keeps sent frames out of it."""
    # Protocol 0 until bound: a socket created with ETH_P_ALL would queue every interface's frames meanwhile.
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
    try:
        try:
            sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, RCVBUF)
        except PermissionError:  # without CAP_NET_ADMIN: as much as net.core.rmem_max allows
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF)
        sock.setsockopt(SOL_PACKET, PACKET_AUXDATA, 1)
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        if incoming_only:
            # Sent frames would only take room in the buffer (the direction filter drops them anyway).
            try:
                sock.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)
            except OSError:  # before Linux 4.20
                pass
        sock.bind((interface, ETH_P_ALL))
    except BaseException:
        sock.close()
        raise
    return sock


ANCILLARY = socket.CMSG_SPACE(AUXDATA.size) + socket.CMSG_SPACE(TIMESPEC.size)


def receive(sock: socket.socket, bufsize: int) -> tuple[float, bytes, int, int]:
    """One frame: (timestamp, bytes as on the wire (VLAN tag put back), original length, packet type)."""
    data, ancillary, _flags, address = sock.recvmsg(bufsize, ANCILLARY)
    timestamp, length = None, len(data)
    for level, kind, value in ancillary:
        if level == SOL_PACKET and kind == PACKET_AUXDATA and len(value) >= AUXDATA.size:
            status, length, _snap, _mac, _net, tci, tpid = AUXDATA.unpack_from(value)
            # libpcap's test: a valid tag, or a non-zero TCI from kernels before TP_STATUS_VLAN_VALID.
            if tci or status & TP_STATUS_VLAN_VALID:
                tpid = tpid if status & TP_STATUS_VLAN_TPID_VALID else 0x8100
                data = data[:12] + struct.pack("!HH", tpid, tci) + data[12:]
                length += 4
        elif level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(value) >= TIMESPEC.size:
            seconds, nanos = TIMESPEC.unpack_from(value)
            timestamp = seconds + nanos / 1e9
    return (time.time() if timestamp is None else timestamp), data, length, address[2]


def socket_drops(sock: socket.socket) -> int:
    """Frames the kernel could not queue to the socket (its buffer full) since it was bound."""
    return TPACKET_STATS.unpack(sock.getsockopt(SOL_PACKET, PACKET_STATISTICS, TPACKET_STATS.size))[1]


def empty_result(settings: Settings) -> dict:
    return dict(path=settings.path, frames=0, bytes=0, protocols=dict.fromkeys(_pcap.PROTOCOLS, 0), seconds=0.0,
                truncated=0, dropped=0)


def capture(settings: Settings, check_mode: bool = False) -> dict:
    """Capture into settings.path until `count` frames matched or `seconds` passed; the result's counts.

    Check mode checks the directory, the namespace and the interface, opens
    nothing and writes nothing. A failure leaves no file (and an existing
    file as it was).
    """
    settings.check_path()
    result = empty_result(settings)
    with _netns.netns(settings.netns):
        _netns.ifindex(settings.interface)  # NotFoundError naming the interface
        if check_mode:
            return result
        sock = open_socket(settings.interface, incoming_only=settings.direction == "in")
    with sock, _pcap.Writer(settings.path, settings.snaplen) as out:
        bufsize = max(settings.snaplen, FILTER_BYTES)
        start = time.monotonic()
        deadline = start + settings.seconds
        while result["frames"] < settings.count:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            sock.settimeout(remaining)
            try:
                timestamp, data, length, pkttype = receive(sock, bufsize)
            except socket.timeout:
                break
            except OSError as exc:
                # ENETDOWN: the interface went down or away; the kernel unbinds the socket, no frame will come.
                why = "the interface went down or was removed" if exc.errno == errno.ENETDOWN else \
                    (exc.strerror or str(exc))
                raise CaptureError("capture on %s stopped after %d frames: %s; nothing was written"
                                   % (settings.interface, result["frames"], why))
            proto = settings.wants(pkttype, data)
            if proto is None:
                continue
            data = data[:settings.snaplen]
            out.write(timestamp, data, length)
            result["frames"] += 1
            result["bytes"] += length
            result["protocols"][proto] += 1
            result["truncated"] += length > len(data)
        result["seconds"] = round(time.monotonic() - start, 3)
        result["dropped"] = socket_drops(sock)
    return result
