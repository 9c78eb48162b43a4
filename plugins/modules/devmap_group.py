#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) ebpf.xdp contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: devmap_group
short_description: Declare a multicast group of the XDP multicast program
version_added: 0.3.0
description:
  - Manages one multicast group of C(xdp_multicast) (C(files/bpf/xdp_multicast.bpf.c)), the XDP program that
    copies a frame to every member port of its group with C(bpf_redirect_map()) and C(BPF_F_BROADCAST) over a
    devmap per group.
  - The group lives in the maps of a shared map set (O(shared_maps)), which M(ebpf.xdp.xdp_program) pins when it
    attaches the multicast program with the same O(shared_maps) on each port. Attach the program first; a
    missing map set is an error that says so.
  - Changes are writes to the pinned maps only, never a program reload. A new group's members, settings, devmap
    and addresses are written in that order; an existing group's devmap is edited in place, adding before
    removing, so the members that stay never miss a frame. A failed run undoes its writes.
  - A frame belongs to a group by its multicast destination IP (IPv4 or IPv6) or, failing that, its destination
    MAC (see O(addresses)). A port that is not a member can still feed a group.
  - Two runs are the same when the members, addresses, O(exclude_ingress) and egress program (the object's
    SHA-256 and the program loaded) in the maps and the group's record match the task. The same program named the
    other way (O(egress_program.program) instead of O(egress_program.section), or the other way round) is no
    change; the group's record then says how the task names it.
author:
  - ebpf.xdp developers (@ebpf-xdp)
requirements:
  - libbpf >= 1.0 (C(libbpf.so.1)) on the managed host
  - root (C(CAP_BPF), C(CAP_NET_ADMIN), C(CAP_SYS_ADMIN)) and a mounted bpffs
extends_documentation_fragment:
  - ebpf.xdp.attributes
  - ebpf.xdp.pin_root
