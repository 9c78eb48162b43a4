#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) ebpf.xdp contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: tc_program
short_description: Attach a tc BPF program to the ingress or egress of a network interface
version_added: 0.2.0
description:
  - Loads one tc program (C(SEC("tc")), a C(sched_cls) program) from a compiled BPF object (see
    M(ebpf.xdp.bpf_object)) and attaches it at O(direction) of an interface, held by one of three
    methods (O(method)).
  - V(tcx) holds it by a tcx bpf_link (Linux 6.6 and newer), pinned so it stays after the module exits
    and upgraded with C(bpf_link_update).
  - V(cls_bpf) holds it by a direct-action cls_bpf filter in the clsact qdisc, at a priority and
    handle; an upgrade replaces the filter in place.
  - V(act_bpf) holds it by a u32 match-all filter whose action runs the program (loaded as a tc action),
    the setup of the kernel commit that introduced C(bpf_redirect()); the action's verdict
    (O(verdict)) applies when the program returns C(TC_ACT_UNSPEC) (-1).
  - On every upgrade the hook is never without the program, and its maps are pinned by name and reused,
    so counters and tables survive. Other tcx programs and other filters on the hook are left alone.
  - Several programs of this collection share one hook as named attachments (O(name)), each with its own pins,
    record, maps, revisions and rollback. On tcx, O(before) and O(after) say where one runs among the programs
    there; filters run in priority order (O(priority)).
  - A program that this collection did not attach is never replaced or removed unless O(force=true).
    The clsact qdisc is created when needed and removed only when this collection created it and no
    filter is left in it. A plain C(ingress) qdisc on the interface is an error, never replaced.
  - Two runs are the same when the object's SHA-256, program name, constants, method, direction and place
    (and, with O(before) or O(after), the side of the program it names) match the ownership record and the
    recorded program is the one attached.
author:
  - ebpf.xdp developers (@ebpf-xdp)
requirements:
  - libbpf >= 1.0 (C(libbpf.so.1)) and pyroute2 on the managed host
  - with O(backend=bcc), bcc's Python binding (C(python3-bpfcc)) and kernel headers on the managed host
  - root (C(CAP_BPF), C(CAP_NET_ADMIN), C(CAP_SYS_ADMIN)) and a mounted bpffs
extends_documentation_fragment:
  - ebpf.xdp.attributes
  - ebpf.xdp.interface
  - ebpf.xdp.program
  - ebpf.xdp.pin_root
  - ebpf.xdp.replay
