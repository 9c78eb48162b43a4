# -*- coding: utf-8 -*-
# Copyright (c) ebpf.xdp contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The XDP adapter for a named attachment: one program among several that libxdp's dispatcher runs.

Private to the ebpf.xdp collection: the interface may change without notice.

A named XDP attachment (xdp_program's name) joins the interface's libxdp
dispatcher, as xdp-loader's programs do (see _libxdp): libxdp loads the
program as a freplace program into a slot of a new dispatcher that runs it
with the others in priority order, and swaps that dispatcher in atomically;
the other programs keep running through the swap, with their ids and maps.
An upgrade attaches the new program first and then detaches the old one, so
the hook never runs without it (for that moment frames it passes on may meet
both). Programs of other tools on the dispatcher are left alone; a program
attached to the interface on its own (without the dispatcher) is refused.
Where the kernel cannot run the dispatcher, nothing is changed and the task
says why: never a quiet fallback to one program per interface, which is what
libxdp itself would do.
"""

from __future__ import annotations

import errno
import os
import time
from typing import Callable

from ansible_collections.ebpf.xdp.plugins.module_utils.bpf import (
    libbpf as _bpf, libxdp as _libxdp, loader as _loader, pins as _pins)
from ansible_collections.ebpf.xdp.plugins.module_utils.hooks import observed as _observed
from ansible_collections.ebpf.xdp.plugins.module_utils.hooks.observed import (
    Attachment, HELD_BY_DISPATCHER, HookError, Observed)

DEFAULT_PRIORITY = 50  # libxdp's default run priority (XDP_DEFAULT_RUN_PRIO)
DEFAULT_ACTIONS = ["pass"]  # libxdp's default chain call actions


class XdpDispatcherHook:
    """Mixed into the XDP adapter (hooks.xdp) for a named attachment; see the module docstring."""

    ifname: str
    ifindex: int
    pins: _pins.PinDir
    mode: str
    refuse_generic_egress: Callable[[], None]

    def setup_dispatcher(self, params: dict) -> None:
        self.attachment = params["name"]
        self.priority = DEFAULT_PRIORITY if params.get("priority") is None else params["priority"]
        given = params.get("chain_call_actions") or DEFAULT_ACTIONS
        self.actions = [name for name in _libxdp.XDP_ACTIONS.values() if name in given]  # libxdp's order
        self.present = params["state"] == "present"
        self.object_path = params.get("object_source") or params.get("object")  # a rollback's: from the store
        self.pending: _loader.Loaded | None = None
        self._notes: list[str] = []

    @staticmethod
    def check_dispatcher_params(p: dict) -> None:
        """What the argument spec cannot say about a named XDP attachment's options."""
        if p.get("name") is None:
            given = [option for option in ("priority", "chain_call_actions") if p.get(option) is not None]
            if given:
                raise HookError("%s: only a named attachment (name:) runs through libxdp's dispatcher, where programs "
                                "have a priority and chain call actions; give it a name" % ", ".join(given))
            return
        _pins.check_attachment_name(p["name"])
        if p.get("priority") is not None and not 0 <= p["priority"] <= 0x7FFFFFFF:
            raise HookError("priority must be between 0 and 2147483647, not %d" % p["priority"])
        if p.get("backend", "libbpf") != "libbpf":
            raise HookError("name: libxdp's dispatcher loads the program from its object; backend %s is not "
                            "available for a named XDP attachment" % p["backend"])

    # ------------------------------------------------------------ reading and comparing

    def chain(self) -> dict | None:
        return _observed.dispatcher_chain(self.ifindex)

    def observe(self) -> Observed:
        """Our program among the dispatcher's: the one our record names or, left by a run killed between the
        attach and the record, one that uses the maps pinned in our maps/ (Converger.adopt takes it back)."""
        record = self.pins.record.read()
        chain = self.chain() if _libxdp.available() and self.pins.exists() else None
        orphan = None
        for component in (chain or {}).get("programs", []):
            info = _bpf.program_info(component["id"])
            found = Observed(prog_id=component["id"], name=info["name"], tag=info["tag"], placement=chain["mode"],
                             holder=HELD_BY_DISPATCHER, map_ids=info["map_ids"],
                             extra={"priority": component["priority"],
                                    "chain_call_actions": component["chain_call_actions"],
                                    "attachment": self.attachment})
            if record and component["id"] == record.get("prog_id"):
                found.record = record
                return found
            if orphan is None and self.pins.holds(component["id"], info["map_ids"]):
                orphan = found
        return orphan or Observed()

    def refuse(self, observed: Observed) -> None:  # pylint: disable=unused-argument
        if self.present:
            self._refuse_dispatcher()
            self.refuse_generic_egress()

    def _refuse_dispatcher(self) -> None:
        """What stops a named attachment before anything changes: a kernel (or host) where libxdp's dispatcher
        cannot work, a program attached alone, a dispatcher in the other mode or full."""
        reason = _libxdp.dispatcher_refusal()
        if reason:
            raise HookError("%s: attachment %s needs libxdp's dispatcher, which cannot work here: %s. Nothing was "
                            "changed (an unnamed attachment holds one program per interface)"
                            % (self.ifname, self.attachment, reason))
        if self.object_path and os.path.isfile(self.object_path):
            with _bpf.BpfObject(self.object_path) as obj:
                if not obj.has_btf():
                    raise HookError("%s has no BTF, which libxdp's dispatcher needs to run its program as attachment "
                                    "%s (compile it with -g, as ebpf.xdp.bpf_object does); nothing was changed"
                                    % (self.object_path, self.attachment))
        prog_id, _mode = _observed.xdp_live(_observed.xdp_state(self.ifindex))
        chain = self.chain()
        if prog_id and chain is None:
            with _bpf.Program.from_id(prog_id) as prog:
                name = prog.info()["name"]
            raise HookError("%s has XDP program %r (id %d) attached on its own, not through libxdp's dispatcher: "
                            "attachment %s cannot run beside it. Remove it (or attach it through the dispatcher: a "
                            "named attachment, or xdp-loader); nothing was changed"
                            % (self.ifname, name, prog_id, self.attachment))
        if not chain:
            return
        others = [p for p in chain["programs"] if p["id"] != (self.pins.record.read() or {}).get("prog_id")]
        if self.mode != "auto" and others and chain["mode"] != self.mode:
            raise HookError("libxdp's dispatcher on %s runs in %s mode (%s): attachment %s cannot run there in %s "
                            "mode; nothing was changed" % (self.ifname, chain["mode"], programs_in_words(others),
                                                           self.attachment, self.mode))
        if len(others) >= _libxdp.MAX_PROGRAMS:
            raise HookError("libxdp's dispatcher on %s already runs %d programs, its most (%s): attachment %s cannot "
                            "join; nothing was changed"
                            % (self.ifname, len(others), programs_in_words(others), self.attachment))

    def identity(self) -> dict:
        return {"requested_mode": self.mode, "attachment": self.attachment, "requested_priority": self.priority,
                "requested_chain_call_actions": self.actions}

    def in_place(self, observed: Observed) -> bool:
        return self.mode in ("auto", observed.placement)

    def settled(self, observed: Observed) -> bool:
        return self.in_place(observed) and observed.extra.get("priority") == self.priority \
            and observed.extra.get("chain_call_actions") == self.actions

    def planned_placement(self, observed: Observed) -> str:
        if self.mode != "auto":
            return self.mode
        chain = self.chain() if _libxdp.available() else None
        return observed.placement or (chain or {}).get("mode") or "native"

    def predict_refusal(self) -> None:
        self._refuse_dispatcher()

    # ------------------------------------------------------------ acting

    def prepare(self, loaded: _loader.Loaded) -> None:
        """The load the converger made: libxdp loads its own copy of that program from the same object, with the
        same constants and map pins (so the same maps), as a freplace program of the dispatcher."""
        self.pending = loaded

    def attach(self, prog: _bpf.Program) -> Attachment:
        modes = ["native", "generic"] if self.mode == "auto" else [self.mode]
        chain = self.chain()
        if chain and self.mode == "auto":
            modes = [chain["mode"]]  # a program joins the dispatcher in the mode it runs in
        for mode in modes:
            try:
                return self._attach(prog, mode)
            except _libxdp.LibxdpError as exc:
                if mode == "native" and self.mode == "auto" and exc.errno in (errno.EOPNOTSUPP, errno.EINVAL):
                    continue
                raise HookError("%s: attachment %s: %s" % (self.ifname, self.attachment, exc)) from exc
        raise HookError("could not attach to %s through libxdp's dispatcher in any mode" % self.ifname)

    def _attach(self, prog: _bpf.Program, mode: str, settings: tuple[int, list[str]] | None = None) -> Attachment:
        """Attach the program the converger loaded (its own copy, configured with the task's priority and chain
        call actions) or, put back, a component read back from the kernel with the settings it had."""
        if prog.info()["type"] == "ext":
            # A component already (a program a failed run puts back): libxdp links it into the new dispatcher.
            # libxdp sets a run priority and chain call actions only on a program it has not loaded yet (EINVAL
            # on one read back from the kernel, Debian 12's libxdp 1.3 alike); it gives one read back those that
            # the program's BTF declares (.xdp_run_config) or its defaults, which are the settings wanted
            # unless the attachment asked for others.
            priority, actions = settings or (self.priority, self.actions)
            with _libxdp.Component.from_program(prog) as component:
                has = component.settings()
                if has != (priority, actions):
                    raise HookError(
                        "%s: attachment %s: its program (id %d) cannot go back into libxdp's dispatcher with "
                        "priority %d and chain call actions %s: libxdp gives a program read back from the kernel "
                        "the settings the program itself declares (.xdp_run_config in its BTF) or its defaults, "
                        "here priority %d and %s, and sets others only on a program it loads from its object. "
                        "Run the task again to attach it anew"
                        % (self.ifname, self.attachment, prog.info()["id"], priority, ", ".join(actions),
                           has[0], ", ".join(has[1])))
                component.attach(self.ifindex, mode)
            self._check_chained(prog.info()["id"], mode)
            return Attachment(HELD_BY_DISPATCHER, mode, None,
                              {"priority": priority, "chain_call_actions": actions, "attachment": self.attachment})
        loaded = self.pending
        with _bpf.BpfObject(loaded.path, loaded.data) as obj:  # the bytes the converger checked and loaded
            _loader.as_hook(obj, loaded.name, "xdp")  # an untyped section's program, as the converger loaded it
            _loader.prepare(obj, loaded.name, loaded.constants, loaded.maps_dir)
            with _libxdp.Component.from_object(obj, loaded.name) as component:
                component.configure(self.priority, self.actions)
                component.attach(self.ifindex, mode)
                held = _bpf.Program(os.dup(component.fd()), loaded.name)
        self._check_chained(held.info()["id"], mode)
        return Attachment(HELD_BY_DISPATCHER, mode, None, self._extra(), program=held)

    def _extra(self) -> dict:
        return {"priority": self.priority, "chain_call_actions": self.actions, "attachment": self.attachment}

    def _check_chained(self, prog_id: int, mode: str) -> None:
        """libxdp falls back to attaching a program alone when it cannot build a dispatcher; that is not what the
        task asked for: take it off again and fail."""
        chain = self.chain()
        if chain is None or prog_id not in [p["id"] for p in chain["programs"]]:
            with _libxdp.Component.from_id(prog_id) as component:
                component.detach(self.ifindex, mode)
            raise HookError("%s: libxdp attached attachment %s without its dispatcher (it falls back so when the "
                            "dispatcher cannot be built); it was taken off again" % (self.ifname, self.attachment))

    def replace(self, observed: Observed, prog: _bpf.Program) -> Attachment:
        """The new program joins the dispatcher, then the old one leaves it: never without the program; for that
        moment both run (the frames the first passes on meet the second too)."""
        start = time.monotonic()
        attachment = self.attach(prog)
        try:
            self.detach(observed)
        except Exception:
            self.detach(Observed(prog_id=attachment.program.info()["id"] if attachment.program else 0,
                                 placement=attachment.placement))
            raise
        took = time.monotonic() - start
        self._notes.append("%s XDP attachment %s: the new program joined libxdp's dispatcher before the old one "
                           "left it, so for at most %.2f ms both ran" % (self.ifname, self.attachment, took * 1000))
        return attachment

    def notes(self) -> list[str]:
        notes, self._notes = self._notes, []
        return notes

    def detach(self, observed: Observed) -> None:
        with _libxdp.Component.from_id(observed.prog_id) as component:
            try:
                component.detach(self.ifindex, observed.placement)
            except _libxdp.LibxdpError as exc:
                raise HookError("%s: attachment %s: %s" % (self.ifname, self.attachment, exc)) from exc

    def restore(self, observed: Observed, old: _bpf.Program) -> None:
        """Put a detached component back as it ran: its priority and chain call actions as observed."""
        had = (observed.extra.get("priority", self.priority), observed.extra.get("chain_call_actions", self.actions))
        self._attach(old, observed.placement, had)


def programs_in_words(programs: list[dict]) -> str:
    return ", ".join("%s (id %d, priority %d)" % (p["name"], p["id"], p["priority"]) for p in programs)
