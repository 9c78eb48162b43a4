"""files/bpf/tc_redirect.bpf.c in the kernel: the tcbpf1 redirect programs and tc_drop_count.

BPF_PROG_TEST_RUN shows what "frame in, verdict out" can: classification,
verdicts, what the redirect helpers answer. A veth pair between two
namespaces shows what only real traffic does: a redirect or a clone that
leaves through an interface, the verdict of a cls_bpf filter, and VLAN tags
the kernel keeps in skb metadata rather than in the packet. Every interface
a program redirects to is one of the pair's, never one of the host's.
"""

import json
import os
import socket
import struct
import time

import pytest

from conftest import BPF_DIR, compile_bpf, sh
from test_xdp_drop_count import MACS, ipv6_frame, qinq

from ansible_collections.ebpf.xdp.plugins.module_utils import _facts
from ansible_collections.ebpf.xdp.plugins.module_utils.host import netns as _netns
from ansible_collections.ebpf.xdp.plugins.module_utils.bpf import libbpf as _bpf, loader as _loader
from ansible_collections.ebpf.xdp.plugins.module_utils.traffic import frames as _frames

TC_ACT_UNSPEC, TC_ACT_OK, TC_ACT_SHOT, TC_ACT_REDIRECT = -1, 0, 2, 7
PROGRAMS = ["redirect_xmit", "redirect_ingress", "clone_redirect_xmit", "tc_drop_count"]
OTHER_MAC = "02:00:00:aa:00:99"  # neither end of the pair: no stack answers these frames
ETH_P_ALL = 0x0003

# Helpers for the VLAN tests: what is in skb metadata, and a tag put there.
VLAN_SOURCE = r"""
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __type(key, __u32);
    __type(value, __u64);
    __uint(max_entries, 1);
} in_metadata SEC(".maps");

/* Counts frames whose (outer) tag is in skb metadata; the next program runs. */
SEC("tc")
int vlan_seen(struct __sk_buff *skb)
{
    __u32 key = 0;
    __u64 *count = bpf_map_lookup_elem(&in_metadata, &key);

    if (count && skb->vlan_present)
        __sync_fetch_and_add(count, 1);
    return TC_ACT_UNSPEC;
}

/* Tags the frame with VLAN 7 in metadata, as a VLAN device over veth does. */
SEC("tc")
int vlan_push(struct __sk_buff *skb)
{
    bpf_skb_vlan_push(skb, bpf_htons(ETH_P_8021Q), 7);
    return TC_ACT_UNSPEC;
}

char _license[] SEC("license") = "GPL";
"""


@pytest.fixture(scope="session")
def vlan_obj(tmp_path_factory):
    src = tmp_path_factory.mktemp("vlan") / "vlan.bpf.c"
    src.write_text(VLAN_SOURCE)
    return compile_bpf(src, src.with_suffix(".o"))


def load(obj, program, constants=None):
    """Loaded, not attached: its maps stay out of bpffs and go with the program."""
    return _loader.load(obj, program, "sched_cls", constants)


def counts(loaded, name):
    with loaded.open_map(name) as counter_map:
        return _facts.read_counters(counter_map)


def eventually(read, expected, timeout=2.0):
    """read() once it equals expected (a softirq may finish after send() returns), else its last value."""
    deadline = time.monotonic() + timeout
    value = read()
    while value != expected and time.monotonic() < deadline:
        time.sleep(0.02)
        value = read()
    return value


def rx_packets(netns, ifname):
    stats = json.loads(sh("ip", "-n", netns, "-j", "-s", "link", "show", "dev", ifname).stdout)[0]["stats64"]
    return stats["rx"]["packets"]


def sniffer(ifname):
    """A packet socket on ifname in the current namespace, for sniffed()."""
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    sock.bind((ifname, 0))
    sock.settimeout(0.5)
    return sock


def sniffed(sock, frame):
    """Copies of frame that arrived on the sniffer's interface (what it transmitted left out)."""
    seen = 0
    with sock:
        try:
            while True:
                data, addr = sock.recvfrom(4096)
                if addr[2] != socket.PACKET_OUTGOING and data[:len(frame)] == frame:
                    seen += 1
        except socket.timeout:
            return seen


