# -*- coding: utf-8 -*-
# Copyright (c) ebpf.xdp contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""A thin ctypes binding to libbpf.

Private to the ebpf.xdp collection: the interface may change without notice.

libbpf does the real work (ELF relocations, BTF, map pinning and reuse,
links); this file only declares the few C entry points the collection needs
and turns negative return codes into BpfError, whose message names the
operation and its target, with the errno and, for program loads, the
verifier log.

File descriptors are owned: Program, Map and Link each hold one and close
it when their `with` block ends. Two commands go to the bpf() system call
directly because Debian's libbpf 1.1 predates them: creating a tcx link
with its ordering options, and querying what is attached on a tcx hook.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno as errno_mod
import hashlib
import os
import platform
import struct
import sys
from typing import Iterator

from ansible_collections.ebpf.xdp.plugins.module_utils.host import session as _session
from ansible_collections.ebpf.xdp.plugins.module_utils.host.netlink import XDP_ATTACHED_MODES
from ansible_collections.ebpf.xdp.plugins.module_utils._errors import EbpfXdpError

LIBBPF_SONAME = "libbpf.so.1"

# enum bpf_attach_type values used by the collection (uapi/linux/bpf.h).
BPF_XDP = 37
BPF_TCX_INGRESS = 46
BPF_TCX_EGRESS = 47
# A program run on a devmap entry's egress copies (SEC("xdp/devmap")), never on an interface.
BPF_XDP_DEVMAP = 33
# A program run on the frames a cpumap hands to another CPU (SEC("xdp/cpumap")).
BPF_XDP_CPUMAP = 35
ATTACH_TYPES = {BPF_XDP: "xdp", BPF_TCX_INGRESS: "tcx_ingress", BPF_TCX_EGRESS: "tcx_egress"}

# bpf() commands and flags used without libbpf (uapi/linux/bpf.h).
BPF_PROG_QUERY = 16
BPF_LINK_CREATE = 28
BPF_COMMANDS = {BPF_PROG_QUERY: "prog_query", BPF_LINK_CREATE: "link_create"}  # the ones made without libbpf
BPF_F_BEFORE = 1 << 3
BPF_F_AFTER = 1 << 4
BPF_F_ID = 1 << 5
BPF_F_LINK = 1 << 13
SYS_BPF = {"x86_64": 321, "aarch64": 280}

# XDP flags (uapi/linux/if_link.h).
XDP_FLAGS_UPDATE_IF_NOEXIST = 1 << 0
XDP_FLAGS_SKB_MODE = 1 << 1
XDP_FLAGS_DRV_MODE = 1 << 2
XDP_FLAGS_REPLACE = 1 << 4

BPF_F_TEST_XDP_LIVE_FRAMES = 1 << 1

# Map update flags (uapi/linux/bpf.h): any, only a new key, only an existing key.
BPF_ANY = 0
BPF_NOEXIST = 1
BPF_EXIST = 2

BPF_OBJ_NAME_LEN = 16

MAP_TYPES = {
    1: "hash", 2: "array", 3: "prog_array", 4: "perf_event_array",
    5: "percpu_hash", 6: "percpu_array", 7: "stack_trace", 8: "cgroup_array",
    9: "lru_hash", 10: "lru_percpu_hash", 11: "lpm_trie", 12: "array_of_maps",
    13: "hash_of_maps", 14: "devmap", 15: "sockmap", 16: "cpumap",
    17: "xskmap", 18: "sockhash", 25: "devmap_hash", 26: "struct_ops",
    27: "ringbuf",
}
PERCPU_MAP_TYPES = frozenset((5, 6, 10))
ARRAY_MAP_TYPES = frozenset((2, 6))  # every key from 0 to max_entries - 1 is there, always
DEVMAP_TYPES = frozenset((14, 25))
# The kernel adds it to every devmap it creates (programs may not write one); a map asked for with it is refused.
BPF_F_RDONLY_PROG = 1 << 7
# Map types the kernel reads many elements of in one call (BPF_MAP_LOOKUP_BATCH, Linux 5.6): hashes and arrays.
BATCH_MAP_TYPES = frozenset((1, 2, 5, 6, 9, 10))
# Elements per batch: all of a counter map at once, a bounded buffer for a large hash.
BATCH_SIZE = 4096
# What a kernel without batch reads for the map type answers (ENOTSUPP is the kernel's own 524).
NO_BATCH = (errno_mod.EINVAL, errno_mod.EOPNOTSUPP, 524)
BPF_MAP_TYPE_ARRAY = 2
BPF_MAP_TYPE_HASH_OF_MAPS = 13
BPF_MAP_TYPE_DEVMAP = 14
BPF_MAP_TYPE_DEVMAP_HASH = 25

# enum bpf_prog_type; "unspec" is a program whose SEC() names no type libbpf knows (SEC("redirect_xmit")).
PROG_TYPES = {
    0: "unspec", 1: "socket_filter", 2: "kprobe", 3: "sched_cls", 4: "sched_act", 5: "tracepoint", 6: "xdp",
    7: "perf_event", 8: "cgroup_skb", 9: "cgroup_sock", 10: "lwt_in", 11: "lwt_out", 12: "lwt_xmit",
    13: "sock_ops", 14: "sk_skb", 15: "cgroup_device", 16: "sk_msg", 17: "raw_tracepoint",
    18: "cgroup_sock_addr", 19: "lwt_seg6local", 20: "lirc_mode2", 21: "sk_reuseport", 22: "flow_dissector",
    23: "cgroup_sysctl", 24: "raw_tracepoint_writable", 25: "cgroup_sockopt", 26: "tracing", 27: "struct_ops",
    28: "ext", 29: "lsm", 30: "sk_lookup", 31: "syscall", 32: "netfilter",
}
# bpf_program__set_flags: an XDP program that takes multi-buffer frames (what SEC("xdp.frags") sets).
BPF_F_XDP_HAS_FRAGS = 1 << 5

LINK_TYPES = {1: "raw_tracepoint", 2: "tracing", 3: "cgroup", 4: "iter",
              5: "netns", 6: "xdp", 7: "perf_event", 8: "kprobe_multi",
              9: "struct_ops", 10: "netfilter", 11: "tcx"}

BTF_KIND_VAR = 14
BTF_KIND_DATASEC = 15


# libbpf's own error codes (enum libbpf_errno, 4000-4013): os.strerror knows none of them
# ("Unknown error 4001"), so they are named here as libbpf_strerror() would, with what they mean for a user.
LIBBPF_ERRNOS = {
    4000: ("LIBBPF_ERRNO__LIBELF", "libelf could not read it"),
    4001: ("LIBBPF_ERRNO__FORMAT", "not a BPF object (not an ELF file, or an ELF file that is not for BPF)"),
    4002: ("LIBBPF_ERRNO__KVERSION", "incorrect or no 'version' section"),
    4003: ("LIBBPF_ERRNO__ENDIAN", "endianness of the object does not match this host"),
    4004: ("LIBBPF_ERRNO__INTERNAL", "internal error in libbpf"),
    4005: ("LIBBPF_ERRNO__RELOC", "relocation failed"),
    4006: ("LIBBPF_ERRNO__LOAD", "the kernel refused the program for an unknown reason"),
    4007: ("LIBBPF_ERRNO__VERIFY", "the kernel verifier rejected the program"),
    4008: ("LIBBPF_ERRNO__PROG2BIG", "program too big"),
    4009: ("LIBBPF_ERRNO__KVER", "incorrect kernel version"),
    4010: ("LIBBPF_ERRNO__PROGTYPE", "the kernel does not support this program type"),
    4011: ("LIBBPF_ERRNO__WRNGPID", "wrong pid in netlink message"),
    4012: ("LIBBPF_ERRNO__INVSEQ", "invalid netlink sequence"),
    4013: ("LIBBPF_ERRNO__NLPARSE", "netlink parsing error"),
}


def strerror(err: int) -> str:
    """What errno `err` means: the C library's text, or libbpf's for its own codes."""
    if err in LIBBPF_ERRNOS:
        return LIBBPF_ERRNOS[err][1]
    return os.strerror(err)


class BpfError(EbpfXdpError):
    """A libbpf or kernel failure: the operation and target, errno, and an optional log."""

    def __init__(self, message: str, err: int | None = None, log: str | None = None):
        self.errno = err
        self.log = log or ""
        if err:
            name = LIBBPF_ERRNOS[err][0] if err in LIBBPF_ERRNOS else errno_mod.errorcode.get(err, "")
            message = "%s: %s (errno %d %s)" % (message, strerror(err), err, name)
        super().__init__(message)

    def log_tail(self, lines: int = 30) -> list[str]:
        return self.log.rstrip().splitlines()[-lines:]


