"""Named XDP attachments (hooks.xdp_dispatcher): the options, identity and pins, without a kernel. What they do on
the kernel, with libxdp's dispatcher, is tests/integration/test_xdp_dispatcher.py."""

import json

import pytest

from ansible_collections.ebpf.xdp.plugins.module_utils import _datapath
from ansible_collections.ebpf.xdp.plugins.module_utils.hooks import converge as _converge
from ansible_collections.ebpf.xdp.plugins.module_utils.hooks.observed import HookError, Observed
from ansible_collections.ebpf.xdp.plugins.module_utils.hooks.xdp import NamedXdpHook, XdpHook


def hook(**entry):
    validated = _datapath.validate({"xdp": [dict(interface="eth0", object="/o.o", mode="generic", **entry)]},
                                   "/sys/fs/bpf/ebpf_xdp")["xdp"]
    return _converge.ADAPTERS["xdp"].from_params(validated[0], 7, "ns1")


def test_a_name_makes_a_dispatcher_attachment_with_its_own_pins_and_identity():
    named = hook(name="counter", priority=20, chain_call_actions=["redirect", "pass", "tx"])
    assert isinstance(named, NamedXdpHook) and named.kind == "xdp"
    assert named.pins.directory == "/sys/fs/bpf/ebpf_xdp/ns1/eth0/xdp@counter"
    identity = named.identity()
    assert json.loads(json.dumps(identity)) == identity
    # libxdp's order of the verdicts (enum xdp_action), whatever the task's.
    assert identity == {"requested_mode": "generic", "attachment": "counter", "requested_priority": 20,
                        "requested_chain_call_actions": ["pass", "tx", "redirect"]}
    assert named.planned_placement(Observed()) == "generic"
    assert "priority" in named.report_keys and "attachment" in named.report_keys


def test_libxdps_defaults_without_priority_or_actions():
    assert hook(name="counter").identity()["requested_priority"] == 50
    assert hook(name="counter").identity()["requested_chain_call_actions"] == ["pass"]


def test_no_name_keeps_the_unnamed_attachment():
    plain = hook()
    assert not isinstance(plain, NamedXdpHook) and isinstance(plain, XdpHook) and plain.pins.directory.endswith("/eth0/xdp")


def test_settled_compares_priority_and_actions_as_the_dispatcher_reports_them():
    named = hook(name="counter", priority=20, chain_call_actions=["drop", "pass"])
    there = Observed(prog_id=3, placement="generic", extra={"priority": 20, "chain_call_actions": ["drop", "pass"]})
    assert named.settled(there)
    assert not named.settled(Observed(prog_id=3, placement="generic",
                                      extra={"priority": 21, "chain_call_actions": ["drop", "pass"]}))
    assert not named.settled(Observed(prog_id=3, placement="generic",
                                      extra={"priority": 20, "chain_call_actions": ["pass"]}))
    assert not named.settled(Observed(prog_id=3, placement="native", extra=there.extra))


@pytest.mark.parametrize("entry,words", [
    (dict(priority=10), "only a named attachment (name:) runs through libxdp's dispatcher"),
    (dict(chain_call_actions=["pass"]), "chain_call_actions: only a named attachment"),
    (dict(name="Bad.Name"), "is not a usable attachment name"),
    (dict(name="counter", priority=-1), "priority must be between 0 and 2147483647"),
])
def test_bad_options_name_the_entry(entry, words):
    with pytest.raises(_datapath.ConfigError) as err:
        hook(**entry)
    assert err.value.args[0].startswith("config.xdp[0]: ") and words in str(err.value), err.value


def test_bcc_cannot_be_a_named_attachment():
    with pytest.raises(HookError) as err:
        XdpHook.check_params(dict(name="counter", backend="bcc", priority=None))
    assert "backend bcc is not available for a named XDP attachment" in str(err.value)


def test_two_entries_for_one_named_attachment_but_several_names_on_one_interface():
    _datapath.validate({"xdp": [dict(interface="eth0", object="/o.o", name="a"),
                                dict(interface="eth0", object="/o.o", name="b"),
                                dict(interface="eth0", object="/o.o")]}, "/sys/fs/bpf/ebpf_xdp")
    with pytest.raises(_datapath.ConfigError) as err:
        _datapath.validate({"xdp": [dict(interface="eth0", object="/o.o", name="a"),
                                    dict(interface="eth0", object="/o.o", name="a")]}, "/sys/fs/bpf/ebpf_xdp")
    assert "both manage the XDP hook of eth0 (attachment a)" in str(err.value)
