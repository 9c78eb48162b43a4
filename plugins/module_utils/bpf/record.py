# -*- coding: utf-8 -*-
# Copyright (c) ebpf.xdp contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""An attachment's ownership record, typed and in the collection's vocabulary.

Private to the ebpf.xdp collection: the interface may change without notice.

What a record is stored as (its keys, its version) is said here and nowhere
else; the code reads and writes it in the vocabulary of the hooks:

    placement    how the program sits on its hook, in the hook's own word (XDP's mode, tc's method); stored "mode"
    holder       what keeps it there (link, netlink, dispatcher); stored "attach"
    attachment   the name of one of several of ours on a hook (option name), None for the unnamed one
    revision     the program revision on the hook (1 for records written before revisions)
    previous     the revision before it, kept to be put back (a record of the same shape, without history)
    rolled_back  whether the revision is one put back

Version 1 is what every release so far writes and this one still writes
(so that a collection put back to an older release keeps every attachment);
records of older releases lack the keys added since and read as their
defaults (revision 1, no previous, no attachment). A newer version is refused
by pins.check_record before anything in it is used.
"""

from __future__ import annotations

VERSION = 1

# Vocabulary name -> the key it is stored under (version 1).
STORED = {
    "placement": "mode",
    "holder": "attach",
    "attachment": "attachment",
    "revision": "revision",
    "previous": "previous",
    "rolled_back": "rolled_back",
    "prog_id": "prog_id",
    "link_id": "link_id",
    "program_name": "program_name",
    "shared_maps": "shared_maps",
}
# Vocabulary name -> the type its stored value has (or None).
KINDS = {"placement": str, "holder": str, "attachment": str, "revision": int, "previous": dict, "rolled_back": bool,
         "prog_id": int, "link_id": int, "program_name": str, "shared_maps": str}
# What a field is when a record lacks it (written before it existed), where that is not None.
DEFAULTS = {"revision": 1, "rolled_back": False}


def stored(**fields) -> dict:
    """A record's keys as stored, from fields in the vocabulary (placement=, holder=, ...)."""
    return {STORED[name]: value for name, value in fields.items()}


def wrong_types(stored_record: dict, where: str = "") -> list[str]:
    """What of a stored record has a type no release writes there, in words (empty when all is well); previous
    too."""
    wrong = []
    for name, key in STORED.items():
        value, kind = stored_record.get(key), KINDS[name]
        if value is not None and (not isinstance(value, kind) or (kind is not bool and isinstance(value, bool))):
            wrong.append("%s%s %r" % (where, key, value))
    previous = stored_record.get("previous")
    if isinstance(previous, dict) and not where:
        wrong.extend(wrong_types(previous, "previous."))
    return wrong


class OwnershipRecord(dict):
    """A record as read from its pin (a dict of its stored keys, as the result and the facts pass it on), with its
    fields in the vocabulary."""

    def _field(self, name: str):
        value = self.get(STORED[name])
        return DEFAULTS.get(name) if value is None else value

    @property
    def placement(self) -> str | None:
        return self._field("placement")

    @property
    def holder(self) -> str | None:
        return self._field("holder")

    @property
    def attachment(self) -> str | None:
        return self._field("attachment")

    @property
    def revision(self) -> int:
        return self._field("revision")

    @property
    def previous(self) -> OwnershipRecord | None:
        previous = self._field("previous")
        return OwnershipRecord(previous) if previous else None

    @property
    def rolled_back(self) -> bool:
        return bool(self._field("rolled_back"))

    @property
    def prog_id(self) -> int | None:
        return self._field("prog_id")

    @property
    def link_id(self) -> int | None:
        return self._field("link_id")

    @property
    def program_name(self) -> str | None:
        return self._field("program_name")

    @property
    def shared_maps(self) -> str | None:
        return self._field("shared_maps")

    def but(self, **fields) -> OwnershipRecord:
        """A copy with fields (in the vocabulary) changed."""
        return OwnershipRecord(self, **stored(**fields))


def of(record: dict | None) -> OwnershipRecord | None:
    """record (a stored dict, or one already typed) as an OwnershipRecord; None stays None."""
    if record is None or isinstance(record, OwnershipRecord):
        return record
    return OwnershipRecord(record)
