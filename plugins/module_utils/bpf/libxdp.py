# -*- coding: utf-8 -*-
# Copyright (c) ebpf.xdp contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""A thin ctypes binding to libxdp (xdp-tools), for its multiprog dispatcher.

Private to the ebpf.xdp collection: the interface may change without notice.

libxdp chains up to 10 XDP programs on one interface: a dispatcher program
is attached to the interface and each component program replaces one of its
slots as a freplace (BPF_PROG_TYPE_EXT) program, run in priority order; the
verdicts a component returns that go on to the next one are its chain call
actions. libxdp keeps the protocol (the dispatcher's configuration, its pins
below bpffs's xdp/ directory, the lock other tools take too, such as
xdp-loader); this file only declares the entry points the collection reads
and turns their errors into LibxdpError.

libxdp links the system's libbpf.so.1, the library libbpf.py loads: a
bpf_object opened there can be handed to libxdp.
"""

from __future__ import annotations

import ctypes
import errno as errno_mod
import glob
import os

from ansible_collections.ebpf.xdp.plugins.module_utils.host import session as _session
from ansible_collections.ebpf.xdp.plugins.module_utils.bpf import libbpf as _bpf
from ansible_collections.ebpf.xdp.plugins.module_utils._errors import EbpfXdpError

LIBXDP_SONAME = "libxdp.so.1"

# enum xdp_action, by the names the collection's options use.
XDP_ACTIONS = {number: name[len("XDP_"):].lower() for number, name in enumerate(_bpf.XDP_ACTIONS)}
# enum xdp_attach_mode.
ATTACH_MODES = {"native": 1, "generic": 2}
MODE_NAMES = {1: "native", 2: "generic", 3: "offload"}
# The name of libxdp's dispatcher program (xdp-dispatcher.o), the program an interface with several runs.
DISPATCHER_NAME = "xdp_dispatcher"
# libxdp's limit (XDP_DISPATCHER_MAX_PROGS in the dispatcher it ships).
MAX_PROGRAMS = 10
# Where Debian's libxdp1 (and a source build) keeps the dispatcher object; the support probe loads it.
DISPATCHER_OBJECTS = ("/usr/lib/*/bpf/xdp-dispatcher.o", "/usr/lib/bpf/xdp-dispatcher.o",
                      "/usr/local/lib/bpf/xdp-dispatcher.o", "/usr/local/lib/*/bpf/xdp-dispatcher.o")

_PRINT_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)

_P = ctypes.c_void_p
_S = ctypes.c_char_p
_I = ctypes.c_int
_U = ctypes.c_uint
_SIGNATURES = {
    "libxdp_get_error": (ctypes.c_long, [_P]),
    "libxdp_set_print": (_P, [_PRINT_FN]),
    "xdp_program__create": (_P, [_P]),
    "xdp_program__from_fd": (_P, [_I]),
    "xdp_program__from_id": (_P, [ctypes.c_uint32]),
    "xdp_program__close": (None, [_P]),
    "xdp_program__name": (_S, [_P]),
    "xdp_program__id": (ctypes.c_uint32, [_P]),
    "xdp_program__fd": (_I, [_P]),
    "xdp_program__run_prio": (_U, [_P]),
    "xdp_program__set_run_prio": (_I, [_P, _U]),
    "xdp_program__chain_call_enabled": (ctypes.c_bool, [_P, _I]),
    "xdp_program__set_chain_call_enabled": (_I, [_P, _U, ctypes.c_bool]),
    "xdp_program__attach": (_I, [_P, _I, _I, _U]),
    "xdp_program__detach": (_I, [_P, _I, _I, _U]),
    "xdp_multiprog__get_from_ifindex": (_P, [_I]),
    "xdp_multiprog__close": (None, [_P]),
    "xdp_multiprog__next_prog": (_P, [_P, _P]),
    "xdp_multiprog__main_prog": (_P, [_P]),
    "xdp_multiprog__is_legacy": (ctypes.c_bool, [_P]),
    "xdp_multiprog__attach_mode": (_I, [_P]),
}

# The entry points that go to the kernel (each several bpf() and netlink calls of libxdp's own, which the host
# session cannot see: counted as one call each, see _session.count).
ROUND_TRIPS = ("xdp_program__create", "xdp_program__from_fd", "xdp_program__from_id", "xdp_program__attach",
               "xdp_program__detach", "xdp_multiprog__get_from_ifindex")

_lib = None
_messages = []


def _print_hook(_level, fmt, args):
    buf = ctypes.create_string_buffer(4096)
    _bpf.vsnprintf(buf, fmt, args)
    _messages.append(buf.value.decode("utf-8", "replace").rstrip("\n"))
    return 0


_print_cb = _PRINT_FN(_print_hook)


class LibxdpError(EbpfXdpError):
    """A libxdp failure: the operation, errno, and what libxdp printed meanwhile."""

    def __init__(self, message: str, err: int | None = None):
        self.errno = err
        if err:
            message = "%s: %s (errno %d %s)" % (message, os.strerror(err), err, errno_mod.errorcode.get(err, ""))
        said = take_messages()
        if said:
            message += "; libxdp said: " + " / ".join(said[-5:])
        super().__init__(message)


class _ProgramOpts(ctypes.Structure):
    """struct xdp_program_opts (libxdp.h)."""
    _fields_ = [("sz", ctypes.c_size_t), ("obj", _P), ("opts", _P), ("prog_name", _S), ("find_filename", _S),
                ("open_filename", _S), ("pin_path", _S), ("id", ctypes.c_uint32), ("fd", _I)]


def lib() -> ctypes.CDLL:
    """Load libxdp once; raise ImportError (saying which package) when it is not installed."""
    global _lib
    if _lib is None:
        _bpf.lib()  # the libbpf libxdp links, with its print hook
        try:
            handle = ctypes.CDLL(LIBXDP_SONAME, use_errno=True)
        except OSError as exc:
            raise ImportError("cannot load %s (Debian package libxdp1): %s" % (LIBXDP_SONAME, exc))
        for name, (restype, argtypes) in _SIGNATURES.items():
            func = getattr(handle, name)
            func.restype = restype
            func.argtypes = argtypes
            if name in ROUND_TRIPS:
                setattr(handle, name, _bpf._counted("libxdp", name, func))  # pylint: disable=protected-access
        if _bpf.PRINT_CALLBACKS:
            handle.libxdp_set_print(_print_cb)
        _lib = handle
    return _lib


def available() -> bool:
    try:
        lib()
    except ImportError:
        return False
    return True


def take_messages() -> list[str]:
    out = list(_messages)
    del _messages[:]
    return out


def _error_of(ptr) -> int:
    """libxdp's pointer convention: NULL, or an error encoded in the pointer (libxdp_get_error)."""
    if not ptr:
        return ctypes.get_errno() or errno_mod.ENOENT
    return -lib().libxdp_get_error(ptr)


