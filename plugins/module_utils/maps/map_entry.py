# -*- coding: utf-8 -*-
# Copyright (c) ebpf.xdp contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Entries of a pinned map: keys and values from inventory notation to bytes and back, and their convergence.

Private to the ebpf.xdp collection: the interface may change without notice.

A map's key and value each get a layout (`maps/btf`: from the map's BTF
where it has one, else from its sizes), the same ones `ebpf.xdp.xdp_facts`
decodes with: a layout encodes a value written the way inventory writes it
(integers, `{ifindex: NAME}`, IP and MAC addresses, `{hex: ...}`, text, a
dict of fields for a struct, a list for an array) and decodes bytes read
from the map into the same notation. Encoding asks a resolver for what only
the host knows (interface indexes, program ids), so everything above
`MapEntries` is pure and tested without a kernel.

`MapEntries.converge` reads the map once, compares bytes, and writes only
what differs; a write the kernel refuses puts back what was written before it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import sys

from ansible_collections.ebpf.xdp.plugins.module_utils.host import netns as _netns
from ansible_collections.ebpf.xdp.plugins.module_utils.host.journal import Journal
from ansible_collections.ebpf.xdp.plugins.module_utils.bpf import libbpf as _bpf, pins as _pins
from ansible_collections.ebpf.xdp.plugins.module_utils.maps import btf as _btf

# Map types whose entries this manages: fixed-size keys and values that are data, not file descriptors.
SUPPORTED_TYPES = ("hash", "array", "percpu_hash", "percpu_array", "lru_hash", "lru_percpu_hash", "lpm_trie",
                   "devmap", "devmap_hash")
# Every key of an array exists: an entry there is "absent" when its value is all zero.
ARRAY_TYPES = ("array", "percpu_array")
# Keys are indexes below max_entries.
INDEXED_TYPES = ("array", "percpu_array", "devmap")
# Full maps evict instead of refusing a new key.
EVICTING_TYPES = ("lru_hash", "lru_percpu_hash")
DEVMAP_TYPES = _btf.DEVMAP_TYPES


# bpf_map_entry's options (documented there; ebpf.xdp.datapath's config.map_entries entries take the same).
ENTRY_ARGS = dict(
    path=dict(type="path", required=True),
    netns=dict(type="str"),
    entries=dict(type="list", elements="dict", default=[], options=dict(
        key=dict(type="raw", required=True, no_log=False),
        value=dict(type="raw"),
    )),
    state=dict(type="str", choices=["present", "absent"], default="present"),
    exclusive=dict(type="bool", default=False),
)


# A key or value that cannot be written, or a map this module does not manage: one error with the layouts'.
MapEntryError = _btf.NotationError


# ---------------------------------------------------------------- plans


def _same(values: tuple, wanted: bytes) -> bool:
    """Every CPU's copy holds the wanted bytes."""
    return all(value == wanted for value in values)


def plan(current: dict, desired: dict, exclusive: bool, zero: bytes | None = None) -> tuple[dict, list]:
    """What to write: ({key: bytes to write}, [keys to delete]).

    current: key -> tuple of values (one per CPU for per-CPU maps); desired:
    key -> bytes, or None for "absent". With zero (array maps, whose keys
    always exist), absent means all zero: such keys are written with zero
    instead of deleted.
    """
    updates, deletes = {}, []
    wanted = dict(desired)
    if exclusive:
        for key in current:
            wanted.setdefault(key, None)
    for key, value in wanted.items():
        if value is None:
            if zero is not None:
                if key in current and not _same(current[key], zero):
                    updates[key] = zero
            elif key in current:
                deletes.append(key)
        elif key not in current or not _same(current[key], value):
            updates[key] = value
    return updates, deletes


def after(current: dict, updates: dict, deletes: list, ncpus: int = 1) -> dict:
    """The map's contents once the plan is carried out."""
    out = {key: value for key, value in current.items() if key not in deletes}
    out.update((key, (value,) * ncpus) for key, value in updates.items())
    return out


def key_order(key: bytes) -> bytes:
    # Little-endian integer keys sort by value when read from their last byte.
    return key[::-1] if sys.byteorder == "little" else key


