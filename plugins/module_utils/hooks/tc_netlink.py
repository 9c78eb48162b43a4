# -*- coding: utf-8 -*-
# Copyright (c) ebpf.xdp contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""tc over netlink: the clsact qdisc and the filters that hold BPF programs.

Private to the ebpf.xdp collection: the interface may change without notice.

Everything works on the current network namespace (enter one with
`_netns.netns`). Two ways of holding a program are managed:

- cls_bpf in direct-action mode, the program's return value being the verdict;
- a u32 match-all filter whose action is act_bpf (the setup of the kernel
  commit that introduced bpf_redirect()), the action's own verdict applying
  when the program returns TC_ACT_UNSPEC (-1).

Replacing a program reuses the filter's priority and handle with
NLM_F_REPLACE: the kernel swaps the filter in place, so the hook is never
without one.

pyroute2 0.7 and 0.9 are used alike: the messages are built here with
pyroute2's nlmsg/nla classes and sent with `nlm_request`, and the kernel's
answers are decoded again with the same classes. What differs or is missing
in pyroute2, and why it is not used:

- neither version decodes what identifies a program (TCA_BPF_ID,
  TCA_BPF_TAG, TCA_ACT_BPF_ID, TCA_ACT_BPF_TAG): their maps stop before
  those attributes, which come back as UNKNOWN without a value;
- their u32 selector decoder reads the keys four bytes off, and their u32
  encoder requires a classid (`target`);
- 0.9's IPRoute.nlm_request() fails with KeyError('nlm_generator')
  (see _session.open_socket), and 0.9 no longer starts a message's fields at zero.
"""

from __future__ import annotations

import errno
import os
import socket
import struct
from typing import NoReturn

from ansible_collections.ebpf.xdp.plugins.module_utils.host import nlmsg as _nlmsg, session as _session
from ansible_collections.ebpf.xdp.plugins.module_utils.host.netns import NotFoundError
from ansible_collections.ebpf.xdp.plugins.module_utils._errors import EbpfXdpError

# rtnetlink message types (uapi/linux/rtnetlink.h).
RTM_NEWQDISC, RTM_DELQDISC, RTM_GETQDISC = 36, 37, 38
RTM_NEWTFILTER, RTM_DELTFILTER, RTM_GETTFILTER = 44, 45, 46
# Each request by what it does, as the host session counts it.
REQUESTS = {RTM_NEWQDISC: "new qdisc", RTM_DELQDISC: "delete qdisc", RTM_GETQDISC: "qdiscs",
            RTM_NEWTFILTER: "new filter", RTM_DELTFILTER: "delete filter", RTM_GETTFILTER: "filters"}

# The hook qdisc (clsact or the plain ingress qdisc) and clsact's two parents (uapi/linux/pkt_sched.h).
TCA_KIND = 1
TC_H_CLSACT = 0xFFFFFFF1  # == TC_H_INGRESS: both qdiscs sit there, so an interface has one or the other
HOOK_QDISC_HANDLE = 0xFFFF0000
PARENTS = {"ingress": 0xFFFFFFF2, "egress": 0xFFFFFFF3}

ETH_P_ALL = 0x0003
PROTOCOLS = {0x0003: "all", 0x0800: "ip", 0x86DD: "ipv6", 0x0806: "arp", 0x8100: "802.1q"}
PROTOCOL_NUMBERS = {name: number for number, name in PROTOCOLS.items()}
TCA_BPF_FLAG_ACT_DIRECT = 1
TC_U32_TERMINAL = 1
TC_U32_NODE_MASK = 0x00000FFF
TC_U32_HTID_MASK = 0xFFF00000

# Verdicts (uapi/linux/pkt_cls.h TC_ACT_*), named as tc prints them; the aliases are tc's too.
VERDICTS = {-1: "continue", 0: "pass", 1: "reclassify", 2: "drop", 3: "pipe", 4: "stolen",
            5: "queued", 6: "repeat", 7: "redirect", 8: "trap"}
VERDICT_ALIASES = {"ok": 0, "shot": 2, "unspec": -1}

NLM_F_REQUEST, NLM_F_ACK, NLM_F_DUMP = _nlmsg.NLM_F_REQUEST, _nlmsg.NLM_F_ACK, _nlmsg.NLM_F_DUMP
NLM_F_REPLACE, NLM_F_EXCL, NLM_F_CREATE = _nlmsg.NLM_F_REPLACE, _nlmsg.NLM_F_EXCL, _nlmsg.NLM_F_CREATE

_ACT_BPF_PARMS = struct.Struct("=IIiii")  # struct tc_act_bpf: tc_gen index, capab, action, refcnt, bindcnt
NO_ACT_BPF = "this kernel has no act_bpf (CONFIG_NET_ACT_BPF); use cls_bpf or tcx instead"


class TcError(EbpfXdpError):
    """A tc operation the kernel (or this file) refused: operation, target, errno and the kernel's reason."""

    def __init__(self, message: str, err: int | None = None, reason: str | None = None):
        self.errno = err
        self.reason = reason or ""
        if err:
            message = "%s: %s (errno %d)" % (message, os.strerror(err), err)
        if reason:
            message = "%s: %s" % (message, reason)
        super().__init__(message)


