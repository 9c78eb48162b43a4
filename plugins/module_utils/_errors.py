# -*- coding: utf-8 -*-
# Copyright (c) ebpf.xdp contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The collection's error family.

Private to the ebpf.xdp collection: the interface may change without notice.

Every failure the collection raises on purpose derives from EbpfXdpError,
so a module catches one class (plus OSError) and turns it into fail_json.
"""

from __future__ import annotations


class EbpfXdpError(Exception):
    """A failure with a message a user can act on."""
