# -*- coding: utf-8 -*-
# Copyright (c) ebpf.xdp contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The XDP adapter of the converger: one interface's XDP hook.

Private to the ebpf.xdp collection: the interface may change without notice.

A new program goes on through a bpf_link (pinned, so it outlives the module),
natively or generically, falling back from native to generic with
mode: auto. A program someone attached over netlink is replaced with
XDP_FLAGS_REPLACE and the old program as the expected one, so the interface
is never without a program. Offloaded (hardware) programs are refused.
"""

from __future__ import annotations

import errno

from ansible_collections.ebpf.xdp.plugins.module_utils.bpf import libbpf as _bpf, pins as _pins
from ansible_collections.ebpf.xdp.plugins.module_utils.hooks import observed as _observed
from ansible_collections.ebpf.xdp.plugins.module_utils.hooks.converge import HookAdapter
from ansible_collections.ebpf.xdp.plugins.module_utils.hooks.xdp_dispatcher import XdpDispatcherHook
from ansible_collections.ebpf.xdp.plugins.module_utils.hooks.observed import (
    Attachment, HELD_BY_LINK, HELD_BY_NETLINK, HookError, Observed)

MODE_FLAGS = {"native": _bpf.XDP_FLAGS_DRV_MODE, "generic": _bpf.XDP_FLAGS_SKB_MODE}


class XdpHook(HookAdapter):
    """The XDP hook of one interface, in the mode the task asks for (native, generic or auto)."""

    kind = "xdp"
    hook_dirs = (_pins.hook_dir(kind),)
    name = hook_dirs[0]
    label = "XDP"
    prog_type = "xdp"
    module = "xdp_program"
    needs_pyroute2 = False
    rollback_options = {"requested_mode": "mode"}

    def __init__(self, ifname: str, ifindex: int, pins: _pins.PinDir, mode: str):
        self.ifname = ifname
        self.ifindex = ifindex
        self.pins = pins
        self.mode = mode

    @classmethod
    def from_params(cls, params: dict, ifindex: int, netns_key: str) -> XdpHook:
        """The hook's unnamed attachment (one program on the interface), or a named one (NamedXdpHook)."""
        ifname = params["interface"]
        if params.get("name") is not None:
            return NamedXdpHook.for_attachment(params, ifindex, netns_key)
        return cls(ifname, ifindex, _pins.PinDir.for_hook(params["pin_root"], netns_key, ifname, cls.name),
                   params["mode"])

    @classmethod
    def check_params(cls, params: dict) -> None:
        XdpDispatcherHook.check_dispatcher_params(params)

    @classmethod
    def entry_of(cls, record: dict, netns: str | None, ifname: str, directory: str) -> dict:
        entry = super().entry_of(record, netns, ifname, directory)
        entry["mode"] = record.get("requested_mode") or "auto"
        attachment = _pins.split_hook_dir(directory)[1]
        if attachment:
            entry.update(name=attachment, priority=record.get("requested_priority"),
                         chain_call_actions=record.get("requested_chain_call_actions"))
        return entry

    # ------------------------------------------------------------ reading and comparing

    def observe(self) -> Observed:
        return _observed.observe_xdp(self.ifindex, _observed.xdp_state(self.ifindex), self.pins)

    def refuse(self, observed: Observed) -> None:
        if observed.placement == "offload":
            raise HookError("%s has an offloaded (hardware) XDP program, which ebpf.xdp does not manage"
                            % self.ifname)

    def identity(self) -> dict:
        return {"requested_mode": self.mode}

    def in_place(self, observed: Observed) -> bool:
        """A new program can take the old one's place without a mode switch."""
        return self.mode in ("auto", observed.placement)

    def planned_placement(self, observed: Observed) -> str:
        return self.mode if self.mode != "auto" else (observed.placement or "native")

    # ------------------------------------------------------------ acting

    def attach(self, prog: _bpf.Program) -> Attachment:
        """Attach to the empty hook through a new pinned link, native first under mode: auto."""
        modes = ["native", "generic"] if self.mode == "auto" else [self.mode]
        for mode in modes:
            try:
                link = _bpf.Link.create(prog, self.ifindex, _bpf.BPF_XDP, MODE_FLAGS[mode])
            except _bpf.BpfError as exc:
                if exc.errno in (errno.EOPNOTSUPP, errno.EINVAL) and mode == "native":
                    if self.mode == "auto":
                        continue
                    raise HookError("the driver of %s has no native XDP support (%s); use mode: generic or auto"
                                    % (self.ifname, exc))
                raise
            return Attachment(HELD_BY_LINK, mode, self.pin_link(link))
        raise HookError("could not attach to %s in any mode" % self.ifname)

    def replace(self, observed: Observed, prog: _bpf.Program) -> Attachment:
        """Swap a netlink-held program; the kernel refuses if it is no longer the one observed."""
        with _bpf.Program.from_id(observed.prog_id) as old:
            _bpf.xdp_attach_netlink(self.ifindex, prog, MODE_FLAGS[observed.placement], old_prog=old)
        return Attachment(HELD_BY_NETLINK, observed.placement, None)

    def detach(self, observed: Observed) -> None:
        """Take the observed program off the hook, however it is held and whoever holds it."""
        if observed.holder == HELD_BY_LINK:
            self.detach_link(observed)
        else:
            with _bpf.Program.from_id(observed.prog_id) as old:
                _bpf.xdp_detach_netlink(self.ifindex, MODE_FLAGS[observed.placement], old_prog=old)

    def restore(self, observed: Observed, old: _bpf.Program) -> None:
        """Put back a program detached by a failed switch, held as it was (a foreign link: by netlink)."""
        if observed.holder == HELD_BY_LINK and observed.owned:
            self.pin_link(_bpf.Link.create(old, self.ifindex, _bpf.BPF_XDP, MODE_FLAGS[observed.placement]))
        else:
            _bpf.xdp_attach_netlink(self.ifindex, old, MODE_FLAGS[observed.placement])


class NamedXdpHook(XdpDispatcherHook, XdpHook):
    """A named XDP attachment: one of the programs libxdp's dispatcher runs on the interface (hooks.xdp_dispatcher
    says how); its pins are the attachment's own (xdp@<name>)."""

    report_keys = ("mode", "priority", "chain_call_actions", "attachment")
    rollback_options = {"requested_mode": "mode", "requested_priority": "priority"}

    @classmethod
    def for_attachment(cls, params: dict, ifindex: int, netns_key: str) -> NamedXdpHook:
        ifname = params["interface"]
        hook = _pins.hook_dir(cls.kind, None, params["name"])
        hook_obj = cls(ifname, ifindex, _pins.PinDir.for_hook(params["pin_root"], netns_key, ifname, hook),
                       params["mode"])
        hook_obj.name = hook
        hook_obj.setup_dispatcher(params)
        return hook_obj
