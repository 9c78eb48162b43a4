"""files/bpf/xdp_multicast.bpf.c and xdp_redirect_map.bpf.c on real veth ports.

A switch namespace holds ports p0..pN-1; their peers h0..hN-1 (the hosts'
ends) sit together in a second namespace. xdp_multicast runs on every
switch port; each host end runs an xdp_drop_count of its own (XDP_PASS),
which counts what arrives there: a native redirect into a veth needs an XDP
program on the peer. Groups, members and addresses change the way a
manager changes them: writes to the pinned maps, the program left running.
"""

import contextlib
import ipaddress
import os
import socket
import struct
import subprocess
import threading
import uuid

import pytest

from conftest import BPF_DIR, compile_bpf, sh
from kernel_features import features
from test_tc_redirect_programs import eventually, rx_packets

from ansible_collections.ebpf.xdp.plugins.module_utils import _facts
from ansible_collections.ebpf.xdp.plugins.module_utils.host import netns as _netns
from ansible_collections.ebpf.xdp.plugins.module_utils.bpf import libbpf as _bpf, loader as _loader
from ansible_collections.ebpf.xdp.plugins.module_utils.traffic import frames as _frames

XDP_PASS, XDP_REDIRECT = 2, 4
MODES = {"native": _bpf.XDP_FLAGS_DRV_MODE, "generic": _bpf.XDP_FLAGS_SKB_MODE}
BPF_MAP_TYPE_DEVMAP = 14
BPF_MAP_TYPE_DEVMAP_HASH = 25
ETH_P_ALL = 0x0003

# The layout of include/mcast_groups.h.
MCAST_KEY_MAC, MCAST_KEY_IPV4, MCAST_KEY_IPV6 = 1, 4, 6
MCAST_GROUP_EXCLUDE_INGRESS = 1
MCAST_MAX_MEMBERS = 64
MCAST_MAPS = ["mcast_groups", "mcast_addrs", "mcast_config", "mcast_frames", "mcast_copies", "mcast_port_mac"]

BROADCAST = "ff:ff:ff:ff:ff:ff"
SRC_IP = "10.98.0.1"


@pytest.fixture(scope="module")
def mcast_obj(tmp_path_factory):
    return compile_bpf(os.path.join(BPF_DIR, "xdp_multicast.bpf.c"),
                       tmp_path_factory.mktemp("mcast") / "xdp_multicast.o", [os.path.join(BPF_DIR, "include")])


@pytest.fixture(scope="module")
def redirect_map_obj(tmp_path_factory):
    return compile_bpf(os.path.join(BPF_DIR, "xdp_redirect_map.bpf.c"),
                       tmp_path_factory.mktemp("rmap") / "xdp_redirect_map.o", [os.path.join(BPF_DIR, "include")])


def u32(value):
    return struct.pack("<I", value)


def mcast_key(address):
    """struct mcast_key for an IP address or a MAC."""
    if address.count(":") == 5 and "::" not in address:
        return u32(MCAST_KEY_MAC) + _frames.mac_bytes(address).ljust(16, b"\0")
    ip = ipaddress.ip_address(address)
    return u32(MCAST_KEY_IPV4 if ip.version == 4 else MCAST_KEY_IPV6) + ip.packed.ljust(16, b"\0")


def arp_broadcast(src_mac):
    """An ARP request for an address nobody has."""
    arp = struct.pack("!HHBBH6s4s6s4s", 1, 0x0800, 6, 4, 1, _frames.mac_bytes(src_mac),
                      socket.inet_aton(SRC_IP), b"\0" * 6, socket.inet_aton("10.98.0.254"))
    return (_frames.mac_bytes(BROADCAST) + _frames.mac_bytes(src_mac) + struct.pack("!H", 0x0806) + arp).ljust(60, b"\0")


def subprocess_input(argv, text):
    subprocess.run(argv, input=text, check=True, capture_output=True, text=True)


