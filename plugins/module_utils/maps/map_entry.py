# -*- coding: utf-8 -*-
# Copyright (c) ebpf.xdp contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Entries of a pinned map: keys and values from inventory notation to bytes and back, and their convergence.

Private to the ebpf.xdp collection: the interface may change without notice.

A map's key and value each get a layout: from the map's BTF where it has one
(`layout_from_btf`, over the plain type table `_bpf.map_btf` reads), else
from its sizes alone (`Sized`; devmap values are struct bpf_devmap_val,
because libbpf keeps BTF off devmaps). A layout encodes a value written the
way inventory writes it (integers, `{ifindex: NAME}`, IP and MAC addresses,
`{hex: ...}`, a dict of fields for a struct, a list for an array) and
decodes bytes read from the map into the same notation. Encoding asks a
resolver for what only the host knows (interface indexes, program ids), so
everything above `MapEntries` is pure and tested without a kernel.

`MapEntries.converge` reads the map once, compares bytes, and writes only
what differs; a write the kernel refuses puts back what was written before it.
"""

from __future__ import annotations

import contextlib
import errno
import ipaddress
import os
import re
import sys

from ansible_collections.ebpf.xdp.plugins.module_utils.host import netns as _netns
from ansible_collections.ebpf.xdp.plugins.module_utils.bpf import libbpf as _bpf, pins as _pins
from ansible_collections.ebpf.xdp.plugins.module_utils.traffic import frames as _frames
from ansible_collections.ebpf.xdp.plugins.module_utils._errors import EbpfXdpError

# Map types whose entries this manages: fixed-size keys and values that are data, not file descriptors.
SUPPORTED_TYPES = ("hash", "array", "percpu_hash", "percpu_array", "lru_hash", "lru_percpu_hash", "lpm_trie",
                   "devmap", "devmap_hash")
# Every key of an array exists: an entry there is "absent" when its value is all zero.
ARRAY_TYPES = ("array", "percpu_array")
# Keys are indexes below max_entries.
INDEXED_TYPES = ("array", "percpu_array", "devmap")
# Full maps evict instead of refusing a new key.
EVICTING_TYPES = ("lru_hash", "lru_percpu_hash")
DEVMAP_TYPES = ("devmap", "devmap_hash")

_DECIMAL = re.compile(r"[+-]?[0-9]+")
_HEXADECIMAL = re.compile(r"[+-]?0[xX][0-9a-fA-F]+")
_HEX_SEPARATORS = re.compile(r"[\s:.-]")
_ALIASES = ("typedef", "const", "volatile", "restrict", "type_tag")

NOTATIONS = "an integer, {ifindex: NAME}, an IP or MAC address, or {hex: BYTES}"


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


class MapEntryError(EbpfXdpError):
    """A key or value that cannot be written, or a map this module does not manage."""


# ---------------------------------------------------------------- notation


def as_int(value) -> int | None:
    """An integer given as one, as a boolean, or as a decimal or 0x string (templates give strings); else None."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        text = value.strip()
        if _DECIMAL.fullmatch(text):
            return int(text, 10)
        if _HEXADECIMAL.fullmatch(text):
            return int(text, 16)
    return None


def as_bytes(value, where: str) -> tuple[bytes, str] | None:
    """Bytes given as {hex: ...}, an IPv4/IPv6 address or a MAC, with what they are (for messages); else None."""
    if isinstance(value, dict) and set(value) == {"hex"}:
        if not isinstance(value["hex"], str):
            # YAML reads {hex: 0a} as a string but {hex: 10} or {hex: 0x0a} as a number, whose digits are
            # no longer the ones written.
            raise MapEntryError("%s: {hex: %s} is a number, not hex digits; quote the hex digits: {hex: '0a'}"
                                % (where, value["hex"]))
        text = _HEX_SEPARATORS.sub("", value["hex"])
        if text[:2] in ("0x", "0X"):
            text = text[2:]
        try:
            return bytes.fromhex(text), "{hex: %s}" % value["hex"]
        except ValueError:
            raise MapEntryError("%s: {hex: %s} is not an even number of hex digits" % (where, value["hex"]))
    if isinstance(value, str):
        text = value.strip()
        if text.count(":") == 5 or text.count("-") == 5:  # six parts: no IP address, a MAC if anything
            try:
                return _frames.mac_bytes(text.replace("-", ":")), "the MAC address %s" % text
            except ValueError:
                return None
        try:
            address = ipaddress.ip_address(text)
        except ValueError:
            return None
        return address.packed, "the IPv%d address %s" % (address.version, text)
    return None


