# -*- coding: utf-8 -*-
# Copyright (c) ebpf.xdp contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""A map's keys and values through its BTF: one walk of the type table, and layouts that encode inventory
notation into bytes and decode bytes back into it.

Private to the ebpf.xdp collection: the interface may change without notice.

`layout_from_btf` walks a BTF type table (the plain dicts `_bpf.map_btf` and
`_bpf.Object.map_btf` read) once into a `Layout`; `layouts` gives a map's key
and value layouts, falling back on its sizes (`Sized`; devmap values are
struct bpf_devmap_val, because libbpf keeps BTF off devmaps). Writing
(`ebpf.xdp.bpf_map_entry`) and reading (`ebpf.xdp.xdp_facts`) go through the
same layouts, so what one writes the other reads back the same: decoding is
lossless and its result encodes to the very bytes it was read from.

The notation, as bpftool's `formatted` dump shows a value, with two
differences that keep decoding lossless:

- integers as numbers (a pointer too); `_Bool` as true/false (other values as
  numbers); an enum by its enumerator's name (a value no enumerator has, as a
  number);
- a struct or union as a dict of its members by name (as `{hex: ...}` when
  bits that no member covers, padding, are set), every member of a union
  shown (they read the same bytes; encoding takes several when they agree),
  anonymous structs and unions flattened into their parent, as C names their
  members (bpftool nests them under the name ""); bitfields as numbers (bpftool:
  hex strings; enums by name);
- arrays as lists; a `char` array as a string when it holds printable ASCII
  up to a NUL and zeros after it (bpftool ignores what follows the NUL), else
  as `{hex: ...}`, like every other byte array (`__u8 mac[6]`, floats);
- per-CPU values summed over CPUs field by field (`total`): integers that
  count add up; enums, booleans, pointers and bytes are shown where every CPU
  holds the same, null where they differ.

