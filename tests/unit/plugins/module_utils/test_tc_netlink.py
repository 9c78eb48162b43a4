"""hooks/tc_netlink's pure parts: protocols, priorities and verdicts as the kernel encodes them, the refusals
before a request (a slot the kernel would pick itself, an unknown direction or verdict), the kernel's no in
words, and a filter dump's message described as callers see it. The requests themselves go to the kernel in
tests/integration/test_tc_netlink.py; here a dumped message is a stand-in with pyroute2's accessors."""

import errno
import socket
import struct

import pytest

from ansible_collections.ebpf.xdp.plugins.module_utils.hooks import tc_netlink as _tc_netlink
from ansible_collections.ebpf.xdp.plugins.module_utils.hooks.tc_netlink import TcError
from ansible_collections.ebpf.xdp.plugins.module_utils.host.netns import NotFoundError


class Nla:
    """What the description reads of a pyroute2 message: get_attr() by name, fields by key, attrs in order."""

    def __init__(self, fields=None, **attrs):
        self.fields = fields or {}
        self.attrs = attrs

    def get_attr(self, name):
        return self.attrs.get(name)

    def __getitem__(self, key):
        return self.fields[key] if key != "attrs" else list(self.attrs.items())


def act_bpf(prog_id, verdict, index=0, name="act"):
    return Nla(TCA_ACT_KIND="bpf", TCA_ACT_INDEX=index, TCA_ACT_OPTIONS=Nla(
        TCA_ACT_BPF_ID=prog_id, TCA_ACT_BPF_NAME=name, TCA_ACT_BPF_TAG=bytes.fromhex("0011223344556677"),
        TCA_ACT_BPF_PARMS=struct.pack("=IIiii", 5, 0, verdict, 1, 1)))


def filter_message(kind, prio, handle, options, protocol=0x0003):
    return Nla({"handle": handle, "info": (prio << 16) | socket.htons(protocol)}, TCA_KIND=kind, TCA_OPTIONS=options)


@pytest.mark.parametrize("name, number", [("all", 0x0003), ("ip", 0x0800), ("ipv6", 0x86DD), ("0x88cc", 0x88CC)])
def test_a_protocol_is_its_ethertype(name, number):
    assert _tc_netlink.protocol_number(name) == number


def test_tcm_info_has_the_priority_high_and_the_protocol_in_network_order_low():
    assert _tc_netlink._info(5) == (5 << 16) | socket.htons(0x0003)
    assert _tc_netlink._info(0x10005, 0x0800) == (5 << 16) | socket.htons(0x0800)  # prio is 16 bits


def test_directions_are_clsacts_parents_and_nothing_else():
    assert (_tc_netlink._parent("ingress"), _tc_netlink._parent("egress")) == (0xFFFFFFF2, 0xFFFFFFF3)
    with pytest.raises(TcError, match="unknown tc direction 'inbound'; use ingress or egress"):
        _tc_netlink._parent("inbound")


@pytest.mark.parametrize("name, value", [("pass", 0), ("ok", 0), ("drop", 2), ("shot", 2), ("unspec", -1),
                                         ("redirect", 7)])
def test_verdicts_by_tcs_names_and_aliases(name, value):
    assert _tc_netlink._verdict_value(name) == value
    assert _tc_netlink._verdict_name(value) in (name, {"ok": "pass", "shot": "drop", "unspec": "continue"}.get(name))


def test_an_unknown_verdict_is_refused_with_the_known_ones_and_a_number_stays_a_number():
    with pytest.raises(TcError) as caught:
        _tc_netlink._verdict_value("accept")
    assert "unknown act_bpf verdict 'accept'; use one of continue, drop, ok, pass" in str(caught.value)
    assert _tc_netlink._verdict_name(42) == "42"


@pytest.mark.parametrize("prio, handle, words", [
    (0, 1, "prio must be 1..65535 (with 0 the kernel picks one"),
    (0x10000, 1, "prio must be 1..65535"),
    (1, 0, "handle must be 1..0xffffffff (with 0 the kernel picks one"),
])
def test_a_slot_the_kernel_would_pick_itself_is_refused(prio, handle, words):
    with pytest.raises(TcError) as caught:
        _tc_netlink._check_slot(prio, handle, "replace cls_bpf")
    assert str(caught.value).startswith("replace cls_bpf: " + words)
    _tc_netlink._check_slot(1, 1, "replace cls_bpf")


def test_the_kernels_no_in_words():
    what = _tc_netlink._what("add", "cls_bpf", 7, "ingress", 1, 1)
    assert what == "add cls_bpf prio 1 handle 0x1 to ingress of ifindex 7"
    with pytest.raises(NotFoundError, match="no such interface in this network namespace"):
        _tc_netlink._fail(what, _tc_netlink._Refused(errno.ENODEV, "No such device"))
    with pytest.raises(TcError) as caught:  # the extended ack says more than the errno: kept
        _tc_netlink._fail(what, _tc_netlink._Refused(errno.EINVAL, "Specified filter handle not found."))
    assert str(caught.value) == "%s: Invalid argument (errno 22): Specified filter handle not found" % what
    with pytest.raises(TcError) as caught:  # it says no more: the hint alone
        _tc_netlink._fail(what, _tc_netlink._Refused(errno.EEXIST, "File exists"), hint="the slot is taken")
    assert str(caught.value) == "%s: File exists (errno 17): the slot is taken" % what
    assert caught.value.errno == errno.EEXIST and caught.value.reason == "the slot is taken"


def test_a_cls_bpf_filter_is_described():
    options = Nla(TCA_BPF_ID=42, TCA_BPF_NAME="tc_drop_count", TCA_BPF_TAG=bytes.fromhex("aabbccddeeff0011"),
                  TCA_BPF_FLAGS=_tc_netlink.TCA_BPF_FLAG_ACT_DIRECT)
    assert _tc_netlink._describe(filter_message("bpf", 3, 1, options, protocol=0x0800)) == {
        "kind": "bpf", "prio": 3, "handle": 1, "protocol": "ip", "chain": 0, "prog_id": 42, "name": "tc_drop_count",
        "tag": "aabbccddeeff0011", "direct_action": True, "verdict": None, "actions": []}


def test_a_u32_filter_takes_its_first_act_bpf_program_in_action_order():
    acts = Nla(TCA_ACT_PRIO_2=act_bpf(8, 0, name="second"), TCA_ACT_PRIO_1=act_bpf(7, 2, name="first"))
    described = _tc_netlink._describe(filter_message("u32", 1, 0x80000801, Nla(TCA_U32_ACT=acts), protocol=0x88CC))
    assert [a["name"] for a in described["actions"]] == ["first", "second"]
    assert (described["prog_id"], described["name"], described["verdict"], described["protocol"]) == \
        (7, "first", "drop", "0x88cc")
    assert described["actions"][0]["index"] == 5  # a dump carries the action's index in its parms only


@pytest.mark.parametrize("message", [
    filter_message("bpf", 1, 0, Nla()),  # a priority's head: no handle
    filter_message("bpf", 1, 1, None),  # no options
    filter_message("u32", 1, 0x80000000, Nla()),  # a u32 hash table, not a filter
])
def test_what_only_organises_filters_is_no_filter(message):
    assert _tc_netlink._describe(message) is None
