# -*- coding: utf-8 -*-
# Copyright (c) ebpf.xdp contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""What a change would do to real traffic: captured frames replayed through the attached program and a
candidate, offline, with BPF_PROG_TEST_RUN.

Private to the ebpf.xdp collection: the interface may change without notice.

Neither the attached program nor its maps are used. The attached program is
loaded again from its revision's copy in the object store (the very object,
program and constants its record names), the candidate from its object; each
runs against private copies of the live maps, cloned from their pins into a
directory of their own and reused there by libbpf at load, so both start
from the same state and neither touches what the hook runs. Global variables
(.data, .bss) start from their initial values, as in a fresh load.

A map kind whose contents cannot be copied (a program array, a ring buffer,
sockets, CPU maps, maps of maps) is refused, naming the map: a replay that
quietly ran against an empty copy would report verdicts the live program
never gives.

A candidate that lays a map out otherwise gets, as its upgrade would, a map
migrated from the private copy under map_migration (`maps/migration`: its
entries carried by field name, or started empty, or refused), never the copy
read through its own layout; the maps' effects compare such a map in the
candidate's layout, the attached program's entries converted the same way.
"""

from __future__ import annotations

import collections
import contextlib
import os
import shutil
import struct
import sys
import time
import uuid
from typing import Iterator

from ansible_collections.ebpf.xdp.plugins.module_utils.bpf import libbpf as _bpf, loader as _loader, pins as _pins
from ansible_collections.ebpf.xdp.plugins.module_utils.hooks import converge as _converge, revisions as _revisions
from ansible_collections.ebpf.xdp.plugins.module_utils.host import names as _names, netns as _netns
from ansible_collections.ebpf.xdp.plugins.module_utils.host.journal import Journal
from ansible_collections.ebpf.xdp.plugins.module_utils.traffic import pcap as _pcap
# Above the hooks layer as converge's own import of it: a candidate's changed maps migrate as its upgrade's would.
from ansible_collections.ebpf.xdp.plugins.module_utils.maps import migration as _migration
from ansible_collections.ebpf.xdp.plugins.module_utils._errors import EbpfXdpError

XDP_VERDICTS = dict(enumerate(_bpf.XDP_ACTIONS))
TC_VERDICTS = {0: "TC_ACT_OK", 1: "TC_ACT_RECLASSIFY", 2: "TC_ACT_SHOT", 3: "TC_ACT_PIPE", 4: "TC_ACT_STOLEN",
               5: "TC_ACT_QUEUED", 6: "TC_ACT_REPEAT", 7: "TC_ACT_REDIRECT", 8: "TC_ACT_TRAP",
               0xFFFFFFFF: "TC_ACT_UNSPEC"}

# Map types whose every entry can be read and written back: hashes, arrays (per-CPU too), LPM tries,
# devmaps (their entries are interface indexes, and egress programs held by id), and maps of such maps
# (each inner map copied too).
DATA_MAPS = frozenset(("hash", "array", "percpu_hash", "percpu_array", "lru_hash", "lru_percpu_hash", "lpm_trie",
                       "devmap", "devmap_hash"))
MAPS_OF_MAPS = frozenset(("array_of_maps", "hash_of_maps"))
CLONEABLE = DATA_MAPS | MAPS_OF_MAPS
DEVMAPS = frozenset(("devmap", "devmap_hash"))
BPF_F_RDONLY_PROG = 1 << 7
# struct xdp_md for a test run: data, data_end, data_meta, ingress_ifindex, rx_queue_index, egress_ifindex.
XDP_MD = struct.Struct("=6I")
# Frames shown in full per verdict transition, and flows listed per transition.
EXAMPLES = 3
FLOWS = 10


class ReplayError(EbpfXdpError):
    pass


class NothingAttached(ReplayError):
    """No program of the collection on the hook: nothing to compare the candidate with."""


def verdict_names(prog_type: str) -> dict[int, str]:
    return XDP_VERDICTS if prog_type == "xdp" else TC_VERDICTS


# ---------------------------------------------------------------- private copies of the maps


def _value_bytes(m: _bpf.Map, value) -> bytes:
    """A value as lookup() gave it, in the layout update() takes (per-CPU: one 8-byte aligned slot per CPU)."""
    if m.percpu:
        return b"".join(v.ljust(m.slot, b"\0") for v in value)
    return value


def _devmap_value(m: _bpf.Map, value: bytes, held: list[_bpf.Program]) -> bytes:
    """A devmap entry to write: lookups answer an egress program's id, updates take an fd."""
    if m.info["value_size"] < 8:
        return value
    prog_id = int.from_bytes(value[4:8], sys.byteorder)
    if not prog_id:
        return value
    prog = _bpf.Program.from_id(prog_id)
    held.append(prog)
    return value[:4] + prog.fd.to_bytes(4, sys.byteorder) + value[8:]