def _describe(value) -> str:
    return repr(value) if isinstance(value, str) else str(value)


class Encoder:
    """What encoding asks the host: interface indexes, devices, program ids (through a resolver)."""

    def __init__(self, resolver):
        self.resolver = resolver

    def ifindex(self, value, where: str) -> int | None:
        """{ifindex: NAME} as a number; None for anything else."""
        if not (isinstance(value, dict) and set(value) == {"ifindex"}):
            return None
        return self.interface(value["ifindex"], where)

    def interface(self, name, where: str) -> int:
        number = as_int(name)
        if number is not None:
            return number
        try:
            return self.resolver.ifindex(str(name))
        except _netns.NotFoundError as exc:
            raise MapEntryError("%s: %s" % (where, exc))

    def device(self, index: int, where: str) -> None:
        if not self.resolver.has_device(index):
            raise MapEntryError("%s: no interface has index %d in %s" % (where, index, self.resolver.place))

    def program(self, ref, where: str) -> int:
        try:
            return self.resolver.program_id(ref)
        except _bpf.BpfError as exc:
            raise MapEntryError("%s: %s" % (where, exc))


# ---------------------------------------------------------------- layouts


class Layout:
    """How one key, value or field is laid out: size in bytes and a name for messages."""

    size = 0
    name = ""

    def encode(self, value, enc: Encoder, where: str) -> bytes:
        raise NotImplementedError

    def decode(self, raw: bytes):
        raise NotImplementedError

    def prog_offsets(self) -> list[int]:
        """Offsets of program references: written as fds, read back as ids."""
        return []

    def _exact(self, found: tuple[bytes, str], where: str) -> bytes:
        data, what = found
        if len(data) != self.size:
            raise MapEntryError("%s: %s is %d bytes; %s is %d" % (where, what, len(data), self.name, self.size))
        return data

    def _not_a_value(self, value, where: str, expected: str = NOTATIONS):
        raise MapEntryError("%s: %s is not a value for %s; give %s" % (where, _describe(value), self.name, expected))


class Int(Layout):
    """An integer of the host's byte order (how the program reads it), range-checked."""

    def __init__(self, size: int, signed: bool = False, name: str = "", boolean: bool = False):
        self.size, self.signed, self.boolean = size, signed, boolean
        self.name = name or "%s%d" % ("s" if signed else "u", size * 8)

    def bounds(self) -> tuple[int, int]:
        bits = self.size * 8
        return (-(1 << bits - 1), (1 << bits - 1) - 1) if self.signed else (0, (1 << bits) - 1)

    def number(self, value, enc: Encoder, where: str) -> int | None:
        number = as_int(value)
        return number if number is not None else enc.ifindex(value, where)

    def encode(self, value, enc, where):
        number = self.number(value, enc, where)
        if number is None:
            found = as_bytes(value, where)
            if found is None:
                self._not_a_value(value, where)
            return self._exact(found, where)
        low, high = self.bounds()
        if not low <= number <= high:
            raise MapEntryError("%s: %d is out of range for %s (%d..%d)" % (where, number, self.name, low, high))
        return number.to_bytes(self.size, sys.byteorder, signed=number < 0)

    def decode(self, raw):
        number = int.from_bytes(raw[:self.size], sys.byteorder, signed=self.signed)
        return bool(number) if self.boolean and number in (0, 1) else number


class Sized(Int):
    """A key or value known only by its size (a map without BTF): an integer of either sign, or exact bytes."""

    def __init__(self, size: int, what: str):
        super().__init__(size, name="a %d-byte %s" % (size, what))

    def bounds(self):
        bits = self.size * 8
        return -(1 << bits - 1), (1 << bits) - 1

    def decode(self, raw):
        if self.size in (1, 2, 4, 8):
            return int.from_bytes(raw, sys.byteorder)
        return {"hex": raw.hex()}


