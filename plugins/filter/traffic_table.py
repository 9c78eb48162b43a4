# -*- coding: utf-8 -*-
# Copyright (c) ebpf.xdp contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

from ansible.errors import AnsibleFilterError

COLUMNS = (
    # key, header, format
    ("sender", "sender", "%s"),
    ("receiver", "receiver", "%s"),
    ("engine", "engine", "%s"),
    ("sent", "sent", "%d"),
    ("sent_pps", "sent pps", "%.0f"),
    ("received", "received", "%d"),
    ("received_pps", "received pps", "%.0f"),
    ("loss", "loss", "%.2f%%"),
)


def traffic_table(rows):
    """The rows of traffic runs as lines of a table, columns aligned; loss is a fraction, shown in percent."""
    cells = [[header for _key, header, _fmt in COLUMNS]]
    for row in rows:
        try:
            cells.append([fmt % (row[key] * 100 if key == "loss" else row[key]) for key, _header, fmt in COLUMNS])
        except (KeyError, TypeError) as exc:
            raise AnsibleFilterError("traffic_table: a row needs %s as numbers where counted (%s): %r" % (
                ", ".join(key for key, _header, _fmt in COLUMNS), exc, row))
    widths = [max(len(line[i]) for line in cells) for i in range(len(COLUMNS))]
    # Names left-aligned, figures right-aligned.
    return ["  ".join(cell.ljust(width) if i < 3 else cell.rjust(width)
                      for i, (cell, width) in enumerate(zip(line, widths))).rstrip() for line in cells]


class FilterModule:
    def filters(self):
        return {"traffic_table": traffic_table}
