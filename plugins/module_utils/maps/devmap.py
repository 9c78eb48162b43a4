# -*- coding: utf-8 -*-
# Copyright (c) ebpf.xdp contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Multicast groups in a shared map set: reading them (facts) and converging one (devmap_group).

Private to the ebpf.xdp collection: the interface may change without notice.

The maps are those of files/bpf/include/mcast_groups.h, pinned in a map set
(_pins: <pin_root>/<netns>/shared_maps/<set>/) by the multicast program's
attachments: mcast_groups (group id -> a DEVMAP_HASH of members keyed by
their own ifindex), mcast_addrs, mcast_config (flags, member count),
mcast_frames/mcast_copies (per-CPU counters) and mcast_port_mac (the egress
program's source MACs). A group changes by writes to these maps only, in the
header's order (a new group: members, settings, the group, its addresses;
removal in reverse), adding before removing, so the members that stay never
miss a frame. The inner devmap of an existing group is edited in place. A
failed run puts back what it wrote (a journal of undo steps).

Each group has a record (_pins.Record) in <set>/groups/<id>/owner with its
name and egress program; the program itself is pinned next to it (prog).
Members and addresses live only in the maps. Everything runs inside the
group's network namespace: the kernel resolves a devmap value's ifindex in
the writer's namespace.
"""

from __future__ import annotations

import dataclasses
import errno
import fcntl
import functools
import ipaddress
import json
import os
import socket
import struct
import sys

from ansible_collections.ebpf.xdp.plugins.module_utils.host import kernel as _kernel, netdev as _netdev, \
    netlink as _netlink, netns as _netns, session as _session
from ansible_collections.ebpf.xdp.plugins.module_utils.host.journal import Journal
from ansible_collections.ebpf.xdp.plugins.module_utils.bpf import libbpf as _bpf, loader as _loader, pins as _pins
from ansible_collections.ebpf.xdp.plugins.module_utils.traffic import frames as _frames
from ansible_collections.ebpf.xdp.plugins.module_utils.bpf.compile import sha256_file
from ansible_collections.ebpf.xdp.plugins.module_utils._errors import EbpfXdpError

# The layout of files/bpf/include/mcast_groups.h.
MAX_GROUPS = 256  # ids 1 .. MAX_GROUPS - 1; 0 is "no group"
MAX_MEMBERS = 64
KEY_MAC, KEY_IPV4, KEY_IPV6 = 1, 4, 6
EXCLUDE_INGRESS = 1
MAPS = ("mcast_groups", "mcast_addrs", "mcast_config", "mcast_frames", "mcast_copies", "mcast_port_mac")
DEFAULT_SHARED_MAPS = "multicast"
GROUPS_DIR = "groups"
SIOCGIFHWADDR = 0x8927
# What loading adds to a group record's egress program, at its widest: to check the record fits first.
WIDEST_EGRESS = {"object_sha256": "x" * 64, "program_name": "x" * 64, "prog_id": 2 ** 32, "tag": "x" * 16}


class GroupError(EbpfXdpError):
    pass


# ---------------------------------------------------------------- pure helpers


def normalize_address(text: str) -> str:
    """A multicast IPv4/IPv6 address or a group MAC (multicast or broadcast), in canonical form."""
    value = str(text).strip()
    if value.count(":") == 5 and "::" not in value:  # six parts: no IPv6 address, a MAC if anything
        try:
            raw = _frames.mac_bytes(value)
        except ValueError:
            raise GroupError("address %r is not an IP or MAC address" % text)
        if not raw[0] & 1:
            raise GroupError("address %s is a unicast MAC; a group takes multicast or broadcast MACs "
                             "(first octet odd, e.g. 01:00:5e:01:01:01 or ff:ff:ff:ff:ff:ff)" % value)
        return _frames.mac_text(raw)
    try:
        address = ipaddress.ip_address(value)
    except ValueError:
        raise GroupError("address %r is not an IP or MAC address" % text)
    if not address.is_multicast:
        raise GroupError("address %s is not a multicast address; a group takes IPv4 224.0.0.0/4, IPv6 ff00::/8 "
                         "or a multicast MAC" % value)
    return str(address)


def address_key(address: str) -> bytes:
    """struct mcast_key of a normalized address."""
    if ":" in address and address.count(":") == 5 and "::" not in address and len(address) == 17:
        return struct.pack("<I", KEY_MAC) + bytes.fromhex(address.replace(":", "")).ljust(16, b"\0")
    ip = ipaddress.ip_address(address)
    return struct.pack("<I", KEY_IPV4 if ip.version == 4 else KEY_IPV6) + ip.packed.ljust(16, b"\0")


def key_address(raw: bytes) -> str | None:
    """The address of a struct mcast_key, or None for a kind this version does not know."""
    kind = struct.unpack_from("<I", raw)[0]
    if kind == KEY_IPV4:
        return str(ipaddress.IPv4Address(raw[4:8]))
    if kind == KEY_IPV6:
        return str(ipaddress.IPv6Address(raw[4:20]))
    if kind == KEY_MAC:
        return ":".join("%02x" % b for b in raw[4:10])
    return None


def address_order(address: str):
    """Sort key: IPv4, IPv6, then MACs, each by value."""
    key = address_key(address)
    return ({KEY_IPV4: 0, KEY_IPV6: 1, KEY_MAC: 2}[struct.unpack_from("<I", key)[0]], key[4:])


def check_id(group_id: int) -> int:
    if not 1 <= group_id < MAX_GROUPS:
        raise GroupError("group id %d is out of range: ids run from 1 to %d (0 means no group)"
                         % (group_id, MAX_GROUPS - 1))
    return group_id


def lowest_free_id(used) -> int:
    for group_id in range(1, MAX_GROUPS):
        if group_id not in used:
            return group_id
    raise GroupError("all %d group ids of the map set are taken" % (MAX_GROUPS - 1))


def merge(current, listed, exclusive: bool) -> set:
    """What a group should hold: exactly the listed (exclusive) or the current ones plus the listed."""
    return set(listed) if exclusive else set(current) | set(listed)


def member_value(ifindex: int, prog_fd: int = 0) -> bytes:
    """struct bpf_devmap_val: the egress ifindex and a program fd (on write; the kernel answers its id)."""
    return struct.pack("<Ii", ifindex, prog_fd)


def config_value(flags: int, members: int) -> bytes:
    return struct.pack("<HH", flags, members)


def u32(value: int) -> bytes:
    return struct.pack("<I", value)


# ---------------------------------------------------------------- interfaces


def interface_mac(ifname: str) -> bytes:
    """The MAC of an interface of the current network namespace (sysfs would show the mount's namespace)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        answer = fcntl.ioctl(sock.fileno(), SIOCGIFHWADDR, struct.pack("256s", ifname.encode()[:15]))
    return answer[18:24]


def interface_name(ifindex: int) -> str:
    return _netns.ifname(ifindex) or "ifindex %d" % ifindex


def elsewhere(ifname: str, here: str) -> list[str]:
    """The other network namespaces (by name, "host" for the initial one) that have an interface ifname."""
    found = []
    if here != "host":
        try:
            with open("/proc/1/net/dev") as dev:  # the initial namespace, seen through pid 1
                if any(line.split(":")[0].strip() == ifname for line in dev if ":" in line):
                    found.append("host")
        except OSError:
            pass
    if os.path.isdir(_netns.NETNS_RUN_DIR):
        for name in sorted(os.listdir(_netns.NETNS_RUN_DIR)):
            if name == here:
                continue
            try:
                with _netns.netns(name):
                    socket.if_nametoindex(ifname)
                found.append(name)
            except (OSError, EbpfXdpError):
                continue
    return found


def resolve_members(names: list[str], netns_key: str) -> dict[str, int]:
    """name -> ifindex in the current namespace; a missing one is an error that says where it is, if anywhere."""
    out = {}
    for name in names:
        try:
            out[name] = _netns.ifindex(name)
        except _netns.NotFoundError:
            others = elsewhere(name, netns_key)
            if others:
                raise GroupError("member %s is not in network namespace %s but in %s: a group's members must be "
                                 "in the namespace of its multicast program (netns: %s)"
                                 % (name, netns_key, ", ".join(others), netns_key))
            raise GroupError("member %s: no such interface in network namespace %s" % (name, netns_key))
    return out


REDIRECT_ADVICE = ("copies sent to it from ports where the multicast program runs natively are dropped. For a "
                   "veth, give its peer an XDP program or enable GRO on the peer; or attach the multicast program in "
                   "generic mode")


def redirect_problems(members: dict[int, str]) -> dict[str, str]:
    """member name -> why natively redirected copies cannot leave it now, for each member that cannot (the others
    are fine, or the kernel cannot tell). The kernel's xdp_features say it (Linux 6.3+); before them, a veth
    is judged by its peer: copies get in only through the peer's XDP ring, which exists while the peer has a
    native-mode XDP program or GRO enabled (the interfaces' one link dump shows the first, not the second)."""
    problems: dict[str, str] = {}
    links = None
    for ifindex, ifname in sorted(members.items()):
        try:
            features = _netdev.xdp_features(ifindex)
        except OSError:
            continue
        if features is not None:
            if not features & _netdev.XDP_ACT_NDO_XMIT:
                problems[ifname] = "member %s cannot take natively redirected XDP frames now (xdp_features: %s): %s" \
                    % (ifname, ", ".join(_netdev.feature_names(features)) or "none", REDIRECT_ADVICE)
            continue
        if links is None:
            links = {link["ifindex"]: link for link in _netlink.interfaces()}
        link = links.get(ifindex)
        if not link or link["kind"] != "veth":
            continue
        peer = _netlink.peer(link)
        if peer is None or peer["xdp"]["native_prog_id"] or peer["xdp"]["mode"] == "native":
            continue
        problems[ifname] = ("member %s cannot take natively redirected XDP frames now unless GRO is enabled on its "
                            "peer: its veth peer %s has no native-mode XDP program (Linux %s has no xdp_features "
                            "to ask, and its link dump does not show GRO): %s"
                            % (ifname, peer["ifname"], os.uname().release, REDIRECT_ADVICE))
    return problems


# ---------------------------------------------------------------- the map set


@dataclasses.dataclass(frozen=True)
class SetState:
    """What a map set's maps say of its groups, counters apart (they move with every frame): read once per host
    session, by the gather and the group's converge alike, until this run writes to a map (_pins.wrote_map_sets),
    the set's pins are replaced, or, under the set's lock, its generation says another run wrote since
    (MapSet.catch_up)."""

    members: dict[int, dict[int, int]]  # group id -> ifindex -> egress program id, for each group in mcast_groups
    addresses: dict[str, int]  # address -> group id
    config: dict[int, tuple[int, int]]  # group id -> (flags, member count) as written, for each group
    address_capacity: int  # mcast_addrs' max_entries

    def group_ids(self) -> list[int]:
        return sorted(self.members)

    def group(self, group_id: int | None) -> dict[int, int] | None:
        """A group's members (a copy: the state is the session's), or None when there is no such group."""
        members = self.members.get(group_id)
        return None if members is None else dict(members)


class _Pinned(dict):
    """A map set's maps by name, each opened from its pin when first used: a run that reads the set's state from
    the session opens none."""

    def __init__(self, directory: str):
        super().__init__()
        self.directory = directory

    def __missing__(self, name: str) -> _bpf.Map:
        opened = self[name] = _bpf.Map.from_pin(os.path.join(self.directory, name))
        return opened


class MapSet:
    """The pinned maps of one map set, open until close()."""

    def __init__(self, directory: str, name: str):
        self.directory = directory
        self.name = name
        missing = [m for m in MAPS if not os.path.exists(os.path.join(directory, m))]
        if missing:
            raise GroupError(
                "map set %r has no pinned %s in %s: attach the multicast program with shared_maps: %s first, "
                "e.g. ebpf.xdp.xdp_program with object: <xdp_multicast.o>, program: xdp_multicast, shared_maps: %s "
                "on each member port" % (name, ", ".join(missing), directory, name, name))
        self.maps = _Pinned(directory)
        # The set's lock, whose generation tells whether another run changed the set since this run read it.
        netns_key, set_name = _pins.shared_maps_named(directory)
        self.lock = (netns_key, _pins.shared_maps_lock(set_name))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self) -> None:
        for opened in self.maps.values():
            opened.close()
        self.maps.clear()

    def __getitem__(self, name: str) -> _bpf.Map:
        return self.maps[name]

    def seen_generation(self) -> int | None:
        """The set's lock generation when this run first read the set (before its state and its groups' records,
        so that a run which changed the set after is seen to have); outside a host session, where every read is
        afresh, nothing is read (the exporter reads the groups on each scrape)."""
        if _session.active() is None:
            return None
        return _session.dump((_pins.MAP_SET_GENERATION, self.directory), lambda: _pins.lock_generation(*self.lock))

    def catch_up(self, held: _pins.HeldLock) -> None:
        """Under the set's lock (held): what this run read of the set before the lock (a datapath task's gather)
        is read again when another run changed the set since; a set nobody changed is not read again."""
        now = held.generation()
        if now is not None and now == self.seen_generation():
            return
        _session.forget(_pins.MAP_SET_STATE, self.directory)
        groups = os.path.join(self.directory, GROUPS_DIR)
        _session.forget(_pins.PIN_DIRS, groups)
        _session.forget_records(groups)
        _session.known((_pins.MAP_SET_GENERATION, self.directory), now)

    def wrote(self, held: _pins.HeldLock | None) -> None:
        """This run wrote to the set: its own next read sees the writes, and (held: the set's lock, which it
        holds) other runs', under the lock, the generation it advanced."""
        _pins.wrote_map_sets()
        if held is not None:
            _session.known((_pins.MAP_SET_GENERATION, self.directory), held.advance())

    def state(self) -> SetState:
        """The set's groups as its maps hold them, read once per host session (see SetState); a set whose pins
        were replaced (another inode) is read anew."""
        self.seen_generation()
        pin = os.stat(os.path.join(self.directory, "mcast_groups"))
        return _session.dump((_pins.MAP_SET_STATE, self.directory, pin.st_ino, pin.st_ctime_ns), self._read_state)

    def _read_state(self) -> SetState:
        members = {}
        for group_id in self.group_ids():
            found = self.members(group_id)
            if found is not None:  # else removed while we read
                members[group_id] = found
        return SetState(members, self.addresses(), {group_id: self.config(group_id) for group_id in members},
                        self["mcast_addrs"].info["max_entries"])

    def group_ids(self) -> list[int]:
        return sorted(struct.unpack("<I", key)[0] for key in self["mcast_groups"].keys())

    def addresses(self) -> dict[str, int]:
        """address -> group id."""
        out = {}
        for key, value in self["mcast_addrs"].items():
            address = key_address(key)
            if address is not None:
                out[address] = struct.unpack_from("<I", value)[0]
        return out

    def config(self, group_id: int) -> tuple[int, int]:
        """(flags, member count) as written."""
        return struct.unpack_from("<HH", self["mcast_config"].lookup(u32(group_id)))

    def members(self, group_id: int) -> dict[int, int] | None:
        """ifindex -> egress program id of a group's devmap, or None when there is no such group."""
        try:
            inner = self["mcast_groups"].inner(u32(group_id))
        except _bpf.BpfError as exc:
            if exc.errno == errno.ENOENT:
                return None  # the group went between the lookup of its devmap's id and the open by id
            raise
        if inner is None:
            return None
        with inner:
            return {struct.unpack("<I", key)[0]: struct.unpack_from("<II", value)[1] for key, value in inner.items()}

    def counter(self, name: str, group_id: int) -> int:
        return sum(int.from_bytes(part, sys.byteorder) for part in self[name].lookup(u32(group_id)))

    def records(self) -> dict[int, dict]:
        """group id -> record, for every group directory of the set."""
        self.seen_generation()
        out = {}
        groups = os.path.join(self.directory, GROUPS_DIR)
        listed = _session.dump((_pins.PIN_DIRS, groups),
                               lambda: sorted(os.listdir(groups)) if os.path.isdir(groups) else [])
        for entry in listed:
            record = _pins.Record(os.path.join(groups, entry, "owner")).read()
            if record and entry.isdigit():
                out[int(entry)] = record
        return out


