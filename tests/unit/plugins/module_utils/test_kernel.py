"""host/kernel: the running kernel's release as (major, minor), and the generic-broadcast behaviour decided by
it: 6.1 (seen sharing one buffer among the copies) and the releases not seen are refused, 6.18 (seen right) and
later are not. The behaviour itself is shown on both kernels by tests/integration/test_devmap_group.py."""

import collections
import os

import pytest

from ansible_collections.ebpf.xdp.plugins.module_utils.host import kernel as _kernel

Uname = collections.namedtuple("Uname", "sysname nodename release version machine")


@pytest.mark.parametrize("release,expected,shares", [
    ("6.1.0-50-amd64", (6, 1), True),
    ("6.17.9", (6, 17), True),
    ("6.18.44-fc-v1252", (6, 18), False),
    ("7.0.0-rc1", (7, 0), False),
    ("unknown", (0, 0), True),
])
def test_release_and_the_generic_broadcast_decision(monkeypatch, release, expected, shares):
    monkeypatch.setattr(os, "uname", lambda: Uname("Linux", "h", release, "#1", "x86_64"))
    assert _kernel.release() == expected
    assert _kernel.generic_broadcast_shares_buffer() is shares


def test_the_refusal_names_the_kernel_the_ports_and_the_way_out(monkeypatch):
    monkeypatch.setattr(os, "uname", lambda: Uname("Linux", "h", "6.1.0-50-amd64", "#1", "x86_64"))
    said = _kernel.generic_egress_refusal("group video", ["p0", "p2"])
    assert said.startswith("group video: on this kernel (Linux 6.1.0-50-amd64) a devmap egress program cannot")
    for words in ("share one buffer", "Linux 6.18 and later", "port(s) of the map set: p0, p2", "mode: native",
                  "nothing was changed"):
        assert words in said, said