def _refuse(name: str, kind: str) -> None:
    raise ReplayError("map %s is a %s, whose contents replay cannot copy (it copies %s): replay refuses rather "
                      "than run against an empty copy" % (name, kind, ", ".join(sorted(CLONEABLE))))


def _copy_entries(live: _bpf.Map, copy: _bpf.Map) -> None:
    held: list[_bpf.Program] = []
    try:
        for key, value in live.items():
            if live.info["type"] in DEVMAPS:
                value = _devmap_value(live, value, held)
            copy.update(key, _value_bytes(copy, value))
    finally:
        for prog in held:
            prog.close()


def _create_like(live: _bpf.Map, name: str, inner: _bpf.Map | None = None) -> _bpf.Map:
    info = live.info
    flags = live.map_flags
    if info["type"] in DEVMAPS:
        flags &= ~BPF_F_RDONLY_PROG  # set by the kernel on every devmap, and refused when asked for
    try:
        return _bpf.Map.create(info["type_id"], info["name"] or name, info["key_size"], info["value_size"],
                               info["max_entries"], flags=flags, inner_map=inner)
    except _bpf.BpfError as exc:
        raise ReplayError("cannot make a private copy of map %s (%s, key %d bytes, value %d bytes, %d entries, "
                          "flags 0x%x): %s" % (name, info["type"], info["key_size"], info["value_size"],
                                               info["max_entries"], live.map_flags, exc))


def _clone(live: _bpf.Map, name: str) -> _bpf.Map:
    """A new map like `live`, with its entries (for a map of maps, a copy of each inner map)."""
    info = live.info
    if info["type"] not in CLONEABLE:
        _refuse(name, info["type"])
    if info["type"] not in MAPS_OF_MAPS:
        copy = _create_like(live, name)
        try:
            _copy_entries(live, copy)
        except BaseException:
            copy.close()
            raise
        return copy
    inner_copies = []
    try:
        for key in live.keys():
            with live.inner(key) as live_inner:
                if live_inner.info["type"] in MAPS_OF_MAPS:
                    _refuse("%s[%s]" % (name, key.hex()), live_inner.info["type"])
                inner_copies.append((key, _clone(live_inner, "%s[%s]" % (name, key.hex()))))
        # The kernel checks every inner map against a template given at creation: the first copy serves.
        copy = _create_like(live, name, inner_copies[0][1])
        try:
            for key, inner_copy in inner_copies:
                copy.update(key, inner_copy.fd.to_bytes(4, sys.byteorder))
        except BaseException:
            copy.close()
            raise
        return copy
    finally:
        for _key, inner_copy in inner_copies:
            inner_copy.close()


def clone_maps(source_dir: str, target_dir: str) -> list[str]:
    """Copy every map pinned in source_dir (by name) into a new map pinned under the same name in
    target_dir, with the same type, sizes and flags, so that libbpf reuses it when a program of the same
    maps is loaded with target_dir as its maps directory. An empty map of maps is left out: libbpf creates
    it empty from the object, knowing its inner map's layout (which the kernel does not tell). Returns the
    names cloned."""
    names = []
    if not os.path.isdir(source_dir):
        return names
    os.makedirs(target_dir, exist_ok=True)
    for name in sorted(os.listdir(source_dir)):
        path = os.path.join(source_dir, name)
        if os.path.isdir(path):  # a map set's groups/, not a map
            continue
        with _bpf.Map.from_pin(path) as live:
            if live.info["type"] in MAPS_OF_MAPS and not live.keys():
                continue
            with _clone(live, name) as copy:
                copy.pin(os.path.join(target_dir, name))
        names.append(name)
    return names


