"""devmap_group's own argument handling, apart from the kernel (issue 39 item 4): its argument spec and rule as
main() hands them to AnsibleModule, the names check (DEVMAP_GROUP_NAMES), and the task normalised before the map
set is opened (maps/devmap's Desired); each bad input refused with a message a user can act on."""

import pytest
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

from ansible_collections.ebpf.xdp.plugins.module_utils import _common
from ansible_collections.ebpf.xdp.plugins.module_utils.host import names as _names
from ansible_collections.ebpf.xdp.plugins.module_utils.maps.devmap import Desired, GroupError


def validate(**params):
    """As main() builds the module (plugins/modules/devmap_group.py): (validated parameters, errors)."""
    result = ArgumentSpecValidator(_common.DEVMAP_GROUP_ARGS, **_common.DEVMAP_GROUP_RULES).validate(params)
    return result.validated_parameters, result.error_messages


def task(**params):
    """A task past the spec and the names check, as the work gets it."""
    validated, errors = validate(**params)
    assert errors == [], errors
    _common.check_names(validated, _common.DEVMAP_GROUP_NAMES)
    return validated


def test_a_named_group_gets_the_documented_defaults():
    params = task(name="video")
    assert (params["shared_maps"], params["state"], params["members"], params["addresses"], params["exclusive"]) \
        == ("multicast", "present", [], [], False)
    assert params["pin_root"] == "/sys/fs/bpf/ebpf_xdp"
    assert params["id"] is None and params["exclude_ingress"] is None and params["egress_program"] is None
    desired = Desired.from_params(params)
    # exclude_ingress None: an existing group keeps its setting; egress omitted without exclusive: kept.
    assert (desired.name, desired.group_id, desired.exclude_ingress, desired.egress, desired.keep_egress) \
        == ("video", None, None, None, True)


def test_a_group_named_by_its_id_alone_is_enough():
    assert Desired.from_params(task(id=7)).group_id == 7


@pytest.mark.parametrize("params, words", [
    (dict(members=["p1"]), "one of the following is required: name, id"),
    (dict(name="video", state="gone"), "value of state must be one of: present, absent, got: gone"),
    (dict(name="video", id="three"), "argument 'id' is of type str and we were unable to convert to int"),
    (dict(name="video", egress_program=dict(object="/o.o", program="p", section="s")),
     "parameters are mutually exclusive: program|section found in egress_program"),
    (dict(name="video", egress_program=dict(object="/o.o", colour="red")), "egress_program.colour"),
    (dict(name="video", colour="red"), "colour. Supported parameters include"),
])
def test_the_spec_refuses(params, words):
    _params, errors = validate(**params)
    assert any(words in str(error) for error in errors), errors


@pytest.mark.parametrize("option, value, words", [
    ("name", "bad\nname", "name 'bad\\nname' is not a usable group name"),
    ("members", ["p1", "a/b"], "members[1] 'a/b' is not an interface name"),
    ("shared_maps", "../x", "shared_maps '../x' is not a usable map set name"),
    ("netns", "..", "netns '..' is not a network namespace name"),
    ("pin_root", "relative/pins", "pin_root 'relative/pins' is not an absolute path"),
])
def test_names_that_become_paths_are_checked_before_anything_happens(option, value, words):
    params, errors = validate(**dict({"name": "video"}, **{option: value}))
    assert errors == []
    with pytest.raises(_names.BadNameError) as caught:
        _common.check_names(params, _common.DEVMAP_GROUP_NAMES)
    assert words in str(caught.value)


@pytest.mark.parametrize("params, words", [
    (dict(id=0), "group id 0 is out of range: ids run from 1 to 255 (0 means no group)"),
    (dict(id=256), "group id 256 is out of range"),
    (dict(name="video", addresses=["10.0.0.1"]), "address 10.0.0.1 is not a multicast address"),
    (dict(name="video", addresses=["02:00:00:00:00:01"]), "address 02:00:00:00:00:01 is a unicast MAC"),
    (dict(name="video", addresses=["not-an-address"]), "address 'not-an-address' is not an IP or MAC address"),
    (dict(name="video", egress_program=dict(program="egress")),
     "egress_program needs an object (and optionally a program or a section); egress_program: {} removes"),
])
def test_what_the_spec_cannot_say_is_refused_before_the_map_set_is_opened(params, words):
    with pytest.raises(GroupError) as caught:
        Desired.from_params(task(**params))
    assert words in str(caught.value)


def test_addresses_and_members_are_normalised_and_named_once():
    desired = Desired.from_params(task(name="video", members=["p1", "p2", "p1"],
                                       addresses=["239.1.1.1", " 239.1.1.1 ", "FF02::1", "01:00:5E:01:01:01"]))
    assert desired.members == ["p1", "p2"]
    assert desired.addresses == ["239.1.1.1", "ff02::1", "01:00:5e:01:01:01"]


@pytest.mark.parametrize("egress, exclusive, expected", [
    (None, False, (None, True)),  # omitted: the group keeps the program it has
    (None, True, (None, False)),  # omitted with exclusive: removed, as members and addresses not listed are
    ({}, False, (None, False)),  # {}: removed
    (dict(object=None, program=None, section=None), False, (None, False)),  # what the spec makes of {}
    (dict(object="/o.o", program="egress"), False, ({"object": "/o.o", "program": "egress"}, False)),
])
def test_the_egress_program_is_kept_removed_or_named(egress, exclusive, expected):
    desired = Desired.from_params(dict(task(name="video", exclusive=exclusive), egress_program=egress))
    assert (desired.egress, desired.keep_egress) == expected
