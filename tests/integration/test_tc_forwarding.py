"""tc programs that forward, through a router namespace between sender and receiver: bpf_redirect() out of
the router's eth1, bpf_clone_redirect(), and bpf_redirect() into eth1's receive path, held by each method
(cls_bpf; tcx and act_bpf where the kernel has them, their clear refusal where not: kernel_features).
Apart from test_tc_program.py so that two workers share the long act_bpf runs of Debian's kernel.
"""

import pytest

from conftest import assert_rhythm
from kernel_features import needs

# act_bpf: a u32 match-all filter with a bpf action, the kernel commit's own setup.
FORWARDING_METHODS = [needs("tcx", "tcx"), "cls_bpf", needs("act_bpf", "act_bpf")]


@pytest.mark.parametrize("method", FORWARDING_METHODS)
@pytest.mark.parametrize("program", ["redirect_xmit", "clone_redirect_xmit"])
def test_redirect_forwards_through_the_router(run_distro, chain, tc_obj, drop_obj, method, program):
    """Frames into the router's eth0 leave by its eth1 and are counted by xdp_drop_count on the receiver."""
    run_distro("xdp_program", dict(interface="eth0", netns=chain.rx, object=drop_obj))
    args = dict(interface="eth0", netns=chain.rt, object=tc_obj, program=program, method=method,
                constants={"redirect_ifindex": {"ifindex": "eth1"}})
    assert_rhythm(run_distro, "tc_program", args)
    sent = run_distro("xdp_trafficgen", dict(interface="eth0", netns=chain.tx, src_ip=chain.pair.tx_ip,
                                             dst_ip=chain.pair.rx_ip, dst_mac=chain.pair.rx_mac,
                                             protocols=["udp", "tcp"], count=40, rate=20000))
    assert sent["sent"] == {"udp": 40, "tcp": 40}, sent
    received = run_distro("xdp_facts", dict(netns=chain.rx, interfaces=["eth0"]))["ansible_facts"]["xdp"]
    assert received["interfaces"]["eth0"]["xdp"]["protocols"] == {"udp": 40, "tcp": 40}
    router = run_distro("xdp_facts", dict(netns=chain.rt, interfaces=["eth0"]))["ansible_facts"]["xdp"]
    [entry] = router["interfaces"]["eth0"]["tc"]["ingress"]
    assert entry["name"] == program[:15] and entry["counters"]["redirect_count"] == {"0": 80}, entry
    assert entry["constants"] == {"redirect_ifindex": {"ifindex": "eth1"}}


@pytest.mark.parametrize("method", FORWARDING_METHODS)
def test_redirect_ingress_delivers_into_the_targets_receive_path(run_distro, chain, tc_obj, method):
    """redirect_ingress on eth0 hands frames to eth1's receive path: tc_drop_count at eth1's ingress sees them."""
    count = dict(interface="eth1", netns=chain.rt, object=tc_obj, program="tc_drop_count", method=method)
    run_distro("tc_program", count)
    args = dict(interface="eth0", netns=chain.rt, object=tc_obj, program="redirect_ingress", method=method,
                constants={"redirect_ifindex": {"ifindex": "eth1"}})
    assert_rhythm(run_distro, "tc_program", args)
    run_distro("xdp_trafficgen", dict(interface="eth0", netns=chain.tx, src_ip=chain.pair.tx_ip,
                                      dst_ip=chain.pair.rx_ip, protocols=["icmp"], count=30, rate=20000))
    router = run_distro("xdp_facts", dict(netns=chain.rt, interfaces=["eth1"]))["ansible_facts"]["xdp"]
    [entry] = router["interfaces"]["eth1"]["tc"]["ingress"]
    assert entry["protocols"] == {"icmp": 30}, entry