Encoding asks a resolver for what only the host knows (interface indexes,
program ids), so everything here but `map_layouts` is pure and tested
without a kernel.
"""

from __future__ import annotations

import ipaddress
import re
import sys

from ansible_collections.ebpf.xdp.plugins.module_utils.host import netns as _netns
from ansible_collections.ebpf.xdp.plugins.module_utils.bpf import libbpf as _bpf
from ansible_collections.ebpf.xdp.plugins.module_utils.traffic import frames as _frames
from ansible_collections.ebpf.xdp.plugins.module_utils._errors import EbpfXdpError

_DECIMAL = re.compile(r"[+-]?[0-9]+")
_HEXADECIMAL = re.compile(r"[+-]?0[xX][0-9a-fA-F]+")
_HEX_SEPARATORS = re.compile(r"[\s:.-]")
_ALIASES = ("typedef", "const", "volatile", "restrict", "type_tag")
_QUALIFIERS = ("const", "volatile", "restrict", "type_tag")
DEVMAP_TYPES = ("devmap", "devmap_hash")

NOTATIONS = "an integer, {ifindex: NAME}, an IP or MAC address, or {hex: BYTES}"


class NotationError(EbpfXdpError):
    """A key or value that its layout cannot hold (bpf_map_entry's MapEntryError)."""


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
            raise NotationError("%s: {hex: %s} is a number, not hex digits; quote the hex digits: {hex: '0a'}"
                                % (where, value["hex"]))
        text = _HEX_SEPARATORS.sub("", value["hex"])
        if text[:2] in ("0x", "0X"):
            text = text[2:]
        try:
            return bytes.fromhex(text), "{hex: %s}" % value["hex"]
        except ValueError:
            raise NotationError("%s: {hex: %s} is not an even number of hex digits" % (where, value["hex"]))
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
            raise NotationError("%s: %s" % (where, exc))

    def device(self, index: int, where: str) -> None:
        if not self.resolver.has_device(index):
            raise NotationError("%s: no interface has index %d in %s" % (where, index, self.resolver.place))

    def program(self, ref, where: str) -> int:
        try:
            return self.resolver.program_id(ref)
        except _bpf.BpfError as exc:
            raise NotationError("%s: %s" % (where, exc))


# ---------------------------------------------------------------- layouts


class Layout:
    """How one key, value or field is laid out: size in bytes and a name for messages."""

    size = 0
    name = ""
    # Whether per-CPU copies add up (counters); the others are shown where every CPU agrees.
    counts = False

    def encode(self, value, enc: Encoder, where: str) -> bytes:
        raise NotImplementedError

    def decode(self, raw: bytes):
        raise NotImplementedError

    def total(self, raws: list[bytes]):
        """One value for the per-CPU copies raws: integers that count summed, anything else where every CPU holds
        the same, else None."""
        values = [self.decode(raw) for raw in raws]
        if self.counts and all(isinstance(v, int) and not isinstance(v, bool) for v in values):
            return sum(values)
        return values[0] if values and all(v == values[0] for v in values) else None

    def prog_offsets(self) -> list[int]:
        """Offsets of program references: written as fds, read back as ids."""
        return []

    def _exact(self, found: tuple[bytes, str], where: str) -> bytes:
        data, what = found
        if len(data) != self.size:
            raise NotationError("%s: %s is %d bytes; %s is %d" % (where, what, len(data), self.name, self.size))
        return data

    def _not_a_value(self, value, where: str, expected: str = NOTATIONS):
        raise NotationError("%s: %s is not a value for %s; give %s" % (where, _describe(value), self.name, expected))


class Int(Layout):
    """An integer of the host's byte order (how the program reads it), range-checked."""

    def __init__(self, size: int, signed: bool = False, name: str = "", boolean: bool = False, counts: bool = True):
        self.size, self.signed, self.boolean = size, signed, boolean
        self.counts = counts and not boolean
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
            raise NotationError("%s: %d is out of range for %s (%d..%d)" % (where, number, self.name, low, high))
        return number.to_bytes(self.size, sys.byteorder, signed=number < 0)

    def decode(self, raw):
        return self.from_number(int.from_bytes(raw[:self.size], sys.byteorder, signed=self.signed))

    def total(self, raws):
        if self.counts and type(self) is Int:  # pylint: disable=unidiomatic-typecheck
            # The common case (a counter of every CPU), without decoding each copy first.
            return sum(int.from_bytes(raw[:self.size], sys.byteorder, signed=self.signed) for raw in raws)
        return super().total(raws)

    def from_number(self, number: int):
        """The notation of a number read from this integer (or from a bitfield of its type)."""
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
            return int.from_bytes(raw[:self.size], sys.byteorder)
        return {"hex": raw[:self.size].hex()}


class Enum(Int):
    """An integer that also takes the names of its enumerators, and reads back as one where it matches."""

    def __init__(self, size, signed, name, values):
        super().__init__(size, signed, name, counts=False)
        self.values = dict(values)

    def number(self, value, enc, where):
        if isinstance(value, str) and value.strip() in self.values:
            return self.values[value.strip()]
        return super().number(value, enc, where)

    def from_number(self, number):
        names = [name for name, known in self.values.items() if known == number]
        return names[0] if names else number


class Bytes(Layout):
    """A byte array: an address, a MAC, {hex: ...} or a list of byte values, zero-filled after what is given."""

    def __init__(self, size: int, name: str):
        self.size, self.name = size, name

    def encode(self, value, enc, where):
        found = self._found(value, where)
        if found is None:
            self._not_a_value(value, where, "an IP or MAC address, {hex: BYTES} or a list of byte values")
        return self._fill(found, where)

    def _found(self, value, where) -> tuple[bytes, str] | None:
        if isinstance(value, list):
            values = [as_int(item) for item in value]
            if any(item is None or not 0 <= item <= 255 for item in values):
                raise NotationError("%s: %s is not a list of byte values (0..255)" % (where, value))
            return bytes(values), "a list of %d bytes" % len(values)
        return as_bytes(value, where)

    def _fill(self, found, where):
        if len(found[0]) > self.size:
            raise NotationError("%s: %s is %d bytes; %s has room for %d" % (
                where, found[1], len(found[0]), self.name, self.size))
        return found[0].ljust(self.size, b"\0")

    def decode(self, raw):
        return {"hex": raw[:self.size].hex()}


def _printable(data: bytes) -> bool:
    return all(0x20 <= byte < 0x7f for byte in data)


class Text(Bytes):
    """A char array: text (printable ASCII, NUL-terminated within the array), or bytes as Bytes takes them."""

    def encode(self, value, enc, where):
        if not isinstance(value, str):
            return super().encode(value, enc, where)
        data = value.encode("utf-8", "replace")
        if not _printable(data):
            raise NotationError("%s: %s is not printable ASCII text, which %s holds as a string; give other bytes as "
                                "{hex: BYTES} or a list of byte values" % (where, _describe(value), self.name))
        if len(data) >= self.size:
            raise NotationError("%s: %s is %d characters; %s holds up to %d and the NUL that ends them" % (
                where, _describe(value), len(data), self.name, max(self.size - 1, 0)))
        return data.ljust(self.size, b"\0")

    def decode(self, raw):
        raw = raw[:self.size]
        end = raw.find(b"\0")
        # Text only when nothing follows the NUL: what decodes as a string encodes back to the same bytes.
        if end >= 0 and _printable(raw[:end]) and not raw[end:].strip(b"\0"):
            return raw[:end].decode("ascii")
        return {"hex": raw.hex()}


class Array(Layout):
    """An array of wider elements: a list, zero-filled after what is given (as a C initializer)."""

    def __init__(self, elem: Layout, count: int):
        self.elem, self.count = elem, count
        self.size, self.name = elem.size * count, "%s[%d]" % (elem.name, count)

    def encode(self, value, enc, where):
        if not isinstance(value, list):
            self._not_a_value(value, where, "a list of up to %d values" % self.count)
        if len(value) > self.count:
            raise NotationError("%s: %d values for %s" % (where, len(value), self.name))
        data = b"".join(self.elem.encode(item, enc, "%s[%d]" % (where, i)) for i, item in enumerate(value))
        return data.ljust(self.size, b"\0")

    def _elements(self, raw: bytes) -> list[bytes]:
        step = self.elem.size
        return [raw[i * step:(i + 1) * step] for i in range(self.count)]

    def decode(self, raw):
        return [self.elem.decode(part) for part in self._elements(raw)]

    def total(self, raws):
        per_cpu = [self._elements(raw) for raw in raws]
        return [self.elem.total([parts[i] for parts in per_cpu]) for i in range(self.count)]

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

    def mask(self) -> int:
        """The field's bits in the struct, read as one little-endian integer."""
        low, high = self.span()
        return ((1 << (high - low)) - 1) << low

    def names_an_interface(self) -> bool:
        return self.name == "ifindex" or self.name.endswith("_ifindex")

    def number(self, raw: bytes) -> int:
        """A bitfield's number (sign-extended for signed types)."""
        number = int.from_bytes(raw, "little") >> self.bit_offset & ((1 << self.bits) - 1)
        if getattr(self.layout, "signed", False) and number >> (self.bits - 1):
            number -= 1 << self.bits
        return number


class Struct(Layout):
    """A struct or union given as a dict of its fields; fields left out are zero (as a C initializer). Fields
    that share bytes (a union's members) may be given together when they agree on them."""

    def __init__(self, size: int, name: str, fields: list[Field], shorthand: str | None = None):
        self.size, self.name, self.fields = size, name, fields
        self.by_name = {field.name: field for field in fields}
        # A devmap value also takes its ifindex alone.
        self.shorthand = shorthand
        self._covered = None

    def encode(self, value, enc, where):
        if not isinstance(value, dict):
            if not self.shorthand:
                self._not_a_value(value, where, "a dict of its fields (%s)" % (", ".join(self.by_name) or "none"))
            value = {self.shorthand: value}
        if set(value) == {"hex"} and "hex" not in self.by_name:
            return self._exact(as_bytes(value, where), where)
        unknown = [name for name in value if name not in self.by_name]
        if unknown:
            raise NotationError("%s: %s has no field %s; its fields are %s" % (
                where, self.name, ", ".join(map(str, unknown)), ", ".join(self.by_name) or "none"))
        # The struct as one little-endian integer: byte i is bits 8i..8i+7, as BTF counts bitfield offsets.
        whole, written, given = 0, 0, []
        for name in value:
            field = self.by_name[name]
            bits = self._bits(field, value[name], enc, "%s.%s" % (where, name))
            mask = field.mask()
            shared = written & mask
            if shared and (whole ^ bits) & shared:
                other = next(one for one in given if one.mask() & mask & (whole ^ bits))
                raise NotationError("%s: fields %s and %s of %s share bytes and give them different values; give "
                                    "one of them" % (where, other.name, field.name, self.name))
            whole, written = whole & ~mask | bits, written | mask
            given.append(field)
        return whole.to_bytes(self.size, "little")

    def _bits(self, field: Field, value, enc, where) -> int:
        if field.names_an_interface() and isinstance(field.layout, Int) and not isinstance(field.layout, Enum) \
                and isinstance(value, str) and as_int(value) is None:
            value = enc.interface(value, where)
        if field.bits:
            number = field.layout.number(value, enc, where) if isinstance(field.layout, Int) else None
            if number is None:
                self._not_a_value(value, where, "an integer for a %d-bit field" % field.bits)
            signed = getattr(field.layout, "signed", False)
            low, high = (-(1 << field.bits - 1), (1 << field.bits - 1) - 1) if signed else (0, (1 << field.bits) - 1)
            if not low <= number <= high:
                raise NotationError("%s: %d is out of range for a %d-bit field (%d..%d)" % (
                    where, number, field.bits, low, high))
            return (number << field.bit_offset) & field.mask()
        raw = field.layout.encode(value, enc, where)
        if field.device:
            enc.device(int.from_bytes(raw, sys.byteorder), where)
        return int.from_bytes(raw, "little") << field.offset * 8

    def _value(self, field: Field, raw: bytes):
        if field.bits:
            return field.layout.from_number(field.number(raw[:self.size]))
        return field.layout.decode(raw[field.offset:field.offset + field.layout.size])

    def _stray(self, raw: bytes) -> bool:
        """Whether raw has bits set that no field covers (padding): such bytes decode as {hex: ...}, which keeps
        them, where a dict of the fields would lose them (two keys that differ there are two keys). Not for a
        struct with a member called hex, which {hex: ...} would name."""
        if "hex" in self.by_name:
            return False
        if self._covered is None:
            self._covered = 0
            for field in self.fields:
                self._covered |= field.mask()
        return bool(int.from_bytes(raw[:self.size], "little") & ~self._covered)

    def decode(self, raw):
        if self._stray(raw):
            return {"hex": raw[:self.size].hex()}
        return {field.name: self._value(field, raw) for field in self.fields}

    def total(self, raws):
        if any(self._stray(raw) for raw in raws):
            return super().total(raws)
        out = {}
        for field in self.fields:
            if field.bits:
                values = [self._value(field, raw) for raw in raws]
                summed = field.layout.counts and all(isinstance(v, int) and not isinstance(v, bool) for v in values)
                out[field.name] = sum(values) if summed else values[0] if all(v == values[0] for v in values) \
                    else None
            else:
                out[field.name] = field.layout.total([raw[field.offset:field.offset + field.layout.size]
                                                      for raw in raws])
        return out

    def prog_offsets(self):
        return [field.offset + offset for field in self.fields if not field.bits
                for offset in field.layout.prog_offsets()]


def devmap_value(size: int) -> Layout:
    """struct bpf_devmap_val without BTF: the egress ifindex, and in 8 bytes an optional program run on the copy."""
    fields = [Field("ifindex", Int(4, name="u32", counts=False), 0, device=True)]
    if size == 8:
        fields.append(Field("prog", ProgRef(), 4))
    elif size != 4:
        return Sized(size, "value")
    return Struct(size, "struct bpf_devmap_val", fields, shorthand="ifindex")


# ---------------------------------------------------------------- the walk


def _resolve(types: dict, type_id: int, kinds: tuple = _ALIASES) -> tuple[dict | None, str]:
    """The type behind typedefs and qualifiers (or only those kinds), and the first typedef's name."""
    alias = ""
    entry = types.get(type_id)
    seen = 0
    while entry is not None and entry["kind"] in kinds:
        if entry["kind"] == "typedef" and not alias:
            alias = entry["name"]
        entry = types.get(entry.get("type"))
        seen += 1
        if seen > len(types):  # a loop: malformed BTF
            return None, alias
    return entry, alias


def _is_char(types: dict, type_id: int) -> bool:
    """A char, as bpftool tells text arrays: behind qualifiers but no typedef, a 1-byte int called char (or with
    BTF's char encoding)."""
    entry, _alias = _resolve(types, type_id, _QUALIFIERS)
    return bool(entry) and entry["kind"] == "int" and entry.get("size") == 1 and (
        entry.get("char") or entry.get("name") == "char")


def layout_from_btf(types: dict, type_id: int, depth: int = 0) -> Layout | None:
    """The layout of a BTF type (from _bpf.map_btf's table), or None for types without a usable size."""
    entry, alias = _resolve(types, type_id)
    if entry is None or depth > 32:
        return None
    kind, name = entry["kind"], entry.get("name", "")
    if kind == "int":
        if entry.get("size", 0) <= 0:
            return None
        return Int(entry["size"], entry["signed"], alias or name, entry["bool"])
    if kind in ("enum", "enum64"):
        if entry.get("size", 0) <= 0:
            return None
        return Enum(entry["size"], entry["signed"], alias or "enum %s" % name, entry["values"])
    if kind == "array":
        elem = layout_from_btf(types, entry["type"], depth + 1)
        if elem is None:
            return None
        if elem.size == 1 and isinstance(elem, Int) and not isinstance(elem, Enum) and not elem.boolean:
            if _is_char(types, entry["type"]):
                return Text(entry["nelems"], alias or "char[%d]" % entry["nelems"])
            return Bytes(entry["nelems"], alias or "%s[%d]" % (elem.name, entry["nelems"]))
        return Array(elem, entry["nelems"])
    if kind in ("struct", "union"):
        return _record(types, entry, alias, depth)
    if kind == "ptr":
        return Int(8, name=alias or "a pointer", counts=False)
    if kind == "float":
        return Bytes(entry["size"], alias or name)
    return None


def _record(types, entry, alias, depth):
    fields = []
    for member in entry["members"]:
        layout = layout_from_btf(types, member["type"], depth + 1)
        if layout is None:
            return None
        offset = member["bit_offset"] // 8
        if member["bitfield_size"]:
            if sys.byteorder != "little" or not isinstance(layout, Int):
                return None
            field = Field(member["name"], layout, offset, member["bit_offset"], member["bitfield_size"])
        elif member["bit_offset"] % 8:
            return None
        else:
            field = Field(member["name"], layout, offset, member["bit_offset"])
        if field.span()[1] > entry["size"] * 8:
            return None  # a member past the struct's end: malformed BTF
        if not member["name"] and isinstance(layout, Struct):
            # An anonymous struct or union: its fields are the parent's.
            fields.extend(Field(f.name, f.layout, f.offset + offset, f.bit_offset + member["bit_offset"], f.bits,
                                f.device) for f in layout.fields)
            continue
        fields.append(field)
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


def from_btf(layout: Layout) -> bool:
    """Whether a layout came from BTF (not from the map's sizes)."""
    return not isinstance(layout, Sized) and not (isinstance(layout, Struct) and layout.shorthand)


# A map's BTF never changes (its id is not given out again for 2^31 maps): the layouts are kept by map id, up to
# _bpf.INFO_KEPT (all forgotten when full), for a reader that outlives many maps (the exporter).
_LAYOUTS: dict[int, tuple] = {}


def map_layouts(bpf_map: _bpf.Map) -> tuple[Layout, Layout, str | None]:
    """The key and value layouts of an open map, and why its BTF could not be read (None when it was, or when
    it has none): such a map reads by its sizes."""
    map_id = bpf_map.info["id"]
    if map_id not in _LAYOUTS:
        problem = None
        try:
            btf = _bpf.map_btf(bpf_map)
        except _bpf.BpfError as exc:
            btf, problem = None, str(exc)
        if len(_LAYOUTS) >= _bpf.INFO_KEPT:
            _LAYOUTS.clear()
        _LAYOUTS[map_id] = layouts(bpf_map.info, btf) + (problem,)
    return _LAYOUTS[map_id]
