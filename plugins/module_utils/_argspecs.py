# -*- coding: utf-8 -*-
# Copyright (c) ebpf.xdp contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The option sets of the modules' argument specs, without their documentation.

Written by scripts/options.py from docs/options.yml (every set):
edit it there, not here.
Private to the ebpf.xdp collection: the interface may change without notice.
"""

from __future__ import annotations


# interface: an interface in a network namespace (doc fragment ebpf.xdp.interface)
INTERFACE_ARGS = dict(
    interface=dict(type="str", required=True),
    netns=dict(type="str"),
)

# program: a program on a hook: its object, the program in it, its state (doc fragment ebpf.xdp.program)
PROGRAM_ARGS = dict(
    object=dict(type="path"),
    program=dict(type="str"),
    section=dict(type="str"),
    constants=dict(type="dict", default={}),
    state=dict(type="str", default="present", choices=["present", "absent"]),
    force=dict(type="bool", default=False),
    keep_maps=dict(type="bool", default=False),
    map_migration=dict(type="str", default="fields", choices=["fields", "reset", "refuse"]),
    map_rename=dict(type="dict", default={}),
    shared_maps=dict(type="str"),
    checksum=dict(type="str"),
    revision=dict(type="str", choices=["current", "previous"]),
    object_store=dict(type="path", default="/var/lib/ebpf_xdp/revisions"),
    backend=dict(type="str", default="libbpf", choices=["libbpf", "bcc"]),
    source=dict(type="path"),
    cflags=dict(type="list", default=[], elements="str"),
    kernel_headers=dict(type="path"),
)

# pin_root: where the collection keeps its state (doc fragment ebpf.xdp.pin_root)
PIN_ROOT_ARGS = dict(
    pin_root=dict(type="path", default="/sys/fs/bpf/ebpf_xdp"),
)

# xdp_program: xdp_program's own options (its DOCUMENTATION); datapath's xdp entries take them too
XDP_PROGRAM_OPTIONS = dict(
    mode=dict(type="str", default="auto", choices=["native", "generic", "auto"]),
    name=dict(type="str"),
    priority=dict(type="int"),
    chain_call_actions=dict(type="list", choices=["aborted", "drop", "pass", "tx", "redirect"], elements="str"),
)

# tc_program: tc_program's own options (its DOCUMENTATION); datapath's tc entries take them too
TC_PROGRAM_OPTIONS = dict(
    direction=dict(type="str", default="ingress", choices=["ingress", "egress"]),
    method=dict(type="str", default="auto", choices=["tcx", "cls_bpf", "act_bpf", "auto"]),
    priority=dict(type="int"),
    handle=dict(type="int"),
    verdict=dict(
        type="str",
        default="drop",
        choices=["drop", "pass", "ok", "pipe", "continue", "stolen", "reclassify", "shot", "unspec"]),
    name=dict(type="str"),
    before=dict(type="raw"),
    after=dict(type="raw"),
)

# devmap_group: devmap_group's own options (its DOCUMENTATION); datapath's devmap_groups entries take them too
DEVMAP_GROUP_OPTIONS = dict(
    name=dict(type="str"),
    id=dict(type="int"),
    shared_maps=dict(type="str", default="multicast"),
    netns=dict(type="str"),
    members=dict(type="list", default=[], elements="str"),
    addresses=dict(type="list", default=[], elements="str"),
    exclude_ingress=dict(type="bool"),
    exclusive=dict(type="bool", default=False),
    egress_program=dict(
        type="dict",
        options=dict(object=dict(type="path"), program=dict(type="str"), section=dict(type="str")),
        mutually_exclusive=[["program", "section"]]),
    state=dict(type="str", default="present", choices=["present", "absent"]),
)