class _ProgInfo(ctypes.Structure):
    # Leading part of struct bpf_prog_info; the kernel fills what fits.
    _fields_ = [
        ("type", ctypes.c_uint32), ("id", ctypes.c_uint32),
        ("tag", ctypes.c_uint8 * 8),
        ("jited_prog_len", ctypes.c_uint32), ("xlated_prog_len", ctypes.c_uint32),
        ("jited_prog_insns", ctypes.c_uint64), ("xlated_prog_insns", ctypes.c_uint64),
        ("load_time", ctypes.c_uint64), ("created_by_uid", ctypes.c_uint32),
        ("nr_map_ids", ctypes.c_uint32), ("map_ids", ctypes.c_uint64),
        ("name", ctypes.c_char * BPF_OBJ_NAME_LEN), ("ifindex", ctypes.c_uint32),
        ("gpl_compatible", ctypes.c_uint32),
        ("netns_dev", ctypes.c_uint64), ("netns_ino", ctypes.c_uint64),
    ]


class _MapInfo(ctypes.Structure):
    _fields_ = [
        ("type", ctypes.c_uint32), ("id", ctypes.c_uint32),
        ("key_size", ctypes.c_uint32), ("value_size", ctypes.c_uint32),
        ("max_entries", ctypes.c_uint32), ("map_flags", ctypes.c_uint32),
        ("name", ctypes.c_char * BPF_OBJ_NAME_LEN), ("ifindex", ctypes.c_uint32),
        ("btf_vmlinux_value_type_id", ctypes.c_uint32),
        ("netns_dev", ctypes.c_uint64), ("netns_ino", ctypes.c_uint64),
        ("btf_id", ctypes.c_uint32), ("btf_key_type_id", ctypes.c_uint32),
        ("btf_value_type_id", ctypes.c_uint32),
    ]


class _MapCreateOpts(ctypes.Structure):
    _fields_ = [
        ("sz", ctypes.c_size_t), ("btf_fd", ctypes.c_uint32),
        ("btf_key_type_id", ctypes.c_uint32), ("btf_value_type_id", ctypes.c_uint32),
        ("btf_vmlinux_value_type_id", ctypes.c_uint32), ("inner_map_fd", ctypes.c_uint32),
        ("map_flags", ctypes.c_uint32), ("map_extra", ctypes.c_uint64),
        ("numa_node", ctypes.c_uint32), ("map_ifindex", ctypes.c_uint32),
    ]


class _LinkInfo(ctypes.Structure):
    # struct bpf_link_info: the union starts 8-byte aligned; xdp and tcx
    # both begin with the ifindex, tcx follows it with the attach type
    # (xdp has none: its attach type is BPF_XDP by definition).
    _fields_ = [
        ("type", ctypes.c_uint32), ("id", ctypes.c_uint32),
        ("prog_id", ctypes.c_uint32), ("_pad", ctypes.c_uint32),
        ("ifindex", ctypes.c_uint32), ("attach_type", ctypes.c_uint32),
        ("_rest", ctypes.c_uint64 * 6),
    ]


class _LinkCreateOpts(ctypes.Structure):
    _fields_ = [
        ("sz", ctypes.c_size_t), ("flags", ctypes.c_uint32),
        ("iter_info", ctypes.c_void_p), ("iter_info_len", ctypes.c_uint32),
        ("target_btf_id", ctypes.c_uint32),
        ("_union", ctypes.c_uint64 * 5),
    ]


class _LinkCreateAttr(ctypes.Structure):
    # union bpf_attr, BPF_LINK_CREATE, with the tcx member of its inner union.
    _fields_ = [
        ("prog_fd", ctypes.c_uint32), ("target_ifindex", ctypes.c_uint32),
        ("attach_type", ctypes.c_uint32), ("flags", ctypes.c_uint32),
        ("relative_fd_or_id", ctypes.c_uint32), ("_pad", ctypes.c_uint32),
        ("expected_revision", ctypes.c_uint64),
        ("_rest", ctypes.c_uint64 * 4),
    ]


class _ProgQueryAttr(ctypes.Structure):
    # union bpf_attr, BPF_PROG_QUERY, as kernels with tcx (6.6+) define it.
    _fields_ = [
        ("target_ifindex", ctypes.c_uint32), ("attach_type", ctypes.c_uint32),
        ("query_flags", ctypes.c_uint32), ("attach_flags", ctypes.c_uint32),
        ("prog_ids", ctypes.c_uint64), ("count", ctypes.c_uint32), ("_pad", ctypes.c_uint32),
        ("prog_attach_flags", ctypes.c_uint64), ("link_ids", ctypes.c_uint64),
        ("link_attach_flags", ctypes.c_uint64), ("revision", ctypes.c_uint64),
    ]


class _XdpQueryOpts(ctypes.Structure):
    # struct bpf_xdp_query_opts as libbpf 1.1 has it; newer ones accept this size.
    _fields_ = [
        ("sz", ctypes.c_size_t), ("prog_id", ctypes.c_uint32), ("drv_prog_id", ctypes.c_uint32),
        ("hw_prog_id", ctypes.c_uint32), ("skb_prog_id", ctypes.c_uint32), ("attach_mode", ctypes.c_uint8),
    ]


class _ObjectOpenOpts(ctypes.Structure):
    # The head of struct bpf_object_open_opts (libbpf 1.1 and later): sz says how much of it is given.
    _fields_ = [("sz", ctypes.c_size_t), ("object_name", ctypes.c_char_p), ("relaxed_maps", ctypes.c_bool),
                ("pin_root_path", ctypes.c_char_p)]


class _XdpAttachOpts(ctypes.Structure):
    _fields_ = [("sz", ctypes.c_size_t), ("old_prog_fd", ctypes.c_int)]


class _TestRunOpts(ctypes.Structure):
    _fields_ = [
        ("sz", ctypes.c_size_t),
        ("data_in", ctypes.c_void_p), ("data_out", ctypes.c_void_p),
        ("data_size_in", ctypes.c_uint32), ("data_size_out", ctypes.c_uint32),
        ("ctx_in", ctypes.c_void_p), ("ctx_out", ctypes.c_void_p),
        ("ctx_size_in", ctypes.c_uint32), ("ctx_size_out", ctypes.c_uint32),
        ("retval", ctypes.c_uint32), ("repeat", ctypes.c_int),
        ("duration", ctypes.c_uint32), ("flags", ctypes.c_uint32),
        ("cpu", ctypes.c_uint32), ("batch_size", ctypes.c_uint32),
    ]


class _ProgLoadOpts(ctypes.Structure):
    # struct bpf_prog_load_opts as libbpf 1.1 has it; newer ones accept this size.
    _fields_ = [
        ("sz", ctypes.c_size_t), ("attempts", ctypes.c_int),
        ("expected_attach_type", ctypes.c_uint32), ("prog_btf_fd", ctypes.c_uint32),
        ("prog_flags", ctypes.c_uint32), ("prog_ifindex", ctypes.c_uint32), ("kern_version", ctypes.c_uint32),
        ("attach_btf_id", ctypes.c_uint32), ("attach_prog_fd", ctypes.c_uint32),
        ("attach_btf_obj_fd", ctypes.c_uint32), ("fd_array", ctypes.c_void_p),
        ("func_info", ctypes.c_void_p), ("func_info_cnt", ctypes.c_uint32), ("func_info_rec_size", ctypes.c_uint32),
        ("line_info", ctypes.c_void_p), ("line_info_cnt", ctypes.c_uint32), ("line_info_rec_size", ctypes.c_uint32),
        ("log_level", ctypes.c_uint32), ("log_size", ctypes.c_uint32), ("log_buf", ctypes.c_void_p),
    ]


class _BtfType(ctypes.Structure):
    _fields_ = [("name_off", ctypes.c_uint32), ("info", ctypes.c_uint32),
                ("size_or_type", ctypes.c_uint32)]


class _BtfVarSecinfo(ctypes.Structure):
    _fields_ = [("type", ctypes.c_uint32), ("offset", ctypes.c_uint32),
                ("size", ctypes.c_uint32)]


# Where a va_list is passed as a pointer, so a print callback can format it (see vsnprintf).
PRINT_CALLBACKS = platform.machine() in ("x86_64", "aarch64")
_PRINT_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)

