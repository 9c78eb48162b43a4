"""The link_ends filter: topology links to ends with peers."""

from ansible_collections.ebpf.xdp.plugins.filter.link_ends import link_ends

LINKS = [
    {"a": {"netns": "sender", "ifname": "eth0"}, "b": {"netns": "receiver", "ifname": "eth0"}},
    {"a": {"netns": "sender", "ifname": "eth1"}, "b": {"netns": "router", "ifname": "eth1"}},
]


def test_all_ends_in_topology_order():
    ends = link_ends(LINKS)
    assert [(e["netns"], e["ifname"], e["peer"]["netns"]) for e in ends] == [
        ("sender", "eth0", "receiver"), ("receiver", "eth0", "sender"),
        ("sender", "eth1", "router"), ("router", "eth1", "sender")]


def test_ends_of_one_namespace():
    ends = link_ends(LINKS, "sender")
    assert [e["ifname"] for e in ends] == ["eth0", "eth1"]
    assert ends[1]["peer"] == {"netns": "router", "ifname": "eth1"}
    assert link_ends(LINKS, "nowhere") == []
    assert "peer" not in LINKS[0]["a"], "the input is not modified"
