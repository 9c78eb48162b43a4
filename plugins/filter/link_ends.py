# -*- coding: utf-8 -*-
# Copyright (c) ebpf.xdp contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations


def link_ends(links, netns=None):
    """Both ends of every veth link, each with the other end as `peer`; only netns's ends when given."""
    ends = []
    for link in links:
        for end, peer in ((link["a"], link["b"]), (link["b"], link["a"])):
            if netns is None or end["netns"] == netns:
                ends.append(dict(end, peer=peer))
    return ends


class FilterModule:
    def filters(self):
        return {"link_ends": link_ends}
