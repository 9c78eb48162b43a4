# -*- coding: utf-8 -*-
# Copyright (c) ebpf.xdp contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Interface queries through pyroute2: addresses, statistics and the XDP state of every link.

Private to the ebpf.xdp collection: the interface may change without notice.
Namespaces are entered with _netns; everything here works on the current one.
"""

from __future__ import annotations

import errno
import traceback

from ansible_collections.ebpf.xdp.plugins.module_utils.host import session as _session
from ansible_collections.ebpf.xdp.plugins.module_utils.host.netns import NotFoundError

try:
    from pyroute2.netlink.exceptions import NetlinkError
except ImportError:
    HAS_PYROUTE2 = False
    PYROUTE2_IMPORT_ERROR = traceback.format_exc()
else:
    HAS_PYROUTE2 = True
    PYROUTE2_IMPORT_ERROR = None

# IFLA_XDP_ATTACHED as pyroute2 decodes it -> the collection's mode names.
XDP_ATTACHED_MODES = {"xdp": "native", "xdpgeneric": "generic", "xdpoffload": "offload", "xdpmulti": "multi"}


def _link(ipr, ifname):
    try:
        return ipr.link("get", ifname=ifname)[0]
    except NetlinkError as exc:
        if exc.code == errno.ENODEV:
            raise NotFoundError("interface %r does not exist in this network namespace" % ifname)
        raise


def interface(ifname: str) -> dict:
    """Index, MAC address and XDP state of one interface in the current namespace."""
    with _session.socket() as ipr:
        return _describe(_link(ipr, ifname))


def interfaces() -> list[dict]:
    """Every interface in the current namespace, as interface() describes it."""
    with _session.socket() as ipr:
        return [_describe(link) for link in ipr.get_links()]


def _describe(link):
    xdp = link.get_attr("IFLA_XDP")
    attached = xdp.get_attr("IFLA_XDP_ATTACHED") if xdp else None
    mode = XDP_ATTACHED_MODES.get(attached)
    return {
        "ifname": link.get_attr("IFLA_IFNAME"),
        "ifindex": link["index"],
        "mac": link.get_attr("IFLA_ADDRESS"),
        "mtu": link.get_attr("IFLA_MTU"),
        "xdp": {
            "mode": mode,
            "prog_id": (xdp.get_attr("IFLA_XDP_PROG_ID") or 0) if xdp else 0,
            "native_prog_id": (xdp.get_attr("IFLA_XDP_DRV_PROG_ID") or 0) if xdp else 0,
            "generic_prog_id": (xdp.get_attr("IFLA_XDP_SKB_PROG_ID") or 0) if xdp else 0,
        },
        "stats": _stats(link),
    }


def _stats(link):
    stats = link.get_attr("IFLA_STATS64") or {}
    keys = ("rx_packets", "tx_packets", "rx_bytes", "tx_bytes", "rx_dropped", "tx_dropped")
    return {k: stats.get(k, 0) for k in keys}
