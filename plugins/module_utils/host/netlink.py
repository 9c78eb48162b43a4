# -*- coding: utf-8 -*-
# Copyright (c) ebpf.xdp contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Interface queries: addresses, statistics and the XDP state of every link, and whether pyroute2 is there.

Private to the ebpf.xdp collection: the interface may change without notice.
Namespaces are entered with _netns; everything here works on the current one.
"""

from __future__ import annotations

import importlib.util
import socket
import struct
import sys

from ansible_collections.ebpf.xdp.plugins.module_utils.host import nlmsg as _nlmsg
from ansible_collections.ebpf.xdp.plugins.module_utils.host.netns import NotFoundError

# Found, not imported: only tc writes import it (see host/session.open_socket).
HAS_PYROUTE2 = importlib.util.find_spec("pyroute2") is not None
PYROUTE2_IMPORT_ERROR = None if HAS_PYROUTE2 else "No module named 'pyroute2' on %s" % sys.executable

# rtnetlink, as far as reading links goes (linux/rtnetlink.h, linux/if_link.h)
RTM_GETLINK = 18
IFLA_ADDRESS, IFLA_IFNAME, IFLA_MTU, IFLA_LINK, IFLA_LINKINFO, IFLA_STATS64 = 1, 3, 4, 5, 18, 23
IFLA_CARRIER, IFLA_LINK_NETNSID, IFLA_XDP, IFLA_IF_NETNSID = 33, 37, 43, 46
IFLA_INFO_KIND = 1
# The attributes of a link that _describe() reads.
LINK_ATTRIBUTES = frozenset((IFLA_ADDRESS, IFLA_IFNAME, IFLA_MTU, IFLA_LINK, IFLA_LINKINFO, IFLA_STATS64,
                             IFLA_CARRIER, IFLA_LINK_NETNSID, IFLA_XDP))
IFF_UP = 0x1
IFLA_XDP_ATTACHED, IFLA_XDP_PROG_ID, IFLA_XDP_DRV_PROG_ID, IFLA_XDP_SKB_PROG_ID = 2, 4, 5, 6
# IFLA_XDP_ATTACHED (XDP_ATTACHED_*) -> the collection's mode names; bpf/libbpf's xdp_query uses them too.
XDP_ATTACHED_MODES = {1: "native", 2: "generic", 3: "offload", 4: "multi"}
# The struct rtnl_link_stats64 counters the facts report, in the struct's order of its first eight u64.
STATS64 = ("rx_packets", "tx_packets", "rx_bytes", "tx_bytes", "rx_errors", "tx_errors", "rx_dropped", "tx_dropped")
STATS_KEYS = ("rx_packets", "tx_packets", "rx_bytes", "tx_bytes", "rx_dropped", "tx_dropped")


def interface(ifname: str) -> dict:
    """Index, MAC address, MTU, statistics and XDP state of one interface in the current namespace."""
    found = [link for link in interfaces() if link["ifname"] == ifname]
    if not found:
        raise NotFoundError("interface %r does not exist in this network namespace" % ifname)
    return found[0]


def interfaces(netnsid: int | None = None) -> list[dict]:
    """Every interface in the current namespace, as interface() describes it: one RTM_GETLINK dump, read
    with the standard library (pyroute2 decodes every attribute of every link, ~3 ms a link: the exporter
    reads them all on every scrape).

    netnsid: those of the namespace the current one knows by that id instead (a veth's link_netnsid: where
    its peer is), read without entering it (IFLA_IF_NETNSID).
    """
    request = struct.pack("=BxHiII", socket.AF_UNSPEC, 0, 0, 0, 0)  # struct ifinfomsg: any link
    where = b"" if netnsid is None else _nlmsg.attr(IFLA_IF_NETNSID, struct.pack("=i", netnsid))
    return [_describe(attrs, header)
            for header, attrs in _nlmsg.dump(RTM_GETLINK, request, "list the links of a network namespace", where,
                                             LINK_ATTRIBUTES)]


def peer(link: dict) -> dict | None:
    """A veth's other end as interfaces() describes it, wherever it is; None when there is none to read."""
    if not link["link"]:
        return None
    try:
        found = interfaces(link["link_netnsid"])
    except OSError:
        return None  # a namespace we may not read
    return next((other for other in found if other["ifindex"] == link["link"]), None)


def _describe(attrs: dict[int, bytes], header: bytes) -> dict:
    _family, _kind, ifindex, flags = struct.unpack_from("=BxHiI", header)
    xdp = _nlmsg.attributes(attrs[IFLA_XDP]) if IFLA_XDP in attrs else {}

    def u32(found, kind):
        return struct.unpack("=I", found[kind][:4])[0] if kind in found else 0

    def s32(found, kind):
        return struct.unpack("=i", found[kind][:4])[0] if kind in found else None

    attached = xdp[IFLA_XDP_ATTACHED][0] if IFLA_XDP_ATTACHED in xdp else 0
    info = _nlmsg.attributes(attrs[IFLA_LINKINFO]) if IFLA_LINKINFO in attrs else {}
    mac = attrs.get(IFLA_ADDRESS)
    stats = dict(zip(STATS64, struct.unpack_from("=8Q", attrs[IFLA_STATS64]))) if IFLA_STATS64 in attrs else {}
    return {
        "ifname": attrs[IFLA_IFNAME].rstrip(b"\0").decode(),
        "ifindex": ifindex,
        "mac": ":".join("%02x" % b for b in mac) if mac else None,
        "mtu": u32(attrs, IFLA_MTU),
        "up": bool(flags & IFF_UP),
        "carrier": bool(attrs.get(IFLA_CARRIER, b"\0")[0]),
        # IFLA_INFO_KIND: veth, bridge, ...; None for a physical device.
        "kind": info[IFLA_INFO_KIND].rstrip(b"\0").decode() if IFLA_INFO_KIND in info else None,
        # A veth's peer: its index, in the namespace of that id (None: this one).
        "link": u32(attrs, IFLA_LINK),
        "link_netnsid": s32(attrs, IFLA_LINK_NETNSID),
        "xdp": {
            "mode": XDP_ATTACHED_MODES.get(attached),
            "prog_id": u32(xdp, IFLA_XDP_PROG_ID),
            "native_prog_id": u32(xdp, IFLA_XDP_DRV_PROG_ID),
            "generic_prog_id": u32(xdp, IFLA_XDP_SKB_PROG_ID),
        },
        "stats": {k: stats.get(k, 0) for k in STATS_KEYS},
    }
