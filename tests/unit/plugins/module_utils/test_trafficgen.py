"""The traffic generator's pure parts: settings, engine choice, IPv6 frames, port rewriting."""

import ipaddress
import struct

import pytest

from ansible_collections.ebpf.xdp.plugins.module_utils.host import netdev as _netdev
from ansible_collections.ebpf.xdp.plugins.module_utils.traffic import frames as _frames, trafficgen as _trafficgen

MACS = "02:00:00:00:00:01", "02:00:00:00:00:02"
VETH_FEATURES_WITH_PEER_XDP = 0x67  # what 6.18 reports for a veth whose peer has an XDP program
VETH_FEATURES_WITHOUT = 0x23


def settings(**overrides):
    params = dict(interface="eth0", src_ip="10.0.0.1", dst_ip="10.0.0.2")
    params.update(overrides)
    return _trafficgen.Settings.from_params(params)


def l4_checksum_ok(frame, version, offset):
    """Sum the L4 segment with its pseudo-header: a valid checksum makes it 0."""
    if version == 4:
        ip = frame[offset - 20:offset]
        length = struct.unpack("!H", ip[2:4])[0] - 20
        pseudo = ip[12:20] + struct.pack("!BBH", 0, ip[9], length)
        if ip[9] == 1:
            pseudo = b""
    else:
        ip = frame[offset - 40:offset]
        length = struct.unpack("!H", ip[4:6])[0]
        pseudo = ip[8:40] + struct.pack("!IxxxB", length, ip[6])
    return _frames.checksum(pseudo + frame[offset:offset + length]) == 0


# ---------------------------------------------------------------- frames


@pytest.mark.parametrize("protocol,next_header,size", [("udp", 17, 62), ("tcp", 6, 74), ("icmp", 58, 62)])
def test_ipv6_frames(protocol, next_header, size):
    frame = _frames.build_frame(protocol, MACS[0], MACS[1], "fd00::1", "fd00::2")
    assert len(frame) == size == _frames.min_size(protocol, 6)
    assert struct.unpack("!H", frame[12:14])[0] == 0x86DD
    ip6 = frame[14:54]
    assert ip6[0] >> 4 == 6 and ip6[6] == next_header and ip6[7] == 64
    assert struct.unpack("!H", ip6[4:6])[0] == len(frame) - 54
    assert ipaddress.ip_address(ip6[8:24]) == ipaddress.ip_address("fd00::1")
    assert ipaddress.ip_address(ip6[24:40]) == ipaddress.ip_address("fd00::2")
    assert l4_checksum_ok(frame, 6, 54)
    if protocol == "icmp":
        assert frame[54] == 128, "an ICMPv6 echo request"


def test_ipv6_frame_padded_and_tagged():
    frame = _frames.build_frame("udp", MACS[0], MACS[1], "fd00::1", "fd00::2", src_port=7, dst_port=8,
                                size=200, vlan=5)
    assert len(frame) == 200
    assert struct.unpack("!HHH", frame[12:18]) == (0x8100, 5, 0x86DD)
    assert struct.unpack("!HHH", frame[58:64]) == (7, 8, 200 - 58)
    assert l4_checksum_ok(frame, 6, _frames.l4_offset(6, 5))


@pytest.mark.parametrize("src,dst,words", [
    ("10.0.0.1", "fd00::2", "not of one IP version"),
    ("10.0.0.300", "10.0.0.2", "invalid IP address '10.0.0.300'"),
])
def test_frame_addresses_are_checked(src, dst, words):
    with pytest.raises(ValueError, match=words):
        _frames.build_frame("udp", MACS[0], MACS[1], src, dst)


def test_frame_too_small_for_its_headers():
    with pytest.raises(ValueError, match="needs at least 74 bytes, not 70"):
        _frames.build_frame("tcp", MACS[0], MACS[1], "fd00::1", "fd00::2", size=70)


@pytest.mark.parametrize("mac", ["02:00", "02:00:00:00:00:zz", "020:00:00:00:00:01", "02:00:00:00:00:01:03"])
def test_malformed_mac(mac):
    with pytest.raises(ValueError, match="invalid MAC address"):
        _frames.mac_bytes(mac)


@pytest.mark.parametrize("protocol,version", [("udp", 4), ("tcp", 4), ("udp", 6), ("tcp", 6)])
def test_set_ports_keeps_the_checksum_valid(protocol, version):
    src, dst = ("10.0.0.1", "10.0.0.2") if version == 4 else ("fd00::1", "fd00::2")
    offset = _frames.l4_offset(version)
    frame = bytearray(_frames.build_frame(protocol, MACS[0], MACS[1], src, dst, 9, 9, size=100))
    # Rewritten again and again, as the kernel's recycled pages are: always valid, always as built.
    for n in range(0, 70000, 997):
        sport, dport = _frames.port_at(1000, 5000, n), _frames.port_at(0, 65536, n * 7)
        _frames.set_ports(frame, offset, protocol, sport, dport)
        assert struct.unpack_from("!HH", frame, offset) == (sport, dport)
        assert l4_checksum_ok(bytes(frame), version, offset), n
        built = _frames.build_frame(protocol, MACS[0], MACS[1], src, dst, sport, dport, size=100)
        assert bytes(frame) == built


