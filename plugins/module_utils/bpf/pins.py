# -*- coding: utf-8 -*-
# Copyright (c) ebpf.xdp contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""bpffs layout, ownership records and locks.

Private to the ebpf.xdp collection: the interface may change without notice.

The layout, spelled out here and nowhere else. Under the pin root (default
/sys/fs/bpf/ebpf_xdp), one directory per network namespace, because several
lab hosts share one bpffs:

    <pin_root>/<netns>/<ifname>/<hook>/     one attachment (hook: xdp, tc_ingress, tc_egress: each hook adapter
                                            names its own, HOOK_DIRS)
    <pin_root>/<netns>/<ifname>/<hook>@<name>/
                                            a named attachment (option name): one more on the same hook, beside
                                            the unnamed one and each other, with the same contents
        prog                                the attached program
        link                                its bpf_link, when a link holds it
        owner                               the ownership record
        maps/<name>                         the program's maps, reused on reload
    <pin_root>/<netns>/shared_maps/<set>/   a map set that attachments share (option shared_maps: <set>)
        <name>                              the maps, pinned by name instead of each attachment's maps/
        groups/<id>/                        a multicast group (ebpf.xdp.devmap_group) in the set's maps:
            owner                           its record (id, name, egress program)
            prog                            its devmap egress program, when it has one

An attachment's name is [a-z0-9_-] (ATTACHMENT_NAME): bpffs refuses '.' in
a name, and '@' is in no name, so a directory names its hook and attachment
without ambiguity. The unnamed attachment keeps the directory it always had.

A map set lives as long as an attachment's record names it: state absent on
the last one removes it (and the groups in it), unless keep_maps. An
interface called shared_maps would have its hooks next to the sets; nothing
else there is ambiguous, since a set name is one path component.
Other things the collection owns get a PinDir of their own under
<pin_root>/<netns>/ with their own record. bpffs holds only BPF objects, so a Record is a pinned one-entry BPF
array whose value is a small JSON document: the state stays in bpffs and
disappears with it (on reboot), never out of step with the kernel.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import glob
import json
import os
import shutil
import time
from typing import Iterator

from ansible_collections.ebpf.xdp.plugins.module_utils.host import files as _files, names as _names, session as _session
from ansible_collections.ebpf.xdp.plugins.module_utils.bpf import libbpf as _bpf, record as _record
from ansible_collections.ebpf.xdp.plugins.module_utils._errors import EbpfXdpError

BPFFS_MOUNT = "/sys/fs/bpf"
DEFAULT_PIN_ROOT = BPFFS_MOUNT + "/ebpf_xdp"
BPF_FS_MAGIC = 0xCAFE4A11
LOCK_DIR = "/run/ebpf_xdp/locks"
RECORD_SIZE = 4096
RECORD_VERSION = _record.VERSION
MANAGED_BY = "ebpf.xdp"


class PinError(EbpfXdpError):
    pass


_libc = None


def filesystem_magic(path: str) -> int:
    """f_type of the filesystem holding path (statvfs does not expose it)."""
    global _libc  # pylint: disable=global-statement
    if _libc is None:  # loaded once: a CDLL per call was most of a check (each entry of a task checks)
        _libc = ctypes.CDLL(None, use_errno=True)
    buf = ctypes.create_string_buffer(256)
    if _libc.statfs(path.encode(), buf) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), path)
    return ctypes.c_long.from_buffer(buf).value & 0xFFFFFFFF


def check_bpffs(pin_root: str) -> None:
    """Fail unless pin_root is (or would be created) on a bpffs mount."""
    probe = _names.check_absolute(pin_root, "pin_root")  # a relative one never reaches / below
    while not os.path.exists(probe) and probe != "/":
        probe = os.path.dirname(probe)
    if filesystem_magic(probe) != BPF_FS_MAGIC:
        raise PinError(
            "%s is not on a BPF filesystem (bpffs); mount it with "
            "'mount -t bpf bpf /sys/fs/bpf' or apply the ebpf.xdp.toolchain role" % pin_root)


# Each kind of hook -> the directories of an interface that hold one attachment of it each: filled by the
# converger's adapters as they register (hooks/converge.register, HookAdapter.hook_dirs), so that a new hook
# brings its own.
HOOK_DIRS: dict[str, tuple[str, ...]] = {}


