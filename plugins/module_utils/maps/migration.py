# -*- coding: utf-8 -*-
# Copyright (c) ebpf.xdp contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""A program's maps against the maps pinned for it: never read old bytes through a new layout.

Private to the ebpf.xdp collection: the interface may change without notice.

libbpf reuses a pinned map when its type, key and value sizes, max_entries
and flags match, and never compares BTF: a value struct with two fields
swapped reuses the old map and reads its bytes through the new layout, and a
grown value fails with a bare EINVAL. Before an object is loaded with its maps
pinned, `review` compares every map it would reuse with the pinned one, key
and value field by field (name, offset, size, kind, signedness, through
`maps/btf`'s walk, the one the facts decode with), max_entries and flags, and
`enforce` applies the task's `map_migration`:

- ``refuse``: any difference fails, naming the map and each difference, before anything changes;
- ``reset``: a changed map starts empty; its pin is set aside (`Reset`), the
  load pins a new map there, and the old one is dropped once the new program
  is on the hook (or put back when the upgrade fails).

`compare` and `shape` are pure and tested without a kernel; `review` reads
the object (before load) and the pins.
"""

from __future__ import annotations

import dataclasses
import os

from ansible_collections.ebpf.xdp.plugins.module_utils.bpf import libbpf as _bpf
from ansible_collections.ebpf.xdp.plugins.module_utils.maps import btf as _btf
from ansible_collections.ebpf.xdp.plugins.module_utils._errors import EbpfXdpError

REFUSE = "refuse"
RESET = "reset"
POLICIES = (REFUSE, RESET)

# What a map became in an upgrade, as results and diffs say it.
KEPT = "kept"
CREATED = "created"
RESET_DONE = "reset"
REFUSED = "refused"

# The pin of a map being reset, beside the new one until the new program is on the hook (bpffs refuses a "." in
# a name).
SET_ASIDE = "%s__before_reset"


class MigrationError(EbpfXdpError):
    """A pinned map the new program cannot use as it is, under the task's map_migration."""


@dataclasses.dataclass(frozen=True)
class FieldShape:
    """One leaf of a key or value as the program reads it: a struct member by its path of names."""

    name: str
    offset: int
    size: int
    kind: str
    signed: bool = False
    bits: int = 0

    def describe(self) -> str:
        width = "%d bits at bit %d" % (self.bits, self.offset) if self.bits else "%d bytes at %d" % (
            self.size, self.offset)
        return "%s%s, %s" % ("signed " if self.signed else "", self.kind, width)


def _kind(layout: _btf.Layout) -> str:
    if isinstance(layout, _btf.Enum):
        return "enum"
    if isinstance(layout, _btf.Int):
        return "bool" if layout.boolean else "int"
    if isinstance(layout, _btf.Text):
        return "char array"
    if isinstance(layout, _btf.Bytes):
        return "bytes"
    if isinstance(layout, _btf.ProgRef):
        return "program"
    if isinstance(layout, _btf.Array):
        return "array of %d %s" % (layout.count, _kind(layout.elem))
    return type(layout).__name__.lower()


def shape(layout: _btf.Layout, prefix: str = "", base: int = 0) -> list[FieldShape]:
    """A key's or value's leaves in offset order: struct members flattened into dotted names (an integer or
    array value is one leaf named by prefix, "" at the top). Bitfields count their offset in bits."""
    if isinstance(layout, _btf.Struct):
        out = []
        for field in layout.fields:
            name = "%s.%s" % (prefix, field.name) if prefix else field.name
            if field.bits:
                out.append(FieldShape(name, base * 8 + field.bit_offset, field.layout.size, _kind(field.layout),
                                      getattr(field.layout, "signed", False), field.bits))
            else:
                out.extend(shape(field.layout, name, base + field.offset))
        return out
    return [FieldShape(prefix, base, layout.size, _kind(layout), getattr(layout, "signed", False))]


@dataclasses.dataclass
class MapShape:
    """What a map is, for the comparison: its kind, sizes and flags, and its key and value leaves (None without
    BTF: only the sizes are known, as libbpf compares them)."""

    type: str
    key_size: int
    value_size: int
    max_entries: int
    flags: int
    key: list[FieldShape] | None = None
    value: list[FieldShape] | None = None


def map_shape(info: dict, flags: int, btf: dict | None) -> MapShape:
    """A MapShape from a map's info (type, sizes, max_entries) and BTF table (`_bpf.map_btf`'s), through the walk
    the facts decode with."""
    key, value = _btf.layouts(info, btf)
    return MapShape(info["type"], info["key_size"], info["value_size"], info["max_entries"],
                    flags & ~_bpf.BPF_F_RDONLY_PROG,
                    shape(key) if _btf.from_btf(key) else None, shape(value) if _btf.from_btf(value) else None)


def _leaves(side: str, name: str) -> str:
    return "%s %s" % (side, "field %s" % name if name else "(the whole %s)" % side)


def compare_fields(side: str, old: list[FieldShape], new: list[FieldShape]) -> list[str]:
    """Each difference between two layouts of a key or value, by field name."""
    before, after = {f.name: f for f in old}, {f.name: f for f in new}
    changes = []
    for name, was in before.items():
        now = after.get(name)
        if now is None:
            changes.append("%s removed (was %s)" % (_leaves(side, name), was.describe()))
        elif now != was:
            changes.append("%s: %s -> %s" % (_leaves(side, name), was.describe(), now.describe()))
    changes.extend("%s added (%s)" % (_leaves(side, name), now.describe())
                   for name, now in after.items() if name not in before)
    return changes


def compare(old: MapShape, new: MapShape) -> list[str]:
    """Every difference between the pinned map (old) and the object's definition (new), in words; [] when the
    new program can read and write the pinned map as it is."""
    if old.type != new.type:
        return ["map type %s -> %s" % (old.type, new.type)]
    changes = []
    for side, size in (("key", "key_size"), ("value", "value_size")):
        was, now = getattr(old, side), getattr(new, side)
        if was is not None and now is not None:
            changes.extend(compare_fields(side, was, now))
        elif getattr(old, size) != getattr(new, size):
            changes.append("%s size %d -> %d bytes" % (side, getattr(old, size), getattr(new, size)))
    # max_entries 0 in an object: libbpf sets it at load (a perf event array gets one per CPU).
    if new.max_entries and old.max_entries != new.max_entries:
        changes.append("max_entries %d -> %d" % (old.max_entries, new.max_entries))
    if old.flags != new.flags:
        changes.append("flags %#x -> %#x" % (old.flags, new.flags))
    return changes


@dataclasses.dataclass
class Review:
    """One map of the new object against its pin: what becomes of it (KEPT, CREATED, RESET_DONE, REFUSED) and
    the differences that decided it."""

    name: str
    path: str
    outcome: str
    changes: list[str] = dataclasses.field(default_factory=list)

    def report(self) -> dict:
        return {"map": self.name, "outcome": self.outcome, "changes": list(self.changes)}


def object_shapes(obj: _bpf.BpfObject) -> dict[str, MapShape]:
    """The object's own maps (not .rodata and the like) as it declares them, before load."""
    out = {}
    for declared in obj.maps():
        out[declared["name"]] = map_shape(declared, obj.map_flags(declared["name"]), obj.map_btf(declared["name"]))
    return out


def pinned_shape(path: str) -> MapShape:
    with _bpf.open_pinned_map(path) as pinned:
        try:
            btf = _bpf.map_btf(pinned)
        except _bpf.BpfError:
            btf = None  # its BTF unreadable: compared by its sizes, as libbpf does
        return map_shape(pinned.info, pinned.map_flags, btf)


def review(path: str, maps_dir: str, policy: str, data: bytes | None = None) -> list[Review]:
    """Each map of the object at path (from data, its bytes as read and verified, when given) against its pin in
    maps_dir, under policy; nothing changes here."""
    reviews = []
    with _bpf.BpfObject(path, data) as obj:
        shapes = object_shapes(obj)
    for name, new in shapes.items():
        pin = os.path.join(maps_dir, name)
        if not os.path.exists(pin):
            reviews.append(Review(name, pin, CREATED))
            continue
        changes = compare(pinned_shape(pin), new)
        if not changes:
            reviews.append(Review(name, pin, KEPT))
        else:
            reviews.append(Review(name, pin, RESET_DONE if policy == RESET else REFUSED, changes))
    return reviews


def refusal(object_path: str, maps_dir: str, reviews: list[Review], shared: bool = False) -> str | None:
    """The message that refuses an upgrade, naming each map and each difference; None when nothing is refused."""
    refused = [r for r in reviews if r.outcome == REFUSED]
    if not refused:
        return None
    maps = "; ".join("map %s (%s): %s" % (r.name, r.path, ", ".join(r.changes)) for r in refused)
    way_out = ("map_migration: reset cannot start a shared map set's map empty under the other attachments that "
               "use it; give the changed map another name, or remove the set's attachments first"
               if shared else "set map_migration: reset to start %s empty, or keep the layout"
               % ("them" if len(refused) > 1 else "it"))
    return ("%s declares its maps unlike the maps pinned in %s, and the program would read their bytes through "
            "the new layout: %s. Nothing was changed; %s" % (object_path, maps_dir, maps, way_out))


class Reset:
    """The pins of maps being reset, set aside so the load pins new, empty maps in their place: `commit()` drops
    them once the new program is on the hook, `undo()` puts them back when the upgrade fails first."""

    def __init__(self, reviews: list[Review]):
        self.moved = [(r.path, os.path.join(os.path.dirname(r.path), SET_ASIDE % r.name))
                      for r in reviews if r.outcome == RESET_DONE]

    def set_aside(self) -> None:
        done = []
        try:
            for pin, aside in self.moved:
                if os.path.exists(aside):
                    os.unlink(aside)  # left by a run that stopped before its commit or undo
                os.rename(pin, aside)
                done.append((pin, aside))
        except OSError:
            self.moved = done
            self.undo()
            raise

    def undo(self) -> None:
        for pin, aside in self.moved:
            if os.path.exists(pin):
                os.unlink(pin)  # the new map the failed load pinned
            os.rename(aside, pin)
        self.moved = []

    def commit(self) -> None:
        for _pin, aside in self.moved:
            os.unlink(aside)
        self.moved = []
