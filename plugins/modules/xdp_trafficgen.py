#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) ebpf.xdp contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: xdp_trafficgen
short_description: Generate test traffic out of an interface, in the kernel (XDP live frames) or from a socket
version_added: 0.1.0
description:
  - Builds Ethernet frames over IPv4 or IPv6 (UDP datagrams, TCP SYNs, ICMP or ICMPv6 echo requests) and sends
    them out of O(interface), a counted number of them or for a while, so a receiver's counters can be compared
    with an exact number of frames, or a receiver can be loaded at millions of frames per second.
  - "Two engines. V(xdp): the program C(xdp_trafficgen) (from C(files/bpf/xdp_trafficgen.bpf.c), given as
    O(object)) is loaded, never attached, and run with C(BPF_PROG_TEST_RUN) in live-frames mode, as xdp-tools'
    xdp-trafficgen does: the kernel builds the frames and the program sends each one with C(XDP_TX), counting it
    per kind and per CPU, several million frames per second per core. V(socket): a raw packet socket sends the
    frames one by one; it works on any device, sends exact small bursts and can be paced with O(rate)."
  - Frames redirected by XDP only leave a device that takes them (for a veth, while its peer has an XDP
    program or GRO enabled; elsewhere a driver with C(ndo-xmit) in its XDP features); otherwise the kernel drops
    them without counting them anywhere. The module reads this from the kernel before sending, and the xdp
    engine refuses such a device instead of reporting frames that went nowhere.
  - "A run of the generator is an action, as a command is: every run sends frames and reports C(changed=true),
    although no configuration of the host changes. In check mode it validates the settings and the device,
    chooses the engine, sends nothing and reports C(changed=true) (it would send). A task that only verifies
    with a burst can say C(changed_when: false)."
  - Only send to addresses of networks you own, such as the collection's lab namespaces.
author:
  - ebpf.xdp developers (@ebpf-xdp)
requirements:
  - root on the managed host (C(CAP_NET_RAW); the xdp engine also C(CAP_BPF) or C(CAP_SYS_ADMIN),
    and C(CAP_NET_ADMIN))
  - for the xdp engine, Linux 5.18 or newer (live frames), libbpf >= 1.0 and O(object); Linux 6.3 or newer
    reports every device's XDP features; on older kernels the module reads a veth peer's XDP program and its
    GRO (in the peer's namespace, when that is a named one or the host's), and refuses any other device
extends_documentation_fragment:
  - ebpf.xdp.attributes
  - ebpf.xdp.interface