def add_hook_dirs(kind: str, directories: tuple[str, ...]) -> None:
    """A kind of hook's attachment directories; a directory is one kind's only."""
    taken = {name: other for other, names in HOOK_DIRS.items() if other != kind for name in names}
    clash = [name for name in directories if name in taken]
    if clash or not directories:
        raise ValueError("hook kind %r: attachment directories %r (taken: %r)" % (kind, directories, clash))
    HOOK_DIRS[kind] = tuple(directories)


def attachment_dirs() -> tuple[str, ...]:
    """Every registered hook's unnamed attachment directories, in the order the hooks registered."""
    return tuple(name for names in HOOK_DIRS.values() for name in names)


# What names one of several attachments on a hook (option name), and what joins it to the hook's directory.
ATTACHMENT_NAME = _names.ATTACHMENT_NAME
NAMED = "@"


def check_attachment_name(name: str) -> None:
    """A name an attachment directory can carry (see the module docstring); BadNameError saying what is
    allowed."""
    _names.check_attachment(name)


def hook_dir(kind: str, direction: str | None = None, name: str | None = None) -> str:
    """The attachment directory of a kind of hook (tc: and a direction), and of one named attachment on it."""
    hook = "%s_%s" % (kind, direction) if direction else kind
    return hook + NAMED + name if name else hook


def split_hook_dir(directory: str) -> tuple[str, str | None]:
    """(the hook's directory, the attachment's name or None) of an attachment directory's name."""
    hook, named, name = directory.partition(NAMED)
    return hook, (name if named else None)


def hook_kind(directory: str) -> str | None:
    """The kind of hook an attachment directory is of (named or not); None for any other directory."""
    hook, name = split_hook_dir(directory)
    if name is not None and not ATTACHMENT_NAME.fullmatch(name):
        return None
    return next((kind for kind, names in HOOK_DIRS.items() if hook in names), None)


# What the host session keeps of bpffs (see _session.forget): the pin directories in a directory (an
# interface's attachments, a map set's groups), listed once per task until this run makes or removes one.
PIN_DIRS = "pin_dirs"
# What a map set's maps say of its groups (maps/devmap's SetState), read once per task until this run writes
# to a map (a group's writes, a map entry's).
MAP_SET_STATE = "map_set"
# The generation of a map set's lock (HeldLock) when this run first read the set: under the lock, what it read
# then is read again only when another run has changed the set since.
MAP_SET_GENERATION = "map_set_generation"


def hook_attachments(pin_root: str, interface_dir: str, hook: str) -> dict[str | None, PinDir]:
    """Every attachment directory of one hook (e.g. tc_ingress) in an interface's directory, by name (None: the
    unnamed one); only those that exist. Listed once per host session (the tc adapter asks for a hook's other
    attachments at each look and at each placement), until a pin directory is made or removed."""
    def listing() -> dict[str | None, str]:
        found = {}
        for entry in sorted(os.listdir(interface_dir)) if os.path.isdir(interface_dir) else []:
            base, name = split_hook_dir(entry)
            if base == hook and (name is None or ATTACHMENT_NAME.fullmatch(name)) \
                    and os.path.isdir(os.path.join(interface_dir, entry)):
                found[name] = os.path.join(interface_dir, entry)
        return found

    listed = _session.dump((PIN_DIRS, interface_dir, hook), listing)
    return {name: PinDir(pin_root, directory) for name, directory in listed.items()}


def made_or_removed_dirs() -> None:
    """This run made or removed pin directories: the directories' listings are read again."""
    _session.forget(PIN_DIRS)


def wrote_map_sets() -> None:
    """This run wrote to a map (a group's maps, a map entry): a map set's groups are read again."""
    _session.forget(MAP_SET_STATE)


def attachment_dir(pin_root: str, netns_key: str, ifname: str, hook: str) -> str:
    return _names.join_under(pin_root, netns_key, _names.check_interface(ifname), hook)


SHARED_MAPS = "shared_maps"


def shared_maps_dir(pin_root: str, netns_key: str, name: str) -> str:
    """Where the map set `name` is pinned (BadNameError for a name that is no map set's)."""
    return _names.join_under(pin_root, netns_key, SHARED_MAPS, _names.check_map_set(name))


def shared_maps_named(directory: str) -> tuple[str, str]:
    """(netns key, set name) of a map set's directory: shared_maps_dir's inverse."""
    netns_dir, name = os.path.split(os.path.normpath(directory))
    return os.path.basename(os.path.dirname(netns_dir)), name


