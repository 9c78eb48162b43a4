# -*- coding: utf-8 -*-
# Copyright (c) ebpf.xdp contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""ebpf.xdp.datapath's devmap_groups section: devmap_group's entries, after the programs whose map sets hold
them; gathered from the map sets, a group put back by its members as they were.

Private to the ebpf.xdp collection: the interface may change without notice.
"""

from __future__ import annotations

from ansible_collections.ebpf.xdp.plugins.module_utils import _common
from ansible_collections.ebpf.xdp.plugins.module_utils.maps import devmap as _devmap
from ansible_collections.ebpf.xdp.plugins.module_utils.sections.resource import Section


class Groups(Section):
    name = "devmap_groups"
    module = "devmap_group"
    spec = _common.DEVMAP_GROUP_ARGS
    rules = _common.DEVMAP_GROUP_RULES
    names = _common.DEVMAP_GROUP_NAMES
    gathered = True
    exact_when_replaced = True

    def keys(self, params: dict) -> list[tuple]:
        """A group is named by its name, its id, or both: each names it."""
        return [(params["netns"], params["shared_maps"], value) for value in (params["name"], params["id"])
                if value is not None]

    def key(self, params: dict) -> tuple:
        return self.keys(params)[0]

    def describe(self, key: tuple) -> str:
        return "group %s of map set %s" % (key[2], key[1])

    def gather(self, pin_root: str, netns: str | None, netns_key: str) -> list[dict]:
        found = []
        for name, set_dir in _devmap.map_sets(pin_root, netns_key).items():
            groups, records = _devmap.read_set(set_dir, name)
            for group in groups:
                if group["id"] in records:
                    found.append(_entry(group, netns, name, records[group["id"]]))
        return found

    def replaced_removes(self, entry: dict, validated: list[dict]) -> bool:
        """replaced: the map sets config names end exactly as declared, their other groups go."""
        return (entry["netns"], entry["shared_maps"]) in {(p["netns"], p["shared_maps"]) for p in validated}

    def converge(self, params: dict, check_mode: bool, run, before_change=None) -> tuple[dict, list[str]]:
        return _devmap.converge(params, check_mode)

    def undo(self, params: dict, result: dict, before: dict | None, pin_root: str) -> dict | None:
        """The group as it was (exclusive: members the step added go again), or gone if the step made it."""
        if before:
            return self.full(dict(before, exclusive=True), pin_root)
        return self.removal(dict(params, id=result.get("id", params.get("id"))), pin_root)


def _entry(group: dict, netns: str | None, set_name: str, record: dict) -> dict:
    entry = {"name": group["name"], "id": group["id"], "netns": netns, "shared_maps": set_name,
             "members": [member["name"] for member in group["members"]], "addresses": group["addresses"],
             "exclude_ingress": group["exclude_ingress"]}
    egress = record.get("egress") or {}
    if egress.get("object"):
        entry["egress_program"] = _devmap.asked_egress(egress)  # named one way, as the task named it
    return entry