def group_pins(set_dir: str, pin_root: str, group_id: int) -> _pins.PinDir:
    return _pins.PinDir(pin_root, os.path.join(set_dir, GROUPS_DIR, str(group_id)))


def read_groups(set_dir: str, name: str) -> list[dict]:
    """Every group of a map set as the facts show it (interface names from the current namespace)."""
    return read_set(set_dir, name)[0]


def read_set(set_dir: str, name: str) -> tuple[list[dict], dict[int, dict]]:
    """read_groups()'s groups, and the records of the managed ones by id (what ebpf.xdp.datapath gathers)."""
    with MapSet(set_dir, name) as mset:
        records = mset.records()
        state = mset.state()
        by_group = {}
        for address, group_id in state.addresses.items():
            by_group.setdefault(group_id, []).append(address)
        out = []
        for group_id in state.group_ids():
            members = state.members[group_id]
            flags, _count = state.config[group_id]
            record = records.get(group_id, {})
            out.append({
                "id": group_id, "name": record.get("name"),
                "members": [{"name": interface_name(i), "ifindex": i} for i in sorted(members)],
                "addresses": sorted(by_group.get(group_id, []), key=address_order),
                "exclude_ingress": bool(flags & EXCLUDE_INGRESS),
                "egress_program": (record.get("egress") or {}).get("program_name"),
                **({"egress_section": record["egress"]["section"]}
                   if (record.get("egress") or {}).get("section") else {}),
                "frames": mset.counter("mcast_frames", group_id),
                "copies": mset.counter("mcast_copies", group_id),
                "owner": "ebpf.xdp" if record else "unmanaged",
            })
        return out, records


