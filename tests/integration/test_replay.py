"""ebpf.xdp.replay on the real kernel: captured frames through the attached program and a candidate.

The attached program is xdp_drop_count set to pass (it counts per IP
protocol); the candidates are an identical rebuild, a variant that drops TCP,
and one that swaps the MAC addresses. The frames are a mix (UDP, TCP, ICMP
over IPv4, UDP and ICMPv6 over IPv6, a VLAN-tagged UDP frame) written as a
pcap. After every replay the live map's bytes and the attached program's id
are those of before.
"""

import hashlib
import os
import struct

import pytest

from conftest import BPF_DIR, compile_bpf, sh, xdp_attached
from test_capture import Captures, mix as capture_mix, send_from
from ansible_collections.ebpf.xdp.plugins.module_utils.traffic import frames as _frames, pcap as _pcap

INCLUDE = [os.path.join(BPF_DIR, "include")]
XDP_PASS = 2

DROP_TCP = r"""
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <bpf/bpf_helpers.h>
#include "proto_count.h"

const volatile __u32 xdp_action = XDP_DROP;

SEC("xdp")
int xdp_drop_count(struct xdp_md *ctx)
{
    void *data = (void *)(long)ctx->data, *data_end = (void *)(long)ctx->data_end;
    struct hdr_cursor nh = { .pos = data };

    count_ip_proto(data, data_end);
    if (parse_ip_proto(&nh, data_end) == 6) /* TCP */
        return XDP_DROP;
    return xdp_action;
}

char _license[] SEC("license") = "GPL";
"""

SWAP_MACS = r"""
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <bpf/bpf_helpers.h>
#include "proto_count.h"

const volatile __u32 xdp_action = XDP_DROP;

SEC("xdp")
int xdp_drop_count(struct xdp_md *ctx)
{
    void *data = (void *)(long)ctx->data, *data_end = (void *)(long)ctx->data_end;
    struct ethhdr *eth = data;
    unsigned char tmp[ETH_ALEN];

    count_ip_proto(data, data_end);
    if ((void *)(eth + 1) > data_end)
        return XDP_ABORTED;
    __builtin_memcpy(tmp, eth->h_source, ETH_ALEN);
    __builtin_memcpy(eth->h_source, eth->h_dest, ETH_ALEN);
    __builtin_memcpy(eth->h_dest, tmp, ETH_ALEN);
    return xdp_action;
}

char _license[] SEC("license") = "GPL";
"""

NO_COUNT = r"""
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "proto_count.h"

const volatile __u32 xdp_action = XDP_DROP;

SEC("xdp")
int xdp_drop_count(struct xdp_md *ctx)
{
    /* The map stays declared (and so reused), but nothing is counted. */
    __u32 key = 255;

    if (ctx->data_end < ctx->data)
        bpf_map_lookup_elem(&proto_count, &key);
    return xdp_action;
}

char _license[] SEC("license") = "GPL";
"""

PROG_ARRAY = r"""
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct {
    __uint(type, BPF_MAP_TYPE_PROG_ARRAY);
    __type(key, __u32);
    __type(value, __u32);
    __uint(max_entries, 4);
} jumps SEC(".maps");

SEC("xdp")
int xdp_jump(struct xdp_md *ctx)
{
    bpf_tail_call(ctx, &jumps, 0);
    return XDP_PASS;
}

char _license[] SEC("license") = "GPL";
"""

MIX = [("udp", "10.99.0.1", "10.99.0.2", None)] * 6 + [("tcp", "10.99.0.1", "10.99.0.2", None)] * 4 + \
    [("icmp", "10.99.0.1", "10.99.0.2", None)] * 2 + [("udp", "fd00::1", "fd00::2", None)] * 2 + \
    [("icmp", "fd00::1", "fd00::2", None)] + [("udp", "10.99.0.1", "10.99.0.2", 7)]


def mix_frames(pair):
    return [_frames.build_frame(proto, pair.tx_mac, pair.rx_mac, src, dst, src_port=1000 + i, dst_port=80,
                                vlan=vlan) for i, (proto, src, dst, vlan) in enumerate(MIX)]


@pytest.fixture(scope="module")
def candidates(tmp_path_factory):
    out = tmp_path_factory.mktemp("candidates")
    built = {"same": compile_bpf(os.path.join(BPF_DIR, "xdp_drop_count.bpf.c"), out / "same.o", INCLUDE)}
    for name, text in (("drop_tcp", DROP_TCP), ("swap_macs", SWAP_MACS), ("no_count", NO_COUNT),
                       ("prog_array", PROG_ARRAY)):
        (out / (name + ".c")).write_text(text)
        built[name] = compile_bpf(out / (name + ".c"), out / (name + ".o"), INCLUDE)
    return built


