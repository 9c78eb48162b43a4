"""replay's pure parts: how map values compare and show, flows as text, and the diff text."""

from ansible_collections.ebpf.xdp.plugins.module_utils.hooks import replay as _replay
from ansible_collections.ebpf.xdp.plugins.module_utils.traffic import frames as _frames

MAC1, MAC2 = "02:00:00:00:00:01", "02:00:00:00:00:02"


def u64(n):
    return n.to_bytes(8, "little")


def test_map_effects_list_only_what_the_programs_left_differently():
    start = {"counts": {b"\x06": [u64(1), u64(2)], b"\x11": [u64(5), u64(0)]}}
    old = {"counts": {b"\x06": [u64(3), u64(2)], b"\x11": [u64(6), u64(0)]}}
    new = {"counts": {b"\x06": [u64(1), u64(2)], b"\x11": [u64(6), u64(0)]}}
    assert _replay.map_effects(start, old, new) == {"counts": {"06": {"start": 3, "old": 5, "new": 3}}}
    assert _replay.map_effects(start, old, old) == {}


def test_a_key_only_one_program_wrote_and_values_that_are_not_counters():
    start = {"table": {}}
    old = {"table": {b"\x01": b"\xaa" * 12}}
    new = {"table": {}}
    assert _replay.map_effects(start, old, new) == {
        "table": {"01": {"start": None, "old": "aa" * 12, "new": None}}}


def test_flow_labels():
    tcp = _frames.build_frame("tcp", MAC1, MAC2, "10.0.0.1", "10.0.0.2", 1024, 80)
    assert _replay.flow_label(tcp) == "tcp 10.0.0.1:1024 > 10.0.0.2:80"
    udp6 = _frames.build_frame("udp", MAC1, MAC2, "fd00::1", "fd00::2", 5353, 53)
    assert _replay.flow_label(udp6) == "udp [fd00::1]:5353 > [fd00::2]:53"
    icmp = _frames.build_frame("icmp", MAC1, MAC2, "10.0.0.1", "10.0.0.2")
    assert _replay.flow_label(icmp) == "icmp 10.0.0.1 > 10.0.0.2"
    assert _replay.flow_label(b"\x00" * 60) == "other"


def test_the_diff_text():
    result = {"frames": 10, "pcap": "/tmp/x.pcap", "hook": "the xdp hook of eth0",
              "attached": {"program": "xdp_drop_count", "id": 7}, "candidate": {"program": "xdp_drop_count"},
              "transitions": {"XDP_PASS -> XDP_DROP": {"frames": 4, "flows": [
                  {"flow": "tcp 10.0.0.1:1024 > 10.0.0.2:80", "frames": 4}]}},
              "rewritten": {"frames": 0}, "map_effects": {"counts": {"06": {"start": 0, "old": 4, "new": 0}}}}
    assert _replay.describe(result) == (
        "replay of 10 frames of /tmp/x.pcap on the xdp hook of eth0: attached program xdp_drop_count (id 7) -> "
        "candidate xdp_drop_count\n"
        "  XDP_PASS -> XDP_DROP: 4 frames\n"
        "      tcp 10.0.0.1:1024 > 10.0.0.2:80: 4\n"
        "  map counts key 06: from 0, attached left 4, candidate 0\n")
    assert "every frame gets the same verdict" in _replay.describe(dict(result, transitions={}))


def test_the_xdp_context_names_the_frame_and_the_interface():
    ctx = _replay.xdp_ctx(b"\0" * 60, 5)
    assert _replay.XDP_MD.unpack(ctx) == (0, 60, 0, 5, 0, 0)
