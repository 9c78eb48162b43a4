# -*- coding: utf-8 -*-
# Copyright (c) ebpf.xdp contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations


def proto_counts(interfaces, names=None, rates=False):
    """{interface: {IP protocol number: frames (or frames per second)}} of each XDP program's proto_count map.

    interfaces is ansible_facts.xdp.interfaces; an interface without an XDP
    program, or one that is not in the facts, counts nothing.
    """
    out = {}
    for name in interfaces if names is None else names:
        prog = (interfaces.get(name) or {}).get("xdp") or {}
        values = (prog.get("rates" if rates else "counters") or {}).get("proto_count") or {}
        out[name] = {str(proto): value for proto, value in values.items()}
    return out


class FilterModule:
    def filters(self):
        return {"proto_counts": proto_counts}