options:
  engine:
    description:
      - How to send. V(xdp) is the in-kernel generator and fails when O(interface) cannot take XDP frames or
        the kernel refuses live-frames test runs; V(socket) is the raw-socket sender.
      - V(auto) uses V(xdp) when O(object) is given, O(rate) is not, libbpf is there, O(interface) takes
        XDP frames and the kernel runs live frames, and V(socket) otherwise; RV(engine) and RV(engine_reason)
        say which and why.
      - Whether the kernel runs live frames is found by one live-frames run of a program that drops its frame
        (nothing is sent, check mode included). A kernel before 5.18 lacks them, and a host's policy can refuse
        them on a new one (a 6.18 kernel was seen answering EPERM).
    type: str
    choices: [auto, xdp, socket]
    default: auto
  object:
    description:
      - The compiled C(files/bpf/xdp_trafficgen.bpf.c) (for example by M(ebpf.xdp.bpf_object)) that the xdp
        engine loads. Without it, O(engine=auto) uses the socket engine.
    type: path
  count:
    description:
      - Frames to send per protocol, split over the O(cpus) threads; V(100) when neither O(count) nor
        O(duration) is given.
      - The xdp engine sends the frames the device refused (a veth peer's full ring, counted in its
        C(tx_dropped)) again from the first thread, round after round while it refuses some and takes others
        (32 rounds at most), so that RV(sent) is the count unless the device kept refusing.
      - Must be positive. Mutually exclusive with O(duration).
    type: int
  duration:
    description:
      - Send for this many seconds instead of a count; the xdp engine gives each protocol an equal share of the
        time, one after the other, and may run over by a fraction of a second.
    type: float
  cpus:
    description:
      - CPUs to send from, one thread pinned to each; every one must be a CPU this task may run on.
      - By default one thread, on the first CPU the task may use.
    type: list
    elements: int
  batch_size:
    description:
      - Frames the kernel builds and sends per batch (xdp engine), 1 to 256.
      - A veth peer's XDP ring holds 256 frames; larger batches were seen to overflow it.
    type: int
    default: 64
  protocols:
    description:
      - Kinds of frames to send. The socket engine interleaves them (one frame of each kind per round); the
        xdp engine sends them one kind after the other.
      - Over IPv6, V(icmp) is ICMPv6. A kind listed twice is sent as if listed once.
    type: list
    elements: str
    choices: [udp, tcp, icmp]
    default: [udp]
  dst_mac:
    description: Destination MAC address; the broadcast address by default.
    type: str
    default: "ff:ff:ff:ff:ff:ff"
  src_mac:
    description: Source MAC address; the interface's own by default.
    type: str
  src_ip:
    description: Source IPv4 or IPv6 address.
    type: str
    required: true
  dst_ip:
    description: Destination address, of the same IP version as O(src_ip).
    type: str
    required: true
  src_port:
    description: UDP/TCP source port, the first of a range when O(src_port_max) is set.
    type: int
    default: 9
  src_port_max:
    description:
      - Last UDP/TCP source port of a range. Successive frames of a kind take O(src_port), O(src_port)+1, ...
        up to this port, then start again (per thread). Both engines vary the ports the same way and keep
        checksums valid.
    type: int
  dst_port:
    description: UDP/TCP destination port, the first of a range when O(dst_port_max) is set.
    type: int
    default: 9
  dst_port_max:
    description: Last UDP/TCP destination port of a range, as O(src_port_max).
    type: int
  size:
    description:
      - Frame size in bytes without FCS, from the smallest frame of every protocol in O(protocols) (60 bytes;
        over IPv6 62 for UDP and ICMPv6, 74 for TCP, 4 more with a VLAN tag) to the interface's MTU plus its
        Ethernet header (and VLAN tag).
      - The xdp engine also needs the frame to fit in one page with the kernel's head- and tailroom (up to about
        3400 bytes with 4 KiB pages); the kernel refuses larger ones.
      - By default the smallest frame.
    type: int
  vlan:
    description: 802.1Q VLAN id to tag the frames with.
    type: int
  rate:
    description:
      - Frames per second in all, socket engine only; V(0) sends as fast as possible.
      - A veth peer with an XDP program drops frames when its 256-slot ring overflows; pace bursts
        of more than a few hundred frames when every frame must arrive.
    type: int
    default: 0
attributes:
  check_mode:
    support: full
    details:
      - Check mode validates the settings and chooses the engine, sends nothing and reports a change (it would
        send).
  diff_mode:
    support: none
  idempotent:
    support: none
    details:
      - Every run sends frames, an action, and reports C(changed=true); the host's configuration stays as it was.
notes:
  - A veth delivers XDP frames to its peer through a 256-slot ring per receive queue. Several threads sending
    into a peer with one receive queue can overflow it; the veth counts such drops in its C(tx_dropped), which
    the xdp engine subtracts from RV(sent) kind by kind (the kernel updates that counter without locking, so
    under such contention it can miss a few drops), and, with O(count), sends again. A peer with one receive
    queue per sending CPU (C(ip link add ... numrxqueues N type veth ...)) lost none on kernel 6.18; on Debian
    12's 6.1, where the peer's processing can wait for its CPU's softirq thread, one thread alone overflowed it
    (about 2.5% of 200,000 frames, in an emulated VM).
seealso:
  - module: ebpf.xdp.xdp_facts
  - module: ebpf.xdp.bpf_object
"""

EXAMPLES = r"""
- name: 50 UDP datagrams and 50 TCP SYNs from the lab sender to the receiver, paced
  ebpf.xdp.xdp_trafficgen:
    interface: eth0
    src_ip: 10.11.0.1
    dst_ip: 10.11.0.2
    dst_mac: "02:00:00:00:02:01"
    protocols: [udp, tcp]
    count: 50
    rate: 20000

- name: Compile the in-kernel generator once
  ebpf.xdp.bpf_object:
    src: /var/lib/ebpf_xdp/src/xdp_trafficgen.bpf.c
    dest: /var/lib/ebpf_xdp/objects/xdp_trafficgen.o