class _Refused(Exception):
    """The kernel's no to a request: its errno, and its extended ack message when it said more."""

    def __init__(self, code: int, reason: str):
        super().__init__(code, reason)
        self.code = code
        self.reason = reason


def _messages():
    """The message classes (hooks/tc_messages), imported with pyroute2 on the first request: a run that never
    dumps filters or writes tc pays none of pyroute2's import (~0.3 s here, seconds on an emulated host)."""
    from ansible_collections.ebpf.xdp.plugins.module_utils.hooks import (  # pylint: disable=import-outside-toplevel
        tc_messages)
    return tc_messages


def protocol_number(name: str) -> int:
    """The EtherType of a protocol as filters() names it ("ip", or "0x88cc" for one without a name)."""
    return PROTOCOL_NUMBERS[name] if name in PROTOCOL_NUMBERS else int(name, 16)


def _info(prio: int, protocol: int = ETH_P_ALL) -> int:
    """tcm_info of a filter: priority in the high half, protocol (network order) in the low half."""
    return ((prio & 0xFFFF) << 16) | socket.htons(protocol & 0xFFFF)


# ---------------------------------------------------------------- talking to the kernel


def _socket():
    """The run's socket for this namespace (see _session), or one of its own outside a session."""
    return _session.socket()


def _request(ipr, msg, msg_type: int, flags: int) -> list:
    messages = _messages()
    _session.count("netlink", REQUESTS.get(msg_type, str(msg_type)))
    try:
        return messages.request(ipr, msg, msg_type, flags)
    except messages.NetlinkError as exc:
        raise _Refused(exc.code, messages.ext_ack(exc)) from None
    finally:
        # Even when refused: the kernel may have done part of it. A filter changes no qdisc.
        if msg_type in (RTM_NEWTFILTER, RTM_DELTFILTER):
            _session.wrote("filters")
        elif msg_type not in (RTM_GETQDISC, RTM_GETTFILTER):
            _session.wrote()


def _dump(ipr, msg, msg_type: int) -> list:
    """The kernel's answers decoded again with tc_messages' classes, which know every attribute we read."""
    return [_messages().decoded(answer) for answer in _request(ipr, msg, msg_type, NLM_F_REQUEST | NLM_F_DUMP)]


def _tcmsg(ifindex: int, parent: int, handle: int = 0, info: int = 0, attrs=()):
    return _messages().tcmsg(ifindex, parent, handle, info, attrs)


def _reason(exc: _Refused) -> str:
    """The kernel's extended ack message, when it said more than the errno."""
    return "" if exc.reason == os.strerror(exc.code) else exc.reason.rstrip(".")


def _fail(what: str, exc: _Refused, hint: str = "") -> NoReturn:
    if exc.code == errno.ENODEV:
        raise NotFoundError("%s: no such interface in this network namespace" % what)
    reason = _reason(exc)
    if hint:
        reason = "%s (%s)" % (reason, hint) if reason else hint
    raise TcError(what, exc.code, reason)


def _check_interface(ifindex: int, what: str) -> None:
    # A socket opened here is in the current namespace: its ioctl names the interface there.
    try:
        socket.if_indextoname(ifindex)
    except OSError:
        raise NotFoundError("%s: ifindex %d does not exist in this network namespace" % (what, ifindex))


# ---------------------------------------------------------------- the hook qdisc


def _hook_qdiscs(what: str) -> dict[int, str | None]:
    """Every interface of the namespace (it has a root qdisc) with the kind of its hook qdisc, or None; read
    once per host session, with the standard library (the facts ask for every interface of a namespace: a
    dump decoded by pyroute2 costs ~1 ms a qdisc)."""
    try:
        return _session.dump(("qdiscs",), _hook_kinds)
    except OSError as exc:
        raise TcError(what, exc.errno, "")


