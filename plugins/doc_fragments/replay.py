# -*- coding: utf-8 -*-
# Copyright (c) ebpf.xdp contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations


class ModuleDocFragment:
    # Mirrors TASK_ARGS in plugins/module_utils/hooks/replay.py.
    DOCUMENTATION = r"""
options:
  replay:
    description:
      - A classic pcap file on the managed host (for example written by M(ebpf.xdp.capture)). Before anything
        changes, every frame in it runs through the program the collection attached to the hook and through the
        task's program, each against private copies of the live maps, as M(ebpf.xdp.replay) does; the result's
        RV(replay) says which verdicts would change, for which flows, and what each program would leave in its
        maps. Most useful in check mode, to know what a change would do to real traffic before making it.
      - Needs O(state=present), an O(object) (backend libbpf) and no O(revision=previous). Where the collection
        has no program on the hook yet, RV(replay) says so and compares nothing.
      - An absolute path without C(..) components.
    type: path
"""
