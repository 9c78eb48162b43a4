# -*- coding: utf-8 -*-
# Copyright (c) ebpf.xdp contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Program revisions of a hook, rollback to the previous one, and the object store that makes it possible.

Private to the ebpf.xdp collection: the interface may change without notice.

A hook's ownership record (see _pins) describes the program attached now
(its identity: object path and digest, program, constants, map set, the
hook's placement options) and carries three more fields:

    revision      number of the current revision: 1 for the first program put on the hook, then one more
                  than any number the hook had for each new program
    previous      the revision it replaced (identity, number, program name, tag, mode), or absent
    rolled_back   true when the current revision was put back by `revision: previous`

`revision: previous` puts `previous` back: the converger loads it from the
object store (its object by digest, so an object file overwritten or deleted
since does not matter) over the same pinned maps, and swaps it in as for any
upgrade (bpf_link_update where the link is ours). The revision it replaced
becomes `previous`, and `rolled_back` is set: a second `revision: previous`
converges to the rolled-back revision again (nothing to do), so re-running a
rollback is idempotent. One previous revision is kept; going forward again
is an ordinary task with the new object (a new revision number).

The object store is a directory (default /var/lib/ebpf_xdp/revisions, 0700)
of objects named by digest (`<sha256>.o`, 0600). Each object has a
`<sha256>.refs/` directory with one file per record that references it
(the file holds the record's pin path); an object is removed once no
record still names it as its current or previous revision. A reference
whose record is gone (a removed pin root, a reboot that emptied bpffs) is
dropped when the store is next collected, so the store does not grow
without bound. Stores are shared by every pin root and namespace on a host.

A reference is written before the swap and its record after it, so while a
run is between the two its record does not name the object yet. The run
holds a shared lock on each reference it wrote until its record is written
(or its process ends); a collection by any other run leaves a locked
reference, and its object, alone.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
from typing import Iterator

from ansible_collections.ebpf.xdp.plugins.module_utils.bpf import pins as _pins, record as _record
from ansible_collections.ebpf.xdp.plugins.module_utils.bpf.compile import sha256_file
from ansible_collections.ebpf.xdp.plugins.module_utils.host import files as _files, names as _names
from ansible_collections.ebpf.xdp.plugins.module_utils._errors import EbpfXdpError

DEFAULT_OBJECT_STORE = "/var/lib/ebpf_xdp/revisions"
CURRENT = "current"
PREVIOUS = "previous"

# What the identity keys of a hook's placement options (see the adapters' identity()) start with: a rollback puts
# the revision back with the options it was attached with (each adapter's rollback_options names them).
REQUESTED = "requested_"
# Task options that name a program; revision: previous takes them from the revision instead.
PROGRAM_OPTIONS = ("object", "program", "section", "constants", "shared_maps", "checksum")
# What a kept revision holds beyond its identity.
KEPT = ("revision", "program_name", "tag", _record.STORED["placement"])
# Identity keys that say nothing about which revision it is: resolved constants follow the interfaces of
# today (an ifindex), so a revision put back is the same revision with freshly resolved constants; a tc
# program's place among the others (before/after) is the task's, kept by an upgrade and by a rollback.
NOT_REVISION = ("resolved_constants", "requested_before", "requested_after")


class RevisionError(EbpfXdpError):
    """A revision that cannot be put back, or options that do not go with revision: previous."""


# ---------------------------------------------------------------- the task's options


def check_params(params: dict) -> None:
    """What the argument spec cannot say: state present needs an object unless it puts a revision back."""
    if params.get("revision", CURRENT) != PREVIOUS:
        if params["state"] == "present" and not (params.get("object") or params.get("source")):
            raise RevisionError("state is present but all of the following are missing: object "
                                "(or revision: previous, to put back the revision kept before the current one)")
        return
    if params["state"] != "present":
        raise RevisionError("revision: previous puts a program back (state: present); it cannot go with state: %s"
                            % params["state"])
    given = [name for name in PROGRAM_OPTIONS if params.get(name)]
    if given:
        raise RevisionError("revision: previous puts back the revision kept on the hook, with its own object, "
                            "program (or section), constants and map set; do not give %s with it" % ", ".join(given))


def rollback_params(params: dict, record: dict | None, where: str, hook_options: dict | None = None) -> dict:
    """The task's options for revision: previous: those of the revision to put back (RevisionError if none).

    hook_options: record key -> task option of the hook's placement that the revision takes back (the adapter's
    rollback_options); None: each requested_ key of the revision that the task has an option for, but its place
    (NOT_REVISION).

    After a rollback the current revision is the one put back (rolled_back),
    so the options are the current ones: a re-run has nothing to do.
    """
    if params.get("revision", CURRENT) != PREVIOUS:
        return params
    if not record:
        raise RevisionError("%s has no program attached by ebpf.xdp, so there is no previous revision to put back; "
                            "nothing was changed" % where)
    record = _record.of(record)
    target = record if record.rolled_back else record.previous
    if not target:
        raise RevisionError("%s has revision %d only: no previous revision is kept (one is kept from the next "
                            "program put there on); nothing was changed" % (where, number(record)))
    if not target.get("object_sha256"):
        raise RevisionError("revision %d of %s was compiled by bcc from %s; only objects (backend libbpf) are "
                            "kept to be put back; nothing was changed" % (number(target), where, target.get("source")))
    store = ObjectStore(params.get("object_store") or DEFAULT_OBJECT_STORE)
    source = store.path(target["object_sha256"])
    try:
        _files.trusted_directory(store.directory, "object store")
    except _files.UnsafePathError as exc:
        raise RevisionError("revision %d of %s cannot be put back: %s; nothing was changed"
                            % (number(target), where, exc)) from None
    if not os.path.isfile(source):
        raise RevisionError("the object of revision %d of %s (%s, sha256 %s) is not in the object store %s; "
                            "nothing was changed" % (number(target), where, target.get("object"),
                                                     target["object_sha256"], store.directory))
    # A program chosen by its section is chosen so again, and its hook gives it its type again (see _loader).
    out = dict(params, object=target.get("object"), program=target.get("program"), section=target.get("section"),
               constants=target.get("constants") or {}, shared_maps=target.get("shared_maps"), object_source=source)
    if hook_options is None:
        hook_options = {key: key[len(REQUESTED):] for key in target
                        if key.startswith(REQUESTED) and key not in NOT_REVISION and key[len(REQUESTED):] in params}
    for key, option in hook_options.items():
        if target.get(key) is not None:
            out[option] = target[key]
    return out


def module_rules(rules: dict) -> dict:
    """A program module's AnsibleModule rules with revision as one more way to satisfy "state present needs
    an object": revision: previous names none (check_params then checks the rest)."""
    required_if = []
    for rule in rules.get("required_if", []):
        if rule[:2] == ("state", "present") and "object" in rule[2]:
            rule = ("state", "present", tuple(rule[2]) + ("revision",), True)
        required_if.append(rule)
    out = dict(rules)
    out["required_if"] = required_if
    return out


# ---------------------------------------------------------------- the record's revision fields


def number(record: dict) -> int:
    """A record's revision number; records written before revisions existed are revision 1."""
    return _record.of(record).revision


def same_revision(revision: dict, identity: dict) -> bool:
    return all(revision.get(k) == v for k, v in identity.items() if k not in NOT_REVISION)


def as_previous(record: dict, identity_keys) -> dict:
    """The current revision of `record` as `previous` keeps it."""
    out = {k: record.get(k) for k in identity_keys}
    out.update((k, record.get(k)) for k in KEPT)
    out["revision"] = number(record)
    return out


def advance(old: dict | None, identity: dict, rollback: bool, new_program: bool = True) -> dict:
    """The revision fields of the record that replaces `old` with a program of `identity`.

    The same revision again (a re-attach after a drift, a rebuilt object of the
    same program) keeps its number and its previous; putting `previous` back
    swaps the two and marks the rollback; anything else is a new revision.
    """
    if not old:
        return _record.stored(revision=1, previous=None, rolled_back=False)
    old = _record.of(old)
    previous = old.previous
    if same_revision(old, identity) or (not new_program and not rollback):
        return _record.stored(revision=old.revision, previous=previous, rolled_back=old.rolled_back)
    if rollback and previous and same_revision(previous, identity):
        return _record.stored(revision=previous.revision, previous=as_previous(old, identity), rolled_back=True)
    top = max(old.revision, previous.revision if previous else 0)
    return _record.stored(revision=top + 1, previous=as_previous(old, identity), rolled_back=False)


def shape(record: dict | None, placement_key: str = "mode") -> dict | None:
    """A revision as results and facts show it (the current one of a record, or a kept `previous`)."""
    if not record:
        return None
    record = _record.of(record)
    return {"number": record.revision, "object": record.get("object"), "object_sha256": record.get("object_sha256"),
            "program": record.program_name, "section": record.get("section"),
            "constants": record.get("constants") or {},
            placement_key: record.placement, "rolled_back": record.rolled_back}


def report(record: dict, placement_key: str = "mode") -> dict:
    """The `revision` and `previous_revision` of an attachment our record describes."""
    return {"revision": shape(record, placement_key), "previous_revision": shape(_record.of(record).previous,
                                                                                 placement_key)}


def preview(old: dict | None, identity: dict, rollback: bool, program_name: str, mode: str | None,
            placement_key: str = "mode") -> dict:
    """Check mode: the revisions a run would leave."""
    record = dict(identity, **_record.stored(program_name=program_name, placement=mode),
                  **advance(old, identity, rollback))
    return report(record, placement_key)


def referenced(record: dict | None) -> set[str]:
    """The object digests a record needs in the store: its current and its previous revision's."""
    if not record:
        return set()
    digests = {record.get("object_sha256"), (record.get("previous") or {}).get("object_sha256")}
    return {d for d in digests if d}


# ---------------------------------------------------------------- the object store


class ObjectStore:
    """Objects by digest, with the records that reference each (see the module docstring)."""

    def __init__(self, directory: str):
        self.directory = directory

    def path(self, digest: str) -> str:
        return _names.join_under(self.directory, _checked_digest(digest) + ".o")

    def _refs(self, digest: str) -> str:
        return _names.join_under(self.directory, _checked_digest(digest) + ".refs")

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        # Many lab hosts (namespaces) of one machine share the store: one change at a time. The store is code
        # the kernel will run: its directory is checked to be the module user's alone (host/files).
        self.check()
        with os.fdopen(_files.open_lock(os.path.join(self.directory, ".lock")), "w") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def keep(self, source: str, digest: str, owner: str, data: bytes | None = None) -> None:
        """Have the object `digest` (copied from source, or data: its bytes as loaded, unless there) referenced
        by the record at `owner`."""
        with self._locked():
            self._copy(source, digest, data)
            self._reference(digest, owner)

    def keep_if_unchanged(self, source: str | None, digest: str | None, owner: str) -> None:
        """Reference `digest` for `owner`; copy it from source only when source still has that digest (a
        revision recorded before the store existed)."""
        if not digest:
            return
        with self._locked():
            if not os.path.isfile(self.path(digest)):
                if not source or not os.path.isfile(source) or sha256_file(source) != digest:
                    return
                self._copy(source, digest)
            self._reference(digest, owner)

    def check(self, make: bool = True) -> None:
        """Refuse (RevisionError) a store directory another user owns or can write, or a link; make it (0700)
        when missing (make=False: a missing one is fine, nothing is made: check mode's question)."""
        try:
            if make:
                os.close(_files.open_directory(self.directory, 0o700))
            else:
                _files.trusted_directory(self.directory, "object store")
        except _files.UnsafePathError as exc:
            raise RevisionError("object store %s is not trusted: %s; nothing was changed" % (
                self.directory, str(exc).replace("refusing to write in %s: " % os.path.abspath(self.directory), "")
                .replace("object store %s is not trusted: " % self.directory, ""))) from None

    def verified(self, digest: str, what: str) -> bytes:
        """The bytes kept as `digest`, checked before anything of them is loaded: the store is the module
        user's alone, the entry a file of that user's that no one else can write (not a link), and its bytes
        hash to the digest it is named by. RevisionError naming `what` (a revision, the attached program)
        otherwise."""
        try:
            _files.trusted_directory(self.directory, "object store")
        except _files.UnsafePathError as exc:
            raise RevisionError("%s cannot be loaded from the object store: %s; nothing was changed" % (what, exc)) \
                from None
        data = _files.read_trusted(self.path(digest))
        if data is None:
            raise RevisionError("%s cannot be loaded: %s is missing, a link, or a file another user owns or can "
                                "write; nothing was changed" % (what, self.path(digest)))
        found = hashlib.sha256(data).hexdigest()
        if found != digest:
            raise RevisionError("%s cannot be loaded: %s holds an object whose sha256 is %s, not the %s it is kept "
                                "as (the object store was changed by something other than ebpf.xdp); nothing was "
                                "changed" % (what, self.path(digest), found, digest))
        return data

    def _copy(self, source: str, digest: str, data: bytes | None = None) -> None:
        target = self.path(digest)
        kept = _files.read_trusted(target)
        if kept is not None and hashlib.sha256(kept).hexdigest() == digest:
            return
        if data is None:
            with open(source, "rb") as src:
                data = src.read()
        if hashlib.sha256(data).hexdigest() != digest:
            raise RevisionError("object %s changed while it was copied into the object store %s; run the task "
                                "again" % (source, self.directory))
        _files.write_atomically(target, data, 0o600, 0o700)

    def _reference(self, digest: str, owner: str) -> None:
        refs = self._refs(digest)
        ref_path = os.path.join(refs, _ref_name(owner))
        # A lock file (open_lock: no link followed, a checked directory) whose content names its record.
        fd = _files.open_lock(ref_path, 0o700)
        try:
            os.ftruncate(fd, 0)
            os.write(fd, owner.encode("utf-8"))
            fcntl.flock(fd, fcntl.LOCK_SH)
        except BaseException:
            os.close(fd)
            raise
        with contextlib.suppress(OSError):
            os.close(_in_flight.pop(ref_path, -1))
        _in_flight[ref_path] = fd

    def recorded(self, owner: str) -> None:
        """The record at `owner` is written (or gone): its references are no longer in flight."""
        name = _ref_name(owner)
        for ref_path in [p for p in _in_flight if os.path.basename(p) == name]:
            os.close(_in_flight.pop(ref_path))

    def release(self, digests, owner: str) -> None:
        """The record at `owner` no longer needs `digests`: drop its references and collect the store (at the
        end of releases_deferred, within one)."""
        if _deferred is not None:
            _deferred.append((self, set(digests), owner))
            return
        if not os.path.isdir(self.directory):
            return
        with self._locked():
            for digest in digests:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(os.path.join(self._refs(digest), _ref_name(owner)))
            self._collect(set(digests))

    def _collect(self, touched: set[str]) -> None:
        """Remove objects no live record references. The touched digests' references are checked against
        their records; the others' only for records that are gone, which costs a stat each."""
        for name in os.listdir(self.directory):
            digest = name[:-2]
            if not is_digest_object(name):
                continue  # not ours: a store pointed at a directory that holds other files leaves them alone
            refs = self._refs(digest)
            owners = os.listdir(refs) if os.path.isdir(refs) else []
            for ref in owners:
                ref_path = os.path.join(refs, ref)
                if not _still_referenced(ref_path, digest, deep=digest in touched):
                    os.unlink(ref_path)
            if not os.path.isdir(refs) or not os.listdir(refs):
                os.unlink(self.path(digest))
                if os.path.isdir(refs):
                    os.rmdir(refs)

    def digests(self) -> list[str]:
        if not os.path.isdir(self.directory):
            return []
        return sorted(n[:-2] for n in os.listdir(self.directory) if is_digest_object(n))


def is_digest(value) -> bool:
    """A sha256 digest as the store names objects by it: 64 lowercase hex digits."""
    return isinstance(value, str) and len(value) == 64 and all(c in "0123456789abcdef" for c in value)


def _checked_digest(digest) -> str:
    if not is_digest(digest):
        raise RevisionError("%r is not a sha256 digest (64 lowercase hex digits): the object store names objects "
                            "by their digest and nothing else" % (digest,))
    return digest


def is_digest_object(name: str) -> bool:
    """<64 hex digits>.o: an object the store keeps."""
    return len(name) == 66 and name.endswith(".o") and is_digest(name[:64])


def _ref_name(owner: str) -> str:
    return hashlib.sha256(owner.encode("utf-8")).hexdigest()[:32]


# The references this process wrote whose records are not written yet: path -> descriptor holding the lock.
_in_flight: dict[str, int] = {}


def _held_by_a_run(ref_path: str) -> bool:
    """A run between writing this reference and writing its record holds a shared lock on it."""
    try:
        fd = os.open(ref_path, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def _still_referenced(ref_path: str, digest: str, deep: bool) -> bool:
    return _names_it(ref_path, digest, deep) or _held_by_a_run(ref_path)


def _names_it(ref_path: str, digest: str, deep: bool) -> bool:
    try:
        with open(ref_path) as handle:
            owner = handle.read()
    except OSError:
        return False
    if not os.path.exists(owner):
        return False
    if not deep:
        return True
    try:
        return digest in referenced(_pins.Record(owner).read())
    except (EbpfXdpError, OSError):
        return True  # unreadable now: keep the object rather than lose a revision


# The releases waiting for the end of releases_deferred (None outside it).
_deferred: list[tuple[ObjectStore, set[str], str]] | None = None


@contextlib.contextmanager
def releases_deferred() -> Iterator[None]:
    """Within: the store lets go of nothing until the end, and then only of what each owner's record, read
    then, no longer names. A run that puts records back after a failure (datapath's) thereby keeps the
    objects of the revisions it put back, which an upgrade on the way had released."""
    global _deferred  # pylint: disable=global-statement
    if _deferred is not None:
        yield  # an outer one releases
        return
    _deferred = []
    try:
        yield
    finally:
        waiting, _deferred = _deferred, None
        for store, digests, owner in waiting:
            try:
                still = referenced(_pins.Record(owner).read())
            except (EbpfXdpError, OSError):
                continue  # unreadable now: keep the objects rather than lose a revision
            store.release(digests - still, owner)


class Keeper:
    """The store as the converger uses it for one record: keep what it references, release what it left."""

    def __init__(self, directory: str | None, owner: str | None):
        self.store = ObjectStore(directory) if directory and owner else None
        self.owner = owner

    def keep(self, source: str, record: dict, data: bytes | None = None) -> None:
        """Before the swap: the object of the revision being attached (data: its bytes as loaded), and its
        previous one's (where it can)."""
        if not self.store or not record.get("object_sha256"):
            return  # a bcc source has no object to keep
        self.store.keep(source, record["object_sha256"], self.owner, data)
        previous = record.get("previous") or {}
        self.store.keep_if_unchanged(previous.get("object"), previous.get("object_sha256"), self.owner)

    def release(self, old: dict | None, new: dict | None) -> None:
        """After the record is written (or removed): let go of what `old` referenced and `new` does not."""
        if self.store:
            self.store.release(referenced(old) - referenced(new), self.owner)
            self.store.recorded(self.owner)