- name: Ten seconds of IPv6 UDP from two CPUs, destination ports 1000-1999
  ebpf.xdp.xdp_trafficgen:
    engine: xdp
    object: /var/lib/ebpf_xdp/objects/xdp_trafficgen.o
    interface: eth0
    src_ip: fd00::1
    dst_ip: fd00::2
    dst_mac: "02:00:00:00:02:01"
    dst_port: 1000
    dst_port_max: 1999
    duration: 10
    cpus: [0, 1]
  register: burst

- name: Show the rate
  ansible.builtin.debug:
    msg: "{{ burst.engine }}: {{ burst.total }} frames in {{ burst.seconds }} s, {{ burst.pps }} pps"
"""

RETURN = r"""
engine:
  description: The engine that sent (or, in check mode, would send) the frames.
  returned: always
  type: str
  sample: xdp
engine_reason:
  description: Why that engine, or what the kernel says of the device's XDP features.
  returned: always
  type: str
  sample: "veth eth0 takes XDP frames (xdp_features: basic, redirect, ndo-xmit, rx-sg, ndo-xmit-sg)"
sent:
  description:
    - Frames that left, per protocol; V(0) for every protocol in check mode.
    - "socket engine: frames the kernel took whole, counted as they were sent. xdp engine: frames the program
      counted as transmitted, less the increase of the interface's C(tx_dropped) while that protocol was sent."
  returned: always
  type: dict
  sample: {udp: 50, tcp: 50}
total:
  description: The sum of RV(sent).
  returned: always
  type: int
  sample: 100
seconds:
  description: Time spent sending (wall clock, the xdp engine's per-run kernel setup included).
  returned: always
  type: float
  sample: 0.72
pps:
  description: RV(total) per second of RV(seconds).
  returned: always
  type: float
  sample: 6944444.4
threads:
  description:
    - One entry per thread, in the order of O(cpus).
    - For the xdp engine, a thread's C(sent) counts what its CPU's program runs transmitted; the interface's
      drops cannot be told apart by thread, so the threads' sum is RV(total) plus the drops in RV(tx_dropped).
  returned: always
  type: list
  elements: dict
  contains:
    cpu:
      description: The CPU the thread was pinned to.
      type: int
    sent:
      description: Frames the thread sent.
      type: int
    seconds:
      description: Time the thread spent sending.
      type: float
    pps:
      description: The thread's frames per second.
      type: float
  sample: [{cpu: 0, sent: 5000000, seconds: 0.72, pps: 6944444.4}]
tx_dropped:
  description:
    - Increase of the interface's tx_dropped counter while sending.
    - With O(count), the xdp engine sent these frames again (O(count)), so they are not missing from RV(sent).
  returned: always
  type: int
  sample: 0
"""

from ansible_collections.ebpf.xdp.plugins.module_utils import _common
from ansible_collections.ebpf.xdp.plugins.module_utils.traffic import trafficgen as _trafficgen

ARGUMENT_SPEC = dict(
    engine=dict(type="str", choices=list(_trafficgen.ENGINES), default="auto"),
    object=dict(type="path"),
    count=dict(type="int"),
    duration=dict(type="float"),
    cpus=dict(type="list", elements="int"),
    batch_size=dict(type="int", default=_trafficgen.DEFAULT_BATCH),
    protocols=dict(type="list", elements="str", choices=["udp", "tcp", "icmp"], default=["udp"]),
    dst_mac=dict(type="str", default="ff:ff:ff:ff:ff:ff"),
    src_mac=dict(type="str"),
    src_ip=dict(type="str", required=True),
    dst_ip=dict(type="str", required=True),
    src_port=dict(type="int", default=9),
    src_port_max=dict(type="int"),
    dst_port=dict(type="int", default=9),
    dst_port_max=dict(type="int"),
    size=dict(type="int"),
    vlan=dict(type="int"),
    rate=dict(type="int", default=0),
    **_common.INTERFACE_ARGS)


def send(params, check_mode, _module):
    result = _trafficgen.generate(_trafficgen.Settings.from_params(params), check_mode=check_mode)
    # Sending is an action, so every run (and, as a prediction, every check-mode run) reports a change.
    return dict(changed=True, **result), []


def main():
    _common.run_module(ARGUMENT_SPEC, libraries=dict(libbpf=False, pyroute2=False), work=send,
                       privileges=lambda params: ("CAP_NET_RAW",) + (("CAP_SYS_ADMIN",) if params["netns"] else ()))


if __name__ == "__main__":
    main()