def snapshot(maps_dir: str) -> dict[str, dict[bytes, object]]:
    """Every map pinned in maps_dir: {name: {key: value}} (per-CPU values as lists); a map of maps as one
    entry per inner map, `name[key]`, with that map's entries (the inner maps' ids differ from copy to copy)."""
    out = {}
    if not os.path.isdir(maps_dir):
        return out
    for name in sorted(os.listdir(maps_dir)):
        path = os.path.join(maps_dir, name)
        if os.path.isdir(path):
            continue
        with _bpf.Map.from_pin(path) as m:
            if m.info["type"] in DATA_MAPS:
                out[name] = dict(m.items())
            elif m.info["type"] in MAPS_OF_MAPS:
                for key in m.keys():
                    with m.inner(key) as inner:
                        out["%s[%s]" % (name, key.hex())] = dict(inner.items())
    return out


def _number(value) -> int | str:
    """A counter as a number (per-CPU values summed) when it is one; other values as hex."""
    values = value if isinstance(value, list) else [value]
    if all(len(v) in (1, 2, 4, 8) for v in values):
        return sum(int.from_bytes(v, sys.byteorder) for v in values)
    return b"".join(values).hex()


def in_layout(entries: dict[bytes, object], copy: _migration.Copy, like: dict[bytes, object]) -> dict[bytes, object]:
    """A map's entries (as snapshot() reads them) in the layout a migration carries them into; an array's
    entries that only the new layout has (like: the migrated map's) zero, as the new array holds them."""
    out = {}
    for key, value in entries.items():
        where = "map %s (replay), entry %s" % (copy.name, key.hex())
        raws = value if isinstance(value, list) else [value]
        converted = [copy.value.convert(raw, where) for raw in raws]
        out[copy.key.convert(key, where)] = converted if isinstance(value, list) else converted[0]
    if copy.array:
        for key, value in like.items():
            if key not in out:
                out[key] = [bytes(len(v)) for v in value] if isinstance(value, list) else bytes(len(value))
    return out


def map_effects(start: dict, old_end: dict, new_end: dict) -> dict:
    """Per map and key whose value the two programs left differently: the value at the start, and what
    each program left (numbers where the value is a counter). Maps both left alike are not listed."""
    effects = {}
    for name in sorted(set(start) | set(old_end) | set(new_end)):
        before, old, new = start.get(name, {}), old_end.get(name, {}), new_end.get(name, {})
        keys = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
        if keys:
            effects[name] = {key.hex(): {"start": _shown(before.get(key)), "old": _shown(old.get(key)),
                                         "new": _shown(new.get(key))} for key in keys}
    return effects


def _shown(value):
    return None if value is None else _number(value)


# ---------------------------------------------------------------- the two sides


class Side:
    """One program loaded for replay, with its private maps pinned in a directory of its own."""

    def __init__(self, label: str, loaded: _loader.Loaded, maps_dir: str,
                 reviews: list[_migration.Review] | None = None):
        self.label = label
        self.loaded = loaded
        self.maps_dir = maps_dir
        # Each map against the live one, as the upgrade would see it (the candidate's; [] for the attached side).
        self.reviews = reviews or []

    def migrated(self) -> dict[str, _migration.Copy]:
        """The maps whose entries were carried into another layout: name -> how."""
        return {r.name: r.copy for r in self.reviews if r.copy is not None}

    def run(self, frame: bytes, ctx: bytes | None) -> tuple[int, bytes]:
        try:
            return self.loaded.program.test_run_output(frame, ctx=ctx)
        except _bpf.BpfError as exc:
            raise ReplayError("%s program: the kernel refused a test run of a %d-byte frame: %s"
                              % (self.label, len(frame), exc))