class Ports:
    """A switch namespace with ports p0..pN-1 whose peers h0..hN-1 share a hosts namespace; no IPv6."""

    def __init__(self, count):
        tag = uuid.uuid4().hex[:6]
        self.sw, self.hosts = "mc%s-sw" % tag, "mc%s-hosts" % tag
        self.count = count
        self.port_macs = ["02:00:00:bb:00:%02x" % i for i in range(count)]
        self.host_macs = ["02:00:00:cc:00:%02x" % i for i in range(count)]
        self.ifindex = []

    def up(self):
        for ns in (self.sw, self.hosts):
            sh("ip", "netns", "add", ns)
            sh("ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1",
               "net.ipv6.conf.default.disable_ipv6=1")
        batch = "".join("link add p%d netns %s address %s type veth peer name h%d netns %s address %s\n" % (
            i, self.sw, self.port_macs[i], i, self.hosts, self.host_macs[i]) for i in range(self.count))
        subprocess_input(["ip", "-batch", "-"], batch)
        for ns, prefix in ((self.sw, "p"), (self.hosts, "h")):
            subprocess_input(["ip", "-n", ns, "-batch", "-"],
                             "".join("link set %s%d up\n" % (prefix, i) for i in range(self.count)))
        with _netns.netns(self.sw):
            self.ifindex = [_netns.ifindex("p%d" % i) for i in range(self.count)]

    def down(self):
        for ns in (self.sw, self.hosts):
            sh("ip", "netns", "del", ns, check=False)


@contextlib.contextmanager
def ports_up(count):
    ports = Ports(count)
    try:
        ports.up()
        yield ports
    finally:
        ports.down()


class Switch:
    """xdp_multicast on every port, an xdp_drop_count on every host end, maps pinned in maps_dir."""

    def __init__(self, ports, loaded, links, hosts, maps_dir, stack):
        self.ports = ports
        self.loaded = loaded
        self.links = links
        self.hosts = hosts
        self.maps = {name: stack.enter_context(_bpf.Map.from_pin(os.path.join(maps_dir, name))) for name in MCAST_MAPS}

    # ---- what a manager writes

    def add_group(self, group, members, exclude_ingress=True, addresses=(), egress=None):
        """A new DEVMAP_HASH for the group: members, then settings, then the group, then its addresses.

        Members are keyed by their ifindex; egress maps some of them to the program their copies go through.
        """
        egress = egress or {}
        with _bpf.Map.create(BPF_MAP_TYPE_DEVMAP_HASH, "mcast_g%d" % group, 4, 8, MCAST_MAX_MEMBERS) as inner:
            with _netns.netns(self.ports.sw):  # a devmap resolves ifindexes in the writer's namespace
                for port in members:
                    ifindex = self.ports.ifindex[port]
                    prog_fd = egress[port].fd if port in egress else 0
                    inner.update(u32(ifindex), struct.pack("<Ii", ifindex, prog_fd))
            self.maps["mcast_config"].update(u32(group), struct.pack("<HH", MCAST_GROUP_EXCLUDE_INGRESS if exclude_ingress
                                                                     else 0, len(members)))
            self.maps["mcast_groups"].update(u32(group), struct.pack("<i", inner.fd))
        for address in addresses:
            self.maps["mcast_addrs"].update(mcast_key(address), u32(group))

    def members(self, group):
        """The group's devmap, found through the outer map (a lookup answers the inner map's id)."""
        inner_id = struct.unpack("<I", self.maps["mcast_groups"].lookup(u32(group)))[0]
        return _bpf.Map.from_id(inner_id)

    def remove_member(self, group, port):
        with self.members(group) as inner:
            assert inner.delete(u32(self.ports.ifindex[port]))
            flags = struct.unpack("<HH", self.maps["mcast_config"].lookup(u32(group)))[0]
            self.maps["mcast_config"].update(u32(group), struct.pack("<HH", flags, len(inner.keys())))

    # ---- what the ports saw

    def received(self, port):
        with self.hosts[port].open_map("proto_count") as counters:
            return _facts.read_counters(counters)

    def all_received(self):
        return [self.received(port) for port in range(self.ports.count)]

    def counters(self):
        return {name: _facts.read_counters(self.maps[name]) for name in ("mcast_frames", "mcast_copies")}

    def send(self, port, frames, count):
        with _netns.netns(self.ports.hosts):
            sent, _seconds = _frames.send("h%d" % port, frames, count, rate=20000)
        assert set(sent.values()) == {count}, sent