def shared_maps_users(pin_root: str, netns_key: str, name: str) -> list[str]:
    """The attachment directories whose ownership record names the map set `name`."""
    users = []
    netns_dir = os.path.join(pin_root, netns_key)
    for owner in sorted(glob.glob(os.path.join(glob.escape(netns_dir), "*", "*", "owner"))):
        try:
            record = Record(owner).read()
        except (PinError, OSError):
            continue  # not ours to judge; it does not keep the set either way
        if record and record.get("shared_maps") == name:
            users.append(os.path.dirname(owner))
    return users


def generic_xdp_users(pin_root: str, netns_key: str, name: str) -> list[str]:
    """The interfaces whose XDP attachment (named or not) of the map set `name` runs in generic mode."""
    ports = []
    for directory in shared_maps_users(pin_root, netns_key, name):
        if split_hook_dir(os.path.basename(directory))[0] != hook_dir("xdp"):
            continue
        record = Record(os.path.join(directory, "owner")).read()
        if record and record.placement == "generic":
            ports.append(os.path.basename(os.path.dirname(directory)))
    return sorted(set(ports))


def groups_with_egress(set_dir: str) -> list[str]:
    """The groups (by name, else id) of the map set pinned at set_dir that have a devmap egress program."""
    found = []
    for owner in sorted(glob.glob(os.path.join(glob.escape(set_dir), "groups", "*", "owner"))):
        try:
            record = Record(owner).read()
        except (PinError, OSError):
            continue
        if record and record.get("egress"):
            found.append(str(record.get("name") or record.get("id")))
    return found


def shared_maps_lock(name: str) -> str:
    """The lock (see lock()) of the map set `name`: ':' is in no interface name."""
    return SHARED_MAPS + ":" + name


def release_shared_maps(pin_root: str, netns_key: str, name: str) -> bool:
    """Remove the map set `name` (groups included) when no attachment names it any more; True if removed.

    Takes the set's lock: an attachment loading into the set meanwhile keeps it.
    """
    directory = shared_maps_dir(pin_root, netns_key, name)
    with lock(netns_key, shared_maps_lock(name)):
        if not os.path.isdir(directory) or shared_maps_users(pin_root, netns_key, name):
            return False
        shutil.rmtree(directory)
    prune_empty(os.path.dirname(directory), pin_root)
    return True


# Where a record holds an object's digest (the object store names files by it): its own revision's, the previous
# revision's, a devmap group's egress program's.
DIGEST_PLACES = ((), ("previous",), ("egress",))


def check_record(record, path: str) -> dict:
    """record, when this collection wrote it (managed_by), in a version it reads, its fields of the types this
    collection writes (bpf/record) and digests that are digests (a record's digest becomes a file name in the
    object store); else PinError saying which and what to do."""
    if not isinstance(record, dict) or record.get("managed_by") != MANAGED_BY:
        raise PinError("ownership record %s was not written by %s (managed_by %r): the program there is not this "
                       "collection's; remove the record by hand if it should be"
                       % (path, MANAGED_BY, record.get("managed_by") if isinstance(record, dict) else record))
    version = record.get("version")
    if isinstance(version, bool) or not isinstance(version, int) or not 1 <= version <= RECORD_VERSION:
        raise PinError("ownership record %s has version %r; this collection reads version 1 to %d (a newer "
                       "ebpf.xdp wrote it? use that one)" % (path, version, RECORD_VERSION))
    for place in DIGEST_PLACES:
        holder = record
        for key in place:
            holder = holder.get(key) if isinstance(holder, dict) else None
        if holder is None:
            continue
        if not isinstance(holder, dict) or not _is_digest_or_none(holder.get("object_sha256")):
            raise PinError("ownership record %s: %s %r is not a sha256 digest (64 lowercase hex digits); it was not "
                           "written by this collection, remove it by hand"
                           % (path, ".".join(place + ("object_sha256",)),
                              holder.get("object_sha256") if isinstance(holder, dict) else holder))
    wrong = _record.wrong_types(record)
    if wrong:
        raise PinError("ownership record %s: %s is not of a type this collection writes there; it was not written "
                       "by this collection, remove it by hand" % (path, ", ".join(wrong)))
    return record


def _is_digest_or_none(value) -> bool:
    return value is None or (isinstance(value, str) and len(value) == 64 and not value.strip("0123456789abcdef"))