def _hook_kinds() -> dict[int, str | None]:
    kinds: dict[int, str | None] = {}
    request = struct.pack("=BxHiIII", socket.AF_UNSPEC, 0, 0, 0, 0, 0)  # struct tcmsg: every qdisc
    for header, attrs in _nlmsg.dump(RTM_GETQDISC, request, "list the qdiscs"):
        ifindex, _handle, parent = struct.unpack_from("=iII", header, 4)
        if parent == TC_H_CLSACT:
            kinds[ifindex] = attrs.get(TCA_KIND, b"").rstrip(b"\0").decode()
        else:
            kinds.setdefault(ifindex, None)
    return kinds


def _qdisc_kind(ifindex: int, what: str) -> str | None:
    # The kernel dumps every qdisc of the namespace (a get of one would do, but pyroute2 0.7 never sees its
    # answer): within a host session (_session) many interfaces share one dump.
    kinds = _hook_qdiscs(what)
    if ifindex not in kinds:
        # Every interface has a root qdisc: none at all means no such interface.
        _check_interface(ifindex, what)
    return kinds.get(ifindex)


def qdisc_kind(ifindex: int) -> str | None:
    """What holds the tc hook: "clsact", "ingress" (the plain ingress qdisc, which excludes clsact) or None."""
    return _qdisc_kind(ifindex, "read the qdiscs of ifindex %d" % ifindex)


def ensure_clsact(ifindex: int) -> bool:
    """Give the interface the clsact qdisc that cls_bpf filters live in; True when one was created.

    The plain ingress qdisc sits in the same place, may hold someone else's
    filters, and would take "egress" filters onto ingress: it is refused,
    not replaced.
    """
    what = "add clsact qdisc to ifindex %d" % ifindex
    kind = _qdisc_kind(ifindex, what)
    if kind == "clsact":
        return False
    if kind is not None:
        raise TcError("%s: the %s qdisc is there, and clsact cannot share its place "
                      "(remove it with `tc qdisc del dev DEV %s` if nothing needs it)" % (what, kind, kind))
    with _socket() as ipr:
        msg = _tcmsg(ifindex, TC_H_CLSACT, HOOK_QDISC_HANDLE, attrs=[("TCA_KIND", "clsact")])
        try:
            _request(ipr, msg, RTM_NEWQDISC, NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL)
        except _Refused as exc:
            if exc.code == errno.EEXIST and _qdisc_kind(ifindex, what) == "clsact":
                return False  # created by someone else meanwhile
            _fail(what, exc)
        return True


def delete_clsact(ifindex: int) -> bool:
    """Remove the clsact qdisc, and with it every filter of both directions; True when there was one.

    tcx links do not live in the qdisc and stay. The plain ingress qdisc is
    refused: it is not what ensure_clsact() made.
    """
    what = "delete clsact qdisc of ifindex %d" % ifindex
    kind = _qdisc_kind(ifindex, what)
    if kind is None:
        return False
    if kind != "clsact":
        raise TcError("%s: the hook qdisc is the plain %s qdisc, not clsact" % (what, kind))
    with _socket() as ipr:
        msg = _tcmsg(ifindex, TC_H_CLSACT, HOOK_QDISC_HANDLE, attrs=[("TCA_KIND", "clsact")])
        try:
            _request(ipr, msg, RTM_DELQDISC, NLM_F_REQUEST | NLM_F_ACK)
        except _Refused as exc:
            if _qdisc_kind(ifindex, what) is None:
                return False  # deleted by someone else meanwhile
            _fail(what, exc)
        return True


# ---------------------------------------------------------------- reading filters


def _parent(direction: str) -> int:
    try:
        return PARENTS[direction]
    except KeyError:
        raise TcError("unknown tc direction %r; use ingress or egress" % (direction,))


def _verdict_name(value: int) -> str:
    return VERDICTS.get(value, str(value))


def _verdict_value(name: str) -> int:
    if name in VERDICT_ALIASES:
        return VERDICT_ALIASES[name]
    for value, known in VERDICTS.items():
        if known == name:
            return value
    raise TcError("unknown act_bpf verdict %r; use one of %s" % (
        name, ", ".join(sorted(set(VERDICTS.values()) | set(VERDICT_ALIASES)))))