def map_sets(pin_root: str, netns_key: str) -> dict[str, str]:
    """name -> directory of the map sets of a namespace that hold multicast groups (an mcast_groups map)."""
    root = os.path.join(pin_root, netns_key, _pins.SHARED_MAPS)
    if not os.path.isdir(root):
        return {}
    return {name: os.path.join(root, name) for name in sorted(os.listdir(root))
            if os.path.exists(os.path.join(root, name, "mcast_groups"))}


# ---------------------------------------------------------------- converging one group


def half_changed(exc: Exception, failed: list[str]) -> GroupError:
    """A failed write whose undo failed too (host/journal's half_done)."""
    return GroupError("%s; undoing the writes before it failed too, the group may be half changed: %s"
                      % (exc, "; ".join(failed)))


def restore_value(target: _bpf.Map, key: bytes, old: bytes) -> None:
    """Write back a value as a lookup answered it: programs and inner maps come back as ids, go in as fds."""
    if target.info["type"] == "devmap_hash":
        ifindex, prog_id = struct.unpack_from("<II", old)
        if not prog_id:
            target.update(key, member_value(ifindex))
            return
        with _bpf.Program.from_id(prog_id) as prog:
            target.update(key, member_value(ifindex, prog.fd))
    elif target.info["type"] == "hash_of_maps":
        with _bpf.Map.from_id(struct.unpack_from("<I", old)[0]) as inner:
            target.update(key, struct.pack("<i", inner.fd))
    else:
        target.update(key, old)


