#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) ebpf.xdp contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: datapath
short_description: Converge a host's whole XDP and tc data path in one task
version_added: 0.1.0
description:
  - A resource module in the manner of Ansible's network resource modules. O(config) declares the host's
    BPF objects, XDP programs, tc programs, multicast groups and map entries; O(state) says what to do
    with them. Everything happens in one module run on the host, instead of one run per item.
  - Each entry of a O(config) list takes exactly the options of the module that manages that kind of item,
    with the same defaults and checks (see that module's documentation), but O(pin_root), which is set once
    for the task.
  - Items are converged by the same code as their modules, in this order - objects, XDP programs, tc
    programs, groups, map entries; whatever O(state) removes goes after every addition and change.
  - When an item fails, what the run had changed already is put back in reverse order (an upgraded or
    removed program returns as the very program it was - the same program id, atomically where the hook
    allows, with the same maps and their counts, its record and revisions as they were; a removed
    program held by a link gets a new link; a new one goes; a group gets its members back; a map its
    values), and the task fails naming the entry, for example C(config.tc[2]), and listing what was put
    back.
  - Two entries for one hook (one attachment - the same O(ebpf.xdp.tc_program#module:name) or
    O(ebpf.xdp.xdp_program#module:name) on the same hook), one group, one map or one object file are an error
    before anything changes.
author:
  - ebpf.xdp developers (@ebpf-xdp)
requirements:
  - libbpf >= 1.0 (C(libbpf.so.1)), pyroute2, and clang when O(config.objects) compiles
  - root (C(CAP_BPF), C(CAP_NET_ADMIN), C(CAP_SYS_ADMIN)) and a mounted bpffs
extends_documentation_fragment:
  - ebpf.xdp.attributes
  - ebpf.xdp.pin_root
options:
  config:
    description:
      - The host's data path. Omitted lists are empty.
    type: dict
    suboptions:
      objects:
        description:
          - BPF C sources to compile, each with the options of M(ebpf.xdp.bpf_object) (O(ebpf.xdp.bpf_object#module:src),
            O(ebpf.xdp.bpf_object#module:dest), ...). Compiled first, so the programs below can load them.
        type: list
        elements: dict
      xdp:
        description:
          - XDP programs, each with the options of M(ebpf.xdp.xdp_program) (O(ebpf.xdp.xdp_program#module:interface),
            O(ebpf.xdp.xdp_program#module:object), O(ebpf.xdp.xdp_program#module:mode), ...), one entry per
            attachment - interface, namespace and O(ebpf.xdp.xdp_program#module:name) (named attachments share
            the interface through libxdp's dispatcher, in O(ebpf.xdp.xdp_program#module:priority) order).
          - O(ebpf.xdp.xdp_program#module:backend=bcc) is not available here; use M(ebpf.xdp.xdp_program) for it.
        type: list
        elements: dict
      tc:
        description:
          - tc programs, each with the options of M(ebpf.xdp.tc_program), one entry per attachment - interface,
            direction, namespace and O(ebpf.xdp.tc_program#module:name) (several named attachments share a hook).
          - Entries converge in the order listed. One that places itself with
            O(ebpf.xdp.tc_program#module:before) or O(ebpf.xdp.tc_program#module:after) relative to another
            entry's attachment comes after that entry; and named V(cls_bpf) entries without a priority take the
            first free one, in that order.
        type: list
        elements: dict
      devmap_groups:
        description:
          - Multicast groups, each with the options of M(ebpf.xdp.devmap_group), one entry per group of a map set.
        type: list
        elements: dict
      map_entries:
        description:
          - Entries of pinned maps, each with the options of M(ebpf.xdp.bpf_map_entry), one entry per map.
          - Not read back by O(state=gathered), and not removed by O(state=overridden); O(state=deleted) removes
            the entries listed.
        type: list
        elements: dict
  state:
    description:
      - V(merged) converges every entry as its module would, and touches nothing else.
      - V(replaced) also makes each map set named by a group entry hold exactly the declared groups, each group
        exactly its declared members and addresses, and each map exactly its declared entries.
      - V(overridden) also removes every XDP and tc attachment and every group of this collection in
        O(namespaces) that O(config) does not declare. Programs this collection did not attach are never
        touched (as with the per-item modules, unless an entry says O(ebpf.xdp.xdp_program#module:force=true)).
      - V(deleted) removes the declared XDP and tc programs, groups and map entries (objects stay, being
        files); with none declared, every XDP and tc program and group of this collection in O(namespaces).
      - V(gathered) changes nothing and returns RV(gathered), the host's attachments and groups in the shape of
        O(config); fed back with V(overridden), it is no change.
    type: str
    choices: [merged, replaced, overridden, deleted, gathered]
    default: merged
  namespaces:
    description:
      - Network namespaces to read (V(gathered)) and clean up (V(overridden), V(deleted)) besides the one the
        module runs in and those O(config) names. Hosts that share one bpffs (namespaces of one machine) keep
        their pins apart; another host's namespace is in scope only when named.
    type: list
    elements: str
    default: []
  sources:
    description:
      - Source files to write on the host before O(config.objects) compile, carried by the task itself (no copy
        task, no module run per file).
      - Only files whose content differs are written, each atomically (mode C(0644), directories C(0755));
        files not named are left alone. Writing them is a change of the task (C(sources in DIR) in
        RV(changes)), put back like any other when a later entry fails. No O(state) reads or removes them.
    type: dict
    suboptions:
      dir:
        description:
          - The directory they go under.
        type: path
        required: true
      files:
        description:
          - Path relative to O(sources.dir) to the file's text, for example from the
            P(ansible.builtin.file#lookup) lookup with C(rstrip=false).
        type: dict
        required: true
  facts_before:
    description:
      - Read the host's XDP facts, as M(ebpf.xdp.xdp_facts) returns them (its C(ansible_facts.xdp)), just before
        the task's first change, into RV(facts_before). A rollout's health gate compares the counters after a
        change with these; reading them here spares each host a module run of its own.
      - Not in check mode. Read under O(pin_root).
    type: dict
    suboptions:
      interfaces:
        description:
          - Interfaces to read, as O(ebpf.xdp.xdp_facts#module:interfaces) (empty is every interface).
        type: list
        elements: str
        default: []
      netns:
        description:
          - The namespace to read, as O(ebpf.xdp.xdp_facts#module:netns) (default the module's own).
        type: str
      rate_interval:
        description:
          - As O(ebpf.xdp.xdp_facts#module:rate_interval) - with rates, the task waits this long before its first
            change.
        type: float
        default: 0
      only_if_changing:
        description:
          - Read only when the task will change something (entries checked as in check mode first), so a
            task that changes nothing reads nothing and waits no O(facts_before.rate_interval). V(false) reads
            them anyway, for changes that later tasks make.
        type: bool
        default: true
      maps:
        description:
          - Maps whose contents are decoded through their BTF, as O(ebpf.xdp.xdp_facts#module:maps).
        type: list
        elements: str
        default: ['*']
      programs:
        description:
          - Programs whose maps are decoded, as O(ebpf.xdp.xdp_facts#module:programs).
        type: list
        elements: str
        default: ['*']
      max_entries:
        description:
          - Entries read from each decoded map at most, as O(ebpf.xdp.xdp_facts#module:max_entries); a positive
            number.
        type: int
        default: 1024
      per_cpu:
        description:
          - Each CPU's copy of per-CPU values too, as O(ebpf.xdp.xdp_facts#module:per_cpu).
        type: bool
        default: false
  toolchain:
    description:
      - Check first that the host has what the collection needs, as M(ebpf.xdp.toolchain_facts) does with the same
        options (O(ebpf.xdp.toolchain_facts#module:require) says what ready means). A host that lacks part of it
        is left as it is - nothing of its data path read, written or removed - and RV(toolchain) says what it
        lacks; the role P(ebpf.xdp.xdp_deploy#role) then prepares it (P(ebpf.xdp.toolchain#role)) and runs the
        task again.
      - So a provisioned host costs no module run of its own for the check.
    type: dict
  report:
    description:
      - What the result holds. V(full) is every value below.
      - V(changes) leaves out RV(before), RV(after), RV(item_results) and the diff, for a task that only asks
        whether anything would change (the probe of P(ebpf.xdp.xdp_rollout#role), in check mode). The controller
        copies and converts the result of every host, ~8 KB with them against ~2 KB without.
    type: str
    choices: [full, changes]
    default: full
attributes:
  check_mode:
    support: full
    details:
      - Each entry is checked as its module checks it in check mode (programs are loaded, not attached, to
        compare tags and to surface verifier errors). An entry whose object an earlier entry of the same run
        would compile is reported as a change, and so is a tc entry placed (O(ebpf.xdp.tc_program#module:before),
        O(ebpf.xdp.tc_program#module:after)) next to a named attachment an earlier entry would make.
  diff_mode:
    support: full
    details:
      - No diff with O(report=changes).
  idempotent:
    support: full
notes:
  - The per-item modules stay; M(ebpf.xdp.xdp_program) and the others run the same code for one item.
seealso:
  - module: ebpf.xdp.xdp_program
  - module: ebpf.xdp.tc_program
  - module: ebpf.xdp.devmap_group
  - module: ebpf.xdp.bpf_map_entry
  - module: ebpf.xdp.bpf_object
"""

EXAMPLES = r"""
- name: Converge the receiver's data path, and remove what it no longer declares
  ebpf.xdp.datapath:
    state: overridden
    config:
      objects:
        - src: /var/lib/ebpf_xdp/src/xdp_drop_count.bpf.c
          dest: /var/lib/ebpf_xdp/objects/xdp_drop_count.o
      xdp:
        - interface: eth0
          object: /var/lib/ebpf_xdp/objects/xdp_drop_count.o
          mode: native
        - interface: eth1
          object: /var/lib/ebpf_xdp/objects/xdp_drop_count.o
          constants: {xdp_action: 2}

- name: Ship the sources in the same task, and compile them
  ebpf.xdp.datapath:
    sources:
      dir: /var/lib/ebpf_xdp/src
      files:
        xdp_drop_count.bpf.c: "{{ lookup('ansible.builtin.file', 'bpf/xdp_drop_count.bpf.c', rstrip=false) }}"
    config:
      objects:
        - src: /var/lib/ebpf_xdp/src/xdp_drop_count.bpf.c
          dest: /var/lib/ebpf_xdp/objects/xdp_drop_count.o

- name: Read what the collection has on the host, in the shape of config
  ebpf.xdp.datapath:
    state: gathered
  register: current

- name: Feed it back, as a no-change run
  ebpf.xdp.datapath:
    state: overridden
    config: "{{ current.gathered }}"
"""

RETURN = r"""
before:
  description: The host's attachments and groups before the task, in the shape of O(config) (see RV(gathered)).
  returned: unless O(state=gathered), O(report=changes) or the host is not ready (RV(toolchain))
  type: dict
after:
  description:
    - The same after the task. In check mode, RV(before) with C(changed_entries), the entries that would change.
  returned: unless O(state=gathered), O(report=changes) or the host is not ready (RV(toolchain))
  type: dict
gathered:
  description:
    - This collection's XDP and tc attachments (from their ownership records) and multicast groups in
      RV(namespaces), in the shape of O(config) (C(xdp), C(tc), C(devmap_groups)). A named tc attachment has its
      C(name), and its C(before) or C(after) as its task gave it.
  returned: when O(state=gathered)
  type: dict
  sample: {xdp: [{interface: eth0, netns: null, object: /var/lib/ebpf_xdp/objects/xdp_drop_count.o,
                  program: null, constants: {}, mode: native}], tc: [], devmap_groups: []}
changes:
  description: One item per entry that changed (or would), in the order they ran.
  returned: unless O(state=gathered) or the host is not ready (RV(toolchain))
  type: list
  elements: dict
  sample: [{entry: "config.xdp[0]", section: xdp, state: present, diff: {}}]
item_results:
  description:
    - Per section of O(config), one result per entry, in order - what the entry's module returns for it (for
      example RV(ebpf.xdp.xdp_program#module:id), RV(ebpf.xdp.xdp_program#module:revision)) - with the entry,
      its defaults filled in, as C(item).
  returned: unless O(state=gathered), O(report=changes) or the host is not ready (RV(toolchain))
  type: dict
  sample: {xdp: [{changed: true, id: 42, mode: native, item: {interface: eth0, mode: native}}], tc: [],
           objects: [], devmap_groups: [], map_entries: []}
facts_before:
  description:
    - The host's XDP facts before the task's first change (see O(facts_before)), in the shape of
      M(ebpf.xdp.xdp_facts)' C(ansible_facts.xdp). Null when not asked for, in check mode, and when
      O(facts_before.only_if_changing) and the task changed nothing.
  returned: unless O(state=gathered) or the host is not ready (RV(toolchain))
  type: dict
  sample: {interfaces: {eth0: {ifindex: 2, stats: {rx_packets: 1200}, rates: {stats: {rx_packets: 400.0}}}},
           rate_interval: 1.001}
namespaces:
  description: The namespaces the task read and could clean up (null is the module's own).
  returned: unless the host is not ready (RV(toolchain))
  type: list
  elements: str
toolchain:
  description:
    - The host's toolchain facts, as M(ebpf.xdp.toolchain_facts) returns them, with C(ready) false and C(unready)
      (what the host lacks, in words). The task changed nothing.
  returned: when O(toolchain) is given and the host is not ready
  type: dict
  sample: {ready: false, unready: ["packages not installed: clang, libbpf1"], packages: {clang: null}}
put_back:
  description:
    - When an entry failed, what the run had changed and put back (or could not), newest first.
    - An entry whose migrating upgrade moved its map set's other attachments lists each of them too, as the
      entry's map set followed by the attachment, put back before the entry with the set's maps.
    - An entry whose upgrade migrated a map with counters lists the map last, as the entry's map with what the new
      programs counted. Once every old program is back on its hook, what they counted in the new map between the
      entry and the failure is added to the old map (field by field, with the kernel's atomic adds), so no frame
      is lost or counted twice.
  returned: on failure after a change
  type: list
  elements: str
"""

from ansible_collections.ebpf.xdp.plugins.module_utils import _common, _datapath


def leave_an_unready_host(module):
    """With toolchain, a host that lacks part of it is left as it is, before any library is needed."""
    toolchain = _datapath.toolchain_unready(module.params, module.run_command, module.get_bin_path)
    if toolchain:
        module.exit_json(changed=False, toolchain=toolchain, invocation=_datapath.invocation(module.params))


def main():
    _common.run_module(
        _datapath.ARGS,
        prepare=leave_an_unready_host,
        work=lambda params, check_mode, module: _datapath.run(params, check_mode, module.run_command,
                                                              module.get_bin_path),
        failure=lambda params: dict(changed=False, put_back=[], invocation=_datapath.invocation(params)))


if __name__ == "__main__":
    main()
