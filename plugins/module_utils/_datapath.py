# -*- coding: utf-8 -*-
# Copyright (c) ebpf.xdp contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""ebpf.xdp.datapath: a host's whole data path in one module run, as a network resource module.

Private to the ebpf.xdp collection: the interface may change without notice.

`config` has one list per kind of item, and each entry takes exactly the
options of the per-item module that manages that kind (their argument specs
live next to their code and are read from there):

    objects        bpf_object     (src, dest, ...)       compiled first
    xdp            xdp_program    (interface, object, mode, ...)
    tc             tc_program     (interface, direction, method, ...)
    devmap_groups  devmap_group   (name/id, members, ...) after the programs whose map sets hold them
    map_entries    bpf_map_entry  (path, entries, ...)    last

Each section is a resource (sections/: its keys, words, gather, converge
and undo, with the code its per-item module runs); this file keeps only the
order above, the journal and the put-back. Removals come after every
addition and change. What this collection has on the host is read back in
the same shape (`gather`): an attachment from its ownership record, a group
from its map set. Map entries are not gathered (which entries of a map are
"declared" is the task's to say), objects are files, not host state.

A failure puts back, in reverse order, what the run had changed: an upgraded
program goes back to its previous revision, a new one goes away, a removed
one is attached again from its record, a group gets its members back, map
entries their values.
"""

from __future__ import annotations

import copy
import hashlib
import os
from typing import Callable

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

from ansible_collections.ebpf.xdp.plugins.module_utils import _common, _facts
from ansible_collections.ebpf.xdp.plugins.module_utils.bpf import compile as _compile
from ansible_collections.ebpf.xdp.plugins.module_utils.hooks import converge as _converge, revisions as _revisions
from ansible_collections.ebpf.xdp.plugins.module_utils.host import netns as _netns, session as _session
from ansible_collections.ebpf.xdp.plugins.module_utils.host import toolchain as _toolchain
from ansible_collections.ebpf.xdp.plugins.module_utils.host.journal import Journal
from ansible_collections.ebpf.xdp.plugins.module_utils.sections import (
    groups as _groups, hooks as _hooks, map_entries as _map_entries, objects as _objects)
from ansible_collections.ebpf.xdp.plugins.module_utils.sections.resource import Section
from ansible_collections.ebpf.xdp.plugins.module_utils._errors import EbpfXdpError

STATES = ("merged", "replaced", "overridden", "deleted", "gathered")
# The sections, by config key, in the order they converge: objects first, then each registered hook (hooks/adapters),
# the groups after the programs whose map sets hold them, map entries last.
SECTIONS: dict[str, Section] = {section.name: section for section in [
    _objects.Objects(), *_hooks.sections(), _groups.Groups(), _map_entries.MapEntries()]}
# The hooks' sections, by kind of hook.
HOOKS = {name: section for name, section in SECTIONS.items() if isinstance(section, _hooks.Hook)}
# The module's options (documented in plugins/modules/datapath.py). The entries are checked by validate(), each
# against its own module's spec: Ansible's suboptions would need a second copy of every one of them.
ARGS = dict(
    config=dict(type="dict", options={section: dict(type="list", elements="dict") for section in SECTIONS}),
    state=dict(type="str", choices=list(STATES), default="merged"),
    namespaces=dict(type="list", elements="str", default=[]),
    sources=dict(type="dict", options=dict(dir=dict(type="path", required=True),
                                           files=dict(type="dict", required=True))),
    facts_before=dict(type="dict", options=dict(interfaces=dict(type="list", elements="str", default=[]),
                                                netns=dict(type="str"),
                                                rate_interval=dict(type="float", default=0),
                                                only_if_changing=dict(type="bool", default=True),
                                                **_facts.READING_ARGS)),
    # toolchain_facts' options, checked by toolchain_unready() against that module's spec.
    toolchain=dict(type="dict"),
    report=dict(type="str", choices=["full", "changes"], default="full"),
    **_common.PIN_ROOT_ARGS,
)
# Set once for the whole task, never per entry.
TASK_WIDE = ("pin_root",)


# Test-only: the run fails right after its n-th change when this environment variable says n (each n in
# turn proves that a failure anywhere puts the host back, tests/integration/test_datapath.py).
FAULT_AFTER_ENV = "EBPF_XDP_DATAPATH_FAULT_AFTER"


class InjectedFault(EbpfXdpError):
    """The failure FAULT_AFTER_ENV asked for."""


class ConfigError(EbpfXdpError):
    """config names something twice, or an entry is not what its module takes; nothing was changed."""


class ItemError(EbpfXdpError):
    """One entry failed; what was put back is in `put_back`."""

    def __init__(self, message: str, put_back: list[str]):
        super().__init__(message)
        self.put_back = put_back
        self.details = {"put_back": put_back}  # for the failure result


# ---------------------------------------------------------------- the config


def where(section: str, index: int) -> str:
    return "config.%s[%d]" % (section, index)


def validate(config: dict, pin_root: str) -> dict[str, list[dict]]:
    """Each entry checked against its module's argument spec, with the spec's defaults filled in; every entry
    of a hook, group, map or object file named once. Raises ConfigError naming the entry."""
    out = {}
    for section, resource in SECTIONS.items():
        entries = []
        for index, entry in enumerate(config.get(section) or []):
            if not isinstance(entry, dict):
                raise ConfigError("%s: an entry is a dict of %s's options, not %r"
                                  % (where(section, index), resource.module, entry))
            given = [name for name in TASK_WIDE if name in entry]
            if given:
                raise ConfigError("%s: %s is set once for the task, not per entry"
                                  % (where(section, index), ", ".join(given)))
            params = dict(entry, pin_root=pin_root) if "pin_root" in resource.spec else dict(entry)
            result = ArgumentSpecValidator(resource.spec, **resource.rules).validate(params)
            if result.error_messages:
                raise ConfigError("%s: %s" % (where(section, index), "; ".join(result.error_messages)))
            params = result.validated_parameters
            try:
                _common.check_names(params, resource.names)
                resource.validate(params)
            except EbpfXdpError as exc:
                raise ConfigError("%s: %s" % (where(section, index), exc)) from exc
            entries.append(params)
        out[section] = entries
    _refuse_twice(out)
    return out


def key_of(section: str, params: dict) -> tuple:
    """What one entry is the only one to manage: a hook, a group of a map set, a map, an object file."""
    return SECTIONS[section].key(params)


def describe(section: str, key: tuple) -> str:
    netns = SECTIONS[section].netns(key)
    return SECTIONS[section].describe(key) + (" in netns %s" % netns if netns else "")


def _refuse_twice(validated: dict) -> None:
    """Two entries for one hook (or group, map, object file) would undo each other on every run."""
    for section, entries in validated.items():
        seen = {}
        for index, params in enumerate(entries):
            for key in keys_of(section, params):
                if key in seen:
                    raise ConfigError("%s and %s both manage %s: give each one entry"
                                      % (where(section, seen[key]), where(section, index), describe(section, key)))
                seen[key] = index


# ---------------------------------------------------------------- reading the host back


def scope(validated: dict, namespaces: list[str] | None) -> list[str | None]:
    """The namespaces a run reads and may remove from: the module's own (None), every netns config names, and
    the ones the task lists. Lab hosts share one bpffs; another host's namespace is never in scope."""
    found = [None]
    for name in (namespaces or []) + [p.get("netns") for entries in validated.values() for p in entries]:
        if name and name not in found:
            found.append(name)
    return found


def gather(pin_root: str, namespaces: list[str | None]) -> dict[str, list[dict]]:
    """This collection's attachments on every registered hook and its devmap groups in the namespaces, in config's
    shape."""
    out = {section: [] for section, resource in SECTIONS.items() if resource.gathered}
    for netns in namespaces:
        with _netns.netns(netns):
            key = _netns.netns_key(netns)
            for section in out:
                out[section].extend(SECTIONS[section].gather(pin_root, netns, key))
    return out


# ---------------------------------------------------------------- planning


def keys_of(section: str, params: dict) -> list[tuple]:
    """What an entry (declared, or gathered) manages: one key, or a group's name and id."""
    return SECTIONS[section].keys(params)


# What state deleted removes, last in first out; objects are files, not host state, and stay.
DELETED = tuple(section for section in reversed(SECTIONS) if SECTIONS[section].removable)


def plan(state: str, validated: dict, gathered: dict, pin_root: str) -> list[tuple[str, int | None, dict]]:
    """(section, index in config or None, params) in the order they run: the declared entries, then what must go."""
    steps = []
    if state == "deleted":
        if any(validated[section] for section in DELETED):
            return [(section, index, _absent(section, params, pin_root))
                    for section in DELETED for index, params in enumerate(validated[section])]
        # Nothing declared: everything of this collection's in scope (map entries are never gathered).
        return [(section, None, _absent(section, _full(section, entry, pin_root), pin_root))
                for section in DELETED if section in gathered for entry in gathered[section]]
    for section, resource in SECTIONS.items():
        for index, params in enumerate(validated[section]):
            if state == "replaced" and resource.exact_when_replaced:
                params = dict(params, exclusive=True)  # exactly as declared
            steps.append((section, index, params))
    if state in ("replaced", "overridden"):
        for section in DELETED:
            keys = {key for params in validated[section] for key in keys_of(section, params)}
            for entry in gathered.get(section, []):
                if any(key in keys for key in keys_of(section, entry)):
                    continue
                if state == "replaced" and not SECTIONS[section].replaced_removes(entry, validated[section]):
                    continue  # replaced: only the map sets config names end exactly as declared
                steps.append((section, None, _absent(section, _full(section, entry, pin_root), pin_root)))
    return steps


def _gathered_entry(section: str, params: dict, gathered: dict) -> dict | None:
    """The gathered entry for what params names (a hook, a group by its name or id), if the collection has one."""
    wanted = set(keys_of(section, params))
    return next((entry for entry in gathered.get(section, []) if wanted & set(keys_of(section, entry))), None)


def _full(section: str, entry: dict, pin_root: str) -> dict:
    """A gathered entry with its module's defaults, as validate() would give it."""
    return SECTIONS[section].full(entry, pin_root)


def _absent(section: str, params: dict, pin_root: str) -> dict:
    return SECTIONS[section].removal(params, pin_root)


# ---------------------------------------------------------------- converging


class Run:
    """One datapath task: its steps converged in order, each change journalled for the put-back."""

    def __init__(self, pin_root: str, check_mode: bool, run_command, find_clang):
        self.pin_root = pin_root
        self.check_mode = check_mode
        self.run_command = run_command
        self.find_clang = find_clang
        self.warnings: list[str] = []
        self.changes: list[dict] = []
        # Per declared entry, what its module would have returned, with the entry as `item` (the shape of a
        # registered loop's results, which the rollout filters read; `results` itself is Ansible's, for loops).
        self.results: dict[str, list[dict]] = {section: [] for section in SECTIONS}
        # Each change with what puts it back (converging the params it had, a hook held as it was, the sources
        # as they were), in words; the held hooks and sources let go of when the run is over.
        self.journal = Journal()
        # Check mode: the named attachments (section, entry_key) an earlier entry would put in place, which a
        # later entry may be placed beside (tc's before/after) although the kernel does not hold them yet.
        self.predicted: set[tuple] = set()
        # The step's entry's map set's other attachments its migration moves, each held as it was (hold_mates),
        # with its kind and entry; None outside a step.
        self.mates_held: list | None = None
        # The step's migrated maps' ways to carry what the new programs counted back to the old maps
        # (hold_carry_back); None outside a step.
        self.carriers_held: list | None = None
        # Check mode: sources this run would write first (ship), so that objects are not judged by the old ones.
        self.sources_pending = False
        self.netns_of_step: str | None = None

    def converge(self, section: str, params: dict, before_change: Callable[[], None] | None = None) -> dict:
        result, warnings = SECTIONS[section].converge(params, self.check_mode, self, before_change)
        self.warnings.extend(warnings)
        return result

    def hold_mates(self, mates: list[tuple[str, dict]]) -> None:
        """Before an entry's migrating upgrade moves its map set's other attachments (kind, entry): each held as it
        is, put back with the entry when a later one fails."""
        if self.mates_held is None or self.check_mode:
            return
        for kind, entry in mates:
            # As its section's entries are: its module's options (an XDP entry has no direction).
            entry = dict({k: v for k, v in entry.items() if k in SECTIONS[kind].spec}, netns=self.netns_of_step)
            held = _converge.hold(kind, entry)
            if held is not None:
                self.mates_held.append((kind, entry, held))

    def hold_carry_back(self, carriers: list) -> None:
        """At an entry's migrating upgrade's point of no return: what carries the new programs' counts back to the old
        maps, put back after the entry and its map set's other attachments (their old programs and maps)."""
        if self.carriers_held is None or self.check_mode:
            for carrier in carriers:
                carrier.close()
            return
        self.carriers_held.extend(carriers)

    def ship(self, sources: _compile.Sources) -> None:
        """Write the sources that differ on the host, before the objects compile from them."""
        names = sources.differing()
        if not names:
            return
        self.changes.append({"entry": "sources in %s" % sources.directory, "section": "sources", "state": "present",
                             "diff": {"before": {}, "after": {"files": names}}})
        self.sources_pending = self.check_mode  # the objects compiled from them would change (see converge_object)
        if not self.check_mode:
            self.journal.did(self.journal.hold(sources).put_back, "sources in %s" % sources.directory)
            try:
                sources.write(names)
            except OSError as exc:
                raise ItemError("sources: %s" % exc, self.put_back()) from exc

    def step(self, section: str, index: int | None, params: dict, gathered: dict) -> None:
        label = where(section, index) if index is not None else "%s (not declared)" % describe(
            section, keys_of(section, params)[0])
        # A hook of ours is held as it was right before the step's first change (none: nothing held).
        holds: list = []
        self.mates_held, self.carriers_held, self.netns_of_step = [], [], params.get("netns")

        def before_change():
            if not holds:
                holds.append(self._hold(section, params, gathered))
        held = None
        try:
            result = self._predict_placed(section, params) if self._anchor_predicted(section, params) else \
                self.converge(section, params, None if self.check_mode else before_change)
            held = holds.pop() if holds else None
            if self.check_mode and section in HOOKS and result.get("changed") and params.get("name") \
                    and params.get("state", "present") == "present":
                self.predicted.add((section, key_of(section, params)))
            if result.get("changed"):
                self.changes.append({"entry": label, "section": section, "state": params.get("state", "present"),
                                     "diff": result.get("diff")})
                if not self.check_mode:
                    for carrier in self.carriers_held:
                        # Journalled first, so undone last: once every old program is back on its hook.
                        self.journal.did(self.journal.hold(carrier).put_back, "%s's map %s (what the new programs "
                                         "counted, added to the old map)" % (label, carrier.name))
                    self.carriers_held = []
                    undo, held = held or self._undo(section, params, result, gathered), None
                    if undo is not None:
                        what = label if index is None else "%s (%s)" % (
                            label, describe(section, keys_of(section, params)[0]))
                        self.journal.did(self._putting_back(section, undo), what)
                    for kind, entry, mate in self.mates_held:
                        # Journalled after the entry: put back before it, as a failed migration puts them back.
                        self.journal.did(self.journal.hold(mate).put_back, "%s's map set: %s" % (
                            label, describe(kind, keys_of(kind, entry)[0])))
                    self.mates_held = []
                    if os.environ.get(FAULT_AFTER_ENV) == str(len(self.changes)):
                        if os.environ.get(_converge.FAULT_RESUME_ENV):
                            _converge.pause()  # a test's moment (frames sent) between the change and the failure
                        raise InjectedFault("fault injected after change %d" % len(self.changes))
        except Exception as exc:
            put_back = [] if self.check_mode else self.put_back()  # whatever went wrong, the host goes back
            if isinstance(exc, _common.KNOWN_ERRORS):
                raise ItemError("%s: %s" % (label, exc), put_back) from exc
            raise  # a bug: it keeps its traceback
        finally:
            # held: not journalled (no change); holds and the mates': the converger failed (it put them back)
            for unused in [held] + holds + [mate for _kind, _entry, mate in self.mates_held or []] + (
                    self.carriers_held or []):
                if unused:
                    unused.close()
            self.mates_held = self.carriers_held = self.netns_of_step = None
        if index is not None:
            self.results[section].append(dict(result, item={k: v for k, v in params.items() if k != "pin_root"}))

    def _anchor_predicted(self, section: str, params: dict) -> bool:
        """Check mode: whether the entry is placed beside (tc: before/after) an attachment an earlier entry would
        attach."""
        return self.check_mode and section in HOOKS and any(
            (section, key) in self.predicted for key in HOOKS[section].placed_next_to(params))

    def _predict_placed(self, section: str, params: dict) -> dict:
        """Check mode, for an entry placed next to an attachment this run would make first: the entry checked
        without its place (program, object, verifier), reported as a change (it attaches, or moves, there)."""
        result = self.converge(section, HOOKS[section].unplaced(params))
        return dict(result, changed=True)

    def _hold(self, section: str, params: dict, gathered: dict) -> _converge.Held | None:
        """For a hook of ours that this step may change: what puts it back as it is (its program, same id)."""
        before = _gathered_entry(section, params, gathered)
        return SECTIONS[section].hold(before, self.pin_root) if before else None

    def _undo(self, section: str, params: dict, result: dict, gathered: dict) -> dict | None:
        """The params that put back what this step changed (None: nothing to put back, such as an object file);
        a hook that had a program of ours is held instead (_hold)."""
        return SECTIONS[section].undo(params, result, _gathered_entry(section, params, gathered), self.pin_root)

    def rehearse(self, sources: _compile.Sources | None, steps: list, gathered: dict) -> bool:
        """Whether the steps would change anything: the same steps in check mode, nothing written."""
        rehearsal = Run(self.pin_root, True, self.run_command, self.find_clang)
        if sources:
            rehearsal.ship(sources)
        for section, index, step_params in steps:
            rehearsal.step(section, index, copy.deepcopy(step_params), gathered)
        return bool(rehearsal.changes)

    def _putting_back(self, section: str, undo: dict | _converge.Held):
        """The journal's undo of one entry's change: the hook held as it was put back, or the params it had
        converged again."""
        if isinstance(undo, _converge.Held):
            return self.journal.hold(undo).put_back
        return lambda: self.converge(section, undo)

    def forget(self) -> None:
        """The run is over: let go of the hooks held for a put-back."""
        self.journal.close()

    def put_back(self) -> list[str]:
        """Undo the journal in reverse; what was put back (or could not be), in words."""
        return ["%s: put back" % what if error is None else "%s: could not be put back: %s" % (what, error)
                for what, error in self.journal.undo()]


def run(params: dict, check_mode: bool, run_command, find_clang) -> tuple[dict, list[str]]:
    """The datapath module's work: (result, warnings). Raises ConfigError before anything changed, ItemError
    after putting back what the run had changed."""
    state, pin_root = params["state"], params["pin_root"]
    validated = validate(params["config"] or {}, pin_root)
    namespaces = scope(validated, params["namespaces"])
    # The whole task reads the host through one session (_session): each record and each hook once, read again
    # only after this run wrote it, from the gather through every entry (their hold, converge and put-back) to
    # the gather after. The object store lets go of a revision's object only once the run is over (a put-back
    # may need it again).
    with _session.host():
        before = gather(pin_root, namespaces)
        if state == "gathered":
            return dict(changed=False, gathered=before, namespaces=namespaces, invocation=invocation(params)), []
        sources = _compile.Sources(params["sources"]["dir"], params["sources"]["files"]) if params["sources"] \
            else None
        steps = plan(state, validated, before, pin_root)
        job = Run(pin_root, check_mode, run_command, find_clang)
        with _revisions.releases_deferred():
            facts = read_facts_before(params, check_mode, lambda: job.rehearse(sources, steps, before))
            try:
                if sources:
                    job.ship(sources)
                for section, index, step_params in steps:
                    job.step(section, index, copy.deepcopy(step_params), before)
            finally:
                job.forget()
        after = before if not job.changes else (predict(before, job.changes) if check_mode else
                                                gather(pin_root, namespaces))
    result = dict(changed=bool(job.changes), changes=job.changes, namespaces=namespaces,
                  invocation=invocation(params), facts_before=facts)
    # report: changes, for a task that only asks what would change (xdp_rollout's probe): the controller copies
    # and converts every host's result, ~8 KB with the states and each entry's result, ~2 KB without them.
    if params.get("report", "full") == "full":
        result.update(before=before, after=after, item_results=job.results, diff=dict(before=before, after=after))
    return result, job.warnings


def read_facts_before(params: dict, check_mode: bool, would_change) -> dict | None:
    """The host's XDP facts (xdp_facts' ansible_facts.xdp) before the run's first change, where facts_before
    asks for them: a rollout's health gate compares with them, and reading them here spares every host a
    module run of its own. With only_if_changing, a run that will change nothing (would_change(), a check-mode
    pass over the same steps) reads nothing, and sleeps no rate interval. Never in check mode."""
    wanted = params.get("facts_before")
    if wanted and wanted["rate_interval"] < 0:
        raise ConfigError("facts_before.rate_interval must not be negative")
    try:
        reading = _facts.MapReading.from_params(wanted) if wanted else None
    except _facts.FactsError as exc:
        raise ConfigError("facts_before.%s" % exc)
    if not wanted or check_mode or (wanted["only_if_changing"] and not would_change()):
        return None
    netns, interfaces = wanted["netns"], wanted["interfaces"]
    with _netns.netns(netns):
        if wanted["rate_interval"]:
            return _facts.with_rates(params["pin_root"], netns, interfaces, wanted["rate_interval"], reading=reading)
        return _facts.snapshot(params["pin_root"], netns, interfaces, reading=reading)


def toolchain_unready(params: dict, run_command, find_program) -> dict | None:
    """With `toolchain`, the host's toolchain facts (toolchain_facts' ansible_facts.ebpf_xdp_toolchain) when
    the host lacks part of it: the task then changes nothing, and the role ebpf.xdp.toolchain prepares the host
    before running it again. None when the host is ready or nothing was asked. Read before any library is
    needed: a host that has nothing yet answers too."""
    if params.get("toolchain") is None:
        return None
    result = ArgumentSpecValidator(_toolchain.ARGS).validate(dict(params["toolchain"]))
    if result.error_messages:
        raise ConfigError("toolchain: %s" % "; ".join(result.error_messages))
    wanted = result.validated_parameters
    facts = _toolchain.read(run_command, find_program, **dict(wanted, require=wanted["require"] or {}))
    return None if facts["ready"] else facts


def invocation(params: dict) -> dict:
    """The result's `invocation`, with each shipped source file as its size and digest instead of its text:
    the controller handles every result of every host (the sources of a fleet's tasks, tens of kilobytes
    each, would be copied and converted on every host), and -vvv shows what was shipped."""
    args = dict(params)
    if args.get("sources"):
        files = args["sources"]["files"]
        args["sources"] = dict(args["sources"], files={
            name: "%d bytes, sha256 %s" % (len(text.encode()), hashlib.sha256(text.encode()).hexdigest()[:16])
            for name, text in files.items()})
    return dict(module_args=args)


def predict(before: dict, changes: list[dict]) -> dict:
    """Check mode's `after`: what can be said without acting is which entries change; their new state is the
    entry itself, which the real run reads back."""
    after = copy.deepcopy(before)
    after["changed_entries"] = [change["entry"] for change in changes]
    return after