def counting_hosts(ports, drop_obj, stack, bare=()):
    """An xdp_drop_count (XDP_PASS) of its own on every host end but the bare ones, natively: it lets native
    redirects in."""
    hosts = []
    with _netns.netns(ports.hosts):
        for port in range(ports.count):
            if port in bare:
                hosts.append(None)
                continue
            loaded = stack.enter_context(_loader.load(drop_obj, "xdp_drop_count", "xdp", {"xdp_action": XDP_PASS}))
            stack.enter_context(_bpf.Link.create(loaded.program, _netns.ifindex("h%d" % port), _bpf.BPF_XDP,
                                                 _bpf.XDP_FLAGS_DRV_MODE))
            hosts.append(loaded)
    return hosts


@contextlib.contextmanager
def switch(ports, mcast_obj, drop_obj, mode, maps_dir, constants=None, bare=()):
    os.makedirs(maps_dir)
    with contextlib.ExitStack() as stack:
        hosts = counting_hosts(ports, drop_obj, stack, bare)
        loaded = stack.enter_context(_loader.load(mcast_obj, "xdp_multicast", "xdp", constants, maps_dir=maps_dir))
        with _netns.netns(ports.sw):
            links = [stack.enter_context(_bpf.Link.create(loaded.program, ifindex, _bpf.BPF_XDP, MODES[mode]))
                     for ifindex in ports.ifindex]
            assert {_bpf.xdp_query(ifindex)["mode"] for ifindex in ports.ifindex} == {mode}
        yield Switch(ports, loaded, links, hosts, maps_dir, stack)


def udp_to(ports, port, group_ip, group_mac):
    return _frames.build_frame("udp", ports.host_macs[port], group_mac, SRC_IP, group_ip)


# ---------------------------------------------------------------- the object and the maps the kernel takes


def test_the_object_has_the_ingress_and_egress_programs_and_the_group_maps(mcast_obj):
    with _bpf.BpfObject(mcast_obj) as obj:
        assert obj.programs() == [{"name": "xdp_multicast", "section": "xdp", "type": "xdp"},
                                  {"name": "xdp_egress_mac", "section": "xdp/devmap", "type": "xdp"}]
        maps = {m["name"]: m for m in obj.maps()}
    assert sorted(maps) == sorted(MCAST_MAPS)
    assert maps["mcast_groups"] == {"name": "mcast_groups", "type": "hash_of_maps", "key_size": 4, "value_size": 4,
                                    "max_entries": 256}
    assert maps["mcast_addrs"]["key_size"] == 20 and maps["mcast_config"]["value_size"] == 4


def test_the_outer_map_takes_devmap_hash_groups_only(mcast_obj):
    """The kernel compares an inner map with the template in BTF: type, key, value and flags; not its size."""
    with _loader.load(mcast_obj, "xdp_multicast", "xdp") as one, _loader.load(mcast_obj, "xdp_multicast", "xdp") as two, \
            one.open_map("mcast_groups") as outer, two.open_map("mcast_groups") as other_outer:
        accepted = {
            "devmap_hash, 64 members": (BPF_MAP_TYPE_DEVMAP_HASH, 4, 8, 64),
            "devmap_hash, 8 members": (BPF_MAP_TYPE_DEVMAP_HASH, 4, 8, 8),
        }
        refused = {
            "devmap_hash without a program fd": (BPF_MAP_TYPE_DEVMAP_HASH, 4, 4, 64),
            "devmap (an array)": (BPF_MAP_TYPE_DEVMAP, 4, 8, 64),
        }
        for group, (name, spec) in enumerate(list(accepted.items()) + list(refused.items()), start=1):
            with _bpf.Map.create(spec[0], "mcast_g%d" % group, *spec[1:]) as inner:
                if name in refused:
                    with pytest.raises(_bpf.BpfError, match="Invalid argument"):
                        outer.update(u32(group), struct.pack("<i", inner.fd))
                    continue
                outer.update(u32(group), struct.pack("<i", inner.fd))
                # One group's devmap can be in several outer maps (one per attachment).
                other_outer.update(u32(group), struct.pack("<i", inner.fd))
                inner_id = inner.info["id"]
            # The outer maps keep it alive; from user space a lookup answers its id.
            assert outer.lookup(u32(group)) == u32(inner_id) == other_outer.lookup(u32(group))
            with _bpf.Map.from_id(inner_id) as again:
                assert again.info["type"] == "devmap_hash"
        assert sorted(outer.keys()) == [u32(1), u32(2)]


