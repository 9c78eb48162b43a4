# -*- coding: utf-8 -*-
# Copyright (c) ebpf.xdp contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What is wrong with names, addresses and paths a role puts into a command, as messages an assert can show.

Role argument specs have no patterns (ansible-core 2.19 validates type,
choices and required only), so the roles that build commands from inventory
values (lab, benchmark) assert on this filter's answer before they change
anything: an empty list, or one message per bad value naming it and why.

The interface and namespace rules are the kernel's and `ip netns`'s (the
same as the modules'); when module_utils/host/names.py lands they should
come from there instead of being kept twice.
"""

from __future__ import annotations

import ipaddress
import json
import posixpath
import re

from ansible.errors import AnsibleFilterError

IFNAMSIZ = 16
NAME_MAX = 255
# Characters iproute2's `ip -batch` reads as syntax rather than as part of a word: quotes start a quoted word,
# '#' starts a comment anywhere on the line, a '\' at the end of a line joins the next one.
IP_BATCH_SYNTAX = "\"'#\\"
KINDS = ("interface", "netns", "sysctl", "path", "mac", "ipv4", "ipv4_prefix")
LABELS = {"interface": "an interface name", "netns": "a network namespace name", "sysctl": "a sysctl name",
          "path": "a path", "mac": "a MAC address", "ipv4": "an IPv4 address", "ipv4_prefix": "ADDRESS/PREFIXLEN"}
MAC = re.compile(r"[0-9A-Fa-f]{2}(:[0-9A-Fa-f]{2}){5}")
DOTTED_QUAD = re.compile(r"[0-9]{1,3}(\.[0-9]{1,3}){3}")


def _common(name, longest):
    if not isinstance(name, str):
        return "is a %s, not a string" % type(name).__name__
    if name == "":
        return "is empty"
    if "\0" in name:
        return "holds a NUL byte"
    if any(c.isspace() for c in name):
        return "holds whitespace"
    if len(name.encode("utf-8", "surrogateescape")) > longest:
        return "is longer than %d bytes" % longest
    return None


def interface_problem(name):
    """Why the kernel would refuse `name` as a network interface name (dev_valid_name), or None."""
    problem = _common(name, IFNAMSIZ - 1)
    if problem:
        return problem
    if name in (".", ".."):
        return "is '.' or '..'"
    if "/" in name or ":" in name:
        return "holds '/' or ':'"
    return None


def netns_problem(name):
    """Why `name` is not a network namespace name (one file name under /run/netns), or None."""
    problem = _common(name, NAME_MAX)
    if problem:
        return problem
    if name in (".", ".."):
        return "is '.' or '..'"
    if "/" in name:
        return "holds '/'"
    return None


def sysctl_problem(name):
    """Why `name` is not a dotted sysctl name that stays where it says, or None.

    sysctl(8) swaps '.' and '/' to make the path under /proc/sys (a '/' is how
    an interface name's dot is written), so a part '//' would become '..' and
    climb out: net.//.kernel.x is kernel.x.
    """
    problem = _common(name, NAME_MAX)
    if problem:
        return problem
    if "=" in name:
        return "holds '='"
    if any(part in ("", "/", "//") for part in name.split(".")):
        return "has an empty part, or a part that sysctl would read as '.' or '..'"
    return None


def path_problem(path, under=None):
    """Why `path` is not an absolute, normalised path (strictly below `under` when given), or None."""
    if not isinstance(path, str):
        return "is a %s, not a string" % type(path).__name__
    if "\0" in path or "\n" in path:
        return "holds a NUL byte or a newline"
    if not path.startswith("/"):
        return "is not absolute"
    if posixpath.normpath(path) != path or path.startswith("//"):
        return "is not normalised (no '.', '..', '//' or trailing '/'; it reads as %s)" % posixpath.normpath(path)
    if under is not None:
        if path_problem(under):
            raise AnsibleFilterError("name_errors: under=%s %s" % (json.dumps(under), path_problem(under)))
        if not path.startswith(under.rstrip("/") + "/"):
            return "is not below %s" % under
    return None


def mac_problem(mac):
    """Why `mac` is not six pairs of hex digits joined by colons, or None."""
    if not isinstance(mac, str) or not MAC.fullmatch(mac):
        return "is not six pairs of hex digits joined by colons"
    return None


def ipv4_problem(address, prefix=False):
    """Why `address` is not a dotted-quad IPv4 address (with /PREFIXLEN when prefix), or None."""
    if not isinstance(address, str):
        return "is a %s, not a string" % type(address).__name__
    quad, slash, length = address.partition("/")
    form = "a dotted quad and /PREFIXLEN" if prefix else "a dotted quad"
    if not DOTTED_QUAD.fullmatch(quad) or bool(slash) != prefix or (prefix and not length.isdigit()):
        return "is not " + form
    try:
        ipaddress.IPv4Interface(address) if prefix else ipaddress.IPv4Address(address)
    except ValueError as exc:
        return "is not %s (%s)" % (form, exc)
    return None


def name_errors(names, kind, what=None, ip_batch=False, under=None):
    """One message per bad name of `names` (a string or a list of them); [] when all are fine."""
    if kind not in KINDS:
        raise AnsibleFilterError("name_errors: kind must be one of %s, not %s" % (", ".join(KINDS), json.dumps(kind)))
    if isinstance(names, str) or not isinstance(names, (list, tuple)):
        names = [names]
    label = LABELS[kind]
    errors = []
    for name in names:
        if kind == "path":
            problem = path_problem(name, under)
        elif kind in ("ipv4", "ipv4_prefix"):
            problem = ipv4_problem(name, prefix=kind == "ipv4_prefix")
        else:
            problem = {"interface": interface_problem, "netns": netns_problem, "sysctl": sysctl_problem,
                       "mac": mac_problem}[kind](name)
        if problem is None and ip_batch and any(c in IP_BATCH_SYNTAX for c in name):
            problem = "holds one of %s, which ip -batch reads as syntax" % " ".join(IP_BATCH_SYNTAX)
        if problem is not None:
            shown = json.dumps(name) if isinstance(name, str) else repr(name)
            errors.append("%s%s is not %s: it %s" % (what + " " if what else "", shown, label, problem))
    return errors


class FilterModule:
    def filters(self):
        return {"name_errors": name_errors}
