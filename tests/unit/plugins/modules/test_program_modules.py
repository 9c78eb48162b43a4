"""The program modules' own argument handling, apart from the kernel (issue 39 item 4): xdp_program's and
tc_program's argument specs and rules as main() hands them to AnsibleModule, their checks of what a spec cannot
say (check_params), and the names check; each bad input refused with a message a user can act on."""

import pytest
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

from ansible_collections.ebpf.xdp.plugins.module_utils import _common
from ansible_collections.ebpf.xdp.plugins.module_utils.bpf import bcc as _bcc
from ansible_collections.ebpf.xdp.plugins.module_utils.hooks import replay as _replay, revisions as _revisions
from ansible_collections.ebpf.xdp.plugins.module_utils.hooks.observed import HookError
from ansible_collections.ebpf.xdp.plugins.module_utils.hooks.tc import TcHook
from ansible_collections.ebpf.xdp.plugins.module_utils.hooks.xdp import XdpHook
from ansible_collections.ebpf.xdp.plugins.module_utils.host import names as _names

# As main() builds them (plugins/modules/xdp_program.py, tc_program.py).
MODULES = {
    "xdp_program": (dict(_common.XDP_PROGRAM_ARGS, **_replay.TASK_ARGS), XdpHook),
    "tc_program": (dict(_common.TC_PROGRAM_ARGS, **_replay.TASK_ARGS), TcHook),
}
RULES = _revisions.module_rules(_bcc.MODULE_RULES)


def validate(module, **params):
    spec, _hook = MODULES[module]
    result = ArgumentSpecValidator(spec, **RULES).validate(params)
    return result.validated_parameters, result.error_messages


@pytest.mark.parametrize("module", sorted(MODULES))
def test_a_minimal_task_gets_the_documented_defaults(module):
    params, errors = validate(module, interface="eth0", object="/o.o")
    assert errors == []
    assert (params["state"], params["constants"], params["force"], params["backend"]) == ("present", {}, False,
                                                                                          "libbpf")
    assert params["pin_root"] == "/sys/fs/bpf/ebpf_xdp" and params["object_store"] == "/var/lib/ebpf_xdp/revisions"
    assert params["revision"] is None  # no default: required_if would count it as given
    MODULES[module][1].check_params(params)
    _common.check_names(params, _common.PROGRAM_NAMES)
    if module == "xdp_program":
        assert params["mode"] == "auto"
    else:
        assert (params["method"], params["direction"], params["verdict"]) == ("auto", "ingress", "drop")


@pytest.mark.parametrize("module, params, words", [
    ("xdp_program", dict(interface="eth0"),
     "state is present but any of the following are missing: object, source, revision"),
    ("xdp_program", dict(interface="eth0", object="/o.o", source="/s.c"), "mutually exclusive: object|source"),
    ("xdp_program", dict(interface="eth0", object="/o.o", program="p", section="s"),
     "mutually exclusive: program|section"),
    ("xdp_program", dict(interface="eth0", object="/o.o", mode="offload"), "value of mode must be one of"),
    ("tc_program", dict(interface="eth0", object="/o.o", method="bpf"), "value of method must be one of"),
    ("tc_program", dict(object="/o.o"), "missing required arguments: interface"),
])
def test_the_spec_refuses(module, params, words):
    _params, errors = validate(module, **params)
    assert any(words in str(error) for error in errors), errors


def test_state_absent_and_revision_previous_need_no_object():
    for params in (dict(interface="eth0", state="absent"), dict(interface="eth0", revision="previous")):
        assert validate("xdp_program", **params)[1] == []


@pytest.mark.parametrize("module, extra, words", [
    ("tc_program", dict(priority=0), "priority must be between 1 and 65535, not 0"),
    ("tc_program", dict(method="act_bpf", handle=0x1000), "handle must be between 1 and 4095 for method act_bpf"),
    ("tc_program", dict(method="act_bpf", name="web"), "name: act_bpf holds one program per hook here"),
    ("tc_program", dict(before={"id": -1}), "before: id takes a program's id, a positive integer, not -1"),
])
def test_what_the_spec_cannot_say_is_refused_before_anything_happens(module, extra, words):
    params, errors = validate(module, interface="eth0", object="/o.o", **extra)
    assert errors == []
    with pytest.raises(HookError) as caught:
        MODULES[module][1].check_params(params)
    assert words in str(caught.value)


@pytest.mark.parametrize("option, value, words", [
    ("interface", "eth0/x", "interface 'eth0/x'"),
    ("netns", "..", "netns '..'"),
    ("pin_root", "relative/dir", "pin_root 'relative/dir'"),
    ("name", "Bad.Name", "name 'Bad.Name' is not a usable attachment name"),
])
def test_names_that_become_paths_are_checked(option, value, words):
    params, errors = validate("tc_program", **dict({"interface": "eth0", "object": "/o.o"}, **{option: value}))
    assert errors == []
    with pytest.raises(_names.BadNameError) as caught:
        _common.check_names(params, _common.PROGRAM_NAMES)
    assert words in str(caught.value)
