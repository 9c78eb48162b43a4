# -*- coding: utf-8 -*-
# Copyright (c) ebpf.xdp contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Netlink messages with the standard library: attributes packed and parsed, and an rtnetlink dump.

Private to the ebpf.xdp collection: the interface may change without notice.

For every netlink read (links, qdiscs, the netdev family's xdp_features):
only tc's filters and writes go through pyroute2 (hooks/tc_netlink), whose
import is most of a module's start-up. Works in the current
network namespace.
"""

from __future__ import annotations

import os
import socket
import struct

from ansible_collections.ebpf.xdp.plugins.module_utils.host import session as _session

NLMSG_ERROR, NLMSG_DONE = 2, 3
NLM_F_REQUEST, NLM_F_ACK, NLM_F_DUMP = 0x1, 0x4, 0x300
NLM_F_REPLACE, NLM_F_EXCL, NLM_F_CREATE = 0x100, 0x200, 0x400  # of a new-object request
NLA_TYPE_MASK = 0x3FFF  # without NLA_F_NESTED and NLA_F_NET_BYTEORDER
_ATTR_HEADER = struct.Struct("=HH")  # struct nlattr: length, type
# What a dump request is, as the host session counts it.
DUMPS = {18: "links", 38: "qdiscs"}  # RTM_GETLINK, RTM_GETQDISC


def attr(kind: int, payload: bytes) -> bytes:
    """One attribute, padded to 4 bytes."""
    length = 4 + len(payload)
    return struct.pack("=HH", length, kind) + payload + b"\0" * (-length % 4)


def attributes(data: bytes, start: int = 0, end: int | None = None,
               wanted: frozenset[int] | None = None) -> dict[int, bytes]:
    """{type: payload} of the attributes in data[start:end]; of the wanted types only, when given (a link has
    ~50, the facts read 9 of them for every link on each of the exporter's scrapes)."""
    end = len(data) if end is None else end
    found = {}
    unpack = _ATTR_HEADER.unpack_from
    while start + 4 <= end:
        length, kind = unpack(data, start)
        if length < 4:
            break
        kind &= NLA_TYPE_MASK
        if wanted is None or kind in wanted:
            found[kind] = data[start + 4:start + length]
        start += (length + 3) & ~3
    return found


def ask(request: int, header: bytes, what: str, attrs: bytes = b"") -> dict[int, bytes]:
    """The attributes of the one answer to an rtnetlink request that is not a dump (RTM_GETNSID, ...), whose
    family header is as long as the request's. OSError with the kernel's errno when it refuses."""
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE) as sock:
        sock.bind((0, 0))
        body = header + attrs
        sock.send(struct.pack("=IHHII", 16 + len(body), request, NLM_F_REQUEST, 1, 0) + body)
        data = sock.recv(1 << 16)
    length, kind = struct.unpack_from("=IH", data)
    if kind == NLMSG_ERROR:
        err = -struct.unpack_from("=i", data, 16)[0]
        raise OSError(err, "%s: %s" % (what, os.strerror(err)))
    return attributes(data, 16 + len(header), length)


def dump(request: int, header: bytes, what: str, attrs: bytes = b"",
         wanted: frozenset[int] | None = None) -> list[tuple[bytes, dict[int, bytes]]]:
    """The answers to an rtnetlink dump request (RTM_GETLINK, RTM_GETQDISC, ...) for every object of the
    current namespace: each answer's family header (as long as the request's: struct ifinfomsg, struct
    tcmsg, ...) and its attributes (see attributes() for wanted). attrs: the request's own (packed with
    attr())."""
    _session.count("netlink", DUMPS.get(request, str(request)))
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE) as sock:
        sock.bind((0, 0))
        body = header + attrs
        sock.send(struct.pack("=IHHII", 16 + len(body), request, NLM_F_REQUEST | NLM_F_DUMP, 1, 0) + body)
        answers = []
        while True:
            data = sock.recv(1 << 20)
            offset = 0
            while offset + 16 <= len(data):
                length, kind, _flags, _seq, _pid = struct.unpack_from("=IHHII", data, offset)
                if kind == NLMSG_DONE:
                    return answers
                if kind == NLMSG_ERROR:
                    err = -struct.unpack_from("=i", data, offset + 16)[0]
                    raise OSError(err, "%s: %s" % (what, os.strerror(err)))
                body = offset + 16
                answers.append((data[body:body + len(header)],
                                attributes(data, body + len(header), offset + length, wanted)))
                offset += (length + 3) & ~3
