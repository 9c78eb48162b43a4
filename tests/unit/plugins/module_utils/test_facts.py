"""Rates and protocol labels: the pure parts of _facts."""

from ansible_collections.ebpf.xdp.plugins.module_utils import _facts


def test_rates_are_per_second_and_nested():
    before = {"proto_count": {"17": 100}, "other": {"1": 5}}
    after = {"proto_count": {"17": 300, "6": 50}, "other": {"1": 5}}
    assert _facts._rate(before, after, 2.0) == {"proto_count": {"17": 100.0, "6": 25.0}, "other": {"1": 0.0}}


def test_protocol_names():
    assert _facts.protocol_name(17) == "udp"
    assert _facts.protocol_name(6) == "tcp"
    assert _facts.protocol_name(0) == "other"
    assert _facts.protocol_name(250) == "proto-250"
