# -*- coding: utf-8 -*-
# Copyright (c) ebpf.xdp contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The protocol of ebpf.xdp.datapath's sections: each a resource in the shape of netcommon's resource modules.

Private to the ebpf.xdp collection: the interface may change without notice.

A section (objects, each registered hook, devmap_groups, map_entries) is one
kind of item with the module that manages it alone; datapath keeps only the
order of the sections, the journal and the put-back. A section says:

    name, module, spec, rules, names    its config key; its item module, whose argument spec (and rules, and
                                        name checks, _common.check_names) every entry takes
    validate(params)                    what the spec cannot say (raise EbpfXdpError)
    keys(params), describe(key)         what an entry is the only one to manage, as tuples and in words
    gather(pin_root, netns, netns_key)  what the collection has of it in a namespace, as entries (gathered)
    converge(params, check_mode, ...)   one entry converged by its module's code: (result, warnings)
    hold(before, pin_root)              what puts a hook back exactly, right before a step's first change
    undo(params, result, before, ...)   the params that put back what a step changed (None: nothing to)
    absent(params)                      an entry that removes what params names
"""

from __future__ import annotations

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

from ansible_collections.ebpf.xdp.plugins.module_utils import _common


class Section:
    """One section of datapath's config; the defaults are those of an item that is not host state (an object)."""

    name: str
    module: str
    spec: dict
    rules: dict = {}
    names: dict = _common.NAMES
    # Read back from the host (gather), so that overridden and deleted remove what config does not declare.
    gathered = False
    # Removed by state deleted when config declares it (objects are files, not host state, and stay).
    removable = True
    # replaced leaves it exactly as declared (exclusive).
    exact_when_replaced = False

    def validate(self, params: dict) -> None:
        """Raise EbpfXdpError for what the argument spec cannot say about an entry."""

    def key(self, params: dict) -> tuple:
        raise NotImplementedError

    def keys(self, params: dict) -> list[tuple]:
        """What an entry (declared, or gathered) manages: one key, or more when it is named more ways."""
        return [self.key(params)]

    def describe(self, key: tuple) -> str:
        raise NotImplementedError

    def netns(self, key: tuple) -> str | None:
        return key[0]

    def gather(self, pin_root: str, netns: str | None, netns_key: str) -> list[dict]:  # pylint: disable=unused-argument
        return []

    def replaced_removes(self, entry: dict, validated: list[dict]) -> bool:  # pylint: disable=unused-argument
        """State replaced: whether a gathered entry config does not declare goes (overridden: every one does)."""
        return False

    def converge(self, params: dict, check_mode: bool, run, before_change=None) -> tuple[dict, list[str]]:
        raise NotImplementedError

    def hold(self, before: dict, pin_root: str):  # pylint: disable=unused-argument
        """Before a step's first change: what puts the item back exactly as it was (None: undo() does)."""
        return None

    # pylint: disable-next=unused-argument
    def undo(self, params: dict, result: dict, before: dict | None, pin_root: str) -> dict | None:
        """The params that put back what the step changed; None when nothing is to be put back."""
        return None

    def absent(self, params: dict) -> dict:
        return dict(params, state="absent")

    def full(self, entry: dict, pin_root: str) -> dict:
        """An entry (gathered, or made here) with its module's defaults, as validation gives it."""
        result = ArgumentSpecValidator(self.spec, **self.rules).validate(dict(entry, pin_root=pin_root))
        return result.validated_parameters

    def removal(self, params: dict, pin_root: str) -> dict:
        """The full entry that removes what params names."""
        return self.full({k: v for k, v in self.absent(params).items() if k != "pin_root"}, pin_root)
