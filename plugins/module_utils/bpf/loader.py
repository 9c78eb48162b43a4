# -*- coding: utf-8 -*-
# Copyright (c) ebpf.xdp contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Loading one program from a BPF object, apart from attaching it.

Private to the ebpf.xdp collection: the interface may change without notice.

open -> select the program -> write constants -> pin (or keep out) the maps
-> load. The converger uses it before it attaches; a traffic generator or a
test-run benchmark uses it to get a loaded program and nothing else.
"""

from __future__ import annotations

import hashlib
import os
import re

from ansible_collections.ebpf.xdp.plugins.module_utils.host import netns as _netns
from ansible_collections.ebpf.xdp.plugins.module_utils.bpf import libbpf as _bpf, pins as _pins
from ansible_collections.ebpf.xdp.plugins.module_utils._errors import EbpfXdpError

# Where programs of each type live in the C source, for the "wrong type" message.
SECTIONS = {"xdp": 'SEC("xdp")', "sched_cls": 'SEC("tc")', "sched_act": 'SEC("action")'}
TYPE_NAMES = {"xdp": "XDP", "sched_cls": "tc classifier", "sched_act": "tc action"}
# A program whose SEC() names no type libbpf knows (the kernel samples' SEC("xdp1"), tcbpf1's
# SEC("redirect_xmit")): the hook it is put on gives it its type, as iproute2 and xdp-loader do.
UNSPEC = "unspec"
# The types each hook's programs may have been compiled as: tc's classifier and action take the same
# __sk_buff and verdicts, so a SEC("action") program runs as a classifier and a SEC("tc") one as an action.
HOOK_TYPES = {"xdp": ("xdp",), "sched_cls": ("sched_cls", "sched_act"), "sched_act": ("sched_act", "sched_cls")}
# libbpf 0.x's section names of XDP programs run on a map's copies of a frame, which libbpf 1.0 no longer knows.
LEGACY_XDP_MAP_SECTIONS = {"xdp_devmap": _bpf.BPF_XDP_DEVMAP, "xdp_cpumap": _bpf.BPF_XDP_CPUMAP}


class LoadError(EbpfXdpError):
    pass


def legacy_map_attach_type(section: str) -> int | None:
    """The attach type of an untyped XDP program in libbpf 0.x's SEC("xdp_devmap/...") or SEC("xdp_cpumap/...")."""
    return LEGACY_XDP_MAP_SECTIONS.get(section.split("/")[0])


def _is_devmap(obj: _bpf.BpfObject, prog: dict) -> bool:
    """A devmap egress program: SEC("xdp/devmap"), or untyped in libbpf 0.x's SEC("xdp_devmap/...")."""
    if prog["type"] == UNSPEC:
        return legacy_map_attach_type(prog["section"]) == _bpf.BPF_XDP_DEVMAP
    return obj.expected_attach_type(prog["name"]) == _bpf.BPF_XDP_DEVMAP


def _by_section(programs: list[dict]) -> str:
    return ", ".join('%s (SEC("%s"))' % (p["name"], p["section"]) for p in programs) or "none"


def select_program(obj: _bpf.BpfObject, name: str | None, prog_type: str, devmap: bool = False,
                   section: str | None = None) -> str:
    """The name of the program to load: `name`, the one program in `section` (iproute2's `sec`), or the only
    program of `prog_type` when neither is given (failing that, the only one whose section names no type).

    A devmap egress program (SEC("xdp/devmap")) is an XDP program that only a
    devmap entry runs: when no name is given, it is a candidate only with
    devmap=True (so an object with an ingress and an egress program needs no
    name for either). A program whose section names another type than the
    hook runs is refused, naming both.
    """
    if name is not None and section is not None:
        raise LoadError("program and section both name a program of %s; give one of them (program: its function "
                        "name, section: its SEC() name)" % obj.path)
    programs = obj.programs()
    for prog in programs:
        prog["devmap"] = _is_devmap(obj, prog)
    kind = TYPE_NAMES.get(prog_type, prog_type) + (" devmap egress" if devmap else "")
    if section is not None:
        found = [p for p in programs if p["section"] == section]
        if not found:
            raise LoadError("%s has no program in section %r; its programs: %s"
                            % (obj.path, section, _by_section(programs)))
        if len(found) > 1:
            raise LoadError("section %r of %s holds %d programs (%s); name one with program: instead" % (
                section, obj.path, len(found), ", ".join(p["name"] for p in found)))
        return _check_type(obj, found[0], prog_type, kind)
    if name is None:
        candidates = [p["name"] for p in programs if p["type"] == prog_type and p["devmap"] == devmap] or \
            [p["name"] for p in programs if p["type"] == UNSPEC and p["devmap"] == devmap]
        if len(candidates) != 1:
            raise LoadError("%s has %d %s programs (%s); name one with program: or section:" % (
                obj.path, len(candidates), kind, ", ".join(candidates) or "none"))
        return candidates[0]
    found = [p for p in programs if p["name"] == name]
    if not found:
        raise LoadError("program %r is not in %s; it has: %s" % (
            name, obj.path, ", ".join(p["name"] for p in programs) or "none"))
    return _check_type(obj, found[0], prog_type, kind)


