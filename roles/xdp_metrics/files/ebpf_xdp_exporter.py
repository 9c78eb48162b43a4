# -*- coding: utf-8 -*-
# Copyright (c) ebpf.xdp contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The ebpf.xdp Prometheus exporter, installed and run by the role ebpf.xdp.xdp_metrics.

What is attached and what its counters say is read when scraped (at most
once per cache_seconds: concurrent scrapes share one collection, see
Scrapes) by the collection's own module_utils (_facts.snapshot, the reader
behind ebpf.xdp.xdp_facts), shipped next to this file as one JSON file
(module_utils.json: path -> source) and imported from it under their
package name, ansible_collections.ebpf.xdp.plugins.module_utils, so that
their imports resolve as they do in a module. This file only turns those
facts into metric families (prometheus_client's custom collector API);
ebpf_xdp_web.py, next to it, serves them (threads, deadlines, the
connection cap, TLS and basic auth from an exporter-toolkit web
configuration). Only the collection's own programs are exported unless
unmanaged_programs is true.

Namespaces read: the exporter's own and every namespace that has a
directory under the pin root (<pin_root>/<netns>/, see _pins), or exactly
those listed in the configuration. The initial namespace is called "host".

    ebpf_xdp_exporter.py --config FILE            serve in the foreground (systemd)
    ebpf_xdp_exporter.py --config FILE --start    start in the background (pid file), after checking
    ebpf_xdp_exporter.py --config FILE --ensure [--config-json JSON]
                                                  start, or restart on newer code or another configuration
                                                  than the one asked for; then check that it serves (the
                                                  role's run, which asks for what it wrote)
    ebpf_xdp_exporter.py --config FILE --stop | --status | --check
    ebpf_xdp_exporter.py --config FILE --once     print one scrape and exit

--start, --stop and --ensure with --dry-run say what they would do (the role's check
mode). An exporter started inside a named network namespace exits when that
namespace is deleted (the lab's hosts are such namespaces).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import errno
import hashlib
import importlib.abc
import importlib.util
import inspect
import json
import logging
import os
import signal
import socket
import sys
import threading
import time
import urllib.error
import urllib.request
from typing import NoReturn

LOG = logging.getLogger("ebpf_xdp_exporter")

DEFAULTS = {
    "service": "ebpf-xdp-metrics",
    "pin_root": "/sys/fs/bpf/ebpf_xdp",
    "netns": [],
    "mode": "http",
    "listen_address": "127.0.0.1",
    "port": 9436,
    "textfile_path": "/var/lib/prometheus/node-exporter/ebpf_xdp.prom",
    "interval": 15.0,
    "pid_file": "/run/ebpf_xdp/ebpf-xdp-metrics.pid",
    "max_keys_per_map": 64,
    "unmanaged_programs": False,
    "cache_seconds": 1.0,
    "max_connections": 32,
    "request_timeout": 10.0,
    "web_config_file": "",
    "maps": ["*"],
    "max_entries_per_map": 1024,
    "max_series_per_map": 1000,
}
MODES = ("http", "textfile")
HOST_KEY = "host"
OWNER = "ebpf.xdp"  # the owner of a program with the collection's ownership record (_observed.OWNER)
NETNS_RUN_DIR = "/run/netns"
INIT_NET_INODE = 0xEFFFFFF9  # the kernel's inode number of the initial network namespace (PROC_NET_INIT_INO)
SO_NETNS_COOKIE = 71  # getsockopt: the cookie of the socket's network namespace (not in Python 3.11's socket module)
PROTOCOL_MAP = "proto_count"
# The multicast programs' per-group counters (_devmap.MAPS), shared by every port of a map set: exported once
# per group as ebpf_xdp_group_*, not once per port as generic counters.
GROUP_MAPS = ("mcast_frames", "mcast_copies")
# attachment: the name of one of several programs of the collection on one hook (tc_program's name), so that
# their series stay apart; empty for the unnamed one and for programs of other tools.
HOOK_LABELS = ("netns", "interface", "hook", "program", "attachment")
GROUP_LABELS = ("netns", "map_set", "group", "group_id")
# Every number of every decoded map (xdp_facts' entries) is a sample of one family, ebpf_xdp_map_value, told apart
# by labels: the fixed ones below, then the key's (key for a key that is one number or enumerator, key_<field>
# for each field of a struct key). Why one family and not one per map and field: the exporter cannot know what a
# user's field means (a counter, a gauge, a setting, a bit set), so it can neither give it a unit and a type
# nor a HELP line; names made of map and field names would be unbounded, could collide after the character
# clean-up, and a dashboard could not show "every user map" with one query. The cost is that one family mixes
# units: a query selects map and field, as the dashboard's "User maps" panel does.
MAP_VALUE_LABELS = HOOK_LABELS + ("map", "field")
# Key fields named so hold an interface index: their label shows the interface's name in that namespace.
IFINDEX_FIELDS = ("ifindex", "ifidx", "if_index", "dev", "device")
# Seconds between looks at our own namespace while no request comes.
WATCH_INTERVAL = 5.0
# The role's own look at the exporter (serving_us).
REQUEST_TIMEOUT = 10.0

# Every metric this exporter writes: name -> (type, help, labels). The
# exposed name adds _total (counter) or _info (info), as prometheus_client does.
METRICS = {
    "ebpf_xdp_program": (
        "info", "An XDP or tc program attached to an interface; owner ebpf.xdp or unmanaged.",
        HOOK_LABELS + ("mode", "id", "tag", "owner")),
    "ebpf_xdp_packets": (
        "counter", "Packets counted per IP protocol by a program's proto_count map, summed over CPUs.",
        HOOK_LABELS + ("map", "proto")),
    "ebpf_xdp_map_entry": (
        "counter", "Entries of a program's other maps of 64-bit counters, summed over CPUs, by key "
        "(zeros left out, at most max_keys_per_map keys per map).",
        HOOK_LABELS + ("map", "key")),
    "ebpf_xdp_map_entry_keys": (
        "gauge", "Non-zero entries in a program's counter map (more than exported when above max_keys_per_map).",
        HOOK_LABELS + ("map",)),
    "ebpf_xdp_network_receive_packets": (
        "counter", "Packets received by an interface that has a program.", ("netns", "interface")),
    "ebpf_xdp_network_transmit_packets": (
        "counter", "Packets sent by an interface that has a program.", ("netns", "interface")),
    "ebpf_xdp_network_receive_bytes": (
        "counter", "Bytes received by an interface that has a program.", ("netns", "interface")),
    "ebpf_xdp_network_transmit_bytes": (
        "counter", "Bytes sent by an interface that has a program.", ("netns", "interface")),
    "ebpf_xdp_network_receive_drop": (
        "counter", "Received packets the interface dropped (XDP_DROP included where the driver counts it).",
        ("netns", "interface")),
    "ebpf_xdp_network_transmit_drop": (
        "counter", "Packets the interface dropped on transmit.", ("netns", "interface")),
    "ebpf_xdp_group_frames": (
        "counter", "Frames a multicast program classified to a devmap group.", GROUP_LABELS),
    "ebpf_xdp_group_copies": (
        "counter", "Copies a multicast program asked the kernel to send for a devmap group.", GROUP_LABELS),
    "ebpf_xdp_group_members": (
        "gauge", "Member interfaces of a devmap group.", GROUP_LABELS),
    "ebpf_xdp_map_value": (
        "gauge", "Every number of an entry of a program's map decoded through its BTF (as xdp_facts decodes it): "
        "field is the number's path in the value, the key's fields are labels (key, or key_<field>).",
        MAP_VALUE_LABELS),
    "ebpf_xdp_map_entries_read": (
        "gauge", "Entries of a decoded map read in this collection (at most max_entries_per_map).",
        HOOK_LABELS + ("map",)),
    "ebpf_xdp_map_truncated": (
        "gauge", "1 when a decoded map has more entries than max_entries_per_map: the rest was not read.",
        HOOK_LABELS + ("map",)),
    "ebpf_xdp_map_series_dropped": (
        "gauge", "Series of ebpf_xdp_map_value that a map had beyond max_series_per_map in this collection, "
        "left out.", HOOK_LABELS + ("map",)),
    "ebpf_xdp_netns_up": (
        "gauge", "1 when the namespace was read completely in this scrape, 0 when reading it failed.", ("netns",)),
    "ebpf_xdp_collect_duration_seconds": (
        "gauge", "Seconds this scrape spent reading programs, maps and counters.", ()),
    "ebpf_xdp_collect_errors": (
        "counter", "Namespaces whose reading failed, since the exporter started.", ()),
    "ebpf_xdp_exporter": (
        "info", "The exporter itself: its service name and mode.", ("service", "mode")),
}
INTERFACE_STATS = {
    "ebpf_xdp_network_receive_packets": "rx_packets",
    "ebpf_xdp_network_transmit_packets": "tx_packets",
    "ebpf_xdp_network_receive_bytes": "rx_bytes",
    "ebpf_xdp_network_transmit_bytes": "tx_bytes",
    "ebpf_xdp_network_receive_drop": "rx_dropped",
    "ebpf_xdp_network_transmit_drop": "tx_dropped",
}
SUFFIXES = {"counter": "_total", "info": "_info", "gauge": ""}


class ConfigError(Exception):
    """A configuration the exporter cannot run with; the message says what to change."""


def exposed_names() -> set[str]:
    """The metric names as they appear in the exposition (what dashboards and queries use)."""
    return {name + SUFFIXES[kind] for name, (kind, _help, _labels) in METRICS.items()}


# ---------------------------------------------------------------- configuration (pure)


def load_config(raw: dict) -> dict:
    """The configuration with defaults filled in, or ConfigError naming the bad setting."""
    unknown = sorted(set(raw) - set(DEFAULTS))
    if unknown:
        raise ConfigError("unknown setting(s) %s; known: %s" % (", ".join(unknown), ", ".join(sorted(DEFAULTS))))
    config = dict(DEFAULTS, **raw)
    if config["mode"] not in MODES:
        raise ConfigError("mode %r is not one of %s" % (config["mode"], ", ".join(MODES)))
    if not os.path.isabs(str(config["pin_root"])):
        raise ConfigError("pin_root %r is not an absolute path" % config["pin_root"])
    if not isinstance(config["netns"], list) or not all(isinstance(n, str) and n for n in config["netns"]):
        raise ConfigError("netns must be a list of namespace names (empty: every managed one)")
    if not isinstance(config["port"], int) or not 1 <= config["port"] <= 65535:
        raise ConfigError("port %r is not a TCP port (1-65535)" % (config["port"],))
    if not config["listen_address"]:
        raise ConfigError("listen_address is empty")
    if not str(config["textfile_path"]).endswith(".prom") or not os.path.isabs(str(config["textfile_path"])):
        raise ConfigError("textfile_path %r must be an absolute path ending in .prom (node_exporter reads only those)"
                          % config["textfile_path"])
    if not isinstance(config["interval"], (int, float)) or config["interval"] <= 0:
        raise ConfigError("interval %r must be a positive number of seconds" % (config["interval"],))
    if not isinstance(config["max_keys_per_map"], int) or config["max_keys_per_map"] < 0:
        raise ConfigError("max_keys_per_map %r must be a number >= 0" % (config["max_keys_per_map"],))
    if not isinstance(config["unmanaged_programs"], bool):
        raise ConfigError("unmanaged_programs %r must be true or false" % (config["unmanaged_programs"],))
    if not _number(config["cache_seconds"]) or config["cache_seconds"] < 0:
        raise ConfigError("cache_seconds %r must be a number of seconds >= 0" % (config["cache_seconds"],))
    if not isinstance(config["max_connections"], int) or isinstance(config["max_connections"], bool) \
            or config["max_connections"] < 1:
        raise ConfigError("max_connections %r must be a number >= 1" % (config["max_connections"],))
    if not _number(config["request_timeout"]) or config["request_timeout"] <= 0:
        raise ConfigError("request_timeout %r must be a positive number of seconds" % (config["request_timeout"],))
    maps = config["maps"]
    if not isinstance(maps, list) or not all(isinstance(glob, str) and glob for glob in maps):
        raise ConfigError("maps %r must be a list of map name globs (empty: no map decoded)" % (maps,))
    for name in ("max_entries_per_map", "max_series_per_map"):
        if isinstance(config[name], bool) or not isinstance(config[name], int) or config[name] < 1:
            raise ConfigError("%s %r must be a number >= 1" % (name, config[name]))
    web = config["web_config_file"]
    if not isinstance(web, str) or web and not os.path.isabs(web):
        raise ConfigError("web_config_file %r must be an absolute path (empty: plain HTTP, no authentication)"
                          % (web,))
    return config


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


# ---------------------------------------------------------------- facts -> samples (pure)


class Samples:
    """name -> {label values: value}; repeated label sets add up (two unnamed programs with one name on a hook)."""

    def __init__(self):
        self.values = {name: {} for name in METRICS}

    def add(self, name: str, labels: tuple, value: float, replace: bool = False) -> None:
        """labels: one value per label name of METRICS; for ebpf_xdp_map_value, those and then (key label
        name, value) pairs."""
        kind, _help, names = METRICS[name]
        assert len(labels) == len(names) or name == "ebpf_xdp_map_value" and len(labels) > len(names), (name, labels)
        series = self.values[name]
        labels = tuple(v if isinstance(v, tuple) else str(v) for v in labels)
        if replace or kind != "counter":
            series[labels] = value
        else:
            series[labels] = series.get(labels, 0) + value


def _programs(entry: dict):
    """(hook, program facts) of one interface's facts, XDP first (libxdp's dispatcher, then the programs it runs,
    in run order), then tc in run order."""
    if entry.get("xdp"):
        yield "xdp", entry["xdp"]
    for prog in entry.get("xdp_chain") or ():
        yield "xdp", prog
    for direction, progs in sorted((entry.get("tc") or {}).items()):
        for prog in progs:
            yield "tc_" + direction, prog


def protocol_name(number: int) -> str:
    # The collection's own table when it is importable (it always is on a host the role set up).
    try:
        from ansible_collections.ebpf.xdp.plugins.module_utils import _facts  # pylint: disable=import-outside-toplevel
    except ImportError:
        return "proto-%d" % number
    return _facts.protocol_name(number)


def add_namespace(samples: Samples, key: str, facts: dict, max_keys: int, unmanaged: bool = False,
                  max_series: int = DEFAULTS["max_series_per_map"]) -> None:
    """The samples of one namespace's facts (_facts.snapshot): the collection's own programs (those with an
    ownership record), and other tools' too when unmanaged is true; an interface's statistics where one of
    them is attached; every number of their decoded maps, at most max_series per map."""
    ifnames = {str(index): name for index, name in (facts.get("interface_names") or {}).items()}
    for ifname, entry in sorted(facts.get("interfaces", {}).items()):
        programs = [(hook, prog) for hook, prog in _programs(entry) if unmanaged or prog.get("owner") == OWNER]
        if not programs:
            continue
        for metric, stat in INTERFACE_STATS.items():
            samples.add(metric, (key, ifname), entry.get("stats", {}).get(stat, 0), replace=True)
        for hook, prog in programs:
            program = prog.get("program") or prog.get("name") or "id-%s" % prog.get("id")
            attachment = (prog.get("attachment") or "") if prog.get("owner") == OWNER else ""
            where = (key, ifname, hook, program, attachment)
            mode = prog.get("mode") or prog.get("method") or ""
            identity = (mode, prog.get("id"), prog.get("tag") or "", prog.get("owner") or "unmanaged")
            samples.add("ebpf_xdp_program", where + identity, 1, replace=True)
            for map_name, values in sorted((prog.get("counters") or {}).items()):
                if map_name == PROTOCOL_MAP:
                    for proto_key, total in values.items():
                        samples.add("ebpf_xdp_packets", where + (map_name, protocol_name(int(proto_key))), total)
                    continue
                if map_name in GROUP_MAPS:
                    continue
                samples.add("ebpf_xdp_map_entry_keys", where + (map_name,), len(values), replace=True)
                for map_key in sorted(values, key=_key_order)[:max_keys]:
                    samples.add("ebpf_xdp_map_entry", where + (map_name, map_key), values[map_key])
            for item in prog.get("maps") or ():
                if "entries" in item and item["name"] not in (prog.get("counters") or {}):
                    add_map_values(samples, where, item, max_series, ifnames)
    for set_name, groups in sorted((facts.get("devmap_groups") or {}).items()):
        for group in groups:
            labels = (key, set_name, group.get("name") or str(group["id"]), group["id"])
            samples.add("ebpf_xdp_group_frames", labels, group.get("frames", 0))
            samples.add("ebpf_xdp_group_copies", labels, group.get("copies", 0))
            samples.add("ebpf_xdp_group_members", labels, len(group.get("members") or ()), replace=True)


def add_map_values(samples: Samples, where: tuple, item: dict, max_series: int, ifnames: dict) -> None:
    """ebpf_xdp_map_value for every number of a decoded map's entries (maps of 64-bit counters are
    ebpf_xdp_map_entry already), the first max_series of them; what the entry limit and the cap left out."""
    labels = where + (item["name"],)
    series = 0
    dropped = 0
    for entry in item["entries"]:
        key_labels = tuple(key_label_pairs(entry["key"], ifnames))
        for field, value in value_numbers(entry["value"]):
            if series >= max_series:
                dropped += 1
                continue
            series += 1
            samples.add("ebpf_xdp_map_value", labels + (field,) + key_labels, value)
    samples.add("ebpf_xdp_map_entries_read", labels, item.get("entries_read", len(item["entries"])), replace=True)
    samples.add("ebpf_xdp_map_truncated", labels, 1 if item.get("truncated") else 0, replace=True)
    samples.add("ebpf_xdp_map_series_dropped", labels, dropped)


def value_numbers(value, path: str = ""):
    """(path, number) of every number of a decoded value (_facts.numbers, repeated here so that the unit tests
    need no module_utils): `bytes`, `pair.a`, `hist[2]`, "" for a value that is one number."""
    if isinstance(value, int) and not isinstance(value, bool):
        yield path, value
    elif isinstance(value, dict) and set(value) != {"hex"}:
        for name, inner in value.items():
            yield from value_numbers(inner, "%s.%s" % (path, name) if path else str(name))
    elif isinstance(value, list):
        for i, inner in enumerate(value):
            yield from value_numbers(inner, "%s[%d]" % (path, i))


def key_label_pairs(key, ifnames: dict, path: str = ""):
    """(label name, value) pairs of a decoded key: ("key", ...) for a key that is one number, enumerator, text
    or {hex}; ("key_<field>", ...) for each field of a struct key (nested fields and array items joined by _).
    A field named as an interface index shows the interface's name where the namespace has one."""
    if isinstance(key, dict) and set(key) != {"hex"}:
        for name, inner in key.items():
            yield from key_label_pairs(inner, ifnames, "%s_%s" % (path, name) if path else str(name))
    elif isinstance(key, list):
        for i, inner in enumerate(key):
            yield from key_label_pairs(inner, ifnames, "%s_%d" % (path, i))
    else:
        text = key["hex"] if isinstance(key, dict) else str(key)
        if path.rpartition("_")[2] in IFINDEX_FIELDS or path in IFINDEX_FIELDS:
            text = ifnames.get(text, text)
        yield (_label_name("key_" + path if path else "key"), text)


def _label_name(name: str) -> str:
    """A Prometheus label name of a C field path (letters, digits and _; C names already are)."""
    return "".join(c if c.isalnum() and c.isascii() or c == "_" else "_" for c in name)


def _key_order(key: str):
    return (0, int(key), "") if key.isdigit() else (1, 0, key)


# ---------------------------------------------------------------- reading the kernel


def _ns_inode(path: str) -> int | None:
    try:
        return os.stat(path).st_ino
    except OSError:
        return None


def _in_initial_namespace() -> bool:
    """Whether this process runs in the initial network namespace. Under the systemd unit /proc/1/ns/net, which
    netns_key compares with, cannot be read (ptrace access to PID 1 would need CAP_SYS_PTRACE): the namespace is
    known by the fixed inode that newer kernels give it (PROC_NET_INIT_INO; 6.18 has it), else by its cookie
    (SO_NETNS_COOKIE, Linux 5.14), 1 for the first namespace the kernel makes, the initial one (6.1: its inode is
    allocated like any other's)."""
    if _ns_inode("/proc/self/ns/net") == INIT_NET_INODE:
        return True
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as probe:
            cookie = int.from_bytes(probe.getsockopt(socket.SOL_SOCKET, SO_NETNS_COOKIE, 8), sys.byteorder)
    except OSError:  # before 5.14
        return False
    return cookie == 1


def own_namespace() -> tuple[str, str | None]:
    """(key, path that names it) of the namespace this process runs in; path None when nothing names it."""
    from ansible_collections.ebpf.xdp.plugins.module_utils.host import (  # pylint: disable=import-outside-toplevel
        netns as _netns)
    if _in_initial_namespace():
        return HOST_KEY, None
    key = _netns.netns_key()
    if key == HOST_KEY:
        return key, None
    path = os.path.join(NETNS_RUN_DIR, key)
    return key, (path if os.path.exists(path) else None)


def wanted_namespaces(config: dict, own_key: str) -> list[str]:
    """The namespace keys to read: the configured ones, or ours and every one with pins."""
    if config["netns"]:
        return list(dict.fromkeys(config["netns"]))
    keys = [own_key]
    try:
        entries = sorted(os.listdir(config["pin_root"]))
    except OSError:
        entries = []
    keys += [e for e in entries if os.path.isdir(os.path.join(config["pin_root"], e)) and e != own_key]
    return keys


@contextlib.contextmanager
def _entered(path: str):
    """setns(2) into the namespace at path for the body (the exporter reads in its main thread only)."""
    libc = ctypes.CDLL(None, use_errno=True)
    target = os.open(path, os.O_RDONLY)
    original = os.open("/proc/self/ns/net", os.O_RDONLY)
    try:
        if libc.setns(target, 0x40000000) != 0:  # CLONE_NEWNET
            err = ctypes.get_errno()
            raise OSError(err, "setns %s: %s" % (path, os.strerror(err)))
        try:
            yield
        finally:
            if libc.setns(original, 0x40000000) != 0:
                # Staying in the wrong namespace would mislabel every later scrape.
                os._exit(3)  # pylint: disable=protected-access
    finally:
        os.close(target)
        os.close(original)


def namespace_path(key: str, own_key: str) -> str | None:
    """Where to enter the namespace called key; '' for our own; None when it does not exist (any more)."""
    if key == own_key:
        return ""
    if key == HOST_KEY:
        return "/proc/1/ns/net"
    path = os.path.join(NETNS_RUN_DIR, key)
    return path if os.path.exists(path) and "/" not in key else None


class Reader:
    """Reads every wanted namespace through _facts.snapshot, one after the other."""

    def __init__(self, config: dict):
        self.config = config
        self.own_key, self.own_path = own_namespace()
        self.own_inode = _ns_inode("/proc/self/ns/net")
        self.errors = 0

    def read(self) -> tuple[dict[str, dict | None], float]:
        """({netns key: facts, or None when reading failed}, seconds spent)."""
        from ansible_collections.ebpf.xdp.plugins.module_utils import _facts  # pylint: disable=import-outside-toplevel
        began = time.monotonic()
        out = {}
        for key in wanted_namespaces(self.config, self.own_key):
            path = namespace_path(key, self.own_key)
            if path is None:
                continue  # pins of a namespace that is gone: nothing is attached there any more
            try:
                warnings = []
                reading = self._reading()
                with (_entered(path) if path else contextlib.nullcontext()):
                    out[key] = _facts.snapshot(self.config["pin_root"], key, [], **self._warnings_to(warnings),
                                               **reading)
                    if reading:
                        # The names of the namespace's interfaces, for key fields that hold an index.
                        out[key]["interface_names"] = dict(socket.if_nameindex())
                for warning in warnings:
                    LOG.warning("network namespace %s: %s", key, warning)
            except Exception as exc:  # pylint: disable=broad-except
                # One namespace that cannot be read (deleted meanwhile, a map we may not read, a netlink
                # error) must not take the others, or the exporter, down: it shows as netns_up 0.
                self.errors += 1
                LOG.warning("reading network namespace %s failed: %s: %s", key, type(exc).__name__, exc)
                out[key] = None
        return out, time.monotonic() - began

    def _reading(self) -> dict:
        """snapshot()'s reading argument, where the shipped _facts decodes maps: the configured maps of the
        programs exported (ours, or every one with unmanaged_programs), with the configured entry limit."""
        if not self.config["maps"]:
            return {}
        from ansible_collections.ebpf.xdp.plugins.module_utils import _facts  # pylint: disable=import-outside-toplevel
        if not hasattr(_facts, "MapReading"):
            return {}
        unmanaged = self.config["unmanaged_programs"]

        class ExportedReading(_facts.MapReading):
            def wants_program(self, entry: dict) -> bool:
                return (unmanaged or entry.get("owner") == OWNER) and super().wants_program(entry)

        # Globs that match nothing are no news to the exporter's log at every scrape: not warned of.
        reading = ExportedReading(self.config["maps"], ["*"], self.config["max_entries_per_map"])
        reading.unmatched = lambda: {"maps": [], "programs": []}
        # Maps of 64-bit counters are ebpf_xdp_map_entry already: read once, not decoded again.
        reading.counter_maps = False
        return {"reading": reading}

    @staticmethod
    def _warnings_to(warnings: list) -> dict:
        """snapshot()'s warnings argument, where the shipped _facts has it (what it left out, and why)."""
        from ansible_collections.ebpf.xdp.plugins.module_utils import _facts  # pylint: disable=import-outside-toplevel
        return {"warnings": warnings} if "warnings" in inspect.signature(_facts.snapshot).parameters else {}

    def namespace_gone(self) -> bool:
        """Whether we run in a named namespace that was deleted (ip netns del) or replaced."""
        return bool(self.own_path) and _ns_inode(self.own_path) != self.own_inode


def collect(config: dict, reader: Reader) -> Samples:
    """One collection: every wanted namespace read, as samples. In the main thread only (see Scrapes)."""
    snapshots, seconds = reader.read()
    return build_samples(config, snapshots, seconds, reader.errors)


class Scrapes:
    """The collected samples, shared by the scrapes that come within cache_seconds of a collection's start (and
    by every scrape that comes while such a one runs), so that concurrent scrapes cost one collection.

    No scrape is given a collection that began more than max_age before the scrape came: not a finished one,
    and not one still running either (a slow collection that began before a program was attached would show
    the host as it was then); such a scrape waits for the next collection, which begins after it came. With
    max_age 0 every scrape's page was collected after it came.

    Collections run in the thread that calls serve(), the main thread: setns(2) moves only the calling
    thread, and the module_utils name the namespace they are in by /proc/self (the main thread's). The
    server's threads only ask (get) and wait.
    """

    def __init__(self, collect_once, max_age: float):
        self.collect_once = collect_once
        self.max_age = max_age
        self.cond = threading.Condition()
        self.samples: Samples | None = None  # of the last collection finished (None: it failed)
        self.taken = 0.0  # when the last collection finished began (time.monotonic())
        self.generation = 0  # collections finished
        self.running: float | None = None  # when the collection running now began
        self.wanted = False

    def get(self, timeout: float) -> Samples:
        """The samples of a collection that began at most max_age before this call; TimeoutError when none
        is ready within timeout, RuntimeError when the collection waited for failed."""
        asked = time.monotonic()
        oldest = asked - self.max_age
        with self.cond:
            seen = self.generation
            while True:
                if self.generation and self.taken >= oldest:
                    if self.samples is not None:
                        return self.samples
                    if self.generation != seen:
                        raise RuntimeError("the collection failed; see the exporter's log")
                    # A collection that failed before this scrape came: try again.
                if self.running is None or self.running < oldest:
                    self.wanted = True
                    self.cond.notify_all()
                remaining = asked + timeout - time.monotonic()
                if remaining <= 0 or not self.cond.wait(remaining):
                    raise TimeoutError("no collection finished within %s s" % timeout)

    def serve(self, stop, idle: float) -> None:
        """Collect whenever a scrape asks, until stop() (looked at every idle seconds) says so."""
        while not stop():
            with self.cond:
                if not self.cond.wait_for(lambda: self.wanted, idle):
                    continue
                # Begun here, under the lock: a scrape that comes after this moment may not take it with max_age 0.
                self.wanted, self.running = False, time.monotonic()
                began = self.running
            samples = None
            try:
                samples = self.collect_once()
            except Exception:  # pylint: disable=broad-except
                LOG.exception("collecting failed")
            with self.cond:
                self.samples, self.taken = samples, began
                self.generation += 1
                self.running = None
                self.cond.notify_all()


def build_samples(config: dict, snapshots: dict, seconds: float, errors: int) -> Samples:
    samples = Samples()
    for key, facts in snapshots.items():
        samples.add("ebpf_xdp_netns_up", (key,), 0 if facts is None else 1, replace=True)
        if facts is not None:
            add_namespace(samples, key, facts, config["max_keys_per_map"], config["unmanaged_programs"],
                          config["max_series_per_map"])
    samples.add("ebpf_xdp_collect_duration_seconds", (), round(seconds, 6), replace=True)
    samples.add("ebpf_xdp_collect_errors", (), errors, replace=True)
    samples.add("ebpf_xdp_exporter", (config["service"], config["mode"]), 1, replace=True)
    return samples


# ---------------------------------------------------------------- the collection's module_utils


BUNDLE = os.path.join(os.path.dirname(os.path.realpath(__file__)), "module_utils.json")
WEB_MODULE = os.path.join(os.path.dirname(os.path.realpath(__file__)), "ebpf_xdp_web.py")
MODULE_UTILS = "ansible_collections.ebpf.xdp.plugins.module_utils"


class _Bundled(importlib.abc.MetaPathFinder, importlib.abc.InspectLoader):
    """Imports the module_utils from the role's one file: {"host/netns.py": source, ...} under MODULE_UTILS."""

    def __init__(self, path: str):
        with open(path, encoding="utf-8") as src:
            files = json.load(src)
        self.path = path
        self.sources = {}
        parts = MODULE_UTILS.split(".")
        self.packages = {".".join(parts[:i]) for i in range(1, len(parts) + 1)}
        for name, source in files.items():
            dotted = ".".join([MODULE_UTILS] + name[:-len(".py")].split("/"))
            if dotted.endswith(".__init__"):
                dotted = dotted[:-len(".__init__")]
                self.packages.add(dotted)
            self.sources[dotted] = source

    def find_spec(self, fullname, path=None, target=None):  # pylint: disable=unused-argument
        if fullname not in self.packages and fullname not in self.sources:
            return None
        spec = importlib.util.spec_from_loader(fullname, self, origin="%s:%s" % (self.path, fullname),
                                               is_package=fullname in self.packages)
        spec.has_location = False
        return spec

    def is_package(self, fullname):
        return fullname in self.packages

    def get_source(self, fullname):
        return self.sources.get(fullname, "")

    def get_code(self, fullname):
        return compile(self.get_source(fullname), "%s:%s" % (self.path, fullname), "exec", dont_inherit=True)


def use_bundle(path: str = BUNDLE) -> None:
    """Import the module_utils from the role's file, where there is one (not in a checkout's unit tests)."""
    if os.path.exists(path) and not any(isinstance(f, _Bundled) for f in sys.meta_path):
        sys.meta_path.insert(0, _Bundled(path))


# ---------------------------------------------------------------- prometheus_client


def _client():
    try:
        import prometheus_client  # pylint: disable=import-outside-toplevel
        from prometheus_client import core  # pylint: disable=import-outside-toplevel
    except ImportError:
        raise ConfigError("the Python module prometheus_client is missing for %s: install python3-prometheus-client"
                          % sys.executable)
    return prometheus_client, core


class Collector:
    """prometheus_client's custom collector: the samples that samples() gives (a collection, or Scrapes')
    as metric families."""

    def __init__(self, samples):
        self.samples = samples
        self.core = _client()[1]

    def collect(self):
        samples = self.samples()
        families = {"counter": self.core.CounterMetricFamily, "gauge": self.core.GaugeMetricFamily}
        for name, (kind, text, labels) in METRICS.items():
            series = samples.values[name]
            if kind == "info":
                family = self.core.InfoMetricFamily(name, text, labels=labels)
                for values in sorted(series):
                    family.add_metric(list(values), {})
            elif name == "ebpf_xdp_map_value":
                # Label sets differ between maps (their keys'): a family of samples, each with its own.
                family = self.core.Metric(name, text, kind)
                for values, value in sorted(series.items()):
                    fixed = dict(zip(labels, values[:len(labels)]))
                    family.add_sample(name, dict(fixed, **dict(values[len(labels):])), value)
            else:
                family = families[kind](name, text, labels=list(labels))
                for values, value in sorted(series.items()):
                    family.add_metric(list(values), value)
            yield family


def registry(samples):
    """A registry of the samples that samples() gives, and of the process."""
    client, _core = _client()
    reg = client.CollectorRegistry(auto_describe=False)
    reg.register(Collector(samples))
    client.ProcessCollector(registry=reg)  # process_resident_memory_bytes, cpu seconds, open fds
    return reg


# ---------------------------------------------------------------- serving


class ListenError(ConfigError):
    pass


def _web():
    """The server side, ebpf_xdp_web.py, installed next to this file (kept apart from what is served)."""
    name = "ebpf_xdp_web"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, WEB_MODULE)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except OSError as exc:
            # Removed under a running role (a clean-up of the install directory), or never installed.
            del sys.modules[name]
            raise ConfigError("the exporter's web server %s cannot be read: %s (the role installs it next to "
                              "the exporter: run it again)" % (WEB_MODULE, exc.strerror or exc)) from None
        except BaseException:
            del sys.modules[name]
            raise
    return sys.modules[name]


def web_config(config: dict, text: str | None = None):
    """The web configuration (TLS, basic auth) of config, checked; None without one. text: the content to
    check instead of the file's (the role's check before it writes the file)."""
    if not config["web_config_file"]:
        return None
    web = _web()
    try:
        return web.WebConfig(config["web_config_file"], text)
    except web.WebConfigError as exc:
        raise ConfigError(str(exc))


def make_http_server(config: dict, web_text: str | None = None):
    """The threaded server bound to the configured address, with its web configuration (bind errors as
    ListenError)."""
    web = _web()
    try:
        return web.make_server(config["listen_address"], config["port"], config["max_connections"],
                               config["request_timeout"], web_config(config, web_text))
    except web.ListenError as exc:
        raise ListenError(str(exc))


def _where(config: dict) -> str:
    address = config["listen_address"]
    return "[%s]:%d" % (address, config["port"]) if ":" in address else "%s:%d" % (address, config["port"])


def serve_http(config: dict, reader: Reader, server) -> None:
    client, _core = _client()
    scrapes = Scrapes(lambda: collect(config, reader), config["cache_seconds"])
    app = client.make_wsgi_app(registry(lambda: scrapes.get(config["request_timeout"])))
    server.set_app(_web().guard(app, server.web))
    thread = threading.Thread(target=server.serve_forever, name="http", daemon=True)
    thread.start()
    LOG.info("serving %s metrics on %s://%s/metrics", config["service"],
             "https" if server.web and server.web.current()["tls"] else "http", _where(config))
    try:
        scrapes.serve(reader.namespace_gone, WATCH_INTERVAL)
        LOG.info("network namespace %s was deleted: exiting", reader.own_key)
    finally:
        server.shutdown()
        server.server_close()


def _files():
    """host/files of the module_utils: every file the exporter writes as root goes through it."""
    from ansible_collections.ebpf.xdp.plugins.module_utils.host import (  # pylint: disable=import-outside-toplevel
        files)
    return files


def write_textfile(config: dict, reg) -> None:
    """The scrape as a .prom file (0644, node_exporter reads it), written whole and never through a link
    (host/files: a fresh name made with O_EXCL | O_NOFOLLOW in the checked directory, fsync'ed, renamed
    over the file): node_exporter never reads half a file, and a name planted in the directory is never
    followed. UnsafePathError or OSError."""
    client, _core = _client()
    _files().write_atomically(config["textfile_path"], client.generate_latest(reg), mode=0o644, dir_mode=None)


def serve_textfile(config: dict, reader: Reader) -> None:
    reg = registry(lambda: collect(config, reader))
    LOG.info("writing %s metrics to %s every %s s", config["service"], config["textfile_path"], config["interval"])
    while not reader.namespace_gone():
        started = time.monotonic()
        try:
            write_textfile(config, reg)
        except (OSError, _files().UnsafePathError) as exc:
            LOG.error("writing %s failed: %s", config["textfile_path"], exc)
        time.sleep(max(0.1, config["interval"] - (time.monotonic() - started)))
    LOG.info("network namespace %s was deleted: exiting", reader.own_key)


# ---------------------------------------------------------------- checks and process control


def check_environment(config: dict) -> None:
    """What must hold before the exporter runs: its libraries, bpffs at the pin root, a writable textfile dir."""
    _client()
    try:
        # pylint: disable=import-outside-toplevel,unused-import
        from ansible_collections.ebpf.xdp.plugins.module_utils import _facts  # noqa: F401
        from ansible_collections.ebpf.xdp.plugins.module_utils.bpf import pins as _pins
        from ansible_collections.ebpf.xdp.plugins.module_utils.host import netlink as _netlink
    except (ImportError, OSError) as exc:
        raise ConfigError("the collection's module_utils cannot be loaded with %s: %s" % (sys.executable, exc))
    if not _netlink.HAS_PYROUTE2:
        raise ConfigError("pyroute2 is missing for %s: install python3-pyroute2 (role ebpf.xdp.toolchain)"
                          % sys.executable)
    try:
        _pins.check_bpffs(config["pin_root"])
    except _pins.PinError as exc:
        raise ConfigError(str(exc))
    if config["mode"] == "textfile":
        directory = os.path.dirname(config["textfile_path"])
        if not os.path.isdir(directory) or not os.access(directory, os.W_OK):
            raise ConfigError("textfile directory %s does not exist or is not writable" % directory)
        # Written as root: the directory must be root's alone, or another user could swap what is written.
        try:
            os.close(_files().open_directory(directory, create_mode=None))
        except (OSError, _files().UnsafePathError) as exc:
            raise ConfigError("textfile directory %s: %s" % (directory, exc))


def config_digest(config: dict) -> str:
    """What identifies a configuration (with its defaults filled in): the sha256 of its canonical JSON."""
    text = json.dumps(config, sort_keys=True, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def _pid_file_lines(config: dict) -> list[str]:
    """The pid file's lines: the pid, then "config DIGEST" of the configuration that process serves."""
    try:
        with open(config["pid_file"], encoding="ascii") as src:
            return src.read().splitlines()
    except (OSError, ValueError):
        return []


def read_pid(config: dict) -> int | None:
    lines = _pid_file_lines(config)
    try:
        return (int(lines[0].strip() or 0) or None) if lines else None
    except ValueError:
        return None


def served_digest(config: dict) -> str | None:
    """The digest of the configuration the exporter of the pid file serves (None: an exporter that did not say,
    one of before this line was written)."""
    for line in _pid_file_lines(config)[1:]:
        word, _sep, digest = line.partition(" ")
        if word == "config" and digest:
            return digest
    return None


def ours(pid: int, config_path: str) -> bool:
    """Whether pid is this exporter serving this configuration (not a recycled pid)."""
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as src:
            argv = src.read().split(b"\0")
    except OSError:
        return False
    paths = {os.path.realpath(arg.decode(errors="replace")) for arg in argv if arg.startswith(b"/")}
    return os.path.realpath(__file__) in paths and os.path.realpath(config_path) in paths


def running_pid(config: dict, config_path: str) -> int | None:
    pid = read_pid(config)
    return pid if pid and ours(pid, config_path) else None


def stale(config: dict) -> bool:
    """Whether the exporter's code changed after it started (its pid file was written).

    Exporters that share one installation (the lab's hosts) see each
    other's updates here, not in their own run's copy results. The
    configuration is compared by its contents, not its time (see
    other_config): a configuration file written before another run's
    exporter started is not newer than that exporter, and is not what it
    serves.
    """
    try:
        started = os.stat(config["pid_file"]).st_mtime
    except OSError:
        return False
    paths = [os.path.realpath(__file__), WEB_MODULE, BUNDLE]
    newest = 0.0
    for path in paths:
        with contextlib.suppress(OSError):
            newest = max(newest, os.stat(path).st_mtime)
    return newest > started


def _listening_sockets(port: int) -> set[str]:
    """The socket inodes listening on TCP port in this network namespace (/proc/net/tcp and tcp6)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table, encoding="ascii") as src:
            for line in src.readlines()[1:]:
                fields = line.split()
                if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:  # 0A: LISTEN
                    inodes.add("socket:[%s]" % fields[9])
    return inodes


def listens(pid: int, port: int) -> bool:
    """Whether process pid holds a socket listening on port."""
    inodes = _listening_sockets(port)
    fd_dir = "/proc/%d/fd" % pid
    try:
        fds = os.listdir(fd_dir)
    except OSError:
        return False
    for fd in fds:
        with contextlib.suppress(OSError):
            if os.readlink(os.path.join(fd_dir, fd)) in inodes:
                return True
    return False


def holds_port(config: dict, config_path: str) -> bool:
    """Whether the running exporter (its pid file's process, started with this configuration) holds the socket
    listening on the configured port: asked of the kernel, not of the listener."""
    pid = running_pid(config, config_path)
    return bool(pid) and listens(pid, config["port"])


def serving_us(config: dict, config_path: str) -> bool:
    """Whether what listens at the configured address is this service's exporter (a restart will free it).

    Behind a web configuration (TLS, basic auth, client certificates) a
    request may not be answered without credentials the role does not
    have: there the listening socket must be the running exporter's.
    """
    if config["web_config_file"]:
        return holds_port(config, config_path)
    host = config["listen_address"]
    if host in ("0.0.0.0", ""):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    url = "http://%s:%d/metrics" % ("[%s]" % host if ":" in host else host, config["port"])
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=REQUEST_TIMEOUT) as resp:
            text = resp.read().decode(errors="replace")
    except (OSError, urllib.error.URLError):
        return False
    mark = 'service="%s"' % config["service"]
    return any(line.startswith("ebpf_xdp_exporter_info{") and mark in line for line in text.splitlines())


def check(config: dict, config_path: str, web_text: str | None = None) -> None:
    """--check: everything --start would check, without starting anything."""
    check_environment(config)
    if config["mode"] == "http":
        web_config(config, web_text)
        try:
            make_http_server(config, web_text).server_close()
        except ListenError:
            # Not serving_us: another process holding the port may accept and never answer, and a request would
            # wait its whole timeout (the role's check took 10 s more).
            if not holds_port(config, config_path):
                raise


def other_config(config: dict) -> bool:
    """Whether the running exporter serves another configuration than config (or does not say which)."""
    return served_digest(config) != config_digest(config)


def write_pid_file(config: dict) -> None:
    """The pid file (0644), written like the metrics file: never through a link, in a checked directory. Its
    second line names the configuration this process serves (--ensure compares it with the one asked for)."""
    text = "%d\nconfig %s\n" % (os.getpid(), config_digest(config))
    try:
        _files().write_atomically(config["pid_file"], text.encode(), mode=0o644, dir_mode=0o755)
    except _files().UnsafePathError as exc:
        raise ConfigError(str(exc))


def remove_pid_file(config: dict) -> None:
    if read_pid(config) == os.getpid():
        with contextlib.suppress(FileNotFoundError):
            os.unlink(config["pid_file"])


def _terminate(_signum, _frame):
    raise SystemExit(0)


def run(config: dict, server=None) -> None:
    """Serve until SIGTERM (or until our namespace is deleted)."""
    reader = Reader(config)
    if config["mode"] == "http" and server is None:
        server = make_http_server(config)
    signal.signal(signal.SIGTERM, _terminate)
    write_pid_file(config)
    try:
        if config["mode"] == "http":
            serve_http(config, reader, server)
        else:
            serve_textfile(config, reader)
    finally:
        remove_pid_file(config)


class StartError(Exception):
    """The detached exporter did not come up; the message says why."""


def start(config: dict, log_file: str | None) -> int:
    """Check, bind and detach (double fork); returns the exporter's pid once it serves, or raises its error."""
    check_environment(config)
    ready_r, ready_w = os.pipe()
    child = os.fork()
    if child:
        os.close(ready_w)
        with os.fdopen(ready_r, "rb") as ready:
            answer = ready.read().decode(errors="replace")
        os.waitpid(child, 0)
        if answer.startswith("ok "):
            return int(answer.split()[1])
        raise StartError(answer.strip() or "the exporter exited before it was ready; see %s" % log_file)
    os.close(ready_r)
    _daemon(config, log_file, ready_w)


def serves(config: dict, config_path: str, timeout: float = 30.0) -> bool:
    """Whether the running exporter answers: its /metrics (http), or its first metrics file (textfile)."""
    deadline = time.monotonic() + timeout
    while True:
        if serving_us(config, config_path) if config["mode"] == "http" else os.path.exists(config["textfile_path"]):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.2)


def ensure(config: dict, config_path: str, log_file: str | None, dry_run: bool, wrote: dict | None = None) -> dict:
    """--ensure: start the exporter when it is not running; restart it when it serves another configuration
    than config (by contents: see other_config) or its code is newer than the process (see stale); leave it
    otherwise; then check that it serves. One command for the role's no-change run, where reading the state,
    starting and scraping were three module runs a host.

    wrote: what the caller wrote to config_path (the role's --config-json). The file must still hold it: when
    another run of the role for the same service has written its own configuration since (two runs at once,
    two benchmark runs on one host), this run would otherwise keep, or start, an exporter that serves one of
    the two configurations and say nothing. Refused instead, before anything is stopped or started."""
    if wrote is not None and not dry_run:
        try:
            written = read_config_file(config_path)
        except ConfigError as exc:
            written, why = None, str(exc)
        else:
            why = "it holds another configuration (%s, this run's %s)" % (
                config_digest(written), config_digest(wrote))
        if written != wrote:
            raise ConfigError(
                "%s is not the configuration this run wrote: %s. Another run for the service %s wrote it since "
                "(two runs at once?), or it was edited; nothing was started or stopped. Run again once the "
                "other run is over." % (config_path, why, config["service"]))
    pid = running_pid(config, config_path)
    action = ("restarted" if other_config(config) or stale(config) else "none") if pid else "started"
    if dry_run:
        if action != "none":
            check(config, config_path)
        return {"action": action, "pid": pid, "dry_run": True}
    if action == "restarted":
        stop(config, config_path)
    if action != "none":
        pid = start(config, log_file)
    if not serves(config, config_path):
        raise StartError("the exporter (pid %d) does not serve %s" % (
            pid, "on %s:%d" % (config["listen_address"], config["port"]) if config["mode"] == "http"
            else config["textfile_path"]))
    return {"action": action, "pid": pid, "config": config_digest(config)}


def _daemon(config: dict, log_file: str | None, ready_w: int) -> NoReturn:
    """The detached exporter: a new session, bound, logging to log_file; says "ok PID" (or its error) on ready_w."""
    os.setsid()
    if os.fork():
        os._exit(0)  # pylint: disable=protected-access
    try:
        server = make_http_server(config) if config["mode"] == "http" else None
        _detach(log_file)
        write_pid_file(config)
    except Exception as exc:  # pylint: disable=broad-except
        os.write(ready_w, str(exc).encode())
        os._exit(1)  # pylint: disable=protected-access
    os.write(ready_w, ("ok %d" % os.getpid()).encode())
    os.close(ready_w)
    try:
        run(config, server)
    except Exception:  # pylint: disable=broad-except
        LOG.exception("the exporter stopped")
        os._exit(1)  # pylint: disable=protected-access
    os._exit(0)  # pylint: disable=protected-access


def _detach(log_file: str | None) -> None:
    os.chdir("/")
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    if log_file:
        # Appended to, never through a link, in a directory that only root can change.
        files = _files()
        directory = files.open_directory(os.path.dirname(log_file), 0o755)
        try:
            out = os.open(os.path.basename(log_file), os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW,
                          0o640, dir_fd=directory)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise ConfigError("refusing to log to %s: it is a symbolic link" % log_file) from None
            raise
        finally:
            os.close(directory)
    else:
        out = null
    os.dup2(out, 1)
    os.dup2(out, 2)


def stop(config: dict, config_path: str, timeout: float = 10.0) -> bool:
    """SIGTERM, then SIGKILL after timeout; True if an exporter was running."""
    pid = running_pid(config, config_path)
    if not pid:
        return False
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not ours(pid, config_path):
            break
        time.sleep(0.05)
    else:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(FileNotFoundError):
        if read_pid(config) == pid:
            os.unlink(config["pid_file"])
    return True


def read_config_file(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as src:
            raw = json.load(src)
    except OSError as exc:
        raise ConfigError("cannot read the configuration %s: %s" % (path, exc.strerror))
    except ValueError as exc:
        raise ConfigError("the configuration %s is not JSON: %s" % (path, exc))
    if not isinstance(raw, dict):
        raise ConfigError("the configuration %s is not a JSON object" % path)
    return load_config(raw)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--config", required=True, help="the JSON configuration the role writes")
    parser.add_argument("--config-json", help="use this JSON instead of the file's content (checks before writing; "
                        "with --ensure: what this run wrote to the file, which must still hold it)")
    parser.add_argument("--web.config.file", dest="web_config_file",
                        help="exporter-toolkit's web configuration (TLS, basic auth); overrides web_config_file")
    parser.add_argument("--web-config-json", help="with --check: check this content instead of the web "
                        "configuration file's (JSON or YAML)")
    action = parser.add_mutually_exclusive_group()
    for name in ("start", "stop", "restart", "ensure", "status", "check", "once"):
        action.add_argument("--" + name, action="store_true")
    parser.add_argument("--dry-run", action="store_true", help="with --start/--stop/--restart/--ensure: only say it")
    parser.add_argument("--log-file", help="with --start/--restart/--ensure: where the detached exporter logs")
    args = parser.parse_args(argv)
    use_bundle()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        config = load_config(json.loads(args.config_json)) if args.config_json else read_config_file(args.config)
        wrote = config if args.config_json else None
        if args.web_config_file is not None:
            config = load_config(dict(config, web_config_file=os.path.abspath(args.web_config_file)
                                      if args.web_config_file else ""))
        if args.status:
            pid = running_pid(config, args.config)
            print(json.dumps({"running": bool(pid), "pid": pid,
                              "stale": bool(pid) and (stale(config) or other_config(config))}))
            return 0
        if args.check:
            check(config, args.config, args.web_config_json)
            print(json.dumps({"ok": True}))
            return 0
        if args.stop or args.restart:
            pid = running_pid(config, args.config)
            if args.dry_run:
                if args.restart:
                    check_environment(config)
                print(json.dumps({"stopped": bool(pid), "dry_run": True}))
                return 0
            stopped = stop(config, args.config)
            if args.stop:
                print(json.dumps({"stopped": stopped}))
                return 0
        if args.start or args.restart:
            if args.dry_run:
                check(config, args.config)
                print(json.dumps({"started": True, "dry_run": True}))
                return 0
            print(json.dumps({"started": True, "pid": start(config, args.log_file)}))
            return 0
        if args.ensure:
            print(json.dumps(ensure(config, args.config, args.log_file, args.dry_run, wrote)))
            return 0
        if args.once:
            client, _core = _client()
            reader = Reader(config)
            sys.stdout.write(client.generate_latest(registry(lambda: collect(config, reader))).decode())
            return 0
        check_environment(config)
        run(config)
        return 0
    except ConfigError as exc:
        print("ebpf_xdp_exporter: %s" % exc, file=sys.stderr)
        return 2
    except StartError as exc:
        print(exc, file=sys.stderr)
        return 1
    except ImportError as exc:
        print("ebpf_xdp_exporter: the collection's module_utils cannot be loaded with %s: %s (they belong in %s)"
              % (sys.executable, exc, BUNDLE), file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