def _name(raw) -> str:
    return raw.decode("utf-8", "replace") if raw else ""


def chain_call_actions(prog) -> list[str]:
    return [name for number, name in XDP_ACTIONS.items() if lib().xdp_program__chain_call_enabled(prog, number)]


def dispatcher_chain(ifindex: int) -> dict | None:
    """The libxdp dispatcher on ifindex and its programs in run order, or None when the interface has no
    dispatcher (no XDP program, or one attached on its own: libxdp's "legacy" program).

    {"dispatcher_id", "mode", "programs": [{"id", "name", "priority", "chain_call_actions"}, ...]}
    """
    take_messages()
    mp = lib().xdp_multiprog__get_from_ifindex(ifindex)
    err = _error_of(mp)
    if err:
        if err == errno_mod.ENOENT:
            return None
        raise LibxdpError("read the XDP programs of ifindex %d through libxdp" % ifindex, err)
    try:
        if lib().xdp_multiprog__is_legacy(mp):
            return None
        main = lib().xdp_multiprog__main_prog(mp)
        programs = []
        prog = lib().xdp_multiprog__next_prog(None, mp)
        while prog:
            programs.append({"id": lib().xdp_program__id(prog), "name": _name(lib().xdp_program__name(prog)),
                             "priority": lib().xdp_program__run_prio(prog),
                             "chain_call_actions": chain_call_actions(prog)})
            prog = lib().xdp_multiprog__next_prog(prog, mp)
        return {"dispatcher_id": lib().xdp_program__id(main) if main else None,
                "mode": MODE_NAMES.get(lib().xdp_multiprog__attach_mode(mp)), "programs": programs}
    finally:
        lib().xdp_multiprog__close(mp)


# ---------------------------------------------------------------- components


