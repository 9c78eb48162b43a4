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
is never without a program. Offloaded (hardware) programs are refused, and so
is generic mode for a map set whose groups have egress programs where the
kernel's generic broadcast gives all copies one buffer (host/kernel).
"""

from __future__ import annotations

import errno

from ansible_collections.ebpf.xdp.plugins.module_utils.host import kernel as _kernel
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
    netns_key = ""  # from_params sets it: where a map set the program joins is pinned

    def __init__(self, ifname: str, ifindex: int, pins: _pins.PinDir, mode: str):
        self.ifname = ifname
        self.ifindex = ifindex
        self.pins = pins
        self.mode = mode
        self.joins_set: str | None = None  # the map set a program attached here shares (shared_maps)

    @classmethod
    def from_params(cls, params: dict, ifindex: int, netns_key: str) -> XdpHook:
        """The hook's unnamed attachment (one program on the interface), or a named one (NamedXdpHook)."""
        ifname = params["interface"]
        if params.get("name") is not None:
            hook = NamedXdpHook.for_attachment(params, ifindex, netns_key)
        else:
            hook = cls(ifname, ifindex, _pins.PinDir.for_hook(params["pin_root"], netns_key, ifname, cls.name),
                       params["mode"])
        if params.get("state", "present") == "present":
            hook.joins_set = params.get("shared_maps")
        hook.netns_key = netns_key
        return hook

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
        self.refuse_generic_egress()

    def refuse_generic_egress(self) -> None:
        """Generic mode on a port of a map set whose groups have egress programs, where the kernel's generic
        broadcast makes every copy share one buffer (each copy would leave with the last port's changes)."""
        if self.mode != "generic" or not self.joins_set or not _kernel.generic_broadcast_shares_buffer():
            return
        groups = _pins.groups_with_egress(_pins.shared_maps_dir(self.pins.pin_root, self.netns_key, self.joins_set))
        if groups:
            raise HookError(_kernel.generic_egress_refusal(
                "%s: generic mode for a port of map set %s, whose group(s) %s have an egress program"
                % (self.ifname, self.joins_set, ", ".join(groups)), [self.ifname]))

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
