"""datapath's own argument handling, apart from the kernel (issue 39 item 4): the task-wide options as main()
hands them to AnsibleModule (_datapath.ARGS), the names check on them (NAMES), and the toolchain option checked
against toolchain_facts' spec; each bad input refused with a message a user can act on. The entries of config
are each checked against their own module's spec (tests/unit/plugins/module_utils/test_datapath.py)."""

import pytest
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

from ansible_collections.ebpf.xdp.plugins.module_utils import _common, _datapath
from ansible_collections.ebpf.xdp.plugins.module_utils.host import names as _names


def validate(**params):
    """As main() builds the module (plugins/modules/datapath.py): (validated parameters, errors)."""
    result = ArgumentSpecValidator(_datapath.ARGS).validate(params)
    return result.validated_parameters, result.error_messages


def task(**params):
    validated, errors = validate(**params)
    assert errors == [], errors
    _common.check_names(validated)
    return validated


def test_an_empty_task_merges_nothing_in_its_own_namespace():
    params = task()
    assert (params["state"], params["namespaces"], params["config"], params["sources"], params["facts_before"],
            params["toolchain"]) == ("merged", [], None, None, None, None)
    assert params["pin_root"] == "/sys/fs/bpf/ebpf_xdp"


def test_config_sections_are_lists_of_dicts_checked_entry_by_entry_later():
    params = task(config={"xdp": [{"interface": "eth0", "object": "/o.o", "colour": "red"}]})
    # Ansible leaves the entries as given: validate() checks each against its module's spec, naming the entry.
    assert params["config"]["xdp"] == [{"interface": "eth0", "object": "/o.o", "colour": "red"}]
    assert params["config"]["tc"] is None
    with pytest.raises(_datapath.ConfigError) as caught:
        _datapath.validate(params["config"], params["pin_root"])
    assert "config.xdp[0]: colour. Supported parameters include" in str(caught.value)


def test_facts_before_gets_xdp_facts_defaults():
    facts = task(facts_before={})["facts_before"]
    assert (facts["interfaces"], facts["netns"], facts["rate_interval"], facts["only_if_changing"]) \
        == ([], None, 0, True)
    assert (facts["maps"], facts["programs"], facts["max_entries"], facts["per_cpu"]) == (["*"], ["*"], 1024, False)


@pytest.mark.parametrize("params, words", [
    (dict(state="purged"), "value of state must be one of: merged, replaced, overridden, deleted, gathered, got: purged"),
    (dict(config={"routes": []}), "config.routes"),
    (dict(config={"xdp": "eth0"}), "Elements value for option 'xdp' found in 'config' is of type str"),
    (dict(sources={"files": {"a.c": ""}}), "missing required arguments: dir found in sources"),
    (dict(sources={"dir": "/src"}), "missing required arguments: files found in sources"),
    (dict(facts_before={"rate_interval": "soon"}), "argument 'rate_interval' is of type str"),
])
def test_the_spec_refuses(params, words):
    _params, errors = validate(**params)
    assert any(words in str(error) for error in errors), errors


def test_one_namespace_given_as_a_string_is_a_list_of_one():
    assert task(namespaces="lab")["namespaces"] == ["lab"]


@pytest.mark.parametrize("params, words", [
    (dict(namespaces=["lab", "a/b"]), "namespaces[1] 'a/b' is not a network namespace name"),
    (dict(pin_root="pins"), "pin_root 'pins' is not an absolute path"),
    (dict(pin_root="/sys/fs/bpf/../x"), "pin_root '/sys/fs/bpf/../x' has a '..' component"),
    (dict(sources={"dir": "src", "files": {}}), "sources.dir 'src' is not an absolute path"),
    (dict(facts_before={"interfaces": ["eth0", "x" * 16]}), "facts_before.interfaces[1] 'xxxxxxxxxxxxxxxx' is not an "
                                                            "interface name"),
    (dict(facts_before={"netns": ".."}), "facts_before.netns '..' is not a network namespace name"),
])
def test_names_that_become_paths_are_checked_before_anything_happens(params, words):
    validated, errors = validate(**params)
    assert errors == []
    with pytest.raises(_names.BadNameError) as caught:
        _common.check_names(validated)
    assert words in str(caught.value)


def test_toolchain_options_are_toolchain_facts_and_refused_before_the_host_is_read():
    def nothing_may_run(*_args, **_kwargs):
        raise AssertionError("the host was read")

    with pytest.raises(_datapath.ConfigError) as caught:
        _datapath.toolchain_unready(task(toolchain={"colour": "red"}), nothing_may_run, nothing_may_run)
    assert str(caught.value).startswith("toolchain: ") and "colour" in str(caught.value)
    assert _datapath.toolchain_unready(task(), nothing_may_run, nothing_may_run) is None  # not asked: not read