class Component:
    """One program of a dispatcher as libxdp holds it (its struct xdp_program); close() releases the handle only:
    a component attached stays attached (libxdp pins its link below bpffs's xdp/ directory)."""

    def __init__(self, ptr, what: str):
        err = _error_of(ptr)
        if err:
            raise LibxdpError(what, err)
        self._prog = ptr
        self.what = what

    @classmethod
    def from_object(cls, obj: _bpf.BpfObject, name: str) -> Component:
        """Program `name` of an object opened (and set up: constants, map pins) but not loaded: libxdp loads it
        as a freplace program into the dispatcher's slot when it attaches it. The object must outlive the
        attach."""
        take_messages()
        opts = _ProgramOpts(sz=ctypes.sizeof(_ProgramOpts), obj=obj.handle, prog_name=name.encode())
        return cls(lib().xdp_program__create(ctypes.byref(opts)), "hand program %s of %s to libxdp" % (name, obj.path))

    @classmethod
    def from_program(cls, prog: _bpf.Program) -> Component:
        """A program already loaded as a component (a freplace program, from a dispatcher it ran in)."""
        take_messages()
        return cls(lib().xdp_program__from_fd(prog.fd), "read XDP program %s through libxdp" % prog.label)

    @classmethod
    def from_id(cls, prog_id: int) -> Component:
        take_messages()
        return cls(lib().xdp_program__from_id(prog_id), "read XDP program id %d through libxdp" % prog_id)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self) -> None:
        if self._prog:
            lib().xdp_program__close(self._prog)
            self._prog = None

    def configure(self, priority: int, actions: list[str]) -> None:
        """Its run priority (lower runs first) and the verdicts after which the next program runs."""
        _check(lib().xdp_program__set_run_prio(self._prog, priority), "set the run priority of " + self.what)
        for number, name in XDP_ACTIONS.items():
            _check(lib().xdp_program__set_chain_call_enabled(self._prog, number, name in actions),
                   "set the chain call actions of " + self.what)

    def settings(self) -> tuple[int, list[str]]:
        """(run priority, chain call actions) as libxdp has them for this component."""
        return lib().xdp_program__run_prio(self._prog), chain_call_actions(self._prog)

    def fd(self) -> int:
        return lib().xdp_program__fd(self._prog)

    def attach(self, ifindex: int, mode: str) -> None:
        """Into the interface's dispatcher (built, or rebuilt with this program added, and swapped in atomically)."""
        take_messages()
        try:
            _check(lib().xdp_program__attach(self._prog, ifindex, ATTACH_MODES[mode], 0),
                   "attach %s through libxdp's dispatcher on ifindex %d (%s)" % (self.what, ifindex, mode))
        finally:
            _session.wrote_hook(ifindex)

    def detach(self, ifindex: int, mode: str) -> None:
        """Out of the interface's dispatcher (rebuilt without it; removed with the last program)."""
        take_messages()
        try:
            _check(lib().xdp_program__detach(self._prog, ifindex, ATTACH_MODES[mode], 0),
                   "detach %s from libxdp's dispatcher on ifindex %d" % (self.what, ifindex))
        finally:
            _session.wrote_hook(ifindex)


def _check(ret: int, what: str) -> int:
    if ret < 0:
        raise LibxdpError(what, -ret)
    return ret


# ---------------------------------------------------------------- can this kernel run the dispatcher?

_SUPPORT = []


def dispatcher_object() -> str | None:
    for pattern in DISPATCHER_OBJECTS:
        for path in sorted(glob.glob(pattern)):
            return path
    return None


def dispatcher_refusal() -> str | None:
    """Why libxdp's dispatcher cannot work here, or None when it can (probed once per process).

    The same test libxdp makes before it builds a dispatcher: load the
    dispatcher, then a program replacing its first slot (freplace,
    BPF_PROG_TYPE_EXT). Nothing is attached to any interface. Without this
    test libxdp would quietly fall back to one program per interface.
    """
    if not _SUPPORT:
        _SUPPORT.append(_probe())
    return _SUPPORT[0]


def _probe() -> str | None:
    if not available():
        return "libxdp is not installed (Debian package libxdp1; the role ebpf.xdp.toolchain installs it)"
    path = dispatcher_object()
    if not path:
        return "libxdp's dispatcher object (xdp-dispatcher.o) is not installed; looked in %s" % ", ".join(
            DISPATCHER_OBJECTS)
    with _bpf.BpfObject(path) as dispatcher:
        try:
            dispatcher.load()
        except _bpf.BpfError as exc:
            return "this kernel cannot load libxdp's dispatcher (%s)" % exc
        with dispatcher.program("xdp_dispatcher") as target, _bpf.BpfObject(path) as component:
            component.set_type("xdp_dispatcher", "ext")
            component.set_expected_attach_type("xdp_dispatcher", 0)
            component.set_attach_target("xdp_dispatcher", target, "prog0")
            try:
                component.load()
            except _bpf.BpfError as exc:
                if exc.errno == errno_mod.EPERM:
                    return ("this kernel refuses freplace (BPF_PROG_TYPE_EXT) programs, which libxdp's dispatcher "
                            "is made of: loading one into the dispatcher's first slot failed with EPERM as root "
                            "(a kernel or security policy that forbids program extensions)")
                return "this kernel cannot load freplace (BPF_PROG_TYPE_EXT) programs into libxdp's dispatcher (%s)" \
                    % exc
    return None