_P = ctypes.c_void_p
_S = ctypes.c_char_p
_I = ctypes.c_int
_U32 = ctypes.c_uint32
_SIZE = ctypes.c_size_t
_SIGNATURES = {
    "bpf_object__open_file": (_P, [_S, _P]),
    "bpf_object__open_mem": (_P, [_P, _SIZE, _P]),
    "bpf_object__load": (_I, [_P]),
    "bpf_object__close": (None, [_P]),
    "bpf_object__btf": (_P, [_P]),
    "bpf_object__next_program": (_P, [_P, _P]),
    "bpf_object__next_map": (_P, [_P, _P]),
    "bpf_program__name": (_S, [_P]),
    "bpf_program__section_name": (_S, [_P]),
    "bpf_program__type": (_I, [_P]),
    "bpf_program__fd": (_I, [_P]),
    "bpf_program__set_autoload": (_I, [_P, ctypes.c_bool]),
    "bpf_program__set_type": (_I, [_P, _I]),
    "bpf_program__expected_attach_type": (_I, [_P]),
    "bpf_program__set_expected_attach_type": (_I, [_P, _I]),
    "bpf_program__flags": (_U32, [_P]),
    "bpf_program__set_flags": (_I, [_P, _U32]),
    "bpf_program__set_log_buf": (_I, [_P, _P, ctypes.c_size_t]),
    "bpf_program__set_attach_target": (_I, [_P, _I, _S]),
    "bpf_map__name": (_S, [_P]),
    "bpf_map__type": (_I, [_P]),
    "bpf_map__key_size": (_U32, [_P]),
    "bpf_map__value_size": (_U32, [_P]),
    "bpf_map__max_entries": (_U32, [_P]),
    "bpf_map__map_flags": (_U32, [_P]),
    "bpf_map__reuse_fd": (_I, [_P, _I]),
    "bpf_map__is_internal": (ctypes.c_bool, [_P]),
    "bpf_map__set_pin_path": (_I, [_P, _S]),
    "bpf_map__fd": (_I, [_P]),
    "bpf_map__btf_key_type_id": (_U32, [_P]),
    "bpf_map__btf_value_type_id": (_U32, [_P]),
    "bpf_map__initial_value": (_P, [_P, ctypes.POINTER(ctypes.c_size_t)]),
    "btf__find_by_name_kind": (_I, [_P, _S, _U32]),
    "btf__type_by_id": (_P, [_P, _U32]),
    "btf__name_by_offset": (_S, [_P, _U32]),
    "btf__load_from_kernel_by_id": (_P, [_U32]),
    "btf__free": (None, [_P]),
    "bpf_obj_pin": (_I, [_I, _S]),
    "bpf_obj_get": (_I, [_S]),
    "bpf_obj_get_info_by_fd": (_I, [_I, _P, ctypes.POINTER(_U32)]),
    "bpf_prog_get_fd_by_id": (_I, [_U32]),
    "bpf_map_get_fd_by_id": (_I, [_U32]),
    "bpf_link_get_fd_by_id": (_I, [_U32]),
    "bpf_link_get_next_id": (_I, [_U32, ctypes.POINTER(_U32)]),
    "bpf_map_create": (_I, [_I, _S, _U32, _U32, _U32, _P]),
    "bpf_map_lookup_elem": (_I, [_I, _P, _P]),
    "bpf_map_update_elem": (_I, [_I, _P, _P, ctypes.c_uint64]),
    "bpf_map_delete_elem": (_I, [_I, _P]),
    "bpf_map_get_next_key": (_I, [_I, _P, _P]),
    "bpf_map_lookup_batch": (_I, [_I, _P, _P, _P, _P, ctypes.POINTER(_U32), _P]),
    "bpf_map_update_batch": (_I, [_I, _P, _P, ctypes.POINTER(_U32), _P]),
    "bpf_link_create": (_I, [_I, _I, _I, _P]),
    "bpf_link_update": (_I, [_I, _I, _P]),
    "bpf_link_detach": (_I, [_I]),
    "bpf_xdp_attach": (_I, [_I, _I, _U32, _P]),
    "bpf_xdp_detach": (_I, [_I, _U32, _P]),
    "bpf_xdp_query": (_I, [_I, _I, _P]),
    "bpf_prog_test_run_opts": (_I, [_I, _P]),
    "bpf_prog_load": (_I, [_I, _S, _S, _P, ctypes.c_size_t, _P]),
    "libbpf_num_possible_cpus": (_I, []),
    "libbpf_set_print": (_P, [_PRINT_FN]),
}

_lib = None
_libc = None
_messages = []


def vsnprintf(buf, fmt, args) -> None:
    """Format a library's printf-style message into buf (libbpf's and libxdp's print callbacks)."""
    # va_list arrives as a pointer on x86_64 and aarch64; vsnprintf takes it as is.
    _libc.vsnprintf(buf, len(buf), fmt, ctypes.c_void_p(args))


def _print_hook(level, fmt, args):
    buf = ctypes.create_string_buffer(4096)
    vsnprintf(buf, fmt, args)
    _messages.append(buf.value.decode("utf-8", "replace"))
    return 0


_print_cb = _PRINT_FN(_print_hook)


# The entry points that go to the kernel, and how (see _session.count): each of the low-level API's is one bpf()
# call (an object's load and a kernel BTF's read are several, counted as one); the XDP ones are netlink requests.
ROUND_TRIPS = dict({name: "bpf" for name in _SIGNATURES if name.startswith("bpf_") and "__" not in name},
                   bpf_object__load="bpf", btf__load_from_kernel_by_id="bpf",
                   bpf_xdp_attach="netlink", bpf_xdp_detach="netlink", bpf_xdp_query="netlink")


def _counted(kind: str, name: str, func):
    """func, counted in the host session (a bpf() is ~1 us; the count a dict update)."""
    what = name[len("bpf_"):] if name.startswith("bpf_") else name

    def call(*args):
        _session.count(kind, what)
        return func(*args)
    return call


def lib() -> ctypes.CDLL:
    """Load libbpf once; raise ImportError when it is not installed."""
    global _lib, _libc
    if _lib is None:
        try:
            handle = ctypes.CDLL(LIBBPF_SONAME, use_errno=True)
        except OSError as exc:
            raise ImportError("cannot load %s: %s" % (LIBBPF_SONAME, exc))
        for name, (restype, argtypes) in _SIGNATURES.items():
            func = getattr(handle, name, None)
            if func is None:
                raise ImportError("%s lacks %s; libbpf >= 1.0 is required" % (LIBBPF_SONAME, name))
            func.restype = restype
            func.argtypes = argtypes
            if name in ROUND_TRIPS:
                setattr(handle, name, _counted(ROUND_TRIPS[name], name, func))
        _libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        _libc.vsnprintf.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_void_p]
        if PRINT_CALLBACKS:
            handle.libbpf_set_print(_print_cb)
        _lib = handle
    return _lib


def take_messages() -> list[str]:
    """Return and clear what libbpf printed since the last call."""
    out = [m.rstrip("\n") for m in _messages]
    del _messages[:]
    return out


def _check(ret: int | None, what: str) -> int:
    """libbpf 1.x returns -errno and also sets errno; `what` names the operation and target."""
    if ret is None or ret < 0:
        err = -ret if ret else ctypes.get_errno()
        raise BpfError(what, err)
    return ret


def _check_ptr(ptr, what):
    if not ptr:
        raise BpfError(what, ctypes.get_errno() or errno_mod.EINVAL,
                       "\n".join(take_messages()))
    return ptr


def _name(raw):
    return raw.decode("utf-8", "replace") if raw else ""


def num_possible_cpus() -> int:
    return _check(lib().libbpf_num_possible_cpus(), "cannot count possible CPUs")


# ---------------------------------------------------------------- objects


