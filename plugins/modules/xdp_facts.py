#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) ebpf.xdp contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: xdp_facts
short_description: XDP and tc programs, maps and counters of a host as facts
version_added: 0.1.0
description:
  - Sets C(ansible_facts.xdp) to the XDP and tc programs attached to the host's interfaces, with their
    ids, tags, attach mode or method, owner (C(ebpf.xdp) or C(unmanaged)), maps and counters.
  - Counters are the entries of maps with 64-bit values (arrays and hashes, per-CPU or not), summed
    over CPUs; zero entries are left out. Maps named C(proto_count), such as the one in
    C(xdp_drop_count), are keyed by IP protocol and also reported by protocol name.
  - With O(rate_interval), the module samples twice and adds per-second rates of every counter and of
    the interface statistics.
  - Multicast groups of the shared map sets in the namespace (see M(ebpf.xdp.devmap_group)) are reported in
    C(devmap_groups), with their members, addresses and counters.
  - Every data map (hash, array, LRU, LPM trie, their per-CPU kinds, devmaps) of the programs chosen by
    O(programs) and O(maps) is also read and decoded through its BTF, whatever its key and value types, into
    C(entries) of its item in C(maps) (see RV(ansible_facts.xdp.interfaces)); a map without BTF reads by its
    sizes. At most O(max_entries) entries of each map are read.
author:
  - ebpf.xdp developers (@ebpf-xdp)
requirements:
  - libbpf >= 1.0 (C(libbpf.so.1)) and pyroute2 on the managed host
  - root (reading BPF objects by id needs C(CAP_SYS_ADMIN))
extends_documentation_fragment:
  - ebpf.xdp.attributes
  - ebpf.xdp.attributes.facts
  - ebpf.xdp.pin_root
options:
  interfaces:
    description:
      - Interfaces to report. By default every interface that has an XDP or tc program attached.
      - Naming an interface reports it even without a program (its C(xdp) is then null and its C(tc) lists
        are empty); naming one that does not exist is an error.
    type: list
    elements: str
    default: []
  netns:
    description:
      - Network namespace under C(/run/netns) to read, instead of the one the module runs in.
    type: str
  rate_interval:
    description:
      - Seconds between two samples used to compute rates; V(0) takes one sample and no rates.
      - Decoded map entries get C(rates) too, for every number in their value.
    type: float
    default: 0
  maps:
    description:
      - "Maps whose contents are decoded, as shell-style globs of map names (the kernel keeps 15 characters of a
        name). V([]) decodes none: the facts are then what they were before decoding existed (C(counters) only)."
      - A glob that matches no map of the chosen programs is no error; C(unmatched) says so, and a warning.
    type: list
    elements: str
    default: ['*']
  programs:
    description:
      - Programs whose maps are decoded, as shell-style globs of the program's kernel name (15 characters) or of
        the function name this collection's ownership record keeps (C(program)). Every program is reported
        either way, with its C(counters); the others' maps just have no C(entries).
      - A glob that matches no program is no error; C(unmatched) says so, and a warning.
    type: list
    elements: str
    default: ['*']
  max_entries:
    description:
      - At most this many entries are read from each decoded map (an array's first indexes, a hash's first in the
        kernel's order), so that a hash of a million flows is not read whole. Each map says what was left out
        (C(truncated), C(entries_total)).
      - Must be a positive number.
    type: int
    default: 1024
  per_cpu:
    description:
      - Also report each CPU's copy of a per-CPU map's values (C(values), one per possible CPU), next to their
        sum (C(value)).
    type: bool
    default: false
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
  facts:
    support: full
  idempotent:
    support: full
seealso:
  - module: ebpf.xdp.xdp_program
"""

EXAMPLES = r"""
- name: Read counters, with rates over two seconds
  ebpf.xdp.xdp_facts:
    rate_interval: 2

- name: Show packets per IP protocol, like the kernel's xdp1 sample
  ansible.builtin.debug:
    msg: "proto {{ item.key }}: {{ item.value }} packets"
  loop: "{{ ansible_facts.xdp.interfaces.eth1.xdp.counters.proto_count | dict2items }}"

- name: Read the statistics of xdp-filter's xdp_stats_map, decoded through its BTF (struct xdp_stats_record)
  ebpf.xdp.xdp_facts:
    maps: [xdp_stats_map]
    max_entries: 16

- name: Dropped packets, as xdp-filter status prints them (key is the enum xdp_action's name)
  ansible.builtin.debug:
    msg: "{{ ((ansible_facts.xdp.interfaces.eth1.xdp.maps | selectattr('name', 'equalto', 'xdp_stats_map')
              | first).entries | items2dict)['XDP_DROP'].rx_packets }}"