def _tag(value) -> str | None:
    return value.hex() if value else None


def _describe_action(act) -> dict:
    kind = act.get_attr("TCA_ACT_KIND")
    found = {"kind": kind, "index": act.get_attr("TCA_ACT_INDEX"),
             "prog_id": None, "name": None, "tag": None, "verdict": None}
    opts = act.get_attr("TCA_ACT_OPTIONS")
    if kind == "bpf" and opts is not None:
        found.update(prog_id=opts.get_attr("TCA_ACT_BPF_ID"), name=opts.get_attr("TCA_ACT_BPF_NAME"),
                     tag=_tag(opts.get_attr("TCA_ACT_BPF_TAG")))
        parms = opts.get_attr("TCA_ACT_BPF_PARMS")
        if parms and len(parms) >= _ACT_BPF_PARMS.size:
            index, _capab, action, _refcnt, _bindcnt = _ACT_BPF_PARMS.unpack_from(parms)
            # A filter dump carries the action's index only in its parms, not as TCA_ACT_INDEX.
            found["index"] = found["index"] or index
            found["verdict"] = _verdict_name(action)
    return found


def _actions(acts) -> list[dict]:
    if acts is None:
        return []
    ordered = sorted((int(name.rsplit("_", 1)[1]), act) for name, act in acts["attrs"]
                     if name.startswith("TCA_ACT_PRIO_"))
    return [_describe_action(act) for _order, act in ordered]


def _describe(msg) -> dict | None:
    """One filter as callers see it; None for what only organises filters (a prio's head, u32 hash tables)."""
    kind = msg.get_attr("TCA_KIND")
    opts = msg.get_attr("TCA_OPTIONS")
    handle = msg["handle"]
    if not handle or opts is None:
        return None
    if kind == "u32" and not handle & TC_U32_NODE_MASK:
        return None  # a hash table ("fh 800: ht divisor 1"), not a filter
    protocol = socket.ntohs(msg["info"] & 0xFFFF)
    found = {
        "kind": kind, "prio": msg["info"] >> 16, "handle": handle,
        "protocol": PROTOCOLS.get(protocol, "0x%04x" % protocol), "chain": msg.get_attr("TCA_CHAIN") or 0,
        "prog_id": None, "name": None, "tag": None, "direct_action": None, "verdict": None, "actions": [],
    }
    if kind == "bpf":
        found.update(prog_id=opts.get_attr("TCA_BPF_ID"), name=opts.get_attr("TCA_BPF_NAME"),
                     tag=_tag(opts.get_attr("TCA_BPF_TAG")),
                     direct_action=bool((opts.get_attr("TCA_BPF_FLAGS") or 0) & TCA_BPF_FLAG_ACT_DIRECT),
                     actions=_actions(opts.get_attr("TCA_BPF_ACT")))
    elif kind == "u32":
        found["actions"] = _actions(opts.get_attr("TCA_U32_ACT"))
        bpf_actions = [a for a in found["actions"] if a["kind"] == "bpf"]
        if bpf_actions:
            first = bpf_actions[0]
            found.update(prog_id=first["prog_id"], name=first["name"], tag=first["tag"], verdict=first["verdict"])
    return found


def _dump_filters(ifindex: int, direction: str, what: str, prio: int = 0) -> list:
    def read():
        with _socket() as ipr:
            # A prio in tcm_info makes the kernel dump only that priority.
            return _dump(ipr, _tcmsg(ifindex, _parent(direction), info=(prio & 0xFFFF) << 16), RTM_GETTFILTER)
    try:
        return _session.dump(("filters", ifindex, direction, prio), read)
    except _Refused as exc:
        _fail(what, exc)


def _filters(ifindex: int, direction: str, what: str, prio: int = 0) -> list[dict]:
    kind = _qdisc_kind(ifindex, what)
    if kind is None or (kind == "ingress" and direction == "egress"):
        # No egress hook without clsact: the plain ingress qdisc would answer
        # a dump of ffff:fff3 with its ingress filters.
        return []
    described = (_describe(m) for m in _dump_filters(ifindex, direction, what, prio))
    return [f for f in described if f is not None]


def filters(ifindex: int, direction: str) -> list[dict]:
    """Every filter on one direction of the hook, with what identifies the BPF program each one runs.

    Each dict has kind, prio, handle, protocol, chain, prog_id, name, tag,
    direct_action (cls_bpf), verdict (act_bpf) and actions; what does not
    apply to a kind is None. A u32 filter's prog_id, name, tag and verdict
    are those of its first act_bpf action.
    """
    _parent(direction)
    return _filters(ifindex, direction, "read the %s filters of ifindex %d" % (direction, ifindex))


