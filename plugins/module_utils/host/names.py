# -*- coding: utf-8 -*-
# Copyright (c) ebpf.xdp contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Names that become path components, the roots paths are built under, and the check that a path built under a
root stays there.

Private to the ebpf.xdp collection: the interface may change without notice.

An interface name is joined onto the pin root and the lock directory, a
namespace name onto /run/netns and the pin root, a map set's and an
attachment's onto bpffs directories: a name is one path component or the
collection would write where it was never meant to (an interface called
"/etc/x" once made root create /etc/x.lock). Every check returns the value
it accepts (a root normalised) or raises BadNameError naming the option and
the value, so that the Ansible edge can run the same checks on every module's
options and on every datapath entry before anything happens, and the layers
below run them again where they build paths.
"""

from __future__ import annotations

import os
import re
import stat

from ansible_collections.ebpf.xdp.plugins.module_utils._errors import EbpfXdpError

IFNAMSIZ = 16  # the kernel's, with its NUL: 15 bytes of name
NAME_MAX = 255  # one path component, in bytes
NETNS_RUN_DIR = "/run/netns"
# Bytes the kernel's dev_valid_name refuses (isspace() of its ctype table counts 0xa0 too), and control
# characters, which no one types into a name and which break line-based output.
_IFNAME_REFUSED = set(b"/: \t\n\v\f\r\xa0") | set(range(0x20)) | {0x7f}
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
ATTACHMENT_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,31}")
MAP_SET_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
GROUP_NAME_MAX = 64


class BadNameError(EbpfXdpError):
    """A name that is not one path component of its kind, or a path that is not absolute and normalised."""


class OutsideRootError(BadNameError):
    """A path built under a root that would resolve outside it."""


def _encoded(value) -> bytes | None:
    """The bytes a name is on the host (what its length is counted in); None when it is no text at all."""
    if not isinstance(value, str):
        return None
    try:
        return value.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: no file or interface can carry it
        return None


def check_interface(name, option: str = "interface") -> str:
    """A network interface name as the kernel accepts one (dev_valid_name): 1 to 15 bytes, without '/', ':',
    whitespace or control characters, and not '.' or '..'."""
    raw = _encoded(name)
    if raw is None or not 0 < len(raw) < IFNAMSIZ or name in (".", "..") or _IFNAME_REFUSED.intersection(raw):
        raise BadNameError("%s %r is not an interface name: 1 to 15 bytes without '/', ':', whitespace or control "
                           "characters, and not '.' or '..'" % (option, name))
    return name


def check_netns(name, option: str = "netns") -> str:
    """A network namespace name as `ip netns add` takes one (a file under /run/netns): one path component
    without control characters, not '.' or '..', at most 255 bytes."""
    raw = _encoded(name)
    if not raw or len(raw) > NAME_MAX or "/" in name or name in (".", "..") or _CONTROL.search(name):
        raise BadNameError("%s %r is not a network namespace name (a name under %s, as `ip netns list` shows; "
                           "no '/', not '.' or '..', no control characters, at most %d bytes)"
                           % (option, name, NETNS_RUN_DIR, NAME_MAX))
    return name


def check_map_set(name, option: str = "shared_maps") -> str:
    """A map set's name: a directory of bpffs (which refuses '.' in a name), 1 to 64 letters, digits, '_'
    and '-'."""
    if not isinstance(name, str) or not MAP_SET_NAME.fullmatch(name):
        raise BadNameError("%s %r is not a usable map set name: 1 to 64 of letters, digits, '_' and '-', starting "
                           "with a letter or digit" % (option, name))
    return name


def check_attachment(name, option: str = "name") -> str:
    """An attachment's name (see bpf/pins: it ends its directory's name after '@')."""
    if not isinstance(name, str) or not ATTACHMENT_NAME.fullmatch(name):
        raise BadNameError("%s %r is not a usable attachment name: 1 to 32 of a-z, 0-9, '_' and '-', starting with a "
                           "letter or digit" % (option, name))
    return name


def check_group(name, option: str = "name") -> str:
    """A multicast group's name: kept in its record and shown in messages, never a path; 1 to 64 characters
    without control characters."""
    if not isinstance(name, str) or not 0 < len(name) <= GROUP_NAME_MAX or _CONTROL.search(name):
        raise BadNameError("%s %r is not a usable group name: 1 to %d characters without control characters"
                           % (option, name, GROUP_NAME_MAX))
    return name


def check_absolute(path, option: str) -> str:
    """A path the collection writes at or builds paths under (pin_root, object_store, cache_dir, a pcap, a
    report directory): absolute, without '..' or control characters; returned normalised ('.', '//' and a
    trailing '/' dropped). A relative path would depend on the directory the module happens to run in, and
    '..' means something else once a link is on the way."""
    if not isinstance(path, str) or _encoded(path) is None or _CONTROL.search(path):
        raise BadNameError("%s %r is not a usable path: no control characters (newline, NUL, ...)" % (option, path))
    if not path.startswith("/"):
        raise BadNameError("%s %r is not an absolute path: give it from / (a relative path depends on the directory "
                           "the module runs in)" % (option, path))
    if ".." in path.split("/"):
        raise BadNameError("%s %r has a '..' component: give the path it means without one" % (option, path))
    return "/" + os.path.normpath(path).lstrip("/")


def optional(check):
    """check for an option where empty means not given (a template's empty netns or shared_maps: none)."""
    def check_unless_empty(value, option: str):
        return value if value == "" else check(value, option)
    return check_unless_empty


def _component(part: str) -> bool:
    return bool(_encoded(part)) and part not in (".", "..") and "/" not in part and "\0" not in part


# The roots' resolutions, kept for the process (the exporter builds paths under one root on every scrape): a
# root turned into a link later only makes the check stricter.
_real_roots: dict[str, str] = {}


def join_under(root: str, *parts: str) -> str:
    """root joined with parts, each one path component; OutsideRootError unless the result, with every link
    on the way resolved, is still under root's own resolution."""
    if not all(_component(part) for part in parts):
        raise OutsideRootError("%s is not a path under %s: each of %r must be one path component (no '/', not '.' "
                               "or '..')" % (os.path.join(root, *(str(p) for p in parts)), root, parts))
    # Each part is one component, so only a link among them can lead out: resolve the whole path (realpath costs
    # ~10 lstat calls, and the exporter builds a path per program per scrape) only when one of them is a link.
    path = root
    for part in parts:
        path = os.path.join(path, part)
        try:
            if stat.S_ISLNK(os.lstat(path).st_mode):
                return check_under(root, os.path.join(root, *parts))
        except FileNotFoundError:
            break  # what does not exist yet is made as a directory or file, not a link
    return os.path.join(root, *parts)


def check_under(root: str, path: str) -> str:
    """path, when it resolves (links followed as far as they exist) to root or below it; else OutsideRootError."""
    real_root = _real_roots.get(root)
    if real_root is None:
        real_root = _real_roots[root] = os.path.realpath(root)
    real = os.path.realpath(path)
    if real != real_root and not real.startswith(real_root.rstrip("/") + "/"):
        raise OutsideRootError("%s resolves to %s, outside %s (%s): refusing to write there"
                               % (path, real, root, real_root))
    return path
