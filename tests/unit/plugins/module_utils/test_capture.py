"""traffic/capture's pure parts: a capture's settings checked before any socket is opened (each refusal with its
message), the defaults a task's None takes, which frames the direction, protocol and port filters keep, and the
output path checked before anything. The capture itself runs on a real interface in
tests/integration/test_capture.py."""

import struct

import pytest

from ansible_collections.ebpf.xdp.plugins.module_utils.traffic import capture as _capture, frames as _frames
from ansible_collections.ebpf.xdp.plugins.module_utils.traffic import pcap as _pcap

MAC1, MAC2 = "02:00:00:00:00:01", "02:00:00:00:00:02"


def v4(protocol, **kwargs):
    return _frames.build_frame(protocol, MAC1, MAC2, "10.0.0.1", "10.0.0.2", 1000, 2000, **kwargs)


def v6(protocol, **kwargs):
    return _frames.build_frame(protocol, MAC1, MAC2, "fd00::1", "fd00::2", 1000, 2000, **kwargs)


def arp(sender="10.0.0.1", target="10.0.0.2"):
    eth = _frames.mac_bytes("ff:ff:ff:ff:ff:ff") + _frames.mac_bytes(MAC1) + struct.pack("!H", 0x0806)
    body = struct.pack("!HHBBH", 1, 0x0800, 6, 4, 1) + _frames.mac_bytes(MAC1) + bytes(map(int, sender.split("."))) \
        + bytes(6) + bytes(map(int, target.split(".")))
    return (eth + body).ljust(60, b"\0")


def settings(**kwargs):
    return _capture.Settings(**dict(dict(interface="eth0", path="/tmp/x.pcap"), **kwargs))


@pytest.mark.parametrize("kwargs,message", [
    (dict(count=0), "count must be a positive number of frames, not 0"),
    (dict(seconds=0), "seconds must be a positive number of seconds, not 0"),
    (dict(snaplen=0), "snaplen must be between 1 and 65535 bytes, not 0"),
    (dict(snaplen=65536), "snaplen must be between 1 and 65535 bytes, not 65536"),
    (dict(ports=[53, 70000]), "ports must be between 0 and 65535, not 70000"),
    (dict(ports=[53], protocols=["icmp", "arp"]), "ports match UDP and TCP frames only, and protocols lists neither "
                                                  "udp nor tcp"),
    (dict(protocols=[]), "protocols must list at least one of udp, tcp, icmp, icmpv6, arp, other"),
    (dict(direction="sideways"), "direction must be one of in, out, both, not 'sideways'"),
])
def test_capture_settings_refused(kwargs, message):
    with pytest.raises(_capture.CaptureError) as err:
        settings(**kwargs).validate()
    assert str(err.value) == message


def test_capture_settings_from_params_take_the_defaults_for_none():
    got = _capture.Settings.from_params(dict(interface="eth0", path="/tmp/x.pcap", netns=None, ports=None,
                                             count=5, seconds=1.5))
    assert (got.count, got.seconds, got.ports, got.snaplen, got.direction) == (5, 1.5, [], 2048, "in")
    assert got.protocols == list(_pcap.PROTOCOLS)


@pytest.mark.parametrize("kwargs,pkttype,frame,kept", [
    (dict(), 0, v4("udp"), "udp"),
    (dict(), _capture.PACKET_OUTGOING, v4("udp"), None),
    (dict(direction="out"), _capture.PACKET_OUTGOING, v4("udp"), "udp"),
    (dict(direction="out"), 3, v4("udp"), None),  # PACKET_OTHERHOST: arrived, for another MAC
    (dict(direction="both"), 1, arp(), "arp"),
    (dict(protocols=["tcp"]), 0, v4("udp"), None),
    (dict(ports=[2000]), 0, v6("tcp"), "tcp"),
    (dict(ports=[1000]), 0, v4("udp"), "udp"),
    (dict(ports=[53]), 0, v4("udp"), None),
    (dict(ports=[1000]), 0, v4("icmp"), None),
])
def test_capture_filters(kwargs, pkttype, frame, kept):
    assert settings(**kwargs).wants(pkttype, frame) == kept


def test_capture_paths_checked_before_anything(tmp_path):
    with pytest.raises(_capture.CaptureError) as err:
        settings(path=str(tmp_path / "nosuch" / "x.pcap")).check_path()
    assert str(err.value) == "cannot write {0}/nosuch/x.pcap: its directory {0}/nosuch does not exist".format(tmp_path)
    with pytest.raises(_capture.CaptureError) as err:
        settings(path=str(tmp_path)).check_path()
    assert str(err.value) == "cannot write %s: it is a directory; give the path of the pcap file" % tmp_path
