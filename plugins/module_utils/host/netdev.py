# -*- coding: utf-8 -*-
# Copyright (c) ebpf.xdp contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""What XDP an interface supports, from the kernel's netdev generic netlink family (Linux 6.3+).

Private to the ebpf.xdp collection: the interface may change without notice.

The kernel keeps, per device, `xdp_features`: whether it runs XDP programs
natively, redirects, and - what a sender of XDP frames needs - whether it
takes frames redirected to it (NETDEV_XDP_ACT_NDO_XMIT). A veth advertises
that bit only while its peer has an XDP program or GRO enabled, the two
cases in which the peer's XDP ring exists; without it a redirected frame is
dropped without a trace in any counter.

pyroute2 (0.7 and 0.9 alike) has no binding for this family, and the
request is two small messages, so it is spoken here over a plain netlink
socket. Works in the current network namespace.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import socket
import struct

from ansible_collections.ebpf.xdp.plugins.module_utils.host import nlmsg as _nlmsg, session as _session

NETLINK_GENERIC = 16
GENL_ID_CTRL = 0x10
CTRL_CMD_GETFAMILY = 3
CTRL_ATTR_FAMILY_ID = 1
CTRL_ATTR_FAMILY_NAME = 2
NETDEV_CMD_DEV_GET = 1
NETDEV_A_DEV_IFINDEX = 1
NETDEV_A_DEV_XDP_FEATURES = 3

# enum netdev_xdp_act (uapi/linux/netdev.h) -> names as `ynl` prints them.
XDP_ACT = {
    1 << 0: "basic", 1 << 1: "redirect", 1 << 2: "ndo-xmit", 1 << 3: "xsk-zerocopy",
    1 << 4: "hw-offload", 1 << 5: "rx-sg", 1 << 6: "ndo-xmit-sg",
}
XDP_ACT_NDO_XMIT = 1 << 2


def _request(sock: socket.socket, family: int, cmd: int, attrs: bytes, seq: int) -> dict[int, bytes]:
    """One generic netlink request; the attributes of its answer, or OSError with the kernel's errno."""
    payload = struct.pack("=BBH", cmd, 1, 0) + attrs
    _session.count("netlink", "netdev family" if family == GENL_ID_CTRL else "xdp_features")
    sock.send(struct.pack("=IHHII", 16 + len(payload), family, _nlmsg.NLM_F_REQUEST, seq, 0) + payload)
    data = sock.recv(65536)
    offset = 0
    while offset + 16 <= len(data):
        length, kind, _flags, answer_seq, _pid = struct.unpack_from("=IHHII", data, offset)
        if length < 16:
            break
        if answer_seq == seq:
            if kind == _nlmsg.NLMSG_ERROR:
                code = -struct.unpack_from("=i", data, offset + 16)[0]
                if code:
                    raise OSError(code, os.strerror(code))
            elif kind == family:
                return _nlmsg.attributes(data, offset + 20, offset + length)  # 16 nlmsghdr + 4 genlmsghdr
        offset += (length + 3) & ~3
    raise OSError(errno.EPROTO, "no answer to generic netlink command %d" % cmd)


def _family_id(sock: socket.socket) -> int | None:
    """The netdev generic netlink family's id, or None when the kernel has no such family (< 6.3)."""
    try:
        family = _request(sock, GENL_ID_CTRL, CTRL_CMD_GETFAMILY, _nlmsg.attr(CTRL_ATTR_FAMILY_NAME, b"netdev\0"), 1)
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            return None
        raise
    return struct.unpack("=H", family[CTRL_ATTR_FAMILY_ID][:2])[0]


def xdp_features(ifindex: int) -> int | None:
    """The NETDEV_XDP_ACT_* bits of one interface, or None when the kernel has no netdev family (< 6.3)."""
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_GENERIC) as sock:
        sock.bind((0, 0))
        # The family's id is the kernel's, the same in every namespace: asked once per host session (a devmap
        # group asks for each member).
        family_id = _session.probe("netdev family", lambda: _family_id(sock))
        if family_id is None:
            return None
        try:
            answer = _request(sock, family_id, NETDEV_CMD_DEV_GET,
                              _nlmsg.attr(NETDEV_A_DEV_IFINDEX, struct.pack("=I", ifindex)), 2)
        except OSError as exc:
            raise OSError(exc.errno, "read the XDP features of ifindex %d: %s" % (ifindex, exc.strerror))
        raw = answer.get(NETDEV_A_DEV_XDP_FEATURES)
        return struct.unpack("=Q", raw[:8])[0] if raw else 0


SIOCETHTOOL = 0x8946
ETHTOOL_GGRO = 0x2B


def gro_enabled(ifname: str) -> bool:
    """Whether GRO is on for ifname in the current namespace (ethtool -k: generic-receive-offload). Before
    Linux 6.3 (no xdp_features) this is how a veth whose peer has no XDP program tells that it takes XDP
    frames: its NAPI, and with it its XDP ring, runs while GRO is on."""
    value = ctypes.create_string_buffer(struct.pack("=II", ETHTOOL_GGRO, 0), 8)
    request = struct.pack("16sQ", ifname.encode(), ctypes.addressof(value)) + bytes(16)  # struct ifreq
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            fcntl.ioctl(sock.fileno(), SIOCETHTOOL, request)
        except OSError as exc:
            raise OSError(exc.errno, "read whether GRO is on for %s: %s" % (ifname, exc.strerror))
    return bool(struct.unpack("=II", value.raw)[1])


def feature_names(features: int) -> list[str]:
    return [name for bit, name in sorted(XDP_ACT.items()) if features & bit]
