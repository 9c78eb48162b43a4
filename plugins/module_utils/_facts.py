# -*- coding: utf-8 -*-
# Copyright (c) ebpf.xdp contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Reading attached programs, their maps and counters.

Private to the ebpf.xdp collection: the interface may change without notice.

Maps are read two ways. `counters` (maps of 64-bit values under integer keys,
summed over CPUs, zeros left out) is the shape playbooks and the exporter
have read since the start. With a `MapReading` (xdp_facts' options `maps`,
`programs`, `max_entries`, `per_cpu`), every data map of the chosen programs
is also decoded through its BTF (`maps/btf`, the layouts bpf_map_entry
writes with) into `entries`, a list of {key, value} in bpf_map_entry's
notation: the same shape that module's `entries` takes and returns, so an
entry read here can be written back there. A list rather than a dict keyed
by the key, because struct keys are dicts; `items2dict` turns scalar keys
into a dict. At most max_entries entries of each map are read (an array's
first indexes, a hash's first in the kernel's order); `truncated` and
`entries_total` say what was left out.

For the exporter (which calls `snapshot` without a reading today, and so
reads what it always read): with a MapReading, each entry's `numbers()` are
its samples, one per numeric field by its path, and its key (an enum's
name, a struct key's fields) its labels.
"""

from __future__ import annotations

import array
import errno
import fnmatch
import itertools
import json
import operator
import os
import sys
import time
from typing import Iterator

from ansible_collections.ebpf.xdp.plugins.module_utils.host import (
    netlink as _netlink, netns as _netns, session as _session)
from ansible_collections.ebpf.xdp.plugins.module_utils.bpf import libbpf as _bpf, libxdp as _libxdp, pins as _pins
from ansible_collections.ebpf.xdp.plugins.module_utils.hooks import observed as _observed, tc_hooks as _tc_hooks
from ansible_collections.ebpf.xdp.plugins.module_utils.maps import (
    btf as _btf, devmap as _devmap, map_entry as _map_entry)
from ansible_collections.ebpf.xdp.plugins.module_utils._errors import EbpfXdpError

# Maps with this name are keyed by IP protocol number (xdp_drop_count, xdp1).
PROTOCOL_MAP = "proto_count"
IP_PROTOCOLS = {0: "other", 1: "icmp", 2: "igmp", 6: "tcp", 17: "udp", 41: "ipv6",
                47: "gre", 50: "esp", 51: "ah", 58: "ipv6-icmp", 132: "sctp"}
COUNTER_VALUE_SIZE = 8
# Entries read from each map by default: a hash of a million flows is not read whole unless asked.
DEFAULT_MAX_ENTRIES = 1024
# xdp_facts' options that choose what is decoded (datapath's facts_before takes them too).
READING_ARGS = dict(
    maps=dict(type="list", elements="str", default=["*"]),
    programs=dict(type="list", elements="str", default=["*"]),
    max_entries=dict(type="int", default=DEFAULT_MAX_ENTRIES),
    per_cpu=dict(type="bool", default=False),
)


class FactsError(EbpfXdpError):
    """Options of the facts that cannot be read with."""


class MapReading:
    """Which maps of which programs are decoded, how many entries of each, and what the globs matched.

    maps and programs are shell globs (fnmatch) of kernel names (15 characters at most: the kernel cuts longer
    ones); a program also matches by the function name its ownership record keeps. A glob that matches nothing
    is no error: `unmatched()` says so."""

    def __init__(self, maps=("*",), programs=("*",), max_entries: int = DEFAULT_MAX_ENTRIES, per_cpu: bool = False):
        if isinstance(max_entries, bool) or not isinstance(max_entries, int) or max_entries <= 0:
            raise FactsError("max_entries must be a positive number of entries to read from each map, not %r"
                             % (max_entries,))
        self.maps, self.programs = list(maps), list(programs)
        self.max_entries, self.per_cpu = max_entries, per_cpu
        self.matched: set[tuple[str, str]] = set()
        self.problems: list[str] = []
        # Whether maps of 64-bit counters (`counters` already) are decoded too: the exporter, which exports
        # them as counters, reads them once by leaving this False.
        self.counter_maps = True

    @classmethod
    def from_params(cls, params: dict) -> MapReading:
        return cls(*(params[name] for name in ("maps", "programs", "max_entries", "per_cpu")))

    def _match(self, kind: str, globs: list[str], names) -> bool:
        found = [glob for glob in globs if any(name and fnmatch.fnmatchcase(name, glob) for name in names)]
        self.matched.update((kind, glob) for glob in found)
        return bool(found)

    def wants_program(self, entry: dict) -> bool:
        return self._match("programs", self.programs, (entry.get("name"), entry.get("program")))

    def wants_map(self, name: str) -> bool:
        return self._match("maps", self.maps, (name,))

    def unmatched(self) -> dict:
        """The globs that matched nothing; "*" (every one, the default) is never missing, not even where there is
        nothing."""
        return {kind: [glob for glob in getattr(self, kind) if (kind, glob) not in self.matched and glob != "*"]
                for kind in ("maps", "programs")}


def protocol_name(number: int) -> str:
    return IP_PROTOCOLS.get(number, "proto-%d" % number)


def holds_counters(info: dict) -> bool:
    """Whether a map (its Map.info) may hold counters: 64-bit values under integer keys."""
    return info["value_size"] == COUNTER_VALUE_SIZE and info["key_size"] in (1, 2, 4, 8) and info["type"] in (
        "array", "percpu_array", "hash", "percpu_hash", "lru_hash", "lru_percpu_hash")


def read_counters(counter_map: _bpf.Map) -> dict | None:
    """{key: total} for maps of 64-bit counters, summed over CPUs; zeros left out.

    Returns None for maps that do not hold counters (devmaps, structs, ...).
    """
    info = counter_map.info
    if not holds_counters(info):
        return None
    batches = counter_map.batches()
    if batches is not None:
        return _summed(batches, info["key_size"], counter_map.ncpus)
    totals = {}
    for key, value in counter_map.items():
        parts = value if counter_map.percpu else [value]
        total = sum(int.from_bytes(part, sys.byteorder) for part in parts)
        if total:
            totals[int.from_bytes(key, sys.byteorder)] = total
    return totals


# array typecodes of unsigned integers by size (native byte order, as the kernel stores them)
_UNSIGNED = {1: "B", 2: "H", 4: "I", 8: "Q"}
# A map of counters is mostly zeros (xdp_drop_count counts 2 or 3 of its 256 protocols on a typical host): up to
# this many bytes that are not zero in a chunk, _sparse_sums() finds their keys instead of summing every key.
SPARSE_BYTES = 64
_MARK_NONZERO = bytes([0] + [1] * 255)  # a bytes.translate() table: every byte that is not zero becomes 1


def _summed(batches: list[tuple[bytes, bytes, int]], key_size: int, ncpus: int) -> dict:
    """read_counters() over Map.batches() chunks, in array arithmetic: a scrape sums thousands of counters."""
    totals = {}
    for raw_keys, raw_values, _count in batches:
        keys, values = array.array(_UNSIGNED[key_size], raw_keys), array.array("Q", raw_values)
        marks = raw_values.translate(_MARK_NONZERO)
        if marks.count(1) <= SPARSE_BYTES:
            totals.update(_sparse_sums(keys, values, marks, ncpus))
            continue
        sums = values[0::ncpus]
        for cpu in range(1, ncpus):
            sums = array.array("Q", map(operator.add, sums, values[cpu::ncpus]))
        totals.update(itertools.compress(zip(keys, sums), sums))  # zeros left out
    return totals


def _sparse_sums(keys: array.array, values: array.array, marks: bytes, ncpus: int) -> Iterator[tuple]:
    """The keys whose counters are not all zero, with their sums: marks (the raw values, each byte that is
    not zero made 1) is searched in C for the next key that has one, instead of summing every key."""
    stride = COUNTER_VALUE_SIZE * ncpus
    found = marks.find(1)
    while found >= 0:
        index = found // stride
        yield keys[index], sum(values[index * ncpus:(index + 1) * ncpus])
        found = marks.find(1, (index + 1) * stride)


def program_maps(map_ids: list[int], reading: MapReading | None = None) -> tuple[list[dict], dict]:
    """A program's maps (without libbpf's internal .rodata/.bss) and their counters; with reading, the contents
    of the maps it chooses, decoded."""
    maps, counters = [], {}
    for map_id in map_ids:
        info = _bpf.map_info(map_id)
        if "." in info["name"]:
            continue  # .rodata, .bss, .data: settings, not state
        item = {key: value for key, value in info.items() if key != "type_id"}
        maps.append(item)
        decode = reading is not None and info["type"] in _map_entry.SUPPORTED_TYPES and reading.wants_map(info["name"]) \
            and (reading.counter_maps or not holds_counters(info))
        if holds_counters(info) or decode:
            with _bpf.Map.from_id(map_id) as prog_map:
                if holds_counters(info):
                    counters[info["name"]] = read_counters(prog_map)
                if decode:
                    item.update(map_contents(prog_map, reading))
    return maps, counters


def map_contents(prog_map: _bpf.Map, reading: MapReading) -> dict:
    """A map's first reading.max_entries entries decoded through its BTF (by its sizes without one): `entries`
    ({key, value}, per-CPU values summed and with per_cpu each CPU's in `values`; an array's all-zero entries
    left out), `btf`, `key_type`, `value_type`, `entries_read`, `truncated`, `entries_total` (null when a hash
    was not read to its end)."""
    info = prog_map.info
    key_layout, value_layout, problem = _btf.map_layouts(prog_map)
    rows = list(prog_map.items(reading.max_entries + 1))
    truncated = len(rows) > reading.max_entries
    del rows[reading.max_entries:]
    is_array = info["type"] in _map_entry.ARRAY_TYPES
    zero = bytes(info["value_size"])
    entries = []
    for key, value in sorted(rows, key=lambda row: _map_entry.key_order(row[0])):
        raws = value if prog_map.percpu else [value]
        if is_array and all(raw == zero for raw in raws):
            continue
        entry = {"key": key_layout.decode(key),
                 "value": value_layout.total(raws) if prog_map.percpu else value_layout.decode(value)}
        if prog_map.percpu and reading.per_cpu:
            entry["values"] = [value_layout.decode(raw) for raw in raws]
        entries.append(entry)
    out = {"btf": _btf.from_btf(key_layout) or _btf.from_btf(value_layout), "key_type": key_layout.name,
           "value_type": value_layout.name, "entries": entries, "entries_read": len(rows), "truncated": truncated,
           "entries_total": info["max_entries"] if is_array else None if truncated else len(rows)}
    if problem:
        out["btf_error"] = problem
        reading.problems.append("map %s (id %d): its BTF cannot be read, so it is read by its sizes: %s"
                                % (info["name"], info["id"], problem))
    return out


def hook_entry(observed: _observed.Observed, reading: MapReading | None = None) -> dict:
    """What the facts say of one hook's program: its state, maps and counters (and decoded maps, with reading)."""
    entry = _observed.report(observed)
    maps, counters = program_maps(observed.map_ids, reading if reading and reading.wants_program(entry) else None)
    entry.update(maps=maps, counters={name: {str(k): v for k, v in sorted(values.items())}
                                      for name, values in counters.items()})
    if PROTOCOL_MAP in counters:
        entry["protocols"] = {protocol_name(k): v for k, v in sorted(counters[PROTOCOL_MAP].items())}
    return entry


