# -*- coding: utf-8 -*-
# Copyright (c) ebpf.xdp contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""bcc as a second front end: compile a bcc-dialect source at load time and hand its program to the converger.

Private to the ebpf.xdp collection: the interface may change without notice.

bcc (Debian's python3-bpfcc, in the system Python only) compiles the source
against kernel headers, creates its tables and loads one function. What
leaves this file is the same thing _loader.load gives: a program fd with its
info, a digest of what else makes it "the same program" (here: its tables'
layout), and its tables by name, pinned under the attachment's maps/ once
the program is on its hook. bcc itself is imported lazily: a module that does
not use this backend never pays for (or needs) it.

bcc creates its tables anew on every compile, so a table's contents cannot be
reused the way libbpf reuses a pinned map. An upgrade copies each table of
the old program (same name, same type and sizes) into the new one just
before the swap; what the old program adds between that copy and the swap
is lost. A source that must keep a table exactly declares it with bcc's
BPF_TABLE_PINNED at a path of its own.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import hashlib
import json
import os
import re
import sys
import tempfile

from ansible_collections.ebpf.xdp.plugins.module_utils.bpf import libbpf as _bpf, loader as _loader
from ansible_collections.ebpf.xdp.plugins.module_utils.bpf.compile import CompileError
from ansible_collections.ebpf.xdp.plugins.module_utils._errors import EbpfXdpError

# bcc's program type constants (BPF.XDP, ...) for the converger's program types.
BCC_PROG_TYPES = {"xdp": "XDP", "sched_cls": "SCHED_CLS", "sched_act": "SCHED_ACT"}
# The kernel's arch directory for uname's machine (for Debian's generated headers).
KERNEL_ARCH = {"x86_64": "x86", "aarch64": "arm64", "ppc64le": "powerpc", "s390x": "s390", "riscv64": "riscv",
               "armv7l": "arm", "i686": "x86"}
# Table types whose contents are plain data, so copying them to a new program keeps their meaning.
COPIED_TYPES = ("hash", "array", "percpu_hash", "percpu_array", "lru_hash", "lru_percpu_hash")
# What bcc prints on stderr that says nothing about the source.
NOISE = re.compile(r"modprobe: not found|^\s*$")

BCC_IMPORT_ERROR = None


class BccError(EbpfXdpError):
    pass


class BccCompileError(CompileError):
    """bcc's compiler refused the source; output holds its messages."""


def import_bcc():
    """The bcc package, or BccError saying which package brings it."""
    try:
        import bcc  # pylint: disable=import-outside-toplevel
    except ImportError as exc:
        raise BccError("backend bcc needs bcc's Python binding, which %s cannot import (%s); install it "
                       "(Debian/Ubuntu: python3-bpfcc, the ebpf.xdp.toolchain role does with toolchain_bcc: true)"
                       % (sys.executable, exc))
    return bcc


def has_bcc() -> bool:
    try:
        import_bcc()
    except BccError:
        return False
    return True


# The program modules' rules between object and source (besides mutually_exclusive and required_if), and a
# program named by its function or by its section (an object's), not both.
MODULE_RULES = dict(mutually_exclusive=[("object", "source"), ("program", "section")],
                    required_if=[("state", "present", ("object", "source"), True)])


def kernel_release() -> str:
    return os.uname().release


def require_source(path: str) -> None:
    if not os.path.isfile(path):
        raise BccError("bcc source file %s does not exist" % path)


def source_digest(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        digest.update(handle.read())
    return digest.hexdigest()


# ---------------------------------------------------------------- kernel headers

def no_headers(why: str) -> BccError:
    release = kernel_release()
    return BccError(
        "%s. bcc compiles against the running kernel's headers (%s); either install the headers package for "
        "this kernel (Debian: linux-headers-%s, which provides /lib/modules/%s/build; the ebpf.xdp.toolchain "
        "role does with toolchain_bcc: true), or point kernel_headers: at a kernel headers tree (bcc's "
        "BCC_KERNEL_SOURCE), for example Debian's /usr/src/linux-headers-<version>-cloud-amd64 when the "
        "distribution has no package for this kernel (a version mismatch does not matter for XDP and tc programs)"
        % (why, release, release, release))


def _makefile_source(build: str) -> str | None:
    """The source tree a Debian-style build directory includes (its Makefile's one `include` line)."""
    try:
        with open(os.path.join(build, "Makefile")) as makefile:
            for line in makefile:
                match = re.match(r"\s*include\s+(\S+)/Makefile\s*$", line)
                if match:
                    return match.group(1)
    except OSError:
        pass
    return None


def headers(kernel_headers: str | None) -> tuple[str | None, list[str]]:
    """(BCC_KERNEL_SOURCE or None for bcc's own search, extra cflags) for a headers tree, or a BccError.

    A complete tree (include/linux/kconfig.h and include/generated/) is given
    to bcc as it is. Debian splits its headers in two: the flavour's build
    directory (generated headers; its Makefile includes the common tree) and
    the common source tree. bcc reads only one tree from BCC_KERNEL_SOURCE, so
    it gets the common one and the build directory's generated headers come
    as -I flags.
    """
    release = kernel_release()
    if kernel_headers is None:
        found = [path for path in ("/lib/modules/%s/build" % release, "/lib/modules/%s/source" % release,
                                   "/sys/kernel/kheaders.tar.xz") if os.path.exists(path)]
        if not found:
            raise no_headers("no kernel headers for kernel %s: /lib/modules/%s/build does not exist and the kernel "
                             "has no /sys/kernel/kheaders.tar.xz" % (release, release))
        return None, []
    path = os.path.abspath(kernel_headers)
    if not os.path.isdir(path):
        raise no_headers("kernel_headers %s is not a directory" % kernel_headers)
    if os.path.isfile(os.path.join(path, "include", "linux", "kconfig.h")):
        return path, []
    source = _makefile_source(path)
    if source and os.path.isfile(os.path.join(source, "include", "linux", "kconfig.h")) \
            and os.path.isdir(os.path.join(path, "include", "generated")):
        arch = KERNEL_ARCH.get(os.uname().machine, os.uname().machine)
        extra = [os.path.join(path, "arch", arch, "include", "generated"), os.path.join(path, "include"),
                 os.path.join(path, "arch", arch, "include", "generated", "uapi"),
                 os.path.join(path, "include", "generated", "uapi")]
        return source, ["-I" + directory for directory in extra]
    raise no_headers("kernel_headers %s is not a kernel headers tree (it has no include/linux/kconfig.h, and no "
                     "Makefile naming a tree that has one)" % kernel_headers)


@contextlib.contextmanager
def _environment(name: str, value: str | None):
    saved = os.environ.get(name)
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = saved


@contextlib.contextmanager
def _stderr_to(lines: list[str]):
    """What the C libraries write on fd 2 in the block (bcc's compiler and verifier messages) into lines."""
    with tempfile.TemporaryFile() as tmp:
        sys.stderr.flush()
        saved = os.dup(2)
        os.dup2(tmp.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            text = tmp.read().decode("utf-8", "replace")
            lines.extend(line for line in text.splitlines() if not NOISE.search(line))


# ---------------------------------------------------------------- loading


def as_loaded(name: str, program: _bpf.Program, tables: dict, maps_dir: str | None) -> _loader.Loaded:
    """A bcc-compiled program as every backend's load returns it (_loader.Loaded): its tables held by name (pinned
    once it is on its hook), their layout as what else makes it the same program."""
    layout = {table: {k: m.info[k] for k in ("type", "key_size", "value_size", "max_entries")}
              for table, m in tables.items()}
    maps = {table: os.path.join(maps_dir, table) for table in tables} if maps_dir else {}
    return _loader.Loaded(name, program, hashlib.sha256(json.dumps(layout, sort_keys=True).encode()).hexdigest(),
                          maps_dir, maps, tables=tables)


def carry_over(loaded: _loader.Loaded) -> list[str]:
    """Copy what the tables pinned in maps_dir hold (an earlier program's) into the new tables of the same name and
    layout; return the names copied."""
    copied = []
    for name, table in loaded.tables.items():
        path = os.path.join(loaded.maps_dir, name)
        if table.info["type"] not in COPIED_TYPES or not os.path.exists(path):
            continue
        with _bpf.Map.from_pin(path) as old:
            same = all(old.info[k] == table.info[k] for k in ("type", "key_size", "value_size", "max_entries"))
            if not same or old.info["id"] == table.info["id"]:
                continue
            for key, value in old.items():
                if table.percpu:
                    value = b"".join(part.ljust(table.slot, b"\0") for part in value)
                table.update(key, value)
        copied.append(name)
    return copied


def _function_names(bcc, module) -> list[str]:
    return [bcc.lib.bpf_function_name(module, i).decode() for i in range(bcc.lib.bpf_num_functions(module))]


def _tables(bcc, module) -> dict:
    """Every table of the compiled module by name, each as a Map with a file descriptor of its own."""
    # bcc's Python binding does not declare these two (it reaches tables by the names in the source).
    bcc.lib.bpf_num_tables.restype = ctypes.c_size_t
    bcc.lib.bpf_num_tables.argtypes = [ctypes.c_void_p]
    bcc.lib.bpf_table_name.restype = ctypes.c_char_p
    bcc.lib.bpf_table_name.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    tables = {}
    for i in range(bcc.lib.bpf_num_tables(module)):
        name = bcc.lib.bpf_table_name(module, i)
        fd = bcc.lib.bpf_table_fd(module, name)
        if fd >= 0:
            tables[name.decode()] = _bpf.Map(os.dup(fd), name.decode())
    return tables


def _select(names: list[str], program: str | None, path: str) -> str:
    if program is None:
        if len(names) != 1:
            raise BccError("%s has %d functions bcc compiles as programs (%s); name one with program:"
                           % (path, len(names), ", ".join(names) or "none"))
        return names[0]
    if program not in names:
        raise BccError("program %r is not in %s; it has: %s" % (program, path, ", ".join(names) or "none"))
    return program


class Loader:
    """_loader.load's signature for the converger, bound to one task's cflags and kernel headers."""

    def __init__(self, cflags: list[str] | None, kernel_headers: str | None):
        self.cflags = list(cflags or [])
        self.kernel_headers = kernel_headers

    def __call__(self, path: str, program: str | None, prog_type: str, constants: dict | None = None,
                 maps_dir: str | None = None, load_as: str | None = None,
                 section: str | None = None) -> _loader.Loaded:  # pylint: disable=unused-argument
        # section: a bcc source has no ELF sections (prepare_backend refuses the option with bcc).
        return load(path, program, load_as or prog_type, self.cflags, self.kernel_headers, maps_dir, constants)


def load(path: str, program: str | None, prog_type: str, cflags: list[str], kernel_headers: str | None,
         maps_dir: str | None = None, constants: dict | None = None) -> _loader.Loaded:
    """Compile path with bcc, load one function as prog_type; with maps_dir, carry the tables pinned there over."""
    if constants:
        raise BccError("constants are not available with backend bcc (a bcc source has no load-time globals); "
                       "give the values as cflags, for example -DXDP_ACTION=2")
    require_source(path)
    bcc = import_bcc()
    source, extra = headers(kernel_headers)
    messages: list[str] = []
    with _environment("BCC_KERNEL_SOURCE", source):
        try:
            with _stderr_to(messages):
                compiled = bcc.BPF(src_file=path.encode(), cflags=list(cflags) + extra)
        except Exception as exc:  # bcc raises a bare Exception for every failure
            output = "\n".join(messages)
            if "Unable to find kernel headers" in output or "kconfig.h' file not found" in output:
                raise no_headers("bcc found no usable kernel headers for %s" % path)
            raise BccCompileError("bcc could not compile %s (%s)" % (path, exc), output)
    try:
        name = _select(_function_names(bcc, compiled.module), program, path)
        messages = []
        try:
            with _stderr_to(messages):
                function = compiled.load_func(name.encode(), getattr(bcc.BPF, BCC_PROG_TYPES[prog_type]))
        except Exception as exc:
            # bcc says only strerror's text: map it back to the errno BpfError names.
            match = re.search(r"Failed to load BPF program \S+: (.*)$", str(exc))
            err = {os.strerror(n): n for n in errno.errorcode}.get(match.group(1)) if match else None
            raise _bpf.BpfError("the kernel rejected program %s of %s (compiled by bcc)" % (name, path), err,
                                log="\n".join(messages) or str(exc))
        loaded = as_loaded(name, _bpf.Program(os.dup(function.fd), name), _tables(bcc, compiled.module), maps_dir)
    finally:
        # bcc's own fds: the program and its tables live on through the duplicates.
        compiled.cleanup()
    if maps_dir:
        try:
            carry_over(loaded)
        except Exception:
            loaded.close()
            raise
    return loaded
