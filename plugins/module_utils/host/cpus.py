# -*- coding: utf-8 -*-
# Copyright (c) ebpf.xdp contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""CPU lists as the kernel writes them (0-3,6), for the generators' thread checks and messages.

Private to the ebpf.xdp collection: the interface may change without notice.
"""

from __future__ import annotations

CPU_ONLINE = "/sys/devices/system/cpu/online"


def parse_cpu_list(text: str) -> set[int]:
    """0-3,6 (as /sys/devices/system/cpu/online says) -> {0, 1, 2, 3, 6}."""
    cpus = set()
    for part in text.strip().split(","):
        if not part:
            continue
        first, _sep, last = part.partition("-")
        cpus.update(range(int(first), int(last or first) + 1))
    return cpus


def cpu_list(cpus) -> str:
    """{0, 1, 2, 3, 6} -> 0-3,6."""
    out, run = [], []
    for cpu in sorted(cpus) + [None]:
        if run and cpu == run[-1] + 1:
            run.append(cpu)
            continue
        if run:
            out.append("%d-%d" % (run[0], run[-1]) if len(run) > 1 else str(run[0]))
        run = [cpu]
    return ",".join(out)


def list_problem(cpus: list[int]) -> str | None:
    """What is wrong with a list of CPUs to run one thread on each (none, one twice, a negative one), or None;
    the caller raises its own error with it."""
    if not cpus:
        return "cpus must list at least one CPU"
    twice = sorted({c for c in cpus if cpus.count(c) > 1})
    if twice:
        return "cpus lists CPU %s more than once; each thread needs a CPU of its own" % ", ".join(map(str, twice))
    negative = [c for c in cpus if c < 0]
    if negative:
        return "CPU %s is not a CPU number" % ", ".join(map(str, negative))
    return None


def online_cpus() -> set[int]:
    with open(CPU_ONLINE) as f:
        return parse_cpu_list(f.read())