@contextlib.contextmanager
def private_dir(pin_root: str, netns_key: str) -> Iterator[str]:
    """A directory of pins for one replay, removed with everything in it afterwards. Its name is longer than an
    interface's can be (15), so it is never taken for one; bpffs refuses names with a dot."""
    directory = _names.join_under(pin_root, netns_key, "replay-%s" % uuid.uuid4().hex[:12])
    os.makedirs(directory)
    try:
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)
        _pins.prune_empty(os.path.dirname(directory), pin_root)


def live_maps_dir(pins: _pins.PinDir, record: dict, netns_key: str) -> str:
    """Where the attached program's maps are pinned: its map set, or the attachment's own maps/."""
    if record.get("shared_maps"):
        return _pins.shared_maps_dir(pins.pin_root, netns_key, record["shared_maps"])
    return pins.maps_dir


def attached_object(record: dict, object_store: str) -> tuple[str, bytes]:
    """The attached revision's object, as the object store keeps it (the file at its path may have changed):
    its path and its bytes, checked against the digest they are kept as (a RevisionError otherwise)."""
    if record.get("backend") == "bcc":
        raise ReplayError("the attached program was compiled by bcc from %s; replay loads objects (backend "
                          "libbpf) only" % record.get("source"))
    digest = record.get("object_sha256")
    path = _revisions.ObjectStore(object_store).path(digest) if digest else None
    if not path or not os.path.exists(path):
        raise ReplayError("the attached program's object (sha256 %s) is not in the object store %s: replay needs "
                          "the very object the hook runs" % (digest, object_store))
    return path, _revisions.ObjectStore(object_store).verified(digest, "the attached program's object")


@contextlib.contextmanager
def load_side(label: str, path: str, program: str | None, prog_type: str, constants: dict, live_maps: str,
              directory: str, load_as: str | None = None, section: str | None = None,
              data: bytes | None = None, migration: tuple[str, dict] | None = None) -> Iterator[Side]:
    """One side loaded over private copies of the live maps. migration (the candidate's map_migration and
    map_rename): the maps it lays out otherwise are migrated from the copies as its upgrade would migrate them
    from the live maps."""
    maps_dir = os.path.join(directory, label, "maps")
    clone_maps(live_maps, maps_dir)
    reviews: list[_migration.Review] = []
    if migration is not None and os.listdir(maps_dir):
        # Against the live maps, whose BTF says what their bytes mean (the copies have none), carried out on the
        # copies.
        policy, renames = migration
        reviews = _migration.review(path, live_maps, policy, data, renames)
        refused = _migration.refusal(path, live_maps, reviews)
        if refused:
            raise ReplayError("%s (map_migration: %s)" % (refused, policy))
        reviews = [review.elsewhere(maps_dir) for review in reviews]
    reset = _migration.Reset(reviews)
    reset.set_aside(Journal())  # the copies are this replay's own: a failure leaves nothing to put back there
    try:
        loaded = _loader.load(path, program, prog_type, constants, maps_dir=maps_dir, load_as=load_as,
                              section=section, data=data)
    except _bpf.BpfError as exc:
        if "reuse" in str(exc) or exc.errno == 22:
            raise ReplayError("%s program of %s: its maps do not fit the live maps it would take over (%s); a "
                              "release that changes a map's type or size starts with new maps, and its replay "
                              "would compare nothing" % (label, path, exc))
        raise
    with loaded:
        reset.copy()
        reset.commit()
        yield Side(label, loaded, maps_dir, reviews)


# ---------------------------------------------------------------- the replay


def xdp_ctx(frame: bytes, ifindex: int) -> bytes:
    """An xdp_md for one frame, naming the interface as its ingress (a program may read it); no metadata."""
    return XDP_MD.pack(0, len(frame), 0, ifindex, 0, 0)


def flow_label(frame: bytes) -> str:
    """A frame's flow as text: `tcp 10.0.0.1:1024 > 10.0.0.2:80`, `icmpv6 fd00::1 > fd00::2`."""
    flow = _pcap.five_tuple(frame)
    if flow.src is None:
        return flow.proto

    def end(address, port):
        if port is None:
            return address
        return ("[%s]:%d" if ":" in address else "%s:%d") % (address, port)

    return "%s %s > %s" % (flow.proto, end(flow.src, flow.sport), end(flow.dst, flow.dport))