class BpfObject:
    """An ELF object opened by libbpf; use as a context manager.

    Closing the object closes its program and map fds; what was pinned or
    attached through a link stays in the kernel.
    """

    def __init__(self, path: str, data: bytes | None = None):
        """Open the object from `data`, the bytes of `path` as the caller read (and hashed) them; without data,
        from the file read once here. libbpf never reads the path: what is loaded is exactly these bytes,
        whatever happens to the file meanwhile."""
        self.path = path
        if data is None:
            with open(path, "rb") as handle:
                data = handle.read()
        self.data = data
        lib()
        take_messages()
        # libbpf parses the ELF in place and keeps pointing into it until the object is closed.
        self._buf = ctypes.create_string_buffer(data, len(data))
        # The name open_file would give (the file's name up to its first dot): internal maps (.rodata, .bss)
        # are named after it, and pinned maps and records compare those names.
        name = os.path.basename(path).split(".", 1)[0]
        opts = _ObjectOpenOpts(sz=ctypes.sizeof(_ObjectOpenOpts), object_name=name.encode())
        self._obj = _check_ptr(lib().bpf_object__open_mem(self._buf, len(data), ctypes.byref(opts)),
                               "open BPF object %s" % path)
        self._log_bufs = {}
        self.loaded = False

    @property
    def sha256(self) -> str:
        """The digest of the very bytes libbpf opened."""
        return hashlib.sha256(self.data).hexdigest()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @property
    def handle(self) -> int:
        """The struct bpf_object pointer, for a library that takes the object over (libxdp)."""
        return self._obj

    def has_btf(self) -> bool:
        return bool(lib().bpf_object__btf(self._obj))

    def close(self):
        if self._obj:
            lib().bpf_object__close(self._obj)
            self._obj = None
        self._buf = None

    def _programs(self):
        prog = lib().bpf_object__next_program(self._obj, None)
        while prog:
            yield prog
            prog = lib().bpf_object__next_program(self._obj, prog)

    def _maps(self):
        m = lib().bpf_object__next_map(self._obj, None)
        while m:
            yield m
            m = lib().bpf_object__next_map(self._obj, m)

    def programs(self) -> list[dict]:
        return [{
            "name": _name(lib().bpf_program__name(p)),
            "section": _name(lib().bpf_program__section_name(p)),
            "type": PROG_TYPES.get(lib().bpf_program__type(p), str(lib().bpf_program__type(p))),
        } for p in self._programs()]

    def maps(self, internal: bool = False) -> list[dict]:
        out = []
        for m in self._maps():
            is_internal = bool(lib().bpf_map__is_internal(m))
            if is_internal and not internal:
                continue
            mtype = lib().bpf_map__type(m)
            out.append({
                "name": _name(lib().bpf_map__name(m)),
                "type": MAP_TYPES.get(mtype, str(mtype)),
                "key_size": lib().bpf_map__key_size(m),
                "value_size": lib().bpf_map__value_size(m),
                "max_entries": lib().bpf_map__max_entries(m),
            })
        return out

    def map_btf(self, name: str) -> dict | None:
        """map_btf() of the object's map called name, as the object describes it (read before loading): None when
        the map has no BTF."""
        btf = lib().bpf_object__btf(self._obj)
        for m in self._maps():
            if _name(lib().bpf_map__name(m)) == name:
                key, value = lib().bpf_map__btf_key_type_id(m), lib().bpf_map__btf_value_type_id(m)
                return _btf_table(btf, key, value) if btf and (key or value) else None
        raise BpfError("map %r not found in %s; it has: %s" % (
            name, self.path, ", ".join(m["name"] for m in self.maps()) or "none"))

    def map_flags(self, name: str) -> int:
        """The BPF_F_* flags the object's map called name is created with."""
        for m in self._maps():
            if _name(lib().bpf_map__name(m)) == name:
                return lib().bpf_map__map_flags(m)
        raise BpfError("map %r not found in %s" % (name, self.path))

    def _find_program(self, name):
        for p in self._programs():
            if _name(lib().bpf_program__name(p)) == name:
                return p
        raise BpfError("program %r not found in %s; it has: %s" % (
            name, self.path, ", ".join(p["name"] for p in self.programs()) or "none"))

    def only_load(self, *names: str) -> None:
        """Load just the named programs (others in the object stay out of the kernel)."""
        wanted = [self._find_program(name) for name in names]
        for p in self._programs():
            lib().bpf_program__set_autoload(p, p in wanted)

    def expected_attach_type(self, name: str) -> int:
        """The attach type the program is loaded for (libbpf sets it from the section name)."""
        return lib().bpf_program__expected_attach_type(self._find_program(name))

    def set_expected_attach_type(self, name: str, attach_type: int) -> None:
        _check(lib().bpf_program__set_expected_attach_type(self._find_program(name), attach_type),
               "set the expected attach type of program %s of %s to %d" % (name, self.path, attach_type))

    def set_type(self, name: str, prog_type: str) -> None:
        """Load the named program as another type: a SEC("tc") classifier as a tc action (sched_act)."""
        number = [k for k, v in PROG_TYPES.items() if v == prog_type][0]
        _check(lib().bpf_program__set_type(self._find_program(name), number),
               "set the type of program %s of %s to %s" % (name, self.path, prog_type))

    def add_flags(self, name: str, flags: int) -> None:
        """Load the named program with these BPF_F_* load flags too (BPF_F_XDP_HAS_FRAGS)."""
        prog = self._find_program(name)
        _check(lib().bpf_program__set_flags(prog, lib().bpf_program__flags(prog) | flags),
               "set the load flags of program %s of %s" % (name, self.path))

    def set_attach_target(self, name: str, target: Program, function: str) -> None:
        """Load the named program as a replacement (freplace) of `function` in the loaded program target."""
        _check(lib().bpf_program__set_attach_target(self._find_program(name), target.fd, function.encode()),
               "set the attach target of program %s of %s to %s" % (name, self.path, function))

    def pin_maps(self, directory: str) -> None:
        """Pin every user map at directory/NAME; libbpf reuses a compatible pin on load (devmaps: see
        _reuse_devmap)."""
        for m in self._maps():
            if lib().bpf_map__is_internal(m):
                continue
            path = os.path.join(directory, _name(lib().bpf_map__name(m)))
            if lib().bpf_map__type(m) in DEVMAP_TYPES and os.path.exists(path):
                self._reuse_devmap(m, path)
                continue
            _check(lib().bpf_map__set_pin_path(m, path.encode()), "set pin path %s" % path)

    @staticmethod
    def _reuse_devmap(m, path: str) -> None:
        """Hand libbpf the pinned devmap at path. libbpf before 1.3 (Debian 12 has 1.1) compares the pin's flags
        with the object's as they are, and the kernel's own BPF_F_RDONLY_PROG makes every pinned devmap differ:
        a second load of the object (an upgrade, a mode switch) was refused. The same check, that flag aside."""
        with Map.from_pin(path) as pinned:
            want = (lib().bpf_map__type(m), lib().bpf_map__key_size(m), lib().bpf_map__value_size(m),
                    lib().bpf_map__max_entries(m), lib().bpf_map__map_flags(m) & ~BPF_F_RDONLY_PROG)
            have = (pinned.info["type_id"], pinned.info["key_size"], pinned.info["value_size"],
                    pinned.info["max_entries"], pinned.map_flags & ~BPF_F_RDONLY_PROG)
            if want != have:
                raise BpfError("couldn't reuse pinned map at %s: parameter mismatch (type, key size, value size, "
                               "max entries, flags: pinned %s, object %s)" % (path, have, want), errno_mod.EINVAL)
            _check(lib().bpf_map__reuse_fd(m, pinned.fd), "reuse pinned map %s" % path)

    def clear_pin_paths(self) -> None:
        """Keep every map out of bpffs, even those declared LIBBPF_PIN_BY_NAME (check mode)."""
        for m in self._maps():
            _check(lib().bpf_map__set_pin_path(m, None), "clear the pin path of a map of %s" % self.path)

    def data_digest(self) -> str:
        """SHA-256 of the initial contents of .rodata/.data/.bss, constants included.

        The kernel's program tag covers instructions only: two objects that differ
        in a const volatile default have the same tag but behave differently.
        """
        digest = hashlib.sha256()
        for m in self._maps():
            if not lib().bpf_map__is_internal(m):
                continue
            size = ctypes.c_size_t()
            base = lib().bpf_map__initial_value(m, ctypes.byref(size))
            # libbpf prefixes the section with the object's file name: hash ".rodata", not "obj.rodata".
            name = _name(lib().bpf_map__name(m))
            digest.update(name[name.rfind("."):].encode() + b"\0")
            if base:
                digest.update(ctypes.string_at(base, size.value))
        return digest.hexdigest()

    def set_constants(self, values: dict | None) -> None:
        """Write load-time settings (const volatile globals) into .rodata."""
        if not values:
            return
        rodata = None
        for m in self._maps():
            if lib().bpf_map__is_internal(m) and _name(lib().bpf_map__name(m)).endswith(".rodata"):
                rodata = m
        variables = self._datasec_vars(".rodata") if rodata else {}
        unknown = sorted(set(values) - set(variables))
        if unknown:
            raise BpfError("%s has no const volatile setting named %s; it has: %s" % (
                self.path, ", ".join(unknown), ", ".join(sorted(variables)) or "none"))
        size = ctypes.c_size_t()
        base = _check_ptr(lib().bpf_map__initial_value(rodata, ctypes.byref(size)),
                          "reach .rodata of %s" % self.path)
        for name, value in values.items():
            offset, width = variables[name]
            if isinstance(value, bool):
                value = int(value)
            try:
                raw = int(value).to_bytes(width, sys.byteorder, signed=int(value) < 0)
            except (OverflowError, ValueError, TypeError):
                raise BpfError("setting %s=%r does not fit its %d-byte variable" % (name, value, width))
            ctypes.memmove(base + offset, raw, width)

    def _datasec_vars(self, section):
        btf = lib().bpf_object__btf(self._obj)
        if not btf:
            return {}
        sec_id = lib().btf__find_by_name_kind(btf, section.encode(), BTF_KIND_DATASEC)
        if sec_id < 0:
            return {}
        sec_addr = lib().btf__type_by_id(btf, sec_id)
        sec = _BtfType.from_address(sec_addr)
        out = {}
        for i in range(sec.info & 0xffff):
            info = _BtfVarSecinfo.from_address(sec_addr + ctypes.sizeof(_BtfType) + i * ctypes.sizeof(_BtfVarSecinfo))
            var = _BtfType.from_address(lib().btf__type_by_id(btf, info.type))
            out[_name(lib().btf__name_by_offset(btf, var.name_off))] = (info.offset, info.size)
        return out

    def load(self) -> None:
        """Load into the kernel; a verifier rejection carries the verifier log."""
        for p in self._programs():
            buf = ctypes.create_string_buffer(1 << 20)
            self._log_bufs[_name(lib().bpf_program__name(p))] = buf
            # log_level stays 0: libbpf retries with logging only when the load fails.
            lib().bpf_program__set_log_buf(p, buf, len(buf))
        take_messages()
        ret = lib().bpf_object__load(self._obj)
        if ret < 0:
            logs = [b.value.decode("utf-8", "replace") for b in self._log_bufs.values() if b.value]
            messages = take_messages()
            raise BpfError("the kernel rejected %s" % os.path.basename(self.path), -ret,
                           "\n".join(logs) if logs else "\n".join(messages))
        self.loaded = True

    def program(self, name: str) -> Program:
        """The loaded program, with an fd of its own (it stays valid after close())."""
        fd = _check(lib().bpf_program__fd(self._find_program(name)), "program %s of %s is not loaded" % (name, self.path))
        return Program(os.dup(fd), name)

    def map_names(self) -> list[str]:
        """Names of the object's maps, without libbpf's internal .rodata/.data/.bss."""
        return [_name(lib().bpf_map__name(m)) for m in self._maps() if not lib().bpf_map__is_internal(m)]


