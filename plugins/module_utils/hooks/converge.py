# -*- coding: utf-8 -*-
# Copyright (c) ebpf.xdp contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The hook-agnostic converger: read the hook once, compare, act through its holder, report.

Private to the ebpf.xdp collection: the interface may change without notice.

The hook contract. A hook adapter (XdpHook in hooks/xdp.py, TcHook in hooks/tc.py)
derives from HookAdapter, whose abstract methods are the contract, and is
registered under its kind in hooks/adapters (register: ADAPTERS, every
section of ebpf.xdp.datapath that is a hook; its hook_dirs go to
_pins.HOOK_DIRS; an adapter its kind's from_params picks for some tasks,
named XDP's, with register_variant). It gives the converger:

    kind                            its kind of hook: "xdp", "tc" (datapath's section, a key of _pins.HOOK_DIRS)
    hook_dirs                       the interface's directories that hold its unnamed attachments
    from_params(params, ifindex, netns_key)
                                    the adapter for a task's (or a datapath entry's) options
    name, label, prog_type, pins    pin directory component, name in messages,
                                    program type it runs, its _pins.PinDir
    ifname, ifindex                 the interface it sits on
    observe() -> Observed           what is attached now (see hooks.observed)
    refuse(observed)                raise for states the collection does not manage
    identity() -> dict              the hook's part of "same program" (requested mode, ...)
    in_place(observed) -> bool      can a new program take the old one's place directly
    movable(observed) -> bool       can a new program go to its place beside the old one, which then goes
                                    (tc: ours on tcx, on the wrong side of its before/after); default no
                                    (settled(): and nothing else about it changes; defaults to in_place)
    planned_placement(observed)     the placement (XDP: mode, tc: method) a new program would get
    attach(prog) -> Attachment      put a program on the empty hook (a pinned link where possible)
    replace(observed, prog)         swap a program that no link holds, atomically
    detach(observed)                take the observed program off, however it is held
    restore(observed, old_prog)     put a detached program back as it was held

and, for its section of ebpf.xdp.datapath and the task's options (defaults
fit a hook that has an interface and an optional attachment name):

    module                          its program module (xdp_program), whose options its entries take;
                                    needs_pyroute2: whether that module needs pyroute2 (tc: yes)
    check_params(params)            what the argument spec cannot say about them (raise HookError)
    entry_key(params), describe(key)
                                    what one entry is the only one to manage, in a tuple and in words
    entry_of(record, netns, ifname, directory)
                                    an attachment's record as the entry that leaves it as it is
    placed_next_to(params)          the attachments of ours on the same hook an entry is placed beside
    rollback_options                record key -> task option a rollback (revision: previous) takes back
    widest_record                   the record keys of its placement at their widest (the size check)

