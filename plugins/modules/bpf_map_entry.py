#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) ebpf.xdp contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: bpf_map_entry
short_description: Set or remove entries of a pinned BPF map
version_added: 0.1.0
description:
  - The declarative C(bpftool map update) and C(bpftool map delete) for a map pinned in bpffs, such as the maps
    M(ebpf.xdp.xdp_program) pins for each attachment (RV(ebpf.xdp.xdp_program#module:maps)). The program that
    uses the map keeps running; only the listed entries change.
  - Keys and values are written in inventory notation and encoded from the map's BTF where it has one (a struct
    is a dict of its fields, an array a list), else from the map's key and value sizes.
  - The map is read once and compared byte for byte with what the task asks; only entries that differ are
    written, so a second run reports no change. Every entry is encoded and checked before anything is written;
    if the kernel then refuses a write, the entries written before it are put back.
  - Supported map types are hash, array, percpu_hash, percpu_array, lru_hash, lru_percpu_hash, lpm_trie,
    devmap and devmap_hash. Maps whose values are file descriptors of other objects (maps of maps, program
    arrays, socket maps) are refused; see M(ebpf.xdp.devmap_group) for multicast groups.
author:
  - ebpf.xdp developers (@ebpf-xdp)
requirements:
  - libbpf >= 1.0 (C(libbpf.so.1)) on the managed host
  - root (C(CAP_BPF) or C(CAP_SYS_ADMIN), and C(CAP_NET_ADMIN); C(CAP_SYS_ADMIN) itself with O(netns), and to
    open programs by id, such as a devmap value's egress program given or put back by id) and a mounted bpffs
extends_documentation_fragment:
  - ebpf.xdp.attributes
options:
  path:
    description:
      - Path of the pinned map in bpffs, for example
        C(/sys/fs/bpf/ebpf_xdp/host/eth0/xdp/maps/tx_port).
    type: path
    required: true
  netns:
    description:
      - Name of a network namespace under C(/run/netns) (as created by C(ip netns add)) in which interface
        names are resolved and the map is written. The kernel resolves the interface index of a devmap value in
        the namespace of the process that writes it, so give the namespace of the target interfaces.
      - The module switches only its network namespace; bpffs stays the host's.
    type: str
  entries:
    description:
      - The entries to set (O(state=present)) or remove (O(state=absent)).
      - "Integers are written in the host's byte order (little-endian on x86_64 and arm64), as the program
        reads them, and range-checked against the field's type (or, without BTF, the key or value size). They
        may be given as numbers, booleans, or strings of decimal or C(0x) hexadecimal digits (what a template
        renders); C(0x0a000001) is therefore the integer 167772161, not bytes."
      - "C({ifindex: NAME}) is the index of interface NAME in O(netns), anywhere an integer goes. An integer
        field named C(ifindex) or ending in C(_ifindex) also takes the interface name alone."
      - "Bytes: C({hex: '0a000001'}) (spaces and colons allowed; quoted, since YAML reads C({hex: 0x0a}) or
        C({hex: 10}) as a number, which is refused), an IPv4 or IPv6 address (in network order), or
        a MAC address (C(02:00:00:00:00:01)). A byte-array field (such as C(__u8 addr[16])) takes them when they
        fit and is zero-filled after them (an IPv4 address in a 16-byte field); any other field, and a key or
        value without BTF, takes them only at exactly its size. A byte array also takes a list of byte values."
      - "With BTF, a struct or union is a dict of its fields (fields left out are zero, as in a C initializer;
        unknown fields are an error that lists the known ones; members of an anonymous struct or union are the
        parent's; members of a union may be given together when they agree on the bytes they share), an array
        of wider elements is a list, and an enum also takes the names of its enumerators. A C(char) array takes
        text (printable ASCII, shorter than the array: the rest is NUL). Bitfields are supported on
        little-endian hosts. Values read back (RV(entries), and the entries M(ebpf.xdp.xdp_facts) reports) are
        in the same notation, and write back to the same bytes: every member of a union is shown, a C(char)
        array as text where it holds text up to a NUL and zeros after it, other byte arrays as C({hex: ...}),
        and a struct whose padding is not zero as C({hex: ...}) of all its bytes."
      - "A devmap value (which has no BTF) is C(struct bpf_devmap_val): C({ifindex: NAME}) or an index, and in
        an 8-byte value optionally C(prog), the pin path (or id) of an C(xdp/devmap) program run on each frame
        sent to that port, for example C({ifindex: eth1, prog: /sys/fs/bpf/egress}). It reads back as
        C({ifindex: 5, prog: 42}), with the program's id."
      - In a per-CPU map, the value is written to every CPU, and an entry is the same only when every CPU holds
        it.
    type: list
    elements: dict
    default: []
    suboptions:
      key:
        description: The key, in the notation above.
        type: raw
        required: true
      value:
        description:
          - The value, in the notation above. Required with O(state=present); not allowed with O(state=absent).
        type: raw
  state:
    description:
      - V(present) writes the entries where the map does not hold them already; V(absent) deletes the listed
        keys where the map has them.
      - In an array map every key always exists and cannot be deleted; there, an absent entry is an all-zero
        value, so V(absent) writes zero, and RV(entries) leaves all-zero entries out.
    type: str
    choices: [present, absent]
    default: present
  exclusive:
    description:
      - With O(state=present), also delete every entry that O(entries) does not list (in an array map, set it
        to zero), so the map holds exactly the listed entries. An empty O(entries) then empties the map.
      - Not allowed with O(state=absent).
    type: bool
    default: false
attributes:
  check_mode:
    support: full
    details:
      - Check mode reads the map and reports the entries it would hold afterwards, without writing.
  diff_mode:
    support: full
    details:
      - The diff lists every entry of the map before and after, decoded.
  idempotent:
    support: full
notes:
  - A key of an array or a devmap is an index below the map's C(max_entries); a larger one is an error. A hash
    map that would end up holding more than its C(max_entries) is an error too (LRU maps evict instead).
  - A native XDP redirect into a veth needs an XDP program on the veth's peer, or the kernel drops the frame.
  - Use P(ebpf.xdp.xdp_facts#module) to read the counters of maps that programs write.
seealso:
  - module: ebpf.xdp.xdp_program
  - module: ebpf.xdp.xdp_facts
"""

EXAMPLES = r"""
- name: Forward everything eth0 receives to eth1 (files/bpf/xdp_redirect_map.bpf.c)
  ebpf.xdp.xdp_program:
    interface: eth0
    object: /var/lib/ebpf_xdp/objects/xdp_redirect_map.o
    program: xdp_redirect_map
  register: redirect

- name: Point the default port (key 0) at eth1
  ebpf.xdp.bpf_map_entry:
    path: "{{ redirect.maps.tx_port }}"
    entries:
      - key: 0
        value: {ifindex: eth1}

- name: The same inside a network namespace, and nothing else in the map
  ebpf.xdp.bpf_map_entry:
    path: /sys/fs/bpf/ebpf_xdp/blue/veth0/xdp/maps/tx_port
    netns: blue
    exclusive: true
    entries:
      - key: 0
        value: {ifindex: veth1}

- name: A struct key from the map's BTF (struct mcast_key {__u32 kind; __u8 addr[16];})
  ebpf.xdp.bpf_map_entry:
    path: /sys/fs/bpf/ebpf_xdp/host/eth0/xdp/maps/mcast_addrs
    entries:
      - key: {kind: 4, addr: 239.1.1.1}
        value: 1
      - key: {kind: 6, addr: "ff0e::1:3"}
        value: 2

- name: Raw bytes and a MAC address
  ebpf.xdp.bpf_map_entry:
    path: /sys/fs/bpf/my_program/port_macs
    entries:
      - key: {hex: "0a000001"}
        value: "02:00:00:00:00:01"

- name: Remove an entry
  ebpf.xdp.bpf_map_entry:
    path: "{{ redirect.maps.tx_port }}"
    state: absent
    entries:
      - key: 0
"""

RETURN = r"""
path:
  description: The map's pin path.
  returned: always
  type: str
  sample: /sys/fs/bpf/ebpf_xdp/host/eth0/xdp/maps/tx_port
map:
  description: What the kernel says of the map, and whether it has BTF (then keys and values follow its types).
  returned: success
  type: dict
  sample: {id: 12, name: tx_port, type: devmap, key_size: 4, value_size: 4, max_entries: 4096, btf: false}
entries:
  description:
    - "Every entry of the map after the task (in check mode, as it would be), decoded in the notation of
      O(entries), ordered by key. Interface indexes read back as numbers, byte arrays as C({hex: ...})."
    - A per-CPU entry has C(value) when every CPU holds the same value, else C(values), one per CPU.
    - All-zero entries of array maps are left out.
  returned: success
  type: list
  elements: dict
  sample: [{key: 0, value: {ifindex: 5}}]
updated:
  description: Keys written (or, in check mode, to be written), decoded.
  returned: success
  type: list
  elements: raw
  sample: [0]
deleted:
  description: Keys deleted (or, in check mode, to be deleted), decoded; in array maps zeroing is an update.
  returned: success
  type: list
  elements: raw
  sample: []
"""

from ansible_collections.ebpf.xdp.plugins.module_utils import _common
from ansible_collections.ebpf.xdp.plugins.module_utils.maps import map_entry as _map_entry


def converge(params, check_mode, module):
    result = _map_entry.converge(params, check_mode)
    diff = result.pop("diff")
    if module._diff:  # pylint: disable=protected-access
        result["diff"] = diff
    return result, []


def main():
    _common.run_module(
        _map_entry.ENTRY_ARGS, libraries=dict(pyroute2=False), work=converge,
        # CAP_SYS_ADMIN grants CAP_BPF (missing_capabilities); entering a namespace needs CAP_SYS_ADMIN itself.
        privileges=lambda params: ("CAP_BPF", "CAP_NET_ADMIN") + (("CAP_SYS_ADMIN",) if params["netns"] else ()),
        failure=lambda params: dict(path=params["path"], changed=False))


if __name__ == "__main__":
    main()
