"""ebpf.xdp.xdp_trafficgen: exact bursts, check mode, bad input."""


def test_check_mode_sends_nothing(run_distro, pair, drop_obj):
    run_distro("xdp_program", dict(interface="eth0", netns=pair.rx, object=drop_obj))
    res = run_distro("xdp_trafficgen", dict(interface="eth0", netns=pair.tx, src_ip=pair.tx_ip, dst_ip=pair.rx_ip,
                                            dst_mac=pair.rx_mac, protocols=["udp"], count=10), check=True)
    # It would send: a prediction of the action, with nothing sent.
    assert res["changed"] is True and res["total"] == 0
    prog = run_distro("xdp_facts", dict(netns=pair.rx))["ansible_facts"]["xdp"]["interfaces"]["eth0"]["xdp"]
    assert prog["counters"]["proto_count"] == {}


def test_vlan_tagged_frames_are_counted_by_inner_protocol(run_distro, pair, drop_obj):
    run_distro("xdp_program", dict(interface="eth0", netns=pair.rx, object=drop_obj))
    res = run_distro("xdp_trafficgen", dict(interface="eth0", netns=pair.tx, src_ip=pair.tx_ip, dst_ip=pair.rx_ip,
                                            dst_mac=pair.rx_mac, protocols=["tcp"], count=7, vlan=100, size=200))
    assert res["sent"] == {"tcp": 7} and res["tx_dropped"] == 0
    prog = run_distro("xdp_facts", dict(netns=pair.rx))["ansible_facts"]["xdp"]["interfaces"]["eth0"]["xdp"]
    assert prog["protocols"] == {"tcp": 7}


def test_each_protocol_is_counted_as_sent(run_distro, pair, drop_obj):
    run_distro("xdp_program", dict(interface="eth0", netns=pair.rx, object=drop_obj))
    # udp listed twice is still one frame per round.
    res = pair.burst(run_distro, count=40, protocols=("udp", "tcp", "icmp", "udp"))
    assert res["sent"] == {"udp": 40, "tcp": 40, "icmp": 40} and res["total"] == 120, res
    prog = run_distro("xdp_facts", dict(netns=pair.rx))["ansible_facts"]["xdp"]["interfaces"]["eth0"]["xdp"]
    assert prog["protocols"] == res["sent"]
    assert prog["counters"]["proto_count"] == {"1": 40, "6": 40, "17": 40}


def test_bad_input(run_distro, pair):
    base = dict(interface="eth0", netns=pair.tx, src_ip=pair.tx_ip, dst_ip=pair.rx_ip)
    res = run_distro("xdp_trafficgen", dict(base, interface="eth7"))
    assert res["failed"] and "'eth7' does not exist" in res["msg"]
    res = run_distro("xdp_trafficgen", dict(base, dst_mac="02:00"))
    assert res["failed"] and res["msg"] == "dst_mac '02:00' is not a MAC address (six hex bytes separated by colons)"
    res = run_distro("xdp_trafficgen", base, no_caps=True)
    assert res["failed"] and "needs CAP_NET_RAW, CAP_SYS_ADMIN" in res["msg"]


def test_out_of_range_fields(run_distro, pair):
    base = dict(interface="eth0", netns=pair.tx, src_ip=pair.tx_ip, dst_ip=pair.rx_ip)
    for extra, words in ((dict(dst_port=70000), "dst_port must be between"), (dict(vlan=5000), "vlan must be"),
                         (dict(size=20), "size must be between")):
        res = run_distro("xdp_trafficgen", dict(base, **extra))
        assert res["failed"] and words in res["msg"], res
