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
    kernel release, whether the kernel takes live-frames test runs, and the user and effective capabilities of
    the module's process.
  - Live frames (C(BPF_PROG_TEST_RUN) with C(BPF_F_TEST_XDP_LIVE_FRAMES), Linux 5.18) are what
    M(ebpf.xdp.xdp_trafficgen)'s V(xdp) engine sends with. The module asks the kernel itself, with one
    live-frames run of a two-instruction program that drops its frame (nothing is sent), because the release
    cannot tell (a host's policy can refuse every such run, with C(EPERM)). The role P(ebpf.xdp.benchmark#role)
    reads it to choose its generator.
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
      - Packages whose installed version to report (Debian and Ubuntu, from dpkg's status file as C(dpkg-query)
        reads it; C(dpkg-query) itself while dpkg has updates not yet merged into that file).
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
  require:
    description:
      - What a host needs to be ready for the collection. When given, the facts say whether it is
        (C(ready)) and, in words, what it lacks (C(unready)); the role P(ebpf.xdp.toolchain#role) skips its install
        steps on a ready host, and M(ebpf.xdp.datapath) (its O(ebpf.xdp.datapath#module:toolchain)) changes
        nothing on a host that is not.
      - Always required besides these - bpffs mounted at O(bpffs_path), a kernel with the bpf() syscall, and
        C(CAP_NET_ADMIN) with C(CAP_BPF) or C(CAP_SYS_ADMIN).
      - The packages named here are asked about too, with O(packages).
    type: dict
    suboptions:
      os_family:
        description:
          - The distribution family, as M(ansible.builtin.setup) names it.
        type: str
        default: Debian
      packages:
        description:
          - Packages that must be installed.
        type: list
        elements: str
        default: []
      distribution_packages:
        description:
          - Distribution (C(Debian), C(Ubuntu)) to packages that must be installed there.
        type: dict
        default: {}
      absent_files:
        description:
          - Files that must not exist (a host that has them takes the role's full path).
        type: list
        elements: path
        default: []
      min_kernel:
        description:
          - The oldest kernel release the host may run, such as C(5.9).
        type: str
      btf:
        description:
          - Whether the kernel must have BTF (C(/sys/kernel/btf/vmlinux)).
        type: bool
        default: false
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

- name: Read whether the host has all the collection needs, and what it lacks
  ebpf.xdp.toolchain_facts:
    require:
      packages: [clang, llvm, libbpf1, python3-pyroute2]
      distribution_packages: {Debian: [bpftool], Ubuntu: [linux-tools-common]}
      min_kernel: "5.9"
      btf: true

- name: Say which packages are missing
  ansible.builtin.debug:
    msg: "{{ ansible_facts.ebpf_xdp_toolchain.packages | dict2items | rejectattr('value') | map(attribute='key') }}"

- name: Read whether the kernel takes live-frames test runs (xdp_trafficgen's xdp engine)
  ebpf.xdp.toolchain_facts:

- name: Say why it does not
  ansible.builtin.debug:
    msg: "{{ ansible_facts.ebpf_xdp_toolchain.kernel.xdp_live_frames_error }}"
  when: not ansible_facts.ebpf_xdp_toolchain.kernel.xdp_live_frames
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
          C(dpkg) (whether dpkg's status file or C(dpkg-query) is there), C(bpffs) (C(path), C(mounted), C(fstype)), C(kernel)
          (C(release), C(bpf_syscall), C(btf), C(xdp_live_frames) whether the kernel took a live-frames test run
          and C(xdp_live_frames_error) why not, null when it did), C(uid), C(capabilities) (C(effective) as a number,
          C(net_admin), C(bpf), C(sys_admin)) and C(files) (path to SHA-1 or null); with O(require), C(ready)
          and C(unready) (what the host lacks, in words; empty when ready).
      returned: always
      type: dict
      sample:
        os: {distribution: Debian, os_family: Debian, version_id: "12"}
        packages: {clang: "1:14.0-55.7~deb12u1", llvm: null}
        dpkg: true
        bpffs: {path: /sys/fs/bpf, mounted: true, fstype: bpf}
        kernel: {release: 6.1.0-28-amd64, bpf_syscall: true, btf: true, xdp_live_frames: true,
                 xdp_live_frames_error: null}
        uid: 0
        capabilities: {effective: 2199023255551, net_admin: true, bpf: true, sys_admin: true}
        files: {/etc/systemd/system/ebpf-xdp-bpffs.service: null}
        ready: false
        unready: ["packages not installed: llvm"]
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.ebpf.xdp.plugins.module_utils.host import toolchain as _toolchain


def main():
    module = AnsibleModule(argument_spec=_toolchain.ARGS, supports_check_mode=True)
    facts = _toolchain.read(module.run_command, module.get_bin_path, with_live_frames=True, **module.params)
    module.exit_json(changed=False, ansible_facts={"ebpf_xdp_toolchain": facts})


if __name__ == "__main__":
    main()
