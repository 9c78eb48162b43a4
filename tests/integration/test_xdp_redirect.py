"""files/bpf/xdp_redirect.bpf.c through xdp_program: XDP forwarding through a router namespace."""

import os

import pytest

from conftest import BPF_DIR, assert_rhythm, compile_bpf, sh


@pytest.fixture(scope="module")
def redirect_obj(tmp_path_factory):
    return compile_bpf(os.path.join(BPF_DIR, "xdp_redirect.bpf.c"),
                       tmp_path_factory.mktemp("xdpredirect") / "xdp_redirect.o", [os.path.join(BPF_DIR, "include")])


@pytest.mark.parametrize("mode", ["native", "generic"])
def test_xdp_redirect_forwards_through_the_router(run_distro, chain, redirect_obj, drop_obj, mode):
    """Frames into the router's eth0 leave by its eth1 (XDP) and are counted on the receiver.

    Native redirect into a veth needs an XDP program on the peer: the receiver's xdp_drop_count is one.
    """
    run_distro("xdp_program", dict(interface="eth0", netns=chain.rx, object=drop_obj))
    args = dict(interface="eth0", netns=chain.rt, object=redirect_obj, mode=mode,
                constants={"redirect_ifindex": {"ifindex": "eth1"}})
    assert_rhythm(run_distro, "xdp_program", args)
    sent = run_distro("xdp_trafficgen", dict(interface="eth0", netns=chain.tx, src_ip=chain.pair.tx_ip,
                                             dst_ip=chain.pair.rx_ip, dst_mac=chain.pair.rx_mac,
                                             protocols=["udp", "icmp"], count=40, rate=20000))
    assert sent["sent"] == {"udp": 40, "icmp": 40}, sent
    received = run_distro("xdp_facts", dict(netns=chain.rx, interfaces=["eth0"]))["ansible_facts"]["xdp"]
    assert received["interfaces"]["eth0"]["xdp"]["protocols"] == {"udp": 40, "icmp": 40}
    router = run_distro("xdp_facts", dict(netns=chain.rt, interfaces=["eth0"]))["ansible_facts"]["xdp"]
    assert router["interfaces"]["eth0"]["xdp"]["counters"]["redirect_count"] == {"0": 80}
    # The router's stack never saw them.
    snmp = sh("ip", "netns", "exec", chain.rt, "cat", "/proc/net/snmp").stdout.splitlines()
    names, values = [line.split() for line in snmp if line.startswith("Ip:")][:2]
    assert int(values[names.index("InReceives")]) == 0


@pytest.fixture(scope="module")
def redirect_map_obj(tmp_path_factory):
    return compile_bpf(os.path.join(BPF_DIR, "xdp_redirect_map.bpf.c"),
                       tmp_path_factory.mktemp("xdpredirectmap") / "xdp_redirect_map.o",
                       [os.path.join(BPF_DIR, "include")])


def test_a_devmap_survives_mode_switches_with_its_entries(run_distro, chain, redirect_map_obj, drop_obj):
    """xdp_redirect_map's tx_port is a devmap, which the kernel marks BPF_F_RDONLY_PROG: loading the object
    again over its pin (a mode switch here, an upgrade alike) reuses that very map, entries and all."""
    run_distro("xdp_program", dict(interface="eth0", netns=chain.rx, object=drop_obj))
    args = dict(interface="eth0", netns=chain.rt, object=redirect_map_obj, mode="native")
    attached, _again = assert_rhythm(run_distro, "xdp_program", args)
    tx_port = attached["maps"]["tx_port"]
    entry = dict(path=tx_port, netns=chain.rt, entries=[dict(key=0, value={"ifindex": "eth1"})])
    assert_rhythm(run_distro, "bpf_map_entry", entry)
    # The maps by id and name: their decoded entries count what the modes below deliver.
    map_ids = [(m["id"], m["name"]) for m in run_distro("xdp_facts", dict(netns=chain.rt, interfaces=["eth0"]))[
        "ansible_facts"]["xdp"]["interfaces"]["eth0"]["xdp"]["maps"]]
    delivered = 0
    for mode in ("generic", "native"):
        switched, _again = assert_rhythm(run_distro, "xdp_program", dict(args, mode=mode))
        assert switched["mode"] == mode and switched["maps"]["tx_port"] == tx_port, switched
        facts = run_distro("xdp_facts", dict(netns=chain.rt, interfaces=["eth0"]))["ansible_facts"]["xdp"]
        assert [(m["id"], m["name"]) for m in facts["interfaces"]["eth0"]["xdp"]["maps"]] == map_ids  # not new ones
        entries = run_distro("bpf_map_entry", entry, check=True)
        assert not entries.get("changed"), entries  # the entry is still there
        # Generic XDP on a veth takes redirected frames only with GRO on; the socket engine needs neither.
        sent = run_distro("xdp_trafficgen", dict(interface="eth0", netns=chain.tx, engine="socket",
                                                 src_ip=chain.pair.tx_ip, dst_ip=chain.pair.rx_ip,
                                                 dst_mac=chain.pair.rx_mac, protocols=["udp"], count=30))
        delivered += sent["sent"]["udp"]
        received = run_distro("xdp_facts", dict(netns=chain.rx, interfaces=["eth0"]))["ansible_facts"]["xdp"]
        assert received["interfaces"]["eth0"]["xdp"]["protocols"] == {"udp": delivered}