def test_classification_by_address_then_mac_then_default(mcast_obj):
    """BPF_PROG_TEST_RUN: which group each kind of frame goes to (the redirect itself needs real ports)."""
    src = "02:00:00:cc:00:01"
    frames = {
        "ipv4 group address": (_frames.build_frame("udp", src, "01:00:5e:01:01:01", SRC_IP, "239.1.1.1"), 1),
        "ipv4 group address, 802.1Q": (_frames.build_frame("udp", src, "01:00:5e:01:01:01", SRC_IP, "239.1.1.1",
                                                           vlan=5), 1),
        "ipv6 group address": (_frames.build_frame("udp", src, "33:33:00:01:00:03", "fd00::1", "ff0e::1:3"), 2),
        "unlisted address, listed MAC": (_frames.build_frame("udp", src, "01:00:5e:02:02:02", SRC_IP, "239.2.2.2"), 3),
        "broadcast MAC, group without devmap": (arp_broadcast(src), 0),
        "group id out of range": (_frames.build_frame("udp", src, "01:00:5e:07:07:07", SRC_IP, "239.7.7.7"), 0),
        "listed unicast address": (_frames.build_frame("udp", src, "02:00:00:cc:00:02", SRC_IP, "10.98.0.2"), 0),
        "unlisted": (_frames.build_frame("tcp", src, "02:00:00:cc:00:02", SRC_IP, "10.98.0.3"), 0),
    }
    addresses = {"239.1.1.1": 1, "ff0e::1:3": 2, "01:00:5e:02:02:02": 3, BROADCAST: 4, "239.7.7.7": 300,
                 "10.98.0.2": 1}
    with _loader.load(mcast_obj, "xdp_multicast", "xdp") as loaded, contextlib.ExitStack() as stack:
        # mcast_port_mac is the egress program's: not among this program's maps.
        maps = {name: stack.enter_context(loaded.open_map(name)) for name in MCAST_MAPS[:-1]}
        for address, group in addresses.items():
            maps["mcast_addrs"].update(mcast_key(address), u32(group))
        for group in (1, 2, 3):
            with _bpf.Map.create(BPF_MAP_TYPE_DEVMAP_HASH, "mcast_g%d" % group, 4, 8, MCAST_MAX_MEMBERS) as inner:
                maps["mcast_config"].update(u32(group), struct.pack("<HH", 0, 0))
                maps["mcast_groups"].update(u32(group), struct.pack("<i", inner.fd))
        expected = {}
        for name, (frame, group) in frames.items():
            assert loaded.program.test_run(frame, repeat=2)[0] == (XDP_REDIRECT if group else XDP_PASS), name
            expected[group] = expected.get(group, 0) + 2
        assert _facts.read_counters(maps["mcast_frames"]) == expected
        assert _facts.read_counters(maps["mcast_copies"]) == {}


# ---------------------------------------------------------------- groups on real ports


@pytest.mark.parametrize("mode", ["native", "generic"])
def test_exclude_ingress_keeps_the_sender_out_unless_the_group_says_otherwise(mcast_obj, drop_obj, pin_root, mode):
    """Group 1 (239.1.1.1) excludes the ingress; group 2 (the broadcast MAC) does not, as the
    kernel's multicast selftest expects for an ARP broadcast. p0..p2 are members of both, p3 of none."""
    n = 20
    with ports_up(4) as ports, switch(ports, mcast_obj, drop_obj, mode, os.path.join(pin_root, "maps")) as sw:
        sw.add_group(1, [0, 1, 2], exclude_ingress=True, addresses=["239.1.1.1"])
        sw.add_group(2, [0, 1, 2], exclude_ingress=False, addresses=[BROADCAST])
        unicast = _frames.build_frame("udp", ports.host_macs[0], ports.host_macs[1], SRC_IP, "10.98.0.2")
        sw.send(0, [("udp", udp_to(ports, 0, "239.1.1.1", "01:00:5e:01:01:01")), ("arp", arp_broadcast(ports.host_macs[0])),
                    ("unicast", unicast)], n)
        expected = [{0: n}, {17: n, 0: n}, {17: n, 0: n}, {}]
        assert eventually(sw.all_received, expected) == expected
        # Unicast matches no group: passed to the switch's stack, counted under group 0.
        assert sw.counters() == {"mcast_frames": {0: n, 1: n, 2: n}, "mcast_copies": {1: 2 * n, 2: 3 * n}}


