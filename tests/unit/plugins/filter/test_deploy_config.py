"""xdp_deploy's inventory as a datapath config: pure logic."""

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.ebpf.xdp.plugins.filter.deploy_config import deploy_config


def test_objects_programs_and_groups_name_their_objects_by_path():
    config = deploy_config(
        [{"name": "drop", "src": "xdp_drop_count.bpf.c", "cflags": ["-g"]}],
        [{"interface": "eth0", "object": "drop", "mode": "native"},
         {"interface": "eth1", "backend": "bcc", "source": "bcc/x.c"}],
        [{"interface": "eth2", "object": "drop", "direction": "egress"}],
        [{"name": "video", "members": ["p1"], "egress_program": {"object": "drop", "program": "x"}}],
        "/var/lib/ebpf_xdp/src", "/var/lib/ebpf_xdp/objects/")
    assert config == {
        "objects": [{"src": "/var/lib/ebpf_xdp/src/xdp_drop_count.bpf.c",
                     "dest": "/var/lib/ebpf_xdp/objects/drop.o", "cflags": ["-g"]}],
        "xdp": [{"interface": "eth0", "object": "/var/lib/ebpf_xdp/objects/drop.o", "mode": "native"}],
        "tc": [{"interface": "eth2", "object": "/var/lib/ebpf_xdp/objects/drop.o", "direction": "egress"}],
        "devmap_groups": [{"name": "video", "members": ["p1"],
                           "egress_program": {"object": "/var/lib/ebpf_xdp/objects/drop.o", "program": "x"}}]}


@pytest.mark.parametrize("objects, programs, words", [
    ([{"name": "drop"}], [], "xdp_deploy_objects[0] needs name and src"),
    ([], [{"interface": "eth0", "object": None}], "xdp_deploy_programs[0]: object must name an entry"),
])
def test_bad_entries_are_named(objects, programs, words):
    with pytest.raises(AnsibleFilterError) as err:
        deploy_config(objects, programs, [], [], "/s", "/o")
    assert words in str(err.value)