@pytest.fixture
def attached(run_distro, pair, drop_obj, pin_root, tmp_path):
    res = run_distro("xdp_program", dict(interface="eth0", netns=pair.rx, object=drop_obj, mode="native",
                                         constants={"xdp_action": XDP_PASS}))
    assert res["changed"] and not res.get("failed"), res
    # Live state the replays must leave alone: a burst counted in the live map, then its bytes.
    pair.burst(run_distro, count=7, protocols=("udp",))
    pcap = str(tmp_path / "mix.pcap")
    _pcap.write(pcap, mix_frames(pair))
    return {"pcap": pcap, "maps": os.path.join(pin_root, pair.rx, "eth0", "xdp", "maps"), "pair": pair}


def live_state(pair, maps_dir):
    """The attached program's id and the sha256 of the live map's bytes (bpftool's dump of the pin)."""
    dump = sh("bpftool", "-j", "map", "dump", "pinned", os.path.join(maps_dir, "proto_count")).stdout
    return xdp_attached(pair.rx)["native"], hashlib.sha256(dump.encode()).hexdigest()


def replay(run, attached, candidate, diff=False, **extra):
    return run("replay", dict(dict(interface="eth0", netns=attached["pair"].rx, pcap=attached["pcap"],
                                   object=candidate), **extra), diff=diff)


def test_identical_rebuild_changes_no_verdict(run_distro, attached, candidates):
    before = live_state(attached["pair"], attached["maps"])
    res = replay(run_distro, attached, candidates["same"], constants={"xdp_action": XDP_PASS})
    assert not res.get("failed") and res["changed"] is False, res
    assert res["frames"] == len(MIX) and res["changed_verdicts"] == 0, res
    assert res["verdicts"] == {"old": {"XDP_PASS": len(MIX)}, "new": {"XDP_PASS": len(MIX)}}, res
    assert res["transitions"] == {} and res["rewritten"]["frames"] == 0 and res["map_effects"] == {}, res
    assert live_state(attached["pair"], attached["maps"]) == before


@pytest.mark.debian12("replay")
def test_drop_tcp_variant_changes_exactly_the_tcp_frames(run_distro, attached, candidates):
    before = live_state(attached["pair"], attached["maps"])
    res = replay(run_distro, attached, candidates["drop_tcp"], constants={"xdp_action": XDP_PASS}, diff=True)
    assert res["changed_verdicts"] == 4, res
    assert list(res["transitions"]) == ["XDP_PASS -> XDP_DROP"], res
    step = res["transitions"]["XDP_PASS -> XDP_DROP"]
    assert step["frames"] == 4 and sum(f["frames"] for f in step["flows"]) == 4, step
    assert all(f["flow"].startswith("tcp ") for f in step["flows"]), step
    assert [e["index"] for e in step["examples"]] == [6, 7, 8], step
    assert res["verdicts"]["new"] == {"XDP_DROP": 4, "XDP_PASS": len(MIX) - 4}, res
    # Both count every frame per protocol: the maps end alike.
    assert res["map_effects"] == {}, res
    assert "XDP_PASS -> XDP_DROP: 4 frames" in res["diff"]["prepared"], res["diff"]
    assert live_state(attached["pair"], attached["maps"]) == before


def test_header_rewrite_shows_the_bytes_changed(run_distro, attached, candidates):
    frames = mix_frames(attached["pair"])
    res = replay(run_distro, attached, candidates["swap_macs"], constants={"xdp_action": XDP_PASS})
    assert res["changed_verdicts"] == 0 and res["rewritten"]["frames"] == len(MIX), res
    first = res["rewritten"]["examples"][0]
    old, new = bytes.fromhex(first["old"]), bytes.fromhex(first["new"])
    assert old == frames[0] and new == frames[0][6:12] + frames[0][0:6] + frames[0][12:], first


def test_map_effects_show_what_each_program_counts(run_distro, attached, candidates):
    """A candidate that no longer counts: each protocol's counter as the live map had it (the burst's 7 UDP
    frames), what the attached program left (the replayed frames added) and what the candidate left (none)."""
    res = replay(run_distro, attached, candidates["no_count"], constants={"xdp_action": XDP_PASS})
    assert res["changed_verdicts"] == 0, res
    effects = {int.from_bytes(bytes.fromhex(key), "little"): value
               for key, value in res["map_effects"]["proto_count"].items()}
    assert {proto: (v["old"] - v["start"], v["new"] - v["start"]) for proto, v in effects.items()} == {
        17: (9, 0), 6: (4, 0), 1: (2, 0), 58: (1, 0)}, effects
    assert effects[17]["start"] == 7, effects


