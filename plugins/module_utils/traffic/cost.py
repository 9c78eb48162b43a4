# -*- coding: utf-8 -*-
# Copyright (c) ebpf.xdp contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""ebpf.xdp.program_cost: what each XDP and tc program of an object costs per packet, beside an empty program
of the same hook.

Private to the ebpf.xdp collection: the interface may change without notice.

BPF_PROG_TEST_RUN runs a program `repeat` times on one frame and the kernel
answers the average time of a run in ns. That figure is mostly the test
run's own work (setting the frame up again for every run): an empty XDP
program costs about as much as a small counter. So every program is measured
beside an empty program of its hook (XDP: XDP_PASS, tc: TC_ACT_OK; loaded
from two raw instructions), the empty one right after it in each round, and
the difference is the program's own cost. Alternating, rather than measuring
the empty program once, keeps a CPU that slows down or speeds up during the
measurement from showing up as a difference.

Nothing is attached or pinned (maps are kept out of bpffs, so a map declared
pinned by name is a private one), and every program is closed before the work
returns: the host is as it was.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from dataclasses import dataclass, field

from ansible_collections.ebpf.xdp.plugins.module_utils.bpf import libbpf as _bpf, loader as _loader
from ansible_collections.ebpf.xdp.plugins.module_utils.hooks import replay as _replay
from ansible_collections.ebpf.xdp.plugins.module_utils.traffic import frames as _frames
from ansible_collections.ebpf.xdp.plugins.module_utils._errors import EbpfXdpError

DEFAULT_REPEAT = 1000000
DEFAULT_RUNS = 3
# BPF_PROG_TEST_RUN's repeat is a C int.
MAX_REPEAT = 2 ** 31 - 1
# The program types measured, and what their empty program returns: XDP_PASS, TC_ACT_OK.
EMPTY_RETURNS = {"xdp": _bpf.XDP_PASS, "sched_cls": 0, "sched_act": 0}
EMPTY_NAMES = {"xdp": "cost_empty_xdp", "sched_cls": "cost_empty_cls", "sched_act": "cost_empty_act"}
# XDP programs the kernel never test-runs: those that run on a devmap's or cpumap's copies of a frame.
NOT_TEST_RUN = {_bpf.BPF_XDP_DEVMAP: 'a devmap egress program (SEC("xdp/devmap"))',
                _bpf.BPF_XDP_CPUMAP: 'a cpumap program (SEC("xdp/cpumap"))'}
# The default frame: the smallest Ethernet frame, UDP over IPv4, between locally administered addresses.
DEFAULT_FRAME = _frames.build_frame("udp", "02:00:00:00:00:01", "02:00:00:00:00:02", "192.0.2.1", "192.0.2.2",
                                    src_port=1024, dst_port=9)


class CostError(EbpfXdpError):
    """Settings that cannot be measured with, or programs that cannot be measured."""


@dataclass
class Settings:
    """What to measure, validated; built from the module's parameters by from_params."""

    object: str
    programs: list[str] = field(default_factory=list)
    # The programs by their SEC() names instead (each section holding one program), and the type programs whose
    # section names none are measured as (the type their hook would give them, see _loader.as_hook).
    sections: list[str] = field(default_factory=list)
    program_type: str | None = None
    constants: dict = field(default_factory=dict)
    repeat: int = DEFAULT_REPEAT
    runs: int = DEFAULT_RUNS
    frame: bytes = DEFAULT_FRAME

    @classmethod
    def from_params(cls, params: dict) -> Settings:
        settings = cls(object=params["object"], programs=list(params.get("programs") or []),
                       sections=list(params.get("sections") or []), program_type=params.get("program_type"),
                       constants=dict(params.get("constants") or {}),
                       repeat=params.get("repeat", DEFAULT_REPEAT), runs=params.get("runs", DEFAULT_RUNS),
                       frame=parse_frame(params["frame"]) if params.get("frame") is not None else DEFAULT_FRAME)
        settings.validate()
        return settings

    def validate(self) -> None:
        if not 1 <= self.repeat <= MAX_REPEAT:
            raise CostError("repeat must be between 1 and %d runs of the program per measurement, not %d"
                            % (MAX_REPEAT, self.repeat))
        if self.runs < 1:
            raise CostError("runs must be at least 1 measurement per program, not %d" % self.runs)
        if len(self.frame) < _frames.ETH_HEADER:
            raise CostError("frame must hold at least an Ethernet header (%d bytes), not %d bytes"
                            % (_frames.ETH_HEADER, len(self.frame)))
        for option in ("programs", "sections"):
            names = getattr(self, option)
            duplicates = sorted({name for name in names if names.count(name) > 1})
            if duplicates:
                raise CostError("%s names %s more than once" % (option, ", ".join(duplicates)))