def put(journal: Journal, target: _bpf.Map, key: bytes, value: bytes, flags: int = _bpf.BPF_ANY) -> None:
    old = target.lookup(key)
    target.update(key, value, flags)
    if old is None:
        journal.did(lambda: target.delete(key))
    else:
        journal.did(lambda: restore_value(target, key, old))


def delete(journal: Journal, target: _bpf.Map, key: bytes) -> None:
    old = target.lookup(key)
    if target.delete(key) and old is not None:
        journal.did(lambda: restore_value(target, key, old))


def pin_program(journal: Journal, pins: _pins.PinDir, prog: _bpf.Program | None, drop: bool) -> None:
    """Pin a newly loaded egress program in place of the old one, or (drop) unpin the old one; the undo
    pins the old program back (held open meanwhile, so it lives)."""
    if prog is None and not (drop and os.path.exists(pins.prog_path)):
        return
    old = journal.hold(_bpf.Program.from_pin(pins.prog_path)) if os.path.exists(pins.prog_path) else None
    if prog is not None:
        pins.replace_pin(prog, pins.prog_path)
    else:
        os.unlink(pins.prog_path)
    journal.did(lambda: pins.replace_pin(old, pins.prog_path) if old is not None else os.unlink(pins.prog_path))


def write_record(journal: Journal, pins: _pins.PinDir, record: dict, old: dict | None) -> None:
    """Write the group's record (old: as the run read it, under the set's lock); an unchanged one is left."""
    if old is not None and json.dumps(old, sort_keys=True).encode("utf-8") == _pins.Record.encode(record):
        return
    pins.record.write(record)
    journal.did(lambda: pins.record.write(old) if old is not None else pins.record.remove())