@pytest.mark.parametrize("mode", ["native", "generic"])
def test_two_groups_deliver_only_to_their_own_members(mcast_obj, drop_obj, pin_root, mode):
    """p0 is in no group and feeds both; what no address names goes to default_group 3 (p5)."""
    n = 20
    with ports_up(6) as ports, \
            switch(ports, mcast_obj, drop_obj, mode, os.path.join(pin_root, "maps"), {"default_group": 3}) as sw:
        sw.add_group(1, [1, 2], addresses=["239.1.1.1"])
        sw.add_group(2, [3, 4], addresses=["ff0e::1:3"])
        sw.add_group(3, [5])
        v6 = _frames.build_frame("tcp", ports.host_macs[0], "33:33:00:01:00:03", "fd00::1", "ff0e::1:3")
        unknown = _frames.build_frame("icmp", ports.host_macs[0], "01:00:5e:09:09:09", SRC_IP, "239.9.9.9")
        sw.send(0, [("v4", udp_to(ports, 0, "239.1.1.1", "01:00:5e:01:01:01")), ("v6", v6), ("other", unknown)], n)
        expected = [{}, {17: n}, {17: n}, {6: n}, {6: n}, {1: n}]
        assert eventually(sw.all_received, expected) == expected
        assert sw.counters() == {"mcast_frames": {1: n, 2: n, 3: n}, "mcast_copies": {1: 2 * n, 2: 2 * n, 3: n}}


@pytest.mark.parametrize("mode", ["native", "generic"])
def test_removing_a_member_stops_delivery_to_it_at_once_and_only_to_it(mcast_obj, drop_obj, pin_root, mode):
    with ports_up(4) as ports, switch(ports, mcast_obj, drop_obj, mode, os.path.join(pin_root, "maps")) as sw:
        sw.add_group(1, [1, 2, 3], addresses=["239.1.1.1"])
        frame = udp_to(ports, 0, "239.1.1.1", "01:00:5e:01:01:01")
        prog_id = sw.loaded.info["id"]
        # A stream from p0 while p2 leaves the group in the middle of it.
        with _netns.netns(ports.hosts):
            sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
            sock.bind(("h0", 0))
        result = {}
        with sock:
            sender = threading.Thread(target=lambda: result.update(_frames.send_on(sock, {"udp": frame}, 3000, 10000)[0]))
            sender.start()
            try:
                assert eventually(lambda: sw.received(2).get(17, 0) > 500, True)
                sw.remove_member(1, 2)
            finally:
                sender.join()
        total = result["udp"]
        # The others missed nothing; p2 got a part, and nothing after its removal.
        assert eventually(lambda: [sw.received(1), sw.received(3)], [{17: total}] * 2) == [{17: total}] * 2
        left_at = sw.received(2)[17]
        assert 500 < left_at < total
        sw.send(0, {"udp": frame}, 20)
        expected = [{}, {17: total + 20}, {17: left_at}, {17: total + 20}]
        assert eventually(sw.all_received, expected) == expected
        with sw.members(1) as inner:
            assert sorted(inner.keys()) == sorted(u32(ports.ifindex[p]) for p in (1, 3))
        # Membership is map state: the program is the one that was attached.
        with _netns.netns(ports.sw):
            assert {_bpf.xdp_query(index)["prog_id"] for index in ports.ifindex} == {prog_id}
        assert sw.counters()["mcast_frames"] == {1: total + 20}


