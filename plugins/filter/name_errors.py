# -*- coding: utf-8 -*-
# Copyright (c) ebpf.xdp contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What is wrong with names, addresses and paths a role puts into a command, as messages an assert can show.

Role argument specs have no patterns (ansible-core 2.19 validates type,
choices and required only), so the roles that build commands from inventory
values assert on this filter's answer before they change anything: an empty
list, or one message per bad value naming it and why.

Interface names, namespace names and roots are checked by the modules' own
validators (module_utils/host/names), so a role and a module refuse the same
values with the same words. A role adds what its commands need on top: no
whitespace in a namespace name (it is a word of a command line), a path
already normalised (the role removes exactly what it names), and, for
`ip -batch` input, none of the characters that input reads as syntax.
"""

from __future__ import annotations

import ipaddress
import re

from ansible.errors import AnsibleFilterError

from ansible_collections.ebpf.xdp.plugins.module_utils.host import names

# Characters iproute2's `ip -batch` reads as syntax rather than as part of a word: quotes start a quoted word,
# '#' starts a comment anywhere on the line, a '\' at the end of a line joins the next one.
IP_BATCH_SYNTAX = "\"'#\\"
KINDS = ("interface", "netns", "sysctl", "path", "mac", "ipv4", "ipv4_prefix")
MAC = re.compile(r"[0-9A-Fa-f]{2}(:[0-9A-Fa-f]{2}){5}")
DOTTED_QUAD = re.compile(r"[0-9]{1,3}(\.[0-9]{1,3}){3}")


def _shown(option, value):
    return "%s %r" % (option, value)


def interface_error(name, option):
    """The modules' refusal of `name` as a network interface name, or None."""
    try:
        names.check_interface(name, option)
    except names.BadNameError as exc:
        return str(exc)
    return None


def netns_error(name, option):
    """The modules' refusal of `name` as a network namespace name, or None; whitespace refused too (a namespace
    name is a word of the roles' commands)."""
    try:
        names.check_netns(name, option)
    except names.BadNameError as exc:
        return str(exc)
    if any(c.isspace() for c in name):
        return "%s is not a network namespace name a role can use: it holds whitespace" % _shown(option, name)
    return None


def sysctl_error(name, option):
    """Why `name` is not a dotted sysctl name that stays where it says, or None.

    sysctl(8) swaps '.' and '/' to make the path under /proc/sys (a '/' is how
    an interface name's dot is written), so a part '//' would become '..' and
    climb out: net.//.kernel.x is kernel.x.
    """
    if not isinstance(name, str) or not name or any(c.isspace() or c in "=\0" for c in name):
        return "%s is not a sysctl name: it is empty or holds whitespace, '=' or NUL" % _shown(option, name)
    if any(part in ("", "/", "//") for part in name.split(".")):
        return "%s is not a sysctl name: it has an empty part, or a part that sysctl would read as '.' or '..'" % (
            _shown(option, name))
    return None


def path_error(path, option, under=None):
    """The modules' refusal of `path` as a root (absolute, no '..', no control characters), or that it is not
    normalised, or not strictly below `under`; None when it is fine."""
    try:
        normal = names.check_absolute(path, option)
    except names.BadNameError as exc:
        return str(exc)
    if normal != path:
        return "%s is not normalised (no '.', '//' or trailing '/'): give it as %s" % (_shown(option, path), normal)
    if under is not None:
        if path_error(under, "under") is not None:
            raise AnsibleFilterError("name_errors: %s" % path_error(under, "under"))
        if path == under or not path.startswith(under.rstrip("/") + "/"):
            return "%s is not below %s" % (_shown(option, path), under)
    return None


def mac_error(mac, option):
    if not isinstance(mac, str) or not MAC.fullmatch(mac):
        return "%s is not a MAC address: six pairs of hex digits joined by colons" % _shown(option, mac)
    return None


def ipv4_error(address, option, prefix=False):
    """Why `address` is not a dotted-quad IPv4 address (with /PREFIXLEN when prefix), or None."""
    form = "an IPv4 address and /PREFIXLEN" if prefix else "an IPv4 address"
    quad, slash, length = address.partition("/") if isinstance(address, str) else ("", "", "")
    if not DOTTED_QUAD.fullmatch(quad) or bool(slash) != prefix or (prefix and not length.isdigit()):
        return "%s is not %s" % (_shown(option, address), form)
    try:
        ipaddress.IPv4Interface(address) if prefix else ipaddress.IPv4Address(address)
    except ValueError as exc:
        return "%s is not %s (%s)" % (_shown(option, address), form, exc)
    return None


def name_errors(values, kind, what=None, ip_batch=False, under=None):
    """One message per bad value of `values` (a value or a list of them); [] when all are fine."""
    if kind not in KINDS:
        raise AnsibleFilterError("name_errors: kind must be one of %s, not %r" % (", ".join(KINDS), kind))
    if isinstance(values, (str, bytes, dict)) or not hasattr(values, "__iter__"):
        values = [values]
    option = what or kind
    errors = []
    for value in values:
        if kind == "path":
            error = path_error(value, option, under)
        elif kind in ("ipv4", "ipv4_prefix"):
            error = ipv4_error(value, option, prefix=kind == "ipv4_prefix")
        else:
            error = {"interface": interface_error, "netns": netns_error, "sysctl": sysctl_error,
                     "mac": mac_error}[kind](value, option)
        if error is None and ip_batch and any(c in IP_BATCH_SYNTAX for c in value):
            error = "%s holds one of %s, which ip -batch reads as syntax" % (
                _shown(option, value), " ".join(IP_BATCH_SYNTAX))
        if error is not None:
            errors.append(error)
    return errors


class FilterModule:
    def filters(self):
        return {"name_errors": name_errors}