def other_host_frame(pair, protocol="udp", vlan=None):
    """From rx's side of the pair to a host that is not there."""
    return _frames.build_frame(protocol, pair.rx_mac, OTHER_MAC, pair.rx_ip, "10.99.0.9", vlan=vlan)


# ---------------------------------------------------------------- the object


def test_bpf_object_lists_four_classifiers(run_distro, tmp_path):
    res = run_distro("bpf_object", dict(src=os.path.join(BPF_DIR, "tc_redirect.bpf.c"), dest=str(tmp_path / "tc.o"),
                                        cache_dir=str(tmp_path / "cache")))
    assert res["changed"] and not res.get("failed"), res
    assert res["programs"] == [{"name": name, "section": "tc", "type": "sched_cls"} for name in PROGRAMS]
    assert res["maps"] == [
        {"name": "proto_count", "type": "percpu_array", "key_size": 4, "value_size": 8, "max_entries": 256},
        {"name": "redirect_count", "type": "percpu_array", "key_size": 4, "value_size": 8, "max_entries": 2},
    ]


@pytest.mark.parametrize("program", PROGRAMS)
def test_the_verifier_accepts_every_program(tc_obj, program):
    counter = "proto_count" if program == "tc_drop_count" else "redirect_count"
    with load(tc_obj, program) as loaded:
        assert loaded.info["type"] == "sched_cls"
        assert counts(loaded, counter) == {}


@pytest.mark.parametrize("program", PROGRAMS)
def test_the_verifier_accepts_every_program_as_a_tc_action(tc_obj, program):
    """act_bpf takes only sched_act programs; this kernel has no act_bpf to attach one to."""
    with _loader.load(tc_obj, program, "sched_cls", load_as="sched_act") as loaded:
        assert loaded.info["type"] == "sched_act"


# ---------------------------------------------------------------- tc_drop_count, test runs


@pytest.mark.parametrize("constants, verdict", [(None, TC_ACT_SHOT), ({"tc_action": TC_ACT_OK}, TC_ACT_OK)],
                         ids=["default-shot", "ok"])
def test_tc_drop_count_classifies_like_xdp_drop_count(tc_obj, constants, verdict):
    udp4 = _frames.build_frame("udp", MACS[1], MACS[0], "10.0.0.1", "10.0.0.2")
    tcp4_tagged = _frames.build_frame("tcp", MACS[1], MACS[0], "10.0.0.1", "10.0.0.2", vlan=7)
    short_ihl = bytearray(udp4)
    short_ihl[14] = 0x44  # IHL 4: 16 bytes, below the fixed header
    long_ihl = bytearray(udp4[:40])
    long_ihl[14] = 0x4F  # IHL 15: 60 bytes of header in a 40-byte frame
    # The test run itself refuses untagged IPv4 frames shorter than Ethernet +
    # IPv4 header on this kernel (it reads skb->protocol from the Ethernet
    # header): truncation is shown with frames it lets through.
    frames = {
        "ipv4 udp": (udp4, 17),
        "ipv4 tcp, 802.1Q": (tcp4_tagged, 6),
        "ipv4 icmp, QinQ": (qinq(_frames.build_frame("icmp", MACS[1], MACS[0], "10.0.0.1", "10.0.0.2")), 1),
        "ipv6 udp": (ipv6_frame(17), 17),
        "ipv6 icmpv6, 802.1Q": (ipv6_frame(58, vlan=3), 58),
        "ipv6 tcp, QinQ": (qinq(ipv6_frame(6)), 6),
        "arp": (udp4[:12] + struct.pack("!H", 0x0806) + b"\0" * 46, 0),
        "ipv4 header shorter than 20 bytes": (bytes(short_ihl), 0),
        "ipv4 options cut off": (bytes(long_ihl), 0),
        "802.1Q, ipv4 cut off": (tcp4_tagged[:28], 0),
    }
    expected = {}
    with load(tc_obj, "tc_drop_count", constants) as loaded:
        for name, (frame, proto) in frames.items():
            retval, _duration = loaded.program.test_run(frame, repeat=3)
            assert retval == verdict, name
            expected[proto] = expected.get(proto, 0) + 3
        assert counts(loaded, "proto_count") == expected


def test_a_test_run_needs_an_ethernet_header(tc_obj):
    with load(tc_obj, "tc_drop_count") as loaded:
        with pytest.raises(_bpf.BpfError, match="Invalid argument"):
            loaded.program.test_run(b"\0" * 13)
        assert counts(loaded, "proto_count") == {}