- name: List the programs libxdp's dispatcher runs on eth1 (xdp-loader's or this collection's), in run order
  ansible.builtin.debug:
    msg: "{{ item.priority }} {{ item.name }} ({{ item.owner }}), next on {{ item.chain_call_actions | join(',') }}"
  loop: "{{ ansible_facts.xdp.interfaces.eth1.xdp_chain | default([], true) }}"
"""

RETURN = r"""
ansible_facts:
  description: Facts to add to ansible_facts.
  returned: always
  type: dict
  contains:
    xdp:
      description: XDP state of the host (or of O(netns)).
      returned: always
      type: dict
      contains:
        netns:
          description: The namespace key used in pin paths (C(host) for the initial namespace).
          type: str
          sample: host
        rate_interval:
          description: Measured seconds between the two samples.
          type: float
          returned: when O(rate_interval) is set
        unmatched:
          description:
            - The globs of O(maps) and O(programs) that matched nothing (each also a warning).
          type: dict
          returned: always
          sample: {maps: [flow_tabel], programs: []}
        devmap_groups:
          description:
            - Multicast groups (see M(ebpf.xdp.devmap_group)) per shared map set of the namespace that holds
              them, each a list sorted by id.
            - A group has C(id), C(name) (null for none), C(owner) (C(ebpf.xdp), or C(unmanaged) for a group
              written by other means), C(members) (each with C(name) and C(ifindex)), C(addresses),
              C(exclude_ingress), C(egress_program) (its program name, or null), C(egress_section) (its section,
              only when the task chose it by O(ebpf.xdp.devmap_group#module:egress_program.section)), C(frames)
              (frames classified to the group) and C(copies) (copies the program asked the kernel for), both summed
              over CPUs, and with O(rate_interval) C(rates) (C(frames) and C(copies) per second).
            - A map set that cannot be read (half removed, say) is left out with a warning.
          type: dict
          returned: when the namespace has a map set with the multicast maps (a set without groups is an empty list)
          sample:
            multicast:
              - id: 1
                name: video
                owner: ebpf.xdp
                members: [{name: eth2, ifindex: 4}, {name: eth3, ifindex: 5}]
                addresses: [239.1.1.1]
                exclude_ingress: true
                egress_program: null
                frames: 1000
                copies: 2000
        interfaces:
          description:
            - Interface name to its C(ifindex), C(mac), C(mtu), C(stats) (packet and byte counters),
              C(rates) (with O(rate_interval)), C(xdp), C(xdp_chain) and C(tc).
            - Without O(interfaces), the interfaces that have an XDP or tc program.
            - C(xdp) is null without a program, else a dict with C(id), C(name), C(tag), C(mode),
              C(owner), C(maps) (each with C(id), C(name), C(type), C(key_size), C(value_size),
              C(max_entries), and when decoded the keys below), C(counters) (map name to key to total, for maps
              of 64-bit values under integer keys), C(protocols) (for
              C(proto_count) maps), C(rates) and C(protocol_rates) (with O(rate_interval)), and for
              programs attached by this collection C(object), C(object_sha256), C(program) (the function
              loaded) and C(constants), and C(section) when the task chose the program by its section
              (O(ebpf.xdp.xdp_program#module:section)); C(attach) (V(link) or V(netlink)) and C(link_id) say how it is held.
              Programs attached by this collection also have C(revision) and C(previous_revision), as
              RV(ebpf.xdp.xdp_program#module:revision) describes (the revision attached, the one kept to put back).
              Programs loaded with C(backend=bcc) (see M(ebpf.xdp.xdp_program)) add C(backend) (V(bcc)),
              C(source), C(source_sha256), C(cflags) and C(kernel_release); their maps are bcc's tables by
              their names.
            - "A decoded map (see O(maps)) adds C(entries): a list of C({key, value}) in
              M(ebpf.xdp.bpf_map_entry)'s notation (its O(ebpf.xdp.bpf_map_entry#module:entries) takes them back),
              sorted by key; a struct or union as a dict of its members (anonymous ones flattened, every member of a
              union shown; as C({hex: ...}) when its padding is not zero), an enum by its enumerator's name, a C(char) array as text, other byte arrays as
              C({hex: ...}), arrays as lists. A per-CPU value is summed over CPUs field by field (integers that
              count; an enum, boolean, pointer or bytes where every CPU holds the same, else null), with
              O(per_cpu) each CPU's in C(values); with O(rate_interval), C(rates) holds the per-second rate of every
              number of the value. An array's entries whose value is all zero are left out, as in C(counters).
              Also C(btf) (whether the key or value came from BTF), C(key_type) and C(value_type) (their C
              names, or C(a 4-byte key) without BTF), C(entries_read), C(truncated) (more entries than
              O(max_entries)), C(entries_total) (the map's entries: an array's size, a hash's count when read to
              its end, else null) and C(btf_error) when the map's BTF could not be read (then read by its
              sizes, with a warning)."
            - C(xdp_chain) is null unless the XDP program is libxdp's dispatcher (C(xdp_dispatcher), attached by
              C(xdp-loader) or another libxdp user), which runs several XDP programs in turn; it is then the list
              of those programs in the order they run, with the same keys as C(xdp) (C(attach) is
              V(dispatcher), C(mode) the dispatcher's) and C(priority) and C(chain_call_actions) (the verdicts
              after which the next program runs, of V(aborted), V(drop), V(pass), V(tx), V(redirect)); C(owner) is
              V(unmanaged) for programs of other tools. Reading it needs libxdp (Debian package C(libxdp1)),
              which the role C(ebpf.xdp.toolchain) installs; without it a warning says the list is missing.
            - C(tc) has C(ingress) and C(egress), each the list of programs on that tc hook in the
              order they run (tcx programs, then clsact filters), with the same keys as C(xdp) but
              C(method) (V(tcx), V(cls_bpf) or V(act_bpf)) instead of C(mode), and C(direction), and
              C(priority), C(handle), C(protocol) (and C(verdict) for act_bpf) for filters. C(attachment) is the
              name of this collection's attachment (M(ebpf.xdp.tc_program)'s
              O(ebpf.xdp.tc_program#module:name)), null for the unnamed one and for programs it did not attach;
              several programs of this collection on one hook are each listed, in the order the kernel runs them.
          type: dict
          sample:
            eth0:
              ifindex: 2
              mac: "02:00:00:00:02:01"
              mtu: 1500
              stats: {rx_packets: 30, tx_packets: 0, rx_bytes: 1800, tx_bytes: 0, rx_dropped: 0, tx_dropped: 0}
              xdp:
                id: 42
                name: xdp_drop_count
                tag: 8a80a4514121157e
                mode: native
                owner: ebpf.xdp
                maps:
                  - {id: 7, name: proto_count, type: percpu_array, key_size: 4, value_size: 8, max_entries: 256,
                     btf: true, key_type: __u32, value_type: __u64, entries: [{key: 6, value: 10}, {key: 17, value: 20}],
                     entries_read: 256, truncated: false, entries_total: 256}
                counters: {proto_count: {"6": 10, "17": 20}}
                protocols: {tcp: 10, udp: 20}
              xdp_chain: null
              tc:
                ingress:
                  - {id: 51, name: redirect_xmit, method: tcx, direction: ingress, attach: link, link_id: 9,
                     owner: ebpf.xdp, attachment: null, counters: {redirect_count: {"0": 20}}}
                egress: []
"""

from ansible_collections.ebpf.xdp.plugins.module_utils import _common, _facts
from ansible_collections.ebpf.xdp.plugins.module_utils.host import netns as _netns

ARGUMENT_SPEC = dict(
    interfaces=dict(type="list", elements="str", default=[]),
    netns=dict(type="str"),
    rate_interval=dict(type="float", default=0),
    **_facts.READING_ARGS,
    **_common.PIN_ROOT_ARGS)


def prepare(module):
    if module.params["rate_interval"] < 0:
        module.fail_json(msg="rate_interval must not be negative")
    try:
        _facts.MapReading.from_params(module.params)
    except _facts.FactsError as exc:
        module.fail_json(msg=str(exc))


def read(p, _check_mode, _module):
    warnings = []
    reading = _facts.MapReading.from_params(p)
    with _netns.netns(p["netns"]):
        if p["rate_interval"]:
            xdp = _facts.with_rates(p["pin_root"], p["netns"], p["interfaces"], p["rate_interval"], warnings, reading)
        else:
            xdp = _facts.snapshot(p["pin_root"], p["netns"], p["interfaces"], warnings, reading)
    return dict(changed=False, ansible_facts={"xdp": xdp}), warnings


def main():
    # Facts change nothing: a missing library is missing, in check mode too.
    _common.run_module(ARGUMENT_SPEC, prepare=prepare, libraries=dict(predicts=False), privileges=("CAP_SYS_ADMIN",),
                       work=read)


if __name__ == "__main__":
    main()