class Enum(Int):
    """An integer that also takes the names of its enumerators, and reads back as one where it matches."""

    def __init__(self, size, signed, name, values):
        super().__init__(size, signed, name)
        self.values = dict(values)

    def number(self, value, enc, where):
        if isinstance(value, str) and value.strip() in self.values:
            return self.values[value.strip()]
        return super().number(value, enc, where)

    def decode(self, raw):
        number = super().decode(raw)
        names = [name for name, known in self.values.items() if known == number]
        return names[0] if names else number


class Bytes(Layout):
    """A byte array: an address, a MAC, {hex: ...} or a list of byte values, zero-filled after what is given."""

    def __init__(self, size: int, name: str):
        self.size, self.name = size, name

    def encode(self, value, enc, where):
        if isinstance(value, list):
            values = [as_int(item) for item in value]
            if any(item is None or not 0 <= item <= 255 for item in values):
                raise MapEntryError("%s: %s is not a list of byte values (0..255)" % (where, value))
            found = bytes(values), "a list of %d bytes" % len(values)
        else:
            found = as_bytes(value, where)
            if found is None:
                self._not_a_value(value, where, "an IP or MAC address, {hex: BYTES} or a list of byte values")
        if len(found[0]) > self.size:
            raise MapEntryError("%s: %s is %d bytes; %s has room for %d" % (
                where, found[1], len(found[0]), self.name, self.size))
        return found[0].ljust(self.size, b"\0")

    def decode(self, raw):
        return {"hex": raw[:self.size].hex()}


class Array(Layout):
    """An array of wider elements: a list, zero-filled after what is given (as a C initializer)."""

    def __init__(self, elem: Layout, count: int):
        self.elem, self.count = elem, count
        self.size, self.name = elem.size * count, "%s[%d]" % (elem.name, count)

    def encode(self, value, enc, where):
        if not isinstance(value, list):
            self._not_a_value(value, where, "a list of up to %d values" % self.count)
        if len(value) > self.count:
            raise MapEntryError("%s: %d values for %s" % (where, len(value), self.name))
        data = b"".join(self.elem.encode(item, enc, "%s[%d]" % (where, i)) for i, item in enumerate(value))
        return data.ljust(self.size, b"\0")

    def decode(self, raw):
        step = self.elem.size
        return [self.elem.decode(raw[i * step:(i + 1) * step]) for i in range(self.count)]

    def prog_offsets(self):
        return [i * self.elem.size + offset for i in range(self.count) for offset in self.elem.prog_offsets()]


class ProgRef(Layout):
    """A program in a devmap value: written as an fd of a pinned program (or one given by id), read as its id."""

    size = 4
    name = "a program (pin path or id)"

    def encode(self, value, enc, where):
        if value in (None, 0, "0", ""):
            return bytes(4)
        if not isinstance(value, (int, str)) or isinstance(value, bool):
            self._not_a_value(value, where, "the pin path of a program, a program id, or 0 for none")
        number = as_int(value)
        return enc.program(number if number is not None else value, where).to_bytes(4, sys.byteorder)

    def decode(self, raw):
        return int.from_bytes(raw[:4], sys.byteorder)

    def prog_offsets(self):
        return [0]


class Field:
    """A member of a struct or union: byte offset, layout, and for a bitfield its bit offset and width."""

    def __init__(self, name: str, layout: Layout, offset: int, bit_offset: int = 0, bits: int = 0,
                 device: bool = False):
        self.name, self.layout, self.offset = name, layout, offset
        self.bit_offset, self.bits, self.device = bit_offset, bits, device

    def span(self) -> tuple[int, int]:
        if self.bits:
            return self.bit_offset, self.bit_offset + self.bits
        return self.offset * 8, (self.offset + self.layout.size) * 8

    def names_an_interface(self) -> bool:
        return self.name == "ifindex" or self.name.endswith("_ifindex")