# ---------------------------------------------------------------- redirects, test runs


@pytest.mark.parametrize("program", ["redirect_xmit", "redirect_ingress"])
@pytest.mark.parametrize("target", ["lo", None], ids=["lo", "unset"])
def test_redirect_answers_tc_act_redirect_and_a_test_run_sends_nothing(tc_obj, pair, program, target):
    frame = other_host_frame(pair)
    with _netns.netns(pair.rx):
        constants = {"redirect_ifindex": _netns.ifindex(target)} if target else None
        watch_lo = sniffer("lo")
        with load(tc_obj, program, constants) as loaded:
            retval, _duration = loaded.program.test_run(frame, repeat=5)
            # Even with no target (ifindex 0): the helper only records it, the
            # kernel looks the device up after the program has returned.
            assert retval == TC_ACT_REDIRECT
            assert counts(loaded, "redirect_count") == {0: 5}
    assert sniffed(watch_lo, frame) == 0


@pytest.mark.parametrize("after_clone, retval", [(None, TC_ACT_SHOT), (TC_ACT_UNSPEC, 2 ** 32 - 1), (TC_ACT_OK, 0)],
                         ids=["default-shot", "unspec", "ok"])
def test_clone_redirect_xmit_sends_a_clone_even_in_a_test_run(tc_obj, pair, after_clone, retval):
    frame = other_host_frame(pair)
    with _netns.netns(pair.tx):
        watch_tx = sniffer("eth0")
    with _netns.netns(pair.rx):
        constants = {"redirect_ifindex": _netns.ifindex("eth0")}
        if after_clone is not None:
            constants["after_clone"] = after_clone
        with load(tc_obj, "clone_redirect_xmit", constants) as loaded:
            assert loaded.program.test_run(frame, repeat=5)[0] == retval
            assert counts(loaded, "redirect_count") == {0: 5}
    assert sniffed(watch_tx, frame) == 5  # out of rx/eth0, into its peer


def test_clone_redirect_xmit_counts_what_was_refused(tc_obj, pair):
    frame = other_host_frame(pair)
    before = rx_packets(pair.tx, "eth0")
    with _netns.netns(pair.rx):
        eth0 = _netns.ifindex("eth0")
        # No target set: no device 0, the helper answers -EINVAL.
        with load(tc_obj, "clone_redirect_xmit") as loaded:
            assert loaded.program.test_run(frame, repeat=3)[0] == TC_ACT_SHOT
            assert counts(loaded, "redirect_count") == {1: 3}
        # A target that is down: its queue drops the clone and the helper
        # answers NET_XMIT_CN, a positive value.
        sh("ip", "-n", pair.rx, "link", "set", "eth0", "down")
        with load(tc_obj, "clone_redirect_xmit", {"redirect_ifindex": eth0}) as loaded:
            assert loaded.program.test_run(frame, repeat=3)[0] == TC_ACT_SHOT
            assert counts(loaded, "redirect_count") == {1: 3}
    assert rx_packets(pair.tx, "eth0") == before


# ---------------------------------------------------------------- real traffic on the pair


@pytest.mark.kernel("tcx")
@pytest.mark.parametrize("program, target_ns, target", [("redirect_xmit", "tx", "eth0"),
                                                        ("redirect_ingress", "rx", "lo")])
def test_redirect_on_a_tcx_hook(tc_obj, pair, program, target_ns, target):
    """rx/eth0 ingress -> its own egress (back to tx), or -> lo's ingress."""
    frame = _frames.build_frame("udp", pair.tx_mac, OTHER_MAC, pair.tx_ip, "10.99.0.9")
    with _netns.netns(getattr(pair, target_ns)):
        watch = sniffer(target)
    with _netns.netns(pair.rx):
        target_index = _netns.ifindex("eth0" if program == "redirect_xmit" else "lo")
        with load(tc_obj, program, {"redirect_ifindex": target_index}) as loaded, \
                _bpf.Link.create_tcx(loaded.program, _netns.ifindex("eth0"), _bpf.BPF_TCX_INGRESS):
            with _netns.netns(pair.tx):
                _frames.send("eth0", {"udp": frame}, 10)
            assert eventually(lambda: counts(loaded, "redirect_count"), {0: 10}) == {0: 10}
    assert sniffed(watch, frame) == 10


