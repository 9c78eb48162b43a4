# -*- coding: utf-8 -*-
# Copyright (c) ebpf.xdp contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The running kernel's release, and the kernel behaviours the collection decides by it.

Private to the ebpf.xdp collection: the interface may change without notice.

Where a kernel does something wrong without saying so (no error, no counter), no
probe short of sending frames through namespaces of our own can tell, and a module
must not do that on a production host: such behaviour is decided by the release,
from the releases where it was seen, and a release not seen is treated as the
older one (refused rather than wrong).

Generic XDP broadcast with devmap egress programs: a multicast program in
generic (skb) mode that redirects with BPF_F_BROADCAST makes one copy per
member with skb_clone() (kernel/bpf/devmap.c, dev_map_redirect_clone), which
shares the packet data; each member's egress program then runs on that one
buffer, so every copy leaves with what the last member's program wrote (seen
on Debian 12's 6.1: every copy carried the last port's source MAC). Native mode
copies each frame (xdpf_clone) and is right on every release. On 6.18 every
generic copy left with its own port's MAC (tests/integration/test_devmap_group.py).
"""

from __future__ import annotations

import os
import re

# The first release on which generic-mode broadcast copies were seen each with its own egress program's writes;
# releases before it (6.1 seen wrong, those between not seen) are refused.
GENERIC_EGRESS_COPIES_SINCE = (6, 18)


def release() -> tuple[int, int]:
    """(major, minor) of the running kernel, from uname (e.g. 6.1.0-50-amd64 -> (6, 1))."""
    found = re.match(r"(\d+)\.(\d+)", os.uname().release)
    return (int(found.group(1)), int(found.group(2))) if found else (0, 0)


def generic_broadcast_shares_buffer() -> bool:
    """Whether devmap egress programs of a generic-mode broadcast write one buffer that every copy shares."""
    return release() < GENERIC_EGRESS_COPIES_SINCE


def generic_egress_refusal(what: str, generic_ports: list[str]) -> str:
    """Why `what` is refused here: generic-mode ports of a map set whose groups have egress programs."""
    return ("%s: on this kernel (Linux %s) a devmap egress program cannot give each copy of a frame that a "
            "generic-mode XDP program broadcasts its own changes: the kernel clones the packet for each member "
            "and the copies share one buffer, so every copy leaves with what the last member's egress program "
            "wrote (native mode copies each frame; Linux %d.%d and later were seen right). Generic-mode "
            "port(s) of the map set: %s. Attach the multicast program in native mode (mode: native), or leave "
            "the group without an egress program; nothing was changed"
            % (what, os.uname().release, GENERIC_EGRESS_COPIES_SINCE[0], GENERIC_EGRESS_COPIES_SINCE[1],
               ", ".join(generic_ports)))
