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
`review` applies the task's `map_migration`:

- ``refuse``: any difference fails, naming the map and each difference, before anything changes;
- ``reset``: a changed map starts empty; its pin is set aside (`Reset`), the
  load pins a new map there, and the old one is dropped once the new program
  is on the hook (or put back when the upgrade fails).
- ``fields``: as reset, and every entry is copied into the new map field by
  field by name (`Conversion`: integers widened or narrowed where the value
  fits, new fields zero, removed value fields dropped, `rename`d fields
  carried) before the swap; after the swap, what the old map's counters gained
  since the copy is added (`Copy.add_gained`).

A map set shared by several attachments is migrated once, by the upgrade of one of them, which swaps the
others onto the new maps before `add_gained` (hooks/converge's SetMate): what the old maps gained until the last
swap is added then.

The commit (the old pins dropped) is the upgrade's last step, its point of
no return: a failure before it, after the swap too, puts the old program
back, adds to the old maps what the new program counted meanwhile
(`carry_back`) and then puts the old pins back, all through the upgrade's
journal (host/journal), where `set_aside` keeps each pin's way back. A run killed between setting a pin
aside and its commit or undo leaves it set aside; the next run's `Recovery`
puts it back or drops it, by the maps the programs of every attachment of
the maps use (a map set's too, whichever attachment's task runs next), and
adds what was counted since the copy (from the snapshot the copy pinned,
`AT_COPY`, converted by the rules the copy pinned with it, `AT_COPY_RULES`) where it goes.

`compare` and `shape` are pure and tested without a kernel; `review` reads
the object (before load) and the pins.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import os
import time
from collections.abc import Callable

from ansible_collections.ebpf.xdp.plugins.module_utils.host.journal import Journal
from ansible_collections.ebpf.xdp.plugins.module_utils.bpf import libbpf as _bpf
from ansible_collections.ebpf.xdp.plugins.module_utils.maps import btf as _btf
from ansible_collections.ebpf.xdp.plugins.module_utils._errors import EbpfXdpError

REFUSE = "refuse"
RESET = "reset"
FIELDS = "fields"
POLICIES = (REFUSE, RESET, FIELDS)

# What a map became in an upgrade, as results and diffs say it.
KEPT = "kept"
CREATED = "created"
RESET_DONE = "reset"
MIGRATED = "migrated"
REFUSED = "refused"

# The pin of a map being reset, beside the new one until the new program is on the hook (bpffs refuses a "." in
# a name).
SET_ASIDE = "%s__before_reset"
# A migrated map's entries as the copy read them, pinned beside it from the copy until what the old map gained
# after it is added (`Copy.add_gained`): a run killed in between leaves what the next run's `Recovery` needs to
# add those gains (or, going back, to carry back what the new programs counted) exactly once.
AT_COPY = "%s__at_copy"
# What the copy converted with (its map_rename), pinned before the snapshot and dropped after it: a recovery converts
# as the stopped run did, whatever the task that recovers says.
AT_COPY_RULES = "%s__at_copy_rules"
_RULES_SIZE = 4096
_SNAPSHOT_TYPES = {False: 1, True: 5}  # BPF_MAP_TYPE_HASH, BPF_MAP_TYPE_PERCPU_HASH, by whether values are per CPU


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
    # With FIELDS: how its entries are carried into the new map.
    copy: Copy | None = None

    def elsewhere(self, maps_dir: str) -> Review:
        """The same review for a copy of the map pinned under its name in maps_dir (replay's private copies, made
        without the BTF that the review read from the live map)."""
        path = os.path.join(maps_dir, self.name)
        if self.copy is not None:
            self.copy.pin = path
        return dataclasses.replace(self, path=path)

    def report(self) -> dict:
        out = {"map": self.name, "outcome": self.outcome, "changes": list(self.changes)}
        if self.copy is not None:
            out["entries_copied"] = self.copy.copied
            if self.copy.window is not None:
                out["copy_to_swap_ms"] = round(self.copy.window * 1000, 3)
        return out


def _declared(obj: _bpf.BpfObject) -> dict[str, tuple[dict, int, dict | None]]:
    """The object's own maps (not .rodata and the like) as it declares them, before load: info, flags, BTF."""
    return {m["name"]: (m, obj.map_flags(m["name"]), obj.map_btf(m["name"])) for m in obj.maps()}


def _pinned(path: str) -> tuple[dict, int, dict | None]:
    with _bpf.open_pinned_map(path) as pinned:
        try:
            btf = _bpf.map_btf(pinned)
        except _bpf.BpfError:
            btf = None  # its BTF unreadable: compared by its sizes, as libbpf does
        return pinned.info, pinned.map_flags, btf


def review(path: str, maps_dir: str, policy: str, data: bytes | None = None,
           renames: dict | None = None) -> list[Review]:
    """Each map of the object at path (from data, its bytes as read and verified, when given) against its pin in
    maps_dir, under policy; nothing changes here. With FIELDS, each changed map's entries are converted in
    memory (a Copy on the review), so that what cannot be carried is refused before anything changes."""
    reviews = []
    renames = renames or {}
    with _bpf.BpfObject(path, data) as obj:
        declared = _declared(obj)
    bad = [name for name, fields in renames.items() if not isinstance(fields, dict)
           or not all(isinstance(k, str) and isinstance(v, str) for k, v in fields.items())]
    if bad:
        raise MigrationError("map_rename: %s must map old field names to new ones ({old: new}), not %r" % (
            bad[0], renames[bad[0]]))
    unknown = sorted(set(renames) - set(declared))
    if unknown:
        raise MigrationError("map_rename names map %s, which %s does not have; its maps are %s" % (
            ", ".join(unknown), path, ", ".join(sorted(declared)) or "none"))
    for name, new in declared.items():
        pin = os.path.join(maps_dir, name)
        if not os.path.exists(pin):
            reviews.append(Review(name, pin, CREATED))
            continue
        old = _pinned(pin)
        changes = compare(map_shape(*old), map_shape(*new))
        if not changes:
            reviews.append(Review(name, pin, KEPT))
        elif policy == FIELDS:
            copy = Copy(name, pin, old, new, renames.get(name) or {})
            reviews.append(Review(name, pin, MIGRATED, changes + copy.value.words, copy))
        else:
            reviews.append(Review(name, pin, RESET_DONE if policy == RESET else REFUSED, changes))
    return reviews


def refusal(object_path: str, maps_dir: str, reviews: list[Review]) -> str | None:
    """The message that refuses an upgrade, naming each map and each difference; None when nothing is refused."""
    refused = [r for r in reviews if r.outcome == REFUSED]
    if not refused:
        return None
    maps = "; ".join("map %s (%s): %s" % (r.name, r.path, ", ".join(r.changes)) for r in refused)
    return ("%s declares its maps unlike the maps pinned in %s, and the program would read their bytes through "
            "the new layout: %s. Nothing was changed; map_migration: fields carries the entries over by field name, "
            "reset starts %s empty" % (object_path, maps_dir, maps, "the maps" if len(refused) > 1 else "the map"))


class Reset:
    """The pins of maps being reset or migrated, set aside so the load pins new maps in their place, each with its
    undo in the upgrade's journal (host/journal: the old pin back under its name, the new map the load pinned
    there dropped; run when the upgrade fails before its commit, after the swap once the old program is back on
    the hook): `copy()` carries a migrated map's entries into its new map before the swap, `add_gained()` what
    its counters gained after it, `carry_back()` what the new programs counted when the upgrade goes back after
    its swap, `commit()` drops the old pins as the upgrade's last step (the new program on the hook, pinned and
    recorded) and their undo with them."""

    def __init__(self, reviews: list[Review]):
        self.moved = [(r.path, os.path.join(os.path.dirname(r.path), SET_ASIDE % r.name), r)
                      for r in reviews if r.outcome in (RESET_DONE, MIGRATED)]
        self.journal: Journal | None = None
        self.steps: list = []

    def set_aside(self, journal: Journal) -> None:
        """Each pin set aside, its way back in journal as soon as it is (a rename that fails leaves the ones
        before it to the journal)."""
        self.journal = journal
        for pin, aside, review_ in self.moved:
            _unlink(aside)  # left by a run that stopped before its commit or undo
            _drop_snapshot(pin)
            os.rename(pin, aside)
            self.steps.append(journal.did(functools.partial(_put_back_pin, pin, aside),
                                          "map %s's pin set aside" % review_.name))

    def copy(self, during: Callable[[], None] | None = None) -> None:
        """Each migrated map's entries into its new map; during() after a first entry is written (a fault point's
        hook: a run stopped in the middle of a copy)."""
        for _pin, aside, review_ in self.moved:
            if review_.copy is not None:
                review_.copy.write(aside, during)

    def add_gained(self, between: Callable[[], None] | None = None) -> None:
        for _pin, aside, review_ in self.moved:
            if review_.copy is not None:
                review_.copy.add_gained(aside, between)

    def carry_back(self) -> list[str]:
        """Once the old programs are back on the hooks, before the old pins are (set_aside's steps in the journal):
        what the new programs counted, added to the old maps (Copy.carry_back); what cannot be, in words (the
        upgrade is going back anyway)."""
        words = []
        for _pin, aside, review_ in self.moved:
            if review_.copy is not None and os.path.exists(aside):
                try:
                    review_.copy.carry_back(aside)
                except (MigrationError, _bpf.BpfError, OSError) as exc:
                    words.append("map %s: what the new program counted in its moments on the hook could not be "
                                 "carried back to the old map, and is dropped with the new one: %s" % (review_.name, exc))
        return words

    def carriers(self) -> list[CarryBack]:
        """Before commit(): each migrated map with counters to carry back, its old and new map held open."""
        out = []
        try:
            for pin, aside, review_ in self.moved:
                if review_.copy is not None and review_.copy.carries_back():
                    old = _bpf.open_pinned_map(aside)
                    try:
                        out.append(CarryBack(review_.copy, old, _bpf.open_pinned_map(pin)))
                    except Exception:
                        old.close()
                        raise
        except Exception:
            for carrier in out:
                carrier.close()
            raise
        return out

    def commit(self) -> None:
        """The upgrade's point of no return: the old maps' pins dropped, and their way back in the journal."""
        for step in self.steps:
            self.journal.keep(step)
        self.steps = []
        for pin, aside, _review in self.moved:
            _drop_snapshot(pin)  # before the old map: a snapshot is never left without it
            os.unlink(aside)
        self.moved = []


class CarryBack:
    """A migrated map's counts' way back once its upgrade stood (its old pins dropped): the old and the new map held
    open, for a put-back that puts the old programs and the old maps' pins back later (datapath, when a later entry
    fails): once every old program is on its hook again, put_back() adds to the old map what the new programs
    counted (Copy.carry_back_between), as a migrating upgrade's own way back does."""

    def __init__(self, copy: Copy, old: _bpf.Map, new: _bpf.Map):
        self.copy, self.old, self.new = copy, old, new
        self.name = copy.name

    def put_back(self) -> None:
        self.copy.carry_back_between(self.new, self.old)

    def close(self) -> None:
        for held in (self.old, self.new):
            held.close()


def _put_back_pin(pin: str, aside: str) -> None:
    """A pin set aside back under its name (the journal's undo of Reset.set_aside), the copy's snapshot dropped."""
    _drop_snapshot(pin)
    if os.path.exists(pin):
        os.unlink(pin)  # the new map the failed load pinned
    os.rename(aside, pin)


def _at_copy(pin: str) -> str:
    return os.path.join(os.path.dirname(pin), AT_COPY % os.path.basename(pin))


def _at_copy_rules(pin: str) -> str:
    return os.path.join(os.path.dirname(pin), AT_COPY_RULES % os.path.basename(pin))


def _drop_snapshot(pin: str) -> None:
    """The copy's snapshot, then its rules (the snapshot is never without them)."""
    _unlink(_at_copy(pin))
    _unlink(_at_copy_rules(pin))


def _pin_rules(pin: str, rename: dict) -> None:
    """The copy's rules (its map_rename) beside the new map, in a one-entry array, as the ownership records are."""
    data = json.dumps({"rename": rename}, sort_keys=True).encode("utf-8")
    if len(data) >= _RULES_SIZE:
        raise MigrationError("map %s: its map_rename is too long to keep with the copy (%d of %d bytes)" % (
            os.path.basename(pin), len(data), _RULES_SIZE))
    path = _at_copy_rules(pin)
    _unlink(path)
    with _bpf.Map.create(_bpf.BPF_MAP_TYPE_ARRAY, "at_copy_rules", 4, _RULES_SIZE, 1) as rules:
        rules.update(bytes(4), data.ljust(_RULES_SIZE, b"\0"))
        rules.pin(path)


def copy_rules(pin: str) -> dict | None:
    """The rules a stopped run's copy of the map at pin converted with ({"rename": {old: new}}); None when it left
    none (a release before they were kept)."""
    raw = _bpf.pinned_value(_at_copy_rules(pin), bytes(4), _RULES_SIZE)
    if raw is None:
        return None
    try:
        rules = json.loads(raw.split(b"\0", 1)[0].decode("utf-8"))
    except ValueError:
        raise MigrationError("%s is not readable: remove it and the snapshot beside it" % _at_copy_rules(pin))
    return rules if isinstance(rules, dict) and isinstance(rules.get("rename"), dict) else None


def _unlink(path: str) -> None:
    if os.path.exists(path):
        os.unlink(path)


def set_aside(maps_dir: str) -> bool:
    """Whether maps_dir holds a map pin a migrating upgrade set aside (what Recovery puts in order)."""
    suffix = SET_ASIDE % ""
    return os.path.isdir(maps_dir) and any(entry.endswith(suffix) and entry != suffix for entry in os.listdir(maps_dir))


class Recovery:
    """What a run stopped in the middle of a migration (killed: no undo, no commit) left in maps_dir, put in order by
    the maps every attachment of the maps uses, never by one attachment's alone (a map set's attachments are swapped
    one after the other): each map pin set aside (SET_ASIDE, the old map), the new map pinned under its name, and the
    copy's snapshot (AT_COPY) until the old map's gains were added.

    `uses_old` and `uses_new` say whether a program's maps are the old ones or the new ones. When no attachment
    uses the new maps, or every one still using the old maps has been put back on them by its caller, `back()`
    puts the old maps back under their names, with what the new programs counted since the copy added (the
    snapshot says what the copy wrote); when none uses the old maps, `forward()` drops them, with what they
    counted between the copy and the last swap added to the new maps (the snapshot says what the copy read),
    unless the run had added it already (its snapshot is then gone). Each returns what was done, in words."""

    def __init__(self, maps_dir: str, rename: dict | None = None):
        self.maps_dir = maps_dir
        self.rename = rename or {}
        suffix = SET_ASIDE % ""
        entries = sorted(os.listdir(maps_dir)) if os.path.isdir(maps_dir) else []
        self.names = [entry[:-len(suffix)] for entry in entries if entry.endswith(suffix) and entry != suffix]
        self.old_ids: dict[str, int] = {}
        self.new_ids: dict[str, int] = {}
        for name in self.names:
            with _bpf.open_pinned_map(self._aside(name)) as old:
                self.old_ids[name] = old.info["id"]
            if os.path.exists(self._pin(name)):
                with _bpf.open_pinned_map(self._pin(name)) as new:
                    self.new_ids[name] = new.info["id"]

    def _pin(self, name: str) -> str:
        return os.path.join(self.maps_dir, name)

    def _aside(self, name: str) -> str:
        return os.path.join(self.maps_dir, SET_ASIDE % name)

    def copied(self) -> bool:
        """Whether a copy's snapshot is there (the stopped run copied a map and had not added its gains)."""
        return any(os.path.exists(_at_copy(self._pin(name))) for name in self.new_ids)

    def uses_old(self, map_ids) -> bool:
        return bool(set(map_ids) & set(self.old_ids.values()))

    def uses_new(self, map_ids) -> bool:
        return bool(set(map_ids) & set(self.new_ids.values()))

    def _copy(self, name: str) -> Copy | None:
        """The stopped run's copy of the map, planned again from its snapshot (None without one: the copy never
        started, the map was reset, or its gains were added)."""
        snapshot = _at_copy(self._pin(name))
        if name not in self.new_ids or not os.path.exists(snapshot):
            return None
        rules = copy_rules(self._pin(name))
        rename = rules["rename"] if rules is not None else self.rename.get(name) or {}
        return Copy(name, self._pin(name), _pinned(self._aside(name)), _pinned(self._pin(name)), rename,
                    source=snapshot)

    def back(self, moved_back: list[str] | None = None) -> list[str]:
        words = []
        for name in self.names:
            aside, pin = self._aside(name), self._pin(name)
            copy = self._copy(name) if moved_back else None
            carried = ""
            if copy is not None:
                carried = ", with what the new programs counted meanwhile (%d entries) added to it" % \
                    copy.carry_back(aside)
            _drop_snapshot(pin)
            used = name in self.new_ids
            if used:
                os.unlink(pin)
            os.rename(aside, pin)
            if moved_back:
                words.append("map %s: an upgrade stopped before its end, with %s moved to the new map (and their "
                             "pins and records not yet): %s back on the old map, which is back under its name%s, "
                             "the new map dropped" % (name, ", ".join(moved_back), "they are" if len(
                                 moved_back) > 1 else "it is", carried))
            else:
                words.append("map %s: an upgrade stopped before its swap had set the map aside (%s); it is back under "
                             "its name%s" % (name, aside, ", the new map made beside it dropped" if used else ""))
        return words

    def forward(self) -> list[str]:
        words = []
        for name in self.names:
            aside, pin = self._aside(name), self._pin(name)
            if name not in self.new_ids:  # nothing under its name: the old map is the only one there is
                os.rename(aside, pin)
                words.append("map %s: an upgrade stopped before its load left the map set aside (%s); it is back "
                             "under its name" % (name, aside))
                continue
            copy = self._copy(name)
            added = ""
            if copy is not None:
                copy.add_gained(aside)
                added = ", and what it counted after the copy was added to the new one"
            _drop_snapshot(pin)
            os.unlink(aside)
            words.append("map %s: an upgrade stopped after its swap left the old map set aside (%s); the programs on "
                         "the hooks use the new one, so the old one was dropped%s" % (name, aside, added))
        return words


# ---------------------------------------------------------------- fields


class _NoHost:
    """The resolver of a conversion: entries are copied as they are, nothing is looked up on the host."""

    place = "the map"

    @staticmethod
    def has_device(_index):
        return True

    @staticmethod
    def ifindex(name):
        raise _btf.NotationError("an interface name (%s) in a copied entry" % name)

    @staticmethod
    def program_id(ref):
        raise _btf.NotationError("a program (%s) in a copied entry" % ref)


_ENCODER = _btf.Encoder(_NoHost())


def _counters(layout: _btf.Layout) -> list[str]:
    """The names of a value's counters (integers that count, not bitfields; "" for a value that is one)."""
    if isinstance(layout, _btf.Struct):
        return [f.name for f in layout.fields if isinstance(f.layout, _btf.Int) and f.layout.counts and not f.bits
                and not isinstance(f.layout, _btf.Sized)]
    return [""] if isinstance(layout, _btf.Int) and layout.counts else []


class Conversion:
    """How one side (key or value) of a map's entries becomes the new layout's, field by field by name: what is
    given by name is kept (an integer re-encoded at its new width and sign, refused where it does not fit), a
    field of the new layout only is zero, a value field of the old layout only is dropped, `rename` (old name:
    new name) carries a field under another name. A key field dropped could make two keys one: refused."""

    def __init__(self, map_name: str, side: str, old: _btf.Layout, new: _btf.Layout, rename: dict):
        self.map_name, self.side, self.old, self.new = map_name, side, old, new
        self.sources: dict[str, str] = {}
        self.words: list[str] = []
        # Without BTF on a side, the bytes are carried as they are (their sizes agree).
        self.raw = False
        where = "map %s" % map_name
        structs = isinstance(old, _btf.Struct), isinstance(new, _btf.Struct)
        if not (_btf.from_btf(old) and _btf.from_btf(new)):
            if old.size != new.size:
                raise MigrationError("%s: its %s has no BTF on one side (%s -> %s), so it cannot be carried field by "
                                     "field; map_migration: reset starts it empty" % (where, side, old.name, new.name))
            self.raw = True
            return
        if structs[0] != structs[1]:
            raise MigrationError("%s: its %s is %s before and %s after; map_migration: reset starts it empty" % (
                where, side, old.name, new.name))
        if not structs[0]:
            if rename:
                raise MigrationError("%s: map_rename renames fields of a %s that has none (%s)" % (where, side, old.name))
            self.sources = {"": ""}
            return
        missing = [name for name in rename if name not in old.by_name]
        if missing:
            raise MigrationError("%s: map_rename names %s field %s, which the pinned map's %s does not have; its "
                                 "fields are %s" % (where, side, ", ".join(missing), old.name, ", ".join(old.by_name)))
        absent = [target for target in rename.values() if target not in new.by_name]
        if absent:
            raise MigrationError("%s: map_rename renames a field to %s, which the new %s does not have; its fields are "
                                 "%s" % (where, ", ".join(map(str, absent)), new.name, ", ".join(new.by_name)))
        carried = {target: source for source, target in rename.items()}
        for name in new.by_name:
            if name in carried:
                self.sources[name] = carried[name]
            elif name in old.by_name and name not in rename:
                self.sources[name] = name
        dropped = [name for name in old.by_name if name not in self.sources.values()]
        if side == "key" and dropped:
            raise MigrationError("%s: key field %s is not in the new key, and keys that differ only there would "
                                 "become one; carry it under another name with map_rename, or map_migration: reset "
                                 "starts the map empty" % (where, ", ".join(dropped)))
        self.words = ["%s field %s renamed to %s" % (side, source, target) for source, target in rename.items()]

    def convert(self, raw: bytes, where: str) -> bytes:
        """The entry's bytes in the new layout; MigrationError naming the entry when a field does not fit."""
        if self.raw:
            return bytes(raw[:self.new.size])
        value = self.old.decode(raw)
        if isinstance(self.old, _btf.Struct):
            if set(value) == {"hex"} and "hex" not in self.old.by_name:
                raise MigrationError("%s: its %s has bytes that no field covers (%s); map_migration: reset starts "
                                     "the map empty" % (where, self.side, value["hex"]))
            value = {name: value[source] for name, source in self.sources.items()}
        try:
            # where is said only in a message: its key is decoded then (a copy converts every entry).
            return self.new.encode(value, _ENCODER, self.side)
        except _btf.NotationError as exc:
            raise MigrationError("%s: %s; map_migration: reset starts the map empty" % (where, exc))

    def gained_here(self, before: bytes, now: bytes) -> list[tuple[int, int, int]]:
        """What each counter gained from before to now, as (offset, size, amount) in the old layout itself (4- and
        8-byte counters: what the copy's snapshot is advanced by, see Copy.add_gained)."""
        counters = _counters(self.old)
        if self.raw or not counters:
            return []
        was, is_now = self.old.decode(before), self.old.decode(now)
        if not isinstance(self.old, _btf.Struct):
            return [(0, self.old.size, is_now - was)] if is_now != was and self.old.size in _ATOMIC_ADD else []
        return [(field.offset, field.layout.size, is_now[field.name] - was[field.name])
                for field in (self.old.by_name[name] for name in counters)
                if is_now[field.name] != was[field.name] and field.layout.size in _ATOMIC_ADD]

    def zero_counters(self, raw: bytes) -> bytes:
        """An old-layout value with its counters zero (the rest as it is)."""
        counters = _counters(self.old)
        if self.raw or not counters:
            return raw
        if not isinstance(self.old, _btf.Struct):
            return bytes(len(raw))
        out = bytearray(raw)
        for name in counters:
            field = self.old.by_name[name]
            out[field.offset:field.offset + field.layout.size] = bytes(field.layout.size)
        return bytes(out)

    def gained(self, before: bytes, now: bytes) -> list[tuple[int, int, int]]:
        """What each counter gained from before to now (old layout), as (offset, size, amount) of its field in the
        new layout; [] when nothing did (or nothing is known to count)."""
        counters = _counters(self.old)
        if self.raw or not counters:
            return []
        was, is_now = self.old.decode(before), self.old.decode(now)
        if not isinstance(self.old, _btf.Struct):
            return [(0, self.new.size, is_now - was)] if is_now != was else []
        out = []
        for name, source in self.sources.items():
            field = self.new.by_name[name]
            if source in counters and isinstance(field.layout, _btf.Int) and not field.bits \
                    and is_now[source] != was[source]:
                out.append((field.offset, field.layout.size, is_now[source] - was[source]))
        return out


# Atomic adds to a map's values, run in the kernel (BPF_PROG_TEST_RUN of a program made of raw instructions): the new
# program counts into the same values meanwhile, and a read and write from here would lose what it counts between.
_LD_IMM64, _STX_DW, _MOV64_REG, _ADD64_IMM, _JEQ_IMM, _CALL = 0x18, 0x7b, 0xbf, 0x07, 0x15, 0x85
_ATOMIC_ADD = {8: 0xdb, 4: 0xc3}  # BPF_STX | BPF_ATOMIC | BPF_DW or BPF_W, imm BPF_ADD
_PSEUDO_MAP_FD, _LOOKUP, _LOOKUP_PERCPU = 1, 1, 195  # bpf_map_lookup_elem, bpf_map_lookup_percpu_elem (5.19)
_XDP_PASS = 2


def _ld_imm64(dst: int, value: int, src: int = 0) -> bytes:
    value &= (1 << 64) - 1
    low, high = value & 0xffffffff, value >> 32
    return _bpf.insn(_LD_IMM64, dst, src, 0, low - (1 << 32) if low >> 31 else low) + \
        _bpf.insn(0, 0, 0, 0, high - (1 << 32) if high >> 31 else high)


def adder(map_fd: int, key_size: int, adds: list[tuple[bytes, int | None, list[tuple[int, int, int]]]],
          more: tuple = ()) -> bytes:
    """Instructions that add amounts to values of a map atomically: per (key, CPU or None, [(offset, size,
    amount)]) a lookup (bpf_map_lookup_percpu_elem for a CPU's copy) and an atomic add per field; 4- and 8-byte
    fields only; then those of more, (map fd, key size, adds) of other maps, in the same program: one run of it
    makes every add or none (a run killed in the syscall never stops it halfway). Returns XDP_PASS."""
    code = b"".join(_adds(*group) for group in ((map_fd, key_size, adds),) + tuple(more))
    return code + _bpf.insn(_bpf.BPF_MOV64_IMM, 0, 0, 0, _XDP_PASS) + _bpf.insn(_bpf.BPF_EXIT)


def _adds(map_fd: int, key_size: int, adds: list) -> bytes:
    room = (key_size + 7) // 8 * 8
    code = b""
    for key, cpu, fields in adds:
        padded = bytes(key).ljust(room, b"\0")
        for i in range(0, room, 8):
            code += _ld_imm64(1, int.from_bytes(padded[i:i + 8], "little")) + _bpf.insn(_STX_DW, 10, 1, i - room)
        code += _ld_imm64(1, map_fd, _PSEUDO_MAP_FD) + _bpf.insn(_MOV64_REG, 2, 10) + \
            _bpf.insn(_ADD64_IMM, 2, 0, 0, -room)
        if cpu is not None:
            code += _bpf.insn(_bpf.BPF_MOV64_IMM, 3, 0, 0, cpu)
        code += _bpf.insn(_CALL, 0, 0, 0, _LOOKUP if cpu is None else _LOOKUP_PERCPU)
        code += _bpf.insn(_JEQ_IMM, 0, 0, 3 * len(fields), 0)
        for offset, size, amount in fields:
            code += _ld_imm64(1, amount) + _bpf.insn(_ATOMIC_ADD[size], 0, 1, offset)
    return code


def add_atomically(target: _bpf.Map, adds: list, also: tuple = ()) -> None:
    """Run adder() for target's adds, and also's ((map, adds) of other maps), once in the kernel: all or none."""
    more = tuple((other.fd, other.info["key_size"], its) for other, its in also if its)
    if not adds and not more:
        return
    code = adder(target.fd, target.info["key_size"], adds, more)
    with _bpf.Program.from_instructions("xdp", "ebpf_xdp_migrate", code) as program:
        program.test_run(bytes(64))


def _join(map_info: dict, raws: bytes | list[bytes]) -> bytes:
    """A value as Map.update takes it (per-CPU: each CPU's copy in its 8-byte-aligned slot)."""
    if isinstance(raws, list):
        slot = (map_info["value_size"] + 7) // 8 * 8
        return b"".join(raw.ljust(slot, b"\0") for raw in raws)
    return raws


# Maps whose values are kernel objects (read back by id, written by file descriptor or bound to a device): no copy.
HOLDERS = {"array_of_maps": "maps", "hash_of_maps": "maps", "prog_array": "programs", "devmap": "devices and programs",
           "devmap_hash": "devices and programs", "cpumap": "CPUs and programs", "xskmap": "sockets",
           "sockmap": "sockets", "sockhash": "sockets"}


class _Where:
    """An entry named for a message (its key decoded only when a message says it)."""

    def __init__(self, copy: Copy, key: bytes):
        self.copy, self.key = copy, key

    def __str__(self) -> str:
        return "map %s, entry %s" % (self.copy.name, self.copy.key.old.decode(self.key))


class Copy:
    """A changed map's entries carried into the new map field by field: planned (and every entry converted in
    memory) when reviewed, written into the new map before the swap (`write`), topped up after it with what the
    old map's counters gained meanwhile (`add_gained`)."""

    def __init__(self, name: str, pin: str, old: tuple, new: tuple, rename: dict, source: str | None = None):
        (old_info, _flags, old_btf), (new_info, _new_flags, new_btf) = old, new
        if old_info["type"] != new_info["type"]:
            raise MigrationError("map %s: its type changes from %s to %s, which no copy carries; map_migration: reset "
                                 "starts it empty" % (name, old_info["type"], new_info["type"]))
        if old_info["type"] in HOLDERS:
            # Their values read back as ids (of maps, programs) where a write takes file descriptors.
            raise MigrationError("map %s: a %s holds %s, which a copy by value cannot carry; map_migration: reset "
                                 "starts it empty (whoever fills it, devmap_group for a multicast set's groups, "
                                 "writes it again)" % (name, old_info["type"], HOLDERS[old_info["type"]]))
        old_key, old_value = _btf.layouts(old_info, old_btf)
        new_key, new_value = _btf.layouts(new_info, new_btf)
        if old_value.prog_offsets() or new_value.prog_offsets():
            raise MigrationError("map %s holds programs, which a copy cannot carry" % name)
        self.name, self.pin, self.rename = name, pin, rename
        self.key = Conversion(name, "key", old_key, new_key, {})
        self.value = Conversion(name, "value", old_value, new_value, rename)
        self.array = new_info["type"] in ("array", "percpu_array")
        self.max_entries = new_info["max_entries"]
        self.copied = 0
        # Seconds from the copy's read of the old map to the swap's end: what the old program counted in it is
        # what add_gained tops up (None until a real run swapped).
        self.window: float | None = None
        self._copy_started = 0.0
        self.snapshot: dict = {}
        # New key -> old key, of the entries carried (what carry_back adds to).
        self.old_keys: dict[bytes, bytes] = {}
        # What this run wrote into the new map, by new key: per CPU, each counter carried back (see carry_back).
        # What this run added to the new map after write(), by new key: per CPU, each counter carried back (see
        # carry_back; what write() wrote is self.planned, read only when carrying back).
        self.written: dict[bytes, list[dict[str, int]]] = {}
        # Whether the new map holds the planned entries (write() ran, or a recovery's stopped run's did).
        self.wrote = source is not None
        # The planned entries' values per CPU in the new layout, by new key (what write() writes).
        self.planned: dict[bytes, list[bytes]] = {}
        # Each old key's conversion by its value (old value, new key, values): write() converts again only the
        # entries that changed since the review (100,000 entries, a few of them touched meanwhile).
        self._converted: dict[bytes, tuple] = {}
        # A recovery's copy is planned from the snapshot a stopped run pinned (Recovery), the old map at source.
        self.entries = self._plan(source or pin)

    def _where(self, key: bytes) -> _Where:
        return _Where(self, key)

    def _plan(self, path: str) -> list[tuple[bytes, bytes]]:
        """Every entry of the map at path, converted: (new key, new value as update() takes it)."""
        out = []
        self.planned = {}
        with _bpf.open_pinned_map(path) as old:
            self.snapshot = dict(old.items())
            info = dict(old.info)
        for key, value in self.snapshot.items():
            raws = value if isinstance(value, list) else [value]
            where = self._where(key)
            known = self._converted.get(key)
            if known is not None and known[0] == value:
                new_key, converted = known[1], known[2]
                if converted is None:
                    self.old_keys[new_key] = key
                    continue
                self.old_keys[new_key] = key
                self.planned[new_key] = converted
                out.append((new_key, _join(dict(info, value_size=self.value.new.size),
                                           converted if isinstance(value, list) else converted[0])))
                continue
            if self.array and not any(raw.strip(b"\0") for raw in raws):
                if int.from_bytes(key[:4], "little") < self.max_entries:
                    new_key = self.key.convert(key, where)
                    self.old_keys[new_key] = key  # what the new program counts there goes back
                    self._converted[key] = (value, new_key, None)
                continue  # an array's zero entries: the new array has them already
            new_key = self.key.convert(key, where)
            if self.array and int.from_bytes(new_key[:4], "little") >= self.max_entries:
                raise MigrationError("%s: the new map has %d entries, and this one is past them; map_migration: reset "
                                     "starts it empty" % (where, self.max_entries))
            converted = [self.value.convert(raw, where) for raw in raws]
            new_value = converted if isinstance(value, list) else converted[0]
            self.old_keys[new_key] = key
            self.planned[new_key] = converted
            self._converted[key] = (value, new_key, converted)
            out.append((new_key, _join(dict(info, value_size=self.value.new.size), new_value)))
        if not self.array and len(out) > self.max_entries:
            raise MigrationError("map %s: %d entries do not fit the new map's %d; map_migration: reset starts it "
                                 "empty" % (self.name, len(out), self.max_entries))
        self.copied = len(out)
        return out

    def write(self, set_aside: str, during: Callable[[], None] | None = None) -> None:
        """Read the old map (now pinned at set_aside) again, convert and write every entry into the new map at
        the pin (the one the load created)."""
        self._copy_started = time.monotonic()
        self.entries = self._plan(set_aside)
        self._pin_snapshot(set_aside)
        with _bpf.open_pinned_map(self.pin) as new:
            for key, value in self.entries[:1]:
                new.update(key, value)
                if during is not None:
                    during()
            new.update_many(self.entries[1:])
        # No program writes the new map before the swap: what it holds is self.planned (read when carrying back).
        self.written, self.wrote = {}, True

    def _pin_snapshot(self, set_aside: str) -> None:
        """The old map's entries as the copy read them (self.snapshot), pinned beside the new map (AT_COPY) in a
        hash of the old map's key and value sizes, for a run killed before add_gained (Recovery)."""
        path = _at_copy(self.pin)
        _drop_snapshot(self.pin)
        _pin_rules(self.pin, self.rename)
        with _bpf.open_pinned_map(set_aside) as old:
            info, percpu = old.info, old.percpu
        # Room for the keys the old map gets after the copy (add_gained enters them).
        with _bpf.Map.create(_SNAPSHOT_TYPES[percpu], "at_copy", info["key_size"], info["value_size"],
                             max(len(self.snapshot), info["max_entries"], 1)) as snapshot:
            snapshot.update_many([(key, _join(info, value)) for key, value in self.snapshot.items()])
            snapshot.pin(path)

    def add_gained(self, set_aside: str, between: Callable[[], None] | None = None) -> None:
        """After the swap the old map is no longer written: add to the new map what its counters gained since
        the copy, atomically (the new program counts into the same values); an entry made meanwhile is made in the
        new map with its counters zero, and added to as the others.

        The same kernel run advances the copy's snapshot (AT_COPY) by what it adds, so that the snapshot always
        says what the new map holds of the old one: a run killed after the adds, before the snapshot is dropped,
        leaves nothing to add again to a recovery (forward: the old map and its snapshot agree; back: what
        the new programs counted is the new map beyond the snapshot). between(): after the adds, before the
        snapshot goes (a fault point's hook)."""
        self.window = time.monotonic() - self._copy_started
        adds, advances = [], []
        with contextlib.ExitStack() as stack:
            old = stack.enter_context(_bpf.open_pinned_map(set_aside))
            new = stack.enter_context(_bpf.open_pinned_map(self.pin))
            snapshot = stack.enter_context(_bpf.open_pinned_map(_at_copy(self.pin))) \
                if os.path.exists(_at_copy(self.pin)) else None
            for key, now in old.items():
                before = self.snapshot.get(key)
                if before == now:
                    continue
                where = self._where(key)
                new_key = self.key.convert(key, where)
                nows = now if isinstance(now, list) else [now]
                self.old_keys[new_key] = key
                if before is None:
                    # Made after the copy: zero in the snapshot (a run killed before the adds adds it whole, once),
                    # and in the new map with what is not a counter (what the new program made there stays).
                    befores = [bytes(len(nows[0]))] * len(nows)
                    if new.lookup(new_key) is None:
                        bare = [self.value.convert(self.value.zero_counters(n), where) for n in nows]
                        new.update(new_key, _join(new.info, bare if isinstance(now, list) else bare[0]))
                    if snapshot is not None:
                        snapshot.update(key, _join(snapshot.info, befores if isinstance(now, list) else befores[0]))
                else:
                    befores = before if isinstance(before, list) else [before]
                for cpu, (was, is_now) in enumerate(zip(befores, nows)):
                    fields = self.value.gained(was, is_now)
                    unsupported = [f for f in fields if f[1] not in _ATOMIC_ADD]
                    if unsupported:
                        size, amount = unsupported[0][1:]
                        raise MigrationError("%s: a counter of %d bytes gained %d after the copy, which only 4- and "
                                             "8-byte counters can be added to" % (where, size, amount))
                    if fields:
                        adds.append((new_key, cpu if new.percpu else None, fields))
                        counts = self.written.setdefault(new_key, [{} for _cpu in nows])
                        for offset, _size, amount in fields:
                            name = self._at_offset(offset)
                            if name is not None and cpu < len(counts):
                                counts[cpu][name] = counts[cpu].get(name, 0) + amount
                    here = self.value.gained_here(was, is_now) if snapshot is not None else []
                    if here:
                        advances.append((key, cpu if snapshot.percpu else None, here))
            add_atomically(new, adds, also=((snapshot, advances),) if snapshot is not None else ())
        if between is not None:
            between()
        _drop_snapshot(self.pin)

    def carries_back(self) -> bool:
        """Whether carry_back has counters to add (a map without counters is put back as it was)."""
        return bool(self._back())

    def _back(self) -> dict[str, tuple[int, int]]:
        """The new layout's counters that carry_back adds to the old map: name -> (offset, size) of the old field
        it came from (a counter there too, 4 or 8 bytes: the kernel's atomic adds)."""
        counters = _counters(self.value.old)
        if self.value.raw or not counters:
            return {}
        if not isinstance(self.value.old, _btf.Struct):
            return {"": (0, self.value.old.size)} if self.value.old.size in _ATOMIC_ADD else {}
        out = {}
        for name, source in self.value.sources.items():
            field, was = self.value.new.by_name[name], self.value.old.by_name[source]
            if source in counters and isinstance(field.layout, _btf.Int) and not field.bits \
                    and was.layout.size in _ATOMIC_ADD:
                out[name] = (was.offset, was.layout.size)
        return out

    def _counted(self, raw: bytes) -> dict[str, int]:
        """The counters carry_back carries, read from a value in the new layout."""
        back = self._back()
        if not back:
            return {}
        value = self.value.new.decode(raw)
        return {"": value} if "" in back else {name: value[name] for name in back}

    def _at_offset(self, offset: int) -> str | None:
        if not isinstance(self.value.new, _btf.Struct):
            return "" if offset == 0 else None
        return next((name for name, field in self.value.new.by_name.items() if field.offset == offset), None)

    def carry_back(self, set_aside: str) -> int:
        """A migrating upgrade going back after its swap, once the old programs are on the hooks again (the new
        map is no longer written): add to the old map (pinned at set_aside) what the new programs counted in
        their moments on the hooks, beyond what this run wrote into the new map, field by field back to the old
        layout, atomically (the old programs count into the same values). Entries the new programs made that
        the old map does not have are not carried. Returns the entries added to."""
        with _bpf.open_pinned_map(self.pin) as new, _bpf.open_pinned_map(set_aside) as old:
            return self.carry_back_between(new, old)

    def carry_back_between(self, new: _bpf.Map, old: _bpf.Map) -> int:
        """carry_back() from the new map to the old one, both open (datapath's put-back, after their pins went)."""
        back = self._back()
        if not back or not self.wrote:
            return 0
        adds = []
        for key, now in new.items():
            old_key = self.old_keys.get(key)
            if old_key is None:
                continue
            nows = now if isinstance(now, list) else [now]
            written = [self._counted(raw) for raw in self.planned.get(key, [])] or [{} for _cpu in nows]
            for cpu, added in enumerate(self.written.get(key, [])):
                if cpu < len(written):
                    written[cpu] = {name: written[cpu].get(name, 0) + added.get(name, 0)
                                    for name in set(written[cpu]) | set(added)}
            for cpu, (raw, was) in enumerate(zip(nows, written)):
                fields = [back[name] + (amount,) for name, amount in (
                    (name, count - was.get(name, 0)) for name, count in self._counted(raw).items()) if amount > 0]
                if fields:
                    adds.append((old_key, cpu if old.percpu else None, fields))
        add_atomically(old, adds)
        return len(adds)
