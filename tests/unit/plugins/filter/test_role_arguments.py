"""The roles' argument checks for many hosts in one task: what ansible-core's check per host would say."""

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.ebpf.xdp.plugins.filter.role_arguments import role_argument_errors

ROLES = ["xdp_rollout", "xdp_deploy"]


def test_hosts_whose_variables_pass_have_no_errors():
    hostvars = {"h1": {"xdp_rollout_settle": 1, "xdp_deploy_programs": [{"interface": "eth0", "object": "o"}],
                       "unrelated": object()},
                "h2": {}}
    assert role_argument_errors(["h1", "h2"], hostvars, ROLES) == []


def test_each_failed_check_names_its_host_role_and_option():
    hostvars = {"h1": {"xdp_rollout_settle": "soon"},
                "h2": {"xdp_rollout_rollback_scope": "everything", "xdp_deploy_programs": "eth0"},
                "h3": {}}
    errors = role_argument_errors(["h1", "h2", "h3"], hostvars, ROLES)
    assert errors[0].startswith("h1: xdp_rollout (main): ") and "xdp_rollout_settle" in errors[0], errors
    assert errors[1].startswith("h2: xdp_rollout (main): ") and "xdp_rollout_rollback_scope" in errors[1], errors
    assert [e for e in errors[2:] if not e.startswith("h2: xdp_deploy (main): ")] == [], errors
    assert [e for e in errors[2:] if "xdp_deploy_programs" in e], errors
    assert len(errors) > 2 and not [e for e in errors if e.startswith("h3")], errors


def test_an_entry_point_other_than_main():
    errors = role_argument_errors(["h1"], {"h1": {"xdp_rollout_rollback_scope": 3.5}}, "xdp_rollout:rollback_all")
    assert errors and errors[0].startswith("h1: xdp_rollout (rollback_all): "), errors


@pytest.mark.parametrize("role", ["no_such_role", "xdp_rollout:no_such_entry"])
def test_an_unknown_role_or_entry_point_is_a_clear_error(role):
    with pytest.raises(AnsibleFilterError, match="no argument spec"):
        role_argument_errors(["h1"], {"h1": {}}, [role])
