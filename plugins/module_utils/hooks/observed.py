# -*- coding: utf-8 -*-
# Copyright (c) ebpf.xdp contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""What a hook holds now, read-only: the converger's "before" and the facts both read it here.

Private to the ebpf.xdp collection: the interface may change without notice.

A hook's state is read once into an Observed value and reported through
report(), the one place that says how an attachment looks in a result, a
diff or the facts.
"""

from __future__ import annotations

import copy
import dataclasses

from ansible_collections.ebpf.xdp.plugins.module_utils.host import netlink as _netlink, session as _session
from ansible_collections.ebpf.xdp.plugins.module_utils.bpf import (
    libbpf as _bpf, libxdp as _libxdp, pins as _pins, record as _record)
from ansible_collections.ebpf.xdp.plugins.module_utils.hooks import revisions as _revisions
from ansible_collections.ebpf.xdp.plugins.module_utils._errors import EbpfXdpError

OWNER = "ebpf.xdp"
UNMANAGED = "unmanaged"

# How a program is held on its hook.
HELD_BY_LINK = "link"
HELD_BY_NETLINK = "netlink"
# One of the programs libxdp's dispatcher runs (its freplace link pinned by libxdp, see hooks.xdp_dispatcher).
HELD_BY_DISPATCHER = "dispatcher"


class HookError(EbpfXdpError):
    """A hook in a state the collection will not change, or a change the hook cannot take."""


@dataclasses.dataclass
class Observed:
    """One hook's program as read from the kernel, with our record when the record describes it.

    placement is how the program sits on the hook, in the hook's own word:
    XDP's mode (native, generic), tc's method (tcx, cls_bpf, act_bpf); holder
    says what keeps it there (HELD_BY_LINK, HELD_BY_NETLINK), as the record
    (bpf/record) names them too. Results keep their keys: the placement under
    the hook's word (placement_key), the holder under "attach".
    """

    prog_id: int = 0
    name: str | None = None
    tag: str | None = None
    placement: str | None = None
    holder: str | None = None
    link_id: int | None = None
    record: _record.OwnershipRecord | None = None
    map_ids: list[int] = dataclasses.field(default_factory=list)
    # Where on the hook, for hooks with more than one place (tc: direction, priority, handle, verdict).
    extra: dict = dataclasses.field(default_factory=dict)
    # What the placement is called in results and facts: XDP has a mode, tc a method.
    placement_key: str = "mode"

    def __post_init__(self):
        self.record = _record.of(self.record)

    @property
    def attached(self) -> bool:
        return bool(self.prog_id)

    @property
    def owned(self) -> bool:
        return self.record is not None


@dataclasses.dataclass
class Attachment:
    """What putting a program on a hook gave: what holds it, its placement, through which link."""

    holder: str
    placement: str | None
    link_id: int | None
    extra: dict = dataclasses.field(default_factory=dict)
    # The program on the hook when the hook loaded a copy of its own instead of the one given (libxdp loads a
    # dispatcher's program as a freplace program); the caller closes it.
    program: _bpf.Program | None = None

    def as_record(self) -> dict:
        return dict(self.extra, **_record.stored(holder=self.holder, placement=self.placement, link_id=self.link_id))


def report(observed: Observed) -> dict:
    """The state a module result, a diff or the facts show for one hook."""
    if not observed.attached:
        return {"attached": False}
    state = {"attached": True, "id": observed.prog_id, "name": observed.name, "tag": observed.tag,
             observed.placement_key: observed.placement, "attach": observed.holder, "link_id": observed.link_id,
             "owner": OWNER if observed.owned else UNMANAGED}
    state.update(observed.extra)
    record = observed.record
    if record:
        if record.attachment:
            state["attachment"] = record.attachment  # one of several of ours on the hook (tc's option name)
        state.update(object=record.get("object"), object_sha256=record.get("object_sha256"),
                     program=record.get("program_name"), constants=record.get("constants", {}),
                     **_revisions.report(record, observed.placement_key))
        if record.get("section"):
            state["section"] = record["section"]  # the program was chosen by its SEC() name (program: its function)
        if record.get("backend") == "bcc":
            state.update(backend="bcc", source=record.get("source"), source_sha256=record.get("source_sha256"),
                         cflags=record.get("cflags", []), kernel_release=record.get("kernel_release"))
    return state


def ownership(pins: _pins.PinDir, prog_id: int) -> _record.OwnershipRecord | None:
    """Our record when it describes the live program, else None.

    A run interrupted between swapping the program and rewriting the record
    leaves an older prog_id in it; the pinned link still proves ownership then.
    """
    record = pins.record.read()
    if not record or not prog_id:
        return None
    if record.prog_id == prog_id:
        return record
    if record.holder == HELD_BY_LINK and pins.has_link():
        with pins.open_link() as link:
            info = link.info()
        if info["prog_id"] == prog_id:
            return record.but(prog_id=prog_id, link_id=info["id"])
    return None


def _pinned_link_id(pins: _pins.PinDir) -> int:
    with pins.open_link() as link:
        return link.info()["id"]


def find_link(ifindex: int, prog_id: int, attach_type: str) -> int | None:
    """The id of the bpf_link that holds prog_id at attach_type on ifindex, or None."""
    for info in _bpf.links():
        if info["attach_type"] == attach_type and info["ifindex"] == ifindex and info["prog_id"] == prog_id:
            return info["id"]
    return None


# ---------------------------------------------------------------- XDP


def xdp_state(ifindex: int) -> dict:
    """What IFLA_XDP says of one interface, read once per host session until its hook is written: from one
    RTM_GETLINK dump of the namespace for every interface there (libbpf's bpf_xdp_query dumps every link to find
    one: a task over N interfaces read N x N links), or, for a hook this run wrote (or outside a session), from
    _bpf.xdp_query."""
    def read():
        if not _session.wrote_to(ifindex):
            found = _session.dump(("links",), lambda: {link["ifindex"]: link["xdp"] for link in _netlink.interfaces()})
            if ifindex in found:
                return found[ifindex]
        return _bpf.xdp_query(ifindex)
    return _session.hook("xdp", ifindex, read)


def dispatcher_chain(ifindex: int) -> dict | None:
    """libxdp's dispatcher on one interface (_libxdp.dispatcher_chain), read once per host session until its hook
    is written; a copy of its own for each caller."""
    return copy.deepcopy(_session.hook("chain", ifindex, lambda: _libxdp.dispatcher_chain(ifindex)))


def xdp_live(xdp: dict) -> tuple[int, str | None]:
    """(prog_id, mode) of what IFLA_XDP says (as _bpf.xdp_query or _netlink reads it); (0, None) for nothing."""
    prog_id = xdp["prog_id"] or xdp["native_prog_id"] or xdp["generic_prog_id"]
    mode = xdp["mode"]
    if mode == "multi":
        mode = "native" if xdp["native_prog_id"] else "generic"
    return prog_id, mode


def observe_xdp(ifindex: int, xdp: dict, pins: _pins.PinDir) -> Observed:
    """The XDP hook of one interface, from its IFLA_XDP state."""
    prog_id, mode = xdp_live(xdp)
    if not prog_id:
        return Observed()
    link_id = None
    record = ownership(pins, prog_id)
    if record and record.holder == HELD_BY_LINK and pins.has_link():
        # The record (or ownership(), from the pin) names the link that holds this very program.
        link_id = record.link_id or _pinned_link_id(pins)
    elif not record or record.holder != HELD_BY_NETLINK:
        link_id = find_link(ifindex, prog_id, "xdp")
    info = _bpf.program_info(prog_id)
    return Observed(prog_id=prog_id, name=info["name"], tag=info["tag"], placement=mode, link_id=link_id,
                    holder=HELD_BY_LINK if link_id else HELD_BY_NETLINK, record=record, map_ids=info["map_ids"])
