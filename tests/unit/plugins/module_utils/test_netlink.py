"""host/netlink and host/nlmsg: the link attributes of an RTM_NEWLINK answer, parsed without pyroute2."""

import struct

from ansible_collections.ebpf.xdp.plugins.module_utils.host import netlink as _netlink, nlmsg as _nlmsg

attr = _nlmsg.attr


def ifinfomsg(ifindex, flags=0):
    return struct.pack("=BxHiII", 0, 1, ifindex, flags, 0)


def test_a_link_with_a_generic_xdp_program_is_described():
    xdp = attr(_netlink.IFLA_XDP_ATTACHED, b"\x02") + attr(_netlink.IFLA_XDP_PROG_ID, struct.pack("=I", 42)) + \
        attr(_netlink.IFLA_XDP_SKB_PROG_ID, struct.pack("=I", 42))
    stats = struct.pack("=8Q", 10, 20, 1000, 2000, 1, 2, 3, 4) + b"\0" * 64
    body = attr(_netlink.IFLA_IFNAME, b"eth0\0") + attr(_netlink.IFLA_MTU, struct.pack("=I", 1500)) + \
        attr(_netlink.IFLA_ADDRESS, bytes.fromhex("020000000001")) + attr(_netlink.IFLA_STATS64, stats) + \
        attr(_netlink.IFLA_XDP | 0x8000, xdp) + \
        attr(_netlink.IFLA_LINKINFO | 0x8000, attr(_netlink.IFLA_INFO_KIND, b"veth\0")) + \
        attr(_netlink.IFLA_LINK, struct.pack("=I", 9)) + attr(_netlink.IFLA_LINK_NETNSID, struct.pack("=i", 2)) + \
        attr(_netlink.IFLA_CARRIER, b"\x01")  # nested attributes with NLA_F_NESTED set, as the kernel sends them
    # What interfaces() parses: the attributes _describe() reads, and none of the others (IFLA_TXQLEN here).
    body += attr(13, struct.pack("=I", 1000))
    wanted = _nlmsg.attributes(body, wanted=_netlink.LINK_ATTRIBUTES)
    assert 13 in _nlmsg.attributes(body) and 13 not in wanted
    described = _netlink._describe(wanted, ifinfomsg(7, _netlink.IFF_UP))
    assert described == _netlink._describe(_nlmsg.attributes(body), ifinfomsg(7, _netlink.IFF_UP))
    assert described == {
        "ifname": "eth0", "ifindex": 7, "mac": "02:00:00:00:00:01", "mtu": 1500, "up": True, "carrier": True,
        "kind": "veth", "link": 9, "link_netnsid": 2,
        "xdp": {"mode": "generic", "prog_id": 42, "native_prog_id": 0, "generic_prog_id": 42},
        "stats": {"rx_packets": 10, "tx_packets": 20, "rx_bytes": 1000, "tx_bytes": 2000, "rx_dropped": 3,
                  "tx_dropped": 4}}


def test_a_link_without_xdp_or_address():
    body = attr(_netlink.IFLA_IFNAME, b"tun0\0")
    described = _netlink._describe(_nlmsg.attributes(body), ifinfomsg(3))
    assert (described["up"], described["carrier"], described["kind"], described["link"]) == (False, False, None, 0)
    assert described["link_netnsid"] is None
    assert described["mac"] is None and described["xdp"]["mode"] is None and described["xdp"]["prog_id"] == 0
    assert set(described["stats"].values()) == {0}
