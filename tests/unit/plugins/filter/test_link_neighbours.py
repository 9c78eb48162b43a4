"""The link_neighbours filter: addressed ends meet across veth pairs and bridges."""

from ansible_collections.ebpf.xdp.plugins.filter.link_neighbours import link_neighbours


def end(netns, ifname, ipv4=None):
    e = {"netns": netns, "ifname": ifname, "mac": "02:00:00:00:%s:%s" % (netns[:2], ifname[-1:])}
    if ipv4:
        e["ipv4"] = ipv4
    return e


LINKS = [
    {"a": end("sender", "eth0", "10.11.0.1/24"), "b": end("receiver", "eth0", "10.11.0.2/24")},
    {"a": end("sender", "eth2", "10.11.3.1/24"), "b": end("bridge", "eth0")},
    {"a": end("bridge", "eth1"), "b": end("receiver", "eth2", "10.11.3.2/24")},
    {"a": end("bridge", "eth2"), "b": end("third", "eth0", "10.11.3.3/24")},
]
BRIDGES = [{"netns": "bridge", "ifname": "br0", "ports": ["eth0", "eth1", "eth2"]}]


def pairs(neighbours):
    return [("%s/%s" % (n["netns"], n["ifname"]), "%s/%s" % (n["peer"]["netns"], n["peer"]["ifname"]))
            for n in neighbours]


def test_without_bridges_the_peer_is_the_other_end_of_an_addressed_pair():
    assert pairs(link_neighbours(LINKS[:1])) == [("sender/eth0", "receiver/eth0"), ("receiver/eth0", "sender/eth0")]
    # A pair into a namespace whose end has no address gives no neighbour.
    assert link_neighbours(LINKS[1:2]) == []
    assert link_neighbours(LINKS) == link_neighbours(LINKS, []) == link_neighbours(LINKS, None)[:2]


def test_a_bridge_joins_every_addressed_end_behind_its_ports():
    assert pairs(link_neighbours(LINKS, BRIDGES)) == [
        ("sender/eth0", "receiver/eth0"), ("receiver/eth0", "sender/eth0"),
        ("sender/eth2", "receiver/eth2"), ("sender/eth2", "third/eth0"),
        ("receiver/eth2", "sender/eth2"), ("receiver/eth2", "third/eth0"),
        ("third/eth0", "sender/eth2"), ("third/eth0", "receiver/eth2")]


def test_ends_of_one_namespace_and_what_a_peer_carries():
    neighbours = link_neighbours(LINKS, BRIDGES, "sender")
    assert pairs(neighbours) == [("sender/eth0", "receiver/eth0"), ("sender/eth2", "receiver/eth2"),
                                 ("sender/eth2", "third/eth0")]
    assert neighbours[1]["ipv4"] == "10.11.3.1/24"
    assert neighbours[1]["peer"] == LINKS[2]["b"], "the peer is the far end itself, with no peer of its own"
    assert link_neighbours(LINKS, BRIDGES, "bridge") == [], "bridge ports have no address"
    assert "peer" not in LINKS[0]["a"], "the input is not modified"


def test_a_port_in_another_namespace_of_the_same_name_is_not_joined():
    bridges = [{"netns": "elsewhere", "ifname": "br0", "ports": ["eth0", "eth1"]}]
    assert pairs(link_neighbours(LINKS[1:3], bridges)) == []
