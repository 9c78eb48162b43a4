# -*- coding: utf-8 -*-
# Copyright (c) ebpf.xdp contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations


class ModuleDocFragment:
    # Written by scripts/options.py from docs/options.yml (set interface):
    # edit it there, not here.
    DOCUMENTATION = r"""
options:
  interface:
    description:
      - Name of the network interface, as seen inside O(netns) when that is set.
      - The kernel's rules for an interface name are checked before anything happens (1 to 15 bytes, without C(/), C(:),
        whitespace or control characters, and not C(.) or C(..)).
    type: str
    required: true
  netns:
    description:
      - Name of a network namespace under C(/run/netns) to work in (as created by C(ip netns add)), one path component
        (no C(/), not C(.) or C(..)) without control characters, at most 255 bytes.
      - The module switches only its network namespace; bpffs and files stay those of the host.
      - Omit it to work in the namespace the module runs in (with the P(ebpf.xdp.netns#connection) connection plugin,
        that is the lab host's namespace).
    type: str
"""
