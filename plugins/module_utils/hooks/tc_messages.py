# -*- coding: utf-8 -*-
# Copyright (c) ebpf.xdp contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""tc's netlink messages as pyroute2 classes, and the one call that sends them.

Private to the ebpf.xdp collection: the interface may change without notice.

Only hooks/tc_netlink imports this file, and only when it talks to the
kernel about tc (a filter dump or a write): importing pyroute2 costs a
module run ~0.3 s here and seconds on an emulated host, which a run that
never touches tc filters (XDP, facts of an interface without filters) does
not pay. What differs between pyroute2 0.7 and 0.9, and what both get
wrong, is said in tc_netlink's docstring.
"""

from __future__ import annotations

import socket

try:
    from pyroute2.netlink import NLA_F_NESTED, nla, nlmsg
    from pyroute2.netlink.exceptions import NetlinkError
except ImportError:
    # The classes below stay importable; a module that needs them has failed already, naming pyroute2
    # (_common.require_libraries).
    nla = nlmsg = object
    NLA_F_NESTED = 1 << 15
    NetlinkError = OSError


# ---------------------------------------------------------------- message classes
#
# One set of classes encodes requests and decodes answers, attributes in the
# order of the uapi enums (the position is the type). C structures travel as
# cdata, packed and unpacked with struct next to the code that uses them, so
# no pyroute2 struct helper is involved (its u32 selector misreads the keys).


class ActBpfOptions(nla):
    nla_flags = NLA_F_NESTED  # as tc sends TCA_ACT_OPTIONS
    nla_map = (
        ("TCA_ACT_BPF_UNSPEC", "none"),
        ("TCA_ACT_BPF_TM", "cdata"),
        ("TCA_ACT_BPF_PARMS", "cdata"),
        ("TCA_ACT_BPF_OPS_LEN", "uint16"),
        ("TCA_ACT_BPF_OPS", "cdata"),
        ("TCA_ACT_BPF_FD", "uint32"),
        ("TCA_ACT_BPF_NAME", "asciiz"),
        ("TCA_ACT_BPF_PAD", "none"),
        ("TCA_ACT_BPF_TAG", "cdata"),
        ("TCA_ACT_BPF_ID", "uint32"),
    )


class Action(nla):
    nla_map = (
        ("TCA_ACT_UNSPEC", "none"),
        ("TCA_ACT_KIND", "asciiz"),
        ("TCA_ACT_OPTIONS", "get_act_options"),
        ("TCA_ACT_INDEX", "uint32"),
        ("TCA_ACT_STATS", "cdata"),
    )

    @staticmethod
    def get_act_options(action, *argv, **kwarg):
        # pyroute2 asks the message being decoded which class its options are.
        return ActBpfOptions if action.get_attr("TCA_ACT_KIND") == "bpf" else action.cdata


class Actions(nla):
    # TCA_ACT_PRIO_1 .. TCA_ACT_PRIO_32: the attribute type is the action's order.
    nla_map = tuple(("TCA_ACT_PRIO_%d" % i, "action") for i in range(33))
    action = Action


class BpfOptions(nla):
    nla_map = (
        ("TCA_BPF_UNSPEC", "none"),
        ("TCA_BPF_ACT", "actions"),
        ("TCA_BPF_POLICE", "cdata"),
        ("TCA_BPF_CLASSID", "uint32"),
        ("TCA_BPF_OPS_LEN", "uint16"),
        ("TCA_BPF_OPS", "cdata"),
        ("TCA_BPF_FD", "uint32"),
        ("TCA_BPF_NAME", "asciiz"),
        ("TCA_BPF_FLAGS", "uint32"),
        ("TCA_BPF_FLAGS_GEN", "uint32"),
        ("TCA_BPF_TAG", "cdata"),
        ("TCA_BPF_ID", "uint32"),
    )
    actions = Actions


class U32Options(nla):
    nla_map = (
        ("TCA_U32_UNSPEC", "none"),
        ("TCA_U32_CLASSID", "uint32"),
        ("TCA_U32_HASH", "uint32"),
        ("TCA_U32_LINK", "uint32"),
        ("TCA_U32_DIVISOR", "uint32"),
        ("TCA_U32_SEL", "cdata"),
        ("TCA_U32_POLICE", "cdata"),
        ("TCA_U32_ACT", "actions"),
        ("TCA_U32_INDEV", "asciiz"),
        ("TCA_U32_PCNT", "cdata"),
        ("TCA_U32_MARK", "cdata"),
        ("TCA_U32_FLAGS", "uint32"),
    )
    actions = Actions


class TcMsg(nlmsg):
    prefix = "TCA_"
    fields = (
        ("family", "B"),
        ("pad1", "B"),
        ("pad2", "H"),
        ("index", "i"),
        ("handle", "I"),
        ("parent", "I"),
        ("info", "I"),
    )
    nla_map = (
        ("TCA_UNSPEC", "none"),
        ("TCA_KIND", "asciiz"),
        ("TCA_OPTIONS", "get_options"),
        ("TCA_STATS", "cdata"),
        ("TCA_XSTATS", "cdata"),
        ("TCA_RATE", "cdata"),
        ("TCA_FCNT", "cdata"),
        ("TCA_STATS2", "cdata"),
        ("TCA_STAB", "cdata"),
        ("TCA_PAD", "none"),
        ("TCA_DUMP_INVISIBLE", "none"),
        ("TCA_CHAIN", "uint32"),
    )

    @staticmethod
    def get_options(msg, *argv, **kwarg):
        return {"bpf": BpfOptions, "u32": U32Options}.get(msg.get_attr("TCA_KIND"), msg.cdata)


def tcmsg(ifindex: int, parent: int, handle: int = 0, info: int = 0, attrs=()) -> TcMsg:
    msg = TcMsg()
    # pyroute2 0.7 starts every field at 0, 0.9 leaves them unset: set them all.
    msg["family"] = socket.AF_UNSPEC
    msg["pad1"] = msg["pad2"] = 0
    msg["index"] = ifindex
    msg["handle"] = handle
    msg["parent"] = parent
    msg["info"] = info
    msg["attrs"] = [list(a) for a in attrs]
    return msg


def request(ipr, msg: TcMsg, msg_type: int, flags: int) -> list:
    """The kernel's answers to msg; NetlinkError when it says no."""
    return list(ipr.nlm_request(msg, msg_type=msg_type, msg_flags=flags))


def ext_ack(exc: NetlinkError) -> str:
    """The kernel's extended ack message of a refusal (NetlinkError's second argument, 0.7 and 0.9 alike)."""
    args = getattr(exc, "args", ())
    return args[1] if len(args) > 1 and isinstance(args[1], str) else ""


def decoded(answer) -> TcMsg:
    """An answer decoded again with these classes, which know every attribute tc_netlink reads."""
    # Both versions keep the received buffer and the message's place in it.
    again = TcMsg(answer.data, offset=answer.offset, length=answer.length)
    again.decode()
    return again
