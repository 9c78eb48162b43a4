# -*- coding: utf-8 -*-
# Copyright (c) ebpf.xdp contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""bpffs layout, ownership records and per-interface locks.

Private to the ebpf.xdp collection: the interface may change without notice.

Layout under the pin root (default /sys/fs/bpf/ebpf_xdp):

    <pin_root>/<netns>/<ifname>/<hook>/prog     the attached program
    <pin_root>/<netns>/<ifname>/<hook>/link     its bpf_link, when attached by link
    <pin_root>/<netns>/<ifname>/<hook>/owner    the ownership record
    <pin_root>/<netns>/<ifname>/<hook>/maps/*   the program's maps, reused on reload

bpffs holds only BPF objects, so the ownership record is a one-entry BPF
array whose value is a small JSON document: the state stays in bpffs and
disappears with it (on reboot), never out of step with the kernel.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import json
import os
import shutil

from ansible_collections.ebpf.xdp.plugins.module_utils import _bpf

DEFAULT_PIN_ROOT = "/sys/fs/bpf/ebpf_xdp"
BPF_FS_MAGIC = 0xCAFE4A11
LOCK_DIR = "/run/ebpf_xdp/locks"
RECORD_SIZE = 4096
RECORD_VERSION = 1
MANAGED_BY = "ebpf.xdp"


class PinError(Exception):
    pass


def filesystem_magic(path):
    """f_type of the filesystem holding path (statvfs does not expose it)."""
    libc = ctypes.CDLL(None, use_errno=True)
    buf = ctypes.create_string_buffer(256)
    if libc.statfs(path.encode(), buf) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), path)
    return ctypes.c_long.from_buffer(buf).value & 0xFFFFFFFF


def check_bpffs(pin_root):
    """Fail unless pin_root is (or would be created) on a bpffs mount."""
    probe = pin_root
    while not os.path.exists(probe):
        probe = os.path.dirname(probe)
    if filesystem_magic(probe) != BPF_FS_MAGIC:
        raise PinError(
            "%s is not on a BPF filesystem (bpffs); mount it with "
            "'mount -t bpf bpf /sys/fs/bpf' or apply the ebpf.xdp.toolchain role" % pin_root)


class Attachment(object):
    """The pin directory of one program hook (xdp, tc_ingress, ...) on one interface."""

    def __init__(self, pin_root, netns_key, ifname, hook):
        self.directory = os.path.join(pin_root, netns_key, ifname, hook)
        self.prog_path = os.path.join(self.directory, "prog")
        self.link_path = os.path.join(self.directory, "link")
        self.record_path = os.path.join(self.directory, "owner")
        self.maps_dir = os.path.join(self.directory, "maps")

    def exists(self):
        return os.path.isdir(self.directory)

    def read_record(self):
        """The ownership record as a dict, or None when there is none."""
        if not os.path.exists(self.record_path):
            return None
        fd = _bpf.obj_get(self.record_path)
        try:
            raw = _bpf.MapHandle(fd).lookup(b"\0\0\0\0") or b""
        finally:
            _bpf.close(fd)
        try:
            return json.loads(raw.rstrip(b"\0").decode("utf-8"))
        except ValueError:
            raise PinError("ownership record %s is not readable JSON" % self.record_path)

    @staticmethod
    def encode_record(record):
        """The record as stored; fails before anything changes when it would not fit."""
        data = json.dumps(dict(record, managed_by=MANAGED_BY, version=RECORD_VERSION),
                          sort_keys=True).encode("utf-8")
        if len(data) >= RECORD_SIZE:
            raise PinError("ownership record too large (%d of %d bytes): fewer maps or constants, "
                           "or a shorter pin_root" % (len(data), RECORD_SIZE))
        return data

    def write_record(self, record):
        data = self.encode_record(record)
        if os.path.exists(self.record_path):
            fd = _bpf.obj_get(self.record_path)
        else:
            fd = _bpf.map_create(_bpf.BPF_MAP_TYPE_ARRAY, "ebpf_xdp_owner", 4, RECORD_SIZE, 1)
            try:
                _bpf.obj_pin(fd, self.record_path)
            except _bpf.BpfError:
                _bpf.close(fd)
                raise
        try:
            _bpf.MapHandle(fd).update(b"\0\0\0\0", data)
        finally:
            _bpf.close(fd)

    def make(self):
        """Create the directories; return those that did not exist (to undo on failure)."""
        created = []
        path = self.maps_dir
        while not os.path.isdir(path):
            created.append(path)
            path = os.path.dirname(path)
        for path in reversed(created):
            os.mkdir(path, 0o700)
        return created

    def replace_pin(self, fd, path):
        """Point the pin at path to fd (bpffs cannot rename over an existing pin)."""
        if os.path.exists(path):
            os.unlink(path)
        _bpf.obj_pin(fd, path)

    def detach_link(self):
        """Detach the pinned link now and drop its pin.

        Unpinning alone releases the link later (RCU, then a workqueue), so an
        attach right after it could still find the old program in place.
        """
        if not os.path.exists(self.link_path):
            return
        fd = _bpf.obj_get(self.link_path)
        try:
            _bpf.link_detach(fd)
        finally:
            _bpf.close(fd)
        os.unlink(self.link_path)

    def remove(self, keep_maps=False):
        """Detach the link, remove the pins and prune empty parents."""
        self.detach_link()
        for path in (self.prog_path, self.record_path):
            if os.path.exists(path):
                os.unlink(path)
        if not keep_maps and os.path.isdir(self.maps_dir):
            shutil.rmtree(self.maps_dir)
        prune_empty(self.directory, levels=3)


def prune_empty(path, levels):
    """Remove path and up to `levels - 1` parents while they are empty (or already gone)."""
    for _level in range(levels):
        try:
            os.rmdir(path)
        except OSError as exc:
            if exc.errno in (errno.ENOTEMPTY, errno.EEXIST):
                return
            if exc.errno != errno.ENOENT:
                raise
        path = os.path.dirname(path)


@contextlib.contextmanager
def interface_lock(netns_key, ifname):
    """Serialise changes to one interface across concurrent module runs."""
    directory = os.path.join(LOCK_DIR, netns_key)
    # exist_ok: two first runs in a namespace may create it at the same moment.
    os.makedirs(directory, 0o700, exist_ok=True)
    with open(os.path.join(directory, ifname + ".lock"), "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