@pytest.mark.parametrize("mode, delivered", [("native", False), ("generic", True)])
def test_a_native_copy_into_a_veth_needs_an_xdp_program_on_the_peer(mcast_obj, drop_obj, pin_root, mode, delivered):
    """h2 runs no XDP program: native copies to p2 are lost (the program still counted them), generic ones arrive."""
    n = 10
    with ports_up(3) as ports, \
            switch(ports, mcast_obj, drop_obj, mode, os.path.join(pin_root, "maps"), bare=(2,)) as sw:
        sw.add_group(1, [1, 2], addresses=["239.1.1.1"])
        before = rx_packets(ports.hosts, "h2")
        sw.send(0, {"udp": udp_to(ports, 0, "239.1.1.1", "01:00:5e:01:01:01")}, n)
        assert eventually(lambda: sw.received(1), {17: n}) == {17: n}
        assert eventually(lambda: rx_packets(ports.hosts, "h2") - before, n if delivered else 0) == (n if delivered else 0)
        assert sw.counters()["mcast_copies"] == {1: 2 * n}


@pytest.mark.parametrize("mode", ["native", "generic"])
def test_the_egress_program_writes_each_ports_own_mac_as_the_source(mcast_obj, drop_obj, pin_root, mode):
    """p1 and p2 carry xdp_egress_mac in their devmap values, p3 does not; mcast_port_mac says each port's MAC.

    In generic mode where the kernel gives every copy one buffer (6.1: each copy a clone of one skb), each egress
    program writes into the frame every port sends: all three ports see the MAC of the egress program that ran
    last, p3 too. That is why the collection refuses egress programs in a map set with generic-mode ports there
    (test_devmap_group.py::test_generic_ports_and_egress_programs_where_copies_share_one_buffer)."""
    n = 10
    maps_dir = os.path.join(pin_root, "maps")
    with ports_up(4) as ports, switch(ports, mcast_obj, drop_obj, mode, maps_dir) as sw, \
            _loader.load(mcast_obj, "xdp_egress_mac", "xdp", maps_dir=maps_dir) as egress:
        for port in range(ports.count):
            sw.maps["mcast_port_mac"].update(u32(ports.ifindex[port]), _frames.mac_bytes(ports.port_macs[port]))
        sw.add_group(1, [1, 2, 3], addresses=["239.1.1.1"], egress={1: egress.program, 2: egress.program})
        with sw.members(1) as inner:  # read back, a value holds the program's id
            assert inner.lookup(u32(ports.ifindex[1])) == struct.pack("<II", ports.ifindex[1], egress.info["id"])
            assert inner.lookup(u32(ports.ifindex[3])) == struct.pack("<II", ports.ifindex[3], 0)
        frame = udp_to(ports, 0, "239.1.1.1", "01:00:5e:01:01:01")
        with _netns.netns(ports.hosts):
            sniffers = {port: sniffer("h%d" % port) for port in (1, 2, 3)}
        sw.send(0, {"udp": frame}, n)
        seen = {port: sources(sock, frame[12:]) for port, sock in sniffers.items()}
    if mode == "generic" and not features()["generic_egress_copy"]:
        macs = {mac for counts in seen.values() for mac in counts}
        assert len(macs) == 1 and macs <= {ports.port_macs[1], ports.port_macs[2]}, seen
        assert seen == {port: {mac: n for mac in macs} for port in (1, 2, 3)}, seen
        return
    assert seen == {1: {ports.port_macs[1]: n}, 2: {ports.port_macs[2]: n}, 3: {ports.host_macs[0]: n}}


def sniffer(ifname):
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    sock.bind((ifname, 0))
    sock.settimeout(0.3)
    return sock


def sources(sock, tail):
    """Source MACs (and how many) of arrived frames that end like `tail` (from the EtherType on)."""
    seen = {}
    with sock:
        try:
            while True:
                data, addr = sock.recvfrom(4096)
                if addr[2] != socket.PACKET_OUTGOING and data[12:12 + len(tail)] == tail:
                    mac = ":".join("%02x" % b for b in data[6:12])
                    seen[mac] = seen.get(mac, 0) + 1
        except socket.timeout:
            return seen