class Record:
    """An ownership record pinned at one path: a dict, stored as JSON in a one-entry array."""

    def __init__(self, path: str):
        self.path = path

    def exists(self) -> bool:
        return os.path.exists(self.path)

    def read(self) -> _record.OwnershipRecord | None:
        """The record, or None when there is none; PinError for one this collection did not write (see
        check_record). Within a host session read from bpffs once (see _session): kept with its pin's inode, so
        that a pin removed or replaced is read again."""
        session = _session.active()
        if session is None:
            return self._decode(self._read_value())
        try:
            pin = os.stat(self.path)
        except FileNotFoundError:
            return None
        stamp = (pin.st_ino, pin.st_ctime_ns)
        kept = session.records.get(self.path)
        if kept is None or kept[0] != stamp:
            kept = session.records[self.path] = (stamp, self._read_value())
            session.reads[("record", self.path)] += 1
        return self._decode(kept[1])

    def _read_value(self) -> bytes | None:
        _session.count("record", "read")
        return _bpf.pinned_value(self.path, b"\0\0\0\0", RECORD_SIZE)

    def _decode(self, raw: bytes | None) -> _record.OwnershipRecord | None:
        """A new dict on every call (callers may change theirs)."""
        if raw is None:
            return None
        try:
            # Up to the first NUL (JSON has none): bytes.rstrip(b"\0") over the 4 KiB value takes 17 us, and the
            # exporter reads a record per program on every scrape.
            record = json.loads(raw.split(b"\0", 1)[0].decode("utf-8"))
        except ValueError:
            raise PinError("ownership record %s is not readable JSON" % self.path)
        return _record.OwnershipRecord(check_record(record, self.path))

    @staticmethod
    def encode(record: dict) -> bytes:
        """The record as stored; fails before anything changes when it would not fit."""
        data = json.dumps(dict(record, managed_by=MANAGED_BY, version=RECORD_VERSION),
                          sort_keys=True).encode("utf-8")
        if len(data) >= RECORD_SIZE:
            raise PinError("ownership record too large (%d of %d bytes): fewer maps or constants, "
                           "or a shorter pin_root" % (len(data), RECORD_SIZE))
        return data

    def write(self, record: dict) -> None:
        data = self.encode(record)
        if self.exists():
            record_map = _bpf.Map.from_pin(self.path)
        else:
            record_map = _bpf.Map.create(_bpf.BPF_MAP_TYPE_ARRAY, "ebpf_xdp_owner", 4, RECORD_SIZE, 1)
        with record_map:
            if not self.exists():
                record_map.pin(self.path)
            record_map.update(b"\0\0\0\0", data)
        session = _session.active()
        if session is not None:  # what this run wrote, it knows without reading it back
            pin = os.stat(self.path)
            session.records[self.path] = ((pin.st_ino, pin.st_ctime_ns), data)

    def remove(self) -> None:
        if self.exists():
            os.unlink(self.path)