def compare(frames: list[bytes], old: Side, new: Side, prog_type: str, ifindex: int) -> dict:
    """Every frame through both programs: the verdicts, their transitions (with the flows and the first
    frames of each), the frames whose bytes the two left differently, and the maps' effects."""
    names = verdict_names(prog_type)
    start = snapshot(old.maps_dir)
    migrated = new.migrated()
    verdicts = {"old": collections.Counter(), "new": collections.Counter()}
    transitions: dict[str, dict] = {}
    rewritten = {"frames": 0, "examples": []}
    began = time.monotonic()
    for index, frame in enumerate(frames):
        ctx = xdp_ctx(frame, ifindex) if prog_type == "xdp" else None
        old_verdict, old_out = old.run(frame, ctx)
        new_verdict, new_out = new.run(frame, ctx)
        old_name, new_name = (names.get(v, str(v)) for v in (old_verdict, new_verdict))
        verdicts["old"][old_name] += 1
        verdicts["new"][new_name] += 1
        if old_verdict != new_verdict:
            step = transitions.setdefault("%s -> %s" % (old_name, new_name),
                                          {"frames": 0, "flows": collections.Counter(), "examples": []})
            step["frames"] += 1
            step["flows"][flow_label(frame)] += 1
            if len(step["examples"]) < EXAMPLES:
                step["examples"].append({"index": index, "frame": frame.hex()})
        elif old_out != new_out:
            rewritten["frames"] += 1
            if len(rewritten["examples"]) < EXAMPLES:
                rewritten["examples"].append({"index": index, "verdict": old_name, "frame": frame.hex(),
                                              "old": old_out.hex(), "new": new_out.hex()})
    seconds = time.monotonic() - began
    new_end = snapshot(new.maps_dir)
    for step in transitions.values():
        step["flows"] = [{"flow": flow, "frames": count} for flow, count in step["flows"].most_common(FLOWS)]
    return {
        "frames": len(frames),
        "seconds": round(seconds, 3),
        "changed_verdicts": sum(step["frames"] for step in transitions.values()),
        "verdicts": {side: dict(sorted(counts.items())) for side, counts in verdicts.items()},
        "transitions": dict(sorted(transitions.items())),
        "rewritten": rewritten,
        "map_effects": map_effects(*[{name: in_layout(entries, migrated[name], new_end.get(name, {}))
                                      if name in migrated else entries for name, entries in taken.items()}
                                     for taken in (start, snapshot(old.maps_dir))], new_end),
        "map_migration": [review.report() for review in new.reviews],
    }


def compared(params: dict, require_attached: bool) -> dict:
    """run() with `compared` true; where the hook has no program of ours and require_attached is false,
    {compared: false, reason} instead of the error."""
    try:
        return dict(run(params), compared=True)
    except NothingAttached as exc:
        if require_attached:
            raise
        return {"compared": False, "reason": str(exc)}


