# -*- coding: utf-8 -*-
# Copyright (c) ebpf.xdp contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""A directory of the controller as ebpf.xdp.datapath's sources.files: every regular file's path and text.

In place of the filetree and file lookups (the first is community.general's,
routed there by ansible-core): each host's worker loads a lookup plugin, its
documentation and its collection's routing table (~40 ms of YAML) before it
reads a file, and on a fleet that is most of what a task's arguments cost.
"""

from __future__ import annotations

import os

from ansible.errors import AnsibleFilterError


def source_tree(directory, exclude=()):
    """{path relative to directory: text} of every regular file below directory (links are not followed, as
    filetree's state file), sorted by path; paths starting with one of exclude are left out. A directory that
    does not exist gives {}, as the lookups did."""
    if not isinstance(directory, str) or not directory:
        raise AnsibleFilterError("source_tree: the directory must be a path, not %r" % (directory,))
    if isinstance(exclude, str):
        exclude = (exclude,)
    found = {}
    for root, dirs, files in os.walk(directory):
        dirs.sort()
        for name in files:
            path = os.path.join(root, name)
            if os.path.islink(path) or not os.path.isfile(path):
                continue
            relative = os.path.relpath(path, directory)
            if any(relative.startswith(prefix) for prefix in exclude):
                continue
            try:
                with open(path, "rb") as handle:
                    found[relative] = handle.read().decode("utf-8")
            except (OSError, UnicodeError) as ex:
                raise AnsibleFilterError("source_tree: cannot read %s as text: %s" % (path, ex))
    return dict(sorted(found.items()))


class FilterModule:
    def filters(self):
        return {"source_tree": source_tree}