def test_bad_input_is_a_clear_error_and_changes_nothing(run_distro, attached, candidates, tc_obj, tmp_path):
    before = live_state(attached["pair"], attached["maps"])
    pcapng = tmp_path / "x.pcapng"
    pcapng.write_bytes(bytes.fromhex("0a0d0d0a") + bytes(24))
    res = replay(run_distro, attached, candidates["same"], pcap=str(pcapng))
    assert res.get("failed") and "pcapng" in res["msg"], res
    truncated = tmp_path / "cut.pcap"
    truncated.write_bytes(open(attached["pcap"], "rb").read()[:-10])
    res = replay(run_distro, attached, candidates["same"], pcap=str(truncated))
    assert res.get("failed") and "truncated" in res["msg"], res
    cooked = tmp_path / "cooked.pcap"
    cooked.write_bytes(struct.pack("=IHHiIII", 0xa1b2c3d4, 2, 4, 0, 0, 65535, 113))
    res = replay(run_distro, attached, candidates["same"], pcap=str(cooked))
    assert res.get("failed") and "113" in res["msg"], res
    res = replay(run_distro, attached, candidates["same"], program="nope")
    assert res.get("failed") and "nope" in res["msg"], res
    res = replay(run_distro, attached, tc_obj)  # classifiers only: no XDP program to test-run
    assert res.get("failed") and "xdp" in res["msg"].lower(), res
    assert live_state(attached["pair"], attached["maps"]) == before
    assert not [n for n in os.listdir(os.path.dirname(os.path.dirname(os.path.dirname(attached["maps"]))))
                if n.startswith("replay-")]


def test_a_live_map_that_cannot_be_copied_is_refused(run_distro, attached, candidates):
    """The attached program upgraded to one with a program array: replay names the map and stops."""
    pair = attached["pair"]
    res = run_distro("xdp_program", dict(interface="eth0", netns=pair.rx, object=candidates["prog_array"],
                                         mode="native"))
    assert res["changed"] and not res.get("failed"), res
    prog_id = xdp_attached(pair.rx)["native"]
    res = replay(run_distro, attached, candidates["prog_array"])
    assert res.get("failed") and "jumps" in res["msg"] and "prog_array" in res["msg"], res
    assert xdp_attached(pair.rx)["native"] == prog_id
    netns_dir = os.path.dirname(os.path.dirname(os.path.dirname(attached["maps"])))
    assert not [n for n in os.listdir(netns_dir) if n.startswith("replay-")], "a copy was left pinned"


def test_a_program_task_replays_before_it_changes_anything(run_distro, attached, candidates):
    """xdp_program with replay: check mode predicts the change and what it does to the frames (nothing changes),
    the run compares before it upgrades, and the next check compares the program with itself."""
    pair = attached["pair"]
    task = dict(interface="eth0", netns=pair.rx, object=candidates["drop_tcp"], mode="native",
                constants={"xdp_action": XDP_PASS}, replay=attached["pcap"])
    before = live_state(pair, attached["maps"])
    res = run_distro("xdp_program", task, check=True)
    assert res["changed"] and res["replay"]["compared"] and res["replay"]["changed_verdicts"] == 4, res
    assert "XDP_PASS -> XDP_DROP: 4 frames" in res["replay"]["summary"], res["replay"]
    assert live_state(pair, attached["maps"]) == before
    res = run_distro("xdp_program", task)
    assert res["changed"] and res["replay"]["changed_verdicts"] == 4, res
    assert xdp_attached(pair.rx)["native"] != before[0]
    res = run_distro("xdp_program", task, check=True)
    assert not res["changed"] and res["replay"]["changed_verdicts"] == 0, res


def test_replay_where_nothing_is_attached_compares_nothing(run_distro, pair, drop_obj, tmp_path):
    pcap = str(tmp_path / "mix.pcap")
    _pcap.write(pcap, mix_frames(pair))
    res = run_distro("xdp_program", dict(interface="eth0", netns=pair.rx, object=drop_obj, replay=pcap), check=True)
    assert res["changed"] and res["replay"]["compared"] is False and "no program" in res["replay"]["reason"], res
    res = run_distro("xdp_program", dict(interface="eth0", netns=pair.rx, object=drop_obj, replay=pcap,
                                         state="absent"), check=True)
    assert res.get("failed") and "state present" in res["msg"], res