def _check_type(obj: _bpf.BpfObject, prog: dict, prog_type: str, kind: str) -> str:
    if prog["type"] != UNSPEC and prog["type"] not in HOOK_TYPES.get(prog_type, (prog_type,)):
        raise LoadError("program %r in %s is a %s program, not %s; %s programs are in %s, or in a section that "
                        "names no program type (this one is in SEC(\"%s\"))" % (
                            prog["name"], obj.path, prog["type"], prog_type, kind, SECTIONS.get(prog_type, prog_type),
                            prog["section"]))
    return prog["name"]


def in_section(path: str | None, section: str) -> str | None:
    """The function name of the one program in `section` of the object at path, for a check before the load; None
    when the object is not there (yet) or the section does not hold exactly one (the load then says why)."""
    if not path or not os.path.isfile(path):
        return None
    with _bpf.BpfObject(path) as obj:
        found = [p["name"] for p in obj.programs() if p["section"] == section]
    return found[0] if len(found) == 1 else None


def as_hook(obj: _bpf.BpfObject, name: str, prog_type: str, devmap: bool = False) -> None:
    """Load program `name` as the hook runs it: of type prog_type (a classifier as a tc action, an untyped
    program as what the hook runs), and with devmap as a devmap egress program (expected attach type
    BPF_XDP_DEVMAP, whatever its section).

    An untyped XDP program gets what libbpf gives SEC("xdp") (expected attach
    type BPF_XDP; libbpf 0.x's SEC("xdp_devmap/...") and SEC("xdp_cpumap/...")
    their map's), and multi-buffer frames (BPF_F_XDP_HAS_FRAGS) where its
    section says "frags", as SEC("xdp.frags") does; a tc program needs nothing more.
    """
    prog = [p for p in obj.programs() if p["name"] == name][0]
    if prog["type"] != prog_type:
        obj.set_type(name, prog_type)
    if prog["type"] == UNSPEC and prog_type == "xdp":
        obj.set_expected_attach_type(name, legacy_map_attach_type(prog["section"]) or _bpf.BPF_XDP)
        if "frags" in re.split(r"[^a-z0-9]+", prog["section"].lower()):
            obj.add_flags(name, _bpf.BPF_F_XDP_HAS_FRAGS)
    if devmap:
        obj.set_expected_attach_type(name, _bpf.BPF_XDP_DEVMAP)


def resolve_constants(constants: dict | None) -> dict:
    """Load-time settings as numbers: {"ifindex": NAME} becomes NAME's index in the current namespace.

    Interfaces are named in inventory and resolved where the program runs, at
    load time, so the same task works on every host.
    """
    resolved = {}
    for name, value in (constants or {}).items():
        if isinstance(value, dict):
            if set(value) != {"ifindex"}:
                raise LoadError("constant %s: %r is not a setting; give a number, a boolean, or "
                                "{ifindex: INTERFACE}" % (name, value))
            try:
                value = _netns.ifindex(str(value["ifindex"]))
            except _netns.NotFoundError as exc:
                raise LoadError("constant %s: %s" % (name, exc))
        resolved[name] = value
    return resolved


class Loaded:
    """A program in the kernel, held by this process until close() (or the end of `with`): what every backend
    loads (bpf/backend), libbpf from an object (from_object), bcc from a source (bpf/bcc).

    name: the program's function name; program: its Program (own fd); info: its
    prog info; data_sha256: digest of what else makes it the same program (libbpf:
    its .rodata/.data/.bss as loaded, constants included; bcc: its tables' layout);
    maps: map name -> pin path (empty when the maps were kept out of bpffs);
    tables: maps this process holds by name to pin once the program is on its
    hook (bcc's), None where the load pinned them (libbpf's).
    """

    def __init__(self, name: str, program: _bpf.Program, data_sha256: str, maps_dir: str | None,
                 maps: dict[str, str], tables: dict[str, _bpf.Map] | None = None, path: str | None = None,
                 data: bytes | None = None, constants: dict | None = None):
        self.name = name
        self.program = program
        self.info = program.info()
        self.data_sha256 = data_sha256
        self.maps_dir = maps_dir
        self.maps = maps
        self.tables = tables
        # How it was loaded, for a hook that loads its own copy (libxdp's dispatcher, see hooks.xdp_dispatcher).
        self.path = path
        self.data = data
        self.constants = constants

    @classmethod
    def from_object(cls, obj: _bpf.BpfObject, name: str, data_sha256: str, maps_dir: str | None,
                    constants: dict | None = None) -> Loaded:
        """Program `name` of a loaded object, its maps as the object pinned them in maps_dir."""
        maps = {m: os.path.join(maps_dir, m) for m in obj.map_names()} if maps_dir else {}
        return cls(name, obj.program(name), data_sha256, maps_dir, maps, path=obj.path, data=obj.data,
                   constants=constants)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self) -> None:
        self.program.close()
        for table in (self.tables or {}).values():
            table.close()

    def pin_maps(self) -> None:
        """Once the program is on its hook: the tables it holds pinned under maps_dir by name, and pins of tables
        it no longer has dropped. Nothing for libbpf's maps, pinned (or reused) when they were loaded."""
        if self.tables is None or not self.maps_dir:
            return
        for name, table in self.tables.items():
            _pins.PinDir.replace_pin(table, os.path.join(self.maps_dir, name))
        for name in os.listdir(self.maps_dir):
            if name not in self.tables:
                os.unlink(os.path.join(self.maps_dir, name))

    def open_map(self, name: str) -> _bpf.Map:
        """One of the program's maps by name (pinned or not; a table by the name its source gives it), as a Map
        the caller closes."""
        if self.tables is not None:
            if name not in self.tables:
                raise LoadError("program %s has no table named %s" % (self.name, name))
            return _bpf.Map.from_id(self.tables[name].info["id"])
        for map_id in self.info["map_ids"]:
            found = _bpf.Map.from_id(map_id)
            if found.info["name"] == name:
                return found
            found.close()
        raise LoadError("program %s has no map named %s" % (self.name, name))


