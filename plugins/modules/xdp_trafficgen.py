#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) ebpf.xdp contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: xdp_trafficgen
short_description: Send a counted burst of test frames out of an interface
version_added: 0.1.0
description:
  - Builds Ethernet/IPv4 frames (UDP datagrams, TCP SYNs or ICMP echo requests) and sends each one
    O(count) times out of O(interface) through a raw packet socket, so a receiver's counters can be
    compared with an exact number of frames.
  - Sending changes no configuration of the host, so the module always reports C(changed=false);
    in check mode it builds the frames and sends nothing.
  - Only send to addresses of networks you own, such as the collection's lab namespaces.
author:
  - ebpf.xdp developers (@ebpf-xdp)
requirements:
  - pyroute2 on the managed host; root (C(CAP_NET_RAW))
extends_documentation_fragment:
  - ebpf.xdp.attributes
  - ebpf.xdp.interface
options:
  count:
    description: Frames to send per protocol.
    type: int
    default: 100
  protocols:
    description:
      - Kinds of frames to send, interleaved (one frame of each kind per round, O(count) rounds).
      - A kind listed twice is sent once per round.
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
    description: Source IPv4 address.
    type: str
    required: true
  dst_ip:
    description: Destination IPv4 address.
    type: str
    required: true
  src_port:
    description: UDP/TCP source port.
    type: int
    default: 9
  dst_port:
    description: UDP/TCP destination port.
    type: int
    default: 9
  size:
    description: Frame size in bytes without FCS (at least 60).
    type: int
    default: 60
  vlan:
    description: 802.1Q VLAN id to tag the frames with.
    type: int
  rate:
    description:
      - Frames per second; V(0) sends as fast as possible.
      - A veth peer with an XDP program drops frames when its 256-slot ring overflows; pace bursts
        of more than a few hundred frames when every frame must arrive.
    type: int
    default: 0
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
  idempotent:
    support: full
    details:
      - It sends frames on every run but changes no state, so it never reports a change.
seealso:
  - module: ebpf.xdp.xdp_facts
"""

EXAMPLES = r"""
- name: 50 UDP datagrams and 50 TCP SYNs from the lab sender to the receiver
  ebpf.xdp.xdp_trafficgen:
    interface: eth0
    src_ip: 10.11.0.1
    dst_ip: 10.11.0.2
    dst_mac: "02:00:00:00:02:01"
    protocols: [udp, tcp]
    count: 50
    rate: 20000
"""

RETURN = r"""
sent:
  description:
    - Frames the kernel took whole, per protocol, counted frame by frame as they were sent; it is less
      than O(count) for a protocol whose sends fell short. V(0) for every protocol in check mode.
  returned: always
  type: dict
  sample: {udp: 50, tcp: 50}
total:
  description: Frames the kernel took in all, the sum of RV(sent).
  returned: always
  type: int
  sample: 100
seconds:
  description: Time spent sending.
  returned: always
  type: float
pps:
  description: Frames per second achieved.
  returned: always
  type: float
tx_dropped:
  description: Increase of the interface's tx_dropped counter during the burst.
  returned: always
  type: int
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.ebpf.xdp.plugins.module_utils import _common, _frames, _netlink, _netns


def main():
    argument_spec = dict(
        count=dict(type="int", default=100),
        protocols=dict(type="list", elements="str", choices=["udp", "tcp", "icmp"], default=["udp"]),
        dst_mac=dict(type="str", default="ff:ff:ff:ff:ff:ff"),
        src_mac=dict(type="str"),
        src_ip=dict(type="str", required=True),
        dst_ip=dict(type="str", required=True),
        src_port=dict(type="int", default=9),
        dst_port=dict(type="int", default=9),
        size=dict(type="int", default=60),
        vlan=dict(type="int"),
        rate=dict(type="int", default=0),
    )
    argument_spec.update(_common.INTERFACE_ARGS)
    module = AnsibleModule(argument_spec=argument_spec, supports_check_mode=True)
    _common.require_libraries(module, libbpf=False)
    _common.require_privileges(module, ("CAP_NET_RAW", "CAP_SYS_ADMIN") if module.params["netns"] else ("CAP_NET_RAW",))
    p = module.params
    if p["count"] < 0 or p["rate"] < 0:
        module.fail_json(msg="count and rate must not be negative")
    for port in ("src_port", "dst_port"):
        if not 0 <= p[port] <= 65535:
            module.fail_json(msg="%s must be between 0 and 65535, not %d" % (port, p[port]))
    if p["vlan"] is not None and not 0 <= p["vlan"] <= 4095:
        module.fail_json(msg="vlan must be between 0 and 4095, not %d" % p["vlan"])
    if not _frames.MIN_FRAME <= p["size"] <= 9000:
        module.fail_json(msg="size must be between %d and 9000 bytes, not %d" % (_frames.MIN_FRAME, p["size"]))
    try:
        with _netns.netns(p["netns"]):
            iface = _netlink.interface(p["interface"])
            src_mac = p["src_mac"] or iface["mac"]
            # One frame per protocol: a protocol listed twice is still sent once per round.
            frames = {proto: _frames.build_frame(proto, src_mac, p["dst_mac"], p["src_ip"], p["dst_ip"],
                                                 p["src_port"], p["dst_port"], p["size"], p["vlan"])
                      for proto in p["protocols"]}
            sent, seconds = dict.fromkeys(frames, 0), 0.0
            if not module.check_mode:
                sent, seconds = _frames.send(p["interface"], frames, p["count"], p["rate"])
            after = _netlink.interface(p["interface"])
    except ValueError as exc:
        module.fail_json(msg="cannot build frames: %s" % exc)
    except _common.KNOWN_ERRORS as exc:
        _common.fail_from(module, exc)
    total = sum(sent.values())
    module.exit_json(
        changed=False,
        sent=sent,
        total=total,
        seconds=round(seconds, 6),
        pps=round(total / seconds, 1) if seconds else 0.0,
        tx_dropped=after["stats"]["tx_dropped"] - iface["stats"]["tx_dropped"],
    )


if __name__ == "__main__":
    main()