HookAdapter supplies what is the same for every hook: swapping a program
held by a bpf_link (bpf_link_update) and holding the old program during a
switch. The decisions are pure functions (plan_*), so they and the
converger can be tested against a fake adapter without a kernel; the
contract itself is tested against every adapter (unit: their shape and the
fake's; integration: each registered adapter on the real kernel).
"""

from __future__ import annotations

import abc
import contextlib
import dataclasses
import functools
import os
import shutil
import signal
import time
from typing import Callable

from ansible_collections.ebpf.xdp.plugins.module_utils.host import netns as _netns, session as _session
from ansible_collections.ebpf.xdp.plugins.module_utils.host.journal import Journal
from ansible_collections.ebpf.xdp.plugins.module_utils.bpf import (
    backend as _backend, libbpf as _bpf, loader as _loader, pins as _pins, record as _record)
from ansible_collections.ebpf.xdp.plugins.module_utils.hooks import observed as _observed, revisions as _revisions
from ansible_collections.ebpf.xdp.plugins.module_utils._errors import EbpfXdpError
# The one reach above the hooks layer: the pinned maps' layouts come from maps/btf's walk (issue 39 moves the
# comparison into the host state it reads once per task).
from ansible_collections.ebpf.xdp.plugins.module_utils.maps import migration as _migration
from ansible_collections.ebpf.xdp.plugins.module_utils.hooks.observed import (
    Attachment, HELD_BY_DISPATCHER, HELD_BY_LINK, HELD_BY_NETLINK, HookError, Observed)

# What to do; see plan_absent, plan_present and plan_swap.
NOTHING = "nothing"
CLEAR_STALE = "clear stale pins"
DETACH = "detach"
DETACH_FOREIGN = "detach foreign"
REFUSE_FOREIGN = "refuse foreign"
LOAD = "load"
RECORD_ONLY = "rewrite the record"
KEEP_ON_HOOK = "record the program on the hook"
ATTACH = "attach"
UPDATE_LINK = "update link"
REPLACE = "replace in place"
REATTACH = "detach, attach, restore on failure"
MOVE = "attach at the new place, then detach the old"

# Test-only: the kill points of a run (see fault_point), named in this environment variable.
FAULT_POINT_ENV = "EBPF_XDP_FAULT_POINT"
PAUSE_SECONDS = 3.0
# Test-only: with a pause, the file whose creation ends it (instead of PAUSE_SECONDS).
FAULT_RESUME_ENV = "EBPF_XDP_FAULT_RESUME"


def fault_point(name: str) -> None:
    """Test-only: die here (SIGKILL, no cleanup) when EBPF_XDP_FAULT_POINT names this point, raise an error
    (the failure path runs) when it says `raise:` and the point, or wait PAUSE_SECONDS with `pause:`.

    A crash or an error at each step of an attach or an upgrade must leave
    state the next run converges (tests/integration/test_faults.py). Killing
    from outside at the right microsecond is not reproducible, so the steps
    name themselves; an unset variable costs one dictionary lookup.
    """
    wanted = os.environ.get(FAULT_POINT_ENV)
    if not wanted:
        return
    for one in wanted.split(","):  # several points: a pause at one, a kill at a later one
        if one == name:
            os.kill(os.getpid(), signal.SIGKILL)
        if one == "raise:" + name:
            raise HookError("fault injected at %s" % name)
        if one == "pause:" + name:
            pause()  # another run meanwhile finds this one holding its locks


def pause() -> None:
    """PAUSE_SECONDS, or until the file FAULT_RESUME_ENV names exists (a test's own moment, at most a minute)."""
    resume = os.environ.get(FAULT_RESUME_ENV)
    if not resume:
        time.sleep(PAUSE_SECONDS)
        return
    deadline = time.monotonic() + 60
    while not os.path.exists(resume) and time.monotonic() < deadline:
        time.sleep(0.05)


# The largest placement a record can get, to check its size before the swap (with the hook's widest_record).
WIDEST_PLACEMENT = _record.stored(holder="x" * 16, placement="x" * 16, link_id=2 ** 32)


@dataclasses.dataclass
class Desired:
    """What the task asks of a hook, apart from the hook's own options (mode, direction, ...)."""

    state: str
    object: str | None = None
    program: str | None = None
    # The program by its SEC() name instead (iproute2's `sec`): the one program in that section.
    section: str | None = None
    constants: dict = dataclasses.field(default_factory=dict)
    force: bool = False
    keep_maps: bool = False
    # The map set (see _pins) the program's maps are pinned in, instead of the attachment's own maps/.
    shared_maps: str | None = None
    # sha256:<hex> the object must have (the task's checksum); checked before anything is loaded.
    checksum: str | None = None
    # backend bcc: a bcc-dialect source compiled at load time (see bpf/bcc) in place of the object (bpf/backend).
    backend: str = _backend.LIBBPF
    source: str | None = None
    cflags: list = dataclasses.field(default_factory=list)
    kernel_headers: str | None = None
    # revision: previous puts back the revision kept before the current one (see _revisions): object,
    # program, constants and shared_maps are then that revision's, and object_source is its copy in the
    # object store, read instead of the object (the file at its path may have changed since).
    revision: str = "current"
    object_store: str | None = None
    object_source: str | None = None
    # What becomes of a pinned map the new object lays out differently (see _migration).
    map_migration: str = _migration.FIELDS
    # map name -> {old field: new field}, for map_migration: fields.
    map_rename: dict = dataclasses.field(default_factory=dict)

    @classmethod
    def from_params(cls, params: dict) -> Desired:
        return cls(state=params["state"], object=params.get("object"), program=params.get("program"),
                   section=params.get("section"), constants=params.get("constants") or {}, force=params.get("force", False),
                   keep_maps=params.get("keep_maps", False), shared_maps=params.get("shared_maps"),
                   checksum=params.get("checksum"), backend=params.get("backend") or "libbpf",
                   source=params.get("source"), cflags=params.get("cflags") or [],
                   kernel_headers=params.get("kernel_headers"), revision=params.get("revision") or _revisions.CURRENT,
                   object_store=params.get("object_store"), object_source=params.get("object_source"),
                   map_migration=params.get("map_migration") or _migration.FIELDS,
                   map_rename=params.get("map_rename") or {})

    @property
    def rollback(self) -> bool:
        return self.revision == _revisions.PREVIOUS

    @property
    def loads_with(self):
        """The backend the task names (bpf/backend): what the program comes from and what loads it."""
        return _backend.select_backend(self.backend)

    @property
    def path(self) -> str | None:
        """The file the program comes from: the object (a revision's: its copy in the store), or the bcc source."""
        return self.loads_with.path(self)

    def require_file(self) -> None:
        self.loads_with.require(self.path)

    def loader(self) -> Callable:
        """What loads the program: libbpf from the object, or bcc from the source (same signature)."""
        return self.loads_with.loader(self)

    def identity(self, object_sha256: str, resolved_constants: dict) -> dict:
        return self.loads_with.identity(self, object_sha256, resolved_constants)


# The options an attachment's entry (its adapter's entry_of) leaves out, as the argument specs default them: what a
# map set's migration builds the hook of each other attachment of the set with (tests/unit asserts they agree).
MATE_DEFAULTS = {"mode": "auto", "name": None, "priority": None, "chain_call_actions": None, "direction": "ingress",
                 "method": "auto", "handle": None, "verdict": "drop", "before": None, "after": None}

# Seconds a run with a map set waits for each other attachment's interface lock (it holds the set's already, and
# takes them by name: a wait that long is a run stuck, named in the error).
MATE_LOCK_SECONDS = 30.0


@dataclasses.dataclass
class SetMate:
    """Another attachment of a map set whose layout an upgrade changes: it moves to the new maps with the set, its
    own program (its record's program, section and constants, on its own hook) loaded from the upgrade's object."""

    hook: HookAdapter
    observed: Observed
    desired: Desired
    identity: dict
    action: str
    loaded: _loader.Loaded | None = None
    record: dict | None = None
    way_back: WayBack | None = None
    # The program on the hook when the hook loaded a copy of its own (libxdp's dispatcher), until it is pinned.
    on_hook: _bpf.Program | None = None
    # Its entry as it is (the options that leave it as it is, its adapter's entry_of): what holds it for a
    # datapath put-back (hold).
    entry: dict | None = None

    def close(self) -> None:
        for held in (self.way_back, self.on_hook):
            if held is not None:
                held.close()
        self.way_back = self.on_hook = None

    def report(self) -> dict:
        out = {"interface": self.hook.ifname, "hook": self.hook.name, "id_before": self.observed.prog_id}
        if self.record is not None:
            out["id"] = self.record["prog_id"]
        return out


# ---------------------------------------------------------------- decisions


def plan_absent(observed: Observed, force: bool, stale_pins: bool) -> str:
    if observed.attached and not observed.owned:
        return DETACH_FOREIGN if force else (CLEAR_STALE if stale_pins else NOTHING)
    if observed.attached:
        return DETACH
    return CLEAR_STALE if stale_pins else NOTHING


def plan_present(observed: Observed, force: bool, matches: bool) -> str:
    """Before loading: nothing to do, a foreign program to refuse, or load and compare."""
    if matches:
        return NOTHING
    if observed.attached and not observed.owned and not force:
        return REFUSE_FOREIGN
    return LOAD


def plan_swap(observed: Observed, in_place: bool, same_program: bool, movable: bool = False) -> str:
    """After loading: how the new program takes the hook. movable: the hook can hold it beside the old one, at its
    new place, before the old one goes (never without the program, for a moment running it twice)."""
    if same_program:
        return RECORD_ONLY
    if not observed.attached:
        return ATTACH
    if in_place and observed.holder == HELD_BY_LINK and observed.owned:
        return UPDATE_LINK
    if in_place and observed.holder in (HELD_BY_NETLINK, HELD_BY_DISPATCHER):
        return REPLACE
    if movable and observed.holder == HELD_BY_LINK and observed.owned:
        return MOVE
    return REATTACH


# ---------------------------------------------------------------- the converger


class HookAdapter(abc.ABC):
    """What every hook shares; adapters add the hook-specific part listed in the module docstring."""

    kind: str
    name: str
    label: str
    prog_type: str
    # What the placement is called (XDP: a mode, tc: a method), and the result keys beyond
    # id, name, tag, attach and link_id (see _observed.report).
    placement_key = "mode"
    report_keys: tuple[str, ...] = ("mode",)
    # The program type to load the program as, when not its own (a classifier as a tc action).
    load_as: str | None = None
    # Whether its program module needs pyroute2 (tc's filters and qdiscs: netlink through pyroute2).
    needs_pyroute2 = True
    # The interface's directories that hold its unnamed attachments (see _pins.hook_dir).
    hook_dirs: tuple[str, ...] = ()
    # Its program module, whose options a datapath entry of its section takes.
    module: str
    # Record key -> task option: what a rollback (revision: previous) takes from the revision it puts back.
    rollback_options: dict[str, str] = {}
    # The record keys its placement adds, at their widest (the record's size is checked before the swap).
    widest_record: dict = {}

    # ------------------------------------------------------------ the task's options (datapath's section)

    @classmethod
    def check_params(cls, params: dict) -> None:
        """Raise HookError for what the argument spec cannot say about a task's options."""

    @classmethod
    def entry_key(cls, params: dict) -> tuple:
        """What one task (or datapath entry) is the only one to manage: its hook, and its attachment there."""
        return (params["netns"], params["interface"], params.get("name"))

    @classmethod
    def describe(cls, key: tuple) -> str:
        """An entry_key in words (without the namespace)."""
        return "the %s hook of %s" % (cls.label, key[1]) + (" (attachment %s)" % key[-1] if key[-1] else "")

    @classmethod
    def entry_of(cls, record: dict, netns: str | None, ifname: str, directory: str) -> dict:
        """An attachment's record (in its directory) as the task options that leave it as it is: what every
        hook has; adapters add their placement."""
        # A program named by its function or by its section, as its task named it (the options exclude each other).
        named = {"section": record["section"]} if record.get("section") else {"program": record.get("program")}
        entry = dict({"interface": ifname, "netns": netns, "object": record.get("object")}, **named,
                     constants=record.get("constants") or {})
        if record.get("shared_maps"):
            entry["shared_maps"] = record["shared_maps"]
        return entry

    @classmethod
    def placed_next_to(cls, params: dict) -> list[str]:  # pylint: disable=unused-argument
        """The attachments of ours on the same hook this task's program is placed beside (tc's before/after)."""
        return []

    @classmethod
    def unplaced(cls, params: dict) -> dict:
        """The task's options without its place beside another attachment (check mode, before that one exists)."""
        return params

    @classmethod
    @abc.abstractmethod
    def from_params(cls, params: dict, ifindex: int, netns_key: str) -> HookAdapter:
        """The adapter for a task's options, on the interface with ifindex in the namespace netns_key."""

    @abc.abstractmethod
    def observe(self) -> Observed:
        """What the hook holds now, with our record when it describes it."""

    @abc.abstractmethod
    def refuse(self, observed: Observed) -> None:
        """Raise HookError for a state the collection does not manage."""

    @abc.abstractmethod
    def identity(self) -> dict:
        """The hook's part of "same program" (requested mode, method, direction, ...), kept in the record."""

    @abc.abstractmethod
    def in_place(self, observed: Observed) -> bool:
        """Whether a new program can take the observed one's place directly."""

    @abc.abstractmethod
    def planned_placement(self, observed: Observed) -> str:
        """The placement a new program would get (check mode's prediction)."""

    @abc.abstractmethod
    def attach(self, prog: _bpf.Program) -> Attachment:
        """Put a program on the empty hook, a pinned link where the hook has links."""

    @abc.abstractmethod
    def replace(self, observed: Observed, prog: _bpf.Program) -> Attachment:
        """Swap a program that no link holds for prog, atomically."""

    @abc.abstractmethod
    def detach(self, observed: Observed) -> None:
        """Take the observed program off, however it is held."""

    @abc.abstractmethod
    def restore(self, observed: Observed, old: _bpf.Program) -> None:
        """Put a program that a failed switch detached back, as it was held."""

    def settled(self, observed: Observed) -> bool:
        """The program sits where and how the task wants it: a same program needs no swap."""
        return self.in_place(observed)

    def movable(self, observed: Observed) -> bool:  # pylint: disable=unused-argument
        """Whether a new program can be attached at its place while the observed one still runs, which is then
        detached (see MOVE): only where the hook holds several programs."""
        return False

    def switch_reason(self, observed: Observed) -> str:
        """Why a new program cannot take the old one's place directly (for the warning)."""
        return "from a foreign link" if self.in_place(observed) else self.placement_key

    def cleanup(self) -> None:
        """After a program was removed for good (state: absent): what the hook no longer needs."""

    def prepare(self, loaded: _loader.Loaded) -> None:
        """Before the swap: what the hook needs of the load besides the program (a hook that loads its own copy)."""

    def notes(self) -> list[str]:
        """Warnings of the hook's own about the swap it just made."""
        return []

    def predict_refusal(self) -> None:
        """Check mode: raise what the kernel would refuse at attach time that no read of the hook shows."""

    def update_link(self, observed: Observed, prog: _bpf.Program) -> Attachment:
        """Swap the program of the link that holds it, atomically; the link (and its id) stays."""
        with _bpf.Link.from_id(observed.link_id) as link:
            link.update(prog)
        return Attachment(HELD_BY_LINK, observed.placement, observed.link_id, dict(observed.extra))

    def pin_link(self, link: _bpf.Link) -> int:
        """Keep a new link (it outlives the module through its pin) and return its id."""
        with link:
            self.pins.replace_pin(link, self.pins.link_path)
            return link.info()["id"]

    def detach_link(self, observed: Observed) -> None:
        """Detach the link that holds the observed program: ours by its pin, a foreign one by its id."""
        if observed.owned and self.pins.has_link():
            self.pins.detach_link()
        else:
            with _bpf.Link.from_id(observed.link_id) as link:
                link.detach()

    @staticmethod
    def hold(prog_id: int) -> _bpf.Program:
        """Keep a program alive (and at hand to restore) while it is off its hook."""
        return _bpf.Program.from_id(prog_id)


# kind -> adapter class, filled by register (hooks/adapters registers every one), in that order: datapath's hook
# sections.
ADAPTERS: dict[str, type[HookAdapter]] = {}
# Every adapter class the converger may drive: each kind's, and the variants its from_params picks (named XDP).
EVERY_ADAPTER: list[type[HookAdapter]] = []


def register(cls: type[HookAdapter]) -> type[HookAdapter]:
    """Make an adapter the one for its kind of hook, with its attachment directories (_pins.HOOK_DIRS)."""
    if cls.kind in ADAPTERS and ADAPTERS[cls.kind] is not cls:
        raise ValueError("hook kind %r has an adapter already (%s)" % (cls.kind, ADAPTERS[cls.kind].__name__))
    _pins.add_hook_dirs(cls.kind, cls.hook_dirs)
    ADAPTERS[cls.kind] = cls
    return register_variant(cls)


def register_variant(cls: type[HookAdapter]) -> type[HookAdapter]:
    """An adapter that its kind's from_params returns for some tasks (named XDP): in the contract's tests too."""
    if cls not in EVERY_ADAPTER:
        EVERY_ADAPTER.append(cls)
    return cls


class Converger:
    """Converges one hook (an adapter, see the module docstring) to a Desired state."""

    def __init__(self, hook, desired: Desired, check_mode: bool, load=_loader.load, netns_key: str | None = None,
                 before_change: Callable[[], None] | None = None,
                 before_mates_change: Callable[[list[tuple[str, dict]]], None] | None = None,
                 keep_carry_back: Callable[[list[_migration.CarryBack]], None] | None = None):
        self.hook = hook
        # Given, at a migrating upgrade's point of no return, each migrated map's way to carry what the new programs
        # count back to the old map (its old and new map held open): datapath keeps them for its put-back, which
        # puts the old programs and maps back after this upgrade stood. Else they are closed at once.
        self.keep_carry_back = keep_carry_back
        # Called with the map set's other attachments (kind, entry) a migrating upgrade moves, before it changes
        # any of them (datapath holds each for its put-back).
        self.before_mates_change = before_mates_change or (lambda mates: None)
        # Called once, right before the run's first change to the hook or its pins (datapath holds the hook as it
        # was then, for a put-back: a run that changes nothing holds nothing).
        self.before_change = before_change or (lambda: None)
        self.pins = hook.pins
        self.desired = desired
        self.check_mode = check_mode
        self.load = load
        self.netns_key = netns_key
        self.warnings: list[str] = []
        # The object's bytes as read and checked once (see _present), loaded and kept as they are.
        self.object_data: bytes | None = None
        # Seconds the hook was left without a program by this run (a detach before an attach), else None.
        self.interrupted: float | None = None
        # Map sets this run left, to release once the caller dropped its locks (see release_sets): the
        # converger holds its new set's lock, and taking the old set's lock under it could deadlock with a
        # run moving the other way.
        self.released_sets: list[str] = []
        # Each map of the program loaded (or that would be) against its pin, for the result (see _migration).
        self.map_reviews: list[_migration.Review] = []
        # The other attachments of a map set this upgrade migrates (see SetMate, _set_mates).
        self.mates: list[SetMate] = []

    def maps_dir(self, shared_maps: str | None) -> str:
        """Where the maps are pinned: the attachment's maps/, or the shared map set it names."""
        if shared_maps:
            return _pins.shared_maps_dir(self.pins.pin_root, self.netns_key, shared_maps)
        return self.pins.maps_dir

    def release_maps(self, record: dict | None, now: str | None) -> None:
        """After the program of `record` left its maps for the set `now` (None: its own maps/, or removed):
        drop the attachment's own maps/ (unless keep_maps), or note the map set it left for release_sets."""
        if self.desired.keep_maps or not record or record.get("shared_maps") == now:
            return
        if record.get("shared_maps"):
            self.released_sets.append(record["shared_maps"])
        elif os.path.isdir(self.pins.maps_dir):
            shutil.rmtree(self.pins.maps_dir)

    def release_sets(self) -> None:
        """Remove the map sets this run left that no attachment names any more. Call it without holding
        locks: each set is removed under its own lock. A set that cannot be removed is a warning, since the
        hook has already changed."""
        for name in self.released_sets:
            try:
                _pins.release_shared_maps(self.pins.pin_root, self.netns_key, name)
            except (OSError, _pins.PinError) as exc:
                self.warnings.append("map set %s is no longer used but could not be removed: %s" % (name, exc))
        self.released_sets = []

    def run(self) -> dict:
        observed = self.adopt(self.hook.observe())
        self.hook.refuse(observed)
        before = self.state(observed)
        if self.desired.state == "absent":
            changed = self._absent(observed)
            # Clearing stale pins of ours leaves someone else's program where it is.
            left_foreign = observed.attached and not observed.owned and not self.desired.force
            after = {"attached": False} if changed and not left_foreign else before
        else:
            changed, after = self._present(observed, before)
        return self._result(changed, before, after)

    def adopt(self, observed: Observed) -> Observed:
        """Our program without a record describing it, left by a run killed between the attach and the record.

        It is ours when the link pinned in our directory holds it, or when it
        uses a map pinned in the attachment's own maps/ or in the map set its
        record names (only a load through these pins shares them). It is then taken as ours with what the record
        knew (a tag that cannot match), so the next change goes through the
        atomic path as for any program of ours, instead of being refused as foreign.
        """
        if not observed.attached or observed.owned:
            return observed
        record = self.pins.record.read() or {}
        map_set = self.maps_dir(record["shared_maps"]) if record.get("shared_maps") else None
        if not self.pins.holds(observed.prog_id, observed.map_ids, map_set):
            return observed
        self.warnings.append("%s %s program id %d is ours but its record was not written (an interrupted run); "
                             "taken back" % (self.hook.ifname, self.hook.label, observed.prog_id))
        record = dict(record, **_record.stored(prog_id=observed.prog_id, holder=observed.holder,
                                               placement=observed.placement), tag=None, **observed.extra)
        return dataclasses.replace(observed, record=record)

    @staticmethod
    def state(observed: Observed) -> dict:
        """report() plus, for our programs, the pinned maps."""
        state = _observed.report(observed)
        if observed.owned:
            state["maps"] = observed.record.get("maps", {})
        return state

    def _result(self, changed: bool, before: dict, after: dict) -> dict:
        result = {"changed": changed, "interface": self.hook.ifname, "ifindex": self.hook.ifindex,
                  "pin_dir": self.pins.directory, "diff": {"before": before, "after": after}}
        result.update((k, after.get(k)) for k in ("id", "name", "tag", "attach", "link_id") + self.hook.report_keys)
        result.update((k, after.get(k)) for k in ("revision", "previous_revision"))
        result["attached"] = after.get("attached", False)
        result["maps"] = after.get("maps", {})
        result["map_migration"] = [review.report() for review in self.map_reviews]
        result["shared_maps_moved"] = [mate.report() for mate in self.mates]
        if changed and self.map_reviews:
            # --diff shows what becomes of each pinned map next to the program that replaces the old one.
            result["diff"]["after"] = dict(after, map_migration=result["map_migration"])
        result["interrupted"] = self.interrupted is not None
        return result

    # ------------------------------------------------------------ absent

    def clear_gone(self) -> dict:
        """state: absent on a deleted interface: remove our pins for it, if any (see absent_without_interface)."""
        stale = self.pins.exists()
        if stale and not self.check_mode:
            self.before_change()
            record = self.pins.record.read()
            self.hook.cleanup()  # tc: the record of a clsact that went with the interface
            self.pins.remove(keep_maps=self.desired.keep_maps)
            if record and record.get("shared_maps"):
                self.release_maps(record, None)
        if stale:
            self.warnings.append("%s does not exist (any more): its %s program went with it; ebpf.xdp's pins for it "
                                 "%s removed" % (self.hook.ifname, self.hook.label,
                                                 "would be" if self.check_mode else "were"))
        else:
            # Not an error (a deleted interface has nothing left to remove), but a misspelt name must not pass unseen.
            self.warnings.append("%s does not exist in this network namespace; nothing of ebpf.xdp's was there to "
                                 "remove" % self.hook.ifname)
        return self._result(stale, {"attached": False}, {"attached": False})

    def _absent(self, observed: Observed) -> bool:
        stale = self.pins.exists() and not (self.desired.keep_maps and not self.pins.record.exists())
        action = plan_absent(observed, self.desired.force, stale)
        if observed.attached and not observed.owned and not self.desired.force:
            self.warnings.append("%s program id %d on %s is not managed by ebpf.xdp; left in place "
                                 "(force: true removes it)" % (self.hook.label, observed.prog_id, self.hook.ifname))
        if action == NOTHING or self.check_mode:
            return action != NOTHING
        self.before_change()
        if action in (DETACH, DETACH_FOREIGN):
            self.hook.detach(observed)
            self.hook.cleanup()
        record = self.pins.record.read() if self.pins.exists() else None
        if self.pins.exists():
            self.pins.remove(keep_maps=self.desired.keep_maps)
        self._objects().release(record, None)
        if record and record.get("shared_maps"):
            self.release_maps(record, None)
        return True

    # ------------------------------------------------------------ present

    def _present(self, observed: Observed, before: dict) -> tuple[bool, dict]:
        path = self.desired.path
        if self.desired.checksum:
            _loader.parse_checksum(self.desired.checksum)  # a malformed one fails even before the object exists
        if self.check_mode and not os.path.isfile(path):
            # An earlier task of the same run (a compile, a copy) would have created it.
            self.warnings.append("object %s does not exist yet; it would be attached once it does" % path)
            return True, {"attached": True, "object": path, self.hook.placement_key: self.hook.planned_placement(observed)}
        self.desired.require_file()
        # The object's bytes are read and hashed once, and those very bytes are what is loaded (and kept in the
        # object store): the file changing after the check changes nothing. A revision put back from the store
        # must hash to the digest it is kept as.
        if self.desired.object_source:
            digest = os.path.basename(path)[:-len(".o")]
            self.object_data = _revisions.ObjectStore(os.path.dirname(path)).verified(
                digest, "the previous revision of %s" % self.hook.label)
        else:
            self.object_data, digest = self.desired.loads_with.read(path)
        # Before the kernel sees anything of it, in check mode too, and even when the program attached now
        # came from this very file: the digest in the task is what the operator vouched for.
        _loader.verify_checksum(path, digest, self.desired.checksum)
        resolved = _loader.resolve_constants(self.desired.constants)
        identity = dict(self.desired.identity(digest, resolved), **self.hook.identity())
        if not self.check_mode:
            observed = self._recover_maps(observed)
        action = plan_present(observed, self.desired.force, self._matches(observed, identity))
        if action == NOTHING:
            return False, before
        if action == REFUSE_FOREIGN:
            raise HookError(
                "%s already has %s program %r (id %d, tag %s, %s %s) that ebpf.xdp did not attach; "
                "it is left in place. Set force: true to replace it"
                % (self.hook.ifname, self.hook.label, observed.name, observed.prog_id, observed.tag,
                   self.hook.placement_key, observed.placement))
        if self.desired.object_store and identity.get("object_sha256"):
            # The store this change will keep the object in: refused before anything changes, in check mode too.
            _revisions.ObjectStore(self.desired.object_store).check(make=False)
        if self.check_mode:
            return self._preview(observed, identity, before)
        return self._apply(observed, identity, before)

    def _matches(self, observed: Observed, identity: dict) -> bool:
        record = observed.record
        return record is not None and all(record.get(k) == v for k, v in identity.items()) \
            and self.hook.in_place(observed)

    def _same_program(self, observed: Observed, loaded: _loader.Loaded) -> bool:
        """The kernel would run the same thing: same instructions, same data, same placement."""
        record = observed.record
        return bool(record) and record.get("tag") == loaded.info["tag"] \
            and record.get("data_sha256") == loaded.data_sha256 and self.hook.settled(observed) \
            and record.get("shared_maps") == self.desired.shared_maps \
            and not any(r.outcome in (_migration.RESET_DONE, _migration.MIGRATED)
                        for r in self.map_reviews)  # the tag omits the maps

    def _twin_on_hook(self, observed: Observed, loaded: _loader.Loaded) -> bool:
        """A run stopped after its swap and before its record (killed): whether the program on the hook, which
        the record does not name, is the one this run has just loaded again: same instructions (tag), same maps
        (the pinned ones by id, its data sections by content) and in place. It is then pinned and recorded as it
        is, not swapped for its twin."""
        stored = self.pins.record.read()
        if not observed.attached or not stored or stored.get("prog_id") == observed.prog_id \
                or not self.hook.in_place(observed) or not self.hook.settled(observed):
            return False
        try:
            on_hook = _bpf.program_info(observed.prog_id)
            return on_hook["tag"] == loaded.info["tag"] and \
                _data_maps(on_hook["map_ids"]) == _data_maps(loaded.info["map_ids"])
        except _bpf.BpfError:
            return False  # gone meanwhile: the swap decides

    def _objects(self) -> _revisions.Keeper:
        """The object store for this hook's record (none without object_store: fakes in unit tests)."""
        owner = self.pins.record.path if self.desired.object_store else None
        return _revisions.Keeper(self.desired.object_store, owner)

    def _load(self, identity: dict, maps_dir: str | None = None, mate: SetMate | None = None) -> _loader.Loaded:
        """The task's program, or a map set mate's own from the same object (the bytes read once)."""
        d, hook = (mate.desired, mate.hook) if mate else (self.desired, self.hook)
        verified = {} if self.object_data is None else {"data": self.object_data}
        return self.load(self.desired.path, d.program, hook.prog_type, identity["resolved_constants"],
                         maps_dir=maps_dir, load_as=hook.load_as, section=d.section, **verified)

    def _recover_maps(self, observed: Observed) -> Observed:
        """Maps a migrating upgrade killed midway left set aside, put in order by every attachment of them (see
        _migration.Recovery): this one's own maps/ by its program; a map set's by every attachment's. Where a
        set's attachments were stopped half moved, those on the new maps go back to the program pinned for
        them (the old one: their pins and records change only once every attachment is on the new maps), so
        that whichever attachment's task runs next, the set ends on one set of maps. Returns the hook as it
        is after that."""
        found = [(maps_dir, shared) for shared, maps_dir in sorted(
            {(None, self.maps_dir(None)), (self.desired.shared_maps, self.maps_dir(self.desired.shared_maps))},
            key=lambda pair: pair[1]) if _migration.set_aside(maps_dir)]
        if not found:
            return observed
        self.before_change()
        moved_self = False
        for maps_dir, shared in found:
            recovery = _migration.Recovery(maps_dir, self.desired.map_rename)
            users = [(self.hook, observed)] + (self._set_users(shared) if shared else [])
            in_use = [(hook, seen, _maps_in_use(seen)) for hook, seen in users]
            on_new = [(hook, seen) for hook, seen, ids in in_use if recovery.uses_new(ids)]
            half_moved = any(recovery.uses_old(ids) for _hook, _seen, ids in in_use)
            # Every attachment moved, but none pinned or recorded yet and the gains not added: back too, so that
            # every record describes the program on its hook (the task that runs migrates the set whole again).
            unpinned = recovery.copied() and all(self._pinned_on_old(hook, recovery) for hook, _seen in on_new)
            if on_new and (half_moved or unpinned):
                for hook, seen in on_new:
                    self._back_to_pinned(hook, seen, recovery)
                    moved_self = moved_self or hook is self.hook
                moved = sorted("%s's %s program" % (hook.ifname, hook.label) for hook, _seen in on_new)
                self.warnings.extend(recovery.back(moved))
            elif on_new:
                self.warnings.extend(recovery.forward())
            else:
                self.warnings.extend(recovery.back())
        return self.adopt(self.hook.observe()) if moved_self else observed

    def _other_attachments(self, shared: str):
        """(directory, interface, hook directory, hook kind) of each of the map set's attachments but this one."""
        # Every kind of hook registered (a program module imports its own adapter only): a mate may be another kind.
        # pylint: disable-next=import-outside-toplevel,unused-import,cyclic-import
        from ansible_collections.ebpf.xdp.plugins.module_utils.hooks import adapters  # noqa: F401
        for directory in _pins.shared_maps_users(self.pins.pin_root, self.netns_key, shared):
            if directory != self.pins.directory:
                hook_dir = os.path.basename(directory)
                yield directory, os.path.basename(os.path.dirname(directory)), hook_dir, _pins.hook_kind(hook_dir)

    def _set_users(self, shared: str) -> list[tuple[HookAdapter, Observed]]:
        """The map set's other attachments (by their records), each with what its hook holds now; those whose
        hook cannot be read (an interface gone, a kind this run does not manage) hold no map."""
        users = []
        for directory, ifname, hook_dir, kind in self._other_attachments(shared):
            record = _pins.Record(os.path.join(directory, "owner")).read()
            if kind not in ADAPTERS or not record:
                continue
            params = dict(MATE_DEFAULTS, **ADAPTERS[kind].entry_of(record, None, ifname, hook_dir),
                          pin_root=self.pins.pin_root, state="present")
            try:
                hook = ADAPTERS[kind].from_params(params, _netns.ifindex(ifname), self.netns_key)
            except _netns.NotFoundError:
                continue
            users.append((hook, hook.observe()))
        return users

    @staticmethod
    def _pinned_on_old(hook: HookAdapter, recovery: _migration.Recovery) -> bool:
        """Whether the program pinned for the attachment is on the old maps (its pins not yet replaced)."""
        try:
            with _bpf.Program.from_pin(hook.pins.prog_path) as pinned:
                return recovery.uses_old(pinned.info()["map_ids"])
        except _bpf.BpfError:
            return False

    def _back_to_pinned(self, hook: HookAdapter, seen: Observed, recovery: _migration.Recovery) -> None:
        """An attachment a stopped migration of its maps had moved to the new maps: the program still pinned for
        it (its old one, on the old maps) swapped back in, atomically, as the swap was made."""
        with _bpf.Program.from_pin(hook.pins.prog_path) as old:
            if not recovery.uses_old(old.info()["map_ids"]):
                raise HookError(
                    "%s's %s program (id %d) uses the new maps of a migration that stopped before every attachment of "
                    "%s had moved, and the program pinned for it (%s) is not on the old maps; nothing was changed. "
                    "Remove the attachment (state: absent) and attach it again" % (
                        hook.ifname, hook.label, seen.prog_id, recovery.maps_dir, hook.pins.prog_path))
            if seen.holder == HELD_BY_LINK:
                hook.update_link(seen, old)
            else:
                back = hook.replace(seen, old)
                if back.program is not None:
                    back.program.close()

    def _review_maps(self) -> _migration.Reset:
        """Compare the object's maps with those pinned where it will pin them: refuse (before anything changes)
        what map_migration does not allow, and return the pins a reset sets aside. bcc's tables are its own."""
        self.map_reviews = []
        maps_dir = self.maps_dir(self.desired.shared_maps)
        if not self.desired.loads_with.reviews_maps or not os.path.isdir(maps_dir) or not os.listdir(maps_dir):
            return _migration.Reset([])
        self.map_reviews = _migration.review(self.desired.path, maps_dir, self.desired.map_migration,
                                             self.object_data, self.desired.map_rename)
        message = _migration.refusal(self.desired.path, maps_dir, self.map_reviews)
        if message:
            raise _migration.MigrationError(message)
        return _migration.Reset(self.map_reviews)

    def _drop_mates(self) -> None:
        """After a failed upgrade put the set's other attachments back: their held programs and pins are closed
        here, since the result names none of them (a datapath task goes on to its next entries)."""
        for mate in self.mates:
            mate.close()
        self.mates = []

    def _set_mates(self, identity: dict, locks: contextlib.ExitStack | None) -> list[SetMate]:
        """The other attachments of the map set whose layout this upgrade changes: each moves to the new maps with
        it, its own program loaded from the same object (a rollback: each puts back its previous revision, which
        must be that object). Refused, before anything changes, when one cannot: another object, not on its hook
        as its record says, or a hook it cannot be swapped on atomically. With locks, each one's interface is
        locked first (the set's lock is held already)."""
        shared, digest = self.desired.shared_maps, identity["object_sha256"]
        # The object this attachment's program came from: the set's attachments that ran it move with it.
        old_digest = (self.pins.record.read() or {}).get("object_sha256")
        mates = []
        for directory, ifname, hook_dir, kind in self._other_attachments(shared):
            where = "%s's attachment %s" % (ifname, hook_dir)

            def refuse(why: str) -> HookError:
                return HookError(
                    "the maps of map set %s change layout, so every attachment of the set moves to the new maps with "
                    "this upgrade, each loading its own program from %s; %s %s. Nothing was changed; give every "
                    "attachment of the set the same object, or give the changed map another name"
                    % (shared, self.desired.object, where, why))
            if kind not in ADAPTERS:
                raise refuse("is of a kind of hook this run does not manage")
            if locks is not None:
                locks.enter_context(_pins.lock(self.netns_key, ifname, timeout=MATE_LOCK_SECONDS))
            record = _pins.Record(os.path.join(directory, "owner")).read()
            if not record or record.get("shared_maps") != shared:
                continue  # it left the set meanwhile
            params = dict(MATE_DEFAULTS, **ADAPTERS[kind].entry_of(record, None, ifname, hook_dir),
                          pin_root=self.pins.pin_root, state="present", object_store=self.desired.object_store,
                          map_migration=self.desired.map_migration)
            entry = dict(params)
            if self.desired.rollback:
                params = _revisions.rollback_params(dict(params, revision=_revisions.PREVIOUS), record, where,
                                                    ADAPTERS[kind].rollback_options)
                if os.path.basename(params["object_source"]) != digest + ".o" \
                        or params.get("shared_maps") != shared:
                    raise refuse("has another previous revision (%s, sha256 %s)" % (
                        params.get("object"), os.path.basename(params["object_source"])[:-len(".o")]))
            else:
                if not old_digest or record.get("object_sha256") != old_digest:
                    raise refuse("runs a program from %s (sha256 %s), not from the object %s ran before" % (
                        params.get("object"), record.get("object_sha256"), self.hook.ifname))
                params["object"] = self.desired.object
            try:
                ifindex = _netns.ifindex(ifname)
            except _netns.NotFoundError:
                raise refuse("is on an interface that no longer exists") from None
            hook = ADAPTERS[kind].from_params(params, ifindex, self.netns_key)
            observed = hook.observe()
            if not observed.owned or not hook.settled(observed):
                raise refuse("does not hold the program its record names (run its task first)")
            action = plan_swap(observed, True, False)
            if action not in (UPDATE_LINK, REPLACE):
                raise refuse("holds its program so that it cannot be swapped atomically (%s)" % observed.holder)
            desired = Desired.from_params(params)
            mate_identity = dict(desired.identity(digest, _loader.resolve_constants(desired.constants)),
                                 **hook.identity())
            mates.append(SetMate(hook, observed, desired, mate_identity, action, entry=entry))
        return mates

    def _preview(self, observed: Observed, identity: dict, before: dict) -> tuple[bool, dict]:
        """Check mode: load without pins to learn the tag and surface verifier errors."""
        reset = self._review_maps()
        if reset.moved and self.desired.shared_maps:
            self.mates = self._set_mates(identity, None)
        with self._load(identity) as loaded:
            if self._same_program(observed, loaded):
                self.mates = []
                return False, before
            self.hook.predict_refusal()
            return True, {"attached": True, "name": loaded.info["name"], "tag": loaded.info["tag"],
                          self.hook.placement_key: self.hook.planned_placement(observed), "owner": _observed.OWNER,
                          "object_sha256": identity["object_sha256"], "constants": identity["constants"],
                          **_revisions.preview(self.pins.record.read(), identity, self.desired.rollback, loaded.name,
                                               self.hook.planned_placement(observed), self.hook.placement_key)}

    def _apply(self, observed: Observed, identity: dict, before: dict) -> tuple[bool, dict]:
        self.before_change()
        reset = self._review_maps()
        with contextlib.ExitStack() as mate_locks:
            if reset.moved and self.desired.shared_maps:
                self.mates = self._set_mates(identity, mate_locks)
                if self.mates:
                    self.before_mates_change([(mate.hook.kind, mate.entry) for mate in self.mates])
            return self._apply_reviewed(observed, identity, before, reset)

    def _mate_record(self, mate: SetMate) -> dict:
        """A set mate's record for its program loaded from the upgrade's object, as the task's own is made (its
        placement once it is swapped)."""
        loaded = mate.loaded
        record = dict(mate.identity, program_name=loaded.name, tag=loaded.info["tag"], prog_id=loaded.info["id"],
                      data_sha256=loaded.data_sha256, prog_pin=mate.hook.pins.prog_path, maps=loaded.maps)
        record.update(_revisions.advance(mate.observed.record, mate.identity, self.desired.rollback))
        _pins.Record.encode(dict(record, **WIDEST_PLACEMENT, **mate.hook.widest_record))
        return record

    def _apply_reviewed(self, observed: Observed, identity: dict, before: dict,
                        reset: _migration.Reset) -> tuple[bool, dict]:
        shared = self.desired.shared_maps
        attached = False
        way_back: WayBack | None = None
        # The upgrade's journal (host/journal), undone newest first when a step fails. Before the swap: the
        # directories this run made, the map pins a migration set aside, the set's other attachments' objects
        # kept. Once the new program is on the hook its directories stand, and only a migrating upgrade goes back
        # (until its commit): each hook's old program, what the new ones counted carried back, the old pins;
        # after any other failure the new program stays, proof that it is ours, for the next run to adopt.
        with Journal() as journal:
            for mate in self.mates:
                journal.hold(mate)
            created = self.pins.make(maps=not shared)
            if shared:
                created = _pins.make_dirs(self.maps_dir(shared)) + created
            made = journal.did(functools.partial(self._unmake, created), "the directories this run made")
            try:
                reset.set_aside(journal)
                fault_point("maps_set_aside")
                # The load makes the new maps (libbpf creates and pins them before it loads the program); a map
                # set's other attachments load their programs over them.
                with self._load(identity, self.maps_dir(shared)) as loaded, contextlib.ExitStack() as mates_loaded:
                    for mate in self.mates:
                        mate.loaded = mates_loaded.enter_context(self._load(mate.identity, self.maps_dir(shared),
                                                                            mate))
                    fault_point("after_load")
                    # A migrated map's entries into the new map the load created.
                    reset.copy(during=lambda: fault_point("during_copy"))
                    action = plan_swap(observed, self.hook.in_place(observed), self._same_program(observed, loaded),
                                       self.hook.movable(observed))
                    if action != RECORD_ONLY and self._twin_on_hook(observed, loaded):
                        action = KEEP_ON_HOOK
                    if action == RECORD_ONLY:
                        # A rebuilt object with the same program: nothing changes in the kernel;
                        # the record learns the new object so the next run matches it directly.
                        rewritten = dict(observed.record, **identity, **_revisions.advance(
                            observed.record, identity, self.desired.rollback, new_program=False))
                        self._objects().keep(self.desired.path, rewritten, self.object_data)
                        self.pins.record.write(rewritten)
                        self._objects().release(observed.record, rewritten)
                        return False, before
                    record = dict(identity, program_name=loaded.name, tag=loaded.info["tag"],
                                  prog_id=loaded.info["id"], data_sha256=loaded.data_sha256,
                                  prog_pin=self.pins.prog_path, maps=loaded.maps)
                    old = self.pins.record.read()  # the hook's history, even when its program went missing
                    record.update(_revisions.advance(old, identity, self.desired.rollback))
                    widest = dict(WIDEST_PLACEMENT, **self.hook.widest_record)
                    _pins.Record.encode(dict(record, **widest))  # fail before the swap if it cannot fit
                    for mate in self.mates:
                        mate.record = self._mate_record(mate)
                        journal.did(functools.partial(self._release_mate, mate), "the object store's reference for "
                                    "%s's %s program" % (mate.hook.ifname, mate.hook.label))
                    self._objects().keep(self.desired.path, record, self.object_data)  # a rollback finds it by digest
                    for mate in self.mates:
                        self._mate_objects(mate).keep(self.desired.path, mate.record, self.object_data)
                    self.hook.prepare(loaded)
                    for mate in self.mates:
                        mate.hook.prepare(mate.loaded)
                    if reset.moved:
                        # Until the old maps are retired, a migrating upgrade can go back: keep the old programs.
                        way_back = journal.hold(WayBack(self.hook, observed, old, record))
                        for mate in self.mates:
                            mate.way_back = WayBack(mate.hook, mate.observed, mate.observed.record, mate.record)
                    if action == KEEP_ON_HOOK:
                        # Held as it is; pinned and recorded below as a swapped-in program would be.
                        attachment = Attachment(holder=observed.holder, placement=observed.placement,
                                                link_id=observed.link_id, extra=dict(observed.extra),
                                                program=self.hook.hold(observed.prog_id))
                    else:
                        attachment = self._swap(action, observed, loaded.program)
                    attached = True
                    journal.keep(made)
                    if way_back:
                        journal.did(functools.partial(self._go_back, way_back, reset),
                                    "the old program on the %s hook of %s" % (self.hook.label, self.hook.ifname))
                        way_back.swapped(action, attachment, loaded)
                    fault_point("after_swap")
                    # A map set's other attachments, one after the other: until the last, frames on some hooks are
                    # counted in the new maps and on the others in the old ones, which the top-up below adds.
                    for mate in self.mates:
                        moved = mate.hook.update_link(mate.observed, mate.loaded.program) \
                            if mate.action == UPDATE_LINK else mate.hook.replace(mate.observed, mate.loaded.program)
                        mate.way_back.swapped(mate.action, moved, mate.loaded)
                        journal.did(functools.partial(self._put_back, mate.hook, mate.way_back),
                                    "the old program on the %s hook of %s" % (mate.hook.label, mate.hook.ifname))
                        mate.record.update(moved.as_record())
                        if moved.program is not None:  # the hook's own copy is the program on the hook
                            mate.on_hook = moved.program
                            mate.record["prog_id"] = moved.program.info()["id"]
                        fault_point("after_set_swap")
                    try:
                        # No old program counts into the maps set aside any more.
                        reset.add_gained(between=lambda: fault_point("after_gains_added"))
                    except (_migration.MigrationError, _bpf.BpfError) as exc:
                        raise _migration.MigrationError(
                            "what the old maps counted between the copy and the swap could not be added to the new "
                            "ones: %s" % exc) from exc
                    fault_point("after_attach")
                    if attachment.program is not None:
                        with attachment.program:  # the hook's own copy is the program on the hook
                            record["prog_id"] = attachment.program.info()["id"]
                            self.pins.replace_pin(attachment.program, self.pins.prog_path)
                    else:
                        self.pins.replace_pin(loaded.program, self.pins.prog_path)
                    loaded.pin_maps()  # bcc's tables, once their program is on the hook (libbpf pinned at load)
                    fault_point("after_pin")
                    record.update(attachment.as_record())
                    fault_point("before_record")
                    self.pins.record.write(record)
                    for mate in self.mates:
                        self._pin_mate(mate)
                    fault_point("before_retire")
                    if self.keep_carry_back is not None and reset.moved:
                        self.keep_carry_back(reset.carriers())
                    # The point of no return of a migrating upgrade: the old maps, off the hooks with the old
                    # programs, are dropped.
                    reset.commit()
            except Exception as exc:
                failed = [str(error) for _what, error in journal.undo() if error is not None]
                if way_back is not None and attached:
                    # A migrating upgrade went back whole, the map set's other attachments first.
                    if failed:
                        raise HookError("%s; putting the old program (id %d) and its maps back failed too: %s"
                                        % (exc, observed.prog_id, "; ".join(failed))) from exc
                    self._objects().release(record, old)
                    words = way_back.words(self.hook)
                    if self.mates:
                        words += ", and so are the map set's other attachments (%s)" % ", ".join(
                            "%s's %s program id %d" % (m.hook.ifname, m.hook.label, m.observed.prog_id)
                            for m in self.mates)
                    self._drop_mates()
                    if isinstance(exc, (EbpfXdpError, OSError)):
                        raise HookError("%s; the upgrade was undone: %s" % (exc, words)) from exc
                    raise
                if not attached:
                    self._drop_mates()
                if failed:
                    raise HookError("%s; undoing what the run made before it failed too: %s"
                                    % (exc, "; ".join(failed))) from exc
                raise
        self._objects().release(old, record)
        for mate in self.mates:
            self._mate_objects(mate).release(mate.observed.record, mate.record)
        if observed.owned:
            self.release_maps(observed.record, shared)
        after = Observed(prog_id=record["prog_id"], name=loaded.info["name"], tag=record["tag"],
                         placement=attachment.placement, holder=attachment.holder, link_id=attachment.link_id,
                         record=record, extra=attachment.extra, placement_key=self.hook.placement_key)
        return True, self.state(after)

    def _unmake(self, created: list[str]) -> None:
        """A failure before the swap: the directories this run made go (a new map set's, with the maps the load
        pinned in it: only this run's are there)."""
        shared = self.desired.shared_maps
        if shared and self.maps_dir(shared) in created:
            shutil.rmtree(self.maps_dir(shared))
        self.pins.undo(created)

    def _release_mate(self, mate: SetMate) -> None:
        self._mate_objects(mate).release(mate.record, mate.observed.record)

    def _go_back(self, way_back: WayBack, reset: _migration.Reset) -> None:
        """A migrating upgrade going back after its swap, once the map set's other attachments are back (their
        steps came after this one): the old program back on the hook, then what the new programs counted in their
        moments on the hooks added to the old maps, before their pins go back (set_aside's steps, before this)."""
        self._put_back(self.hook, way_back)
        self.warnings.extend(reset.carry_back())

    def _mate_objects(self, mate: SetMate) -> _revisions.Keeper:
        return _revisions.Keeper(self.desired.object_store, mate.hook.pins.record.path)

    def _pin_mate(self, mate: SetMate) -> None:
        """A set mate's new program pinned and recorded, once every attachment of the set is on the new maps."""
        pins = mate.hook.pins
        pins.replace_pin(mate.on_hook or mate.loaded.program, pins.prog_path)
        pins.record.write(mate.record)

    def _put_back(self, hook: HookAdapter, way_back: WayBack) -> None:
        """A migrating upgrade that failed after its swap, before its point of no return: the old program back in
        the new one's place on hook (atomically where the swap was: the link updated back, the netlink program or
        filter replaced back; otherwise detached and restored, as a failed reattach), its pin and the record as
        they were. Then (the upgrade's journal, see _go_back) what the new programs counted in their moments on the
        hooks is added to the old maps (Reset.carry_back), which go back under their names (the new ones dropped)."""
        attachment = way_back.attachment
        on_hook = Observed(prog_id=way_back.new_id, placement=attachment.placement, holder=attachment.holder,
                           link_id=attachment.link_id, record=way_back.record_after, extra=dict(attachment.extra),
                           placement_key=hook.placement_key)
        pins = hook.pins
        if way_back.old_prog is None:
            hook.detach(on_hook)  # nothing was on the hook before
            hook.cleanup()
        elif way_back.action == UPDATE_LINK:
            hook.update_link(on_hook, way_back.old_prog)
        elif way_back.action == REPLACE:
            back = hook.replace(on_hook, way_back.old_prog)
            if back.program is not None:
                back.program.close()
        else:
            hook.detach(on_hook)
            hook.restore(way_back.observed, way_back.old_prog)
        if way_back.old_pin is not None:
            pins.replace_pin(way_back.old_pin, pins.prog_path)
        elif os.path.exists(pins.prog_path):
            os.unlink(pins.prog_path)
        if way_back.record_before is not None:
            pins.record.write(way_back.record_before)
        elif pins.record.exists():
            os.unlink(pins.record.path)

    def _swap(self, action: str, observed: Observed, prog: _bpf.Program) -> Attachment:
        """Put prog on the hook in place of what was observed, as plan_swap decided."""
        if action == ATTACH:
            attachment = self.hook.attach(prog)
        elif action == UPDATE_LINK:
            attachment = self.hook.update_link(observed, prog)
        elif action == REPLACE:
            attachment = self.hook.replace(observed, prog)
        elif action == MOVE:
            attachment = self._move(observed, prog)
        else:
            attachment = self._reattach(observed, prog)
        self.warnings.extend(self.hook.notes())
        return attachment

    def _move(self, observed: Observed, prog: _bpf.Program) -> Attachment:
        """A program of ours held by a link, at the wrong place: the new link first, at the right place (attach()
        pins it where the old one was pinned), then the old link detached. The hook never lacks the program; for
        that moment it runs at both places (a program that passes frames on sees them twice)."""
        with _bpf.Link.from_id(observed.link_id) as old:
            start = time.monotonic()
            try:
                attachment = self.hook.attach(prog)
            except Exception:
                if not self.pins.has_link():  # the new pin failed after the old one was unlinked: pin it again
                    old.pin(self.pins.link_path)
                raise
            old.detach()
            took = time.monotonic() - start
        self.warnings.append("%s %s program moved to its %s: attached there before the old link was detached, so for "
                             "at most %.2f ms it ran at both places (the kernel cannot move a link)"
                             % (self.hook.ifname, self.hook.label, self.hook.switch_reason(observed), took * 1000))
        return attachment

    def _reattach(self, observed: Observed, prog: _bpf.Program) -> Attachment:
        """A mode change, or a foreign link we cannot update: detach, attach, and put the old one back on failure."""
        attached = []

        def attach():
            attached.append(self.hook.attach(prog))

        def empty(exc: Exception, failed: list[str]) -> HookError:
            return HookError("%s; putting the old program (id %d) back failed too, so %s has none now: %s"
                             % (exc, observed.prog_id, self.hook.ifname, failed[0]))

        with self.hook.hold(observed.prog_id) as old, Journal() as journal:
            start = time.monotonic()  # the window is at most from before the detach to after the attach
            self.hook.detach(observed)
            journal.did(lambda: self.hook.restore(observed, old), "the old program (id %d)" % observed.prog_id)
            try:
                journal.run(attach, empty)
            finally:
                self.interrupted = time.monotonic() - start
        self.warnings.append("%s was briefly without its %s program while switching %s (at most %.2f ms)" % (
            self.hook.ifname, self.hook.label, self.hook.switch_reason(observed), self.interrupted * 1000))
        self.hook.cleanup()  # what only the old placement needed (tc: a clsact of ours left empty)
        return attached[0]


class WayBack:
    """What a migrating upgrade needs to go back from its swap until its point of no return (the old maps retired,
    its last step; see Converger._go_back): the old program and its pin, held open, and the record before and
    after."""

    def __init__(self, hook: HookAdapter, observed: Observed, record_before: dict | None, record_after: dict):
        self.observed = observed
        self.record_before = record_before
        self.record_after = record_after
        self.old_prog: _bpf.Program | None = None
        self.old_pin: _bpf.Fd | None = None
        # The swap's, once it happened.
        self.action: str | None = None
        self.attachment: Attachment | None = None
        self.new_id = 0
        try:
            if observed.attached:
                self.old_prog = hook.hold(observed.prog_id)
            if os.path.exists(hook.pins.prog_path):
                self.old_pin = _bpf.Fd.from_pin(hook.pins.prog_path)
        except Exception:
            self.close()
            raise

    def swapped(self, action: str, attachment: Attachment, loaded: _loader.Loaded) -> None:
        self.action, self.attachment = action, attachment
        self.new_id = attachment.program.info()["id"] if attachment.program is not None else loaded.info["id"]

    def words(self, hook: HookAdapter) -> str:
        if self.old_prog is None:
            return "the new program is off the %s hook of %s again, and the old maps are back under their names" % (
                hook.label, hook.ifname)
        return "the old program (id %d) is back on the %s hook of %s with its maps as they were" % (
            self.observed.prog_id, hook.label, hook.ifname)

    def close(self) -> None:
        for held in (self.old_prog, self.old_pin):
            if held is not None:
                held.close()
        self.old_prog = self.old_pin = None


class Held:
    """A hook of ours as it was before a multi-entry run changed it, to put back exactly (see hold).

    While a run holds it, its program lives on whatever the run does to the
    hook: put_back() puts that very program back (same id), not its revision
    loaded again, with the pins of its attachment directory and of the map set
    its record names (the same maps, so their contents, counters included, are
    the live ones) and its record. A link the run detached cannot come back:
    the program gets a new one.
    """

    def __init__(self, params: dict, make_hook: Callable, pins: _pins.PinDir, record: dict, held: dict):
        self.params = params
        self.make_hook = make_hook
        self.pins = pins
        self.record = record
        self.held = held  # pin path -> its object (an open fd)

    def close(self) -> None:
        for obj in self.held.values():
            obj.close()
        self.held = {}

    def put_back(self) -> None:
        params, ifname = self.params, self.params["interface"]
        try:
            with _session.host(), _netns.netns(params["netns"]), contextlib.ExitStack() as locks:
                key = _netns.netns_key(params["netns"])
                _pins.lock_set_and_interfaces(locks, params["pin_root"], key, ifname, self.record.get("shared_maps"),
                                              MATE_LOCK_SECONDS)
                hook = self.make_hook(params, _netns.ifindex(ifname), key)
                observed = hook.observe()
                prog = self.held[self.pins.prog_path]
                record = dict(self.record)
                fresh_link = False
                if observed.prog_id != prog.identity()[1]:
                    _pins.make_dirs(self.pins.directory)  # a removal pruned it; a new link is pinned there
                    converger = Converger(hook, Desired.from_params(params), check_mode=False, netns_key=key)
                    attachment = converger._swap(plan_swap(observed, hook.in_place(observed), False), observed, prog)
                    record.update(attachment.as_record())
                    fresh_link = attachment.link_id not in (None, self.record.get("link_id"))
                map_set = _pins.shared_maps_dir(params["pin_root"], key, self.record["shared_maps"]) \
                    if self.record.get("shared_maps") else None
                self._pins_back(skip=self.pins.link_path if fresh_link else None, map_set=map_set)
                now = self.pins.record.read()
                self.pins.record.write(record)
                _revisions.Keeper(params.get("object_store"), self.pins.record.path).release(now, record)
        finally:
            self.close()

    def _pins_back(self, skip: str | None, map_set: str | None = None) -> None:
        """Each held pin where it was, pointing at what it held; in the attachment directory, no other pin. Of
        the map set, its maps (what a migrating upgrade of the set replaced with new ones) are put back, and a map
        the upgrade added is dropped; its groups' pins have their own put-back (devmap_groups), and are only put
        back where they went."""
        def replaceable(path: str) -> bool:
            return path.startswith(self.pins.directory + os.sep) or (
                map_set is not None and os.path.dirname(path) == map_set)

        for path, obj in sorted(self.held.items()):
            if path == skip:
                continue
            if os.path.exists(path):
                if not replaceable(path):
                    continue
                with _bpf.Fd.from_pin(path) as current:
                    if current.identity() == obj.identity():
                        continue
            _pins.make_dirs(os.path.dirname(path))
            self.pins.replace_pin(obj, path)
        for top in [self.pins.directory] + ([map_set] if map_set and os.path.isdir(map_set) else []):
            for base, _dirs, files in os.walk(top):
                for name in files:
                    path = os.path.join(base, name)
                    if path not in self.held and path != skip and replaceable(path):
                        os.unlink(path)


def hold(kind: str, params: dict) -> Held | None:
    """Before a run changes a hook of ours (kind: xdp, tc; params: its entry as it is now), keep what puts it
    back: an fd to every pin of its attachment directory and of its map set, and its record. None when the
    hook has nothing of ours."""
    with _netns.netns(params["netns"]):
        pins = _pins.PinDir.for_hook(params["pin_root"], _netns.netns_key(params["netns"]), params["interface"],
                                     _pins.hook_dir(kind, params.get("direction"), params.get("name")))
        record = pins.record.read()
        if not record or not os.path.exists(pins.prog_path):
            return None
        tops = [pins.directory]
        if record.get("shared_maps"):
            tops.append(_pins.shared_maps_dir(params["pin_root"], _netns.netns_key(params["netns"]),
                                              record["shared_maps"]))
        held = {}
        try:
            for top in tops:
                for base, _dirs, files in os.walk(top):
                    for name in files:
                        held[os.path.join(base, name)] = _bpf.Fd.from_pin(os.path.join(base, name))
        except Exception:
            for obj in held.values():
                obj.close()
            raise
        return Held(params, ADAPTERS[kind].from_params, pins, record, held)


def _data_maps(map_ids: list[int]) -> list[tuple]:
    """A program's maps as _twin_on_hook compares them: a map of its own (.rodata, .data, .bss: libbpf names them
    after their section) by its section and content, any other map by its id."""
    out = []
    for map_id in map_ids:
        name = _bpf.map_info(map_id)["name"]
        if "." not in name:
            out.append(("map", map_id))
            continue
        with _bpf.Map.from_id(map_id) as own:
            out.append((name[name.rfind("."):], own.lookup(bytes(4)) if own.info["key_size"] == 4 else None))
    return sorted(out, key=repr)


def _maps_in_use(observed: Observed) -> list[int]:
    """The ids of the maps the program on a hook uses (none: nothing there, or gone meanwhile)."""
    if observed.map_ids or not observed.prog_id:
        return list(observed.map_ids)
    try:
        return list(_bpf.program_info(observed.prog_id)["map_ids"])
    except _bpf.BpfError:
        return []


def absent_without_interface(params: dict, check_mode: bool, make_hook: Callable,
                             before_change: Callable[[], None] | None = None) -> tuple[dict, list[str]] | None:
    """state: absent for an interface that no longer exists (None when it does).

    Its programs went with it; what can be left is ours in bpffs: a link to
    no interface, the program and the maps, which keep them in memory. They
    are cleared like stale pins, so a host whose interface was deleted
    converges instead of failing on "does not exist" for ever.
    """
    with _netns.netns(params["netns"]), contextlib.ExitStack() as locks:
        try:
            _netns.ifindex(params["interface"])
            return None
        except _netns.NotFoundError:
            pass
        key = _netns.netns_key(params["netns"])
        if not check_mode:
            _pins.check_bpffs(params["pin_root"])
            locks.enter_context(_pins.lock(key, params["interface"]))
        converger = Converger(make_hook(params, 0, key), Desired.from_params(params), check_mode, netns_key=key,
                              before_change=before_change)
        result = dict(converger.clear_gone(), netns=params["netns"])
    converger.release_sets()
    return result, converger.warnings


def converge_interface(params: dict, check_mode: bool, make_hook: Callable,
                       before_change: Callable[[], None] | None = None,
                       before_mates_change: Callable[[list[tuple[str, dict]]], None] | None = None,
                       keep_carry_back: Callable[[list[_migration.CarryBack]], None] | None = None
                       ) -> tuple[dict, list[str]]:
    """Converge the hook make_hook(params, ifindex, netns_key) builds on params' interface and netns;
    before_change() is called once right before the first change, if any, before_mates_change(mates) before
    a migrating upgrade moves its map set's other attachments, and keep_carry_back(carriers) at its point of no
    return (see Converger).

    Outside check mode the pin root must be on bpffs and the interface is
    locked; the hook is read under the lock, since a concurrent run may have
    just changed it. Returns the result and the warnings. The kernel is read
    through the host session (_session): a datapath task's entries share it.
    """
    with _session.host():
        return _converge_interface(params, check_mode, make_hook, before_change, before_mates_change, keep_carry_back)


def _rollback(params: dict, make_hook: Callable, key: str) -> dict:
    """A task's options with revision: previous, as the revision it puts back (its record read now)."""
    hook = make_hook(params, _netns.ifindex(params["interface"]), key)
    return _revisions.rollback_params(params, hook.pins.record.read(),
                                      "the %s hook of %s" % (hook.label, params["interface"]), hook.rollback_options)


def _converge_interface(params: dict, check_mode: bool, make_hook: Callable,
                        before_change: Callable[[], None] | None,
                        before_mates_change: Callable[[list[tuple[str, dict]]], None] | None = None,
                        keep_carry_back: Callable[[list[_migration.CarryBack]], None] | None = None
                        ) -> tuple[dict, list[str]]:
    _revisions.check_params(params)
    if params["state"] == "absent":
        gone = absent_without_interface(params, check_mode, make_hook, before_change)
        if gone:
            return gone
    ifname = params["interface"]
    shared = params.get("shared_maps")
    with _netns.netns(params["netns"]), contextlib.ExitStack() as locks:
        key = _netns.netns_key(params["netns"])
        if shared:
            _pins.shared_maps_dir(params["pin_root"], key, shared)  # a bad set name fails first
        if not check_mode:
            _netns.ifindex(ifname)  # a missing interface fails before any lock or bpffs check
            _pins.check_bpffs(params["pin_root"])
        elif os.path.commonpath([params["pin_root"], _pins.BPFFS_MOUNT]) != _pins.BPFFS_MOUNT:
            # Outside /sys/fs/bpf (what the toolchain role mounts) no earlier task makes pin_root bpffs: check mode
            # answers as the run would, not "a program ebpf.xdp did not attach" for records it cannot see.
            _netns.ifindex(ifname)
            _pins.check_bpffs(params["pin_root"])
        rollback = params.get("revision") == _revisions.PREVIOUS
        if rollback:
            # The revision put back brings its program, map set and placement: read first to know the set to
            # lock, and again under the locks, where it must name the same set.
            shared = _rollback(params, make_hook, key).get("shared_maps")
        if not check_mode:
            # Attachments of one set load (and create) its maps, or remove it, one at a time, and its migration
            # moves every attachment of the set: the set's lock, then the interfaces (see lock_set_and_interfaces).
            _pins.lock_set_and_interfaces(locks, params["pin_root"], key, ifname,
                                          shared if params["state"] == "present" else None, MATE_LOCK_SECONDS)
        if rollback:
            rolled = _rollback(params, make_hook, key)
            if not check_mode and rolled.get("shared_maps") != shared:
                raise _pins.PinError("the previous revision of %s's attachment changed while this run waited for its "
                                     "locks (another run); nothing was changed, run again" % ifname)
            params, shared = rolled, rolled.get("shared_maps")
        hook = make_hook(params, _netns.ifindex(ifname), key)
        desired = Desired.from_params(params)
        converger = Converger(hook, desired, check_mode, load=desired.loader(), netns_key=key,
                              before_change=before_change, before_mates_change=before_mates_change,
                              keep_carry_back=keep_carry_back)
        result = dict(converger.run(), netns=params["netns"])
    # The locks are dropped: a set left behind is taken under its own lock only (no lock order to keep).
    converger.release_sets()
    return result, converger.warnings
