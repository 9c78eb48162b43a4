"""pcap files: written and read back, both magics in both byte orders, every refusal with its message; the
protocol summary and 5-tuples of frames built by traffic/frames (and by hand, for ARP, VLAN, IPv6 options).
The capture settings' checks: test_capture.py."""

import os
import stat
import struct

import pytest

from ansible_collections.ebpf.xdp.plugins.module_utils.traffic import frames as _frames
from ansible_collections.ebpf.xdp.plugins.module_utils.traffic import pcap as _pcap

MAC1, MAC2 = "02:00:00:00:00:01", "02:00:00:00:00:02"


def udp(size=None, vlan=None, src_port=1234, dst_port=53):
    return _frames.build_frame("udp", MAC1, MAC2, "10.0.0.1", "10.0.0.2", src_port, dst_port, size=size, vlan=vlan)


def arp(sender="10.0.0.1", target="10.0.0.2"):
    eth = _frames.mac_bytes("ff:ff:ff:ff:ff:ff") + _frames.mac_bytes(MAC1) + struct.pack("!H", 0x0806)
    body = struct.pack("!HHBBH", 1, 0x0800, 6, 4, 1) + _frames.mac_bytes(MAC1) + bytes(map(int, sender.split("."))) \
        + bytes(6) + bytes(map(int, target.split(".")))
    return (eth + body).ljust(60, b"\0")


def pcap_bytes(order, magic, records, linktype=1, snaplen=65535, major=2):
    """A pcap file made by hand, not by the writer under test."""
    out = struct.pack(order + "IHHiIII", magic, major, 4, 0, 0, snaplen, linktype)
    for seconds, fraction, data, length in records:
        out += struct.pack(order + "IIII", seconds, fraction, len(data), length) + data
    return out


def write_raw(tmp_path, raw, name="in.pcap"):
    path = tmp_path / name
    path.write_bytes(raw)
    return str(path)


# ---------------------------------------------------------------- writing and reading


def test_round_trip_keeps_bytes_times_and_lengths(tmp_path):
    path = str(tmp_path / "out.pcap")
    frames = [(1700000000.25, udp()), (1700000000.5, udp(size=300)[:100], 300), (1700000001.999999, arp())]
    assert _pcap.write(path, frames, snaplen=100) == 3
    linktype, records = _pcap.read(path)
    assert linktype == _pcap.LINKTYPE_ETHERNET
    assert [r.data for r in records] == [udp(), udp(size=300)[:100], arp()]
    assert [r.length for r in records] == [60, 300, 60]
    assert [round(r.timestamp, 6) for r in records] == [1700000000.25, 1700000000.5, 1700000001.999999]
    assert isinstance(records[0], tuple) and records[0] == (records[0].timestamp, udp(), 60)
    raw = open(path, "rb").read()
    # Header: magic in this machine's order, version 2.4, snaplen, Ethernet; a record: captured and original length.
    assert struct.unpack("=IHHiIII", raw[:24]) == (0xA1B2C3D4, 2, 4, 0, 0, 100, 1)
    assert struct.unpack("=IIII", raw[24 + 60 + 16:24 + 60 + 32]) == (1700000000, 500000, 100, 300)
    assert len(raw) == 24 + 3 * 16 + 60 + 100 + 60


def test_microseconds_round_into_the_next_second(tmp_path):
    path = str(tmp_path / "out.pcap")
    _pcap.write(path, [(41.9999997, udp())])
    raw = open(path, "rb").read()
    assert struct.unpack("=II", raw[24:32]) == (42, 0)


def test_bare_frames_are_stamped_now_and_an_empty_capture_is_a_header(tmp_path):
    path = str(tmp_path / "out.pcap")
    _pcap.write(path, [udp()])
    (record,) = _pcap.read(path)[1]
    assert record.data == udp() and record.length == 60 and record.timestamp > 1.6e9
    _pcap.write(path, [])
    assert os.path.getsize(path) == 24 and _pcap.read(path) == (1, [])


@pytest.mark.parametrize("order", ["<", ">"])
@pytest.mark.parametrize("magic,fraction,expected", [(0xA1B2C3D4, 250000, 0.25), (0xA1B23C4D, 250000000, 0.25),
                                                     (0xA1B23C4D, 1, 1e-9)])
def test_both_magics_in_both_byte_orders(tmp_path, order, magic, fraction, expected):
    raw = pcap_bytes(order, magic, [(1000, fraction, udp(), 60), (1001, 0, udp(size=200)[:64], 200)])
    linktype, records = _pcap.read(write_raw(tmp_path, raw))
    assert linktype == 1
    assert records[0].timestamp == pytest.approx(1000 + expected, abs=1e-12)
    assert [(r.data, r.length) for r in records] == [(udp(), 60), (udp(size=200)[:64], 200)]
    assert records[1].timestamp == 1001