def tc_entries(pin_root: str, key: str, ifname: str, ifindex: int, reading: MapReading | None = None) -> dict:
    """Per direction, every program on the interface's tc hook, in run order, ours or not; ours with the name of
    their attachment (`attachment`: null for the unnamed one and for programs that are not ours)."""
    out = {}
    interface_dir = os.path.join(pin_root, key, ifname)
    for direction in _tc_hooks.TC_DIRECTIONS:
        out[direction] = []
        programs = _tc_hooks.tc_programs(ifindex, direction)
        attachments = _pins.hook_attachments(pin_root, interface_dir, _pins.hook_dir("tc", direction)) \
            if programs else {}
        records = [record for record in (pins.record.read() for pins in attachments.values()) if record]
        for entry in programs:
            owned = next((record for record in records if _tc_hooks.tc_owned(entry, record)), None)
            found = _still_there(reading, _tc_hooks.observe_tc, entry, direction, owned)
            if found:
                found.setdefault("attachment", None)
                out[direction].append(found)
    return out


def xdp_chain(pin_root: str, key: str, ifname: str, ifindex: int, warnings: list[str] | None,
              reading: MapReading | None = None) -> list[dict] | None:
    """The programs libxdp's dispatcher on the interface runs, in run order (None: no dispatcher there), each with
    its priority and chain call actions, ours with the name of their attachment."""
    if not _libxdp.available():
        if warnings is not None:
            warnings.append("%s runs libxdp's dispatcher, but libxdp (Debian package libxdp1) is not installed: the "
                            "programs it runs are not reported" % ifname)
        return None
    chain = _observed.dispatcher_chain(ifindex)
    if chain is None:
        return None
    attachments = _pins.hook_attachments(pin_root, os.path.join(pin_root, key, ifname), _pins.hook_dir("xdp"))
    records = [record for record in (pins.record.read() for name, pins in attachments.items() if name) if record]
    out = []
    for component in chain["programs"]:
        owned = next((record for record in records if record.get("prog_id") == component["id"]), None)
        found = _still_there(reading, _observe_component, component, chain["mode"], owned)
        if found:
            found.update(priority=component["priority"], chain_call_actions=component["chain_call_actions"])
            found.setdefault("attachment", None)
            out.append(found)
    return out