def decode_entries(contents: dict, key_layout: _btf.Layout, value_layout: _btf.Layout, percpu: bool,
                   zero: bytes | None = None) -> list[dict]:
    """Entries in the task's notation, by key; a per-CPU value reads as one `value` when every CPU holds it,
    else as `values`, one per CPU. An array's all-zero entries are left out."""
    out = []
    for key in sorted(contents, key=key_order):
        values = contents[key]
        if zero is not None and _same(values, zero):
            continue
        entry = {"key": key_layout.decode(key)}
        if percpu and not _same(values, values[0]):
            entry["values"] = [value_layout.decode(value) for value in values]
        else:
            entry["value"] = value_layout.decode(values[0])
        out.append(entry)
    return out


# ---------------------------------------------------------------- the map


class KernelResolver:
    """Names resolved in the namespace the module runs in (entered before encoding)."""

    def __init__(self, netns: str | None):
        self.place = "network namespace %r" % netns if netns else "this network namespace"

    def ifindex(self, name: str) -> int:
        try:
            return _netns.ifindex(name)
        except _netns.NotFoundError:
            raise _netns.NotFoundError("interface %r does not exist in %s" % (name, self.place))

    @staticmethod
    def has_device(index: int) -> bool:
        return _netns.ifname(index) is not None

    @staticmethod
    def program_id(ref) -> int:
        if isinstance(ref, int):
            with _bpf.Program.from_id(ref) as prog:
                return prog.info()["id"]
        with _bpf.Program.from_pin(ref) as prog:
            kind = os.readlink("/proc/self/fd/%d" % prog.fd)
            if kind != "anon_inode:bpf-prog":
                raise _bpf.BpfError("%s is a pinned %s, not a program" % (ref, kind.rpartition("bpf-")[2]))
            return prog.info()["id"]


