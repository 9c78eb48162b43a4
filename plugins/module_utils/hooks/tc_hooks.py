# -*- coding: utf-8 -*-
# Copyright (c) ebpf.xdp contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Read-only: what the tc hooks of an interface hold (tcx links, clsact filters).

Private to the ebpf.xdp collection: the interface may change without notice.

Apart from hooks.observed because it needs pyroute2 (for the filters), which modules
that manage XDP only do not import.
"""

from __future__ import annotations

import errno
import os
import platform

from ansible_collections.ebpf.xdp.plugins.module_utils.host import session as _session
from ansible_collections.ebpf.xdp.plugins.module_utils.bpf import libbpf as _bpf, record as _record
from ansible_collections.ebpf.xdp.plugins.module_utils.hooks import tc_netlink as _tc_netlink
from ansible_collections.ebpf.xdp.plugins.module_utils.hooks.observed import HELD_BY_LINK, HELD_BY_NETLINK, Observed


TC_DIRECTIONS = {"ingress": _bpf.BPF_TCX_INGRESS, "egress": _bpf.BPF_TCX_EGRESS}


def tcx_supported(ifindex: int) -> bool:
    """Whether this kernel has tcx (6.6+): it answers a query of the tcx hook (asked once per session)."""
    def ask():
        try:
            _bpf.tcx_query(ifindex, _bpf.BPF_TCX_INGRESS)
        except _bpf.BpfError as exc:
            if exc.errno == errno.EINVAL:
                return False
            raise
        return True
    return _session.probe("tcx", ask)


def act_bpf_available() -> bool:
    """Whether the kernel has act_bpf or could load it, asked without changing anything (check mode; a real
    attach asks the kernel itself): loaded (/sys/module), built in (modules.builtin) or a module on disk
    (modules.dep). A kernel with act_bpf built in and no /lib/modules is the one it gets wrong."""
    if os.path.isdir("/sys/module/act_bpf"):
        return True
    modules = "/lib/modules/%s" % platform.release()
    for listing in ("modules.builtin", "modules.dep"):
        try:
            with open(os.path.join(modules, listing), encoding="utf-8") as names:
                if any(line.split(":")[0].endswith("/act_bpf.ko") or "/act_bpf.ko." in line.split(":")[0]
                       for line in names):
                    return True
        except OSError:
            continue
    return False


def tc_programs(ifindex: int, direction: str) -> list[dict]:
    """Every BPF program on one direction of an interface's tc hook, in the order they run.

    tcx programs first (the kernel runs them before the clsact qdisc), then
    the clsact filters: cls_bpf, and u32 filters whose action is act_bpf.
    Each: method, prog_id, and link_id (tcx) or priority, handle, verdict, protocol.
    """
    found = []
    if tcx_supported(ifindex):
        hook = _session.hook("tcx", ifindex, lambda: _bpf.tcx_query(ifindex, TC_DIRECTIONS[direction]), direction)
        found += [{"method": "tcx", "prog_id": prog_id, "link_id": link_id or None}
                  for prog_id, link_id in zip(hook["prog_ids"], hook["link_ids"])]
    for tc_filter in _tc_netlink.filters(ifindex, direction):
        if tc_filter["prog_id"]:
            found.append({"method": "cls_bpf" if tc_filter["kind"] == "bpf" else "act_bpf",
                          "prog_id": tc_filter["prog_id"], "priority": tc_filter["prio"],
                          "handle": tc_filter["handle"], "verdict": tc_filter["verdict"],
                          "protocol": tc_filter["protocol"]})
    return found


def observe_tc(entry: dict, direction: str, record: dict | None) -> Observed:
    """One program of tc_programs() as an Observed; record is ours when it describes this program."""
    info = _bpf.program_info(entry["prog_id"])
    extra = {"direction": direction}
    extra.update((k, entry[k]) for k in ("priority", "handle", "verdict", "protocol") if entry.get(k) is not None)
    return Observed(prog_id=entry["prog_id"], name=info["name"], tag=info["tag"], placement=entry["method"],
                    holder=HELD_BY_LINK if entry.get("link_id") else HELD_BY_NETLINK,
                    link_id=entry.get("link_id"), record=record, map_ids=info["map_ids"], extra=extra,
                    placement_key="method")


def tc_owned(entry: dict, record: dict | None) -> bool:
    """Whether our record describes this program in this place."""
    record = _record.of(record)
    if not record or record.prog_id != entry["prog_id"] or record.placement != entry["method"]:
        return False
    return entry["method"] == "tcx" or (record.get("priority"), record.get("handle")) == \
        (entry.get("priority"), entry.get("handle"))
