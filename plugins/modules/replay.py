#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) ebpf.xdp contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: replay
short_description: Replay captured frames through the attached XDP or tc program and a candidate, and compare
version_added: 0.1.0
description:
  - Says what a change would do to real traffic before it is made. Every frame of O(pcap) (for example one
    written by M(ebpf.xdp.capture)) runs through the program the collection attached to the hook and through
    the candidate program of O(object), offline, with C(BPF_PROG_TEST_RUN); the result lists the verdicts that
    would change (for example C(XDP_PASS -> XDP_DROP), with the flows and the first frames of each), the frames
    both programs pass but leave with different bytes, and the counters each program would leave in its maps.
  - Neither the attached program nor its maps are touched. The attached program is loaded again from its copy
    in O(object_store) (the very object, program and constants of its revision), the candidate from O(object);
    each runs against private copies of the live maps (hashes, arrays, per-CPU maps, LPM tries and devmaps,
    cloned from their pins), so both start from the live state. Global variables start from their initial
    values, as in a fresh load. A map whose contents cannot be copied (a program array, a ring buffer, a
    socket or CPU map, a map of maps) is an error naming the map.
  - The candidate takes the attached program's maps, as an upgrade that keeps its maps does. A map it lays out
    otherwise (fields moved, added or removed, more entries; see O(map_migration)) is migrated from its private
    copy as the upgrade would migrate the live map, never read through the new layout; RV(map_migration) says
    what became of each map, and RV(map_effects) compares such a map in the candidate's layout.
  - Nothing on the host changes (a private directory of pins under O(pin_root) is removed before the module
    returns), so the task never reports a change; C(--diff) shows the comparison.
author:
  - ebpf.xdp developers (@ebpf-xdp)
requirements:
  - root on the managed host (C(CAP_BPF) or C(CAP_SYS_ADMIN), C(CAP_NET_ADMIN)), libbpf >= 1.0
  - a program attached by M(ebpf.xdp.xdp_program) or M(ebpf.xdp.tc_program) (backend libbpf) on the hook
extends_documentation_fragment:
  - ebpf.xdp.attributes
  - ebpf.xdp.interface
  - ebpf.xdp.pin_root