class MapEntries:
    """One pinned map's entries: read once, compared as bytes, written where they differ."""

    def __init__(self, bpf_map: _bpf.Map):
        self.map = bpf_map
        self.info = bpf_map.info
        kind = self.info["type"]
        if kind not in SUPPORTED_TYPES:
            hint = "; use ebpf.xdp.devmap_group for multicast groups" if kind == "hash_of_maps" else ""
            raise MapEntryError("%s is a %s map; bpf_map_entry manages %s maps%s" % (
                bpf_map.label, kind, ", ".join(SUPPORTED_TYPES), hint))
        self.btf = _bpf.map_btf(bpf_map)
        self.key, self.value = _btf.layouts(self.info, self.btf)
        self.zero = bytes(self.info["value_size"]) if kind in ARRAY_TYPES else None

    def describe(self) -> dict:
        out = {name: self.info[name] for name in ("id", "name", "type", "key_size", "value_size", "max_entries")}
        out["btf"] = self.btf is not None
        return out

    def read(self) -> dict:
        return {key: tuple(value) if isinstance(value, list) else (value,) for key, value in self.map.items()}

    def desired(self, entries: list[dict], state: str, resolver) -> dict:
        """key bytes -> value bytes (None for absent); every entry checked before anything is written."""
        enc = _btf.Encoder(resolver)
        out, where_of = {}, {}
        for i, entry in enumerate(entries):
            where = "entries[%d]" % i
            if entry.get("key") is None:
                raise MapEntryError("%s has no key" % where)
            if state == "absent" and entry.get("value") is not None:
                raise MapEntryError("%s: state=absent takes keys only; remove the value" % where)
            if state == "present" and entry.get("value") is None:
                raise MapEntryError("%s: state=present needs a value" % where)
            key = self.key.encode(entry["key"], enc, where + ".key")
            if key in out:
                raise MapEntryError("%s: the same key as %s" % (where, where_of[key]))
            if self.info["type"] in INDEXED_TYPES:
                index = int.from_bytes(key, sys.byteorder)
                if index >= self.info["max_entries"]:
                    raise MapEntryError("%s.key: %d is out of range for %s, a %s of %d entries (0..%d)" % (
                        where, index, self.info["name"], self.info["type"], self.info["max_entries"],
                        self.info["max_entries"] - 1))
            where_of[key] = where
            out[key] = self.value.encode(entry["value"], enc, where + ".value") if state == "present" else None
        return out

    def converge(self, entries: list[dict], state: str, exclusive: bool, resolver, check_mode: bool) -> dict:
        if exclusive and state != "present":
            raise MapEntryError("exclusive applies to state=present only (it removes the entries not listed)")
        desired = self.desired(entries, state, resolver)
        current = self.read()
        updates, deletes = plan(current, desired, exclusive, self.zero)
        new = after(current, updates, deletes, self.map.ncpus)
        if self.info["type"] not in INDEXED_TYPES + EVICTING_TYPES and len(new) > self.info["max_entries"]:
            raise MapEntryError("%s holds at most %d entries; this task would leave %d in it" % (
                self.info["name"], self.info["max_entries"], len(new)))
        if not check_mode:
            try:
                self._apply(current, updates, deletes)
            finally:
                if updates or deletes:
                    _pins.wrote_map_sets()  # a map of a set, perhaps: its groups are read again
            new = self.read()
        before = decode_entries(current, self.key, self.value, self.map.percpu, self.zero)
        after_entries = decode_entries(new, self.key, self.value, self.map.percpu, self.zero)
        return {
            "changed": bool(updates or deletes),
            "map": self.describe(),
            "entries": after_entries,
            "updated": [self.key.decode(key) for key in sorted(updates, key=key_order)],
            "deleted": [self.key.decode(key) for key in sorted(deletes, key=key_order)],
            "diff": {"before": {"entries": before}, "after": {"entries": after_entries},
                     "before_header": self.map.label, "after_header": self.map.label},
        }

    def _write(self, key: bytes, values: tuple) -> None:
        """Write one value per CPU (or one), program ids turned into fds of those programs."""
        offsets = self.value.prog_offsets()
        programs = []
        try:
            if offsets:
                patched = []
                for value in values:
                    value = bytearray(value)
                    for offset in offsets:
                        prog_id = int.from_bytes(value[offset:offset + 4], sys.byteorder)
                        if prog_id:
                            programs.append(_bpf.Program.from_id(prog_id))
                            value[offset:offset + 4] = programs[-1].fd.to_bytes(4, sys.byteorder)
                    patched.append(bytes(value))
                values = tuple(patched)
            self.map.update(key, b"".join(value.ljust(self.map.slot, b"\0") for value in values))
        except _bpf.BpfError as exc:
            if programs and exc.errno == errno.EINVAL:
                raise _bpf.BpfError("%s (the program of a devmap value must be an XDP program loaded for devmaps, "
                                    "SEC(\"xdp/devmap\"))" % exc)
            raise
        finally:
            for prog in programs:
                prog.close()

    def _apply(self, current: dict, updates: dict, deletes: list) -> None:
        journal = Journal()
        try:
            for key in deletes:
                self.map.delete(key)
                journal.did(self._putting_back(current, key))
            for key, value in updates.items():
                self._write(key, (value,) * self.map.ncpus)
                journal.did(self._putting_back(current, key))
        except _bpf.BpfError as exc:
            done = len(journal.steps)
            failed = [error for _what, error in journal.undo() if error is not None]
            if failed:
                raise MapEntryError("%s; putting back the entries written before it (%d) failed too: %s" % (
                    exc, done, failed[0]))
            raise MapEntryError("%s; the entries written before it (%d) were put back" % (exc, done))

    def _putting_back(self, current: dict, key: bytes):
        """The undo of a write or delete of key: its value as it was, or no entry."""
        if key in current:
            return lambda: self._write(key, current[key])
        return lambda: self.map.delete(key)


def converge(params: dict, check_mode: bool) -> dict:
    """The module's work: open the map, enter the namespace, lock the map (not in check mode, which writes
    nothing, not even a lock file), converge."""
    with _netns.netns(params["netns"]):
        with _bpf.open_pinned_map(params["path"]) as bpf_map, contextlib.ExitStack() as locked:
            entries = MapEntries(bpf_map)
            if not check_mode:
                locked.enter_context(_pins.lock("maps", "map-%d" % bpf_map.info["id"]))
            result = entries.converge(params["entries"], params["state"], params["exclusive"],
                                      KernelResolver(params["netns"]), check_mode)
    result["path"] = params["path"]
    return result
