# -*- coding: utf-8 -*-
# Copyright (c) ebpf.xdp contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""ebpf.xdp.datapath's map_entries section: bpf_map_entry's entries, last; never gathered (which entries of a
map are "declared" is the task's to say), a map put back to its entries as they were.

Private to the ebpf.xdp collection: the interface may change without notice.
"""

from __future__ import annotations

from ansible_collections.ebpf.xdp.plugins.module_utils.maps import map_entry as _map_entry
from ansible_collections.ebpf.xdp.plugins.module_utils.sections.resource import Section


class MapEntries(Section):
    """A map's entries, by the map's path in its namespace."""

    spec = _map_entry.ENTRY_ARGS
    exact_when_replaced = True
    name, module = "map_entries", "bpf_map_entry"

    def key(self, params: dict) -> tuple:
        return (params["netns"], params["path"])

    def describe(self, key: tuple) -> str:
        return "map %s" % key[1]

    def converge(self, params: dict, check_mode: bool, run, before_change=None) -> tuple[dict, list[str]]:
        return _map_entry.converge(params, check_mode), []

    def absent(self, params: dict) -> dict:
        return dict(params, state="absent", exclusive=False)

    def undo(self, params: dict, result: dict, before: dict | None, pin_root: str) -> dict | None:
        """The map as it was (exclusive: what the step added goes again). A per-CPU entry whose CPUs held
        different values cannot be written back by key and value: it is left out."""
        earlier = ((result.get("diff") or {}).get("before") or {}).get("entries", [])
        return dict(params, state="present", exclusive=True,
                    entries=[{"key": e["key"], "value": e["value"]} for e in earlier if "value" in e])
