# -*- coding: utf-8 -*-
# Copyright (c) ebpf.xdp contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The tc adapter of the converger: one direction of one interface's tc hook.

Private to the ebpf.xdp collection: the interface may change without notice.

Three ways to hold a program there, chosen by `method`:

- tcx: a pinned tcx bpf_link (kernel 6.6+), upgraded with bpf_link_update;
- cls_bpf: a direct-action cls_bpf filter in the clsact qdisc, at a
  priority/handle, upgraded by replacing the filter in place;
- act_bpf: a u32 match-all filter whose action runs the program (loaded as
  a tc action), the action's verdict configurable, replaced in place too;

and auto: tcx where the kernel has it, else cls_bpf (a program already
attached keeps its method). Other tcx programs and other filters on the
hook coexist and are left alone. The clsact qdisc is removed only when the
collection created it (a Record next to the attachments says so) and no
filter is left in it.

Several programs of the collection share one hook as named attachments
(option name; each its own pin directory, record, maps and revisions). On
tcx, before/after place one relative to another program there (an
attachment of ours by its name, any other by its id or name): a new link is
created with BPF_F_BEFORE/BPF_F_AFTER next to it, an upgrade keeps the
place (bpf_link_update), and a program found on the wrong side is moved by
attaching the new link first and detaching the old one (tcx cannot move a
link; for that moment the program runs at both places, never at none).
Filters run in priority order, and each attachment has its own priority.
"""

from __future__ import annotations

import errno
import os
import platform

from ansible_collections.ebpf.xdp.plugins.module_utils.bpf import (
    libbpf as _bpf, loader as _loader, pins as _pins, record as _record)
from ansible_collections.ebpf.xdp.plugins.module_utils.bpf.compile import sha256_file
from ansible_collections.ebpf.xdp.plugins.module_utils.hooks import tc_hooks as _tc_hooks, tc_netlink as _tc_netlink
from ansible_collections.ebpf.xdp.plugins.module_utils.hooks.converge import HookAdapter
from ansible_collections.ebpf.xdp.plugins.module_utils.hooks.observed import (
    Attachment, HELD_BY_LINK, HELD_BY_NETLINK, HookError, Observed)

FILTER_KINDS = {"cls_bpf": "bpf", "act_bpf": "u32"}
CLSACT_RECORD = "clsact"
# The options that place a program among the others on the tcx hook, and the kernel's flag for each.
ORDER_FLAGS = {"before": _bpf.BPF_F_BEFORE, "after": _bpf.BPF_F_AFTER}
# What the kernel keeps of a program's name (BPF_OBJ_NAME_LEN, with its NUL).
PROGRAM_NAME_LENGTH = 15
# What before/after may name, tagged ({attachment: NAME}, {program: NAME}, {id: ID}): an attachment of ebpf.xdp on
# the hook, another program by its name, a program by its id; each looked up as that and nothing else.
ANCHOR_KINDS = ("attachment", "program", "id")


def anchor_of(value) -> tuple[str | None, int | str]:
    """(kind, what) of a before/after value: a tagged one's kind, or None for a plain one (an attachment's name,
    else a program's name, else digits as an id, as before tags existed)."""
    if isinstance(value, dict) and len(value) == 1:
        [(kind, named)] = value.items()
        return kind, named
    return None, value


def anchor_attachment(value) -> str | None:
    """The attachment of ebpf.xdp a before/after value may name (datapath orders its entries by it)."""
    kind, named = anchor_of(value)
    return named if kind in (None, "attachment") and isinstance(named, str) else None


def check_anchor(option: str, value, own_name: str | None) -> None:
    """HookError for a before/after value that names nothing it could (see anchor_of), or this attachment."""
    tags = "{%s}" % ", ".join("%s: ..." % kind for kind in ANCHOR_KINDS)
    if isinstance(value, dict):
        if len(value) != 1 or next(iter(value)) not in ANCHOR_KINDS:
            raise HookError("%s takes one of %s, or a plain name or id, not %r" % (option, tags, value))
        kind, named = anchor_of(value)
        if kind == "id" and (isinstance(named, bool) or not isinstance(named, int) or named <= 0):
            raise HookError("%s: id takes a program's id, a positive integer, not %r" % (option, named))
        if kind != "id" and (not isinstance(named, str) or not named):
            raise HookError("%s: %s takes a name, not %r" % (option, kind, named))
        if kind == "attachment":
            _pins.check_attachment_name(named)
    elif isinstance(value, bool) or not isinstance(value, (int, str)) or value in ("", 0) \
            or isinstance(value, int) and value < 0:
        raise HookError("%s names an attachment of ebpf.xdp on the hook by its name, or another program there by its "
                        "id or its name (or tagged, %s), not %r" % (option, tags, value))
    if own_name is not None and anchor_attachment(value) == own_name:
        raise HookError("%s names this attachment itself; name another program on the hook" % option)


