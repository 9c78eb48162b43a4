# -*- coding: utf-8 -*-
# Copyright (c) ebpf.xdp contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""ebpf.xdp.capture on the controller's side: the module writes the pcap on the host; with fetch_to, the file
is then copied to the controller (a module cannot send a file back)."""

from __future__ import annotations

import os

from ansible.plugins.action import ActionBase


class ActionModule(ActionBase):

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = dict(self._task.args)
        fetch_to = args.pop("fetch_to", None)
        result.update(self._execute_module(module_name="ebpf.xdp.capture", module_args=args, task_vars=task_vars))
        if not fetch_to or result.get("failed") or self._task.check_mode:
            return result
        dest = self._loader.path_dwim(os.path.expanduser(fetch_to))
        if fetch_to.endswith("/") or os.path.isdir(dest):
            dest = os.path.join(dest, os.path.basename(result["path"]))
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        self._connection.fetch_file(result["path"], dest)
        result["fetched"] = dest
        return result