class PinDir:
    """A directory of pins the collection owns: prog, link, owner record and maps/."""

    def __init__(self, pin_root: str, directory: str):
        self.pin_root = pin_root
        self.directory = directory
        self.prog_path = os.path.join(directory, "prog")
        self.link_path = os.path.join(directory, "link")
        self.maps_dir = os.path.join(directory, "maps")
        self.record = Record(os.path.join(directory, "owner"))

    @classmethod
    def for_hook(cls, pin_root: str, netns_key: str, ifname: str, hook: str) -> PinDir:
        return cls(pin_root, attachment_dir(pin_root, netns_key, ifname, hook))

    def exists(self) -> bool:
        return os.path.isdir(self.directory)

    def has_link(self) -> bool:
        return os.path.exists(self.link_path)

    def open_link(self) -> _bpf.Link:
        return _bpf.Link.from_pin(self.link_path)

    def holds(self, prog_id: int, map_ids: list[int], map_set: str | None = None) -> bool:
        """Whether the pins here prove the program ours, record or not: our pinned link holds it, or it uses a
        map pinned in our own maps/, or in map_set, the directory of the map set our record names (only a load
        through these pins shares them: a map set's migration stopped after its swap)."""
        if not self.exists():
            return False
        if self.has_link():
            with self.open_link() as link:
                if link.info()["prog_id"] == prog_id:
                    return True
        for maps_dir in (self.maps_dir, map_set):
            if maps_dir and os.path.isdir(maps_dir):
                for name in os.listdir(maps_dir):
                    with _bpf.Map.from_pin(os.path.join(maps_dir, name)) as pinned:
                        if pinned.info["id"] in map_ids:
                            return True
        return False

    def make(self, maps: bool = True) -> list[str]:
        """Create the directories (maps/ too unless the maps live elsewhere); return those that did not
        exist, deepest first (see undo)."""
        return make_dirs(self.maps_dir if maps else self.directory)

    @staticmethod
    def undo(created: list[str]) -> None:
        """Remove what a failed first attach made (maps libbpf pinned included)."""
        made_or_removed_dirs()
        for path in created:
            if os.path.basename(path) == "maps" and os.path.isdir(path):
                for name in os.listdir(path):
                    os.unlink(os.path.join(path, name))
            if os.path.isdir(path) and not os.listdir(path):
                os.rmdir(path)

    @staticmethod
    def replace_pin(obj: _bpf.Fd, path: str) -> None:
        """Point the pin at path to obj (bpffs cannot rename over an existing pin)."""
        if os.path.exists(path):
            os.unlink(path)
            if os.path.basename(path) == "link":
                _session.wrote_hook(None)  # a link unpinned and not held elsewhere leaves its hook
        obj.pin(path)

    def detach_link(self) -> None:
        """Detach the pinned link now and drop its pin.

        Unpinning alone releases the link later, so an attach right after it
        could still find the old program in place.
        """
        if not self.has_link():
            return
        with self.open_link() as link:
            link.detach()
        os.unlink(self.link_path)

    def remove(self, keep_maps: bool = False) -> None:
        """Detach the link, remove the pins and prune empty parents up to the pin root."""
        self.detach_link()
        if os.path.exists(self.prog_path):
            os.unlink(self.prog_path)
        self.record.remove()
        if not keep_maps and os.path.isdir(self.maps_dir):
            shutil.rmtree(self.maps_dir)
        prune_empty(self.directory, self.pin_root)


def make_dirs(directory: str) -> list[str]:
    """Create directory and its missing parents; return those created, deepest first."""
    created = []
    path = directory
    while not os.path.isdir(path):
        created.append(path)
        path = os.path.dirname(path)
    if created:
        made_or_removed_dirs()
    for path in reversed(created):
        os.mkdir(path, 0o700)
    return created


def prune_empty(path: str, stop: str) -> None:
    """Remove path and its parents while they are empty (or already gone), stopping below `stop`."""
    stop = os.path.normpath(stop)
    path = os.path.normpath(path)
    made_or_removed_dirs()
    while path.startswith(stop + os.sep):
        try:
            os.rmdir(path)
        except OSError as exc:
            if exc.errno in (errno.ENOTEMPTY, errno.EEXIST):
                return
            if exc.errno != errno.ENOENT:
                raise
        path = os.path.dirname(path)


def lock_path(netns_key: str, name: str) -> str:
    return _names.join_under(LOCK_DIR, netns_key, name + ".lock")


def _generation(data: bytes) -> int | None:
    """A lock file's generation: 0 for an empty one (no run has advanced it), None for what no run writes."""
    text = data.strip()
    if not text:
        return 0
    return int(text) if text.isdigit() else None


class HeldLock:
    """A lock this run holds (lock()), and its generation: a count in the lock file that each run which changes
    the locked thing advances before it lets go, so that a run which read the thing before taking the lock can
    tell, under it, whether another run changed it since (lock_generation() then, generation() now)."""

    def __init__(self, fd: int):
        self.fd = fd

    def generation(self) -> int | None:
        return _generation(os.pread(self.fd, 64, 0))

    def advance(self) -> int:
        """This run changed the locked thing: the generation it leaves behind."""
        value = (self.generation() or 0) + 1
        data = b"%d\n" % value
        os.pwrite(self.fd, data, 0)
        os.ftruncate(self.fd, len(data))
        return value