# ---------------------------------------------------------------- attaching and detaching


def _what(verb: str, label: str, ifindex: int, direction: str, prio: int, handle: int) -> str:
    return "%s %s prio %d handle 0x%x %s %s of ifindex %d" % (
        verb, label, prio, handle, "to" if verb == "add" else "on", direction, ifindex)


def _check_slot(prio: int, handle: int, what: str) -> None:
    # With prio 0 or handle 0 the kernel picks one, and a "replace" adds a
    # second filter next to the old one instead of replacing it.
    if not 1 <= prio <= 0xFFFF:
        raise TcError("%s: prio must be 1..65535 (with 0 the kernel picks one, and a replace would add a "
                      "filter instead)" % what)
    if not 1 <= handle <= 0xFFFFFFFF:
        raise TcError("%s: handle must be 1..0xffffffff (with 0 the kernel picks one, and a replace would add "
                      "a filter instead)" % what)


def _require_clsact(ifindex: int, what: str) -> None:
    kind = _qdisc_kind(ifindex, what)
    if kind is None:
        raise TcError("%s: ifindex %d has no clsact qdisc; create it first" % (what, ifindex))
    if kind != "clsact":
        # The plain ingress qdisc accepts a filter for ffff:fff3 and runs it on ingress.
        raise TcError("%s: the hook qdisc of ifindex %d is the plain %s qdisc, not clsact" % (what, ifindex, kind))


def _u32_handle(ifindex: int, direction: str, prio: int, handle: int, what: str) -> int:
    """The full u32 handle (hash table:bucket:node) of node `handle` at `prio`.

    The kernel numbers each priority's root hash table itself (800:, 801:,
    ...); a handle without it is refused by replace (ENOSPC) and delete
    (ENOENT), so it is completed from the table the priority already has.
    """
    if handle & TC_U32_HTID_MASK:
        return handle
    for msg in _dump_filters(ifindex, direction, what, prio):
        table = msg["handle"]
        if msg.get_attr("TCA_KIND") == "u32" and msg["info"] >> 16 == prio and table \
                and not table & ~TC_U32_HTID_MASK:
            return table | handle
    return handle


def _new_filter(ipr, ifindex: int, direction: str, prio: int, handle: int, kind: str, options: list,
                replace: bool, what: str, prog_type: str, protocol: int) -> None:
    flags = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | (NLM_F_REPLACE if replace else NLM_F_EXCL)
    msg = _tcmsg(ifindex, _parent(direction), handle, _info(prio, protocol),
                 attrs=[("TCA_KIND", kind), ("TCA_OPTIONS", {"attrs": options})])
    try:
        _request(ipr, msg, RTM_NEWTFILTER, flags)
    except _Refused as exc:
        reason = _reason(exc)
        hint = ""
        if exc.code == errno.EEXIST:
            hint = "a filter is there already; replace it instead"
        elif exc.code == errno.EINVAL and "protocol" in reason.lower():
            hint = "the filters at prio %d are for another protocol; tc keeps one per priority" % prio
        elif exc.code == errno.EINVAL and "kind" in reason.lower():
            hint = "another kind of filter holds prio %d" % prio
        elif exc.code == errno.EINVAL and not reason:
            hint = "is it a %s program, from %s?" % (prog_type, {"sched_cls": 'SEC("tc")',
                                                                 "sched_act": 'SEC("action")'}[prog_type])
        elif exc.code == errno.ENOENT and kind == "u32" and "action" in reason:
            hint = NO_ACT_BPF
        _fail(what, exc, hint)


def attach_cls_bpf(ifindex: int, direction: str, prog_fd: int, name: str, prio: int, handle: int,
                   replace: bool = False, protocol: int = ETH_P_ALL) -> None:
    """Hold a sched_cls program on the hook as a direct-action cls_bpf filter (protocol all by default).

    replace=True is tc's `filter replace`: the filter at prio/handle takes
    the new program in one step (or is created when there is none). Without
    it an existing filter there is an error (EEXIST). A replace keeps the
    priority's protocol: the kernel refuses another one (EINVAL).
    """
    what = _what("replace" if replace else "add", "cls_bpf filter", ifindex, direction, prio, handle)
    _check_slot(prio, handle, what)
    options = [("TCA_BPF_FD", prog_fd), ("TCA_BPF_NAME", name), ("TCA_BPF_FLAGS", TCA_BPF_FLAG_ACT_DIRECT)]
    with _socket() as ipr:
        _require_clsact(ifindex, what)
        _new_filter(ipr, ifindex, direction, prio, handle, "bpf", options, replace, what, "sched_cls", protocol)