def test_tc_drop_count_as_a_cls_bpf_filter_drops_what_it_counts(tc_obj, pair, pin_root):
    frame = _frames.build_frame("udp", pair.tx_mac, pair.rx_mac, pair.tx_ip, pair.rx_ip)
    tc = ["nsenter", "--net=/run/netns/%s" % pair.rx, "tc"]  # not `tc -n`: that remounts /sys, bpffs with it
    os.makedirs(pin_root)
    pinned = os.path.join(pin_root, "tc_drop_count")
    with load(tc_obj, "tc_drop_count") as loaded:
        loaded.program.pin(pinned)
        sh(*tc + ["qdisc", "add", "dev", "eth0", "clsact"])
        sh(*tc + ["filter", "add", "dev", "eth0", "ingress", "bpf", "object-pinned", pinned, "direct-action"])
        assert "tc_drop_count" in sh(*tc + ["filter", "show", "dev", "eth0", "ingress"]).stdout
        received = pair.ip_in_receives()
        with _netns.netns(pair.tx):
            _frames.send("eth0", {"udp": frame}, 20)
        assert eventually(lambda: counts(loaded, "proto_count"), {17: 20}) == {17: 20}
        assert pair.ip_in_receives() == received  # TC_ACT_SHOT: IP never saw them


@pytest.mark.kernel("tcx")
def test_tc_drop_count_counts_tags_moved_into_metadata_at_ingress(tc_obj, vlan_obj, pair):
    """The stack moves a frame's outer tag into skb->vlan_tci before tc ingress runs."""
    def frame(protocol, vlan=None):
        return _frames.build_frame(protocol, pair.tx_mac, OTHER_MAC, pair.tx_ip, "10.99.0.9", vlan=vlan)

    frames = [("udp", frame("udp")), ("tcp, 802.1Q", frame("tcp", vlan=7)), ("icmp, QinQ", qinq(frame("icmp"))),
              ("ipv6 icmpv6, 802.1Q", ipv6_frame(58, vlan=3))]
    with _netns.netns(pair.rx), load(vlan_obj, "vlan_seen") as seen, \
            load(tc_obj, "tc_drop_count", {"tc_action": TC_ACT_OK}) as loaded:
        eth0 = _netns.ifindex("eth0")
        with _bpf.Link.create_tcx(seen.program, eth0, _bpf.BPF_TCX_INGRESS), \
                _bpf.Link.create_tcx(loaded.program, eth0, _bpf.BPF_TCX_INGRESS):
            with _netns.netns(pair.tx):
                _frames.send("eth0", frames, 10)
            expected = {17: 10, 6: 10, 1: 10, 58: 10}
            assert eventually(lambda: counts(loaded, "proto_count"), expected) == expected
            assert counts(seen, "in_metadata") == {0: 30}  # every tagged frame; QinQ keeps its inner tag


@pytest.mark.kernel("tcx")
def test_tc_drop_count_counts_tags_in_metadata_at_egress(tc_obj, vlan_obj, pair):
    """A tag in metadata on the way out (a VLAN device over veth; here bpf_skb_vlan_push) is not in the packet."""
    frames = [("udp", _frames.build_frame("udp", pair.tx_mac, OTHER_MAC, pair.tx_ip, "10.99.0.9")),
              ("ipv6 udp, 802.1Q", ipv6_frame(17, vlan=3))]
    with _netns.netns(pair.tx), load(vlan_obj, "vlan_push") as push, load(vlan_obj, "vlan_seen") as seen, \
            load(tc_obj, "tc_drop_count", {"tc_action": TC_ACT_OK}) as loaded:
        eth0 = _netns.ifindex("eth0")
        with _bpf.Link.create_tcx(push.program, eth0, _bpf.BPF_TCX_EGRESS), \
                _bpf.Link.create_tcx(seen.program, eth0, _bpf.BPF_TCX_EGRESS), \
                _bpf.Link.create_tcx(loaded.program, eth0, _bpf.BPF_TCX_EGRESS):
            _frames.send("eth0", frames, 10)
            assert eventually(lambda: counts(loaded, "proto_count"), {17: 20}) == {17: 20}
            assert counts(seen, "in_metadata") == {0: 20}
