"""The hook contract (_converge.HookAdapter's abstract methods and attributes) held by every adapter: every
registered one (hooks/adapters: XdpHook, its named variant NamedXdpHook, TcHook) and the converger tests' fake,
and their datapath section (keys, words, a record read back as the entry that leaves it as it is). What the
registered adapters do with the contract on the kernel is tests/integration/test_hook_contract.py."""

import inspect
import json

import pytest

from ansible_collections.ebpf.xdp.plugins.module_utils import _datapath
from ansible_collections.ebpf.xdp.plugins.module_utils.bpf import pins as _pins
from ansible_collections.ebpf.xdp.plugins.module_utils.hooks import adapters as _adapters, converge as _converge
from ansible_collections.ebpf.xdp.plugins.module_utils.hooks.observed import Observed

from .test_converge import FakeHook

ENTRIES = {
    "xdp": [{"interface": "eth0", "object": "/o.o", "mode": "generic"},
            {"interface": "eth0", "object": "/o.o", "mode": "native", "name": "filter", "priority": 10}],
    "tc": [{"interface": "eth0", "object": "/o.o", "direction": "ingress"},
           {"interface": "eth0", "object": "/o.o", "direction": "egress", "method": "cls_bpf", "priority": 3}],
}
# What each entry's adapter predicts for a new program on an empty hook (auto is resolved when observed).
PLANNED = {"xdp": ["generic", "native"], "tc": ["auto", "cls_bpf"]}
ADAPTERS = [pytest.param(kind, id=kind) for kind in sorted(ENTRIES)]
# Each registered adapter class, by the entry of ENTRIES its kind's from_params builds it from.
BUILT_FROM = {"XdpHook": ("xdp", 0), "NamedXdpHook": ("xdp", 1), "TcHook": ("tc", 0)}


def adapters(kind):
    """The adapter of a kind built from each datapath entry of that kind, as datapath and the modules build it."""
    validated = _datapath.validate({kind: ENTRIES[kind]}, "/sys/fs/bpf/ebpf_xdp")[kind]
    return [_converge.ADAPTERS[kind].from_params(params, 7, "ns1") for params in validated]


def test_every_kind_of_hook_has_one_registered_adapter_and_its_pin_directories():
    assert sorted(_converge.ADAPTERS) == sorted(_pins.HOOK_DIRS) == sorted(ENTRIES)
    assert list(_datapath.HOOKS) == [adapter.kind for adapter in _adapters.HOOKS] == list(_converge.ADAPTERS)
    assert sorted(adapter.__name__ for adapter in _adapters.EVERY_ADAPTER) == sorted(BUILT_FROM)
    assert _pins.attachment_dirs() == ("xdp", "tc_ingress", "tc_egress")
    assert [_pins.hook_kind(d) for d in _pins.attachment_dirs() + ("shared_maps", "clsact")] == [
        "xdp", "tc", "tc", None, None]
    # Datapath's sections: the hooks' in their registration order, removed in reverse.
    assert list(_datapath.SECTIONS) == ["objects", "xdp", "tc", "devmap_groups", "map_entries"]
    assert _datapath.DELETED == ("map_entries", "devmap_groups", "tc", "xdp")


@pytest.mark.parametrize("cls", _adapters.EVERY_ADAPTER + [FakeHook],
                         ids=[a.__name__ for a in _adapters.EVERY_ADAPTER] + ["fake"])
def test_an_adapter_implements_the_whole_contract(cls):
    assert issubclass(cls, _converge.HookAdapter) and not inspect.isabstract(cls), \
        getattr(cls, "__abstractmethods__", None)
    assert cls.kind in _pins.HOOK_DIRS and cls.label and cls.prog_type
    assert cls.placement_key in cls.report_keys
    if cls is not FakeHook:
        assert cls.module == _datapath.SECTIONS[cls.kind].module and set(cls.hook_dirs) == set(_pins.HOOK_DIRS[cls.kind])
        # A rollback takes back what the hook asked for: keys of its identity, options of its module.
        assert all(key.startswith("requested_") for key in cls.rollback_options), cls.rollback_options
        assert set(cls.rollback_options.values()) <= set(_datapath.SECTIONS[cls.kind].spec)


@pytest.mark.parametrize("name", list(BUILT_FROM))
def test_every_registered_adapter_is_built_from_its_section_s_entries(name):
    kind, index = BUILT_FROM[name]
    hook = adapters(kind)[index]
    assert type(hook).__name__ == name and type(hook) in _adapters.EVERY_ADAPTER


@pytest.mark.parametrize("kind", ADAPTERS)
def test_a_section_s_record_reads_back_as_the_entry_that_leaves_it_as_it_is(kind):
    """What a run records (identity) is what gather turns back into the entry: the same key, the same hook."""
    validated = _datapath.validate({kind: ENTRIES[kind]}, "/sys/fs/bpf/ebpf_xdp")[kind]
    for params, hook in zip(validated, adapters(kind)):
        record = dict(hook.identity(), object=params["object"], program=None, constants={})
        entry = type(hook).entry_of(record, None, "eth0", hook.name)
        [again] = _datapath.validate({kind: [entry]}, "/sys/fs/bpf/ebpf_xdp")[kind]
        assert _datapath.key_of(kind, again) == _datapath.key_of(kind, params)
        assert type(hook).from_params(again, 7, "ns1").identity() == hook.identity()
        assert _datapath.describe(kind, _datapath.key_of(kind, params)).startswith("the %s " % hook.label)


@pytest.mark.parametrize("kind", ADAPTERS)
def test_an_adapter_from_params_names_its_interface_pins_and_identity(kind):
    for hook, planned in zip(adapters(kind), PLANNED[kind]):
        assert (hook.kind, hook.ifname, hook.ifindex) == (kind, "eth0", 7)
        assert _pins.split_hook_dir(hook.name)[0] in _pins.HOOK_DIRS[kind]
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