# ---------------------------------------------------------------- owned fds


class Fd:
    """One owned file descriptor of a BPF object, closed by close() or at the end of `with`."""

    kind = "object"

    def __init__(self, fd: int, label: str):
        self.fd = fd
        self.label = label

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    @classmethod
    def from_pin(cls, path: str):
        return cls(_check(lib().bpf_obj_get(path.encode()), "open pinned %s %s" % (cls.kind, path)), path)

    def pin(self, path: str) -> None:
        _check(lib().bpf_obj_pin(self.fd, path.encode()), "pin %s %s at %s" % (self.kind, self.label, path))

    def identity(self) -> tuple[str, int]:
        """What the fd refers to, whatever its kind: ("link", id), ("prog", id) or ("map", id), from the
        kernel's fdinfo (a link's also names its program, so the link is looked for first)."""
        with open("/proc/self/fdinfo/%d" % self.fd) as handle:
            fields = dict(line.split(":", 1) for line in handle if ":" in line)
        for kind in ("link", "prog", "map"):
            if kind + "_id" in fields:
                return kind, int(fields[kind + "_id"])
        raise BpfError("%s %s is not a BPF map, program or link" % (self.kind, self.label))

    def _info(self, struct):
        info = struct()
        size = _U32(ctypes.sizeof(info))
        _check(lib().bpf_obj_get_info_by_fd(self.fd, ctypes.byref(info), ctypes.byref(size)),
               "read info of %s %s" % (self.kind, self.label))
        return info


# Map ids one program info call has room for: programs rarely use more.
MAP_IDS_ROOM = 16

# What the info of a program or a map says never changes, and the kernel does not give an id out again (it counts
# up to 2^31 before it wraps): the facts read it for every program on each of the exporter's scrapes, so it is kept
# by id, up to INFO_KEPT of each (all forgotten when full: an exporter outlives many programs).
INFO_KEPT = 4096
_PROGRAM_INFO: dict[int, dict] = {}
_MAP_INFO: dict[int, tuple[dict, int]] = {}


def _keep(kept: dict, key: int, value) -> None:
    if len(kept) >= INFO_KEPT and key not in kept:
        kept.clear()
    kept[key] = value


def program_info(prog_id: int) -> dict:
    """Program.info() of the program with this id, read from the kernel once (do not change what it returns)."""
    if prog_id not in _PROGRAM_INFO:
        with Program.from_id(prog_id) as prog:
            _keep(_PROGRAM_INFO, prog_id, prog.info())
    return _PROGRAM_INFO[prog_id]


def map_info(map_id: int) -> dict:
    """Map.info of the map with this id, read from the kernel once (do not change what it returns)."""
    if map_id not in _MAP_INFO:
        Map.from_id(map_id).close()  # Map keeps its info
    return _MAP_INFO[map_id][0]


# struct bpf_insn: opcode, dst_reg and src_reg in one byte (dst in the low nibble on little-endian hosts), offset,
# immediate; and the opcodes of the few instructions the collection writes by hand (uapi/linux/bpf_common.h).
INSN = struct.Struct("=BBhi")
BPF_MOV64_IMM = 0x07 | 0xb0 | 0x00  # BPF_ALU64 | BPF_MOV | BPF_K
BPF_EXIT = 0x05 | 0x90  # BPF_JMP | BPF_EXIT
# enum xdp_action (uapi/linux/bpf.h), in its order: the one table of XDP's verdicts (replay's, libxdp's names).
XDP_ACTIONS = ("XDP_ABORTED", "XDP_DROP", "XDP_PASS", "XDP_TX", "XDP_REDIRECT")
XDP_DROP, XDP_PASS = XDP_ACTIONS.index("XDP_DROP"), XDP_ACTIONS.index("XDP_PASS")


def insn(code: int, dst: int = 0, src: int = 0, off: int = 0, imm: int = 0) -> bytes:
    """One instruction as the kernel reads it."""
    regs = dst | src << 4 if sys.byteorder == "little" else dst << 4 | src
    return INSN.pack(code, regs, off, imm)


