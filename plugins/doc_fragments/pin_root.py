# -*- coding: utf-8 -*-
# Copyright (c) ebpf.xdp contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations


class ModuleDocFragment:
    # Written by scripts/options.py from docs/options.yml (set pin_root):
    # edit it there, not here.
    DOCUMENTATION = r"""
options:
  pin_root:
    description:
      - Directory on a BPF filesystem (bpffs) where the collection keeps its state.
      - Each attachment has its own directory C(<pin_root>/<netns>/<interface>/<hook>/) holding the program, its link,
        its maps and an ownership record; C(<netns>) is C(host) for the initial namespace. Hosts that share a bpffs (lab
        namespaces on one machine) stay apart this way.
      - An absolute path without C(..) components (C(.), C(//) and a trailing C(/) are normalised away); a relative one,
        or one that climbs, is refused before anything happens.
    type: path
    default: /sys/fs/bpf/ebpf_xdp
"""