def test_tc_replay_names_the_tc_verdicts(run_distro, pair, tc_obj, tmp_path):
    """tc_drop_count (TC_ACT_SHOT) against itself told to pass (TC_ACT_OK): every frame changes verdict."""
    pcap = str(tmp_path / "mix.pcap")
    _pcap.write(pcap, mix_frames(pair))
    res = run_distro("tc_program", dict(interface="eth0", netns=pair.rx, object=tc_obj, program="tc_drop_count"))
    assert res["changed"] and not res.get("failed"), res
    res = run_distro("replay", dict(hook="tc", interface="eth0", netns=pair.rx, pcap=pcap, object=tc_obj,
                                    program="tc_drop_count", constants={"tc_action": 0}))
    assert not res.get("failed"), res
    assert res["transitions"]["TC_ACT_SHOT -> TC_ACT_OK"]["frames"] == len(MIX), res
    res = run_distro("replay", dict(hook="tc", interface="eth0", netns=pair.rx, pcap=pcap, object=tc_obj,
                                    program="tc_drop_count"))
    assert res["changed_verdicts"] == 0 and res["verdicts"]["old"] == {"TC_ACT_SHOT": len(MIX)}, res
    # A named attachment beside it, passing: replay compares with the one its name says.
    res = run_distro("tc_program", dict(interface="eth0", netns=pair.rx, object=tc_obj, program="tc_drop_count",
                                        name="counter", constants={"tc_action": 0}))
    assert res["changed"] and not res.get("failed"), res
    res = run_distro("replay", dict(hook="tc", interface="eth0", netns=pair.rx, name="counter", pcap=pcap,
                                    object=tc_obj, program="tc_drop_count"))
    assert res["transitions"]["TC_ACT_OK -> TC_ACT_SHOT"]["frames"] == len(MIX), res
    res = run_distro("replay", dict(hook="tc", interface="eth0", netns=pair.rx, name="nobody", pcap=pcap,
                                    object=tc_obj, program="tc_drop_count"))
    assert res.get("failed") and "no program" in res["msg"], res
    res = run_distro("replay", dict(interface="eth0", netns=pair.rx, name="counter", pcap=pcap, object=tc_obj))
    assert res.get("failed") and "name is for a named tc attachment" in res["msg"], res


@pytest.fixture(scope="module")
def mcast_obj(tmp_path_factory):
    return compile_bpf(os.path.join(BPF_DIR, "xdp_multicast.bpf.c"), tmp_path_factory.mktemp("mcast") / "mcast.o",
                       INCLUDE)


def test_a_multicast_switch_replays_with_copies_of_its_groups(run_distro, pair, mcast_obj, tmp_path):
    """xdp_multicast keeps its groups in a map of devmaps: the copies carry them, so a frame to the group is
    redirected (broadcast) in the replay as on the hook, and the other frames pass."""
    res = run_distro("xdp_program", dict(interface="eth0", netns=pair.rx, object=mcast_obj, program="xdp_multicast",
                                         shared_maps="rp", mode="native"))
    assert res["changed"] and not res.get("failed"), res
    res = run_distro("devmap_group", dict(netns=pair.rx, name="video", shared_maps="rp", members=["eth0"],
                                          addresses=["239.1.1.1"]))
    assert res["changed"] and not res.get("failed"), res
    group = _frames.build_frame("udp", pair.tx_mac, "01:00:5e:01:01:01", pair.tx_ip, "239.1.1.1")
    pcap = str(tmp_path / "mcast.pcap")
    _pcap.write(pcap, mix_frames(pair) + [group])
    res = run_distro("replay", dict(interface="eth0", netns=pair.rx, pcap=pcap, object=mcast_obj,
                                    program="xdp_multicast"))
    assert not res.get("failed"), res
    assert res["changed_verdicts"] == 0 and res["map_effects"] == {}, res
    assert res["verdicts"]["old"] == {"XDP_PASS": len(MIX), "XDP_REDIRECT": 1}, res


def test_a_captured_sample_replays(run_distro, pair, drop_obj, candidates, tmp_path, module_start_seconds):
    """Frames captured on the sender's side of the veth (before the receiver's XDP program: UDP, TCP, ICMP over
    IPv4 and IPv6, a VLAN-tagged TCP frame, ARP, other) replayed against the drop-TCP release: exactly the TCP
    frames change, PASS to DROP."""
    counts, frames = capture_mix(pair)
    res = run_distro("xdp_program", dict(interface="eth0", netns=pair.rx, object=drop_obj, mode="native",
                                         constants={"xdp_action": XDP_PASS}))
    assert res["changed"], res
    pcap = tmp_path / "sample.pcap"
    captures = Captures(run_distro, module_start_seconds)
    try:
        future = captures.start(pair.tx, pcap, direction="out", count=len(frames), seconds=60)
        send_from(pair.tx, frames)
        captured = future.result(timeout=90)
    finally:
        captures.close()
    assert captured["frames"] == len(frames) and captured["protocols"] == counts, captured
    res = replay(run_distro, {"pair": pair, "pcap": str(pcap)}, candidates["drop_tcp"],
                 constants={"xdp_action": XDP_PASS})
    assert res["frames"] == len(frames) and res["changed_verdicts"] == counts["tcp"], res
    step = res["transitions"]["XDP_PASS -> XDP_DROP"]
    assert {f["flow"].split()[0] for f in step["flows"]} == {"tcp"}, step