class Program(Fd):
    kind = "program"

    @classmethod
    def from_id(cls, prog_id: int) -> Program:
        return cls(_check(lib().bpf_prog_get_fd_by_id(prog_id), "open BPF program id %d" % prog_id),
                   "id %d" % prog_id)

    @classmethod
    def from_instructions(cls, prog_type: str, name: str, instructions: bytes, license_: str = "GPL",
                          expected_attach_type: int = 0) -> Program:
        """A program loaded from raw instructions (struct bpf_insn, see insn()), without an object file;
        a verifier rejection carries the verifier's log."""
        number = [k for k, v in PROG_TYPES.items() if v == prog_type][0]
        log = ctypes.create_string_buffer(1 << 16)
        # log_level stays 0: libbpf retries with logging only when the load fails.
        opts = _ProgLoadOpts(sz=ctypes.sizeof(_ProgLoadOpts), expected_attach_type=expected_attach_type,
                             log_size=len(log), log_buf=ctypes.addressof(log))
        code = ctypes.create_string_buffer(bytes(instructions), len(instructions))
        count = len(instructions) // INSN.size
        ret = lib().bpf_prog_load(number, name.encode(), license_.encode(), code, count, ctypes.byref(opts))
        if ret < 0:
            raise BpfError("load %s program %s from %d instructions" % (prog_type, name, count), -ret,
                           log.value.decode("utf-8", "replace"))
        return cls(ret, name)

    def info(self) -> dict:
        """id, name, tag, type and the ids of the maps the program uses (one call when they fit the room
        given, a second one with room for all when not)."""
        room = MAP_IDS_ROOM
        while True:
            ids = (_U32 * room)()
            info = _ProgInfo(nr_map_ids=room, map_ids=ctypes.addressof(ids))
            size = _U32(ctypes.sizeof(info))
            _check(lib().bpf_obj_get_info_by_fd(self.fd, ctypes.byref(info), ctypes.byref(size)),
                   "read info of %s %s" % (self.kind, self.label))
            if info.nr_map_ids <= room:
                break
            room = info.nr_map_ids
        map_ids = list(ids)[:info.nr_map_ids]
        return {
            "id": info.id,
            "name": _name(info.name),
            "tag": bytes(info.tag).hex(),
            "type": PROG_TYPES.get(info.type, str(info.type)),
            "map_ids": map_ids,
        }

    def test_run(self, data: bytes, repeat: int = 1, flags: int = 0, batch_size: int = 0,
                 ctx: bytes | None = None) -> tuple[int, int]:
        """BPF_PROG_TEST_RUN; returns (retval, average duration in ns)."""
        data_buf = ctypes.create_string_buffer(bytes(data), len(data))
        ctx_buf = ctypes.create_string_buffer(bytes(ctx), len(ctx)) if ctx else None
        opts = _TestRunOpts(sz=ctypes.sizeof(_TestRunOpts),
                            data_in=ctypes.addressof(data_buf), data_size_in=len(data),
                            repeat=repeat, flags=flags, batch_size=batch_size)
        if ctx_buf is not None:
            opts.ctx_in = ctypes.addressof(ctx_buf)
            opts.ctx_size_in = len(ctx)
        _check(lib().bpf_prog_test_run_opts(self.fd, ctypes.byref(opts)), "test-run program %s" % self.label)
        return opts.retval, opts.duration

    def test_run_output(self, data: bytes, ctx: bytes | None = None, room: int = 256) -> tuple[int, bytes]:
        """One BPF_PROG_TEST_RUN (not live) that returns (retval, the data as the program left it).

        For XDP the data comes back from the metadata on, when ctx gave some;
        `room` is what the program may add to the data's length.
        """
        data_buf = ctypes.create_string_buffer(bytes(data), len(data))
        out_buf = ctypes.create_string_buffer(len(data) + room)
        ctx_buf = ctypes.create_string_buffer(bytes(ctx), len(ctx)) if ctx else None
        opts = _TestRunOpts(sz=ctypes.sizeof(_TestRunOpts),
                            data_in=ctypes.addressof(data_buf), data_size_in=len(data),
                            data_out=ctypes.addressof(out_buf), data_size_out=len(out_buf), repeat=1)
        if ctx_buf is not None:
            opts.ctx_in = ctypes.addressof(ctx_buf)
            opts.ctx_size_in = len(ctx)
        _check(lib().bpf_prog_test_run_opts(self.fd, ctypes.byref(opts)), "test-run program %s" % self.label)
        return opts.retval, out_buf.raw[:opts.data_size_out]


class Map(Fd):
    """Typed access to one map; per-CPU values come back as one entry per CPU."""

    kind = "map"

    def __init__(self, fd: int, label: str, known: tuple[dict, int] | None = None):
        super().__init__(fd, label)
        try:
            self.info, self.map_flags = known or self._read_info()
        except BpfError:
            self.close()
            raise
        _keep(_MAP_INFO, self.info["id"], (self.info, self.map_flags))
        self.percpu = self.info["type_id"] in PERCPU_MAP_TYPES
        self.ncpus = num_possible_cpus() if self.percpu else 1
        # The kernel copies per-CPU values in 8-byte slots.
        self.slot = (self.info["value_size"] + 7) // 8 * 8 if self.percpu else self.info["value_size"]

    @classmethod
    def from_id(cls, map_id: int) -> Map:
        return cls(_check(lib().bpf_map_get_fd_by_id(map_id), "open BPF map id %d" % map_id), "id %d" % map_id,
                   _MAP_INFO.get(map_id))

    @classmethod
    def create(cls, map_type: int, name: str, key_size: int, value_size: int, max_entries: int,
               flags: int = 0, inner_map: Map | None = None) -> Map:
        """A new map, held by this process only until it is pinned or put into another map.

        inner_map: for a map of maps, a map with the layout every inner map must have.
        """
        opts = _MapCreateOpts(sz=ctypes.sizeof(_MapCreateOpts), map_flags=flags,
                              inner_map_fd=inner_map.fd if inner_map else 0)
        fd = _check(lib().bpf_map_create(map_type, name.encode(), key_size, value_size, max_entries,
                                         ctypes.byref(opts)),
                    "create map %s" % name)
        return cls(fd, name)

    def _read_info(self) -> dict:
        info = self._info(_MapInfo)
        return {
            "id": info.id,
            "name": _name(info.name),
            "type": MAP_TYPES.get(info.type, str(info.type)),
            "type_id": info.type,
            "key_size": info.key_size,
            "value_size": info.value_size,
            "max_entries": info.max_entries,
        }, info.map_flags

    def _key(self, key: bytes):
        return ctypes.create_string_buffer(bytes(key), self.info["key_size"])

    def lookup(self, key: bytes) -> bytes | list[bytes] | None:
        """Raw value bytes (list of per-CPU bytes for per-CPU maps), or None."""
        value = ctypes.create_string_buffer(self.slot * self.ncpus)
        ret = lib().bpf_map_lookup_elem(self.fd, self._key(key), value)
        if ret < 0:
            if -ret == errno_mod.ENOENT:
                return None
            _check(ret, "look up a key in map %s" % self.label)
        raw = value.raw
        if self.percpu:
            return [raw[i * self.slot:i * self.slot + self.info["value_size"]] for i in range(self.ncpus)]
        return raw

    def inner(self, key: bytes) -> Map | None:
        """The map stored at key in a map of maps (a lookup answers its id), or None."""
        value = self.lookup(key)
        if value is None:
            return None
        return Map.from_id(int.from_bytes(value[:4], sys.byteorder))

    def update(self, key: bytes, value: bytes, flags: int = 0) -> None:
        _check(lib().bpf_map_update_elem(self.fd, self._key(key),
                                         ctypes.create_string_buffer(bytes(value), self.slot * self.ncpus),
                                         flags),
               "update a key in map %s" % self.label)

    def update_many(self, items: list[tuple[bytes, bytes]]) -> None:
        """update() of every (key, value), BATCH_SIZE at a time with BPF_MAP_UPDATE_BATCH where the kernel can
        (hashes and arrays, Linux 5.6): one call instead of one per key (a migration's copy of 100,000 entries),
        else key by key."""
        key_size, value_bytes = self.info["key_size"], self.slot * self.ncpus
        batch = self.info["type_id"] in BATCH_MAP_TYPES
        for start in range(0, len(items), BATCH_SIZE):
            chunk = items[start:start + BATCH_SIZE]
            if batch:
                keys = b"".join(bytes(key).ljust(key_size, b"\0") for key, _value in chunk)
                values = b"".join(bytes(value).ljust(value_bytes, b"\0") for _key, value in chunk)
                count = _U32(len(chunk))
                ret = lib().bpf_map_update_batch(self.fd, ctypes.create_string_buffer(keys, len(keys)),
                                                 ctypes.create_string_buffer(values, len(values)),
                                                 ctypes.byref(count), None)
                if ret >= 0:
                    continue
                if start or count.value or -ret not in NO_BATCH:
                    _check(ret, "update map %s in batches" % self.label)
                batch = False  # this kernel cannot: key by key from here
            for key, value in chunk:
                self.update(key, value)

    def delete(self, key: bytes) -> bool:
        ret = lib().bpf_map_delete_elem(self.fd, self._key(key))
        if ret < 0 and -ret != errno_mod.ENOENT:
            _check(ret, "delete a key in map %s" % self.label)
        return ret == 0

    def keys(self) -> list[bytes]:
        return list(self._keys())

    def _keys(self) -> Iterator[bytes]:
        cur = None
        nxt = ctypes.create_string_buffer(self.info["key_size"])
        while True:
            ret = lib().bpf_map_get_next_key(self.fd, cur, nxt)
            if ret < 0:
                if -ret == errno_mod.ENOENT:
                    return
                _check(ret, "iterate map %s" % self.label)
            yield nxt.raw
            cur = ctypes.create_string_buffer(nxt.raw, self.info["key_size"])

    def items(self, limit: int | None = None) -> Iterator[tuple[bytes, bytes | list[bytes]]]:
        """Every (key, value), or the first limit of them, values as lookup() gives them: in batches where the
        kernel can (batches()), else key by key."""
        batches = self.batches(limit)
        if batches is None:
            found = 0
            for key in self._keys():
                if limit is not None and found >= limit:
                    return
                value = self.lookup(key)
                if value is not None:
                    found += 1
                    yield key, value
            return
        key_size, value_bytes = self.info["key_size"], self.slot * self.ncpus
        found = 0
        for keys, values, count in batches:
            for i in range(count):
                if limit is not None and found >= limit:
                    return
                found += 1
                value = values[i * value_bytes:(i + 1) * value_bytes]
                if self.percpu:
                    value = [value[c * self.slot:c * self.slot + self.info["value_size"]] for c in range(self.ncpus)]
                yield keys[i * key_size:(i + 1) * key_size], value

    def batches(self, limit: int | None = None) -> list[tuple[bytes, bytes, int]] | None:
        """The whole map (or chunks that hold at least its first limit entries, where it has them) as (keys,
        values, count) chunks read with BPF_MAP_LOOKUP_BATCH: one call for a map of counters instead of one
        per key (the exporter reads every counter map on each scrape). The chunks hold count keys and count
        values back to back, values laid out as lookup() reads them (per-CPU: slot bytes per CPU). None where
        this kernel cannot read the map type so (before Linux 5.6, or a type without batches)."""
        if self.info["type_id"] not in BATCH_MAP_TYPES:
            return None
        key_size, value_bytes = self.info["key_size"], self.slot * self.ncpus
        size = min(self.info["max_entries"], BATCH_SIZE) or 1
        if limit is not None and self.info["type_id"] in ARRAY_MAP_TYPES:
            # A hash's batch takes whole buckets (ENOSPC when one does not fit): only an array's is cut to size.
            size = max(min(size, limit), 1)
        keys = ctypes.create_string_buffer(size * key_size)
        values = ctypes.create_string_buffer(size * value_bytes)
        token = ctypes.create_string_buffer(max(key_size, 8))  # where the next batch starts (a key or a bucket)
        start, out, read = None, [], 0
        while True:
            count = _U32(size)
            ret = lib().bpf_map_lookup_batch(self.fd, start, token, keys, values, ctypes.byref(count), None)
            if ret < 0 and -ret != errno_mod.ENOENT:
                if start is None and -ret in NO_BATCH:
                    return None
                _check(ret, "read map %s in batches" % self.label)
            if count.value:
                out.append((keys.raw[:count.value * key_size], values.raw[:count.value * value_bytes], count.value))
            read += count.value
            # ENOENT: that was the last batch; an array has all its keys, once they are read there are no more.
            if ret < 0 or (self.info["type_id"] in ARRAY_MAP_TYPES and read == self.info["max_entries"]) \
                    or (limit is not None and read >= limit):
                return out
            start = ctypes.create_string_buffer(token.raw, len(token.raw))