def require_object(path: str) -> None:
    """LoadError, saying how to make one, when the object file is not there."""
    if not os.path.isfile(path):
        raise LoadError("object file %s does not exist; compile it with ebpf.xdp.bpf_object" % path)


CHECKSUM_ALGORITHMS = ("sha256",)


def parse_checksum(checksum: str) -> str:
    """The hex digest of `sha256:<hex>` (ansible.builtin.get_url's notation), lower-cased; LoadError otherwise."""
    algorithm, sep, digest = checksum.strip().partition(":")
    digest = digest.strip().lower()
    if not sep or algorithm.lower() not in CHECKSUM_ALGORITHMS:
        raise LoadError("checksum %r is not sha256:<64 hex digits> (the digest ebpf.xdp.bpf_object returns as "
                        "checksum)" % checksum)
    if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
        raise LoadError("checksum %r: a sha256 digest is 64 hex digits, not %r" % (checksum, digest))
    return digest


# Test-only: after read_object hashed the object, put this file's bytes at the object's path (tests/integration/
# test_verified_objects.py): what is loaded must still be the bytes that were hashed.
SWAP_AFTER_HASH_ENV = "EBPF_XDP_TEST_SWAP_AFTER_HASH"


def read_object(path: str) -> tuple[bytes, str]:
    """The object's bytes, read once, and their sha256: the caller checks that digest and loads these very
    bytes (load's data), so the file changing on disk between the check and the load changes nothing."""
    require_object(path)
    with open(path, "rb") as handle:
        data = handle.read()
    swap = os.environ.get(SWAP_AFTER_HASH_ENV)
    if swap:
        with open(swap, "rb") as replacement, open(path, "wb") as target:
            target.write(replacement.read())
    return data, hashlib.sha256(data).hexdigest()


def verify_checksum(path: str, actual_sha256: str, checksum: str | None) -> None:
    """Refuse an object whose digest is not the expected one, before anything of it reaches the kernel."""
    if checksum and parse_checksum(checksum) != actual_sha256:
        raise LoadError("object %s does not match its checksum: expected sha256:%s, found sha256:%s; "
                        "nothing was loaded" % (path, parse_checksum(checksum), actual_sha256))


def load(path: str, program: str | None, prog_type: str, constants: dict | None = None,
         maps_dir: str | None = None, load_as: str | None = None, devmap: bool = False,
         section: str | None = None, data: bytes | None = None) -> Loaded:
    """Load one program of `path` (by name, or the one in `section`); its maps are pinned (and reused) in
    maps_dir, or kept out of bpffs.

    Only the chosen program goes into the kernel, as its hook runs it (see
    as_hook): as load_as when given (a classifier loaded as a tc action), or
    with devmap as a devmap egress program. The object itself is closed
    before returning: the Loaded program keeps what it needs. `data`: the
    object's bytes as the caller read and checked them (read_object), loaded
    as they are; without it the file is read once.
    """
    if data is None:
        require_object(path)
    with _bpf.BpfObject(path, data) as obj:
        name = select_program(obj, program, prog_type, devmap, section)
        as_hook(obj, name, load_as or prog_type, devmap)
        data_sha256 = prepare(obj, name, constants, maps_dir)
        obj.load()
        return Loaded.from_object(obj, name, data_sha256, maps_dir, constants)


def prepare(obj: _bpf.BpfObject, name: str, constants: dict | None, maps_dir: str | None) -> str:
    """Set an opened object up to load program `name` alone, with its constants and its maps pinned in maps_dir
    (or kept out of bpffs); the digest of its data as it will be loaded."""
    obj.only_load(name)
    obj.set_constants(constants)
    data_sha256 = obj.data_digest()
    if maps_dir:
        obj.pin_maps(maps_dir)
    else:
        obj.clear_pin_paths()
    return data_sha256