options:
  # BEGIN options (devmap_group)
  name:
    description:
      - Name of the group, unique in its map set. A name without O(id) finds the group of that name, or gives a new group
        the lowest free id (kept in the group's record). 1 to 64 characters without control characters.
      - At least one of O(name) and O(id) is required.
    type: str
  id:
    description:
      - Group id, from 1 to 255 (0 means "no group" to the program). With O(name), both must agree with an existing group.
    type: int
  shared_maps:
    description:
      - The map set of the multicast program, as given to O(ebpf.xdp.xdp_program#module:shared_maps) of M(ebpf.xdp.xdp_program).
    type: str
    default: multicast
  netns:
    description:
      - Network namespace under C(/run/netns) of the ports (the multicast program's and the members), instead of the one
        the module runs in. Members are interface names of this namespace; one in another namespace is an error.
    type: str
  members:
    description:
      - Interface names of the member ports. Each gets a copy of every frame of the group, resolved to its ifindex in
        O(netns). Each must be a name the kernel could give an interface (1 to 15 bytes, without C(/), C(:), whitespace
        or control characters, not C(.) or C(..)).
      - Without O(exclusive), the listed members are added and others stay.
    type: list
    elements: str
    default: []
  addresses:
    description:
      - Destinations that make a frame one of this group's - multicast IPv4 (C(224.0.0.0/4)) or IPv6 (C(ff00::/8)) addresses,
        or multicast/broadcast MACs (for frames no IP address matched, for example C(ff:ff:ff:ff:ff:ff) for ARP broadcasts).
        A unicast address is an error, and so is an address of another group of the set.
      - Without O(exclusive), the listed addresses are added and others stay.
    type: list
    elements: str
    default: []
  exclude_ingress:
    description:
      - Whether the port a frame came in by is left out of its copies (C(BPF_F_EXCLUDE_INGRESS)). V(false) sends it a
        copy too, as the kernel's own multicast selftest expects for an ARP broadcast.
      - When omitted, a new group excludes the ingress port and an existing group keeps its setting.
    type: bool
  exclusive:
    description:
      - Remove the members and addresses that are not listed, instead of only adding the listed ones, and the egress program
        when O(egress_program) is omitted.
    type: bool
    default: false
  egress_program:
    description:
      - A devmap egress program that runs on each member's copy before it leaves, such as C(xdp_egress_mac) of C(xdp_multicast.bpf.c),
        which writes the egress port's own MAC as the source address (the module writes each member's MAC into C(mcast_port_mac)).
      - It is loaded as a devmap program (attach type C(BPF_XDP_DEVMAP)) over the map set's maps, pinned in the group's
        directory and set in every member's devmap value.
      - When omitted, the group keeps the egress program it has, as it keeps members and addresses that are not listed;
        with O(exclusive=true) an omitted egress program is removed. V({}) (an empty dict) removes the group's egress
        program in any case.
    type: dict
    suboptions:
      object:
        description: Path of the compiled BPF object on the managed host; required unless O(egress_program) is V({}).
        type: path
      program:
        description:
          - Function name of the program; may be omitted when the object holds one devmap program (C(SEC("xdp/devmap")),
            or libbpf 0.x's C(SEC("xdp_devmap/...")), which is loaded as a devmap program too).
          - Mutually exclusive with O(egress_program.section).
        type: str
      section:
        description:
          - The program by its section name in O(egress_program.object), its C(SEC()) (as iproute2's C(sec) takes it),
            instead of O(egress_program.program), for example C(xdp/devmap) or C(xdp_devmap/egress_mac).
          - A section that holds several programs is an error listing them by function name; name one with O(egress_program.program)
            then. A section the object does not have is an error listing its programs and sections. Either way nothing
            is changed.
          - The result, the diff, P(ebpf.xdp.xdp_facts#module) (C(egress_section)) and P(ebpf.xdp.datapath#module)'s V(gathered)
            show the section as asked.
          - Mutually exclusive with O(egress_program.program).
        type: str
  state:
    description:
      - V(present) creates or converges the group; V(absent) removes it (its addresses, its devmap and its settings) from
        the map set.
    type: str
    choices:
      - present
      - absent
    default: present
  # END options (devmap_group)
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
    details:
      - The diff shows the group's members (by name), addresses, O(exclude_ingress) and egress program before
        and after.
  idempotent:
    support: full
notes:
  - Copies into a veth are taken natively only while its peer has an XDP program (or GRO). The module warns,
    and lists the member in RV(no_native_redirect), when the kernel's C(xdp_features) say a member cannot take
    natively redirected frames now; on Linux before 6.3, which has no C(xdp_features), when a veth member's peer
    has no native-mode XDP program (GRO on the peer, which also lets the copies in, cannot be seen there).
  - A devmap egress program and a multicast program in generic mode do not go together on kernels whose generic
    broadcast clones the packet for each member with one shared buffer (seen on Debian 12's Linux 6.1; seen
    right on 6.18, releases between are treated as 6.1), since every copy would leave with what the last member's
    egress program wrote (its source MAC, say). There a group with an O(egress_program) in a map set with a
    generic-mode port, and a generic-mode port of a map set whose group has an egress program
    (P(ebpf.xdp.xdp_program#module)), are refused naming the kernel behaviour and the ports, changing nothing.
    Attach the multicast program with O(ebpf.xdp.xdp_program#module:mode=native) (native copies are each their
    own), or leave the group without an egress program.
  - The group's record and egress program are pinned in C(<pin_root>/<netns>/shared_maps/<set>/groups/<id>/);
    removing the last attachment of the map set (without O(ebpf.xdp.xdp_program#module:keep_maps)) removes its
    groups too.
  - P(ebpf.xdp.xdp_facts#module) shows the groups of every map set with their counters.
seealso:
  - module: ebpf.xdp.xdp_program
  - module: ebpf.xdp.xdp_facts
"""

EXAMPLES = r"""
- name: The multicast program on every switch port, sharing one map set
  ebpf.xdp.xdp_program:
    interface: "{{ item }}"
    object: /var/lib/ebpf_xdp/objects/xdp_multicast.o
    program: xdp_multicast
    shared_maps: multicast
  loop: [eth1, eth2, eth3, eth4]

- name: A video group on three ports
  ebpf.xdp.devmap_group:
    name: video
    members: [eth2, eth3, eth4]
    addresses: [239.1.1.1, "ff0e::1:1"]

- name: ARP broadcasts to every port, the sender included, with each port's own source MAC
  ebpf.xdp.devmap_group:
    name: arp
    id: 200
    members: [eth1, eth2, eth3, eth4]
    addresses: ["ff:ff:ff:ff:ff:ff"]
    exclude_ingress: false
    egress_program:
      object: /var/lib/ebpf_xdp/objects/xdp_multicast.o
      program: xdp_egress_mac

- name: The same egress program chosen by its section, as iproute2's sec takes it
  ebpf.xdp.devmap_group:
    name: arp
    egress_program:
      object: /var/lib/ebpf_xdp/objects/xdp_multicast.o
      section: xdp/devmap

- name: Exactly these members now (eth4 leaves, the others keep receiving)
  ebpf.xdp.devmap_group:
    name: video
    members: [eth2, eth3]
    addresses: [239.1.1.1, "ff0e::1:1"]
    exclusive: true

- name: Remove the group
  ebpf.xdp.devmap_group:
    name: video
    state: absent
"""

RETURN = r"""
id:
  description: The group's id (null when an absent group had none).
  returned: always
  type: int
  sample: 1
name:
  description: The group's name, or null.
  returned: always
  type: str
  sample: video
shared_maps:
  description: The map set.
  returned: always
  type: str
  sample: multicast
members:
  description: The members after the task, by name and ifindex (empty when absent).
  returned: always
  type: list
  elements: dict
  sample: [{name: eth2, ifindex: 4}, {name: eth3, ifindex: 5}]
addresses:
  description: The group's addresses after the task, in canonical form (IPv4, IPv6, then MACs).
  returned: always
  type: list
  elements: str
  sample: [239.1.1.1, "ff0e::1:1"]
exclude_ingress:
  description: Whether the ingress port is left out of the copies (null when absent).
  returned: always
  type: bool
egress_program:
  description:
    - The egress program's object and how the task named it - C(program) (its function name, null for the only
      devmap program of the object) or C(section) - or null.
  returned: always
  type: dict
  sample: {object: /var/lib/ebpf_xdp/objects/xdp_multicast.o, program: xdp_egress_mac}
no_native_redirect:
  description:
    - Members whose device cannot take natively redirected XDP frames now (kernel C(xdp_features) without
      C(ndo-xmit); before Linux 6.3, a veth whose peer has no native-mode XDP program); copies to them from
      natively attached ports are dropped. A warning says what to do.
  returned: always
  type: list
  elements: str
  sample: [eth4]
pin_dir:
  description: The group's pin directory (its record and egress program).
  returned: always
  type: str
  sample: /sys/fs/bpf/ebpf_xdp/host/shared_maps/multicast/groups/1
netns:
  description: The network namespace given, or null.
  returned: always
  type: str
"""

from ansible_collections.ebpf.xdp.plugins.module_utils import _common
from ansible_collections.ebpf.xdp.plugins.module_utils.maps import devmap as _devmap


def main():
    _common.run_module(_common.DEVMAP_GROUP_ARGS, rules=_common.DEVMAP_GROUP_RULES, names=_common.DEVMAP_GROUP_NAMES,
                       libraries=dict(pyroute2=False),
                       work=lambda params, check_mode, _module: _devmap.converge(params, check_mode))


if __name__ == "__main__":
    main()
