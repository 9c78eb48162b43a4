#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) ebpf.xdp contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: xdp_program
short_description: Attach an XDP program to a network interface
version_added: 0.1.0
description:
  - Loads one XDP program from a compiled BPF object (see M(ebpf.xdp.bpf_object)) and attaches it to
    an interface, natively (driver mode) or generically (skb mode).
  - The program is attached through a pinned bpf_link, so it stays after the module exits. When the
    object, program or load-time constants change, the new program replaces the old one atomically
    (C(bpf_link_update)); the interface is never without a program.
  - The program's maps are pinned by name in the attachment's pin directory and reused on every
    reload, so counters and table contents survive an upgrade.
  - A program that this collection did not attach is never replaced or removed unless O(force=true).
  - Two runs are the same when the object's SHA-256, program name, constants and mode match the
    ownership record and the recorded program is the one attached. A rebuilt object whose program has
    the same kernel tag is also left alone.
author:
  - ebpf.xdp developers (@ebpf-xdp)
requirements:
  - libbpf >= 1.0 (C(libbpf.so.1)) on the managed host
  - with O(backend=bcc), bcc's Python binding (C(python3-bpfcc)) and kernel headers on the managed host
  - root (C(CAP_BPF), C(CAP_NET_ADMIN), C(CAP_SYS_ADMIN)) and a mounted bpffs
extends_documentation_fragment:
  - ebpf.xdp.attributes
  - ebpf.xdp.interface
  - ebpf.xdp.program
  - ebpf.xdp.pin_root
  - ebpf.xdp.replay
options:
  # BEGIN options (xdp_program)
  mode:
    description:
      - V(native) attaches in the driver (fails when the driver has no XDP support).
      - V(generic) attaches in the kernel's skb path; works on every interface, slower. On kernels before 6.18 it is refused
        for a port of a map set (O(shared_maps)) whose devmap group has an egress program, as there every copy of a generic-mode
        broadcast shares one buffer (see P(ebpf.xdp.devmap_group#module)'s notes).
      - V(auto) tries native and falls back to generic; RV(mode) reports which one was used.
      - Changing the mode of an attached program detaches it before attaching again (the kernel has no atomic mode switch);
        a warning says so.
    type: str
    choices:
      - native
      - generic
      - auto
    default: auto
  name:
    description:
      - The attachment's name, its identity on the interface (and O(netns)), so that several programs live on one interface,
        ours and other tools' (C(xdp-loader), C(xdp-filter), bpfman), each with its own record, maps and revisions (pins
        in C(xdp@<name>/)); 1 to 32 of a-z, 0-9, C(_) and C(-).
      - A named attachment is one of the programs of libxdp's multiprog dispatcher (xdp-tools' protocol, Debian package
        C(libxdp1), which the role C(ebpf.xdp.toolchain) installs). The dispatcher is the program the interface runs,
        and it runs its programs in O(priority) order. Adding, upgrading or removing one swaps in a new dispatcher atomically;
        the others keep running, with the same program ids and maps. An upgrade joins the new program before the old one
        leaves (never without it; for that moment both run, a warning says how long).
      - The dispatcher holds at most 10 programs, all in one mode; the object needs BTF (C(-g), as M(ebpf.xdp.bpf_object)
        compiles). Where the kernel cannot run the dispatcher (no freplace programs), the task fails saying why and changes
        nothing; it never falls back to one program per interface. A program attached to the interface on its own (an
        unnamed attachment, C(ip link set xdp)) is refused.
      - O(state=absent) with a name takes that program out of the dispatcher only (the dispatcher goes with its last program).
      - Without a name, the task manages the interface's one unnamed program as before (pins C(xdp/)).
    type: str
  priority:
    description:
      - With O(name), the program's run priority in the dispatcher; lower runs first (equal priorities run in the order
        they were attached). libxdp's default is 50.
      - Changing it re-orders the programs (the program is attached again at its new place, as an upgrade is).
    type: int
  chain_call_actions:
    description:
      - With O(name), the verdicts of this program after which the dispatcher runs the next program; any other verdict
        is final. libxdp's default is V(pass) alone.
    type: list
    elements: str
    choices:
      - aborted
      - drop
      - pass
      - tx
      - redirect
  # END options (xdp_program)
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
  - An upgrade compares each map the new object would reuse with the pinned one, field by field through their
    BTF; a map laid out differently has its entries copied into the new layout by field name, is started
    empty, or is refused (naming the map and each difference), as O(map_migration) says.