# ---------------------------------------------------------------- map entries (ebpf.xdp.bpf_map_entry)
#
# Opening a pin that must be a map, and the map's own BTF as plain data: the
# encoding of keys and values from it is pure Python (_map_entry), so it is
# tested without a kernel. Kept in one block apart from Map.

BTF_KINDS = {1: "int", 2: "ptr", 3: "array", 4: "struct", 5: "union", 6: "enum", 7: "fwd", 8: "typedef",
             9: "volatile", 10: "const", 11: "restrict", 12: "func", 13: "func_proto", 14: "var", 15: "datasec",
             16: "float", 17: "decl_tag", 18: "type_tag", 19: "enum64"}
# Kinds whose third word is a size; for the others it is a type id.
_BTF_SIZED = ("int", "struct", "union", "enum", "enum64", "float", "datasec")


def pinned_value(path: str, key: bytes, value_size: int) -> bytes | None:
    """The value at key of the map pinned at path, which must have keys and values of these sizes; None when
    nothing is pinned there. One open, one info call and one lookup, without a Map: the facts read an
    ownership record this way for every program on each of the exporter's scrapes."""
    fd = lib().bpf_obj_get(path.encode())
    if fd < 0:
        if -fd == errno_mod.ENOENT:
            return None
        _check(fd, "open pinned map %s" % path)
    with Fd(fd, path) as pinned:
        info = pinned._info(_MapInfo)  # pylint: disable=protected-access
        # The kernel writes value_size bytes into the buffer given: the sizes are checked first.
        if (info.key_size, info.value_size) != (len(key), value_size) or info.type in PERCPU_MAP_TYPES:
            raise BpfError("%s is not a map of %d-byte keys and %d-byte values" % (path, len(key), value_size))
        value = ctypes.create_string_buffer(value_size)
        ret = lib().bpf_map_lookup_elem(fd, ctypes.create_string_buffer(key, len(key)), value)
        if ret < 0 and -ret != errno_mod.ENOENT:
            _check(ret, "look up a key in map %s" % path)
        return value.raw if ret == 0 else b""


def open_pinned_map(path: str) -> Map:
    """The map pinned at path, or an error that says what is (or is not) there."""
    ret = lib().bpf_obj_get(path.encode())
    if ret < 0:
        err = -ret
        if err == errno_mod.ENOENT:
            raise BpfError("no pinned map at %s: nothing is pinned there" % path)
        if err == errno_mod.EACCES and os.path.exists(path):
            # bpf_obj_get answers EACCES for anything that is not a BPF object.
            what = "a directory" if os.path.isdir(path) else "not a pinned BPF object (not on bpffs)"
            raise BpfError("%s is %s, not a pinned map" % (path, what))
        raise BpfError("open pinned map %s" % path, err)
    try:
        kind = os.readlink("/proc/self/fd/%d" % ret)
    except OSError:
        kind = ""
    # Every BPF object answers bpf_obj_get_info_by_fd, each with its own struct: check the kind first.
    if kind != "anon_inode:bpf-map":
        os.close(ret)
        raise BpfError("%s is a pinned %s, not a map" % (path, kind.rpartition("bpf-")[2] or "object"))
    return Map(ret, path)


def _btf_type(btf, type_id: int) -> dict:
    addr = _check_ptr(lib().btf__type_by_id(btf, type_id), "read BTF type %d" % type_id)
    head = _BtfType.from_address(addr)
    kind = BTF_KINDS.get((head.info >> 24) & 0x1f, "unknown")
    vlen, kflag = head.info & 0xffff, head.info >> 31
    words = (_U32 * (3 * vlen if kind in ("struct", "union", "enum64") else 2 * vlen if kind == "enum"
                     else 3 if kind == "array" else 1 if kind == "int" else 0)).from_address(
        addr + ctypes.sizeof(_BtfType))
    out = {"kind": kind, "name": _name(lib().btf__name_by_offset(btf, head.name_off))}
    out["size" if kind in _BTF_SIZED else "type"] = head.size_or_type
    if kind == "int":
        out.update(signed=bool(words[0] >> 24 & 1), char=bool(words[0] >> 24 & 2), bool=bool(words[0] >> 24 & 4),
                   bits=words[0] & 0xff)
    elif kind == "array":
        out.update(type=words[0], nelems=words[2])
    elif kind in ("struct", "union"):
        # With kflag the member offset carries the bitfield size in its top byte.
        out["members"] = [{
            "name": _name(lib().btf__name_by_offset(btf, words[3 * i])), "type": words[3 * i + 1],
            "bit_offset": words[3 * i + 2] & 0xffffff if kflag else words[3 * i + 2],
            "bitfield_size": words[3 * i + 2] >> 24 if kflag else 0,
        } for i in range(vlen)]
    elif kind in ("enum", "enum64"):
        step = 2 if kind == "enum" else 3
        values = []
        for i in range(vlen):
            raw = words[step * i + 1] | (words[step * i + 2] << 32 if kind == "enum64" else 0)
            bits = 32 if kind == "enum" else 64
            if kflag and raw >> (bits - 1):
                raw -= 1 << bits
            values.append((_name(lib().btf__name_by_offset(btf, words[step * i])), raw))
        out.update(signed=bool(kflag), values=values)
    return out


def map_btf(m: Map) -> dict | None:
    """The map's key and value types from its BTF, or None when it has none.

    {"key": type id, "value": type id (0: that side has no type), "types": {id: type}}
    where a type is a plain dict (kind, name, size or type, and members, nelems,
    values, ... by kind) for every type the key and value reach, pointers excepted.
    """
    info = m._info(_MapInfo)
    if not info.btf_id or not (info.btf_key_type_id or info.btf_value_type_id):
        return None
    btf = _check_ptr(lib().btf__load_from_kernel_by_id(info.btf_id),
                     "load BTF id %d of map %s" % (info.btf_id, m.label))
    try:
        return _btf_table(btf, info.btf_key_type_id, info.btf_value_type_id)
    finally:
        lib().btf__free(btf)