def parse_frame(text: str) -> bytes:
    """A frame written as hex, with or without spaces or colons between the bytes."""
    compact = "".join(str(text).replace(":", " ").split())
    try:
        return bytes.fromhex(compact)
    except ValueError:
        raise CostError("frame must be the frame's bytes as hex digits (two a byte), not %r" % text)


def median(values: list[float]) -> float:
    """The middle value; with an even count, the mean of the two middle ones."""
    return float(statistics.median(values))


def verdict_name(prog_type: str, retval: int) -> str:
    """XDP_DROP, TC_ACT_SHOT, ...: the name of a return value for the program's hook, or the number."""
    return _replay.verdict_names(prog_type).get(retval, str(retval))


def typed_by_hook(programs: list[dict], program_type: str | None) -> None:
    """Programs whose section names no type (`untyped`) take program_type, as their hook would give it."""
    for prog in programs:
        if prog["type"] != _loader.UNSPEC:
            continue
        prog["untyped"] = True
        if program_type:
            prog["type"] = program_type
            if program_type == "xdp":
                prog["attach_type"] = _loader.legacy_map_attach_type(prog["section"]) or _bpf.BPF_XDP


def in_sections(programs: list[dict], sections: list[str], path: str) -> list[str]:
    """The function names of the one program in each section; an error for a section with none or several."""
    names = []
    for section in sections:
        found = [p["name"] for p in programs if p["section"] == section]
        if not found:
            raise CostError("%s has no program in section %r; its programs: %s" % (path, section, ", ".join(
                '%s (SEC("%s"))' % (p["name"], p["section"]) for p in programs) or "none"))
        if len(found) > 1:
            raise CostError("section %r of %s holds %d programs (%s); name them with programs: instead"
                            % (section, path, len(found), ", ".join(found)))
        names.append(found[0])
    return names


def untyped_reason(prog: dict) -> str:
    return ('its section SEC("%s") names no program type: program_type says which hook\'s type (xdp, sched_cls, '
            'sched_act) to measure it as' % prog["section"])


def choose(programs: list[dict], wanted: list[str], path: str) -> tuple[list[dict], dict[str, str]]:
    """The programs to measure: those named in `wanted`, or every XDP and tc program of the object; with the
    programs of the object left out and why (the kernel test-runs no devmap or cpumap program). Programs are
    the object's, each with its `type` and `attach_type`; an error names what cannot be measured."""
    def untestable(prog):
        return prog["type"] == "xdp" and NOT_TEST_RUN.get(prog["attach_type"])

    by_name = {prog["name"]: prog for prog in programs}
    listing = ", ".join("%s (%s)" % (p["name"], p["type"]) for p in programs) or "none"
    if not wanted:
        measured = [p for p in programs if p["type"] in EMPTY_RETURNS and not untestable(p)]
        skipped = {p["name"]: "%s: the kernel does not test-run it" % untestable(p)
                   for p in programs if p["type"] in EMPTY_RETURNS and untestable(p)}
        skipped.update((p["name"], untyped_reason(p)) for p in programs if p["type"] == _loader.UNSPEC)
        if not measured:
            raise CostError("%s has no XDP or tc program to measure; its programs: %s" % (path, listing))
        return measured, skipped
    missing = [name for name in wanted if name not in by_name]
    if missing:
        raise CostError("%s %s %s not in %s; its programs: %s" % (
            "programs" if len(missing) > 1 else "program", ", ".join(repr(name) for name in missing),
            "are" if len(missing) > 1 else "is", path, listing))
    untyped = [by_name[name] for name in wanted if by_name[name]["type"] == _loader.UNSPEC]
    if untyped:
        raise CostError("; ".join("program %s: %s" % (p["name"], untyped_reason(p)) for p in untyped))
    other = [by_name[name] for name in wanted if by_name[name]["type"] not in EMPTY_RETURNS]
    if other:
        raise CostError("%s %s %s: only XDP and tc (sched_cls, sched_act) programs are measured" % (
            "programs" if len(other) > 1 else "program",
            ", ".join("%s (%s)" % (p["name"], p["type"]) for p in other),
            "are not XDP or tc programs" if len(other) > 1 else "is not an XDP or tc program"))
    refused = [by_name[name] for name in wanted if untestable(by_name[name])]
    if refused:
        raise CostError("%s: the kernel does not test-run such programs (BPF_PROG_TEST_RUN refuses them), so "
                        "their cost cannot be measured" % "; ".join("%s is %s" % (p["name"], untestable(p))
                                                                    for p in refused))
    return [by_name[name] for name in wanted], {}