class Struct(Layout):
    """A struct or union given as a dict of its fields; fields left out are zero (as a C initializer)."""

    def __init__(self, size: int, name: str, fields: list[Field], shorthand: str | None = None):
        self.size, self.name, self.fields = size, name, fields
        self.by_name = {field.name: field for field in fields}
        # A devmap value also takes its ifindex alone.
        self.shorthand = shorthand

    def encode(self, value, enc, where):
        if not isinstance(value, dict):
            if not self.shorthand:
                self._not_a_value(value, where, "a dict of its fields (%s)" % (", ".join(self.by_name) or "none"))
            value = {self.shorthand: value}
        if set(value) == {"hex"} and "hex" not in self.by_name:
            return self._exact(as_bytes(value, where), where)
        unknown = [name for name in value if name not in self.by_name]
        if unknown:
            raise MapEntryError("%s: %s has no field %s; its fields are %s" % (
                where, self.name, ", ".join(map(str, unknown)), ", ".join(self.by_name) or "none"))
        given = [self.by_name[name] for name in value]
        for i, one in enumerate(given):
            for other in given[i + 1:]:
                if one.span()[0] < other.span()[1] and other.span()[0] < one.span()[1]:
                    raise MapEntryError("%s: fields %s and %s of %s share bytes; give one of them" % (
                        where, one.name, other.name, self.name))
        data = bytearray(self.size)
        for field in given:
            data = self._put(data, field, value[field.name], enc, "%s.%s" % (where, field.name))
        return bytes(data)

    def _put(self, data: bytearray, field: Field, value, enc, where) -> bytearray:
        if field.names_an_interface() and isinstance(value, str) and as_int(value) is None:
            value = enc.interface(value, where)
        if field.bits:
            return self._put_bits(data, field, value, enc, where)
        raw = field.layout.encode(value, enc, where)
        if field.device:
            enc.device(int.from_bytes(raw, sys.byteorder), where)
        data[field.offset:field.offset + len(raw)] = raw
        return data

    def _put_bits(self, data, field, value, enc, where):
        number = field.layout.number(value, enc, where) if isinstance(field.layout, Int) else None
        if number is None:
            self._not_a_value(value, where, "an integer for a %d-bit field" % field.bits)
        signed = getattr(field.layout, "signed", False)
        low, high = (-(1 << field.bits - 1), (1 << field.bits - 1) - 1) if signed else (0, (1 << field.bits) - 1)
        if not low <= number <= high:
            raise MapEntryError("%s: %d is out of range for a %d-bit field (%d..%d)" % (
                where, number, field.bits, low, high))
        # BTF counts bitfield offsets from the first byte's lowest bit on little-endian hosts.
        mask = ((1 << field.bits) - 1) << field.bit_offset
        whole = int.from_bytes(data, "little") & ~mask | (number << field.bit_offset) & mask
        return bytearray(whole.to_bytes(self.size, "little"))

    def decode(self, raw):
        out, taken = {}, []
        for field in self.fields:
            low, high = field.span()
            # A union's other members read the same bytes: show the first.
            if any(low < end and start < high for start, end in taken):
                continue
            taken.append((low, high))
            if field.bits:
                number = int.from_bytes(raw[:self.size], "little") >> field.bit_offset & ((1 << field.bits) - 1)
                if getattr(field.layout, "signed", False) and number >> (field.bits - 1):
                    number -= 1 << field.bits
                out[field.name] = number
            else:
                out[field.name] = field.layout.decode(raw[field.offset:field.offset + field.layout.size])
        return out

    def prog_offsets(self):
        return [field.offset + offset for field in self.fields if not field.bits
                for offset in field.layout.prog_offsets()]


def devmap_value(size: int) -> Layout:
    """struct bpf_devmap_val without BTF: the egress ifindex, and in 8 bytes an optional program run on the copy."""
    fields = [Field("ifindex", Int(4, name="u32"), 0, device=True)]
    if size == 8:
        fields.append(Field("prog", ProgRef(), 4))
    elif size != 4:
        return Sized(size, "value")
    return Struct(size, "struct bpf_devmap_val", fields, shorthand="ifindex")


def _resolve(types: dict, type_id: int) -> tuple[dict | None, str]:
    """The type behind typedefs and qualifiers, and the first typedef's name."""
    alias = ""
    entry = types.get(type_id)
    while entry is not None and entry["kind"] in _ALIASES:
        if entry["kind"] == "typedef" and not alias:
            alias = entry["name"]
        entry = types.get(entry.get("type"))
    return entry, alias