def test_set_ports_leaves_a_missing_udp_checksum_missing():
    frame = bytearray(_frames.build_frame("udp", MACS[0], MACS[1], "10.0.0.1", "10.0.0.2"))
    frame[40:42] = b"\0\0"
    _frames.set_ports(frame, 34, "udp", 1234, 5678)
    assert frame[40:42] == b"\0\0" and struct.unpack_from("!HH", frame, 34) == (1234, 5678)


def test_port_at():
    assert [_frames.port_at(10, 3, n) for n in range(7)] == [10, 11, 12, 10, 11, 12, 10]
    assert _frames.port_at(10, 1, 5) == 10


# ---------------------------------------------------------------- settings


def test_defaults():
    s = settings()
    assert (s.engine, s.count, s.duration, s.batch_size, s.ip_version) == ("auto", 100, None, 64, 4)
    assert s.ports() == (9, 1, 9, 1)


def test_duration_replaces_the_default_count():
    s = settings(duration=2.5)
    assert s.count is None and s.duration == 2.5


def test_protocols_listed_twice_are_one_kind():
    assert settings(protocols=["udp", "tcp", "udp"]).protocols == ["udp", "tcp"]


def test_port_ranges():
    s = settings(src_port=1000, src_port_max=1999, dst_port=53, dst_port_max=53)
    assert s.ports() == (1000, 1000, 53, 1)


@pytest.mark.parametrize("overrides,words", [
    (dict(count=0), "count must be a positive number of frames per protocol, not 0"),
    (dict(count=-5), "count must be a positive number of frames per protocol, not -5"),
    (dict(count=10, duration=1.0), "give count or duration, not both"),
    (dict(duration=0.0), "duration must be a positive number of seconds"),
    (dict(dst_mac="02:00"), "dst_mac '02:00' is not a MAC address"),
    (dict(src_mac="zz:00:00:00:00:01"), "src_mac 'zz:00:00:00:00:01' is not a MAC address"),
    (dict(src_ip="10.0.0"), "src_ip '10.0.0' is not an IPv4 or IPv6 address"),
    (dict(dst_ip="fd00::2"), "not of one IP version"),
    (dict(src_ip="fd00::1", dst_ip="fd00::2", size=60), "size must be between 62 and 9000 bytes for udp over IPv6"),
    (dict(src_ip="fd00::1", dst_ip="fd00::2", protocols=["udp", "tcp"], size=70), "between 74 and 9000"),
    (dict(vlan=1, src_ip="fd00::1", dst_ip="fd00::2", size=62), "between 66 and 9000 bytes for udp over IPv6 with"),
    (dict(size=59), "size must be between 60 and 9000"),
    (dict(dst_port=70000), "dst_port must be between 0 and 65535"),
    (dict(src_port=100, src_port_max=99), "src_port_max (99) must not be below src_port (100)"),
    (dict(vlan=5000), "vlan must be between 0 and 4095"),
    (dict(batch_size=0), "batch_size must be between 1 and 256"),
    (dict(batch_size=257), "batch_size must be between 1 and 256"),
    (dict(cpus=[]), "cpus must list at least one CPU"),
    (dict(cpus=[0, 1, 0]), "cpus lists CPU 0 more than once"),
    (dict(engine="xdp"), "engine xdp needs object"),
    (dict(engine="xdp", object="/x.o", rate=100), "rate paces the socket engine only"),
    (dict(rate=-1), "rate must not be negative"),
    (dict(protocols=["sctp"]), "unsupported protocol sctp"),
])
def test_bad_settings(overrides, words):
    with pytest.raises(_trafficgen.TrafficgenError) as exc:
        settings(**overrides)
    assert words in str(exc.value)


def test_size_against_the_mtu():
    s = settings(size=1514)
    s.check_size(1500)
    with pytest.raises(_trafficgen.TrafficgenError, match=r"between 60 and 1514 bytes .* on eth0 \(MTU 1500\)"):
        settings(size=1515).check_size(1500)
    settings(size=1518, vlan=3).check_size(1500)


def test_cpus():
    assert _trafficgen.check_cpus(None, {2, 3}) == [2]
    assert _trafficgen.check_cpus([3, 2], {0, 1, 2, 3}) == [3, 2]
    with pytest.raises(_trafficgen.TrafficgenError, match=r"CPU 7, 9 is not one this task may run on \(allowed: 0-3,5\)"):
        _trafficgen.check_cpus([0, 7, 9], {0, 1, 2, 3, 5})


def test_share_splits_exactly():
    for total in (0, 1, 7, 100001):
        for parts in (1, 2, 3, 8):
            shares = [_trafficgen.share(total, parts, i) for i in range(parts)]
            assert sum(shares) == total and max(shares) - min(shares) <= 1


