# -*- coding: utf-8 -*-
# Copyright (c) 2026, ebpf.xdp developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
name: netns
author:
  - ebpf.xdp developers (@ebpf-xdp)
short_description: Run tasks inside a network namespace of the controller machine
description:
  - Lab hosts of this collection are network namespaces on the machine that runs Ansible
    (created with C(ip netns add NAME), so they appear as C(/run/netns/NAME)).
    This plugin runs every command of a task as C(nsenter --net=/run/netns/NAME -- ...).
  - Only the network namespace changes. The mount namespace, the filesystem, the user
    and the process tree stay those of the controller, so the host's bpffs at
    C(/sys/fs/bpf), its Python and its libraries are visible to modules exactly as on a
    real host, while interfaces, addresses, routes and XDP/tc attachments are those of
    the namespace.
  - File transfer is a plain local copy, as with P(ansible.builtin.local#connection).
  - The connection fails (the host becomes unreachable) when the namespace does not exist.
    Create the lab with C(playbooks/lab_up.yml).
notes:
  - Entering a network namespace needs C(CAP_SYS_ADMIN), so Ansible has to run as root on
    the controller. Privilege escalation (C(become)) is applied inside the namespace, after
    C(nsenter); it cannot be used to obtain the right to enter it.
  - All hosts using this plugin share one kernel. Tasks that act on the whole machine
    (reboot, kernel modules, sysctls outside C(net.*)) affect every lab host and the
    controller; P(ansible.builtin.reboot#module) refuses to run, as it does for a local connection.
options:
  netns_name:
    description:
      - Name of the network namespace to enter, as listed by C(ip netns list);
        the namespace is looked up as C(/run/netns/<netns_name>).
      - When not set, the host's address is used, that is C(ansible_host) if set and
        otherwise the inventory name (also correct with C(delegate_to)). Lab inventories
        name each host after its namespace, so nothing needs to be set.
    type: string
    vars:
      - name: ansible_netns_name
  nsenter_path:
    description:
      - The C(nsenter) executable (util-linux), found through E(PATH) when not absolute.
    type: string
    default: nsenter
    env:
      - name: ANSIBLE_NETNS_NSENTER_PATH
    vars:
      - name: ansible_netns_nsenter_path
  become_success_timeout:
    description:
      - Number of seconds to wait for become to succeed when enabled.
      - The default will be used if the configured value is less than 1.
    type: int
    default: 10
    vars:
      - name: ansible_local_become_success_timeout
  become_strip_preamble:
    description:
      - Strip internal become output preceding command execution. Disable for additional diagnostics.
    type: bool
    default: true
    vars:
      - name: ansible_local_become_strip_preamble
extends_documentation_fragment:
  - ansible.builtin.connection_pipelining
"""

EXAMPLES = r"""
# inventories/lab/hosts.yml: hosts named after their namespaces
# all:
#   children:
#     lab:
#       vars:
#         ansible_connection: ebpf.xdp.netns
#         ansible_python_interpreter: /usr/bin/python3
#       hosts:
#         sender:
#         receiver:
#         receiver-2:
#           ansible_netns_name: rx2   # when the host name differs from the namespace
#
# ansible -i inventories/lab receiver -m ansible.builtin.command -a 'ip -o link'
"""

import os
import shlex
import shutil

import ansible.constants as C
from ansible.errors import AnsibleConnectionFailure
from ansible.module_utils.common.text.converters import to_text
from ansible.plugins.connection.local import Connection as LocalConnection
from ansible.utils.display import Display

display = Display()

NETNS_RUN_DIR = '/run/netns'


class Connection(LocalConnection):
    """Local connection whose commands run inside a named network namespace."""

    # transport stays 'local' on purpose: ansible-core keys a few safety checks on it
    # (ansible.builtin.reboot refuses to reboot the controller), and a netns host *is*
    # the controller's kernel.
    transport = 'local'

    def _netns_name(self) -> str:
        name = self.get_option('netns_name') or self._play_context.remote_addr
        if not name or '/' in name or name in ('.', '..'):
            raise AnsibleConnectionFailure(
                'invalid network namespace name %r: set ansible_netns_name to a name listed by "ip netns list"' % (name,))
        return name

    def _netns_path(self) -> str:
        name = self._netns_name()
        path = os.path.join(NETNS_RUN_DIR, name)
        if not os.path.exists(path):
            raise AnsibleConnectionFailure(
                'network namespace %s does not exist (no %s); run playbooks/lab_up.yml' % (name, path))
        return path

    def _nsenter(self) -> str:
        nsenter = self.get_option('nsenter_path')
        found = shutil.which(nsenter)
        if not found:
            raise AnsibleConnectionFailure(
                'cannot find %r to enter network namespaces; install util-linux or set ansible_netns_nsenter_path' % nsenter)
        return found

    def _connect(self) -> Connection:
        if not self._connected:
            path = self._netns_path()
            display.vvv('ESTABLISH NETNS CONNECTION INTO %s' % path, host=self._play_context.remote_addr)
        return super()._connect()

    def exec_command(self, cmd, in_data=None, sudoable=True):
        """Run cmd inside the network namespace, through the local connection."""
        prefix = [self._nsenter(), '--net=%s' % self._netns_path(), '--']
        if isinstance(cmd, (str, bytes)):
            # The local connection hands a string to a shell. Give nsenter its own shell
            # so that everything in cmd (lists, redirections, `;`) runs inside the namespace.
            shell = (C.DEFAULT_EXECUTABLE or '/bin/sh').split()[0]
            wrapped = ' '.join(shlex.quote(arg) for arg in prefix + [shell, '-c', to_text(cmd)])
        else:
            wrapped = prefix + [to_text(arg) for arg in cmd]
        return super().exec_command(wrapped, in_data=in_data, sudoable=sudoable)
