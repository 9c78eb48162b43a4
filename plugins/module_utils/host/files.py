# -*- coding: utf-8 -*-
# Copyright (c) ebpf.xdp contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Files written whole: a reader never finds half of one, and a failed write leaves the old one.

Private to the ebpf.xdp collection: the interface may change without notice.
"""

from __future__ import annotations

import os
import tempfile


def write_atomically(path: str, data: bytes, mode: int = 0o644) -> None:
    """Write data to path through a temporary file in its directory (made, 0755, if missing) renamed over it."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, 0o755, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".%s." % os.path.basename(path), suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
