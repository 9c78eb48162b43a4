# -*- coding: utf-8 -*-
# Copyright (c) ebpf.xdp contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Reading attached programs, their maps and counters.

Private to the ebpf.xdp collection: the interface may change without notice.
"""

from __future__ import annotations

import array
import errno
import itertools
import operator
import os
import sys
import time
from typing import Iterator

from ansible_collections.ebpf.xdp.plugins.module_utils.host import (
    netlink as _netlink, netns as _netns, session as _session)
from ansible_collections.ebpf.xdp.plugins.module_utils.bpf import libbpf as _bpf, libxdp as _libxdp, pins as _pins
from ansible_collections.ebpf.xdp.plugins.module_utils.hooks import observed as _observed, tc_hooks as _tc_hooks
from ansible_collections.ebpf.xdp.plugins.module_utils.maps import devmap as _devmap
from ansible_collections.ebpf.xdp.plugins.module_utils._errors import EbpfXdpError

# Maps with this name are keyed by IP protocol number (xdp_drop_count, xdp1).
PROTOCOL_MAP = "proto_count"
IP_PROTOCOLS = {0: "other", 1: "icmp", 2: "igmp", 6: "tcp", 17: "udp", 41: "ipv6",
                47: "gre", 50: "esp", 51: "ah", 58: "ipv6-icmp", 132: "sctp"}
COUNTER_VALUE_SIZE = 8


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


def program_maps(map_ids: list[int]) -> tuple[list[dict], dict]:
    """A program's maps (without libbpf's internal .rodata/.bss) and their counters."""
    maps, counters = [], {}
    for map_id in map_ids:
        info = _bpf.map_info(map_id)
        if "." in info["name"]:
            continue  # .rodata, .bss, .data: settings, not state
        maps.append({key: value for key, value in info.items() if key != "type_id"})
        if holds_counters(info):
            with _bpf.Map.from_id(map_id) as prog_map:
                counters[info["name"]] = read_counters(prog_map)
    return maps, counters


def hook_entry(observed: _observed.Observed) -> dict:
    """What the facts say of one hook's program: its state, maps and counters."""
    maps, counters = program_maps(observed.map_ids)
    entry = _observed.report(observed)
    entry.update(maps=maps, counters={name: {str(k): v for k, v in sorted(values.items())}
                                      for name, values in counters.items()})
    if PROTOCOL_MAP in counters:
        entry["protocols"] = {protocol_name(k): v for k, v in sorted(counters[PROTOCOL_MAP].items())}
    return entry


def tc_entries(pin_root: str, key: str, ifname: str, ifindex: int) -> dict:
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
            found = _still_there(_tc_hooks.observe_tc, entry, direction, owned)
            if found:
                found.setdefault("attachment", None)
                out[direction].append(found)
    return out


def xdp_chain(pin_root: str, key: str, ifname: str, ifindex: int, warnings: list[str] | None) -> list[dict] | None:
    """The programs libxdp's dispatcher on the interface runs, in run order (None: no dispatcher there), each with
    its priority and chain call actions, ours with the name of their attachment."""
    if not _libxdp.available():
        if warnings is not None:
            warnings.append("%s runs libxdp's dispatcher, but libxdp (Debian package libxdp1) is not installed: the "
                            "programs it runs are not reported" % ifname)
        return None
    chain = _libxdp.dispatcher_chain(ifindex)
    if chain is None:
        return None
    attachments = _pins.hook_attachments(pin_root, os.path.join(pin_root, key, ifname), _pins.hook_dir("xdp"))
    records = [record for record in (pins.record.read() for name, pins in attachments.items() if name) if record]
    out = []
    for component in chain["programs"]:
        owned = next((record for record in records if record.get("prog_id") == component["id"]), None)
        found = _still_there(_observe_component, component, chain["mode"], owned)
        if found:
            found.update(priority=component["priority"], chain_call_actions=component["chain_call_actions"])
            found.setdefault("attachment", None)
            out.append(found)
    return out


def _observe_component(component: dict, mode: str, record: dict | None) -> _observed.Observed:
    info = _bpf.program_info(component["id"])
    return _observed.Observed(prog_id=component["id"], name=info["name"], tag=info["tag"], placement=mode,
                              holder=_observed.HELD_BY_DISPATCHER, record=record, map_ids=info["map_ids"])


def _still_there(observe, *args) -> dict | None:
    """The hook_entry() of observe(*args), or None when the program or a map went away while we looked."""
    try:
        return hook_entry(observe(*args))
    except _bpf.BpfError as exc:
        if exc.errno == errno.ENOENT:
            return None
        raise


def snapshot(pin_root: str, netns: str | None, wanted: list[str], warnings: list[str] | None = None) -> dict:
    """Interfaces (all with a program, or those named in wanted) with their XDP and tc programs and counters;
    a map set that cannot be read is left out, said in `warnings`. One session: a socket, a qdisc dump, a tcx
    probe for every interface of the namespace."""
    with _session.host():
        return _snapshot(pin_root, netns, wanted, warnings)


def _snapshot(pin_root: str, netns: str | None, wanted: list[str], warnings: list[str] | None) -> dict:
    key = _netns.netns_key(netns)
    out = {}
    for iface in _netlink.interfaces():
        name = iface["ifname"]
        if wanted and name not in wanted:
            continue
        prog_id, _mode = _observed.xdp_live(iface["xdp"])
        tc = tc_entries(pin_root, key, name, iface["ifindex"])
        if not wanted and not prog_id and not any(tc.values()):
            continue
        entry = {"ifindex": iface["ifindex"], "mac": iface["mac"], "mtu": iface["mtu"],
                 "stats": iface["stats"], "xdp": None, "xdp_chain": None, "tc": tc}
        if prog_id:
            pins = _pins.PinDir.for_hook(pin_root, key, name, "xdp")
            entry["xdp"] = _still_there(_observed.observe_xdp, iface["ifindex"], iface["xdp"], pins)
            if entry["xdp"] and entry["xdp"]["name"] == _libxdp.DISPATCHER_NAME:
                entry["xdp_chain"] = xdp_chain(pin_root, key, name, iface["ifindex"], warnings)
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
               warnings: list[str] | None = None) -> dict:
    """Two snapshots `interval` seconds apart; rates are per second."""
    first = snapshot(pin_root, netns, wanted)
    start = time.monotonic()
    time.sleep(interval)
    second = snapshot(pin_root, netns, wanted, warnings)
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
