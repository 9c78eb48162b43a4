"""The filters behind the traffic roles: counts per protocol from facts, growth, the table."""

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.ebpf.xdp.plugins.filter.counter_growth import counter_growth
from ansible_collections.ebpf.xdp.plugins.filter.proto_counts import proto_counts
from ansible_collections.ebpf.xdp.plugins.filter.traffic_table import traffic_table

FACTS = {
    "eth0": {"xdp": {"name": "xdp_drop_count", "counters": {"proto_count": {"6": 50, "17": 70}},
                     "rates": {"proto_count": {"17": 1234.5}}}},
    "eth1": {"xdp": None},
    "eth2": {"xdp": {"name": "other", "counters": {"redirect_count": {"0": 3}}}},
}


def test_proto_counts_per_interface():
    assert proto_counts(FACTS) == {"eth0": {"6": 50, "17": 70}, "eth1": {}, "eth2": {}}
    assert proto_counts(FACTS, ["eth0", "eth9"]) == {"eth0": {"6": 50, "17": 70}, "eth9": {}}
    assert proto_counts(FACTS, ["eth0"], rates=True) == {"eth0": {"17": 1234.5}}
    assert proto_counts({"eth0": {"xdp": {"counters": {"proto_count": {17: 1}}}}}) == {"eth0": {"17": 1}}


def test_counter_growth_nested():
    after = {"eth0": {"17": 1500, "6": 20}, "eth1": {"17": 5}}
    before = {"eth0": {"17": 500, "6": 20}}
    assert counter_growth(after, before) == {"eth0": {"17": 1000}, "eth1": {"17": 5}}
    assert counter_growth({"a": 1}, None) == {"a": 1}
    # Lower than before: reset in between (a re-attach), so all of it is growth since; never negative.
    assert counter_growth({"eth0": {"17": 300, "6": 0}}, {"eth0": {"17": 1500, "6": 20}}) == {"eth0": {"17": 300}}
    with pytest.raises(AnsibleFilterError, match="not a number or a dict"):
        counter_growth({"a": "x"}, {})
    with pytest.raises(AnsibleFilterError, match="expects a dict"):
        counter_growth([1], {})


def test_traffic_table_aligns_columns():
    rows = [{"sender": "sender/eth0", "receiver": "receiver/eth0", "engine": "xdp_trafficgen/xdp", "sent": 1000000,
             "sent_pps": 7012345.6, "received": 999000, "received_pps": 7005333.2, "loss": 0.001},
            {"sender": "vm/eth0", "receiver": "vm/eth0", "engine": "pktgen", "sent": 5, "sent_pps": 1.0,
             "received": 5, "received_pps": 1.0, "loss": 0.0}]
    lines = traffic_table(rows)
    assert lines[0].split() == ["sender", "receiver", "engine", "sent", "sent", "pps", "received", "received", "pps",
                                "loss"]
    assert lines[1].split() == ["sender/eth0", "receiver/eth0", "xdp_trafficgen/xdp", "1000000", "7012346", "999000",
                                "7005333", "0.10%"]
    assert lines[2].endswith("0.00%") and len({len(line) for line in lines}) == 1
    with pytest.raises(AnsibleFilterError, match="a row needs"):
        traffic_table([{"sender": "x"}])