def test_the_write_is_atomic_and_leaves_nothing_on_failure(tmp_path):
    path = tmp_path / "out.pcap"
    _pcap.write(str(path), [(1.0, udp())])
    before = path.read_bytes()
    with pytest.raises(RuntimeError):
        with _pcap.Writer(str(path), 2048) as out:
            out.write(2.0, arp())
            # Half written: the old file is still whole, the new one a temporary file beside it.
            assert path.read_bytes() == before
            assert len(os.listdir(tmp_path)) == 2
            raise RuntimeError("capture failed")
    assert path.read_bytes() == before and os.listdir(tmp_path) == ["out.pcap"]


def test_a_capture_is_the_users_alone_whatever_the_umask_or_the_file_it_replaces(tmp_path):
    path = tmp_path / "out.pcap"
    old = os.umask(0)
    try:
        _pcap.write(str(path), [udp()])
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    os.chmod(path, 0o644)
    _pcap.write(str(path), [udp()])
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_the_writer_never_writes_through_a_link_nor_in_a_directory_others_can_change(tmp_path):
    victim = tmp_path / "victim"
    victim.write_bytes(b"keep")
    link = tmp_path / "out.pcap"
    link.symlink_to(victim)
    with pytest.raises(_pcap.PcapError) as err:
        _pcap.write(str(link), [udp()])
    assert str(err.value) == "%s: refusing to write %s: it is a symbolic link (to %s); remove it or give the real " \
        "path" % (link, link, victim)
    assert victim.read_bytes() == b"keep" and link.is_symlink() and sorted(os.listdir(tmp_path)) == [
        "out.pcap", "victim"]
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    os.chmod(shared, 0o777)
    with pytest.raises(_pcap.PcapError) as err:
        _pcap.write(str(shared / "out.pcap"), [udp()])
    assert "refusing to write in %s: %s is writable by its group or by others (mode 0777)" % (shared, shared) \
        in str(err.value)
    assert os.listdir(shared) == []


def test_the_writer_refuses_records_that_break_the_format(tmp_path):
    path = str(tmp_path / "out.pcap")
    with pytest.raises(_pcap.PcapError) as err:
        _pcap.write(path, [(1.0, udp()), (2.0, udp(size=200))], snaplen=100)
    assert str(err.value) == "%s: record 2 holds 200 bytes, more than the file's snaplen 100" % path
    assert err.value.path == path and not os.path.exists(path)
    with pytest.raises(_pcap.PcapError) as err:
        _pcap.write(path, [(1.0, udp(), 59)])
    assert str(err.value) == "%s: record 1's original length 59 is less than its 60 captured bytes" % path


def test_a_directory_that_cannot_be_written(tmp_path):
    path = str(tmp_path / "nosuch" / "out.pcap")
    with pytest.raises(_pcap.PcapError) as err:
        _pcap.write(path, [udp()])
    assert str(err.value) == "%s: cannot write a file in %s: No such file or directory" % (path, tmp_path / "nosuch")


# ---------------------------------------------------------------- refusals


def read_error(tmp_path, raw, **kwargs):
    path = write_raw(tmp_path, raw)
    with pytest.raises(_pcap.PcapError) as err:
        _pcap.read(path, **kwargs)
    assert err.value.path == path and isinstance(err.value, _pcap.EbpfXdpError)
    prefix = path + ": "
    assert str(err.value).startswith(prefix)
    return str(err.value)[len(prefix):]


def test_pcapng_says_how_to_convert(tmp_path):
    # A pcapng Section Header Block (byte-order magic 0x1a2b3c4d) as Wireshark writes it.
    raw = struct.pack("<IIIHHq", 0x0A0D0D0A, 28, 0x1A2B3C4D, 1, 0, -1) + struct.pack("<I", 28)
    assert read_error(tmp_path, raw) == ("this is a pcapng file, not a classic pcap; convert it first: "
                                         "tcpdump -r in.pcapng -w out.pcap, or editcap -F pcap in.pcapng out.pcap")


@pytest.mark.parametrize("raw,message", [
    (b"", "empty file, not a pcap capture"),
    (b"GI", "not a pcap capture (2 bytes, shorter than any pcap header)"),
    (b"GIF89a" + bytes(40), "not a pcap capture (magic 0x47494638, neither a pcap's a1b2c3d4 or a1b23c4d in either "
                            "byte order nor pcapng's 0a0d0d0a)"),
    (struct.pack("<I", 0xA1B2CD34) + bytes(20), "a modified (Kuznetzov) pcap, which is not read here; convert it to a "
                                                "classic pcap first: editcap -F pcap IN OUT"),
])
def test_not_a_pcap(tmp_path, raw, message):
    assert read_error(tmp_path, raw) == message