def lock_generation(netns_key: str, name: str) -> int | None:
    """A lock's generation read without taking it (see HeldLock): 0 for a lock no run has taken, None for one
    that cannot be read (what is read under the lock then counts as changed). Creates nothing."""
    try:
        fd = os.open(lock_path(netns_key, name), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return 0
    except OSError:
        return None
    try:
        return _generation(os.pread(fd, 64, 0))
    finally:
        os.close(fd)


# The locks this process holds, (netns_key, name) in the order taken: taking one again yields the same HeldLock (a
# map set's migration locks every interface of the set before its converger asks for its mates'), and a file beside
# each lock (HOLDER), while it is held, says who holds it and what else (`_holder`), for the message of a run that
# waits too long.
_HELD: dict[tuple[str, str], HeldLock] = {}
HOLDER = "%s.holder"


def lock_label(name: str) -> str:
    """A lock's name in words: an interface, a map set, or what else it serialises."""
    if name.startswith(SHARED_MAPS + ":"):
        return "map set %s" % name.split(":", 1)[1]
    if ":" in name or name.startswith("map-"):
        return "lock %s" % name
    return "interface %s" % name


def _holder() -> str:
    """What a lock file says of the run that holds it: its process and the locks it held when it took this one."""
    held = ", ".join(lock_label(name) for _key, name in list(_HELD)[:-1])
    return "pid %d%s" % (os.getpid(), ", which holds %s too" % held if held else "")


def _note_holder(path: str) -> None:
    fd = _files.open_lock(HOLDER % path)
    try:
        data = _holder().encode()
        os.pwrite(fd, data, 0)
        os.ftruncate(fd, len(data))
    finally:
        os.close(fd)


def _holder_of(path: str) -> str:
    try:
        fd = os.open(HOLDER % path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return "a run that did not say who it is"
    try:
        return os.pread(fd, 512, 0).decode(errors="replace").strip() or "a run that did not say who it is"
    finally:
        os.close(fd)


@contextlib.contextmanager
def lock(netns_key: str, name: str, timeout: float | None = None) -> Iterator[HeldLock]:
    """Serialise changes to one thing (an interface, a group) across concurrent module runs; with timeout, a
    PinError after that many seconds instead of waiting on (a run that holds other locks and must not wait for
    ever on one more), which names the lock and the run that holds it. Yields the HeldLock, for what its
    generation tells. A lock this process holds already is held on (the same HeldLock). Runs that take several
    take them in one order: a map set's lock before any interface's, and interfaces by name (see
    lock_set_and_interfaces)."""
    if (netns_key, name) in _HELD:
        yield _HELD[(netns_key, name)]
        return
    path = lock_path(netns_key, name)
    # Root's only, like the pins: whoever can open a lock can hold it and stall every run; and never opened
    # through a link (O_NOFOLLOW, in a directory checked to be root's alone: host/files).
    with os.fdopen(_files.open_lock(path), "r+") as handle:
        if timeout is None:
            fcntl.flock(handle, fcntl.LOCK_EX)
        else:
            deadline = time.monotonic() + timeout
            while True:
                try:
                    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        holder = _holder_of(path)
                        raise PinError("%s has been held for %.0f s by another run (%s), and this run, holding %s, "
                                       "waits for it; nothing was changed, run again once it is over" % (
                                           lock_label(name), timeout, holder,
                                           ", ".join(lock_label(n) for _k, n in _HELD) or "nothing")) from None
                    time.sleep(0.05)
        # What the session read before the lock stands (see host/session: read once per task, forgotten
        # per hook when written), unless the lock's generation says otherwise to whoever asks it.
        try:
            held = _HELD[(netns_key, name)] = HeldLock(handle.fileno())
            _note_holder(path)
            yield held
        finally:
            _HELD.pop((netns_key, name), None)
            # Gone with the hold (removed while still held: the next holder writes its own), so that a run leaves
            # no trace of itself in /run but its locks.
            with contextlib.suppress(OSError):
                os.unlink(HOLDER % path)
            fcntl.flock(handle, fcntl.LOCK_UN)


def lock_set_and_interfaces(locks: contextlib.ExitStack, pin_root: str, netns_key: str, ifname: str,
                            shared: str | None, timeout: float | None = None) -> None:
    """Take, into locks, what a run on ifname needs in the one order every run takes them: the map set's lock
    first (when it names one), then the interface's and those of the set's other attachments, by name (their
    migration moves them too); the others' with timeout. A run on another attachment of the set waits for the
    set's lock before it holds anything, so two runs never hold one lock each of two that both need."""
    names = {ifname}
    if shared:
        locks.enter_context(lock(netns_key, shared_maps_lock(shared)))
        # Who is in the set is read under its lock: an attachment joins it only under that lock.
        names.update(os.path.basename(os.path.dirname(directory))
                     for directory in shared_maps_users(pin_root, netns_key, shared))
    for name in sorted(names):
        locks.enter_context(lock(netns_key, name, timeout=None if name == ifname else timeout))
