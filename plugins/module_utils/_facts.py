# -*- coding: utf-8 -*-
# Copyright (c) ebpf.xdp contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Reading attached programs, their maps and counters.

Private to the ebpf.xdp collection: the interface may change without notice.
"""

from __future__ import annotations

import time

from ansible_collections.ebpf.xdp.plugins.module_utils import _bpf, _netlink, _pins, _xdp

# Maps with this name are keyed by IP protocol number (xdp_drop_count, xdp1).
PROTOCOL_MAP = "proto_count"
IP_PROTOCOLS = {0: "other", 1: "icmp", 2: "igmp", 6: "tcp", 17: "udp", 41: "ipv6",
                47: "gre", 50: "esp", 51: "ah", 58: "ipv6-icmp", 132: "sctp"}
COUNTER_VALUE_SIZE = 8


def protocol_name(number):
    return IP_PROTOCOLS.get(number, "proto-%d" % number)


def read_counters(fd):
    """{key: total} for maps of 64-bit counters, summed over CPUs; zeros left out.

    Returns None for maps that do not hold counters (devmaps, structs, ...).
    """
    handle = _bpf.MapHandle(fd)
    info = handle.info
    if info["value_size"] != COUNTER_VALUE_SIZE or info["key_size"] not in (1, 2, 4, 8):
        return None
    if info["type"] not in ("array", "percpu_array", "hash", "percpu_hash", "lru_hash", "lru_percpu_hash"):
        return None
    totals = {}
    for key, value in handle.items():
        parts = value if handle.percpu else [value]
        total = sum(int.from_bytes(part, "little") for part in parts)
        if total:
            totals[int.from_bytes(key, "little")] = total
    return totals


def program_maps(prog_id):
    """The program's maps (without libbpf's internal .rodata/.bss) and their counters."""
    fd = _bpf.prog_fd_by_id(prog_id)
    try:
        info = _bpf.prog_info(fd)
    finally:
        _bpf.close(fd)
    maps, counters = [], {}
    for map_id in info["map_ids"]:
        mfd = _bpf.map_fd_by_id(map_id)
        try:
            minfo = _bpf.map_info(mfd)
            if "." in minfo["name"]:
                continue  # .rodata, .bss, .data: settings, not state
            minfo.pop("type_id")
            maps.append(minfo)
            values = read_counters(mfd)
            if values is not None:
                counters[minfo["name"]] = values
        finally:
            _bpf.close(mfd)
    return info, maps, counters


def _program(prog_id, mode, record):
    info, maps, counters = program_maps(prog_id)
    entry = {
        "id": prog_id, "name": info["name"], "tag": info["tag"], "mode": mode,
        "owner": "ebpf.xdp" if record else "unmanaged",
        "maps": maps,
        "counters": dict((name, dict((str(k), v) for k, v in sorted(values.items())))
                         for name, values in counters.items()),
    }
    if record:
        entry.update(object=record.get("object"), object_sha256=record.get("object_sha256"),
                     program=record.get("program_name"), constants=record.get("constants", {}),
                     attach=record.get("attach"), link_id=record.get("link_id"))
    if PROTOCOL_MAP in counters:
        entry["protocols"] = dict((protocol_name(k), v) for k, v in sorted(counters[PROTOCOL_MAP].items()))
    return entry


def snapshot(pin_root, netns, wanted):
    """Interfaces (all, or those named in wanted) with their XDP programs and counters."""
    key = _netlink.netns_key(netns)
    out = {}
    for iface in _netlink.interfaces():
        name = iface["ifname"]
        prog_id, mode = _xdp.live_program(iface)
        if wanted and name not in wanted:
            continue
        if not wanted and not prog_id:
            continue
        entry = {"ifindex": iface["ifindex"], "mac": iface["mac"], "mtu": iface["mtu"],
                 "stats": iface["stats"], "xdp": None}
        if prog_id:
            record = _xdp.ownership(_pins.Attachment(pin_root, key, name, _xdp.HOOK), prog_id)
            entry["xdp"] = _program(prog_id, mode, record)
        out[name] = entry
    missing = sorted(set(wanted or ()) - set(out))
    if missing:
        raise _netlink.NetlinkLookupError("interface %s does not exist in this network namespace"
                                          % ", ".join(missing))
    return {"netns": key, "interfaces": out}


def _rate(before, after, seconds):
    if isinstance(after, dict):
        return dict((k, _rate((before or {}).get(k, 0), v, seconds)) for k, v in after.items())
    return round((after - (before or 0)) / seconds, 1)


def with_rates(pin_root, netns, wanted, interval):
    """Two snapshots `interval` seconds apart; rates are per second."""
    first = snapshot(pin_root, netns, wanted)
    start = time.monotonic()
    time.sleep(interval)
    second = snapshot(pin_root, netns, wanted)
    seconds = time.monotonic() - start
    for name, entry in second["interfaces"].items():
        old = first["interfaces"].get(name, {})
        entry["rates"] = {"stats": _rate(old.get("stats"), entry["stats"], seconds)}
        xdp, old_xdp = entry["xdp"], old.get("xdp")
        if xdp and old_xdp and old_xdp["id"] == xdp["id"]:
            xdp["rates"] = _rate(old_xdp["counters"], xdp["counters"], seconds)
            if "protocols" in xdp:
                xdp["protocol_rates"] = _rate(old_xdp.get("protocols"), xdp["protocols"], seconds)
    second["rate_interval"] = round(seconds, 3)
    return second
