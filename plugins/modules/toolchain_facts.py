#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) ebpf.xdp contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: toolchain_facts
short_description: What a host already has of the collection's toolchain, in one read
version_added: 0.1.0
description:
  - Sets C(ansible_facts.ebpf_xdp_toolchain) to what the role P(ebpf.xdp.toolchain#role) would otherwise
    find out task by task, namely the distribution (from C(/etc/os-release)), the installed version of each
    package asked for (dpkg), whether bpffs is mounted, whether the kernel has the bpf() syscall and BTF, the
    kernel release, and the user and effective capabilities of the module's process.
  - It only reads, so it runs in check mode too. The role uses it to skip its install steps on a host that
    has everything (a no-change run then costs this one module run per host instead of about fifteen).
author:
  - ebpf.xdp developers (@ebpf-xdp)
extends_documentation_fragment:
  - ebpf.xdp.attributes
  - ebpf.xdp.attributes.facts
options:
  packages:
    description:
      - Packages whose installed version to report (Debian and Ubuntu, through C(dpkg-query)).
    type: list
    elements: str
    default: []
  bpffs_path:
    description:
      - Where bpffs should be mounted.
    type: path
    default: /sys/fs/bpf
  files:
    description:
      - Files whose SHA-1 to report (null for a missing file), such as a unit the role writes.
    type: list
    elements: path
    default: []
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
  facts:
    support: full
  idempotent:
    support: full
seealso:
  - module: ebpf.xdp.xdp_facts
"""

EXAMPLES = r"""
- name: Read what the host has
  ebpf.xdp.toolchain_facts:
    packages: [clang, llvm, libbpf1]

- name: Say which packages are missing
  ansible.builtin.debug:
    msg: "{{ ansible_facts.ebpf_xdp_toolchain.packages | dict2items | rejectattr('value') | map(attribute='key') }}"
"""

RETURN = r"""
ansible_facts:
  description: Facts to add to ansible_facts.
  returned: always
  type: dict
  contains:
    ebpf_xdp_toolchain:
      description:
        - C(os) (C(distribution) and C(os_family) as M(ansible.builtin.setup) names them, for the distributions
          the collection supports, else the C(ID) of C(/etc/os-release) and null; C(version_id)),
          C(packages) (name to installed version, null when not installed, or every value null without dpkg),
          C(dpkg) (whether C(dpkg-query) is there), C(bpffs) (C(path), C(mounted), C(fstype)), C(kernel)
          (C(release), C(bpf_syscall), C(btf)), C(uid), C(capabilities) (C(effective) as a number,
          C(net_admin), C(bpf), C(sys_admin)) and C(files) (path to SHA-1 or null).
      returned: always
      type: dict
      sample:
        os: {distribution: Debian, os_family: Debian, version_id: "12"}
        packages: {clang: "1:14.0-55.7~deb12u1", llvm: null}
        dpkg: true
        bpffs: {path: /sys/fs/bpf, mounted: true, fstype: bpf}
        kernel: {release: 6.1.0-28-amd64, bpf_syscall: true, btf: true}
        uid: 0
        capabilities: {effective: 2199023255551, net_admin: true, bpf: true, sys_admin: true}
        files: {/etc/systemd/system/ebpf-xdp-bpffs.service: null}
"""

import hashlib
import os

from ansible.module_utils.basic import AnsibleModule

# linux/capability.h
CAP_NET_ADMIN = 12
CAP_SYS_ADMIN = 21
CAP_BPF = 39


def installed(module, packages):
    """Name to installed version (None when not installed), in one dpkg-query."""
    found = dict.fromkeys(packages)
    dpkg = module.get_bin_path("dpkg-query")
    if not dpkg or not packages:
        return found, bool(dpkg)
    # dpkg-query exits 1 when a package is unknown, and still prints the others.
    dummy_rc, out, dummy_err = module.run_command(
        [dpkg, "-W", "-f=${Package}\t${db:Status-Status}\t${Version}\n"] + list(packages))
    for line in out.splitlines():
        name, _sep, rest = line.partition("\t")
        status, _sep, version = rest.partition("\t")
        # A multiarch package may be named with its architecture.
        name = name.split(":")[0]
        if name in found and status == "installed":
            found[name] = version
    return found, True


def mount_type(path):
    try:
        with open("/proc/self/mounts", encoding="utf-8") as mounts:
            types = [line.split()[2] for line in mounts if line.split()[1:2] == [path]]
    except OSError:
        return None
    return types[-1] if types else None


def effective_capabilities():
    with open("/proc/self/status", encoding="utf-8") as status:
        for line in status:
            if line.startswith("CapEff:"):
                return int(line.split()[1], 16)
    return 0


def sha1(path):
    try:
        with open(path, "rb") as f:
            return hashlib.sha1(f.read()).hexdigest()
    except OSError:
        return None


# /etc/os-release ID (or an ID_LIKE) -> what ansible.builtin.setup calls the distribution and its family.
DISTRIBUTIONS = {"debian": "Debian", "ubuntu": "Ubuntu"}
DEBIAN_LIKE = ("debian", "ubuntu")


def os_release(path="/etc/os-release"):
    """distribution, os_family and version_id, as setup would report them for the distributions we know."""
    fields = {}
    try:
        with open(path, encoding="utf-8") as src:
            for line in src:
                key, sep, value = line.strip().partition("=")
                if sep:
                    fields[key] = value.strip().strip("\"'")
    except OSError:
        pass
    ident = fields.get("ID", "").lower()
    family = "Debian" if {ident, *fields.get("ID_LIKE", "").lower().split()} & set(DEBIAN_LIKE) else None
    return {"distribution": DISTRIBUTIONS.get(ident, ident or None), "os_family": family,
            "version_id": fields.get("VERSION_ID")}


def main():
    module = AnsibleModule(argument_spec=dict(
        packages=dict(type="list", elements="str", default=[]),
        bpffs_path=dict(type="path", default="/sys/fs/bpf"),
        files=dict(type="list", elements="path", default=[]),
    ), supports_check_mode=True)
    p = module.params
    packages, dpkg = installed(module, p["packages"])
    caps = effective_capabilities()
    facts = {
        "os": os_release(),
        "packages": packages,
        "dpkg": dpkg,
        "bpffs": {"path": p["bpffs_path"], "mounted": os.path.ismount(p["bpffs_path"]),
                  "fstype": mount_type(p["bpffs_path"])},
        "kernel": {"release": os.uname().release,
                   "bpf_syscall": os.path.exists("/proc/sys/kernel/unprivileged_bpf_disabled"),
                   "btf": os.path.exists("/sys/kernel/btf/vmlinux")},
        "uid": os.geteuid(),
        "capabilities": {"effective": caps, "net_admin": bool(caps >> CAP_NET_ADMIN & 1),
                         "bpf": bool(caps >> CAP_BPF & 1), "sys_admin": bool(caps >> CAP_SYS_ADMIN & 1)},
        "files": {path: sha1(path) for path in p["files"]},
    }
    module.exit_json(changed=False, ansible_facts={"ebpf_xdp_toolchain": facts})


if __name__ == "__main__":
    main()