def run(params: dict) -> dict:
    """The replay module's work: the pcap's frames through the hook's attached program and the candidate."""
    if not os.path.isfile(params["pcap"]):
        raise ReplayError("pcap %s does not exist on the host" % params["pcap"])
    frames = [record.data for record in _pcap.read(params["pcap"])[1]]
    if not frames:
        raise ReplayError("%s holds no frames: nothing to replay" % params["pcap"])
    kind, direction = params["hook"], params["direction"] if params["hook"] == "tc" else None
    if params.get("name"):
        if kind != "tc":
            raise ReplayError("name is for a named tc attachment; the xdp hook holds one program of this collection")
        _pins.check_attachment_name(params["name"])
    prog_type = "xdp" if kind == "xdp" else "sched_cls"
    _loader.require_object(params["object"])
    with _netns.netns(params["netns"]):
        key = _netns.netns_key(params["netns"])
        ifindex = _netns.ifindex(params["interface"])
        hook = _pins.hook_dir(kind, direction, params.get("name"))  # a program task's attachment (tc's name)
        pins = _pins.PinDir.for_hook(params["pin_root"], key, params["interface"], hook)
        record = pins.record.read()
        where = "the %s hook of %s" % (hook, params["interface"])
        if not record:
            raise NothingAttached("ebpf.xdp has no program on %s: replay compares a candidate with the program "
                                  "the collection attached there" % where)
        load_as = "sched_act" if kind == "tc" and record.placement == "act_bpf" else None
        constants = _loader.resolve_constants(params["constants"])
        live_maps = live_maps_dir(pins, record, key)
        kept, kept_data = attached_object(record, params["object_store"])
        with private_dir(params["pin_root"], key) as directory, \
                load_side("attached", kept, record.get("program_name"), prog_type,
                          record.get("resolved_constants") or {}, live_maps, directory, load_as, data=kept_data) as old, \
                load_side("candidate", params["object"], params["program"], prog_type, constants, live_maps,
                          directory, load_as, params.get("section"),
                          migration=(params.get("map_migration") or _migration.FIELDS,
                                     params.get("map_rename") or {})) as new:
            result = compare(frames, old, new, prog_type, ifindex)
            candidate = {"object": params["object"], "program": new.loaded.name, "tag": new.loaded.info["tag"]}
    result.update(
        hook=where, pcap=params["pcap"], candidate=candidate,
        attached={"id": record.get("prog_id"), "program": record.get("program_name"),
                  "object": record.get("object"), "object_sha256": record.get("object_sha256")})
    result["diff"] = {"prepared": describe(result)}
    return result


# The option of xdp_program and tc_program (not of datapath's entries, which share their other options).
TASK_ARGS = dict(replay=dict(type="path"))


def for_task(params: dict, kind: str) -> dict | None:
    """What a program task's `replay` (a pcap) asks, before the task changes anything: the frames through the
    attached program and the task's, as the replay module reports it (its diff as `summary`), or why nothing
    was compared (no program of ours attached yet). None without `replay`."""
    if not params.get("replay"):
        return None
    if params["state"] != "present" or params.get("revision") == _revisions.PREVIOUS \
            or params.get("backend") == "bcc" or not params.get("object"):
        raise ReplayError("replay compares the attached program with the task's object: it needs state present, "
                          "an object (backend libbpf) and no revision previous")
    result = compared(dict(params, hook=kind, direction=params.get("direction") or "ingress", pcap=params["replay"]),
                      require_attached=False)
    if result["compared"]:
        result["summary"] = result.pop("diff")["prepared"]
    return result


def converge_task(params: dict, check_mode: bool, hook_class) -> tuple[dict, list[str]]:
    """A program module's work (xdp_program, tc_program): its replay (see for_task), read from the hook as it
    is, then the converge of the hook hook_class adapts."""
    replayed = for_task(params, hook_class.kind)
    result, warnings = _converge.converge_interface(params, check_mode, hook_class.from_params)
    if replayed is not None:
        result["replay"] = replayed
    return result, warnings


def describe(result: dict) -> str:
    """The replay as --diff shows it: the verdict transitions, the rewritten frames, the maps' effects."""
    lines = ["replay of %d frames of %s on %s: attached program %s (id %s) -> candidate %s"
             % (result["frames"], result["pcap"], result["hook"], result["attached"]["program"],
                result["attached"]["id"], result["candidate"]["program"])]
    if not result["transitions"]:
        lines.append("  every frame gets the same verdict")
    for step, found in result["transitions"].items():
        lines.append("  %s: %d frames" % (step, found["frames"]))
        lines.extend("      %s: %d" % (flow["flow"], flow["frames"]) for flow in found["flows"])
    if result["rewritten"]["frames"]:
        lines.append("  same verdict, bytes left differently: %d frames" % result["rewritten"]["frames"])
    for name, keys in result["map_effects"].items():
        for key, values in keys.items():
            lines.append("  map %s key %s: from %s, attached left %s, candidate %s"
                         % (name, key, values["start"], values["old"], values["new"]))
    return "\n".join(lines) + "\n"