options:
  # BEGIN options (tc_program)
  direction:
    description:
      - 'The hook: frames arriving on the interface (V(ingress)) or leaving it (V(egress)).'
    type: str
    choices:
      - ingress
      - egress
    default: ingress
  method:
    description:
      - How the program is held on the hook; see the description.
      - V(auto) is V(tcx) where the kernel has it, else V(cls_bpf); an attached program keeps its method. RV(method) reports
        which one is in effect.
      - Changing the method, O(priority) or O(handle) of an attached program detaches it before attaching again; a warning
        says so. A filter that this collection did not attach at the new place is an error found before anything changes.
      - One program per attachment is managed; a task naming another program for an attachment that already holds one
        of the collection's is an error (remove the first one with O(state=absent), or give the new one its own O(name)).
    type: str
    choices:
      - tcx
      - cls_bpf
      - act_bpf
      - auto
    default: auto
  priority:
    description:
      - Filter priority (tc's C(pref)) for V(cls_bpf) and V(act_bpf), 1 to 65535. Filters run in priority order, lower
        first, and all of them after the hook's tcx programs.
      - When omitted, the first free priority on first attach, then the one in use; so named cls_bpf attachments attached
        one after the other run in the order their tasks ran. Each attachment of this collection on a hook has a priority
        of its own; a priority another of them holds is an error, found before anything changes.
    type: int
  handle:
    description:
      - Filter handle for V(cls_bpf) and V(act_bpf), 1 to 4095 for V(act_bpf) (the u32 node). Default 1.
    type: int
  verdict:
    description:
      - The act_bpf action's own verdict, used when the program returns C(TC_ACT_UNSPEC) (-1); only with O(method=act_bpf).
        tc's aliases V(ok), V(shot) and V(unspec) are V(pass), V(drop) and V(continue), and reported so.
    type: str
    choices:
      - drop
      - pass
      - ok
      - pipe
      - continue
      - stolen
      - reclassify
      - shot
      - unspec
    default: drop
  name:
    description:
      - The attachment's name, its identity on the hook (interface, O(direction), O(netns)), so that several programs
        of this collection live there side by side, each with its own pins in C(<pin_root>/<netns>/<interface>/tc_<direction>@<name>/),
        record, maps, revisions and rollback (O(revision=previous)).
      - 1 to 32 characters of V(a-z), V(0-9), V(_) and V(-), starting with a letter or digit.
      - Without it, the task manages the hook's unnamed attachment, with the pins (C(tc_<direction>/)) and behaviour it
        always had; the named ones are beside it and each other.
      - O(state=absent) with a name removes that attachment only. Without a name it removes the unnamed attachment only
        (and, with O(force=true), a filter this collection did not attach at the given O(priority)/O(handle)); named attachments,
        and other programs, stay.
      - For V(tcx) and V(cls_bpf); V(act_bpf) is refused with a name.
    type: str
  before:
    description:
      - Run this program before another program of the tcx hook, named by its attachment name (another attachment of this
        collection on the same hook, O(name)), or, for a program this collection did not attach, by its program id (an
        integer) or its program name as the kernel keeps it (up to 15 characters; the collection's own programs are left
        out of that search, so it finds the other one). An attachment name is looked up first, then a program name, then
        a string of digits as an id.
      - 'Tagged, it is looked up as what its tag says and nothing else: C({attachment: NAME}) an attachment of this collection
        on the hook, C({program: NAME}) another program by its name, C({id: ID}) a program by its id; for example C(before:
        {program: cilium_in}) where an attachment could have that name too.'
      - A new program is attached right before it (the kernel's C(BPF_F_BEFORE)); an upgrade keeps its place (C(bpf_link_update)).
        An attached program is where the task wants it when it runs anywhere before the named one (not necessarily right
        before it); that is no change.
      - Found on the wrong side, the program is moved - a new link created at the place, then the old one detached (the
        kernel cannot move a link atomically); the hook is never without it, but for that moment (a warning gives the
        time, well under a millisecond) it runs at both places, so a program that passes frames on sees them twice.
      - Naming nothing on the hook, the program itself, or an attachment that is not a tcx program is an error, in check
        mode too, and nothing changes.
      - Only with V(tcx) (or V(auto) where it resolves to V(tcx)); with V(cls_bpf), V(act_bpf), or on a kernel without
        tcx (before 6.6), it is an error; order filters by O(priority) instead.
      - Mutually exclusive with O(after). Without either, a new program goes where the kernel appends it (after the others),
        as without names.
    type: raw
  after:
    description:
      - Run this program after another program of the tcx hook, named as for O(before) (C(BPF_F_AFTER)); the same rules.
    type: raw
  # END options (tc_program)
attributes:
  check_mode:
    support: full
    details:
      - In check mode the program is still loaded into the kernel (without pinning or attaching it)
        to compare its tag and to report verifier rejections; it is unloaded before the module exits.
  diff_mode:
    support: full
  idempotent:
    support: full
notes:
  - Use P(ebpf.xdp.xdp_facts#module) to read the attached programs and their counters.
seealso:
  - module: ebpf.xdp.bpf_object
  - module: ebpf.xdp.xdp_program
  - module: ebpf.xdp.xdp_facts
"""

EXAMPLES = r"""
- name: Forward everything arriving on eth0 out of eth1 (bpf_redirect), tcx where the kernel has it
  ebpf.xdp.tc_program:
    interface: eth0
    object: /var/lib/ebpf_xdp/objects/tc_redirect.o
    program: redirect_xmit
    constants:
      redirect_ifindex: {ifindex: eth1}

- name: The same as the bpf_redirect commit measured it, a u32 match-all filter with act_bpf
  ebpf.xdp.tc_program:
    interface: eth0
    object: /var/lib/ebpf_xdp/objects/tc_redirect.o
    program: redirect_xmit
    method: act_bpf
    priority: 10
    constants:
      redirect_ifindex: {ifindex: eth1}

- name: The bpf_redirect commit's own tcbpf1_kern.o, by its section, as `tc ... bpf da obj F sec redirect_xmit`
  ebpf.xdp.tc_program:
    interface: eth0
    object: /var/lib/ebpf_xdp/objects/tcbpf1_kern.o
    section: redirect_xmit
    constants:
      redirect_ifindex: {ifindex: eth1}

- name: Count (and pass) what leaves eth1, per IP protocol
  ebpf.xdp.tc_program:
    interface: eth1
    direction: egress
    object: /var/lib/ebpf_xdp/objects/tc_redirect.o
    program: tc_drop_count
    method: cls_bpf
    constants:
      tc_action: 0

- name: Remove it
  ebpf.xdp.tc_program:
    interface: eth1
    direction: egress
    state: absent

- name: A classifier in bcc's dialect, compiled by bcc on the host
  ebpf.xdp.tc_program:
    interface: eth1
    backend: bcc
    source: /opt/bcc/tc_count.c
    cflags: ["-DVERDICT=TC_ACT_OK"]

- name: Put back the previous revision of the ingress program
  ebpf.xdp.tc_program:
    interface: eth1
    direction: ingress
    revision: previous

- name: Three programs on one tcx hook, around the program another tool attached (its name is cilium_in)
  ebpf.xdp.tc_program:
    interface: eth0
    name: "{{ item.name }}"
    object: /var/lib/ebpf_xdp/objects/tc_redirect.o
    program: tc_drop_count
    method: tcx
    constants:
      tc_action: -1  # TCX_NEXT: count, and let the next program run
    before: "{{ item.before | default(omit) }}"
    after: "{{ item.after | default(omit) }}"
  loop:
    - {name: count-first, before: cilium_in}
    - {name: count-second, after: cilium_in}
    - {name: count-last, after: count-second}

- name: Remove one of them; the others and cilium_in stay
  ebpf.xdp.tc_program:
    interface: eth0
    name: count-second
    state: absent
"""

RETURN = r"""
replay:
  description:
    - With O(replay), the comparison of the attached program and the task's on the pcap's frames, made before the
      task changed anything; the keys of M(ebpf.xdp.replay)'s result (RV(ebpf.xdp.replay#module:frames),
      RV(ebpf.xdp.replay#module:changed_verdicts), RV(ebpf.xdp.replay#module:transitions), ...), C(summary) (that
      module's diff as text) and C(compared) (false, with a C(reason), where the hook has no program of ours yet).
  returned: when O(replay) is set
  type: dict
  sample: {compared: true, frames: 1200, changed_verdicts: 412, summary: "..."}
attached:
  description: Whether a program is attached after the task.
  returned: always
  type: bool
  sample: true
interrupted:
  description:
    - Whether this task left the tc hook without a program for a moment (a detach, then an attach).
    - >-
      A new program replaces the old one atomically (tcx link update, or a filter replaced in place) whenever
      it can, and then this is false. It is true for a switch that cannot be atomic: a method change, a new
      place (priority/handle), a forced takeover of a filter for one protocol; the warning says for how long
      at most.
    - A tcx program moved to the side of O(before)/O(after) is never missing (false), though it ran twice for
      a moment; the warning says so.
  returned: always
  type: bool
  sample: false
interface:
  description: Interface name.
  returned: always
  type: str
  sample: eth0
ifindex:
  description: Interface index in its namespace.
  returned: always
  type: int
  sample: 3
netns:
  description: The network namespace given, or null.
  returned: always
  type: str
direction:
  description: The hook, V(ingress) or V(egress).
  returned: when attached
  type: str
  sample: ingress
method:
  description: How the program is held, V(tcx), V(cls_bpf) or V(act_bpf).
  returned: when attached
  type: str
  sample: tcx
id:
  description: Kernel id of the attached program.
  returned: when attached
  type: int
  sample: 42
name:
  description: Program name as the kernel knows it (at most 15 characters).
  returned: when attached
  type: str
  sample: redirect_xmit
tag:
  description: Kernel tag (hash of the instructions) of the attached program.
  returned: when attached
  type: str
attach:
  description: V(link) (a pinned tcx link) or V(netlink) (a filter).
  returned: when attached
  type: str
  sample: link
link_id:
  description: Kernel id of the tcx link.
  returned: when attached with V(tcx)
  type: int
priority:
  description: Filter priority.
  returned: when attached with V(cls_bpf) or V(act_bpf)
  type: int
  sample: 1
handle:
  description: Filter handle as the kernel reports it (for u32, with its hash table, e.g. 0x80000001).
  returned: when attached with V(cls_bpf) or V(act_bpf)
  type: int
  sample: 1
protocol:
  description:
    - The filter's protocol, as tc names it. The collection's filters are for V(all); a forced takeover of a
      foreign filter for one protocol deletes it and adds ours (a warning says the hook was briefly empty),
      because tc keeps one protocol per priority.
  returned: when attached with V(cls_bpf) or V(act_bpf)
  type: str
  sample: all
verdict:
  description: The act_bpf action's verdict.
  returned: when attached with V(act_bpf)
  type: str
  sample: drop
maps:
  description: Pinned maps of the program, name to pin path.
  returned: when attached
  type: dict
map_migration:
  description:
    - Each map of the program loaded (or, in check mode, that would be) that was already pinned, and what became
      of it (O(map_migration)); empty when nothing was loaded or nothing was pinned before.
  returned: always
  type: list
  elements: dict
  contains:
    map:
      description: The map's name.
      type: str
    outcome:
      description: V(kept) (same layout, contents kept), V(created) (not pinned before), V(migrated) (laid out
        differently, its entries copied by field name), V(reset) (laid out differently, started empty).
      type: str
    changes:
      description: Each difference between the pinned map and the new one (and each rename), in words.
      type: list
      elements: str
    entries_copied:
      description: With V(migrated), how many entries were copied (an array's all-zero entries are not).
      type: int
    copy_to_swap_ms:
      description: With V(migrated), after a real run, the milliseconds from the copy's read of the old map to
        the new program on the hook (what the old program counted meanwhile was added after the swap).
      type: float
  sample: [{map: stats, outcome: migrated, changes: ["value field drops added (int, 8 bytes at 16)"],
            entries_copied: 1}]
shared_maps_moved:
  description:
    - The other attachments of the O(shared_maps) set that moved to its new maps with this upgrade (or, in check
      mode, would), each with its own program loaded from the same object; empty unless the upgrade changed the
      set's layout (see O(map_migration)).
  returned: always
  type: list
  elements: dict
  contains:
    interface:
      description: The attachment's interface.
      type: str
    hook:
      description: Its attachment directory's name (C(xdp), C(tc_ingress), C(xdp@<name>), ...).
      type: str
    id_before:
      description: The id of the program it ran before.
      type: int
    id:
      description: The id of the program it runs now (not in check mode).
      type: int
  sample: [{interface: eth1, hook: tc_ingress, id_before: 41, id: 57}]
pin_dir:
  description: Pin directory of this attachment (C(tc_<direction>@<name>) for a named one).
  returned: always
  type: str
  sample: /sys/fs/bpf/ebpf_xdp/host/eth0/tc_ingress
attachment:
  description: The attachment's O(name); null for the unnamed attachment (and when nothing is attached).
  returned: always
  type: str
  sample: count-first
revision:
  description:
    - The revision attached after the task (in check mode, the one that would be), or null when none is.
    - C(number) counts the programs put on this hook (1 for the first; a rollback brings back the old number);
      C(object) is the path it was attached from and C(object_sha256) its digest (the copy in O(object_store));
      C(program) the function name; C(section) the section the task chose it by (O(section)), else null;
      C(constants) as the task gave them; C(method) where it runs;
      C(rolled_back) is true when O(revision=previous) put it back.
  returned: always
  type: dict
  sample: {number: 3, object: /var/lib/ebpf_xdp/prog.o, object_sha256: 5d5b09f6dcb2d53a5fffc60c4ac0d55fabdf556069d6631545f42aa6e3500f2e,
           program: xdp_drop_count, section: null, constants: {}, method: tcx, rolled_back: false}
previous_revision:
  description:
    - The revision kept before the current one (what O(revision=previous) would put back; after a rollback, the
      revision that was rolled back), in the shape of RV(revision); null when there is none.
  returned: always
  type: dict
  sample: {number: 2, object: /var/lib/ebpf_xdp/prog.o, object_sha256: 0b5e2c6f1e3d44d6b8f6a4f7c1d2e3f405162738495a6b7c8d9e0f1a2b3c4d5e,
           program: xdp_drop_count, section: null, constants: {}, method: tcx, rolled_back: false}
verifier_log_tail:
  description: Last lines of the verifier log when the kernel rejected the program.
  returned: on verifier rejection
  type: list
  elements: str
"""

from ansible_collections.ebpf.xdp.plugins.module_utils import _program
from ansible_collections.ebpf.xdp.plugins.module_utils.hooks.tc import TcHook


def main():
    _program.run(TcHook)


if __name__ == "__main__":
    main()