def _observe_component(component: dict, mode: str, record: dict | None) -> _observed.Observed:
    info = _bpf.program_info(component["id"])
    return _observed.Observed(prog_id=component["id"], name=info["name"], tag=info["tag"], placement=mode,
                              holder=_observed.HELD_BY_DISPATCHER, record=record, map_ids=info["map_ids"])


def _still_there(reading: MapReading | None, observe, *args) -> dict | None:
    """The hook_entry() of observe(*args), or None when the program or a map went away while we looked."""
    try:
        return hook_entry(observe(*args), reading)
    except _bpf.BpfError as exc:
        if exc.errno == errno.ENOENT:
            return None
        raise


def snapshot(pin_root: str, netns: str | None, wanted: list[str], warnings: list[str] | None = None,
             reading: MapReading | None = None) -> dict:
    """Interfaces (all with a program, or those named in wanted) with their XDP and tc programs and counters,
    and with reading their maps decoded (`unmatched` then says which globs matched nothing); a map set that
    cannot be read is left out, said in `warnings`. One session: a socket, a qdisc dump, a tcx probe for every
    interface of the namespace."""
    with _session.host():
        facts = _snapshot(pin_root, netns, wanted, warnings, reading)
    if reading is not None:
        facts["unmatched"] = reading.unmatched()
        if warnings is not None:
            warnings.extend(reading.problems)
            warnings.extend("%s: %s matches no %s" % (kind, glob, kind[:-1])
                            for kind, globs in facts["unmatched"].items() for glob in globs)
        del reading.problems[:]
    return facts


