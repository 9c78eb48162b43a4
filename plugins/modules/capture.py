#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) ebpf.xdp contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: capture
short_description: Capture a bounded sample of an interface's frames into a pcap file
version_added: 0.1.0
description:
  - Reads the frames at O(interface) with a packet socket (C(AF_PACKET), C(SOCK_RAW), all protocols) bound to it,
    keeps those that match O(direction), O(protocols) and O(ports), and writes them to O(path) as a classic pcap
    file (Ethernet, microsecond timestamps), as tcpdump writes them.
  - The capture is always bounded. It stops after O(count) matching frames or after O(seconds), whichever comes
    first; when no frame comes at all it stops after O(seconds) with an empty capture.
  - The interface and its programs are left exactly as they were. Nothing is attached (no XDP or tc program),
    the interface is not put in promiscuous mode, and no filter is installed in the kernel (the filters run in the
    module). On a physical NIC this means only frames the NIC accepts are seen (its own address, broadcast, the
    multicast groups it listens to); a veth hands every frame its peer sends to its own end.
  - VLAN tags, which the kernel moves out of a received frame before a packet socket sees it, are put back into
    the captured bytes, as tcpdump does, so the file holds the frames as they were on the wire.
  - The file is written to a temporary file beside O(path) and renamed over it at the end, so a reader never
    finds half a capture, and a failed run leaves no file (and an existing file as it was). The file is C(0600)
    (frames are other people's traffic), new or replaced. The directory of O(path) must exist.
  - Root never writes through a link, nor where another user could swap what it writes. The directory of
    O(path) must belong to the user the module runs as and be writable by no one else (not C(/tmp) itself; a
    directory of yours in it is fine), and O(path) must not be a symbolic link; the module refuses otherwise,
    before capturing anything.
  - "A capture is an action, as a command is: every run writes a new file and reports C(changed=true). In check
    mode the module checks the options, the directory, the namespace and the interface, captures nothing, writes
    nothing and reports C(changed=true) (it would write the file)."
author:
  - ebpf.xdp developers (@ebpf-xdp)
requirements:
  - root on the managed host (C(CAP_NET_RAW); C(CAP_SYS_ADMIN) with O(netns))
extends_documentation_fragment:
  - ebpf.xdp.attributes
  - ebpf.xdp.interface
options:
  path:
    description:
      - The pcap file to write, on the managed host. It is replaced when it exists.
      - Its directory must exist; the module does not create directories.
      - An absolute path without C(..) components.
    type: path
    required: true
  count:
    description:
      - Stop after this many matching frames. Must be positive.
    type: int
    default: 1000
  seconds:
    description:
      - Stop after this many seconds, also when fewer than O(count) frames (or none) came. Must be positive.
    type: float
    default: 10
  direction:
    description:
      - Which frames. V(in) the frames arriving at O(interface), V(out) the frames it sends, V(both) both.
      - See the notes for where on the interface's path the frames are seen.
    type: str
    choices: [in, out, both]
    default: in
  protocols:
    description:
      - Kinds of frames to keep, over IPv4 and IPv6, past one 802.1Q or 802.1ad VLAN tag.
      - V(icmp) is ICMP over IPv4, V(icmpv6) ICMPv6. V(other) is every frame that is none of the others (IP with
        another protocol, frames with two VLAN tags, LLDP, ...).
    type: list
    elements: str
    choices: [udp, tcp, icmp, icmpv6, arp, other]
    default: [udp, tcp, icmp, icmpv6, arp, other]
  ports:
    description:
      - Keep only UDP and TCP frames whose source or destination port is one of these.
      - Frames without ports (other protocols, IP fragments after the first) do not match, so O(protocols) must
        list V(udp) or V(tcp).
    type: list
    elements: int
  snaplen:
    description:
      - Bytes kept of each frame, 1 to 65535. Longer frames are cut (their original length stays in the file, and
        RV(truncated) counts them).
      - The filters see at least the first 256 bytes of a frame whatever the snaplen.
    type: int
    default: 2048
  fetch_to:
    description:
      - A path on the controller to copy the pcap to once it is written (a directory, or a path ending in C(/),
        gets the file's name); relative to the playbook's directory. With several hosts, name the file per host
        (C({{ inventory_hostname }})). Not in check mode, which writes nothing.
    type: path
attributes:
  check_mode:
    support: full
    details:
      - Check mode checks the options, the directory, the namespace and the interface, captures and writes nothing,
        and reports a change (it would write the file).
  diff_mode:
    support: none
  idempotent:
    support: none
    details:
      - Every run captures anew and writes the file, and reports C(changed=true); it is an action, not a state.
notes:
  - "Where the frames are seen: a packet socket gets a received frame after XDP (native XDP in the driver, generic
    XDP at the top of the receive path) and before tc ingress, and a sent frame after tc egress. Frames an XDP
    program on O(interface) drops (C(XDP_DROP)), redirects or sends back (C(XDP_TX)) are therefore not captured
    with O(direction=in), and frames that XDP redirects into O(interface) are not captured with O(direction=out);
    frames a tc program drops on ingress are captured."
  - To capture what arrives at a veth before its XDP program, capture on its peer with O(direction=out) (the peer
    in the other namespace, for the lab's hosts); on a physical NIC, capture on the sending host or switch port.
  - The module reads and filters the frames in Python. Meanwhile the kernel queues them to its socket, up to
    16 MiB of them (less without C(CAP_NET_ADMIN), as C(net.core.rmem_max) allows); frames beyond that are not
    captured, and RV(dropped) counts them. A capture of a stream faster than the module reads is a sample with
    gaps, which RV(dropped) reveals.
seealso:
  - module: ebpf.xdp.xdp_trafficgen
  - name: pcap file format (draft-ietf-opsawg-pcap)
    description: The classic pcap format the module writes.
    link: https://datatracker.ietf.org/doc/draft-ietf-opsawg-pcap/
"""

EXAMPLES = r"""
- name: Sample what reaches the receiver's stack (after its XDP program)
  ebpf.xdp.capture:
    interface: eth0
    netns: receiver
    path: /var/lib/ebpf_xdp/captures/receiver-eth0.pcap  # a directory root alone can write
    count: 500
    seconds: 5

- name: Sample what the sender puts on the veth, before the receiver's XDP program sees it
  ebpf.xdp.capture:
    interface: eth0
    netns: sender
    direction: out
    path: /var/lib/ebpf_xdp/captures/sender-eth0.pcap

- name: DNS over UDP and TCP only, whole frames
  ebpf.xdp.capture:
    interface: eth0
    path: /var/lib/ebpf_xdp/captures/dns.pcap
    protocols: [udp, tcp]
    ports: [53]
    snaplen: 65535
    fetch_to: "captures/{{ inventory_hostname }}-dns.pcap"  # a copy on the controller
"""

RETURN = r"""
fetched:
  description: Where on the controller the pcap was copied to, with O(fetch_to).
  returned: when O(fetch_to) is set and the file was written
  type: str
  sample: /home/me/captures/receiver.pcap
path:
  description: The pcap file written (in check mode, the one that would be).
  returned: always
  type: str
  sample: /var/lib/ebpf_xdp/captures/receiver-eth0.pcap
frames:
  description: Frames captured (written to the file); V(0) in check mode.
  returned: always
  type: int
  sample: 35
bytes:
  description: Bytes of the captured frames as they were on the interface (their original lengths, before
    O(snaplen) cut any).
  returned: always
  type: int
  sample: 2100
protocols:
  description: Captured frames per protocol, every protocol present (V(0) when none).
  returned: always
  type: dict
  sample: {udp: 20, tcp: 10, icmp: 5, icmpv6: 0, arp: 0, other: 0}
seconds:
  description: Time spent capturing; V(0) in check mode.
  returned: always
  type: float
  sample: 0.412
truncated:
  description: Captured frames longer than O(snaplen), kept cut.
  returned: always
  type: int
  sample: 0
dropped:
  description:
    - Frames the kernel could not queue to the module's socket while it captured (its buffer full), whether or not
      they would have matched the filters. Non-zero means the sample missed frames.
  returned: always
  type: int
  sample: 0
"""

from ansible_collections.ebpf.xdp.plugins.module_utils import _common
from ansible_collections.ebpf.xdp.plugins.module_utils.host import names as _names
from ansible_collections.ebpf.xdp.plugins.module_utils.traffic import capture as _capture, pcap as _pcap

ARGUMENT_SPEC = dict(
    path=dict(type="path", required=True),
    count=dict(type="int", default=_capture.DEFAULT_COUNT),
    seconds=dict(type="float", default=_capture.DEFAULT_SECONDS),
    direction=dict(type="str", choices=list(_capture.DIRECTIONS), default="in"),
    protocols=dict(type="list", elements="str", choices=list(_pcap.PROTOCOLS), default=list(_pcap.PROTOCOLS)),
    ports=dict(type="list", elements="int"),
    snaplen=dict(type="int", default=_capture.DEFAULT_SNAPLEN),
    fetch_to=dict(type="path"),  # the controller's (plugins/action/capture.py); the module leaves it alone
    **_common.INTERFACE_ARGS)


def capture(params, check_mode, _module):
    result = _capture.capture(_capture.Settings.from_params(params), check_mode=check_mode)
    # Every run writes a new file (and check mode would): an action, so always a change.
    return dict(changed=True, **result), []


def main():
    _common.run_module(ARGUMENT_SPEC, libraries=dict(libbpf=False, pyroute2=False), work=capture,
                       names=dict(_common.NAMES, path=_names.check_absolute),
                       privileges=lambda params: ("CAP_NET_RAW",) + (("CAP_SYS_ADMIN",) if params["netns"] else ()))


if __name__ == "__main__":
    main()