@dataclasses.dataclass
class Desired:
    """A devmap_group task, normalized."""

    name: str | None
    group_id: int | None
    shared_maps: str
    state: str
    members: list[str]
    addresses: list[str]
    exclude_ingress: bool | None  # None: an existing group keeps its setting, a new one excludes
    exclusive: bool
    egress: dict | None  # None: no egress program, unless keep_egress
    keep_egress: bool = False  # egress_program omitted (without exclusive): the group keeps the one it has

    @classmethod
    def from_params(cls, params: dict) -> Desired:
        group_id = params.get("id")
        if group_id is not None:
            check_id(group_id)
        seen = []
        for address in params.get("addresses") or []:
            normal = normalize_address(address)
            if normal not in seen:
                seen.append(normal)
        members = []
        for member in params.get("members") or []:
            if member not in members:
                members.append(member)
        egress = params.get("egress_program")
        exclusive = params.get("exclusive", False)
        # Omitted: kept, as members and addresses are (exclusive: removed). {} removes it.
        keep_egress = egress is None and not exclusive
        if egress is not None and not any(egress.values()):
            egress = None
        elif egress is not None and not egress.get("object"):
            raise GroupError("egress_program needs an object (and optionally a program or a section); "
                             "egress_program: {} removes the group's egress program")
        return cls(name=params.get("name"), group_id=group_id, shared_maps=params.get("shared_maps") or
                   DEFAULT_SHARED_MAPS, state=params.get("state", "present"), members=members, addresses=seen,
                   exclude_ingress=params.get("exclude_ingress"), exclusive=exclusive, egress=egress,
                   keep_egress=keep_egress)


def describe(group_id, name, members: dict[int, int] | None, addresses, flags: int, egress: dict | None) -> dict:
    """A group's state as results and diffs show it; {"present": False} for none."""
    if members is None:
        return {"present": False}
    return {"present": True, "id": group_id, "name": name,
            "members": sorted(interface_name(i) for i in members),
            "addresses": sorted(addresses, key=address_order),
            "exclude_ingress": bool(flags & EXCLUDE_INGRESS),
            "egress_program": asked_egress(egress) if egress else None}


def asked_egress(egress: dict) -> dict:
    """An egress program as a task names it: its object, and its function name or (as iproute2's `sec`) its
    section; one way only, so that fed back it names the program as it was asked for."""
    if egress.get("section"):
        return {"object": egress.get("object"), "section": egress["section"]}
    return {"object": egress.get("object"), "program": egress.get("program")}