seealso:
  - module: ebpf.xdp.bpf_object
  - module: ebpf.xdp.xdp_facts
"""

EXAMPLES = r"""
- name: Compile the per-protocol counter
  ebpf.xdp.bpf_object:
    src: /opt/bpf/xdp_drop_count.bpf.c
    dest: /var/lib/ebpf_xdp/xdp_drop_count.o
  register: compiled

- name: Count and drop everything arriving on eth1
  ebpf.xdp.xdp_program:
    interface: eth1
    object: "{{ compiled.path }}"
    program: xdp_drop_count
    mode: native

- name: Only count (XDP_PASS = 2), keeping the counters
  ebpf.xdp.xdp_program:
    interface: eth1
    object: "{{ compiled.path }}"
    program: xdp_drop_count
    constants:
      xdp_action: 2

- name: Attach only the object that was reviewed (its digest pinned in inventory, from bpf_object's checksum)
  ebpf.xdp.xdp_program:
    interface: eth1
    object: /var/lib/ebpf_xdp/xdp_drop_count.o
    checksum: sha256:5d5b09f6dcb2d53a5fffc60c4ac0d55fabdf556069d6631545f42aa6e3500f2e

- name: The kernel sample xdp1 (SEC("xdp1"), a section that names no type), as `ip link ... obj F sec xdp1` loads it
  ebpf.xdp.xdp_program:
    interface: eth1
    object: /var/lib/ebpf_xdp/objects/xdp1_kern.o
    section: xdp1
    mode: generic

- name: Take over from a program attached by hand with ip link
  ebpf.xdp.xdp_program:
    interface: eth1
    object: "{{ compiled.path }}"
    force: true

- name: Redirect to eth2, named as it is on each host
  ebpf.xdp.xdp_program:
    interface: eth1
    object: /var/lib/ebpf_xdp/objects/xdp_redirect.o
    constants:
      redirect_ifindex: {ifindex: eth2}

- name: A bcc-dialect program, compiled by bcc on the host (python3-bpfcc and kernel headers)
  ebpf.xdp.xdp_program:
    interface: eth1
    backend: bcc
    source: /opt/bcc/xdp_drop_count.c
    cflags: ["-DXDP_ACTION=2"]
    # Only where the running kernel has no headers package:
    kernel_headers: /usr/src/linux-headers-6.1.0-28-cloud-amd64

- name: A DDoS filter first, then a counter, beside a program xdp-loader attached (libxdp's dispatcher)
  ebpf.xdp.xdp_program:
    interface: eth1
    name: "{{ item.name }}"
    object: "/var/lib/ebpf_xdp/{{ item.name }}.o"
    priority: "{{ item.priority }}"
    chain_call_actions: [pass]
  loop:
    - {name: ddos_filter, priority: 10}
    - {name: counter, priority: 20}

- name: Remove it inside a network namespace
  ebpf.xdp.xdp_program:
    interface: veth0
    netns: blue
    state: absent

- name: Put back the program that was attached before the current one (object kept by digest)
  ebpf.xdp.xdp_program:
    interface: eth1
    revision: previous
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
    - Whether this task left the XDP hook without a program for a moment (a detach, then an attach).
    - >-
      A new program replaces the old one atomically (bpf_link update, or netlink replace of a netlink-held
      program) whenever it can, and then this is false. It is true for a switch that cannot be atomic: a mode
      change (native and generic), or a forced takeover of a program held by someone else's bpf_link; the
      warning says for how long at most.
  returned: always
  type: bool
  sample: false
interface:
  description: Interface name.
  returned: always
  type: str
  sample: eth1
ifindex:
  description: Interface index in its namespace.
  returned: always
  type: int
  sample: 3
netns:
  description: The network namespace given, or null.
  returned: always
  type: str
id:
  description: Kernel id of the attached program.
  returned: when attached
  type: int
  sample: 42
name:
  description: Program name as the kernel knows it (at most 15 characters).
  returned: when attached
  type: str
  sample: xdp_drop_count
tag:
  description: Kernel tag (hash of the instructions) of the attached program.
  returned: when attached
  type: str
  sample: 8a80a4514121157e
mode:
  description: Attach mode in effect, V(native) or V(generic).
  returned: when attached
  type: str
  sample: native
attachment:
  description: The attachment's O(name); returned for a named attachment.
  returned: with O(name)
  type: str
  sample: ddos_filter
priority:
  description: With O(name), the program's run priority in libxdp's dispatcher.
  returned: with O(name), when attached
  type: int
  sample: 10
chain_call_actions:
  description: With O(name), the verdicts after which the dispatcher runs the next program.
  returned: with O(name), when attached
  type: list
  elements: str
  sample: [pass]
attach:
  description: How the program is held, V(link) (pinned bpf_link), V(netlink) (after a forced takeover) or
    V(dispatcher) (one of the programs of libxdp's dispatcher, a named attachment).
  returned: when attached
  type: str
  sample: link
link_id:
  description: Kernel id of the bpf_link, when attached by link.
  returned: when attached
  type: int
  sample: 7
maps:
  description: Pinned maps of the program, name to pin path.
  returned: when attached
  type: dict
  sample: {proto_count: /sys/fs/bpf/ebpf_xdp/host/eth1/xdp/maps/proto_count}
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
  sample: [{interface: eth1, hook: xdp, id_before: 41, id: 57}]
pin_dir:
  description: Pin directory of this attachment.
  returned: always
  type: str
  sample: /sys/fs/bpf/ebpf_xdp/host/eth1/xdp
revision:
  description:
    - The revision attached after the task (in check mode, the one that would be), or null when none is.
    - C(number) counts the programs put on this hook (1 for the first; a rollback brings back the old number);
      C(object) is the path it was attached from and C(object_sha256) its digest (the copy in O(object_store));
      C(program) the function name; C(section) the section the task chose it by (O(section)), else null;
      C(constants) as the task gave them; C(mode) where it runs;
      C(rolled_back) is true when O(revision=previous) put it back.
  returned: always
  type: dict
  sample: {number: 3, object: /var/lib/ebpf_xdp/prog.o, object_sha256: 5d5b09f6dcb2d53a5fffc60c4ac0d55fabdf556069d6631545f42aa6e3500f2e,
           program: xdp_drop_count, section: null, constants: {}, mode: native, rolled_back: false}
previous_revision:
  description:
    - The revision kept before the current one (what O(revision=previous) would put back; after a rollback, the
      revision that was rolled back), in the shape of RV(revision); null when there is none.
  returned: always
  type: dict
  sample: {number: 2, object: /var/lib/ebpf_xdp/prog.o, object_sha256: 0b5e2c6f1e3d44d6b8f6a4f7c1d2e3f405162738495a6b7c8d9e0f1a2b3c4d5e,
           program: xdp_drop_count, section: null, constants: {}, mode: native, rolled_back: false}
verifier_log_tail:
  description: Last lines of the verifier log when the kernel rejected the program.
  returned: on verifier rejection
  type: list
  elements: str
"""

from ansible_collections.ebpf.xdp.plugins.module_utils import _program
from ansible_collections.ebpf.xdp.plugins.module_utils.hooks.xdp import XdpHook


def main():
    _program.run(XdpHook)


if __name__ == "__main__":
    main()
