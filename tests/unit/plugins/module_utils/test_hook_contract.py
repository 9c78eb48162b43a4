"""The hook contract (_converge.HookAdapter's abstract methods and attributes) held by every adapter: the
registered ones (XdpHook, TcHook) and the converger tests' fake. What the registered adapters do with the
contract on the kernel is tests/integration/test_hook_contract.py."""

import inspect
import json

import pytest

from ansible_collections.ebpf.xdp.plugins.module_utils import _datapath
from ansible_collections.ebpf.xdp.plugins.module_utils.bpf import pins as _pins
from ansible_collections.ebpf.xdp.plugins.module_utils.hooks import converge as _converge
from ansible_collections.ebpf.xdp.plugins.module_utils.hooks.observed import Observed

from .test_converge import FakeHook

ENTRIES = {
    "xdp": [{"interface": "eth0", "object": "/o.o", "mode": "generic"}],
    "tc": [{"interface": "eth0", "object": "/o.o", "direction": "ingress"},
           {"interface": "eth0", "object": "/o.o", "direction": "egress", "method": "cls_bpf", "priority": 3}],
}
# What each entry's adapter predicts for a new program on an empty hook (auto is resolved when observed).
PLANNED = {"xdp": ["generic"], "tc": ["auto", "cls_bpf"]}
ADAPTERS = [pytest.param(kind, id=kind) for kind in sorted(ENTRIES)]


def adapters(kind):
    """The adapter of a kind built from each datapath entry of that kind, as datapath and the modules build it."""
    validated = _datapath.validate({kind: ENTRIES[kind]}, "/sys/fs/bpf/ebpf_xdp")[kind]
    return [_converge.ADAPTERS[kind].from_params(params, 7, "ns1") for params in validated]


def test_every_kind_of_hook_has_one_registered_adapter_and_its_pin_directories():
    assert sorted(_converge.ADAPTERS) == sorted(_pins.HOOK_DIRS) == sorted(ENTRIES)
    assert sorted(_datapath.HOOKS) == sorted(_converge.ADAPTERS)
    assert _pins.ATTACHMENT_DIRS == ("xdp", "tc_ingress", "tc_egress")
    assert [_pins.hook_kind(d) for d in _pins.ATTACHMENT_DIRS + ("shared_maps", "clsact")] == [
        "xdp", "tc", "tc", None, None]


@pytest.mark.parametrize("cls", [_converge.ADAPTERS["xdp"], _converge.ADAPTERS["tc"], FakeHook],
                         ids=["xdp", "tc", "fake"])
def test_an_adapter_implements_the_whole_contract(cls):
    assert issubclass(cls, _converge.HookAdapter) and not inspect.isabstract(cls), \
        getattr(cls, "__abstractmethods__", None)
    assert cls.kind in _pins.HOOK_DIRS and cls.label and cls.prog_type
    assert cls.placement_key in cls.report_keys


@pytest.mark.parametrize("kind", ADAPTERS)
def test_an_adapter_from_params_names_its_interface_pins_and_identity(kind):
    for hook, planned in zip(adapters(kind), PLANNED[kind]):
        assert (hook.kind, hook.ifname, hook.ifindex) == (kind, "eth0", 7)
        assert hook.name in _pins.HOOK_DIRS[kind]
        assert hook.pins.directory == "/sys/fs/bpf/ebpf_xdp/ns1/eth0/" + hook.name
        identity = hook.identity()
        # Kept in the record: JSON, and what was asked for (requested_...), not what the kernel did.
        assert json.loads(json.dumps(identity)) == identity
        assert any(key.startswith("requested_") for key in identity), identity
        assert hook.planned_placement(Observed(placement_key=hook.placement_key)) == planned


def test_the_fake_is_built_like_the_others():
    hook = FakeHook.from_params({"mode": "native"}, 7, "ns1")
    assert hook.identity() == {"requested_mode": "native"}
    assert hook.planned_placement(Observed()) == "native"
