# -*- coding: utf-8 -*-
# Copyright (c) ebpf.xdp contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The capabilities of this process: what BPF and netlink changes need, and which of them it lacks.

Private to the ebpf.xdp collection: the interface may change without notice.
"""

from __future__ import annotations

CAPABILITIES = {"CAP_NET_ADMIN": 12, "CAP_NET_RAW": 13, "CAP_SYS_ADMIN": 21, "CAP_BPF": 39}
BPF_CAPABILITIES = ("CAP_BPF", "CAP_NET_ADMIN", "CAP_SYS_ADMIN")


def effective_capabilities() -> int | None:
    """The effective capability set of this process (CapEff), or None when it cannot be read."""
    try:
        with open("/proc/self/status") as status:
            return capability_set(status.read())
    except OSError:
        return None


def capability_set(status: str) -> int | None:
    """CapEff of a /proc/<pid>/status text, or None when it has none that reads as one."""
    try:
        line = [entry for entry in status.splitlines() if entry.startswith("CapEff:")][0]
        return int(line.split()[1], 16)
    except (IndexError, ValueError):
        return None


def missing_capabilities(needed) -> list[str]:
    """Names in `needed` that the effective capability set of this process lacks."""
    effective = effective_capabilities()
    if effective is None:
        return []  # cannot tell; let the kernel answer
    return lacking(needed, effective)


def lacking(needed, effective: int) -> list[str]:
    """Names in `needed` that the capability set `effective` lacks."""
    # CAP_SYS_ADMIN still grants what CAP_BPF grants (kernels before 5.8 have only it).
    if effective & (1 << CAPABILITIES["CAP_SYS_ADMIN"]):
        effective |= 1 << CAPABILITIES["CAP_BPF"]
    return [name for name in needed if not effective & (1 << CAPABILITIES[name])]