class GroupManager:
    """Converges one group of a map set to a Desired state; run it inside the group's namespace."""

    def __init__(self, desired: Desired, pin_root: str, netns_key: str, check_mode: bool):
        self.desired = desired
        self.pin_root = pin_root
        self.netns_key = netns_key
        self.check_mode = check_mode
        self.set_dir = _pins.shared_maps_dir(pin_root, netns_key, desired.shared_maps)
        self.warnings: list[str] = []
        self.no_native_redirect: list[str] = []
        # Whether the run left the set written (a change made, or a failed one not wholly undone): other runs
        # are told (the set lock's generation); a failure undone leaves the set, and its lock, as they were.
        self.wrote_set = False

    # ------------------------------------------------------------ which group

    def find(self, mset: MapSet) -> tuple[int | None, dict | None]:
        """(group id, its record): the task's group; id None for a new named group in check of absent."""
        w = self.desired
        records = mset.records()
        by_name = {r.get("name"): gid for gid, r in records.items() if r.get("name")}
        existing = set(mset.state().group_ids())
        if w.group_id is not None:
            if w.name and w.name in by_name and by_name[w.name] != w.group_id:
                raise GroupError("group %s has id %d in map set %s, not %d; name the group by its id or "
                                 "remove it first" % (w.name, by_name[w.name], w.shared_maps, w.group_id))
            record = records.get(w.group_id)
            if record and w.name and record.get("name") not in (None, w.name):
                raise GroupError("group id %d of map set %s is group %s, not %s"
                                 % (w.group_id, w.shared_maps, record.get("name"), w.name))
            group_id = w.group_id
        elif w.name in by_name:
            group_id = by_name[w.name]
            record = records[group_id]
        else:
            if w.state == "absent":
                return None, None
            group_id = lowest_free_id(existing | set(records))
            record = None
        if group_id in existing and record is None:
            raise GroupError("group id %d is in map set %s but ebpf.xdp.devmap_group did not create it (no record "
                             "in %s); leave it alone or remove it from mcast_groups by hand, and use another id"
                             % (group_id, w.shared_maps, group_pins(self.set_dir, self.pin_root, group_id).directory))
        return group_id, record

    # ------------------------------------------------------------ run

    def run(self, held: _pins.HeldLock | None = None) -> dict:
        """The group converged; held: the set's lock, when this run holds it (outside check mode)."""
        w = self.desired
        if not all(os.path.exists(os.path.join(self.set_dir, m)) for m in MAPS):
            if w.state == "absent":
                return self._result(False, None, None, {"present": False}, {"present": False}, {}, [])
            if self.check_mode:
                self.warnings.append("map set %s does not exist yet in %s; the group would be created once the "
                                     "multicast program is attached with shared_maps: %s"
                                     % (w.shared_maps, self.set_dir, w.shared_maps))
                return self._result(True, w.group_id, w.name, {"present": False}, {"present": True}, {}, [])
        with MapSet(self.set_dir, w.shared_maps) as mset:
            if held is not None:
                mset.catch_up(held)  # before the id is chosen: another run may have taken it since our read
            group_id, record = self.find(mset)
            state = mset.state()
            members = state.group(group_id)
            addresses = {a for a, g in state.addresses.items() if g == group_id}
            # An id that is no group's (a new group's) has what its removal wrote, or nothing yet.
            flags, count = state.config[group_id] if members is not None else \
                mset.config(group_id) if group_id else (0, 0)
            egress = (record or {}).get("egress")
            before = describe(group_id, (record or {}).get("name"), members, addresses, flags, egress)
            try:
                if w.state == "absent":
                    result = self._absent(mset, group_id, record, members, addresses, before)
                else:
                    result = self._present(mset, group_id, record, members or {}, addresses, (flags, count), before)
            except Exception:
                if not self.check_mode:
                    # Whatever was written and put back, this run's next read sees it.
                    mset.wrote(held if self.wrote_set else None)
                raise
            if (result["changed"] or self.wrote_set) and not self.check_mode:
                mset.wrote(held)
            return result

    def _result(self, changed, group_id, name, before, after, members: dict, addresses) -> dict:
        return {"changed": changed, "id": group_id, "name": name, "shared_maps": self.desired.shared_maps,
                "members": [{"name": n, "ifindex": i} for n, i in sorted(members.items())],
                "addresses": sorted(addresses, key=address_order),
                "exclude_ingress": after.get("exclude_ingress"),
                "egress_program": after.get("egress_program"),
                "pin_dir": group_pins(self.set_dir, self.pin_root, group_id).directory if group_id else None,
                "no_native_redirect": self.no_native_redirect,
                "diff": {"before": before, "after": after}}

    # ------------------------------------------------------------ absent

    def _absent(self, mset, group_id, record, members, addresses, before) -> dict:
        name = (record or {}).get("name") or self.desired.name
        pins = group_pins(self.set_dir, self.pin_root, group_id) if group_id else None
        if members is None and not (pins and pins.exists()):
            return self._result(False, group_id, name, before, before, {}, [])
        if not self.check_mode:
            with Journal() as journal:
                journal.run(lambda: self._remove_group(mset, journal, group_id, members or {}, addresses),
                            self._half_changed)
            self.wrote_set = True
            pins.remove()
        return self._result(True, group_id, name, before, {"present": False}, {}, [])

    def _remove_group(self, mset, journal, group_id, members, addresses) -> None:
        """In reverse of adding: addresses, the group, its settings; the devmap goes with its last reference."""
        for address in addresses:
            delete(journal, mset["mcast_addrs"], address_key(address))
        # Held until the end, so that an undo can put the very same devmap back.
        inner = mset["mcast_groups"].inner(u32(group_id))
        if inner is not None:
            journal.hold(inner)
            delete(journal, mset["mcast_groups"], u32(group_id))
        put(journal, mset["mcast_config"], u32(group_id), config_value(0, 0))
        self._drop_port_macs(mset, journal, set(members), group_id)

    # ------------------------------------------------------------ present

    def _present(self, mset, group_id, record, members, addresses, config, before) -> dict:
        w = self.desired
        listed = resolve_members(w.members, self.netns_key)
        names = {i: n for n, i in listed.items()}
        want_members = merge(members, listed.values(), w.exclusive)
        for ifindex in want_members:
            names.setdefault(ifindex, interface_name(ifindex))
        if len(want_members) > MAX_MEMBERS:
            raise GroupError("group would have %d members; a group holds at most %d"
                             % (len(want_members), MAX_MEMBERS))
        want_addresses = merge(addresses, w.addresses, w.exclusive)
        state = mset.state()
        owners = state.addresses
        taken = sorted(a for a in want_addresses if owners.get(a, group_id) != group_id)
        if taken:
            raise GroupError("address %s already belongs to group %d of map set %s; remove it there first"
                             % (taken[0], owners[taken[0]], w.shared_maps))
        new_addresses = want_addresses - addresses
        room = state.address_capacity - len(owners)
        if len(new_addresses) > room:
            raise GroupError("map set %s has room for %d more addresses, not %d"
                             % (w.shared_maps, room, len(new_addresses)))
        exclude = w.exclude_ingress
        if exclude is None:
            exclude = bool(config[0] & EXCLUDE_INGRESS) if before.get("present") else True
        flags = EXCLUDE_INGRESS if exclude else 0
        egress, load_egress, renamed = self._egress_plan(group_id, record)
        name = w.name or (record or {}).get("name")
        if egress and _kernel.generic_broadcast_shares_buffer():
            generic = _pins.generic_xdp_users(self.pin_root, self.netns_key, w.shared_maps)
            if generic:
                raise GroupError(_kernel.generic_egress_refusal(
                    "group %s of map set %s with egress program %s" % (
                        name or group_id, w.shared_maps, egress.get("program") or egress.get("section")
                        or egress.get("program_name")), generic))
        after = describe(group_id, name, dict.fromkeys(want_members, 0), want_addresses, flags, egress)
        # The program the group has, named the other way (function or section): no change by itself, as for an
        # attached program; the record learns how the task names it.
        as_before = describe(group_id, name, dict.fromkeys(want_members, 0), want_addresses, flags,
                             record["egress"]) if renamed else after
        problems = redirect_problems({ifindex: names[ifindex] for ifindex in want_members})
        self.no_native_redirect = sorted(problems)
        self.warnings.extend(problems[name] for name in self.no_native_redirect)
        exists = bool(record) and state.group(group_id) is not None
        prog_id = (egress or {}).get("prog_id", 0)
        changed = (not exists or load_egress or before != as_before or config != (flags, len(want_members))
                   or any(members[i] != prog_id for i in want_members if i in members)
                   or (record or {}).get("name") != name)
        result_members = {names[i]: i for i in want_members}
        if changed:
            # The largest record this group can get must fit before anything is loaded or written.
            self._encode_record(group_id, name, dict(egress, **WIDEST_EGRESS) if egress else None)
        if not changed and renamed and not self.check_mode:
            self.wrote_set = True
            group_pins(self.set_dir, self.pin_root, group_id).record.write(
                self._encode_record(group_id, name, egress))
        if not changed:
            return self._result(False, group_id, name, before, before, result_members, want_addresses)
        if self.check_mode:
            return self._result(True, group_id, name, before, after, result_members, want_addresses)
        pins = group_pins(self.set_dir, self.pin_root, group_id)
        with Journal() as journal:
            created = pins.make(maps=False)
            if not exists:
                journal.did(functools.partial(pins.undo, created), "group %d's directory" % group_id)

            def work():
                prog = None
                if load_egress:
                    loaded = journal.hold(self._load_egress(egress))
                    prog = loaded.program
                elif egress:
                    prog = journal.hold(_bpf.Program.from_id(egress["prog_id"]))
                new_record = self._encode_record(group_id, name, egress)
                self._write(mset, journal, group_id, exists, members, want_members, addresses, want_addresses,
                            flags, prog)
                # Inside the journal: a failed pin or record write puts the maps back, so they never hold a group
                # whose record says otherwise (or that has none).
                pin_program(journal, pins, prog if load_egress else None, drop=egress is None)
                write_record(journal, pins, new_record, record)

            journal.run(work, self._half_changed)
        self.wrote_set = True
        return self._result(True, group_id, name, before, after, result_members, want_addresses)

    def _half_changed(self, exc: Exception, failed: list[str]) -> GroupError:
        self.wrote_set = True  # what the undo could not put back stays written
        return half_changed(exc, failed)

    def _encode_record(self, group_id: int, name: str | None, egress: dict | None) -> dict:
        """The group's record, once _pins.Record can store it."""
        record = {"id": group_id, "name": name, "shared_maps": self.desired.shared_maps, "egress": egress}
        try:
            _pins.Record.encode(record)
        except _pins.PinError as exc:
            raise GroupError("group %s: %s; give it a shorter name (or a shorter egress object path)"
                             % (name or group_id, exc)) from exc
        return record

    def _egress_plan(self, group_id, record) -> tuple[dict | None, bool, bool]:
        """(the egress program the group should have, whether it must be loaded, whether it is the program the
        group has named the other way: by function name instead of section, or the other way round)."""
        spec = self.desired.egress
        current = (record or {}).get("egress") or {}
        pinned = group_pins(self.set_dir, self.pin_root, group_id).prog_path
        if not spec and self.desired.keep_egress and current:
            if os.path.exists(pinned):
                with _bpf.Program.from_pin(pinned) as prog:
                    if prog.info()["id"] == current.get("prog_id"):
                        return current, False, False
            # Kept, but its pin is gone: loaded again from the object the record names, chosen as it was.
            spec = {k: current.get(k) for k in ("object", "program", "section")}
        if not spec:
            return None, False, False
        path = spec["object"]
        if self.check_mode and not os.path.isfile(path):
            self.warnings.append("object %s does not exist yet; its egress program would be loaded once it "
                                 "does" % path)
            return {"object": path, "program": spec.get("program"), "section": spec.get("section")}, True, False
        _loader.require_object(path)
        desired = {"object": path, "object_sha256": sha256_file(path), "program": spec.get("program"),
                   "section": spec.get("section")}
        selected = None
        named = current.get("program") == desired["program"] and current.get("section") == desired["section"]
        same = all(current.get(k) == desired[k] for k in ("object", "object_sha256"))
        if self.check_mode or not named or not same:
            # Opening is not loading: a file that is no BPF object, no such program or section, or a section of
            # several programs is refused before anything changes and before what this kernel refuses, in a
            # run as in check mode (an object to be loaded is opened first in both).
            with _bpf.BpfObject(path) as obj:
                selected = _loader.select_program(obj, desired["program"], "xdp", devmap=True,
                                                  section=desired["section"])
        if same and (named or selected == current.get("program_name")) and os.path.exists(pinned):
            with _bpf.Program.from_pin(pinned) as prog:
                if prog.info()["id"] == current.get("prog_id"):
                    return (current, False, False) if named else (dict(current, **desired), False, True)
        return desired, True, False

    def _load_egress(self, egress: dict) -> _loader.Loaded:
        """Load the egress program over the set's maps (it reads mcast_port_mac); egress learns its id and tag."""
        loaded = _loader.load(egress["object"], egress.get("program"), "xdp", maps_dir=self.set_dir, devmap=True,
                              section=egress.get("section"))
        egress.update(program_name=loaded.name, prog_id=loaded.info["id"], tag=loaded.info["tag"])
        return loaded

    def _write(self, mset, journal, group_id, exists, members, want_members, addresses, want_addresses, flags,
               prog) -> None:
        """Add, then change, then remove: the members that stay never miss a frame."""
        prog_fd = prog.fd if prog is not None else 0
        prog_id = prog.info()["id"] if prog is not None else 0
        key = u32(group_id)
        if prog is not None:
            for ifindex in sorted(want_members):
                put(journal, mset["mcast_port_mac"], u32(ifindex), interface_mac(interface_name(ifindex)))
        if not exists:
            inner = journal.hold(_bpf.Map.create(_bpf.BPF_MAP_TYPE_DEVMAP_HASH, "mcast_g%d" % group_id, 4, 8,
                                                 MAX_MEMBERS))
            for ifindex in sorted(want_members):
                inner.update(u32(ifindex), member_value(ifindex, prog_fd), _bpf.BPF_NOEXIST)
            put(journal, mset["mcast_config"], key, config_value(flags, len(want_members)))
            for counter in ("mcast_frames", "mcast_copies"):
                mset[counter].update(key, b"")  # a reused id starts from zero
            put(journal, mset["mcast_groups"], key, struct.pack("<i", inner.fd), _bpf.BPF_NOEXIST)
        else:
            inner = journal.hold(mset["mcast_groups"].inner(key))
            for ifindex in sorted(want_members - set(members)):
                put(journal, inner, u32(ifindex), member_value(ifindex, prog_fd), _bpf.BPF_NOEXIST)
            for ifindex in sorted(want_members & set(members)):
                if members[ifindex] != prog_id:
                    put(journal, inner, u32(ifindex), member_value(ifindex, prog_fd), _bpf.BPF_EXIST)
            gone = set(members) - want_members
            # While members that go are still in the devmap, the count covers them too (written again below).
            put(journal, mset["mcast_config"], key, config_value(flags, len(want_members | gone)))
        for address in sorted(want_addresses - addresses, key=address_order):
            put(journal, mset["mcast_addrs"], address_key(address), key, _bpf.BPF_NOEXIST)
        for address in sorted(addresses - want_addresses, key=address_order):
            delete(journal, mset["mcast_addrs"], address_key(address))
        if exists and gone:
            for ifindex in sorted(gone):
                delete(journal, inner, u32(ifindex))
            put(journal, mset["mcast_config"], key, config_value(flags, len(want_members)))
            self._drop_port_macs(mset, journal, gone, group_id)

    def _drop_port_macs(self, mset, journal, ports, group_id) -> None:
        """A port's MAC entry goes when no other group of the set has the port as a member."""
        if not ports:
            return
        still = set()
        for other in mset.group_ids():
            if other != group_id:
                still |= set(mset.members(other) or {})
        for ifindex in sorted(set(ports) - still):
            delete(journal, mset["mcast_port_mac"], u32(ifindex))


def converge(params: dict, check_mode: bool) -> tuple[dict, list[str]]:
    """devmap_group's work: in the namespace, under the map set's lock (outside check mode); (result, warnings)."""
    desired = Desired.from_params(params)
    with _netns.netns(params.get("netns")):
        key = _netns.netns_key(params.get("netns"))
        manager = GroupManager(desired, params["pin_root"], key, check_mode)
        if check_mode:
            result = manager.run()
        elif not os.path.isdir(manager.set_dir):
            # No such set: run() answers (nothing to remove, or "attach the multicast program first") without
            # a lock, whose file would stay behind for a set that does not exist.
            _pins.check_bpffs(params["pin_root"])
            result = manager.run()
        else:
            _pins.check_bpffs(params["pin_root"])
            # The set's lock: attachments loading into the set, other groups' id choices and writes wait.
            with _pins.lock(key, _pins.shared_maps_lock(desired.shared_maps)) as held:
                result = manager.run(held)
    return dict(result, netns=params.get("netns")), manager.warnings