def test_a_header_cut_short(tmp_path):
    raw = pcap_bytes("<", 0xA1B2C3D4, [])[:20]
    assert read_error(tmp_path, raw) == "truncated: the file header is cut short (20 of 24 bytes)"


def test_another_major_version(tmp_path):
    raw = pcap_bytes(">", 0xA1B2C3D4, [], major=1)
    assert read_error(tmp_path, raw) == "pcap version 1.4 is not read here (only 2.x)"


@pytest.mark.parametrize("order", ["<", ">"])
def test_a_record_cut_short_is_named(tmp_path, order):
    raw = pcap_bytes(order, 0xA1B2C3D4, [(1, 0, udp(), 60), (2, 0, udp(size=100), 100)])
    assert read_error(tmp_path, raw[:-10]) == (
        "truncated: record 2 is cut short (90 of its 100 bytes at offset 116); the capture was stopped before it "
        "finished writing, or the file is still being written")
    assert read_error(tmp_path, raw[:24 + 16 + 60 + 7]) == (
        "truncated: record 2's header is cut short (7 of 16 bytes at offset 100); the capture was stopped before "
        "it finished writing, or the file is still being written")


def test_a_corrupt_record_length(tmp_path):
    raw = pcap_bytes("<", 0xA1B2C3D4, [(1, 0, udp(), 60)], snaplen=2048)
    raw = raw[:24 + 8] + struct.pack("<II", 1 << 30, 60) + raw[24 + 16:]
    assert read_error(tmp_path, raw) == ("record 1 claims 1073741824 bytes, more than the file's snaplen 2048: "
                                         "the file is corrupt")


@pytest.mark.parametrize("linktype,message", [
    (113, "link type 113, Linux cooked capture (tcpdump -i any): only Ethernet captures (link type 1) are read here; "
          "capture on one interface instead (tcpdump -i eth0 -w out.pcap): its frames keep their Ethernet headers"),
    (276, "link type 276, Linux cooked capture v2 (tcpdump -i any): only Ethernet captures (link type 1) are read "
          "here; capture on one interface instead (tcpdump -i eth0 -w out.pcap): its frames keep their Ethernet "
          "headers"),
    (101, "link type 101, raw IP, without link-layer headers: only Ethernet captures (link type 1) are read here; "
          "capture on an Ethernet interface (or a veth) instead"),
    (4242, "link type 4242: only Ethernet captures (link type 1) are read here; capture on an Ethernet interface "
           "(or a veth) instead"),
])
def test_other_link_types_are_named(tmp_path, linktype, message):
    raw = pcap_bytes("<", 0xA1B2C3D4, [(1, 0, b"\0" * 16, 16)], linktype=linktype)
    assert read_error(tmp_path, raw) == message
    assert _pcap.read(write_raw(tmp_path, raw), require_ethernet=False)[0] == linktype


def test_fcs_bits_of_the_link_type_word_are_not_the_link_type(tmp_path):
    raw = pcap_bytes("<", 0xA1B2C3D4, [(1, 0, udp(), 60)], linktype=(1 << 28) | (4 << 29) | 1)
    assert _pcap.read(write_raw(tmp_path, raw))[0] == 1


def test_a_missing_file_is_an_os_error(tmp_path):
    with pytest.raises(FileNotFoundError):
        _pcap.read(str(tmp_path / "nosuch.pcap"))


# ---------------------------------------------------------------- protocols and 5-tuples


def v6(protocol, **kwargs):
    return _frames.build_frame(protocol, MAC1, MAC2, "fd00::1", "fd00::2", 1000, 2000, **kwargs)


def v4(protocol, **kwargs):
    return _frames.build_frame(protocol, MAC1, MAC2, "10.0.0.1", "10.0.0.2", 1000, 2000, **kwargs)


def with_ipv6_options(frame, *headers):
    """frame (an IPv6 one) with extension headers inserted before its L4 header: (number, bytes) each, the bytes
    without their next-header byte."""
    first = frame[20]
    chain = b""
    numbers = [number for number, _body in headers] + [first]
    for (number, body), following in zip(headers, numbers[1:]):
        chain += bytes([following]) + body
    payload = struct.unpack("!H", frame[18:20])[0] + len(chain)
    return frame[:18] + struct.pack("!HB", payload, numbers[0]) + frame[21:54] + chain + frame[54:]


