# -*- coding: utf-8 -*-
# Copyright (c) ebpf.xdp contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The ebpf.xdp.xdp_deploy role's inventory as one ebpf.xdp.datapath config."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

BCC = "bcc"


def _object_path(object_dir, name, where):
    if not isinstance(name, str) or not name:
        raise AnsibleFilterError("%s: object must name an entry of xdp_deploy_objects, not %r" % (where, name))
    return "%s/%s.o" % (object_dir.rstrip("/"), name)


def _programs(entries, object_dir, where):
    out = []
    for index, entry in enumerate(entries or []):
        if entry.get("backend") == BCC:
            continue  # bcc sources compile at load time: the role attaches those with the per-item modules
        entry = dict(entry)
        if "object" in entry:
            entry["object"] = _object_path(object_dir, entry["object"], "%s[%d]" % (where, index))
        out.append(entry)
    return out


def deploy_config(objects, programs=None, tc_programs=None, groups=None, src_dir="", object_dir=""):
    """datapath's config from xdp_deploy_objects (the input), xdp_deploy_programs, xdp_deploy_tc_programs and
    xdp_deploy_devmap_groups: objects compiled from src_dir into object_dir/NAME.o, every other entry as
    declared with its object (and a group's egress object) named by path. Entries of backend bcc are left
    out."""
    config = {"objects": [], "xdp": _programs(programs, object_dir, "xdp_deploy_programs"),
              "tc": _programs(tc_programs, object_dir, "xdp_deploy_tc_programs"), "devmap_groups": []}
    for index, entry in enumerate(objects or []):
        where = "xdp_deploy_objects[%d]" % index
        if not entry.get("name") or not entry.get("src"):
            raise AnsibleFilterError("%s needs name and src, not %r" % (where, entry))
        compiled = {"src": "%s/%s" % (src_dir.rstrip("/"), entry["src"]),
                    "dest": _object_path(object_dir, entry["name"], where)}
        compiled.update((key, entry[key]) for key in ("include_dirs", "defines", "cflags") if key in entry)
        config["objects"].append(compiled)
    for index, entry in enumerate(groups or []):
        entry = dict(entry)
        egress = entry.get("egress_program")
        if egress and egress.get("object"):
            entry["egress_program"] = dict(egress, object=_object_path(
                object_dir, egress["object"], "xdp_deploy_devmap_groups[%d].egress_program" % index))
        config["devmap_groups"].append(entry)
    return config


class FilterModule:
    def filters(self):
        return {"deploy_config": deploy_config}
