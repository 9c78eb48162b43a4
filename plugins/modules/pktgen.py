#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) ebpf.xdp contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: pktgen
short_description: Send UDP test traffic with the kernel's packet generator (pktgen)
version_added: 0.1.0
description:
  - Drives the Linux kernel's pktgen through C(/proc/net/pktgen), as the kernel's C(samples/pktgen) scripts do. It
    loads the C(pktgen) module if needed, gives each CPU in O(cpus) its pktgen thread with the device
    C(INTERFACE@CPU), configures it, runs all threads at once, returns each thread's C(Result) line parsed
    (packets, pps, Mb/s, errors) with the totals, and removes its devices again, also when the run fails.
  - Every run is bounded, by O(count) packets per thread or by O(duration) seconds (pktgen is stopped then);
    a count run that has not finished after O(timeout) seconds is stopped and fails.
  - pktgen keeps one configuration per network namespace; with O(netns) the module runs pktgen in that
    namespace (pktgen's files and threads there). A run refuses to start while pktgen in the namespace has
    devices it did not add, because pktgen's start would run them as well (O(force) resets them).
  - O(xmit_mode=netif_receive) injects the packets into the receive path of O(interface) (C(netif_receive_skb))
    instead of sending them, the way to load a receive hook on one host; such packets pass tc ingress and
    generic-mode XDP, not native XDP (a driver's hook).
  - Refused targets. Linux 6.1 (Debian 12's kernel) crashes when pktgen's packets, which pktgen shares between
    transmits, reach a generic-mode XDP program (kernel BUG in C(pskb_expand_head)). The module therefore refuses
    O(xmit_mode=netif_receive) into a device with a generic-mode XDP program, and sending out of a veth whose
    peer has one. Native-mode XDP programs copy such packets and are safe.
  - A generator run is an action, as with M(ansible.builtin.command), it always reports C(changed=true). In
    check mode it validates the settings and the target (the interface exists, is up and has a carrier, the size
    fits its MTU, the CPUs are online, pktgen can be loaded), reports C(changed=true) and sends nothing.
  - A run that fails once it loaded pktgen, reset it (O(force)) or gave it a device (a refused setting, a thread
    that did not run, devices that could not be removed, the timeout) fails with C(changed=true) and the results
    of the threads that reported any; a failure before that (bad settings or target, devices of another run)
    reports C(changed=false).
  - Only send to addresses of networks you own, such as veth pairs or the collection's lab namespaces.
author:
  - ebpf.xdp developers (@ebpf-xdp)
requirements:
  - a kernel with pktgen (C(CONFIG_NET_PKTGEN); Debian's stock kernels have it as the module C(pktgen)), and
    C(modprobe) when it is not loaded yet
  - root on the managed host (C(CAP_NET_ADMIN); C(CAP_SYS_ADMIN) with O(netns))
extends_documentation_fragment:
  - ebpf.xdp.attributes
  - ebpf.xdp.interface
options:
  cpus:
    description:
      - CPUs to send from, one pktgen thread (C(kpktgend_N)) each, every one with its own device
        C(INTERFACE@N), as the samples' C(-t) option sets up. Each must be online.
    type: list
    elements: int
    default: [0]
  count:
    description:
      - Packets per thread. Positive. With O(duration) too, the run ends at whichever comes first.
      - One of O(count) and O(duration) is required.
    type: int
  duration:
    description:
      - Seconds to send for; pktgen is then stopped. The threads' C(seconds) may be a little shorter (each
        starts a moment after the run does).
    type: float
  timeout:
    description:
      - Seconds a run with O(count) and no O(duration) may take; pktgen is then stopped, its devices are removed
        and the task fails with the partial results.
    type: float
    default: 600
  size:
    description:
      - Frame size in bytes without FCS, as pktgen's C(pkt_size).
      - At least 58 over IPv4 and 78 over IPv6 (Ethernet, IP and UDP headers and pktgen's own 16-byte header,
        which pktgen adds even to smaller frames while its Result line shows the smaller size), at most the
        interface's MTU plus 14.
      - By default 60 over IPv4 (pktgen's default) and 78 over IPv6.
    type: int
  dst_ip:
    description:
      - Destination address, IPv4 or IPv6 (an IPv6 address sets pktgen's C(IPV6) flag, which O(flags) cannot).
      - One address, a range C(first-last) (IPv4 only) or a CIDR prefix (every address in it, as the samples'
        C(-d 198.18.0.0/15)). pktgen walks an IPv4 range in order, or at random with the flag C(IPDST_RND); it draws
        IPv6 destinations at random within the prefix.
    type: str
    required: true
  src_ip:
    description:
      - Source address of the same IP version; an IPv4 range or prefix as for O(dst_ip), one IPv6 address.
      - By default pktgen takes the interface's first IPv4 address (0.0.0.0 without one), and no source for IPv6.
    type: str
  dst_mac:
    description: Destination MAC address.
    type: str
    required: true
  src_mac:
    description: Source MAC address; the interface's own by default.
    type: str
  src_port:
    description: UDP source port, the first of a range when O(src_port_max) is set.
    type: int
    default: 9
  src_port_max:
    description:
      - Last UDP source port of a range (at most 65534). pktgen walks the range in order, or at random with the
        flag C(UDPSRC_RND).
    type: int
  dst_port:
    description: UDP destination port, the first of a range when O(dst_port_max) is set.
    type: int
    default: 9
  dst_port_max:
    description: Last UDP destination port of a range (at most 65534); at random with the flag C(UDPDST_RND).
    type: int
  burst:
    description:
      - Packets handed to the driver per transmit (pktgen's C(burst), using C(xmit_more)); V(1) sends one at a time.
      - In C(start_xmit) mode values above 1 need a device that lets pktgen share its packets; a veth does not,
        and pktgen refuses it there.
    type: int
    default: 1
  clone_skb:
    description:
      - Copies of the same packet sent before a new one is built (pktgen's C(clone_skb)); V(0) builds each packet.
        Not with O(xmit_mode=netif_receive); in C(start_xmit) mode only on devices that share packets (not veth).
    type: int
    default: 0
  delay:
    description: Gap between packets of a thread, in nanoseconds (pktgen's C(delay)).
    type: int
    default: 0
  rate:
    description: Rate per thread in Mb/s (pktgen's C(rate)); instead of O(delay) or O(ratep).
    type: int
  ratep:
    description: Rate per thread in packets per second (pktgen's C(ratep)); instead of O(delay) or O(rate).
    type: int
  flags:
    description:
      - pktgen device flags, for example C(QUEUE_MAP_CPU) (each thread on its CPU's transmit queue),
        C(NO_TIMESTAMP), C(UDPSRC_RND), C(UDPDST_RND), C(IPSRC_RND), C(IPDST_RND), C(UDPCSUM).
      - "Known: IPSRC_RND, IPDST_RND, UDPSRC_RND, UDPDST_RND, MACSRC_RND, MACDST_RND, TXSIZE_RND, MPLS_RND,
        VID_RND, SVID_RND, FLOW_SEQ, QUEUE_MAP_RND, QUEUE_MAP_CPU, UDPCSUM, NO_TIMESTAMP, IPSEC, NODE_ALLOC,
        SHARED (newer kernels; 6.1 lacks it). A leading C(!) clears a flag. A flag the running kernel lacks fails with
        the kernel's own list."
    type: list
    elements: str
    default: []
  xmit_mode:
    description:
      - V(start_xmit) sends out of O(interface) through its driver; V(netif_receive) injects the packets into
        its receive path. In C(netif_receive) mode pktgen counts the packets the stack dropped as errors.
    type: str
    choices: [start_xmit, netif_receive]
    default: start_xmit
  force:
    description:
      - Reset pktgen in the namespace (C(pgctrl reset)) when it has devices this run did not add, instead of
        failing. That stops and removes another user's run.
    type: bool
    default: false
attributes:
  check_mode:
    support: full
    details:
      - Check mode validates the settings and the target and sends nothing; it reports C(changed=true) as a real
        run would, like M(ansible.builtin.command).
  diff_mode:
    support: none
  idempotent:
    support: none
    details:
      - Every run sends packets and reports C(changed=true). It leaves no configuration behind.
notes:
  - pktgen sends UDP only, and bypasses the qdisc and the firewall of the sending host.
  - On a veth the receiving side's native-mode XDP program gets the packets through a 256-slot ring per receive
    queue. Several threads feeding one queue can overflow it; the veth then refuses the packet and pktgen counts
    an error instead of a packet sent (seen on 6.1). Give the veth one queue per thread
    (C(ip link add ... numtxqueues N numrxqueues N type veth ...)) and set the flag C(QUEUE_MAP_CPU).
  - Measured on Debian 12's 6.1 under qemu without KVM; see the collection's README for result lines.
seealso:
  - module: ebpf.xdp.xdp_trafficgen
  - module: ebpf.xdp.xdp_facts
  - name: HOWTO for the Linux packet generator
    description: The kernel's pktgen documentation.
    link: https://docs.kernel.org/networking/pktgen.html
"""

EXAMPLES = r"""
- name: One million UDP packets from each of CPUs 0-3, one flow, as pktgen_sample03_burst_single_flow.sh
  ebpf.xdp.pktgen:
    interface: eth1
    dst_ip: 198.18.0.42
    dst_mac: "90:e2:ba:ff:ff:ff"
    cpus: [0, 1, 2, 3]
    count: 1000000
    burst: 32
    flags: [QUEUE_MAP_CPU, NO_TIMESTAMP]
  register: run

- name: Show each thread's rate
  ansible.builtin.debug:
    msg: "{{ run.threads | map(attribute='pps') | list }} pps; {{ run.pps }} pps, {{ run.mbps }} Mb/s in all"

- name: Ten seconds of IPv6 traffic to random destinations of a /64 and random destination ports
  ebpf.xdp.pktgen:
    interface: eth1
    dst_ip: fd00:1::/64
    dst_mac: "02:00:00:00:02:01"
    dst_port: 1000
    dst_port_max: 1999
    flags: [UDPDST_RND]
    duration: 10

- name: Load a tc ingress program on this host by injecting into eth0's receive path, from a lab namespace
  ebpf.xdp.pktgen:
    interface: eth0
    netns: receiver
    xmit_mode: netif_receive
    dst_ip: 10.11.0.2
    dst_mac: "02:00:00:00:02:01"
    count: 100000
"""

RETURN = r"""
total:
  description: Packets sent by all threads (in check mode V(0)).
  returned: always
  type: int
  sample: 59622913
seconds:
  description: The longest thread's run time, from its Result line.
  returned: always
  type: float
  sample: 11.791017
pps:
  description: Packets per second of all threads together (the sum of theirs, as they run in parallel).
  returned: always
  type: int
  sample: 5056638
mbps:
  description: Mb/s of all threads together, from pktgen's figures (frame size without FCS).
  returned: always
  type: int
  sample: 2427
errors:
  description:
    - Errors of all threads. In C(start_xmit) mode, transmits the driver refused (pktgen retried them); in
      C(netif_receive) mode, packets the receive path dropped.
  returned: always
  type: int
  sample: 0
threads:
  description: One entry per thread, in the order of O(cpus).
  returned: always
  type: list
  elements: dict
  contains:
    cpu:
      description: The CPU, whose thread C(kpktgend_N) sent.
      type: int
    device:
      description: pktgen's device, C(INTERFACE@CPU).
      type: str
    sent:
      description: Packets the thread sent.
      type: int
    seconds:
      description: The thread's run time.
      type: float
    pps:
      description: The thread's packets per second, as pktgen computed them.
      type: int
    mbps:
      description: The thread's Mb/s, as pktgen computed them.
      type: int
    errors:
      description: The thread's errors.
      type: int
    result:
      description: pktgen's Result section for the device, as the kernel wrote it (empty in check mode).
      type: str
  sample:
    - cpu: 0
      device: eth1@0
      sent: 59622913
      seconds: 11.791017
      pps: 5056638
      mbps: 2427
      errors: 0
      result: "Result: OK: 11791017(c11788327+d2689) usec, 59622913 (60byte,0frags)\n
        5056638pps 2427Mb/sec (2427186240bps) errors: 0"
stopped:
  description: Whether the run was ended by O(duration) (or the timeout) rather than by O(count).
  returned: always
  type: bool
  sample: false
commands:
  description: The commands written to each thread's device file, in order.
  returned: always
  type: list
  elements: str
  sample: ["xmit_mode start_xmit", "count 1000", "clone_skb 0", "pkt_size 60", "burst 1", "delay 0"]
module_loaded:
  description: Whether the task loaded the C(pktgen) kernel module (in check mode, whether it would).
  returned: always
  type: bool
  sample: false
interface:
  description: The interface.
  returned: always
  type: str
  sample: eth1
xmit_mode:
  description: How the packets were sent.
  returned: always
  type: str
  sample: start_xmit
"""

from ansible_collections.ebpf.xdp.plugins.module_utils import _common
from ansible_collections.ebpf.xdp.plugins.module_utils.traffic import pktgen as _pktgen

ARGUMENT_SPEC = dict(
    cpus=dict(type="list", elements="int", default=[0]),
    count=dict(type="int"),
    duration=dict(type="float"),
    timeout=dict(type="float", default=_pktgen.DEFAULT_TIMEOUT),
    size=dict(type="int"),
    dst_ip=dict(type="str", required=True),
    src_ip=dict(type="str"),
    dst_mac=dict(type="str", required=True),
    src_mac=dict(type="str"),
    src_port=dict(type="int", default=9),
    src_port_max=dict(type="int"),
    dst_port=dict(type="int", default=9),
    dst_port_max=dict(type="int"),
    burst=dict(type="int", default=1),
    clone_skb=dict(type="int", default=0),
    delay=dict(type="int", default=0),
    rate=dict(type="int"),
    ratep=dict(type="int"),
    flags=dict(type="list", elements="str", default=[]),
    xmit_mode=dict(type="str", choices=list(_pktgen.XMIT_MODES), default="start_xmit"),
    force=dict(type="bool", default=False),
    **_common.INTERFACE_ARGS)


def send(params, check_mode, module):
    # A run that changed pktgen and then failed is a change, with what it sent (_pktgen.RunFailed.details).
    result = _pktgen.generate(_pktgen.Settings.from_params(params), _common.command_runner(module),
                              check_mode=check_mode)
    return dict(changed=True, **result), []


def main():
    _common.run_module(
        ARGUMENT_SPEC, rules=dict(required_one_of=[("count", "duration")]), work=send,
        # The settings first: a mistake fails before the privilege checks.
        prepare=lambda module: _pktgen.Settings.from_params(module.params),
        libraries=dict(libbpf=False, pyroute2=False),
        privileges=lambda params: ("CAP_NET_ADMIN",) + (("CAP_SYS_ADMIN",) if params["netns"] else ()))


if __name__ == "__main__":
    main()
