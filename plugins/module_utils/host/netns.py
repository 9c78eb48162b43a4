# -*- coding: utf-8 -*-
# Copyright (c) ebpf.xdp contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Network namespaces: entering one, naming it in pin paths, finding an interface in it.

Private to the ebpf.xdp collection: the interface may change without notice.

A module that is given `netns` switches its own network namespace with
setns(2) for the duration of the work instead of using pyroute2's NetNS
(which forks a helper in 0.7 and changed its API in 0.9): netlink sockets,
interface indexes and BPF links then all refer to the same namespace, and
the mount namespace (and with it bpffs) stays the host's.

Nothing here imports pyroute2 (about 0.1 s per module run): a module that
needs only these, like xdp_program, does not pay for it.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import socket
import struct
from typing import Iterator

from ansible_collections.ebpf.xdp.plugins.module_utils._errors import EbpfXdpError
from ansible_collections.ebpf.xdp.plugins.module_utils.host import names as _names, nlmsg as _nlmsg, \
    session as _session

NETNS_RUN_DIR = _names.NETNS_RUN_DIR
CLONE_NEWNET = 0x40000000


class NotFoundError(EbpfXdpError):
    """A namespace or interface that does not exist."""


def _setns(fd: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, "setns: %s" % os.strerror(err))
    _session.moved()


def check_name(name: str) -> None:
    """Refuse a namespace name that would reach outside /run/netns (or into another pin directory): without
    this, "../../proc/1/ns/net" is opened as a path and the pin directory named after it escapes pin_root."""
    _names.check_netns(name)


@contextlib.contextmanager
def netns(name: str | None) -> Iterator[None]:
    """Run the body inside network namespace `name` (None: stay where we are)."""
    if not name:
        yield
        return
    check_name(name)
    path = os.path.join(NETNS_RUN_DIR, name)
    try:
        target = os.open(path, os.O_RDONLY)
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            raise NotFoundError("network namespace %r does not exist (no %s)" % (name, path))
        raise
    try:
        with _inside(target):
            yield
    finally:
        os.close(target)


@contextlib.contextmanager
def _inside(target: int) -> Iterator[None]:
    """Run the body inside the namespace open at fd target, then back in the current one."""
    original = os.open("/proc/self/ns/net", os.O_RDONLY)
    try:
        _setns(target)
        try:
            yield
        finally:
            _setns(original)
    finally:
        os.close(original)


RTM_GETNSID = 90
NETNSA_NSID, NETNSA_FD = 1, 3
RTGENMSG = b"\0" * 4  # struct rtgenmsg (AF_UNSPEC), padded to 4 bytes


def _netnsid(fd: int) -> int | None:
    """The id the current namespace knows the namespace open at fd by (a veth's link_netnsid names its peer's
    namespace so), or None when it has given it none."""
    attrs = _nlmsg.ask(RTM_GETNSID, RTGENMSG, "ask a namespace's id", _nlmsg.attr(NETNSA_FD, struct.pack("=I", fd)))
    nsid = struct.unpack("=i", attrs[NETNSA_NSID][:4])[0] if NETNSA_NSID in attrs else -1
    return None if nsid < 0 else nsid


@contextlib.contextmanager
def by_netnsid(nsid: int) -> Iterator[None]:
    """Run the body inside the namespace the current one knows by id nsid (a veth's link_netnsid), found among
    the named namespaces (/run/netns) and the initial one; NotFoundError when it is none of them."""
    candidates = [os.path.join(NETNS_RUN_DIR, entry) for entry in sorted(os.listdir(NETNS_RUN_DIR))] \
        if os.path.isdir(NETNS_RUN_DIR) else []
    for path in ["/proc/1/ns/net"] + candidates:
        try:
            target = os.open(path, os.O_RDONLY)
        except OSError:
            continue
        try:
            try:
                found = _netnsid(target)
            except OSError:  # a file in /run/netns that is no namespace
                continue
            if found != nsid:
                continue
            with _inside(target):
                yield
            return
        finally:
            os.close(target)
    raise NotFoundError("no named network namespace is the one this namespace calls id %d" % nsid)


def _ns_inode(path: str) -> int | None:
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
        check_name(name)
        return name
    # Asked once per host session and namespace: /run/netns of a lab host has a name for each of the lab's
    # namespaces (hundreds), each stat'ed to find this one.
    return _session.dump(("netns_key",), _unnamed_key)


def _unnamed_key() -> str:
    current = _ns_inode("/proc/self/ns/net")
    if current is not None and current == _ns_inode("/proc/1/ns/net"):
        return "host"
    if os.path.isdir(NETNS_RUN_DIR):
        for entry in sorted(os.listdir(NETNS_RUN_DIR)):
            if _ns_inode(os.path.join(NETNS_RUN_DIR, entry)) == current:
                return entry
    return "netns-%s" % current


def ifindex(ifname: str) -> int:
    """The index of ifname in the current network namespace."""
    try:
        return socket.if_nametoindex(ifname)
    except (OSError, ValueError):  # "no interface with this name", without an errno; ValueError: a NUL in it
        raise NotFoundError("interface %r does not exist in this network namespace" % ifname)


def ifname(index: int) -> str | None:
    """The name of the interface with this index in the current network namespace, or None."""
    try:
        return socket.if_indextoname(index)
    except OSError:
        return None
