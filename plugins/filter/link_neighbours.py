# -*- coding: utf-8 -*-
# Copyright (c) ebpf.xdp contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

from ansible_collections.ebpf.xdp.plugins.filter.link_ends import link_ends


def _segments(links, bridges):
    """Layer-2 segment of every (netns, ifname): veth pairs and bridge ports join segments."""
    parent = {}

    def find(node):
        parent.setdefault(node, node)
        while parent[node] != node:
            parent[node] = parent[parent[node]]
            node = parent[node]
        return node

    def join(one, other):
        parent[find(one)] = find(other)

    for link in links:
        join((link["a"]["netns"], link["a"]["ifname"]), (link["b"]["netns"], link["b"]["ifname"]))
    for bridge in bridges:
        ports = [(bridge["netns"], port) for port in bridge["ports"]]
        for port in ports:
            join(port, (bridge["netns"], bridge["ifname"]))
    return find


def link_neighbours(links, bridges=None, netns=None):
    """Every addressed end once per addressed end on its layer-2 segment, that one as `peer`."""
    segment = _segments(links, bridges or [])
    addressed = [end for end in link_ends(links) if end.get("ipv4")]
    neighbours = []
    for end in addressed:
        if netns is not None and end["netns"] != netns:
            continue
        here = (end["netns"], end["ifname"])
        for other in addressed:
            there = (other["netns"], other["ifname"])
            if there != here and segment(there) == segment(here):
                neighbour = dict(other)
                del neighbour["peer"]
                neighbours.append(dict(end, peer=neighbour))
    return neighbours


class FilterModule:
    def filters(self):
        return {"link_neighbours": link_neighbours}
