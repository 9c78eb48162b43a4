# -*- coding: utf-8 -*-
# Copyright (c) ebpf.xdp contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The one undo journal: what a run changed, each change with the step that takes it back, undone in reverse
when a later change fails.

Private to the ebpf.xdp collection: the interface may change without notice.

Every section keeps its changes here: a devmap group's map writes, pins, record and directory (maps/devmap), a map's
entries (maps/map_entry), a hook's program detached for a switch (hooks/converge: put back when the new one
cannot be attached), a program's upgrade (hooks/converge: the directories it made, the map pins a migration
set aside, maps/migration, and once the new program is on the hook a migrating upgrade's way back: each hook's
old program, then what the new ones counted carried back to the old maps), and the entries of a datapath run
(_datapath: a hook held as it was, the sources written, the parameters that converge an entry back). The journal
also holds what an undo needs alive until the end (a program or map by its fd, a hook held as it was) and closes
it once the work is over.
"""

from __future__ import annotations

from typing import Callable


class Journal:
    """Undo steps of the changes done so far, each with what it undoes in words; and the objects the undo needs
    kept open until the end."""

    def __init__(self):
        self.steps: list[tuple[Callable[[], object], str]] = []
        self.held: list = []

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def hold(self, obj):
        """Keep obj (anything with close()) open until the journal closes; returns it."""
        self.held.append(obj)
        return obj

    def did(self, undo: Callable[[], object], what: str = "") -> tuple:
        """A change is done; undo() takes it back. Returns the step, for keep()."""
        step = (undo, what)
        self.steps.append(step)
        return step

    def keep(self, step: tuple) -> None:
        """A change that now stands whatever fails after it (the directories of a program now on its hook, the
        maps an upgrade retired at its point of no return): its undo is dropped, the others' stay."""
        self.steps = [kept for kept in self.steps if kept is not step]

    def undo(self) -> list[tuple[str, Exception | None]]:
        """Undo every step in reverse, each tried whatever became of the others: (what, the error or None) of each,
        in the order undone. The journal is empty afterwards."""
        outcome = []
        steps, self.steps = self.steps, []
        for undo, what in reversed(steps):
            try:
                undo()
                outcome.append((what, None))
            except Exception as exc:  # pylint: disable=broad-except  # keep undoing the rest; report what stayed
                outcome.append((what, exc))
        return outcome

    def run(self, work: Callable[[], object], half_done: Callable[[Exception, list[str]], Exception]) -> None:
        """work(); when it fails, undo what it did and raise its error again, or, when an undo fails too,
        half_done(the error, what each failed undo said)."""
        try:
            work()
        except Exception as exc:
            failed = [str(error) for _what, error in self.undo() if error is not None]
            if failed:
                raise half_done(exc, failed) from exc
            raise

    def close(self) -> None:
        """The work is over: let go of what was held, newest first (the steps are forgotten)."""
        held, self.held = self.held, []
        self.steps = []
        for obj in reversed(held):
            obj.close()
