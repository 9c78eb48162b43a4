# -*- coding: utf-8 -*-
# Copyright (c) ebpf.xdp contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""A program module's whole main (xdp_program, tc_program: one per hook), over its hook's adapter.

Private to the ebpf.xdp collection: the interface may change without notice.
"""

from __future__ import annotations

from ansible_collections.ebpf.xdp.plugins.module_utils import _common
from ansible_collections.ebpf.xdp.plugins.module_utils.bpf import bcc as _bcc
from ansible_collections.ebpf.xdp.plugins.module_utils.hooks import replay as _replay, revisions as _revisions


def argument_spec(adapter) -> dict:
    """The module's options: its hook's program module's (_common.program_args) and a task's replay."""
    return dict(_common.program_args(adapter.module), **_replay.TASK_ARGS)


def run(adapter) -> None:
    """The program module of the hook adapter (a _converge.HookAdapter) adapts: _common.run_module with its
    options, its checks of what the spec cannot say, its backend, and the converge (after the task's replay)."""

    def prepare(module):
        adapter.check_params(module.params)
        _common.prepare_backend(module)  # for bcc it may re-run the module under the system Python

    _common.run_module(
        argument_spec(adapter), rules=_revisions.module_rules(_bcc.MODULE_RULES),
        names=_common.PROGRAM_NAMES, prepare=prepare, libraries=dict(pyroute2=adapter.needs_pyroute2),
        work=lambda params, check_mode, _module: _replay.converge_task(params, check_mode, adapter),
        failure=lambda params: dict(interface=params["interface"], changed=False))
