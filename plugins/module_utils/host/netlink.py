# -*- coding: utf-8 -*-
# Copyright (c) ebpf.xdp contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Interface queries: addresses, statistics and the XDP state of every link, and whether pyroute2 is there.

Private to the ebpf.xdp collection: the interface may change without notice.
Namespaces are entered with _netns; everything here works on the current one.
"""

from __future__ import annotations

import socket
import struct
import traceback

from ansible_collections.ebpf.xdp.plugins.module_utils.host import nlmsg as _nlmsg
from ansible_collections.ebpf.xdp.plugins.module_utils.host.netns import NotFoundError

try:
    from pyroute2.netlink.exceptions import NetlinkError  # noqa: F401 pylint: disable=unused-import
except ImportError:
    HAS_PYROUTE2 = False
    PYROUTE2_IMPORT_ERROR = traceback.format_exc()
else:
    HAS_PYROUTE2 = True
    PYROUTE2_IMPORT_ERROR = None

# rtnetlink, as far as reading links goes (linux/rtnetlink.h, linux/if_link.h)
RTM_GETLINK = 18
IFLA_ADDRESS, IFLA_IFNAME, IFLA_MTU, IFLA_STATS64, IFLA_XDP = 1, 3, 4, 23, 43
IFLA_XDP_ATTACHED, IFLA_XDP_PROG_ID, IFLA_XDP_DRV_PROG_ID, IFLA_XDP_SKB_PROG_ID = 2, 4, 5, 6
# IFLA_XDP_ATTACHED -> the collection's mode names.
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


def interfaces() -> list[dict]:
    """Every interface in the current namespace, as interface() describes it: one RTM_GETLINK dump, read
    with the standard library (pyroute2 decodes every attribute of every link, ~3 ms a link: the exporter
    reads them all on every scrape)."""
    request = struct.pack("=BxHiII", socket.AF_UNSPEC, 0, 0, 0, 0)  # struct ifinfomsg: any link
    return [_describe(attrs, struct.unpack_from("=i", header, 4)[0])
            for header, attrs in _nlmsg.dump(RTM_GETLINK, request, "list the links of this network namespace")]


def _describe(attrs: dict[int, bytes], ifindex: int) -> dict:
    xdp = _nlmsg.attributes(attrs[IFLA_XDP]) if IFLA_XDP in attrs else {}

    def u32(found, kind):
        return struct.unpack("=I", found[kind][:4])[0] if kind in found else 0

    attached = xdp[IFLA_XDP_ATTACHED][0] if IFLA_XDP_ATTACHED in xdp else 0
    mac = attrs.get(IFLA_ADDRESS)
    stats = dict(zip(STATS64, struct.unpack_from("=8Q", attrs[IFLA_STATS64]))) if IFLA_STATS64 in attrs else {}
    return {
        "ifname": attrs[IFLA_IFNAME].rstrip(b"\0").decode(),
        "ifindex": ifindex,
        "mac": ":".join("%02x" % b for b in mac) if mac else None,
        "mtu": u32(attrs, IFLA_MTU),
        "xdp": {
            "mode": XDP_ATTACHED_MODES.get(attached),
            "prog_id": u32(xdp, IFLA_XDP_PROG_ID),
            "native_prog_id": u32(xdp, IFLA_XDP_DRV_PROG_ID),
            "generic_prog_id": u32(xdp, IFLA_XDP_SKB_PROG_ID),
        },
        "stats": {k: stats.get(k, 0) for k in STATS_KEYS},
    }
