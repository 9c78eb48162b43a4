"""Rates and protocol labels: the pure parts of _facts."""

import random
import struct

import pytest

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


def test_batched_counters_are_summed_over_cpus_with_zeros_left_out():
    # Two chunks of a per-CPU array (4-byte keys) read on 3 CPUs: 8-byte values, one per CPU, key by key.
    def chunk(rows):
        keys = b"".join(struct.pack("=I", key) for key, _per_cpu in rows)
        values = b"".join(struct.pack("=3Q", *per_cpu) for _key, per_cpu in rows)
        return keys, values, len(rows)

    batches = [chunk([(0, (0, 0, 0)), (6, (1, 2, 3))]), chunk([(17, (10, 0, 5)), (255, (0, 0, 0))])]
    assert _facts._summed(batches, 4, 3) == {6: 6, 17: 15}
    # A plain array: one value per key.
    keys, values = struct.pack("=2H", 1, 2), struct.pack("=2Q", 0, 9)
    assert _facts._summed([(keys, values, 2)], 2, 1) == {2: 9}


def test_many_and_few_counters_are_summed_alike():
    # A chunk with few counters that are not zero is searched for them, one with many is summed key by key:
    # both give what summing every key gives.
    rng = random.Random(7)
    for busy in (1, 5, 40, 256):
        per_cpu = [[0, 0] for _key in range(256)]
        for key in rng.sample(range(256), busy):
            per_cpu[key][rng.randrange(2)] = rng.randrange(1, 1 << 40)
            per_cpu[key][rng.randrange(2)] += rng.randrange(1 << 8)
        chunk = (struct.pack("=256I", *range(256)), b"".join(struct.pack("=2Q", *pair) for pair in per_cpu), 256)
        expected = {key: sum(pair) for key, pair in enumerate(per_cpu) if sum(pair)}
        assert _facts._summed([chunk], 4, 2) == expected, busy


@pytest.mark.parametrize("max_entries", [0, -1, True, "10"])
def test_an_entry_limit_must_be_a_positive_number(max_entries):
    with pytest.raises(_facts.FactsError, match=r"max_entries must be a positive number of entries to read from "
                                                r"each map, not "):
        _facts.MapReading(max_entries=max_entries)


def test_globs_that_match_nothing_are_said_and_every_one_is_never_missing():
    reading = _facts.MapReading(maps=["*", "flow*", "nosuch"], programs=["xdp_*", "other"])
    assert reading.wants_program({"name": "xdp_btf_count", "program": None})
    # A program also matches by the function name its record keeps (the kernel cuts names at 15 characters).
    assert reading.wants_program({"name": "xdp_a_long_func", "program": "other"})
    assert reading.wants_map("flows") and reading.wants_map("kinds")
    assert reading.unmatched() == {"maps": ["nosuch"], "programs": []}
    assert _facts.MapReading().unmatched() == {"maps": [], "programs": []}


def test_rates_of_every_number_of_a_decoded_value_in_its_shape():
    before = {"packets": 10, "bytes": 600, "last": "XDP_DROP", "hist": [1, 2], "inner": {"n": 1}, "on": True}
    after = {"packets": 30, "bytes": 1800, "last": "XDP_PASS", "hist": [3, 2], "inner": {"n": 5}, "on": False,
             "label": "eth0"}
    rates = _facts._field_rates(before, after, 2.0)
    assert rates == {"packets": 10.0, "bytes": 600.0, "hist": [1.0, 0.0], "inner": {"n": 2.0}}
    # An entry that was not there (an array's zero entry) counts from zero.
    assert _facts._field_rates(None, {"packets": 4}, 2.0) == {"packets": 2.0}
    assert _facts._field_rates(None, 8, 4.0) == 2.0


def test_the_numbers_of_a_decoded_value_by_their_paths():
    value = {"packets": 3, "last": "XDP_DROP", "on": True, "hist": [1, 2], "pair": {"a": 4}, "mac": {"hex": "02"}}
    assert list(_facts.numbers(value)) == [("packets", 3), ("hist[0]", 1), ("hist[1]", 2), ("pair.a", 4)]
    assert list(_facts.numbers(7)) == [("", 7)] and list(_facts.numbers("XDP_PASS")) == []