def _snapshot(pin_root: str, netns: str | None, wanted: list[str], warnings: list[str] | None,
              reading: MapReading | None) -> dict:
    key = _netns.netns_key(netns)
    out = {}
    for iface in _netlink.interfaces():
        name = iface["ifname"]
        if wanted and name not in wanted:
            continue
        prog_id, _mode = _observed.xdp_live(iface["xdp"])
        tc = tc_entries(pin_root, key, name, iface["ifindex"], reading)
        if not wanted and not prog_id and not any(tc.values()):
            continue
        entry = {"ifindex": iface["ifindex"], "mac": iface["mac"], "mtu": iface["mtu"],
                 "stats": iface["stats"], "xdp": None, "xdp_chain": None, "tc": tc}
        if prog_id:
            pins = _pins.PinDir.for_hook(pin_root, key, name, "xdp")
            entry["xdp"] = _still_there(reading, _observed.observe_xdp, iface["ifindex"], iface["xdp"], pins)
            if entry["xdp"] and entry["xdp"]["name"] == _libxdp.DISPATCHER_NAME:
                entry["xdp_chain"] = xdp_chain(pin_root, key, name, iface["ifindex"], warnings, reading)
        out[name] = entry
    missing = sorted(set(wanted or ()) - set(out))
    if missing:
        raise _netns.NotFoundError("interface %s does not exist in this network namespace" % ", ".join(missing))
    facts = {"netns": key, "interfaces": out}
    groups = {}
    for name, directory in _devmap.map_sets(pin_root, key).items():
        try:
            groups[name] = _devmap.read_groups(directory, name)
        except (EbpfXdpError, OSError) as exc:
            # One broken or half-removed set must not hide the rest of the host's facts.
            if warnings is not None:
                warnings.append("devmap_groups: map set %s left out, it cannot be read: %s" % (name, exc))
    if groups:
        facts["devmap_groups"] = groups
    return facts