def _btf_table(btf, key_type_id: int, value_type_id: int) -> dict:
    """map_btf()'s answer from a struct btf: every type the key and value reach, pointers excepted."""
    types = {}
    todo = [t for t in (key_type_id, value_type_id) if t]
    while todo:
        type_id = todo.pop()
        if type_id in types:
            continue
        types[type_id] = entry = _btf_type(btf, type_id)
        if entry["kind"] != "ptr" and entry.get("type"):
            todo.append(entry["type"])
        todo.extend(member["type"] for member in entry.get("members", ()) if member["type"])
    return {"key": key_type_id, "value": value_type_id, "types": types}


class Link(Fd):
    """A bpf_link: attached while an fd or a pin holds it; updated in place."""

    kind = "link"

    @classmethod
    def from_id(cls, link_id: int) -> Link:
        return cls(_check(lib().bpf_link_get_fd_by_id(link_id), "open BPF link id %d" % link_id),
                   "id %d" % link_id)

    @classmethod
    def create(cls, prog: Program, ifindex: int, attach_type: int, flags: int = 0) -> Link:
        """Attach prog to an interface hook (XDP: flags choose the mode) through a new link."""
        opts = _LinkCreateOpts(sz=ctypes.sizeof(_LinkCreateOpts), flags=flags)
        what = "attach %s link to ifindex %d" % (ATTACH_TYPES.get(attach_type, attach_type), ifindex)
        try:
            return cls(_check(lib().bpf_link_create(prog.fd, ifindex, attach_type, ctypes.byref(opts)), what), what)
        finally:
            _session.wrote_hook(ifindex)

    @classmethod
    def create_tcx(cls, prog: Program, ifindex: int, attach_type: int, flags: int = 0,
                   relative_id: int = 0, expected_revision: int = 0) -> Link:
        """Attach prog at a tcx hook, ordered relative to another program or link (BPF_F_BEFORE/AFTER)."""
        attr = _LinkCreateAttr(prog_fd=prog.fd, target_ifindex=ifindex, attach_type=attach_type,
                               flags=flags | (BPF_F_ID if relative_id else 0), relative_fd_or_id=relative_id,
                               expected_revision=expected_revision)
        what = "attach %s link to ifindex %d" % (ATTACH_TYPES.get(attach_type, attach_type), ifindex)
        try:
            return cls(_sys_bpf(BPF_LINK_CREATE, attr, what), what)
        finally:
            _session.wrote_hook(ifindex)

    def info(self) -> dict:
        """id, kind of link, program id, ifindex and attach type."""
        info = self._info(_LinkInfo)
        kind = LINK_TYPES.get(info.type, str(info.type))
        attach_type = info.attach_type if kind == "tcx" else BPF_XDP if kind == "xdp" else None
        return {
            "id": info.id,
            "type": kind,
            "prog_id": info.prog_id,
            "ifindex": info.ifindex if kind in ("xdp", "tcx") else None,
            "attach_type": ATTACH_TYPES.get(attach_type, attach_type),
        }

    def update(self, prog: Program) -> None:
        """Swap the program atomically: the hook is never without one."""
        ifindex = self._hook()
        try:
            _check(lib().bpf_link_update(self.fd, prog.fd, None),
                   "update link %s to program %s" % (self.label, prog.label))
        finally:
            _session.wrote_hook(ifindex)

    def detach(self) -> None:
        """Detach now (unpinning alone releases the link later, after RCU and a workqueue)."""
        ifindex = self._hook()
        try:
            _check(lib().bpf_link_detach(self.fd), "detach link %s" % self.label)
        finally:
            _session.wrote_hook(ifindex)

    def _hook(self) -> int | None:
        """The interface whose hook the link holds, for the host session to forget that hook's state when the
        link changes (None: any hook; outside a session, not asked)."""
        if _session.active() is None:
            return None
        try:
            return self.info()["ifindex"] or None
        except BpfError:
            return None


def links() -> Iterator[dict]:
    """info() of every BPF link in the system; links that vanish while listed are skipped."""
    cur = _U32(0)
    nxt = _U32(0)
    while lib().bpf_link_get_next_id(cur.value, ctypes.byref(nxt)) == 0:
        cur.value = nxt.value
        try:
            link = Link.from_id(nxt.value)
        except BpfError:
            continue
        with link:
            yield link.info()


_syscall_libc = None  # the C library's syscall(), for the bpf() commands libbpf 1.1 has no API for


def _sys_bpf(cmd: int, attr: ctypes.Structure, what: str) -> int:
    number = SYS_BPF.get(platform.machine())
    if number is None:
        raise BpfError("%s: the bpf() system call number of %s is not known here" % (what, platform.machine()))
    global _syscall_libc  # pylint: disable=global-statement
    if _syscall_libc is None:
        _syscall_libc = ctypes.CDLL(None, use_errno=True)
        _syscall_libc.syscall.restype = ctypes.c_long
    _session.count("bpf", BPF_COMMANDS.get(cmd, str(cmd)))
    ret = _syscall_libc.syscall(ctypes.c_long(number), ctypes.c_int(cmd), ctypes.byref(attr),
                                ctypes.c_uint(ctypes.sizeof(attr)))
    if ret < 0:
        raise BpfError(what, ctypes.get_errno())
    return ret


# Programs one query has room for: a hook rarely holds more, and one bpf() call then answers.
TCX_QUERY_ROOM = 16


def tcx_query(ifindex: int, attach_type: int) -> dict:
    """What a tcx hook holds, in run order: program ids, link ids (0 for none) and the hook's revision."""
    what = "query %s hook of ifindex %d" % (ATTACH_TYPES.get(attach_type, attach_type), ifindex)
    room = TCX_QUERY_ROOM
    while True:
        prog_ids, link_ids = (_U32 * room)(), (_U32 * room)()
        attr = _ProgQueryAttr(target_ifindex=ifindex, attach_type=attach_type, count=room,
                              prog_ids=ctypes.addressof(prog_ids), link_ids=ctypes.addressof(link_ids))
        try:
            _sys_bpf(BPF_PROG_QUERY, attr, what)
        except BpfError as exc:
            if exc.errno != errno_mod.ENOSPC:
                raise
        if attr.count <= room:  # else (ENOSPC) the kernel said how many there are: ask again with room for all
            n = attr.count
            return {"prog_ids": list(prog_ids)[:n], "link_ids": list(link_ids)[:n], "revision": attr.revision}
        room = attr.count


# ---------------------------------------------------------------- netlink attach


def xdp_attach_netlink(ifindex: int, prog: Program, flags: int, old_prog: Program | None = None) -> None:
    """Netlink attach through libbpf; with old_prog the kernel replaces atomically.

    libbpf's netlink code is used rather than pyroute2's because pyroute2 0.7
    encodes IFLA_XDP_FLAGS as a 16-bit big-endian value the kernel rejects.
    """
    opts = _XdpAttachOpts(sz=ctypes.sizeof(_XdpAttachOpts), old_prog_fd=old_prog.fd if old_prog else 0)
    if old_prog is not None:
        flags |= XDP_FLAGS_REPLACE
    try:
        _check(lib().bpf_xdp_attach(ifindex, prog.fd, flags, ctypes.byref(opts)),
               "attach XDP program %s to ifindex %d over netlink" % (prog.label, ifindex))
    finally:
        _session.wrote_hook(ifindex)


def xdp_query(ifindex: int) -> dict:
    """What IFLA_XDP says of one interface: mode and program ids (0 for none), as _netlink reports it."""
    opts = _XdpQueryOpts(sz=ctypes.sizeof(_XdpQueryOpts))
    _check(lib().bpf_xdp_query(ifindex, 0, ctypes.byref(opts)), "query the XDP hook of ifindex %d" % ifindex)
    return {"mode": XDP_ATTACHED_MODES.get(opts.attach_mode), "prog_id": opts.prog_id,
            "native_prog_id": opts.drv_prog_id, "generic_prog_id": opts.skb_prog_id}


def xdp_detach_netlink(ifindex: int, flags: int, old_prog: Program | None = None) -> None:
    opts = _XdpAttachOpts(sz=ctypes.sizeof(_XdpAttachOpts), old_prog_fd=old_prog.fd if old_prog else 0)
    if old_prog is not None:
        flags |= XDP_FLAGS_REPLACE
    try:
        _check(lib().bpf_xdp_detach(ifindex, flags, ctypes.byref(opts)),
               "detach the XDP program of ifindex %d over netlink" % ifindex)
    finally:
        _session.wrote_hook(ifindex)