@pytest.mark.parametrize("frame,expected", [
    (v4("udp"), ("udp", "10.0.0.1", "10.0.0.2", 1000, 2000)),
    (v4("tcp"), ("tcp", "10.0.0.1", "10.0.0.2", 1000, 2000)),
    (v4("icmp"), ("icmp", "10.0.0.1", "10.0.0.2", None, None)),
    (v6("udp"), ("udp", "fd00::1", "fd00::2", 1000, 2000)),
    (v6("tcp"), ("tcp", "fd00::1", "fd00::2", 1000, 2000)),
    (v6("icmp"), ("icmpv6", "fd00::1", "fd00::2", None, None)),
    (v4("tcp", vlan=100), ("tcp", "10.0.0.1", "10.0.0.2", 1000, 2000)),
    (v6("udp", vlan=7), ("udp", "fd00::1", "fd00::2", 1000, 2000)),
    (arp(), ("arp", "10.0.0.1", "10.0.0.2", None, None)),
    # 802.1ad: one tag is skipped whatever its TPID; a second tag makes the frame other.
    (v4("udp", vlan=5)[:12] + b"\x88\xa8" + v4("udp", vlan=5)[14:], ("udp", "10.0.0.1", "10.0.0.2", 1000, 2000)),
    (v4("udp")[:12] + b"\x88\xa8\x00\x05\x81\x00\x00\x07" + v4("udp")[12:], ("other", None, None, None, None)),
    # LLDP, and frames too short for what they say they carry.
    (bytes(12) + b"\x88\xcc" + bytes(46), ("other", None, None, None, None)),
    (bytes(10), ("other", None, None, None, None)),
    (v4("udp")[:30], ("other", None, None, None, None)),
    (v4("udp")[:36], ("udp", "10.0.0.1", "10.0.0.2", None, None)),
    (arp()[:30], ("arp", None, None, None, None)),
])
def test_five_tuple(frame, expected):
    assert _pcap.five_tuple(frame) == expected
    assert _pcap.protocol(frame) == expected[0]


def test_ip_protocols_other_than_ours_are_other_with_their_addresses():
    gre = bytearray(v4("udp"))
    gre[23] = 47
    assert _pcap.five_tuple(bytes(gre)) == ("other", "10.0.0.1", "10.0.0.2", None, None)
    icmp_over_v6 = bytearray(v6("udp"))
    icmp_over_v6[20] = 1
    assert _pcap.protocol(bytes(icmp_over_v6)) == "other"


def test_ipv4_options_and_later_fragments():
    frame = bytearray(v4("udp"))
    with_options = bytes(frame[:14]) + bytes([0x46]) + bytes(frame[15:34]) + b"\x01\x01\x01\x00" + bytes(frame[34:])
    assert _pcap.five_tuple(with_options) == ("udp", "10.0.0.1", "10.0.0.2", 1000, 2000)
    struct.pack_into("!H", frame, 20, 185)  # fragment offset 185 * 8: no UDP header in this one
    assert _pcap.five_tuple(bytes(frame)) == ("udp", "10.0.0.1", "10.0.0.2", None, None)


def test_ipv6_extension_headers_are_walked():
    hop_by_hop = (0, b"\x00" + bytes(6))  # 8 bytes: length 0
    destination = (60, b"\x01" + bytes(14))  # 16 bytes: length 1
    first_fragment = (44, b"\x00" + struct.pack("!HI", 1, 7))  # offset 0, more fragments
    frame = with_ipv6_options(v6("udp"), hop_by_hop, destination, first_fragment)
    assert _pcap.five_tuple(frame) == ("udp", "fd00::1", "fd00::2", 1000, 2000)
    later_fragment = (44, b"\x00" + struct.pack("!HI", 100 << 3, 7))
    assert _pcap.five_tuple(with_ipv6_options(v6("tcp"), later_fragment)) == ("tcp", "fd00::1", "fd00::2", None, None)
    # An MLD report: hop-by-hop (router alert) before ICMPv6.
    assert _pcap.protocol(with_ipv6_options(v6("icmp"), hop_by_hop)) == "icmpv6"


def test_count_protocols_and_flows():
    frames = [v4("udp")] * 3 + [v4("tcp"), v6("icmp"), arp(), bytes(60)]
    assert _pcap.count_protocols(frames) == {"udp": 3, "tcp": 1, "icmp": 0, "icmpv6": 1, "arp": 1, "other": 1}
    assert _pcap.count_protocols([]) == dict.fromkeys(_pcap.PROTOCOLS, 0)
    flows = _pcap.count_flows(frames)
    assert flows[_pcap.FiveTuple("udp", "10.0.0.1", "10.0.0.2", 1000, 2000)] == 3 and sum(flows.values()) == 7
