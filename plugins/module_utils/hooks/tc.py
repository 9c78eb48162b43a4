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
"""

from __future__ import annotations

import os
import platform

from ansible_collections.ebpf.xdp.plugins.module_utils.bpf import libbpf as _bpf, pins as _pins
from ansible_collections.ebpf.xdp.plugins.module_utils.hooks import tc_hooks as _tc_hooks, tc_netlink as _tc_netlink
from ansible_collections.ebpf.xdp.plugins.module_utils.hooks.converge import HookAdapter, register
from ansible_collections.ebpf.xdp.plugins.module_utils.hooks.observed import (
    Attachment, HELD_BY_LINK, HELD_BY_NETLINK, HookError, Observed)

FILTER_KINDS = {"cls_bpf": "bpf", "act_bpf": "u32"}
CLSACT_RECORD = "clsact"


@register
class TcHook(HookAdapter):
    """One direction of the tc hook of one interface, held by the method the task asks for."""

    kind = "tc"
    label = "tc"
    prog_type = "sched_cls"
    placement_key = "method"
    report_keys = ("method", "direction", "priority", "handle", "protocol", "verdict")

    def __init__(self, ifname: str, ifindex: int, pins: _pins.PinDir, clsact: _pins.Record, direction: str,
                 method: str, priority: int | None = None, handle: int | None = None, verdict: str = "drop",
                 present: bool = True, program: str | None = None):
        self.ifname = ifname
        self.ifindex = ifindex
        self.pins = pins
        self.clsact = clsact
        self.direction = direction
        self.name = _pins.hook_dir(self.kind, direction)
        self.requested = method
        self.method = method  # auto is resolved by observe()
        self.priority = priority
        self.handle = handle
        self.verdict = verdict
        self.present = present
        self.program = program

    @staticmethod
    def check_params(p: dict) -> None:
        """What the argument spec cannot say: ranges; verdicts normalised to the names the kernel reports back, so
        that like is compared with like."""
        p["verdict"] = {"ok": "pass", "shot": "drop", "unspec": "continue"}.get(p["verdict"], p["verdict"])
        if p["priority"] is not None and not 1 <= p["priority"] <= 0xFFFF:
            raise HookError("priority must be between 1 and 65535, not %d" % p["priority"])
        top = 0xFFF if p["method"] == "act_bpf" else 0xFFFFFFFF
        if p["handle"] is not None and not 1 <= p["handle"] <= top:
            raise HookError("handle must be between 1 and %d for method %s, not %d" % (top, p["method"], p["handle"]))

    @classmethod
    def from_params(cls, params: dict, ifindex: int, netns_key: str) -> TcHook:
        ifname = params["interface"]
        hook = _pins.hook_dir(cls.kind, params["direction"])
        pins = _pins.PinDir.for_hook(params["pin_root"], netns_key, ifname, hook)
        clsact = _pins.Record(os.path.join(os.path.dirname(pins.directory), CLSACT_RECORD))
        return cls(ifname, ifindex, pins, clsact, params["direction"], params["method"], params["priority"],
                   params["handle"], params["verdict"], present=params["state"] == "present",
                   program=params["program"])

    @property
    def load_as(self) -> str | None:
        return "sched_act" if self.method == "act_bpf" else None

    # ------------------------------------------------------------ reading and comparing

    def observe(self) -> Observed:
        record = self.pins.record.read()
        self._one_program_per_hook(record)
        self._resolve_method(record)
        programs = _tc_hooks.tc_programs(self.ifindex, self.direction)
        ours = [p for p in programs if _tc_hooks.tc_owned(p, record)] or self._interrupted(programs, record)
        if ours:
            return _tc_hooks.observe_tc(ours[0], self.direction, record)
        orphan = self._orphan(programs)
        if orphan:
            return _tc_hooks.observe_tc(orphan, self.direction, None)  # Converger.adopt takes it back
        if self.method != "tcx":
            priority, handle = self._spot(record)
            there = [p for p in programs if p["method"] in FILTER_KINDS and p["priority"] == priority
                     and self._same_handle(p["handle"], handle)]
            if there:
                return _tc_hooks.observe_tc(there[0], self.direction, None)
        return Observed(placement_key="method")

    def _one_program_per_hook(self, record: dict | None) -> None:
        """Two tasks naming different programs on one hook would replace each other on every run: refuse."""
        if self.present and record and self.program and record.get("program_name") not in (None, self.program):
            raise HookError("%s %s already holds ebpf.xdp program %r (from %s); tc_program manages one program per "
                            "interface and direction: remove it first (state: absent), or upgrade that task"
                            % (self.ifname, self.direction, record["program_name"], record.get("object")))

    def _resolve_method(self, record: dict | None) -> None:
        if self.requested == "auto":
            if record and record.get("mode"):
                self.method = record["mode"]
            else:
                self.method = "tcx" if _tc_hooks.tcx_supported(self.ifindex) else "cls_bpf"
        elif self.requested == "tcx" and self.present and not _tc_hooks.tcx_supported(self.ifindex):
            raise HookError("method: tcx needs tcx links, which Linux has from 6.6; this kernel is %s. "
                            "Use method: cls_bpf, or auto" % platform.release())

    def _interrupted(self, programs: list[dict], record: dict | None) -> list[dict]:
        """A run interrupted before rewriting the record: our pinned tcx link still proves ownership.

        Without a record at all (killed before the first one was written), the
        link is found here and the converger adopts it (Converger.adopt).
        """
        if not self.pins.has_link() or (record and record.get("mode") != "tcx"):
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
        if record and record.get("priority") and record.get("mode") == self.method:
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
        if observed.owned and not self.in_place(observed):
            # Ours is moving: whoever holds the new place must not be found only after ours is gone.
            priority, handle = self._spot(None)
            for tc_filter in _tc_netlink.filters(self.ifindex, self.direction):
                if tc_filter["prio"] == priority and self._same_handle(tc_filter["handle"], handle):
                    raise HookError("%s %s: priority %d handle %d holds a %s filter that ebpf.xdp did not attach; "
                                    "choose another place (nothing was changed)"
                                    % (self.ifname, self.direction, priority, handle, tc_filter["kind"]))

    def predict_refusal(self) -> None:
        if self.method == "act_bpf" and not _tc_hooks.act_bpf_available():
            raise HookError(_tc_netlink.NO_ACT_BPF)

    def identity(self) -> dict:
        return {"requested_method": self.requested, "direction": self.direction,
                "requested_priority": self.priority, "requested_handle": self.handle,
                "requested_verdict": self.verdict if self.method == "act_bpf" else None}

    def in_place(self, observed: Observed) -> bool:
        """Same method and, for filters, the place the task names (or any, when it names none) and protocol all."""
        if observed.placement != self.method:
            return False
        if self.method == "tcx":
            return True
        if observed.extra.get("protocol", "all") != "all":
            return False  # tc keeps one protocol per priority: ours (all) cannot replace it there in one step
        priority, handle = observed.extra.get("priority"), observed.extra.get("handle")
        return self.priority in (None, priority) and (self.handle is None or self._same_handle(handle, self.handle))

    def settled(self, observed: Observed) -> bool:
        return self.in_place(observed) and (self.method != "act_bpf" or observed.extra.get("verdict") == self.verdict)

    def planned_placement(self, observed: Observed) -> str:
        return self.method

    def switch_reason(self, observed: Observed) -> str:
        if observed.placement != self.method:
            return "method"
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

    def _tcx_link(self, prog: _bpf.Program) -> _bpf.Link:
        return _bpf.Link.create_tcx(prog, self.ifindex, _tc_hooks.TC_DIRECTIONS[self.direction])

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
            self.pin_link(self._tcx_link(old))
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