options:
  hook:
    description:
      - The hook whose attached program is compared with the candidate.
    type: str
    choices: [xdp, tc]
    default: xdp
  direction:
    description:
      - For O(hook=tc), the direction of the tc hook.
    type: str
    choices: [ingress, egress]
    default: ingress
  name:
    description:
      - For O(hook=tc), the attachment's name (O(ebpf.xdp.tc_program#module:name)) when the hook holds several
        programs of this collection; without it, the hook's unnamed attachment.
    type: str
  pcap:
    description:
      - A classic pcap file on the managed host, link type Ethernet (pcapng is refused; convert it with
        C(tcpdump -r in.pcapng -w out.pcap)). An absolute path without C(..) components.
    type: path
    required: true
  object:
    description:
      - The candidate's BPF object file on the managed host.
    type: path
    required: true
  program:
    description:
      - The candidate program's function name in O(object); by default its only program of the hook's type.
      - Mutually exclusive with O(section).
    type: str
  section:
    description:
      - The candidate program by its section name in O(object) (its C(SEC()), as iproute2's C(sec) takes it),
        instead of O(program); as O(ebpf.xdp.xdp_program#module:section).
      - A section that holds several programs is an error listing them; name one with O(program) then.
      - Mutually exclusive with O(program).
    type: str
  constants:
    description:
      - The candidate's constants, as M(ebpf.xdp.xdp_program) takes them.
    type: dict
    default: {}
  object_store:
    description:
      - Where the collection keeps the objects of attached revisions (that of M(ebpf.xdp.xdp_program)).
    type: path
    default: /var/lib/ebpf_xdp/revisions
  map_migration:
    description:
      - What the candidate's upgrade would do with a live map it lays out otherwise, as
        O(ebpf.xdp.xdp_program#module:map_migration) says, done here to the candidate's private copy.
      - V(fields) carries the copy's entries into the candidate's layout by field name; V(reset) starts it empty;
        V(refuse) fails naming each map and difference. A change no copy carries fails naming the map and field.
    type: str
    choices: [fields, reset, refuse]
    default: fields
  map_rename:
    description:
      - With O(map_migration=fields), value fields the candidate renamed, by map, as
        O(ebpf.xdp.xdp_program#module:map_rename) takes them.
    type: dict
    default: {}
  require_attached:
    description:
      - Whether a hook without a program of the collection is an error. With V(false) the module succeeds and
        reports RV(compared=false) with the reason (a release's new attachment has nothing to compare with).
    type: bool
    default: true
attributes:
  check_mode:
    support: full
    details:
      - The module changes nothing, in check mode or not.
  diff_mode:
    support: full
    details:
      - The diff is the comparison as text.
  idempotent:
    support: full
seealso:
  - module: ebpf.xdp.capture
  - module: ebpf.xdp.xdp_program
  - module: ebpf.xdp.tc_program
"""

EXAMPLES = r"""
- name: Capture what reaches the receiver (before its XDP program, from the veth peer's side)
  ebpf.xdp.capture:
    interface: veth-rx-peer
    direction: out
    count: 2000
    path: /var/lib/ebpf_xdp/captures/rx.pcap

- name: What would the new release do to that traffic?
  ebpf.xdp.replay:
    interface: eth0
    pcap: /var/lib/ebpf_xdp/captures/rx.pcap
    object: /var/lib/ebpf_xdp/objects/filter-v2.o
  register: replayed

- name: Stop when it would drop anything the current program passes
  ansible.builtin.assert:
    that: replayed.transitions['XDP_PASS -> XDP_DROP'] is not defined
"""

RETURN = r"""
compared:
  description: Whether a program was compared (false only with O(require_attached=false), with a C(reason)).
  returned: success
  type: bool
  sample: true
frames:
  description: Frames replayed (every frame of O(pcap)).
  returned: success
  type: int
  sample: 1200
seconds:
  description: Time spent running the frames through both programs (loading and copying the maps apart).
  returned: success
  type: float
  sample: 1.2
changed_verdicts:
  description: Frames whose verdict the candidate changes.
  returned: success
  type: int
  sample: 412
verdicts:
  description: Frames per verdict, under C(old) (the attached program) and C(new) (the candidate).
  returned: success
  type: dict
  sample: {old: {XDP_PASS: 1200}, new: {XDP_DROP: 412, XDP_PASS: 788}}
transitions:
  description:
    - Per changed verdict (C(OLD -> NEW)), the number of frames, the flows they belong to (protocol, addresses
      and ports; the most frequent first) and the first frames in full (index in O(pcap) and bytes as hex).
  returned: success
  type: dict
  sample: {"XDP_PASS -> XDP_DROP": {frames: 412, flows: [{flow: "tcp 10.0.0.1:1024 > 10.0.0.2:80", frames: 412}],
           examples: [{index: 3, frame: "02000000..."}]}}
rewritten:
  description: Frames both programs gave the same verdict but left with different bytes, with the first few
    (the frame, and what each program left).
  returned: success
  type: dict
  sample: {frames: 0, examples: []}
map_effects:
  description:
    - Per map and key (hex) that the two programs left differently, the value at the start (the live map's when
      cloned), and what the attached program (C(old)) and the candidate (C(new)) left. Values of 1, 2, 4 or 8
      bytes are numbers (per-CPU values summed), longer ones hex.
  returned: success
  type: dict
  sample: {proto_count: {"06000000": {start: 0, old: 412, new: 0}}}
map_migration:
  description:
    - Each map of the candidate that the live maps had, and what became of its private copy (V(kept),
      V(migrated), V(reset)), as RV(ebpf.xdp.xdp_program#module:map_migration) reports an upgrade's.
  returned: success
  type: list
  elements: dict
  sample: [{map: stats, outcome: migrated, changes: ["value field drops added (int, 8 bytes at 16)"],
            entries_copied: 1}]
attached:
  description: The attached program compared (id, program name, object and its digest).
  returned: success
  type: dict
candidate:
  description: The candidate (object, program name, tag).
  returned: success
  type: dict
hook:
  description: The hook, as C(<hook> hook of <interface>).
  returned: success
  type: str
"""

from ansible_collections.ebpf.xdp.plugins.module_utils import _common
from ansible_collections.ebpf.xdp.plugins.module_utils.host import names as _names
from ansible_collections.ebpf.xdp.plugins.module_utils.hooks import replay as _replay

ARGUMENT_SPEC = dict(
    hook=dict(type="str", choices=["xdp", "tc"], default="xdp"),
    direction=dict(type="str", choices=["ingress", "egress"], default="ingress"),
    name=dict(type="str"),
    pcap=dict(type="path", required=True),
    object=dict(type="path", required=True),
    program=dict(type="str"),
    section=dict(type="str"),
    constants=dict(type="dict", default={}),
    object_store=dict(type="path", default="/var/lib/ebpf_xdp/revisions"),
    map_migration=dict(type="str", choices=["fields", "reset", "refuse"], default="fields"),
    map_rename=dict(type="dict", default={}),
    require_attached=dict(type="bool", default=True),
    **_common.INTERFACE_ARGS, **_common.PIN_ROOT_ARGS)


def main():
    _common.run_module(ARGUMENT_SPEC, rules=dict(mutually_exclusive=[("program", "section")]),
                       libraries=dict(pyroute2=False, predicts=False),
                       names=dict(_common.PROGRAM_NAMES, pcap=_names.check_absolute),
                       work=lambda params, _check_mode, _module: (
                           dict(_replay.compared(params, params["require_attached"]), changed=False), []))


if __name__ == "__main__":
    main()
