#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) ebpf.xdp contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: bpf_object
short_description: Compile BPF C into a BPF object, cached by content
version_added: 0.1.0
description:
  - Compiles a C source with C(clang -target bpf -O2 -g) into a BTF-carrying ELF object that
    M(ebpf.xdp.xdp_program) loads, and reports the programs and maps it contains.
  - Compiled objects are kept in a content-addressed cache. The key covers the source, the flags and
    the clang binary; every header clang read is recorded with its hash, so editing an included
    header is a cache miss too. A cache hit runs no compiler and reports no change.
  - Runs on the managed host or, with C(delegate_to), on the controller; the object can then be copied
    to hosts that have no compiler.
author:
  - ebpf.xdp developers (@ebpf-xdp)
requirements:
  - clang (14 or newer) where the module runs
  - libbpf >= 1.0 (C(libbpf.so.1)), to list the object's programs and maps
extends_documentation_fragment:
  - ebpf.xdp.attributes
options:
  src:
    description:
      - Path of the BPF C source.
    type: path
    required: true
  dest:
    description:
      - Where to put the object. It is replaced atomically, only when its content differs.
      - Its directory is created (mode 0755) when it does not exist.
      - When omitted, RV(path) is the object inside the cache.
    type: path
  include_dirs:
    description:
      - Extra directories for C(#include "...").
      - The source's own directory, and its C(include/) subdirectory when there is one, are always searched.
    type: list
    elements: path
    default: []
  defines:
    description:
      - Preprocessor macros, name to value (an empty value defines the name only).
    type: dict
    default: {}
  cflags:
    description:
      - Additional clang flags, appended after the collection's own.
    type: list
    elements: str
    default: []
  clang:
    description:
      - The compiler to run, a name looked up in C(PATH) or an absolute path.
    type: str
    default: clang
  cache_dir:
    description:
      - Directory of the object cache, an absolute path without C(..) components.
      - An entry is code the kernel will run, so the directory must belong to the user the module runs as and be
        writable by no one else (and not be a symbolic link); another one is refused, in check mode too. Entries
        are written C(0600) in C(0700) directories.
    type: path
    default: /var/cache/ebpf_xdp/objects
attributes:
  check_mode:
    support: full
    details:
      - Check mode reports whether O(dest) would change. Where the cache has no entry, it compiles into a temporary
        directory it removes, since a new compile often gives the bytes O(dest) holds already (the run then reports
        no change); it installs and caches nothing.
  diff_mode:
    support: full
  idempotent:
    support: full
seealso:
  - module: ebpf.xdp.xdp_program
"""

EXAMPLES = r"""
- name: Compile on the managed host
  ebpf.xdp.bpf_object:
    src: /opt/bpf/xdp_drop_count.bpf.c
    dest: /var/lib/ebpf_xdp/xdp_drop_count.o
    include_dirs:
      - /opt/bpf/include
  register: compiled

- name: Compile on the controller once, then copy the object to the fleet
  ebpf.xdp.bpf_object:
    src: "{{ playbook_dir }}/bpf/my_filter.bpf.c"
    dest: "{{ playbook_dir }}/build/my_filter.o"
    defines:
      MAX_RULES: 1024
  delegate_to: localhost
  run_once: true
"""

RETURN = r"""
path:
  description: Path of the compiled object (O(dest), or the cache entry).
  returned: success
  type: str
  sample: /var/lib/ebpf_xdp/xdp_drop_count.o
sha256:
  description: SHA-256 of the object (hex).
  returned: success
  type: str
checksum:
  description:
    - The same digest as V(sha256:<hex>), the form the O(ebpf.xdp.xdp_program#module:checksum) option of
      M(ebpf.xdp.xdp_program) and M(ebpf.xdp.tc_program) takes, to pin in inventory.
  returned: success
  type: str
  sample: sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08
cache_hit:
  description: Whether the object came from the cache without running clang.
  returned: success
  type: bool
programs:
  description: Programs in the object.
  returned: success
  type: list
  elements: dict
  sample: [{name: xdp_drop_count, section: xdp, type: xdp}]
maps:
  description: Maps in the object (not the internal .rodata/.bss ones).
  returned: success
  type: list
  elements: dict
  sample: [{name: proto_count, type: percpu_array, key_size: 4, value_size: 8, max_entries: 256}]
cmd:
  description: The clang command line.
  returned: success
  type: list
  elements: str
stderr_lines:
  description: clang's diagnostics when compilation failed.
  returned: failure
  type: list
  elements: str
"""

from ansible_collections.ebpf.xdp.plugins.module_utils import _common
from ansible_collections.ebpf.xdp.plugins.module_utils.bpf import compile as _compile


def main():
    _common.run_module(
        _compile.OBJECT_ARGS, libraries=dict(pyroute2=False), privileges=(),
        work=lambda params, check_mode, module: _compile.converge_object(params, check_mode, module.run_command,
                                                                         module.get_bin_path))


if __name__ == "__main__":
    main()
