# -*- coding: utf-8 -*-
# Copyright (c) ebpf.xdp contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The host session: what one module run has read of the host, kept for the rest of the run.

Private to the ebpf.xdp collection: the interface may change without notice.

Inside `with host():` (a program module's converge, a datapath task, the
facts) the host is read once per task: the netlink traffic of a run goes
through one socket per network namespace, opened on first use; the tc dumps
(every qdisc of a namespace, the filters of one hook) and each hook's own
state (XDP's IFLA_XDP, a tcx hook's programs, libxdp's dispatcher: dumps
of kind `hook:...`, keyed by ifindex) are read once; and the ownership
records (bpf/pins) are read once each, kept by path with the pin's inode
(a record unpinned, re-pinned or pinned anew is read again; one this run
writes is kept as written). What a write changes is forgotten, and only
that: a filter's write, the filter dumps; a qdisc's, all dumps of the
namespace; a hook's (wrote_hook(ifindex), said by the libbpf and libxdp
bindings at each attach, update and detach), that hook's state; so the
next read sees what the write did. What is read by path in bpffs (which
attachments a hook has, what a map set's maps say of its groups) is kept
the same way, and forgotten in every namespace by the code that writes
there (forget). Taking a lock forgets nothing: what a
concurrent run changes between this run's read and its lock, the kernel's
atomic swaps refuse (a REPLACE expects the old program, a tcx attach the
hook's revision) or the lock orders after it, as though this run had read
first; where nothing in the kernel refuses a stale read (a map set's groups:
a free id, a member count), the lock's generation (bpf/pins) says whether
another run changed the thing since this run read it, and only then is it
read again under the lock. Whether the kernel has tcx is asked once. Outside of a session every
call opens its own socket and reads afresh, as a one-off call should (the
exporter reads records anew on each scrape). Which namespace a thread is in
is read once too, and again after host/netns moves it (moved()): a stat of
/proc/thread-self/ns/net per dump was ~7% of the exporter's scrape.

`counts` says how often the run went to the kernel: sockets opened, dumps
read, tcx probes, and every call that costs a system call: `bpf` (each
bpf() the libbpf binding makes, by command under `bpf:<call>`), `netlink`
(each netlink request, by kind under `netlink:<what>`), `libxdp:<call>`
(calls into libxdp, which makes its own bpf() calls), `record` (ownership
records read from bpffs). The tests check the round trips with it, and
tests/benchmarks/datapath.py prints them.
"""

from __future__ import annotations

import collections
import contextlib
import os
import threading


def current_netns() -> tuple[int, int]:
    """The calling thread's network namespace (setns() is per thread), by device and inode."""
    info = os.stat("/proc/thread-self/ns/net")
    return info.st_dev, info.st_ino


def open_socket():
    """A new rtnetlink socket in the calling thread's namespace (it stays there when the thread leaves)."""
    # pyroute2 is imported here, by the first run that writes tc (reads go through host/nlmsg): its import is
    # most of a module's start-up (~0.3 s here, seconds on an emulated host).
    from pyroute2 import IPRoute  # pylint: disable=import-outside-toplevel
    # ext_ack: the kernel's own reason ("Specified filter handle not found")
    # comes back in NetlinkError.args[1], in 0.7 and 0.9 alike.
    ipr = IPRoute(ext_ack=True)
    # pyroute2 0.9 (0.9.7 and its master as of this writing): IPRoute.__init__
    # skips the status["nlm_generator"] its base class NetlinkSocket sets, so
    # IPRoute.nlm_request() raises KeyError('nlm_generator'). Set it as the
    # base class would (False: answers as a tuple). 0.7 has no status.
    status = getattr(ipr, "status", None)
    if status is not None and "nlm_generator" not in status:
        status["nlm_generator"] = False
    return ipr


class Session:
    """One run's sockets, dumps and probes; see the module docstring."""

    def __init__(self):
        self.sockets: dict[tuple[int, int], object] = {}
        self.dumps: dict[tuple, object] = {}
        self.probes: dict[str, object] = {}
        self.counts: collections.Counter = collections.Counter()
        # How often each dump (by its key, namespace first) and each record (("record", path)) was read: the
        # tests assert that a no-change task reads each once.
        self.reads: collections.Counter = collections.Counter()
        # path -> (the pin's (inode, ctime), the record's raw value as read or written); see bpf/pins.Record.
        # (namespace, ifindex) of the hooks this run wrote (None: any), whose state a namespace-wide dump read
        # before the write no longer tells (see written()).
        self.written: set[tuple] = set()
        self.records: dict[str, tuple[tuple[int, int], bytes]] = {}
        self.where: dict[int, tuple[int, int]] = {}  # thread -> its namespace (current_netns), until it moves

    def netns(self) -> tuple[int, int]:
        thread = threading.get_ident()
        if thread not in self.where:
            self.where[thread] = current_netns()
        return self.where[thread]

    def moved(self) -> None:
        self.where.pop(threading.get_ident(), None)

    def socket(self):
        netns = self.netns()
        if netns not in self.sockets:
            self.sockets[netns] = open_socket()
            self.counts["sockets"] += 1
        return self.sockets[netns]

    def dump(self, key: tuple, read):
        """read()'s answer for key in the current namespace, read once until the next write there."""
        where = (self.netns(),) + key
        if where not in self.dumps:
            self.dumps[where] = read()
            self.counts["dump:" + key[0]] += 1
            self.reads[where] += 1
        return self.dumps[where]

    def wrote(self, kind: str | None = None) -> None:
        """Something in the current namespace changed: its dumps (of that kind, or all) are read again when
        next asked for."""
        netns = self.netns()
        self.dumps = {key: value for key, value in self.dumps.items()
                      if key[0] != netns or kind not in (None, key[1])}

    def forget(self, kind: str, path: str | None = None) -> None:
        """Dumps of a kind read by path (bpffs listings, map sets' contents: the same from every namespace), or
        that kind's of one path, are read again when next asked for, in whichever namespace they were read."""
        self.dumps = {key: value for key, value in self.dumps.items()
                      if key[1] != kind or path not in (None, key[2])}

    def known(self, key: tuple, value) -> None:
        """What dump(key) would read now in the current namespace, known without reading it (this run wrote it)."""
        self.dumps[(self.netns(),) + key] = value

    def forget_records(self, directory: str) -> None:
        """The ownership records under directory are read again when next asked for: another run may have
        rewritten one in place (same pin), which its inode does not tell."""
        self.records = {path: kept for path, kept in self.records.items()
                        if not path.startswith(directory + os.sep)}

    def count(self, kind: str, what: str) -> None:
        self.counts[kind] += 1
        self.counts[kind + ":" + what] += 1

    def wrote_hook(self, ifindex: int | None) -> None:
        """A hook of the interface ifindex in the current namespace changed (None: of any interface there): its
        state is read again when next asked for; other hooks' stand."""
        netns = self.netns()
        self.dumps = {key: value for key, value in self.dumps.items()
                      if key[0] != netns or not key[1].startswith(HOOK) or ifindex not in (None, key[2])}
        self.written.add((netns, ifindex))

    def wrote_to(self, ifindex: int) -> bool:
        """Whether this run wrote a hook of ifindex (or of any interface) in the current namespace."""
        netns = self.netns()
        return (netns, ifindex) in self.written or (netns, None) in self.written

    def probe(self, name: str, ask):
        """ask()'s answer, asked once per run: a property of the kernel, such as whether it has tcx."""
        if name not in self.probes:
            self.probes[name] = ask()
            self.counts["probe:" + name] += 1
        return self.probes[name]

    def close(self) -> None:
        for ipr in self.sockets.values():
            ipr.close()
        self.sockets = {}
        self.dumps = {}
        self.records = {}


# What a hook's state is kept under: dump((HOOK + what, ifindex, ...), read).
HOOK = "hook:"

_ACTIVE: list[Session] = []  # the open session, if any (never more than one)


def active() -> Session | None:
    return _ACTIVE[0] if _ACTIVE else None


@contextlib.contextmanager
def host():
    """The run's session; inside one already, that one (a datapath task's items share it)."""
    if _ACTIVE:
        yield _ACTIVE[0]
        return
    _ACTIVE.append(Session())
    try:
        yield _ACTIVE[0]
    finally:
        _ACTIVE.pop().close()


@contextlib.contextmanager
def socket():
    """An rtnetlink socket for the current namespace: the session's, or a new one closed afterwards."""
    session = active()
    if session:
        yield session.socket()
        return
    ipr = open_socket()
    try:
        yield ipr
    finally:
        ipr.close()


def dump(key: tuple, read):
    """read() through the session's cache of dumps, or read() afresh outside a session."""
    session = active()
    return session.dump(key, read) if session else read()


def wrote(kind: str | None = None) -> None:
    session = active()
    if session:
        session.wrote(kind)


def forget(kind: str, path: str | None = None) -> None:
    """What this run wrote (or another run, as a lock's generation tells) changes what dumps of kind (of path)
    said, in any namespace: see Session.forget."""
    session = active()
    if session:
        session.forget(kind, path)


def known(key: tuple, value) -> None:
    """dump(key)'s answer as this run knows it without reading (see Session.known); nothing outside a session."""
    session = active()
    if session:
        session.known(key, value)


def forget_records(directory: str) -> None:
    """The records under directory are read again when next asked for (see Session.forget_records)."""
    session = active()
    if session:
        session.forget_records(directory)


def count(kind: str, what: str) -> None:
    """One round trip to the kernel of a kind (bpf, netlink, libxdp, record), and what it was, counted in the
    session (nothing outside one)."""
    if _ACTIVE:
        _ACTIVE[0].count(kind, what)


def wrote_hook(ifindex: int | None) -> None:
    """A hook of ifindex (None: of any interface) in the current namespace changed: see Session.wrote_hook."""
    session = active()
    if session:
        session.wrote_hook(ifindex)


def wrote_to(ifindex: int) -> bool:
    """Whether a namespace-wide dump may not tell the hooks of ifindex as they are: this run wrote one of them
    since, or there is no session (each call then asks that hook alone)."""
    session = active()
    return session is None or session.wrote_to(ifindex)


def hook(what: str, ifindex: int, read, *more):
    """read()'s answer for one hook (what: xdp, tcx, chain; more: its direction) of the interface ifindex, read
    once per session until that hook is written (wrote_hook)."""
    return dump((HOOK + what, ifindex) + more, read)


def moved() -> None:
    """The calling thread entered another network namespace (host/netns says so after each setns)."""
    session = active()
    if session:
        session.moved()


def probe(name: str, ask):
    session = active()
    return session.probe(name, ask) if session else ask()