def find_anchor(anchor: int | str | dict, tcx_ids: list[int], own_id: int, siblings: dict[str | None, dict],
                program_name, where: str, option: str) -> int:
    """The id of the program on the tcx hook that before/after (option) names, or HookError saying why none.

    tcx_ids: the hook's programs in run order; own_id: this attachment's program (0: none yet), never an
    anchor; siblings: the records of the collection's other attachments on the hook, by name (None: the unnamed
    one); program_name(id): a program's name as the kernel keeps it. A plain anchor is, in this order: an
    attachment of ours by its name; another program by its name (the collection's own programs left out, so that
    a program name shared with ours still finds the other program); a program by its id (an int, or a string of
    digits). A tagged one (anchor_of) is looked up as what its tag says only.
    """
    def by_id(prog_id: int) -> int:
        if prog_id == own_id:
            raise HookError("%s: %s %d is this attachment's own program; name another program (nothing was changed)"
                            % (where, option, prog_id))
        if prog_id not in tcx_ids:
            raise HookError("%s: %s names program id %d, which is not on it (it holds %s); nothing was changed"
                            % (where, option, prog_id, holding(tcx_ids, program_name)))
        return prog_id

    kind, anchor = anchor_of(anchor)
    if kind == "id" or isinstance(anchor, int):
        return by_id(anchor)
    if kind == "attachment" and anchor not in siblings:
        raise HookError("%s: %s names attachment %s of ebpf.xdp, which is not on it (it holds %s); nothing was changed"
                        % (where, option, anchor, holding(tcx_ids, program_name)))
    if kind != "program" and anchor in siblings:
        record = _record.of(siblings[anchor])
        if record.placement != "tcx" or record.prog_id not in tcx_ids:
            raise HookError("%s: %s names attachment %s of ebpf.xdp, which is not a tcx program there (%s): only tcx "
                            "programs are ordered relative to each other, filters run after them; nothing was changed"
                            % (where, option, anchor, "method %s" % record.placement if record.placement != "tcx"
                               else "not attached"))
        return record.prog_id
    ours = {_record.of(record).prog_id for record in siblings.values()} | {own_id}
    named = [prog_id for prog_id in tcx_ids if prog_id not in ours
             and program_name(prog_id) == anchor[:PROGRAM_NAME_LENGTH]]
    if len(named) == 1:
        return named[0]
    if named:
        raise HookError("%s: %s %r names %d programs there (ids %s): name one by its id; nothing was changed"
                        % (where, option, anchor, len(named), ", ".join(map(str, named))))
    if kind == "program":
        raise HookError("%s: %s names program %r, and no other program there is called so (it holds %s); nothing "
                        "was changed" % (where, option, anchor, holding(tcx_ids, program_name)))
    if anchor.isdigit():
        return by_id(int(anchor))
    raise HookError("%s: %s %r names nothing there: no attachment of ebpf.xdp with that name (name: on its task) "
                    "and no other program called so (it holds %s); nothing was changed"
                    % (where, option, anchor, holding(tcx_ids, program_name)))


def holding(tcx_ids: list[int], program_name) -> str:
    """A tcx hook's programs in words, for messages."""
    return ", ".join("%s (id %d)" % (program_name(prog_id), prog_id) for prog_id in tcx_ids) or "no program"


def in_order(tcx_ids: list[int], own_id: int, option: str, anchor_id: int) -> bool:
    """Whether the program own_id runs before (or after) anchor_id: anywhere on that side, not necessarily next
    to it, so that two attachments placed before one program do not move each other on every run."""
    if own_id not in tcx_ids or anchor_id not in tcx_ids:
        return False
    own, anchor = tcx_ids.index(own_id), tcx_ids.index(anchor_id)
    return own < anchor if option == "before" else own > anchor


