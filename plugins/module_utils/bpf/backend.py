# -*- coding: utf-8 -*-
# Copyright (c) ebpf.xdp contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""What a program is loaded from and by: the backends (libbpf from a compiled object, bcc from a source) behind
one protocol, chosen by a task's backend option (select_backend).

Private to the ebpf.xdp collection: the interface may change without notice.

A backend says which file a task's program comes from, refuses a missing one
in words, reads it once (the bytes loaded are the bytes hashed, where it
loads bytes), loads it (the same signature as _loader.load, returning a
_loader.Loaded), gives the program's identity (what makes a next run's
program "the same"), and whether its maps are compared with the pinned ones
before the load (maps/migration; bcc carries its tables over by name). The
converger never asks which backend it has.
"""

from __future__ import annotations

from typing import Callable

from ansible_collections.ebpf.xdp.plugins.module_utils.bpf import bcc as _bcc, loader as _loader
from ansible_collections.ebpf.xdp.plugins.module_utils.bpf.compile import sha256_file

LIBBPF = "libbpf"
BCC = "bcc"


class Libbpf:
    """A program of a compiled object (or of a revision's copy of it in the object store), loaded by libbpf."""

    name = LIBBPF
    # Its maps are libbpf's, pinned and reused: a new layout is reviewed against the pinned one before the load.
    reviews_maps = True

    @staticmethod
    def path(desired) -> str | None:
        return desired.object_source or desired.object

    @staticmethod
    def require(path: str) -> None:
        _loader.require_object(path)

    @staticmethod
    def read(path: str) -> tuple[bytes | None, str]:
        """The object's bytes, read once, and their sha256."""
        return _loader.read_object(path)

    @staticmethod
    def loader(desired) -> Callable[..., _loader.Loaded]:  # pylint: disable=unused-argument
        return _loader.load

    @staticmethod
    def identity(desired, digest: str, resolved_constants: dict) -> dict:
        # "program" and "section" stay as asked (both None: the only program of its type), so the next run
        # matches; the record's program_name says which program that was.
        # The resolved constants make a target interface re-created with a new ifindex a change.
        # A program is bound to its maps when loaded: another map set is another program.
        return {"object": desired.object, "object_sha256": digest, "program": desired.program,
                "section": desired.section, "constants": desired.constants, "resolved_constants": resolved_constants,
                "shared_maps": desired.shared_maps}


class Bcc:
    """A bcc-dialect source, compiled by bcc at load time (see _bcc)."""

    name = BCC
    # bcc's tables are its own, carried over by name when the program changes.
    reviews_maps = False

    @staticmethod
    def path(desired) -> str | None:
        return desired.source

    @staticmethod
    def require(path: str) -> None:
        _bcc.require_source(path)

    @staticmethod
    def read(path: str) -> tuple[bytes | None, str]:
        """bcc reads the source itself: its digest only."""
        return None, sha256_file(path)

    @staticmethod
    def loader(desired) -> Callable[..., _loader.Loaded]:
        return _bcc.Loader(desired.cflags, desired.kernel_headers)

    @staticmethod
    def identity(desired, digest: str, resolved_constants: dict) -> dict:  # pylint: disable=unused-argument
        # bcc compiles against the running kernel's headers: another kernel (or headers tree) is another
        # program, so a host booted into a new kernel reloads on the next run.
        return {"backend": BCC, "object": None, "object_sha256": None, "source": desired.source,
                "source_sha256": digest, "cflags": desired.cflags, "kernel_release": _bcc.kernel_release(),
                "kernel_headers": desired.kernel_headers, "program": desired.program, "constants": {},
                "resolved_constants": {}, "shared_maps": None}


BACKENDS = {backend.name: backend for backend in (Libbpf, Bcc)}


def select_backend(name: str | None) -> type[Libbpf] | type[Bcc]:
    """The backend a task's backend option names (libbpf when it names none)."""
    return BACKENDS[name or LIBBPF]
