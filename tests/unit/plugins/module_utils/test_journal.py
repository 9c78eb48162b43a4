"""host/journal: the one undo journal (devmap groups, map entries and datapath runs keep their changes in it)."""

import pytest

from ansible_collections.ebpf.xdp.plugins.module_utils.host.journal import Journal


def fail(error):
    raise error


class Held:
    def __init__(self, name, closed):
        self.name, self.closed = name, closed

    def close(self):
        self.closed.append(self.name)


def test_a_failed_work_is_undone_in_reverse_and_its_error_raised_again():
    done = []
    with Journal() as journal:
        def work():
            for step in ("a", "b", "c"):
                done.append(step)
                journal.did(lambda step=step: done.remove(step), step)
            raise ValueError("the fourth write failed")
        with pytest.raises(ValueError, match="the fourth write failed"):
            journal.run(work, lambda exc, failed: AssertionError("no undo failed"))
    assert done == [] and journal.steps == []


def test_an_undo_that_fails_too_is_reported_and_the_others_still_run():
    undone = []
    journal = Journal()
    journal.did(lambda: undone.append("first"), "first")
    journal.did(lambda: fail(OSError("gone")), "second")
    journal.did(lambda: undone.append("third"), "third")
    outcome = journal.undo()
    assert [(what, str(error) if error else None) for what, error in outcome] == [
        ("third", None), ("second", "gone"), ("first", None)]
    assert undone == ["third", "first"] and journal.undo() == []

    journal.did(lambda: fail(OSError("still gone")))
    with pytest.raises(RuntimeError, match=r"write failed; half done: still gone") as caught:
        journal.run(lambda: fail(ValueError("write failed")),
                    lambda exc, failed: RuntimeError("%s; half done: %s" % (exc, "; ".join(failed))))
    assert isinstance(caught.value.__cause__, ValueError)


def test_what_is_held_lives_until_the_journal_closes_newest_first():
    closed = []
    with Journal() as journal:
        first = journal.hold(Held("first", closed))
        journal.hold(Held("second", closed))
        journal.did(lambda: None, "a change")
        journal.run(lambda: None, lambda exc, failed: exc)
        assert first.name == "first" and closed == [] and len(journal.steps) == 1
    assert closed == ["second", "first"] and journal.steps == [] and journal.held == []
    journal.close()
    assert closed == ["second", "first"]


def test_a_change_kept_stands_when_a_later_one_fails():
    """keep(): a change past its point of no return (a program's directories once it is on its hook) is no
    longer undone; the changes around it are."""
    undone = []
    journal = Journal()
    journal.did(lambda: undone.append("first"), "first")
    made = journal.did(lambda: undone.append("directories"), "directories")
    journal.did(lambda: undone.append("third"), "third")
    journal.keep(made)
    journal.keep(made)  # twice: nothing more
    assert [what for what, _error in journal.undo()] == ["third", "first"] and undone == ["third", "first"]