def test_kind_template_for_the_program():
    s = settings(src_ip="fd00::1", dst_ip="fd00::2", protocols=["icmp", "tcp"], vlan=7, size=100)
    kinds = _trafficgen.build_kinds(s, MACS[0])
    assert [(k.name, k.index, k.l4_offset, k.has_ports) for k in kinds] == [
        ("icmp", 0, 58, False), ("tcp", 1, 58, True)]
    assert [k.header_size for k in kinds] == [66, 78]
    template = kinds[1].template()
    assert len(template) == 160, "sizeof(struct tg_template)"
    assert _trafficgen.TEMPLATE.unpack(template) == (1, 2, 78, 58, kinds[1].frame[:78] + bytes(152 - 78))
    assert _trafficgen.TEMPLATE.unpack(kinds[0].template())[:4] == (0, 0, 66, 58)


# ---------------------------------------------------------------- engine choice


def veth(**state):
    base = dict(name="eth0", up=True, carrier=True, kind="veth", features=VETH_FEATURES_WITH_PEER_XDP)
    base.update(state)
    return _trafficgen.Device(**base)


@pytest.mark.parametrize("device,able,words", [
    (veth(), True, "veth eth0 takes XDP frames (xdp_features: basic, redirect, ndo-xmit, rx-sg, ndo-xmit-sg)"),
    (veth(features=VETH_FEATURES_WITHOUT), False, "its peer has neither an XDP program nor GRO enabled"),
    (veth(up=False), False, "veth eth0 is down"),
    (veth(carrier=False), False, "has no carrier (its peer is down)"),
    (veth(kind=None, features=0x3), False, "its driver has no ndo-xmit in xdp_features: basic, redirect"),
    (veth(kind=None, features=0x7), True, "takes XDP frames"),
    # Kernels before 6.3: a veth peer's XDP program and its GRO, read apart.
    (veth(features=None, peer_xdp=True), True, "its peer has an XDP program"),
    (veth(features=None, peer_xdp=False, peer_gro=True), True, "its peer has GRO enabled"),
    (veth(features=None, peer_xdp=False, peer_gro=False), False, "its peer has neither an XDP program nor GRO"),
    (veth(features=None, peer_xdp=False, peer_gro=None), False, "its GRO cannot be read here"),
    (veth(kind=None, features=None), False, "no netdev netlink family"),
])
def test_xdp_ability(device, able, words):
    got, why = device.xdp_ability()
    assert got is able and words in why, why


LIVE_REFUSED = "this kernel refuses live-frames test runs (BPF_F_TEST_XDP_LIVE_FRAMES): EPERM"


@pytest.mark.parametrize("overrides,device,libbpf_error,live_error,engine,words", [
    (dict(engine="socket"), veth(), None, None, "socket", "requested"),
    (dict(object="/x.o"), veth(), None, None, "xdp", "takes XDP frames"),
    (dict(object="/x.o"), veth(features=VETH_FEATURES_WITHOUT), None, None, "socket", "neither an XDP program"),
    (dict(), veth(), None, None, "socket", "no object given"),
    (dict(object="/x.o", rate=1000), veth(), None, None, "socket", "rate paces"),
    (dict(object="/x.o"), veth(), "cannot load libbpf.so.1", None, "socket", "libbpf is not available"),
    (dict(object="/x.o"), veth(), None, LIVE_REFUSED, "socket", "refuses live-frames test runs"),
])
def test_auto_and_explicit_engines(overrides, device, libbpf_error, live_error, engine, words):
    got, why = _trafficgen.choose_engine(settings(**overrides), lambda: device, lambda: libbpf_error,
                                         lambda: live_error)
    assert got == engine and words in why, why


def test_socket_engine_reads_neither_device_nor_libbpf_nor_the_kernel():
    def untouchable():
        raise AssertionError("not needed for the socket engine")

    for overrides in (dict(engine="socket", object="/x.o"), dict(), dict(object="/x.o", rate=10)):
        assert _trafficgen.choose_engine(settings(**overrides), untouchable, untouchable, untouchable)[0] == "socket"


def test_live_frames_are_tried_only_where_frames_could_go():
    def untouchable():
        raise AssertionError("a device that cannot take the frames needs no live-frames run")

    got, why = _trafficgen.choose_engine(settings(object="/x.o"), lambda: veth(up=False), lambda: None, untouchable)
    assert got == "socket" and "is down" in why, why


@pytest.mark.parametrize("device,libbpf_error,live_error,words", [
    (veth(features=VETH_FEATURES_WITHOUT), None, None, "engine xdp cannot deliver frames: veth eth0 cannot take"),
    (veth(), "cannot load libbpf.so.1", None, "engine xdp needs libbpf"),
    (veth(), None, LIVE_REFUSED, r"engine xdp cannot send: this kernel refuses live-frames test runs .*"
                                 r"use engine: socket or auto"),
])
def test_engine_xdp_refuses(device, libbpf_error, live_error, words):
    with pytest.raises(_trafficgen.TrafficgenError, match=words):
        _trafficgen.choose_engine(settings(engine="xdp", object="/x.o"), lambda: device, lambda: libbpf_error,
                                  lambda: live_error)


def test_feature_names():
    assert _netdev.feature_names(VETH_FEATURES_WITHOUT) == ["basic", "redirect", "rx-sg"]
