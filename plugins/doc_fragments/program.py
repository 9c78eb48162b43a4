# -*- coding: utf-8 -*-
# Copyright (c) ebpf.xdp contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations


class ModuleDocFragment:
    # Mirrors PROGRAM_ARGS in plugins/module_utils/_common.py.
    DOCUMENTATION = r"""
options:
  object:
    description:
      - Path of the compiled BPF object on the managed host (see M(ebpf.xdp.bpf_object)).
        Required when O(state=present).
    type: path
  program:
    description:
      - Function name of the program in O(object).
      - May be omitted when the object holds exactly one program of the hook's type.
    type: str
  constants:
    description:
      - "Load-time settings written into the program's C(const volatile) globals before loading,
        for example C({xdp_action: 2}) to make C(xdp_drop_count) pass instead of drop."
      - "Values are integers or booleans, or C({ifindex: INTERFACE}) for an interface index: the name is
        resolved in the task's network namespace when the program is loaded, for example
        C({redirect_ifindex: {ifindex: eth1}}). The resolved index is part of the program's identity, so a
        target interface deleted and created again (with a new index) makes the next run reload."
      - Unknown names are an error listing the known ones.
    type: dict
    default: {}
  state:
    description:
      - V(present) attaches (or upgrades) the program; V(absent) detaches it and removes its pins.
    type: str
    choices: [present, absent]
    default: present
  force:
    description:
      - Replace (V(present)) or remove (V(absent)) a program that this collection did not attach.
    type: bool
    default: false
  keep_maps:
    description:
      - With O(state=absent), keep the pinned maps so a later attach continues with their contents.
      - With O(shared_maps), keep the map set even when no other attachment names it; also when a program
        moves to another set (or from its own maps to a set), keep what it leaves.
    type: bool
    default: false
  shared_maps:
    description:
      - Name of a map set shared with other attachments in the same network namespace. The program's maps are
        pinned in C(<pin_root>/<netns>/shared_maps/<name>/) instead of the attachment's own directory, and every
        attachment naming the same set uses the same maps, for example one multicast program on every port of a
        switch, whose groups M(ebpf.xdp.devmap_group) manages in that set.
      - The set is part of the program's identity; changing it reloads the program over the other set's maps.
      - O(state=absent) removes the set only when no other attachment names it and O(keep_maps) is false.
      - The maps of programs sharing a set must have the same layout (libbpf refuses an incompatible pin).
      - Without it, each attachment has maps of its own.
    type: str
"""