def test_groups_survive_a_program_replaced_over_the_same_pins(mcast_obj, drop_obj, pin_root):
    """The upgrade path: a program loaded over the pinned maps takes each link over, groups and counters included."""
    n = 10
    maps_dir = os.path.join(pin_root, "maps")
    with ports_up(3) as ports, switch(ports, mcast_obj, drop_obj, "generic", maps_dir) as sw:
        sw.add_group(1, [1, 2], addresses=["239.1.1.1"])
        frame = udp_to(ports, 0, "239.1.1.1", "01:00:5e:01:01:01")
        sw.send(0, {"udp": frame}, n)
        with _loader.load(mcast_obj, "xdp_multicast", "xdp", maps_dir=maps_dir) as again, \
                again.open_map("mcast_groups") as outer:
            assert outer.info["id"] == sw.maps["mcast_groups"].info["id"]
            assert again.info["id"] != sw.loaded.info["id"]
            for link in sw.links:
                link.update(again.program)
            new_id = again.info["id"]
        with _netns.netns(ports.sw):
            assert {_bpf.xdp_query(index)["prog_id"] for index in ports.ifindex} == {new_id}
        sw.send(0, {"udp": frame}, n)
        expected = [{}, {17: 2 * n}, {17: 2 * n}]
        assert eventually(sw.all_received, expected) == expected
        assert sw.counters() == {"mcast_frames": {1: 2 * n}, "mcast_copies": {1: 4 * n}}


def test_a_member_is_an_ifindex_of_the_writers_namespace(mcast_obj):
    """The kernel resolves a devmap value's ifindex in the namespace of the process that writes it."""
    with ports_up(1) as ports, _bpf.Map.create(BPF_MAP_TYPE_DEVMAP_HASH, "mcast_g1", 4, 8, 8) as inner:
        sh("ip", "link", "add", "far", "netns", ports.sw, "index", "54321", "type", "veth", "peer", "name", "far1",
           "netns", ports.sw)
        with pytest.raises(_bpf.BpfError, match="Invalid argument"):
            inner.update(u32(54321), struct.pack("<Ii", 54321, 0))  # no such device here
        with _netns.netns(ports.sw):
            inner.update(u32(54321), struct.pack("<Ii", 54321, 0))
        assert inner.keys() == [u32(54321)]


def test_groups_over_the_maps_xdp_program_pinned_on_each_interface(run_distro, mcast_obj, drop_obj, pin_root):
    """xdp_program pins maps per attachment: one group is one devmap, put into each attachment's maps."""
    n = 10
    with ports_up(3) as ports, contextlib.ExitStack() as stack:
        hosts = counting_hosts(ports, drop_obj, stack)
        pinned = []
        for port in (0, 1):
            res = run_distro("xdp_program", dict(interface="p%d" % port, netns=ports.sw, object=mcast_obj,
                                                 program="xdp_multicast", mode="native"))
            assert res["changed"] and not res.get("failed"), res
            pinned.append(res["maps"])
        assert pinned[0]["mcast_groups"] != pinned[1]["mcast_groups"]
        with _bpf.Map.create(BPF_MAP_TYPE_DEVMAP_HASH, "mcast_g1", 4, 8, MCAST_MAX_MEMBERS) as inner:
            with _netns.netns(ports.sw):
                for ifindex in ports.ifindex:
                    inner.update(u32(ifindex), struct.pack("<Ii", ifindex, 0))
            for maps in pinned:
                with _bpf.Map.from_pin(maps["mcast_config"]) as config, \
                        _bpf.Map.from_pin(maps["mcast_groups"]) as groups, \
                        _bpf.Map.from_pin(maps["mcast_addrs"]) as addrs:
                    config.update(u32(1), struct.pack("<HH", MCAST_GROUP_EXCLUDE_INGRESS, 3))
                    groups.update(u32(1), struct.pack("<i", inner.fd))
                    addrs.update(mcast_key("239.1.1.1"), u32(1))

        def received():
            with contextlib.ExitStack() as maps:
                return [_facts.read_counters(maps.enter_context(host.open_map("proto_count"))) for host in hosts]

        def send(port, count):
            with _netns.netns(ports.hosts):
                _frames.send("h%d" % port, {"udp": udp_to(ports, port, "239.1.1.1", "01:00:5e:01:01:01")}, count)

        send(0, n)
        send(1, n)
        expected = [{17: n}, {17: n}, {17: 2 * n}]
        assert eventually(received, expected) == expected
        # One write to the shared devmap: p2 leaves the group whichever port a frame comes in by.
        with _bpf.Map.from_pin(pinned[0]["mcast_groups"]) as groups:
            with _bpf.Map.from_id(struct.unpack("<I", groups.lookup(u32(1)))[0]) as shared:
                assert shared.delete(u32(ports.ifindex[2]))
        # The member count, which the copies counter stands on, is per attachment.
        for maps in pinned:
            with _bpf.Map.from_pin(maps["mcast_config"]) as config:
                config.update(u32(1), struct.pack("<HH", MCAST_GROUP_EXCLUDE_INGRESS, 2))
        send(0, n)
        send(1, n)
        expected = [{17: 2 * n}, {17: 2 * n}, {17: 2 * n}]
        assert eventually(received, expected) == expected
        # xdp_facts shows the per-group counters as they are (the settings map is not taken for one).
        facts = run_distro("xdp_facts", dict(netns=ports.sw, interfaces=["p0"]))["ansible_facts"]["xdp"]
        counters = facts["interfaces"]["p0"]["xdp"]["counters"]
        assert counters == {"mcast_frames": {"1": 2 * n}, "mcast_copies": {"1": 3 * n}}, counters


