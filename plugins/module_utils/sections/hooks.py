# -*- coding: utf-8 -*-
# Copyright (c) ebpf.xdp contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""ebpf.xdp.datapath's hook sections: one resource per registered hook adapter (hooks/adapters), its entries a
program module's options (xdp_program, tc_program), gathered from the attachments' ownership records.

Private to the ebpf.xdp collection: the interface may change without notice.
"""

from __future__ import annotations

import os

from ansible_collections.ebpf.xdp.plugins.module_utils import _common
from ansible_collections.ebpf.xdp.plugins.module_utils.bpf import bcc as _bcc, pins as _pins
from ansible_collections.ebpf.xdp.plugins.module_utils.hooks import (
    adapters as _adapters, converge as _converge, revisions as _revisions)
from ansible_collections.ebpf.xdp.plugins.module_utils.hooks.observed import HookError
from ansible_collections.ebpf.xdp.plugins.module_utils.sections.resource import Section

PROGRAM_RULES = _revisions.module_rules(_bcc.MODULE_RULES)


class Hook(Section):
    """A kind of hook (its adapter's): one attachment per entry, on an interface (and a direction, tc)."""

    names = _common.PROGRAM_NAMES
    rules = PROGRAM_RULES
    gathered = True

    def __init__(self, adapter: type[_converge.HookAdapter]):
        self.adapter = adapter
        self.name = adapter.kind
        self.module = adapter.module
        self.spec = _common.program_args(adapter.module)

    def validate(self, params: dict) -> None:
        if params["backend"] != "libbpf":
            raise HookError("backend %s is not available in ebpf.xdp.datapath; use ebpf.xdp.%s for it"
                            % (params["backend"], self.module))
        self.adapter.check_params(params)

    def key(self, params: dict) -> tuple:
        return self.adapter.entry_key(params)

    def describe(self, key: tuple) -> str:
        return self.adapter.describe(key)

    def gather(self, pin_root: str, netns: str | None, netns_key: str) -> list[dict]:
        """Every attachment of this kind with a record, as the entry that leaves it as it is."""
        found = []
        top = os.path.join(pin_root, netns_key)
        for ifname in sorted(os.listdir(top)) if os.path.isdir(top) else []:
            if ifname == _pins.SHARED_MAPS:
                continue
            for hook in sorted(os.listdir(os.path.join(top, ifname))):
                if _pins.hook_kind(hook) != self.name:
                    continue  # another hook's, the clsact record, or another kind of pin directory of the collection
                record = _pins.Record(os.path.join(top, ifname, hook, "owner")).read()
                if record:
                    found.append(self.adapter.entry_of(record, netns, ifname, hook))
        return found

    def converge(self, params: dict, check_mode: bool, run, before_change=None) -> tuple[dict, list[str]]:
        # A migrating upgrade of a map set moves the set's other attachments, and its new programs count into new
        # maps: datapath holds each attachment, and what carries those counts back to the old maps, for its put-back.
        return _converge.converge_interface(params, check_mode, self.adapter.from_params, before_change,
                                            getattr(run, "hold_mates", None), getattr(run, "hold_carry_back", None))

    def placed_next_to(self, params: dict) -> list[tuple]:
        """The keys of the attachments on the same hook this entry is placed beside (tc's before/after)."""
        return [self.key(dict(params, name=name)) for name in self.adapter.placed_next_to(params)]

    def unplaced(self, params: dict) -> dict:
        return self.adapter.unplaced(params)

    def absent(self, params: dict) -> dict:
        return dict(params, state="absent", revision=None)

    def hold(self, before: dict, pin_root: str) -> _converge.Held | None:
        """A hook that has a program of ours: held as it is (its program, same id), put back by the journal."""
        return _converge.hold(self.name, self.full(before, pin_root))

    def undo(self, params: dict, result: dict, before: dict | None, pin_root: str) -> dict | None:
        """What a hook that was held cannot say (hold() returned nothing): a removed program attached again from
        its record, a new one removed, an upgrade of a program that was gone put back to its previous revision."""
        if params["state"] == "absent":
            return self.full(before, pin_root) if before else None
        if not before:
            return self.removal(params, pin_root)
        # A record whose program was gone (nothing to hold): its previous revision, maps kept.
        return dict(params, revision=_revisions.PREVIOUS, constants={},
                    **dict.fromkeys(set(_revisions.PROGRAM_OPTIONS) - {"constants"}))


def sections() -> list[Hook]:
    """One section per registered hook adapter, in their order."""
    return [Hook(adapter) for adapter in _adapters.HOOKS]
