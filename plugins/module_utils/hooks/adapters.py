# -*- coding: utf-8 -*-
# Copyright (c) ebpf.xdp contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Every hook adapter, registered with the converger here: the one place a new hook is added.

Private to the ebpf.xdp collection: the interface may change without notice.

What needs every kind of hook (ebpf.xdp.datapath's hook sections, the contract's tests) imports this module;
a new hook's adapter is one entry of HOOKS.
"""

from __future__ import annotations

from ansible_collections.ebpf.xdp.plugins.module_utils.hooks import converge as _converge, tc as _tc, xdp as _xdp

# The adapters, each its kind's, in the order datapath converges their sections (removals in reverse): a new
# hook's adapter is one more here (its attachment directories go to _pins.HOOK_DIRS).
HOOKS = tuple(_converge.register(adapter) for adapter in (_xdp.XdpHook, _tc.TcHook))
# Adapters that a kind's from_params returns for some tasks (a named XDP attachment): the contract holds for them.
VARIANTS = tuple(_converge.register_variant(adapter) for adapter in (_xdp.NamedXdpHook,))
# Every adapter class the converger may drive.
EVERY_ADAPTER = _converge.EVERY_ADAPTER