def layout_from_btf(types: dict, type_id: int) -> Layout | None:
    """The layout of a BTF type (from _bpf.map_btf's table), or None for types without a usable size."""
    entry, alias = _resolve(types, type_id)
    if entry is None:
        return None
    kind, name = entry["kind"], entry.get("name", "")
    if kind == "int":
        return Int(entry["size"], entry["signed"], alias or name, entry["bool"])
    if kind in ("enum", "enum64"):
        return Enum(entry["size"], entry["signed"], alias or "enum %s" % name, entry["values"])
    if kind == "array":
        elem = layout_from_btf(types, entry["type"])
        if elem is None:
            return None
        if elem.size == 1 and isinstance(elem, Int) and not isinstance(elem, Enum) and not elem.boolean:
            return Bytes(entry["nelems"], alias or "%s[%d]" % (elem.name, entry["nelems"]))
        return Array(elem, entry["nelems"])
    if kind in ("struct", "union"):
        return _record(types, entry, alias)
    if kind in ("ptr", "float"):
        return Bytes(entry.get("size", 8), alias or kind)
    return None


def _record(types, entry, alias):
    fields = []
    for member in entry["members"]:
        layout = layout_from_btf(types, member["type"])
        if layout is None:
            return None
        offset = member["bit_offset"] // 8
        if not member["name"] and isinstance(layout, Struct):
            # An anonymous struct or union: its fields are the parent's.
            fields.extend(Field(f.name, f.layout, f.offset + offset, f.bit_offset + member["bit_offset"], f.bits,
                                f.device) for f in layout.fields)
            continue
        if member["bitfield_size"] and sys.byteorder != "little":
            return None
        fields.append(Field(member["name"], layout, offset, member["bit_offset"], member["bitfield_size"]))
    return Struct(entry["size"], alias or "%s %s" % (entry["kind"], entry["name"] or "(anonymous)"), fields)


def layouts(info: dict, btf: dict | None) -> tuple[Layout, Layout]:
    """The key and value layouts of a map: from its BTF when that matches its sizes, else from the sizes."""
    key = value = None
    if btf:
        key = layout_from_btf(btf["types"], btf["key"]) if btf["key"] else None
        value = layout_from_btf(btf["types"], btf["value"]) if btf["value"] else None
    if key is None or key.size != info["key_size"]:
        key = Sized(info["key_size"], "key")
    if value is None or value.size != info["value_size"]:
        if info["type"] in DEVMAP_TYPES:
            value = devmap_value(info["value_size"])
        else:
            value = Sized(info["value_size"], "value")
    return key, value


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


def decode_entries(contents: dict, key_layout: Layout, value_layout: Layout, percpu: bool,
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
        self.key, self.value = layouts(self.info, self.btf)
        self.zero = bytes(self.info["value_size"]) if kind in ARRAY_TYPES else None

    def describe(self) -> dict:
        out = {name: self.info[name] for name in ("id", "name", "type", "key_size", "value_size", "max_entries")}
        out["btf"] = self.btf is not None
        return out

    def read(self) -> dict:
        return {key: tuple(value) if isinstance(value, list) else (value,) for key, value in self.map.items()}

    def desired(self, entries: list[dict], state: str, resolver) -> dict:
        """key bytes -> value bytes (None for absent); every entry checked before anything is written."""
        enc = Encoder(resolver)
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
            self._apply(current, updates, deletes)
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
        done = []
        try:
            for key in deletes:
                self.map.delete(key)
                done.append(key)
            for key, value in updates.items():
                self._write(key, (value,) * self.map.ncpus)
                done.append(key)
        except _bpf.BpfError as exc:
            try:
                self._restore(current, done)
            except _bpf.BpfError as again:
                raise MapEntryError("%s; putting back the entries written before it (%d) failed too: %s" % (
                    exc, len(done), again))
            raise MapEntryError("%s; the entries written before it (%d) were put back" % (exc, len(done)))

    def _restore(self, current: dict, done: list) -> None:
        for key in reversed(done):
            if key in current:
                self._write(key, current[key])
            else:
                self.map.delete(key)


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
