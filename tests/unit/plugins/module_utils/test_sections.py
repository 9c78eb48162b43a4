"""datapath's sections as resources (sections/): every section has the protocol's parts, takes its item module's
options, and says what an entry manages; the order of the sections is datapath's converge order."""

import os

import pytest

from ansible_collections.ebpf.xdp.plugins.module_utils import _datapath
from ansible_collections.ebpf.xdp.plugins.module_utils.sections.resource import Section

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
# One entry of each section, and what it manages in words.
ENTRIES = {
    "objects": ({"src": "/s/a.c", "dest": "/o/a.o"}, "object /o/a.o"),
    "xdp": ({"interface": "eth0", "object": "/o/a.o", "netns": "n"}, "the XDP hook of eth0 in netns n"),
    "tc": ({"interface": "eth0", "object": "/o/a.o", "direction": "egress"}, "the tc egress hook of eth0"),
    "devmap_groups": ({"name": "g", "id": 3, "shared_maps": "m", "members": []}, "group g of map set m"),
    "map_entries": ({"path": "/sys/fs/bpf/x/maps/m", "entries": []}, "map /sys/fs/bpf/x/maps/m"),
}


def test_the_sections_run_in_datapath_s_order():
    assert list(_datapath.SECTIONS) == list(ENTRIES)
    assert list(_datapath.HOOKS) == ["xdp", "tc"]


@pytest.mark.parametrize("name", list(ENTRIES))
def test_a_section_is_a_resource_over_its_item_module(name):
    section = _datapath.SECTIONS[name]
    assert isinstance(section, Section) and section.name == name
    assert os.path.isfile(os.path.join(ROOT, "plugins", "modules", section.module + ".py")), section.module
    entry, words = ENTRIES[name]
    [params] = _datapath.validate({name: [entry]}, "/sys/fs/bpf/ebpf_xdp")[name]
    keys = section.keys(params)
    assert keys and all(isinstance(key, tuple) for key in keys)
    assert _datapath.describe(name, keys[0]) == words
    assert section.removal(params, "/sys/fs/bpf/ebpf_xdp")["state"] == "absent"
    if section.gathered:
        assert section.removable, "what gather finds, deleted and overridden remove"


def test_what_deleted_removes_is_every_section_but_objects_in_reverse():
    assert _datapath.DELETED == ("map_entries", "devmap_groups", "tc", "xdp")