# ---------------------------------------------------------------- xdp_redirect_map, 1 -> 1


@pytest.mark.parametrize("mode", ["native", "generic"])
def test_redirect_map_forwards_by_the_ingress_entry_or_the_default_port(redirect_map_obj, drop_obj, chain, mode):
    """tx/eth0 -> rt/eth0 (xdp_redirect_map) -> rt/eth1 -> rx/eth0 (xdp_drop_count)."""
    n = 20
    frame = _frames.build_frame("udp", chain.pair.tx_mac, chain.pair.rx_mac, chain.pair.tx_ip, chain.pair.rx_ip)

    def send():
        with _netns.netns(chain.tx):
            sent, _seconds = _frames.send("eth0", {"udp": frame}, n, rate=20000)
        assert sent == {"udp": n}

    with contextlib.ExitStack() as stack:
        with _netns.netns(chain.rx):
            receiver = stack.enter_context(_loader.load(drop_obj, "xdp_drop_count", "xdp"))
            stack.enter_context(_bpf.Link.create(receiver.program, _netns.ifindex("eth0"), _bpf.BPF_XDP,
                                                 _bpf.XDP_FLAGS_DRV_MODE))
        with _netns.netns(chain.rt):
            eth0, eth1 = _netns.ifindex("eth0"), _netns.ifindex("eth1")
            loaded = stack.enter_context(_loader.load(redirect_map_obj, "xdp_redirect_map", "xdp"))
            stack.enter_context(_bpf.Link.create(loaded.program, eth0, _bpf.BPF_XDP, MODES[mode]))
            tx_port = stack.enter_context(loaded.open_map("tx_port"))
        redirects = stack.enter_context(loaded.open_map("redirect_count"))
        received = stack.enter_context(receiver.open_map("proto_count"))

        # No entry: miss_action (XDP_PASS), counted as refused.
        send()
        assert eventually(lambda: _facts.read_counters(redirects), {1: n}) == {1: n}
        # The default port (key 0).
        with _netns.netns(chain.rt):
            tx_port.update(u32(0), u32(eth1))
        send()
        assert eventually(lambda: _facts.read_counters(received), {17: n}) == {17: n}
        # The ingress entry comes first: back out of eth0 instead, nothing more to rx.
        with _netns.netns(chain.rt):
            tx_port.update(u32(eth0), u32(eth0))
        send()
        assert eventually(lambda: _facts.read_counters(redirects), {0: 2 * n, 1: n}) == {0: 2 * n, 1: n}
        assert _facts.read_counters(received) == {17: n}
        assert tx_port.lookup(u32(eth0)) == u32(eth0)
        # Deleting it falls back to the default port again.
        assert tx_port.delete(u32(eth0))
        send()
        assert eventually(lambda: _facts.read_counters(received), {17: 2 * n}) == {17: 2 * n}
