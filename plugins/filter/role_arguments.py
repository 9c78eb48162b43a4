# -*- coding: utf-8 -*-
# Copyright (c) ebpf.xdp contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The argument checks of this collection's roles, for many hosts in one task (see role_argument_errors.yml)."""

from __future__ import annotations

import functools
import os

import yaml

from ansible.errors import AnsibleFilterError
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.utils.vars import transform_to_native_types

ROLES = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "roles")


@functools.lru_cache(maxsize=None)
def _options(role, entry_point):
    """The options of a role's entry point, from its meta/argument_specs.yml (read once per process)."""
    path = os.path.join(ROLES, role, "meta", "argument_specs.yml")
    try:
        with open(path, encoding="utf-8") as handle:
            specs = yaml.load(handle, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))["argument_specs"]
        return specs[entry_point].get("options", {})
    except (OSError, KeyError, TypeError, yaml.YAMLError) as exc:
        raise AnsibleFilterError("role_argument_errors: no argument spec %s of role %s in %s (%s)"
                                 % (entry_point, role, path, exc)) from None


def role_argument_errors(hosts, hostvars, roles):
    """What ansible-core's argument check of each role would say on each host, from the hosts' variables
    (hostvars: inventory, facts, extra vars): a list of 'HOST: ROLE (ENTRY): message', empty when all pass."""
    if isinstance(roles, str):
        roles = [roles]
    checks = []
    for role in roles:
        name, entry_point = (str(role).split(":", 1) + ["main"])[:2]
        options = _options(name, entry_point)
        checks.append((name, entry_point, options, ArgumentSpecValidator(options)))
    errors = []
    # Host by host, every role's check: each hostvars[host] computes the host's variables anew (~10 ms).
    for host in hosts:
        variables = hostvars[host]
        for name, entry_point, options, validator in checks:
            # Plain values: the validator walks and copies them, which costs ~0.25 s a host through
            # ansible-core's lazily templated containers, ~10 ms once they are templated whole.
            provided = transform_to_native_types({option: variables[option] for option in options
                                                  if option in variables}, redact=False)
            result = validator.validate(provided, validate_role_argument_spec=True)
            errors += ["%s: %s (%s): %s" % (host, name, entry_point, message)
                       for message in result.error_messages]
    return errors


class FilterModule:
    def filters(self):
        return {"role_argument_errors": role_argument_errors}