def kernel_program_name(prog_id: int) -> str:
    """A program's name as the kernel keeps it; empty for one gone while the hook was read."""
    try:
        with _bpf.Program.from_id(prog_id) as prog:
            return prog.info()["name"]
    except _bpf.BpfError:
        return ""


class TcHook(HookAdapter):
    """One direction of the tc hook of one interface, held by the method the task asks for."""

    kind = "tc"
    hook_dirs = (_pins.hook_dir(kind, "ingress"), _pins.hook_dir(kind, "egress"))
    label = "tc"
    prog_type = "sched_cls"
    module = "tc_program"
    placement_key = "method"
    report_keys = ("method", "direction", "priority", "handle", "protocol", "verdict", "attachment")
    rollback_options = {"requested_method": "method", "requested_priority": "priority",
                        "requested_handle": "handle", "requested_verdict": "verdict"}
    widest_record = dict(direction="x" * 16, priority=2 ** 16, handle=2 ** 32, verdict="x" * 16)

    def __init__(self, ifname: str, ifindex: int, pins: _pins.PinDir, clsact: _pins.Record, direction: str,
                 method: str, priority: int | None = None, handle: int | None = None, verdict: str = "drop",
                 present: bool = True, program: str | None = None, attachment: str | None = None,
                 order: tuple[str, int | str] | None = None):
        self.ifname = ifname
        self.ifindex = ifindex
        self.pins = pins
        self.clsact = clsact
        self.direction = direction
        self.attachment = attachment  # the task's name: one of several attachments on the hook; None: the unnamed
        self.order = order  # ("before" or "after", what it names), or None: wherever the kernel puts it
        self.name = _pins.hook_dir(self.kind, direction, attachment)
        self.requested = method
        self.method = method  # auto is resolved by observe()
        self.priority = priority
        self.handle = handle
        self.verdict = verdict
        self.present = present
        self.program = program
        # What observe() read of the tcx hook for before/after: its programs in run order, ours, the anchor's id.
        self.tcx_ids: list[int] = []
        self.own_id = 0
        self.anchor_id = 0

    @classmethod
    def check_params(cls, params: dict) -> None:
        """What the argument spec cannot say: ranges; verdicts normalised to the names the kernel reports back, so
        that like is compared with like."""
        p = params
        p["verdict"] = {"ok": "pass", "shot": "drop", "unspec": "continue"}.get(p["verdict"], p["verdict"])
        if p["priority"] is not None and not 1 <= p["priority"] <= 0xFFFF:
            raise HookError("priority must be between 1 and 65535, not %d" % p["priority"])
        top = 0xFFF if p["method"] == "act_bpf" else 0xFFFFFFFF
        if p["handle"] is not None and not 1 <= p["handle"] <= top:
            raise HookError("handle must be between 1 and %d for method %s, not %d" % (top, p["method"], p["handle"]))
        if p.get("name") is not None:
            _pins.check_attachment_name(p["name"])
            if p["method"] == "act_bpf":
                raise HookError("name: act_bpf holds one program per hook here; named attachments are tcx programs "
                                "(placed with before/after) or cls_bpf filters (placed by priority)")
        given = [option for option in ORDER_FLAGS if p.get(option) is not None]
        if len(given) > 1:
            raise HookError("before and after are mutually exclusive: give one of them")
        for option in given:
            check_anchor(option, p[option], p.get("name"))
            if p["method"] in FILTER_KINDS:
                raise HookError("%s places a program among the programs of the tcx hook; %s filters run in priority "
                                "order (after every tcx program): give priority instead, lower runs first"
                                % (option, p["method"]))

    @classmethod
    def entry_key(cls, params: dict) -> tuple:
        return (params["netns"], params["interface"], params["direction"], params.get("name"))

    @classmethod
    def describe(cls, key: tuple) -> str:
        return "the tc %s hook of %s" % (key[2], key[1]) + (" (attachment %s)" % key[3] if key[3] else "")

    @classmethod
    def entry_of(cls, record: dict, netns: str | None, ifname: str, directory: str) -> dict:
        entry = super().entry_of(record, netns, ifname, directory)
        hook, attachment = _pins.split_hook_dir(directory)
        entry.update(direction=record.get("direction") or hook[len(cls.kind) + 1:],
                     method=record.get("requested_method") or "auto")
        if attachment:
            entry["name"] = attachment
        for name in ("priority", "handle", "verdict", "before", "after"):
            if record.get("requested_" + name) is not None:
                entry[name] = record["requested_" + name]
        return entry

    @classmethod
    def placed_next_to(cls, params: dict) -> list[str]:
        return [name for name in (anchor_attachment(params.get(option)) for option in ORDER_FLAGS) if name]

    @classmethod
    def unplaced(cls, params: dict) -> dict:
        return dict(params, **dict.fromkeys(ORDER_FLAGS))

    @classmethod
    def from_params(cls, params: dict, ifindex: int, netns_key: str) -> TcHook:
        ifname = params["interface"]
        hook = _pins.hook_dir(cls.kind, params["direction"], params.get("name"))
        pins = _pins.PinDir.for_hook(params["pin_root"], netns_key, ifname, hook)
        clsact = _pins.Record(os.path.join(os.path.dirname(pins.directory), CLSACT_RECORD))
        order = next(((option, params[option]) for option in ORDER_FLAGS if params.get(option) is not None), None)
        return cls(ifname, ifindex, pins, clsact, params["direction"], params["method"], params["priority"],
                   params["handle"], params["verdict"], present=params["state"] == "present",
                   program=cls.named_program(params), attachment=params.get("name"), order=order)

    @staticmethod
    def named_program(params: dict) -> str | None:
        """The function the task names: program, or the one in its section (so that one-program-per-hook holds
        however a task names it)."""
        if not params.get("section") or params["state"] != "present":
            return params.get("program")
        path = params.get("object_source") or params.get("object")
        if params.get("checksum") and path and os.path.isfile(path):
            try:  # libbpf reads no object the task's checksum does not vouch for (the converger then refuses it)
                _loader.verify_checksum(path, sha256_file(path), params["checksum"])
            except _loader.LoadError:
                return None
        return _loader.in_section(path, params["section"])

    @property
    def load_as(self) -> str | None:
        return "sched_act" if self.method == "act_bpf" else None

    # ------------------------------------------------------------ reading and comparing

    def observe(self) -> Observed:
        record = self.pins.record.read()
        self._one_program_per_hook(record)
        self._resolve_method(record)
        programs = _tc_hooks.tc_programs(self.ifindex, self.direction)
        observed = self._find(programs, record)
        if self.present and self.order and self.method == "tcx":
            self._read_order(programs, observed)
        return observed

    def _find(self, programs: list[dict], record: dict | None) -> Observed:
        ours = [p for p in programs if _tc_hooks.tc_owned(p, record)] or self._interrupted(programs, record)
        if ours:
            return _tc_hooks.observe_tc(ours[0], self.direction, record)
        orphan = self._orphan(programs)
        if orphan:
            return _tc_hooks.observe_tc(orphan, self.direction, None)  # Converger.adopt takes it back
        if self.method != "tcx":
            priority, handle = self._spot(record)
            # Another attachment of ours in that place is never this one's to take (refuse() says so).
            theirs = {_record.of(r).prog_id for r in self.siblings().values()}
            there = [p for p in programs if p["method"] in FILTER_KINDS and p["priority"] == priority
                     and self._same_handle(p["handle"], handle) and p["prog_id"] not in theirs]
            if there:
                return _tc_hooks.observe_tc(there[0], self.direction, None)
        return Observed(placement_key="method")

    def siblings(self) -> dict[str | None, _record.OwnershipRecord]:
        """The records of the collection's other attachments on this hook, by name (None: the unnamed one)."""
        if self.pins is None:
            return {}
        found = _pins.hook_attachments(self.pins.pin_root, os.path.dirname(self.pins.directory),
                                       _pins.hook_dir(self.kind, self.direction))
        records = {name: pins.record.read() for name, pins in found.items() if pins.directory != self.pins.directory}
        return {name: record for name, record in records.items() if record}

    def where(self) -> str:
        return "the tcx %s hook of %s" % (self.direction, self.ifname)

    def _read_order(self, programs: list[dict], observed: Observed) -> None:
        """The tcx hook's order and the program before/after names (HookError when it names none)."""
        self.tcx_ids = [p["prog_id"] for p in programs if p["method"] == "tcx"]
        self.own_id = observed.prog_id if observed.owned else 0
        option, anchor = self.order
        self.anchor_id = find_anchor(anchor, self.tcx_ids, self.own_id, self.siblings(), kernel_program_name,
                                     self.where(), option)

    def _one_program_per_hook(self, record: dict | None) -> None:
        """Two tasks naming different programs on one hook would replace each other on every run: refuse."""
        if self.present and record and self.program and record.get("program_name") not in (None, self.program):
            which = "attachment %s of %s %s" % (self.attachment, self.ifname, self.direction) if self.attachment \
                else "%s %s" % (self.ifname, self.direction)
            raise HookError("%s already holds ebpf.xdp program %r (from %s); tc_program manages one program per "
                            "attachment: remove it first (state: absent), upgrade that task, or give this one "
                            "another name (name: several attachments on one hook)"
                            % (which, record["program_name"], record.get("object")))

    def _resolve_method(self, record: dict | None) -> None:
        record = _record.of(record)
        if self.requested == "auto":
            if record and record.placement:
                self.method = record.placement
            else:
                self.method = "tcx" if _tc_hooks.tcx_supported(self.ifindex) else "cls_bpf"
        elif self.requested == "tcx" and self.present and not _tc_hooks.tcx_supported(self.ifindex):
            raise HookError("method: tcx needs tcx links, which Linux has from 6.6; this kernel is %s. "
                            "Use method: cls_bpf, or auto" % platform.release())
        if self.present and self.order and self.method != "tcx":
            option = self.order[0]
            if record and record.placement == self.method:
                raise HookError("%s places a program on the tcx hook, and this attachment is a %s filter (method auto "
                                "keeps the method of an attached program): remove it first (state: absent), or "
                                "place it by priority; nothing was changed" % (option, self.method))
            raise HookError("%s places a program among the programs of the tcx hook, which Linux has from 6.6; this "
                            "kernel is %s. Without tcx, order cls_bpf filters by priority (method: cls_bpf, "
                            "priority: lower runs first); nothing was changed" % (option, platform.release()))

    def _interrupted(self, programs: list[dict], record: dict | None) -> list[dict]:
        """A run interrupted before rewriting the record: our pinned tcx link still proves ownership.

        Without a record at all (killed before the first one was written), the
        link is found here and the converger adopts it (Converger.adopt).
        """
        if not self.pins.has_link() or (record and _record.of(record).placement != "tcx"):
            return []
        with self.pins.open_link() as link:
            info = link.info()
        if record:
            record["prog_id"] = info["prog_id"]
        return [p for p in programs if p.get("link_id") == info["id"]]

    def _orphan(self, programs: list[dict]) -> dict | None:
        """A filter of ours that no record describes (a run killed between its attach and its record): the
        maps pinned in our directory prove it ours. Without this, the next run would not look for it where it
        is but attach a second filter at the first free priority."""
        if not self.pins.exists():
            return None
        for entry in programs:
            try:
                with _bpf.Program.from_id(entry["prog_id"]) as prog:
                    map_ids = prog.info()["map_ids"]
            except _bpf.BpfError:
                continue  # gone while listed
            if self.pins.holds(entry["prog_id"], map_ids):
                return entry
        return None

    def _spot(self, record: dict | None) -> tuple[int, int]:
        """Where our filter goes: as the task says, else where it was, else the first free priority."""
        if self.priority and self.handle:
            return self.priority, self.handle
        record = _record.of(record)
        if record and record.get("priority") and record.placement == self.method:
            return self.priority or record["priority"], self.handle or record["handle"]
        taken = {f["prio"] for f in _tc_netlink.filters(self.ifindex, self.direction)}
        return self.priority or min(set(range(1, len(taken) + 2)) - taken), self.handle or 1

    @staticmethod
    def _same_handle(found: int, wanted: int) -> bool:
        # A u32 handle comes back with its hash table (800::1); the task names the node (1).
        return found == wanted or (not wanted & _tc_netlink.TC_U32_HTID_MASK
                                   and found & _tc_netlink.TC_U32_NODE_MASK == wanted)

    def refuse(self, observed: Observed) -> None:
        if not self.present or self.method == "tcx":
            return
        kind = _tc_netlink.qdisc_kind(self.ifindex)
        if kind not in (None, "clsact"):
            raise HookError("%s has the plain %s qdisc, which clsact (needed for %s) cannot replace; remove it "
                            "with 'tc qdisc del dev %s %s' if nothing needs it, or use method: tcx"
                            % (self.ifname, kind, self.method, self.ifname, kind))
        self._own_priority(observed)
        if observed.owned and not self.in_place(observed):
            # Ours is moving: whoever holds the new place must not be found only after ours is gone.
            priority, handle = self._spot(None)
            for tc_filter in _tc_netlink.filters(self.ifindex, self.direction):
                if tc_filter["prio"] == priority and self._same_handle(tc_filter["handle"], handle):
                    raise HookError("%s %s: priority %d handle %d holds a %s filter that ebpf.xdp did not attach; "
                                    "choose another place (nothing was changed)"
                                    % (self.ifname, self.direction, priority, handle, tc_filter["kind"]))

    def _own_priority(self, observed: Observed) -> None:
        """Each attachment of ours on the hook runs at its own priority: their order is their priorities'."""
        if observed.owned and self.in_place(observed):
            return
        priority = self._spot(None if observed.owned else self.pins.record.read())[0]
        for name, record in self.siblings().items():
            record = _record.of(record)
            if record.placement in FILTER_KINDS and record.get("priority") == priority:
                raise HookError("%s %s: priority %d is taken by %s of ebpf.xdp on this hook; each attachment needs "
                                "a priority of its own (lower runs first): choose another (nothing was changed)"
                                % (self.ifname, self.direction, priority,
                                   "attachment %s" % name if name else "the unnamed attachment"))

    def predict_refusal(self) -> None:
        if self.method == "act_bpf" and not _tc_hooks.act_bpf_available():
            raise HookError(_tc_netlink.NO_ACT_BPF)

    def identity(self) -> dict:
        option, anchor = self.order or (None, None)
        return {"requested_method": self.requested, "direction": self.direction,
                "requested_priority": self.priority, "requested_handle": self.handle,
                "requested_verdict": self.verdict if self.method == "act_bpf" else None,
                "attachment": self.attachment, "requested_before": anchor if option == "before" else None,
                "requested_after": anchor if option == "after" else None}

    def in_place(self, observed: Observed) -> bool:
        """Same method and, for filters, the place the task names (or any, when it names none) and protocol all."""
        if observed.placement != self.method:
            return False
        if self.method == "tcx":
            return not self.order or not self.anchor_id or observed.prog_id != self.own_id \
                or in_order(self.tcx_ids, self.own_id, self.order[0], self.anchor_id)
        if observed.extra.get("protocol", "all") != "all":
            return False  # tc keeps one protocol per priority: ours (all) cannot replace it there in one step
        priority, handle = observed.extra.get("priority"), observed.extra.get("handle")
        return self.priority in (None, priority) and (self.handle is None or self._same_handle(handle, self.handle))

    def settled(self, observed: Observed) -> bool:
        return self.in_place(observed) and (self.method != "act_bpf" or observed.extra.get("verdict") == self.verdict)

    def planned_placement(self, observed: Observed) -> str:
        return self.method

    def movable(self, observed: Observed) -> bool:
        """Ours on the tcx hook, on the wrong side of its anchor: a new link goes to the place, then the old goes."""
        return self.method == "tcx" and observed.placement == "tcx" and observed.owned \
            and observed.holder == HELD_BY_LINK

    def switch_reason(self, observed: Observed) -> str:
        if observed.placement != self.method:
            return "method"
        if self.method == "tcx":
            return "place (%s %s)" % self.order if self.order and observed.owned else "from a foreign link"
        if observed.extra.get("protocol", "all") != "all":
            return "protocol (%s to all)" % observed.extra["protocol"]
        return "place (priority/handle)"

    # ------------------------------------------------------------ acting

    def attach(self, prog: _bpf.Program) -> Attachment:
        if self.method == "tcx":
            return Attachment(HELD_BY_LINK, "tcx", self.pin_link(self._tcx_link(prog)), {"direction": self.direction})
        created = self._ensure_clsact()
        try:
            return self._put_filter(prog, self.method, self._spot(self.pins.record.read()), replace=False)
        except Exception:
            if created:
                self.cleanup()
            raise

    def _tcx_link(self, prog: _bpf.Program, placed: bool = True) -> _bpf.Link:
        """A new tcx link for prog: next to what before/after names (placed), else where the kernel appends."""
        attach_type = _tc_hooks.TC_DIRECTIONS[self.direction]
        if not (placed and self.order):
            return _bpf.Link.create_tcx(prog, self.ifindex, attach_type)
        # The hook read again, at the revision the link is created against: a program added or removed meanwhile
        # (by another tool) makes the kernel refuse (ESTALE) rather than place ours next to the wrong one.
        hook = _bpf.tcx_query(self.ifindex, attach_type)
        option, anchor = self.order
        anchor_id = find_anchor(anchor, hook["prog_ids"], self.own_id, self.siblings(), kernel_program_name,
                                self.where(), option)
        try:
            return _bpf.Link.create_tcx(prog, self.ifindex, attach_type, flags=ORDER_FLAGS[option],
                                        relative_id=anchor_id, expected_revision=hook["revision"])
        except _bpf.BpfError as exc:
            if exc.errno == errno.ESTALE:
                raise HookError("%s changed while this task placed its program there (another program came or "
                                "went); nothing was changed: run the task again" % self.where()) from exc
            raise

    def _ensure_clsact(self) -> bool:
        """The clsact qdisc for filters; created ones are recorded (with the ifindex: names get reused)."""
        if not _tc_netlink.ensure_clsact(self.ifindex):
            return False
        self.clsact.write({"created_by": "ebpf.xdp", "ifname": self.ifname, "ifindex": self.ifindex})
        return True

    def _put_filter(self, prog: _bpf.Program, method: str, spot: tuple[int, int], replace: bool,
                    protocol: str = "all") -> Attachment:
        priority, handle = spot
        number = _tc_netlink.protocol_number(protocol)
        if method == "cls_bpf":
            _tc_netlink.attach_cls_bpf(self.ifindex, self.direction, prog.fd, prog.label, priority, handle,
                                       replace=replace, protocol=number)
        else:
            # The u32 node only: the kernel numbers a priority's hash table itself, anew when it re-creates it.
            handle &= _tc_netlink.TC_U32_NODE_MASK
            _tc_netlink.attach_act_bpf(self.ifindex, self.direction, prog.fd, prog.label, priority, handle,
                                       verdict=self.verdict, replace=replace, protocol=number)
        placed = [f for f in _tc_netlink.filters(self.ifindex, self.direction)
                  if f["prio"] == priority and self._same_handle(f["handle"], handle)]
        extra = {"direction": self.direction, "priority": priority, "handle": placed[0]["handle"] if placed else handle,
                 "protocol": protocol}
        if method == "act_bpf":
            extra["verdict"] = self.verdict
        return Attachment(HELD_BY_NETLINK, method, None, extra)

    def replace(self, observed: Observed, prog: _bpf.Program) -> Attachment:
        """Swap the program of the filter in its place: the hook is never without it."""
        return self._put_filter(prog, self.method, (observed.extra["priority"], observed.extra["handle"]),
                                replace=True)

    def detach(self, observed: Observed) -> None:
        """Take the program off; the clsact stays until cleanup(), so a failed switch can put it back."""
        if observed.holder == HELD_BY_LINK:
            self.detach_link(observed)
        else:
            _tc_netlink.delete_filter(self.ifindex, self.direction, observed.extra["priority"],
                                      observed.extra["handle"], FILTER_KINDS[observed.placement])

    def restore(self, observed: Observed, old: _bpf.Program) -> None:
        """Put back a program detached by a failed switch, where and as it was held.

        A foreign tcx program is never in our place; a foreign filter is
        replaced in place, unless it is for one protocol only: then it is
        deleted and ours added, and on failure it comes back as it was.
        """
        if observed.holder == HELD_BY_LINK:
            try:
                self.pin_link(self._tcx_link(old))
            except HookError:
                self.pin_link(self._tcx_link(old, placed=False))  # its place is gone: on the hook all the same
            return
        self._ensure_clsact()
        self._put_filter(old, observed.placement, (observed.extra["priority"], observed.extra["handle"]), replace=False,
                         protocol=observed.extra.get("protocol", "all"))

    def cleanup(self) -> None:
        """Remove the clsact qdisc we created once no filter is left in it, in either direction."""
        record = self.clsact.read()
        if not record:
            return
        if record.get("ifindex") != self.ifindex or _tc_netlink.qdisc_kind(self.ifindex) != "clsact":
            self.clsact.remove()  # the interface was re-created since: that clsact is not the one we made
            return
        if not any(_tc_netlink.filters(self.ifindex, d) for d in ("ingress", "egress")):
            _tc_netlink.delete_clsact(self.ifindex)
            self.clsact.remove()
