# -*- coding: utf-8 -*-
# Copyright (c) ebpf.xdp contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

from ansible.errors import AnsibleFilterError


def counter_growth(after, before):
    """How much each counter of `after` grew since `before`, dicts nested alike; counters that did not grow
    are left out, dicts are kept (empty when nothing in them grew), a counter missing from `before` was 0.
    A counter below its earlier reading was reset (its map re-created by a re-attach) and grew by all of
    its value since."""
    if not isinstance(after, dict):
        raise AnsibleFilterError("counter_growth expects a dict of counters, not %s" % type(after).__name__)
    before = before or {}
    out = {}
    for key, value in after.items():
        if isinstance(value, dict):
            out[key] = counter_growth(value, before.get(key))
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            earlier = before.get(key) or 0
            grown = value - earlier if value >= earlier else value
            if grown:
                out[key] = grown
        else:
            raise AnsibleFilterError("counter_growth: %r is %r, not a number or a dict" % (key, value))
    return out


class FilterModule:
    def filters(self):
        return {"counter_growth": counter_growth}
