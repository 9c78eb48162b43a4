# -*- coding: utf-8 -*-
# Copyright (c) ebpf.xdp contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""ebpf.xdp.datapath's objects section: bpf_object's entries, compiled first; files, not host state (never
gathered, never removed, nothing to put back).

Private to the ebpf.xdp collection: the interface may change without notice.
"""

from __future__ import annotations

from ansible_collections.ebpf.xdp.plugins.module_utils.bpf import compile as _compile
from ansible_collections.ebpf.xdp.plugins.module_utils.sections.resource import Section


class Objects(Section):
    """An object file, by where it is written (dest, else src), compiled by the run's clang."""

    name = "objects"
    module = "bpf_object"
    spec = _compile.OBJECT_ARGS
    removable = False

    def converge(self, params: dict, check_mode: bool, run, before_change=None) -> tuple[dict, list[str]]:
        # Check mode after sources that would be written: the ones on the host say nothing of the object.
        return _compile.converge_object(params, check_mode, run.run_command, run.find_clang,
                                        getattr(run, "sources_pending", False))

    def key(self, params: dict) -> tuple:
        return (params["dest"] or params["src"],)

    def netns(self, key: tuple) -> None:
        return None  # a file of the host, in no namespace

    def describe(self, key: tuple) -> str:
        return "object %s" % key[0]