def attach_act_bpf(ifindex: int, direction: str, prog_fd: int, name: str, prio: int, handle: int,
                   verdict: str = "drop", replace: bool = False, protocol: int = ETH_P_ALL) -> None:
    """Hold a sched_act program on the hook as the act_bpf action of a u32 match-all filter.

    The action's verdict applies when the program returns TC_ACT_UNSPEC
    (-1); any other return value is the verdict itself (TC_ACT_REDIRECT
    after bpf_redirect(), for instance). For u32 the handle may be the node
    (1..0xfff, tc's `handle ::N`) or the full handle filters() reports.
    replace works as for attach_cls_bpf().
    """
    what = _what("replace" if replace else "add", "act_bpf u32 filter", ifindex, direction, prio, handle)
    _check_slot(prio, handle, what)
    action = _verdict_value(verdict)
    # struct tc_u32_sel for `match u32 0 0`: flags (TERMINAL: run the actions),
    # offshift, nkeys, pad, offmask (be16), off, offoff, hoff, hmask (be32),
    # then one struct tc_u32_key: mask, val (be32), off, offmask. All else 0.
    selector = struct.pack("=BBBxHHhhI", TC_U32_TERMINAL, 0, 1, 0, 0, 0, 0, 0) + struct.pack("=IIii", 0, 0, 0, 0)
    act_bpf = {"attrs": [
        ("TCA_ACT_KIND", "bpf"),
        ("TCA_ACT_OPTIONS", {"attrs": [
            ("TCA_ACT_BPF_PARMS", _ACT_BPF_PARMS.pack(0, 0, action, 0, 0)),
            ("TCA_ACT_BPF_FD", prog_fd),
            ("TCA_ACT_BPF_NAME", name),
        ]}),
    ]}
    options = [("TCA_U32_SEL", selector), ("TCA_U32_ACT", {"attrs": [("TCA_ACT_PRIO_1", act_bpf)]})]
    with _socket() as ipr:
        _require_clsact(ifindex, what)
        full = _u32_handle(ifindex, direction, prio, handle, what)
        _new_filter(ipr, ifindex, direction, prio, full, "u32", options, replace, what, "sched_act", protocol)


def delete_filter(ifindex: int, direction: str, prio: int, handle: int, kind: str) -> None:
    """Remove one filter; its kind must match, so a different filter in the same place is never removed.

    kind is the tc kind ("bpf" for cls_bpf, "u32"). A u32 priority left
    without filters goes too: the kernel would keep its empty hash table.
    """
    what = _what("delete", "%s filter" % kind, ifindex, direction, prio, handle)
    _check_slot(prio, handle, what)
    parent = _parent(direction)
    with _socket() as ipr:
        if kind == "u32":
            handle = _u32_handle(ifindex, direction, prio, handle, what)
        # Protocol 0: whatever protocol the filter at this prio has.
        msg = _tcmsg(ifindex, parent, handle, _info(prio, 0), attrs=[("TCA_KIND", kind)])
        try:
            _request(ipr, msg, RTM_DELTFILTER, NLM_F_REQUEST | NLM_F_ACK)
        except _Refused as exc:
            reason = _reason(exc)
            hint = ""
            if exc.code == errno.ENOENT:
                hint = "no such filter"
            elif exc.code == errno.EINVAL and "kind" in reason:
                hint = "the filter at prio %d is not a %s filter" % (prio, kind)
            _fail(what, exc, hint)
        if kind == "u32" and not _filters(ifindex, direction, what, prio):
            empty = _tcmsg(ifindex, parent, 0, _info(prio, 0), attrs=[("TCA_KIND", "u32")])
            try:
                _request(ipr, empty, RTM_DELTFILTER, NLM_F_REQUEST | NLM_F_ACK)
            except _Refused as exc:
                if exc.code not in (errno.ENOENT, errno.EINVAL):  # already gone with its last filter
                    _fail("delete the empty u32 prio %d on %s of ifindex %d" % (prio, direction, ifindex), exc)
