# -*- coding: utf-8 -*-
# Copyright (c) ebpf.xdp contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Network namespaces and netlink queries through pyroute2.

Private to the ebpf.xdp collection: the interface may change without notice.

A module that is given `netns` switches its own network namespace with
setns(2) for the duration of the work instead of using pyroute2's NetNS
(which forks a helper in 0.7 and changed its API in 0.9): netlink sockets,
interface indexes and BPF links then all refer to the same namespace, and
the mount namespace (and with it bpffs) stays the host's.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import traceback
from typing import Iterator

from ansible_collections.ebpf.xdp.plugins.module_utils._errors import EbpfXdpError

try:
    from pyroute2 import IPRoute
    from pyroute2.netlink.exceptions import NetlinkError
except ImportError:
    HAS_PYROUTE2 = False
    PYROUTE2_IMPORT_ERROR = traceback.format_exc()
else:
    HAS_PYROUTE2 = True
    PYROUTE2_IMPORT_ERROR = None

NETNS_RUN_DIR = "/run/netns"
CLONE_NEWNET = 0x40000000

# IFLA_XDP_ATTACHED as pyroute2 decodes it -> the collection's mode names.
XDP_ATTACHED_MODES = {"xdp": "native", "xdpgeneric": "generic", "xdpoffload": "offload", "xdpmulti": "multi"}


class NetlinkLookupError(EbpfXdpError):
    """A namespace or interface that does not exist."""


def _setns(fd):
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, "setns: %s" % os.strerror(err))


@contextlib.contextmanager
def netns(name: str | None) -> Iterator[None]:
    """Run the body inside network namespace `name` (None: stay where we are)."""
    if not name:
        yield
        return
    path = os.path.join(NETNS_RUN_DIR, name)
    try:
        target = os.open(path, os.O_RDONLY)
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            raise NetlinkLookupError("network namespace %r does not exist (no %s)" % (name, path))
        raise
    original = os.open("/proc/self/ns/net", os.O_RDONLY)
    try:
        _setns(target)
        try:
            yield
        finally:
            _setns(original)
    finally:
        os.close(target)
        os.close(original)


def _ns_inode(path):
    try:
        return os.stat(path).st_ino
    except OSError:
        return None


def netns_key(name: str | None = None) -> str:
    """A stable name for the current network namespace, used in pin paths.

    Several lab hosts share one bpffs, so pins are kept per namespace: the
    namespace's name under /run/netns, "host" for the initial namespace, and
    the inode number for an unnamed namespace.
    """
    if name:
        return name
    current = _ns_inode("/proc/self/ns/net")
    if current is not None and current == _ns_inode("/proc/1/ns/net"):
        return "host"
    if os.path.isdir(NETNS_RUN_DIR):
        for entry in sorted(os.listdir(NETNS_RUN_DIR)):
            if _ns_inode(os.path.join(NETNS_RUN_DIR, entry)) == current:
                return entry
    return "netns-%s" % current


def _link(ipr, ifname):
    try:
        return ipr.link("get", ifname=ifname)[0]
    except NetlinkError as exc:
        if exc.code == errno.ENODEV:
            raise NetlinkLookupError("interface %r does not exist in this network namespace" % ifname)
        raise


def interface(ifname: str) -> dict:
    """Index, MAC address and XDP state of one interface in the current namespace."""
    with IPRoute() as ipr:
        return _describe(_link(ipr, ifname))


def interfaces() -> list[dict]:
    """Every interface in the current namespace, as interface() describes it."""
    with IPRoute() as ipr:
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
