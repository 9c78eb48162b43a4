#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) ebpf.xdp contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: netfilter_drop
short_description: Drop and count an interface's frames with iptables or nftables, the baselines XDP is measured against
version_added: 0.1.0
description:
  - Puts one netfilter rule that drops everything O(interface) receives and counts it, or removes it again, and
    returns what it counted (RV(packets), RV(bytes)) on every run. It is the drop a user would pick instead of an
    XDP program, for benchmarks that compare the two; reading the counters is one command, exact, and changes
    nothing, so a benchmark runs the task before and after its traffic.
  - O(backend=iptables) inserts, at the head of table C(raw), chain C(PREROUTING), the rule
    C(-i INTERFACE -m comment --comment "ebpf.xdp netfilter_drop" -j DROP). The comment marks the rule as the
    module's; rules without it are never touched, and a rule with it belongs to the interface its C(-i) names.
    The drop comes before connection tracking and routing, and applies to IPv4 only (C(iptables), not
    C(ip6tables)).
  - O(backend=nftables) creates one table per interface, C(netdev ebpf_xdp_drop_INTERFACE), holding one base
    chain C(ingress) (C(type filter hook ingress device INTERFACE priority -500; policy accept)) with one rule
    C(counter drop). It drops every frame the device receives, whatever its protocol (ARP and IPv6 too). The
    table's name marks it as the module's; other tables, also ones hooked to the same device, are never touched.
    Its priority puts it before netdev ingress chains at the usual priority (C(filter), 0).
  - Idempotent. A rule as the module writes it is left alone (its counters go on) and the task reports no change.
    With O(backend=iptables), rules of the module's that differ from it, or come twice, are removed (the first
    exact one is kept); with O(backend=nftables), a table of that name that holds anything else is replaced in
    one transaction (its counters start again from 0). O(state=absent) removes the module's rule or table for
    O(interface) and nothing else; with none there, it reports no change.
  - The commands run inside O(netns) (a child process inherits the namespace the module entered).
author:
  - ebpf.xdp developers (@ebpf-xdp)
requirements:
  - the Debian package C(iptables) (C(iptables), C(iptables-save); Debian 12's is the nf_tables variant,
    C(iptables-nft), and the legacy one works as well) for O(backend=iptables), the package C(nftables)
    (C(nft) >= 0.9.3, for its JSON) for O(backend=nftables). The collection's benchmark role installs them on the
    hosts where it compares against these baselines; elsewhere install them first.
  - a kernel with nf_tables and its netdev family for O(backend=nftables) (C(CONFIG_NF_TABLES_NETDEV)), with
    C(iptable_raw) or nf_tables for O(backend=iptables)
  - root on the managed host (C(CAP_NET_ADMIN); C(CAP_SYS_ADMIN) with O(netns))
extends_documentation_fragment:
  - ebpf.xdp.attributes
  - ebpf.xdp.interface
options:
  backend:
    description:
      - Which drop. V(iptables) the rule in table C(raw), chain C(PREROUTING) (IPv4); V(nftables) a base chain on
        the device's netdev ingress hook (every frame). See the description.
    type: str
    choices: [iptables, nftables]
    required: true
  state:
    description:
      - V(present) puts the rule in place; V(absent) removes the module's rule for O(interface).
      - With V(present) O(interface) must exist. With V(absent) it need not (the interface may be gone already);
        an iptables rule naming it is still removed.
    type: str
    choices: [present, absent]
    default: present
attributes:
  check_mode:
    support: full
    details:
      - Check mode reads the rules, reports what would change and the counters the rule would have after the run
        (0 for a rule that would be written), and changes nothing.
  diff_mode:
    support: full
    details:
      - The diff shows the module's rules for O(interface) before and after, as text (iptables' words, or the
        nftables table).
  idempotent:
    support: full
notes:
  - Where the drop happens on the receive path, after what runs before it. An XDP program on O(interface) sees a
    frame first (in the driver, or at the top of the receive path in generic mode), then tc ingress, then the
    nftables netdev ingress hook, then iptables' C(raw PREROUTING) (after the IP header checks). Frames an earlier
    hook drops or redirects are not counted here.
  - The counters count what reached the rule, in packets and in bytes of the IP packet (iptables) or of the frame
    past its Ethernet header (nftables ingress), the figures C(iptables -v -x -L) and C(nft list) show. A
    benchmark takes the difference of two readings.
  - The commands are found on C(PATH) and in the C(sbin) directories. Without them the task fails, in check mode
    too, and names the package to install.
  - Removing the last iptables rule leaves table C(raw) and its built-in chains, empty, as C(iptables -D) does.
seealso:
  - module: ebpf.xdp.xdp_program
  - module: ebpf.xdp.xdp_facts
  - name: nftables netdev family
    description: The ingress hook of the netdev family in the nftables wiki.
    link: https://wiki.nftables.org/wiki-nftables/index.php/Nftables_families#netdev
"""

EXAMPLES = r"""
- name: The iptables baseline on the receiver's eth0
  ebpf.xdp.netfilter_drop:
    interface: eth0
    netns: receiver
    backend: iptables
  register: before

- name: Traffic runs here (ebpf.xdp.xdp_trafficgen, pktgen, ...)
  ansible.builtin.pause:
    seconds: 10

- name: What the rule dropped while the traffic ran
  ebpf.xdp.netfilter_drop:
    interface: eth0
    netns: receiver
    backend: iptables
  register: after

- name: Dropped frames
  ansible.builtin.debug:
    msg: "{{ after.packets - before.packets }} packets, {{ after.bytes - before.bytes }} bytes"

- name: The nftables baseline, at the device's ingress hook
  ebpf.xdp.netfilter_drop:
    interface: eth1
    backend: nftables

- name: Remove it again
  ebpf.xdp.netfilter_drop:
    interface: eth1
    backend: nftables
    state: absent
"""

RETURN = r"""
backend:
  description: The backend of the task.
  returned: always
  type: str
  sample: iptables
interface:
  description: The interface of the task.
  returned: always
  type: str
  sample: eth0
state:
  description: The state of the task.
  returned: always
  type: str
  sample: present
rule:
  description: The rule as the module writes it (iptables' words, or the nftables table); null with O(state=absent).
  returned: always
  type: str
  sample: '-t raw -A PREROUTING -i eth0 -m comment --comment "ebpf.xdp netfilter_drop" -j DROP'
packets:
  description:
    - Packets the rule counted (and dropped) since it was written, read at the end of the run; V(0) when there is no
      rule after the run, and in check mode for a rule the run would write.
  returned: always
  type: int
  sample: 100000
bytes:
  description: Bytes of the packets in RV(packets) (see the notes for which bytes); V(0) as for RV(packets).
  returned: always
  type: int
  sample: 6400000
"""

from ansible_collections.ebpf.xdp.plugins.module_utils import _common
from ansible_collections.ebpf.xdp.plugins.module_utils.host import netfilter as _netfilter

ARGUMENT_SPEC = dict(
    backend=dict(type="str", choices=list(_netfilter.BACKEND_CLASSES), required=True),
    state=dict(type="str", choices=["present", "absent"], default="present"),
    **_common.INTERFACE_ARGS)


def drop(params, check_mode, module):
    return _netfilter.converge(params, check_mode, _common.command_runner(module)), []


def main():
    _common.run_module(ARGUMENT_SPEC, work=drop, libraries=dict(libbpf=False, pyroute2=False),
                       privileges=lambda params: ("CAP_NET_ADMIN",) + (("CAP_SYS_ADMIN",) if params["netns"] else ()))


if __name__ == "__main__":
    main()
