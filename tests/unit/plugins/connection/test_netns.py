# -*- coding: utf-8 -*-
# Copyright (c) 2026, ebpf.xdp developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

import shlex

import pytest

from ansible.errors import AnsibleConnectionFailure
from ansible.playbook.play_context import PlayContext
from ansible.plugins.connection.local import Connection as LocalConnection
from ansible.plugins.loader import connection_loader

from ansible_collections.ebpf.xdp.plugins.connection import netns


@pytest.fixture
def run_dir(tmp_path, monkeypatch):
    """A stand-in for /run/netns holding one namespace, "sender"."""
    (tmp_path / 'sender').touch()
    monkeypatch.setattr(netns, 'NETNS_RUN_DIR', str(tmp_path))
    return tmp_path


@pytest.fixture
def captured(monkeypatch):
    """Commands the local connection would have run."""
    calls = []

    def fake_exec(self, cmd, in_data=None, sudoable=True):
        calls.append(cmd)
        return 0, b'', b''

    monkeypatch.setattr(LocalConnection, 'exec_command', fake_exec)
    monkeypatch.setattr(netns.shutil, 'which', lambda name: '/usr/bin/nsenter')
    return calls


def connection(remote_addr='sender', **var_options):
    play_context = PlayContext()
    play_context.remote_addr = remote_addr
    conn = connection_loader.get('ebpf.xdp.netns', play_context)
    conn.set_options(var_options=var_options)
    return conn


def test_string_command_runs_in_a_shell_inside_the_namespace(run_dir, captured):
    connection().exec_command("echo a; echo b > /tmp/x")
    argv = shlex.split(captured[0])
    assert argv[:3] == ['/usr/bin/nsenter', '--net=%s' % (run_dir / 'sender'), '--']
    assert argv[4:] == ['-c', 'echo a; echo b > /tmp/x']


def test_argv_command_is_prefixed(run_dir, captured):
    connection().exec_command(['ip', '-o', 'link'])
    assert captured[0] == ['/usr/bin/nsenter', '--net=%s' % (run_dir / 'sender'), '--', 'ip', '-o', 'link']


def test_netns_name_overrides_the_host_address(run_dir, captured):
    connection(remote_addr='tx-host', ansible_netns_name='sender').exec_command('true')
    assert '--net=%s' % (run_dir / 'sender') in shlex.split(captured[0])


def test_missing_namespace_is_a_connection_failure(run_dir, captured):
    with pytest.raises(AnsibleConnectionFailure, match='network namespace receiver does not exist.*lab_up.yml'):
        connection(remote_addr='receiver').exec_command('true')
    assert not captured


@pytest.mark.parametrize('name', ['../etc', 'a/b', '..'])
def test_unsafe_names_are_refused(run_dir, captured, name):
    with pytest.raises(AnsibleConnectionFailure, match='invalid network namespace name'):
        connection(ansible_netns_name=name).exec_command('true')


def test_missing_nsenter_is_a_connection_failure(run_dir, monkeypatch):
    monkeypatch.setattr(netns.shutil, 'which', lambda name: None)
    with pytest.raises(AnsibleConnectionFailure, match='util-linux'):
        connection().exec_command('true')
