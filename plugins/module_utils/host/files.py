# -*- coding: utf-8 -*-
# Copyright (c) ebpf.xdp contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Files written whole, and never through a link: a reader finds the old file or the whole new one.

Private to the ebpf.xdp collection: the interface may change without notice.

The modules run as root, often in directories other users can reach (/tmp,
a textfile directory the prometheus user writes). So every file the
collection writes goes the same way:

- its directory is opened once (O_DIRECTORY | O_NOFOLLOW) and everything
  after is relative to that descriptor, so the directory cannot be swapped
  for a link between the check and the write;
- that directory must belong to the writing user and be writable by no one
  else, and every directory above it must belong to root or to that user and
  be writable by no one else unless it is sticky (/tmp): nobody else can
  rename or plant names in it;
- the file is made under a fresh name with O_CREAT | O_EXCL | O_NOFOLLOW (a
  name planted there, link or not, is never opened), given its mode with
  fchmod (the umask does not decide it), written, fsync'ed, renamed over the
  target, and the directory fsync'ed so the rename survives a crash;
- a target that is a symbolic link (or anything but a regular file) is
  refused rather than replaced.

Readers of what the collection keeps (caches, the object store) use
`trusted_directory` and `read_trusted`: the same rules for reading.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat

from ansible_collections.ebpf.xdp.plugins.module_utils._errors import EbpfXdpError

# Records, pcaps, caches: the writing user's alone unless a caller has a reader that needs more.
DEFAULT_MODE = 0o600
DEFAULT_DIR_MODE = 0o700
TEMPORARY_ATTEMPTS = 16
WRITE_BUFFER = 1 << 20


class UnsafePathError(EbpfXdpError):
    """A file the collection would write through a link, or in a directory someone else could change."""


def _token() -> str:
    return secrets.token_hex(6)


def _describe_untrusted(path: str, st: os.stat_result, uid: int) -> str | None:
    """Why a directory (or file) at path, as st says, is not the writing user's alone; None when it is."""
    if st.st_uid != uid:
        return "%s belongs to uid %d, not to uid %d that runs the module" % (path, st.st_uid, uid)
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return "%s is writable by its group or by others (mode %04o)" % (path, stat.S_IMODE(st.st_mode))
    return None


def _check_ancestors(directory: str, uid: int) -> None:
    """Every directory above `directory` (resolved) belongs to root or uid and only they can rename in it,
    unless it is sticky (/tmp): otherwise another user could put another directory in its place."""
    path = os.path.dirname(directory)
    while True:
        st = os.stat(path)
        if st.st_uid not in (0, uid):
            raise UnsafePathError("refusing to write in %s: %s above it belongs to uid %d, who could put another "
                                  "directory in its place" % (directory, path, st.st_uid))
        if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not st.st_mode & stat.S_ISVTX:
            raise UnsafePathError("refusing to write in %s: %s above it is writable by others (mode %04o) and not "
                                  "sticky, so another user could put another directory in its place"
                                  % (directory, path, stat.S_IMODE(st.st_mode)))
        if path == "/":
            return
        path = os.path.dirname(path)


def _make_dirs(directory: str, mode: int) -> None:
    """Make directory and any missing one above it, each with mode (less the umask, so never more open)."""
    parent = os.path.dirname(directory)
    if parent != directory and not os.path.isdir(parent):
        _make_dirs(parent, mode)
    try:
        os.mkdir(directory, mode)
    except FileExistsError:
        pass  # a concurrent run made it: it is checked like any other


def open_directory(directory: str, create_mode: int | None = DEFAULT_DIR_MODE) -> int:
    """A descriptor of `directory`, checked: a real directory (not a link), the writing user's, writable by
    no one else, under directories no one else can rename in. Missing directories are made with create_mode
    (None: a missing one is an error). UnsafePathError or OSError; the caller closes the descriptor."""
    directory = os.path.abspath(directory)
    if create_mode is not None and not os.path.isdir(directory):
        _make_dirs(directory, create_mode)
    uid = os.geteuid()
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR) and os.path.islink(directory):
            raise UnsafePathError("refusing to write in %s: it is a symbolic link (to %s); give the real "
                                  "directory" % (directory, os.readlink(directory))) from None
        raise
    try:
        why = _describe_untrusted(directory, os.fstat(fd), uid)
        if why:
            raise UnsafePathError("refusing to write in %s: %s; another user could replace what is written there "
                                  "(make it uid %d's and writable by it alone, or use another directory)"
                                  % (directory, why, uid))
        _check_ancestors(os.path.realpath(directory), uid)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _refuse_odd_target(dir_fd: int, name: str, path: str) -> None:
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(st.st_mode):
        raise UnsafePathError("refusing to write %s: it is a symbolic link (to %s); remove it or give the real path"
                              % (path, os.readlink(name, dir_fd=dir_fd)))
    if not stat.S_ISREG(st.st_mode):
        raise UnsafePathError("refusing to write %s: it exists and is not a regular file" % path)