def load_programs(settings: Settings, stack: contextlib.ExitStack) -> tuple[list[dict], dict[str, str]]:
    """The chosen programs of the object, loaded in one load with the constants and their maps kept out of
    bpffs, each held (closed by `stack`) as `program`; and the programs left out."""
    _loader.require_object(settings.object)
    constants = _loader.resolve_constants(settings.constants)
    with _bpf.BpfObject(settings.object) as obj:
        programs = [dict(p, attach_type=obj.expected_attach_type(p["name"])) for p in obj.programs()]
        typed_by_hook(programs, settings.program_type)
        wanted = settings.programs or in_sections(programs, settings.sections, settings.object)
        chosen, skipped = choose(programs, wanted, settings.object)
        for prog in chosen:
            _loader.as_hook(obj, prog["name"], prog["type"])
        obj.only_load(*[p["name"] for p in chosen])
        obj.set_constants(constants)
        obj.clear_pin_paths()
        obj.load()
        for prog in chosen:
            prog["program"] = stack.enter_context(obj.program(prog["name"]))
    return chosen, skipped


def empty_program(prog_type: str) -> _bpf.Program:
    """The cheapest program of a hook: r0 = XDP_PASS or TC_ACT_OK; exit."""
    code = _bpf.insn(_bpf.BPF_MOV64_IMM, dst=0, imm=EMPTY_RETURNS[prog_type]) + _bpf.insn(_bpf.BPF_EXIT)
    return _bpf.Program.from_instructions(prog_type, EMPTY_NAMES[prog_type], code)


def timed_run(program: _bpf.Program, name: str, frame: bytes, repeat: int) -> tuple[int, int]:
    try:
        return program.test_run(frame, repeat=repeat)
    except _bpf.BpfError as exc:
        raise CostError("the kernel refused a test run of program %s with a %d-byte frame: %s"
                        % (name, len(frame), exc))


def measure(settings: Settings) -> dict:
    """The module's work: each program's ns per packet, its verdict, and the same of its hook's empty
    program, measured in turns (program, empty program) `runs` times."""
    began = time.monotonic()
    with contextlib.ExitStack() as stack:
        chosen, skipped = load_programs(settings, stack)
        empties = {}
        for prog_type in sorted({p["type"] for p in chosen}):
            empties[prog_type] = stack.enter_context(empty_program(prog_type))
        samples = {p["name"]: {"runs": [], "empty_runs": [], "retval": None} for p in chosen}
        for _round in range(settings.runs):
            for prog in chosen:
                sample = samples[prog["name"]]
                sample["retval"], ns = timed_run(prog["program"], prog["name"], settings.frame, settings.repeat)
                _retval, empty_ns = timed_run(empties[prog["type"]], EMPTY_NAMES[prog["type"]], settings.frame,
                                              settings.repeat)
                sample["empty_runs"].append(empty_ns)
                sample["runs"].append(ns)
        results = {}
        for prog in chosen:
            sample = samples[prog["name"]]
            info = prog["program"].info()
            results[prog["name"]] = report(prog["type"], info, sample["retval"], sample["runs"],
                                           sample["empty_runs"])
        empty = {prog_type: {"name": EMPTY_NAMES[prog_type], "id": program.info()["id"],
                             "verdict": verdict_name(prog_type, EMPTY_RETURNS[prog_type])}
                 for prog_type, program in empties.items()}
    return {
        "object": settings.object,
        "repeat": settings.repeat,
        "frame_size": len(settings.frame),
        "programs": results,
        "empty_programs": empty,
        "skipped": skipped,
        "seconds": round(time.monotonic() - began, 3),
    }


def report(prog_type: str, info: dict, retval: int, runs: list[int], empty_runs: list[int]) -> dict:
    """One program's figures: the medians of its runs and of its empty program's, and their difference."""
    ns, empty_ns = median(runs), median(empty_runs)
    return {
        "type": prog_type,
        "id": info["id"],
        "tag": info["tag"],
        "verdict": verdict_name(prog_type, retval),
        "retval": retval,
        "ns_per_packet": ns,
        "runs": runs,
        "empty_ns_per_packet": empty_ns,
        "empty_runs": empty_runs,
        "over_empty_ns": ns - empty_ns,
    }