def _rate(before, after, seconds):
    if isinstance(after, dict):
        return {k: _rate((before or {}).get(k, 0), v, seconds) for k, v in after.items()}
    return round((after - (before or 0)) / seconds, 1)


def with_rates(pin_root: str, netns: str | None, wanted: list[str], interval: float,
               warnings: list[str] | None = None, reading: MapReading | None = None) -> dict:
    """Two snapshots `interval` seconds apart; rates are per second."""
    first = snapshot(pin_root, netns, wanted, reading=reading)
    start = time.monotonic()
    time.sleep(interval)
    second = snapshot(pin_root, netns, wanted, warnings, reading)
    seconds = time.monotonic() - start
    for name, entry in second["interfaces"].items():
        old = first["interfaces"].get(name, {})
        entry["rates"] = {"stats": _rate(old.get("stats"), entry["stats"], seconds)}
        earlier = {prog["id"]: prog for prog in _programs(old)}
        for prog in _programs(entry):
            if prog["id"] in earlier:
                _add_rates(earlier[prog["id"]], prog, seconds)
    for name, groups in second.get("devmap_groups", {}).items():
        earlier = {group["id"]: group for group in first.get("devmap_groups", {}).get(name, [])}
        for group in groups:
            old = earlier.get(group["id"], {})
            group["rates"] = {k: _rate(old.get(k), group[k], seconds) for k in ("frames", "copies")}
    second["rate_interval"] = round(seconds, 3)
    return second


def _programs(entry: dict) -> list[dict]:
    """Every program of one interface's facts: its XDP program (and those its dispatcher runs) and its tc
    programs."""
    tc = entry.get("tc") or {}
    return ([entry["xdp"]] if entry.get("xdp") else []) + (entry.get("xdp_chain") or []) \
        + [p for progs in tc.values() for p in progs]


def _add_rates(old: dict, prog: dict, seconds: float) -> None:
    prog["rates"] = _rate(old["counters"], prog["counters"], seconds)
    if "protocols" in prog:
        prog["protocol_rates"] = _rate(old.get("protocols"), prog["protocols"], seconds)
    earlier = {item["id"]: item for item in old.get("maps", ()) if "entries" in item}
    for item in prog["maps"]:
        if "entries" in item and item["id"] in earlier:
            before = {_key_id(entry["key"]): entry["value"] for entry in earlier[item["id"]]["entries"]}
            for entry in item["entries"]:
                entry["rates"] = _field_rates(before.get(_key_id(entry["key"])), entry["value"], seconds)


def numbers(value, path: str = "") -> Iterator[tuple[str, int]]:
    """Every number of a decoded value with its path (`bytes`, `pair.a`, `hist[2]`; "" for a value that is one):
    the samples of one entry. Enum names, booleans, text and bytes are not numbers."""
    if _is_number(value):
        yield path, value
    elif isinstance(value, dict):
        for name, inner in value.items():
            yield from numbers(inner, "%s.%s" % (path, name) if path else str(name))
    elif isinstance(value, list):
        for i, inner in enumerate(value):
            yield from numbers(inner, "%s[%d]" % (path, i))


def _key_id(key) -> str:
    return json.dumps(key, sort_keys=True)


def _is_number(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _field_rates(before, after, seconds: float):
    """Per-second rates of every number in a decoded value (an entry missing before, as an array's zero entries
    are, counts from zero); what is not a number has none (left out of a dict, null in a list)."""
    if _is_number(after):
        return round((after - (before if _is_number(before) else 0)) / seconds, 1)
    if isinstance(after, dict):
        rates = {name: _field_rates((before if isinstance(before, dict) else {}).get(name), value, seconds)
                 for name, value in after.items()}
        return {name: rate for name, rate in rates.items() if rate is not None}
    if isinstance(after, list):
        earlier = before if isinstance(before, list) and len(before) == len(after) else [None] * len(after)
        return [_field_rates(old, new, seconds) for old, new in zip(earlier, after)]
    return None