class AtomicFile:
    """A file written in pieces into a fresh temporary file beside `path` and put in its place by commit()
    (discard() or an exception in a `with` block leaves the old file as it was). See the module docstring."""

    def __init__(self, path: str, mode: int = DEFAULT_MODE, dir_mode: int | None = DEFAULT_DIR_MODE):
        self.path = os.path.abspath(path)
        self.name = os.path.basename(self.path)
        self.dir_fd = open_directory(os.path.dirname(self.path), dir_mode)
        self.fd = -1
        self.temporary = None
        self._buffer = bytearray()
        try:
            _refuse_odd_target(self.dir_fd, self.name, self.path)
            self._create(mode)
        except BaseException:
            self.discard()
            raise

    def _create(self, mode: int) -> None:
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        for _attempt in range(TEMPORARY_ATTEMPTS):
            temporary = ".%s.%s.tmp" % (self.name, _token())
            try:
                self.fd = os.open(temporary, flags, 0o600, dir_fd=self.dir_fd)
            except FileExistsError:
                continue  # a leftover or a planted name: never opened, another name is tried
            self.temporary = temporary
            os.fchmod(self.fd, mode)
            return
        raise UnsafePathError("cannot write %s: %d temporary names in %s were all taken"
                              % (self.path, TEMPORARY_ATTEMPTS, os.path.dirname(self.path)))

    def write(self, data: bytes) -> None:
        self._buffer += data
        if len(self._buffer) >= WRITE_BUFFER:
            self._flush()

    def _flush(self) -> None:
        view = memoryview(self._buffer)
        while view:
            view = view[os.write(self.fd, view):]
        del view
        self._buffer.clear()

    def commit(self) -> None:
        """fsync the file, rename it over the target (refused if that became a link meanwhile), fsync the
        directory."""
        try:
            self._flush()
            os.fsync(self.fd)
            os.close(self.fd)
            self.fd = -1
            _refuse_odd_target(self.dir_fd, self.name, self.path)
            os.rename(self.temporary, self.name, src_dir_fd=self.dir_fd, dst_dir_fd=self.dir_fd)
            self.temporary = None
            os.fsync(self.dir_fd)
        finally:
            self.discard()

    def discard(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        if self.temporary is not None:
            try:
                os.unlink(self.temporary, dir_fd=self.dir_fd)
            except FileNotFoundError:
                pass
            self.temporary = None
        if self.dir_fd >= 0:
            os.close(self.dir_fd)
            self.dir_fd = -1

    def __enter__(self) -> AtomicFile:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.commit()
        else:
            self.discard()


def write_atomically(path: str, data: bytes, mode: int = DEFAULT_MODE,
                     dir_mode: int | None = DEFAULT_DIR_MODE) -> None:
    """Write data to path as a whole, never through a link, in a directory only the writing user can change
    (made with dir_mode if missing; None: it must exist). UnsafePathError or OSError."""
    with AtomicFile(path, mode, dir_mode) as out:
        out.write(data)


def open_lock(path: str, dir_mode: int = DEFAULT_DIR_MODE) -> int:
    """A descriptor of the lock file at path (made 0600 if missing) for flock, opened without following a link,
    in a checked directory. The caller closes it."""
    directory, name = os.path.split(os.path.abspath(path))
    dir_fd = open_directory(directory, dir_mode)
    try:
        fd = os.open(name, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnsafePathError("refusing to open the lock %s: it is a symbolic link" % path) from None
        raise
    finally:
        os.close(dir_fd)
    try:
        why = _describe_untrusted(path, os.fstat(fd), os.geteuid())
        if why or not stat.S_ISREG(os.fstat(fd).st_mode):
            raise UnsafePathError("refusing to use the lock %s: %s" % (path, why or "it is not a regular file"))
    except BaseException:
        os.close(fd)
        raise
    return fd


def trusted_directory(directory: str, what: str) -> None:
    """Refuse (UnsafePathError) a directory the collection reads code or objects from when it is not the
    running user's alone; a missing one is fine (nothing will be read from it)."""
    try:
        fd = open_directory(directory, create_mode=None)
    except FileNotFoundError:
        return
    except UnsafePathError as exc:
        raise UnsafePathError("%s %s is not trusted: %s" % (what, directory, str(exc).replace(
            "refusing to write in %s: " % os.path.abspath(directory), ""))) from None
    os.close(fd)


def read_trusted(path: str) -> bytes | None:
    """The bytes of a file the running user wrote and no one else can write, opened without following a link;
    None when it is missing or not such a file (a cache entry that is not ours is a miss, not an error)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or _describe_untrusted(path, st, os.geteuid()):
            return None
        chunks = []
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
    finally:
        os.close(fd)
