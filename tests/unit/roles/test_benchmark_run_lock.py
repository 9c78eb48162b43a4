"""roles/benchmark/files/run_lock.py, the benchmark's one-run-at-a-time lock, on files of a temporary directory:
taken, re-entered by its own run, waited for and refused with the holder named, taken over from a run that is gone,
given back only by its run, never through a link or in a directory others may write."""

import importlib.util
import json
import os
import subprocess
import sys
import threading
import time

import pytest

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "..", "..", "roles", "benchmark", "files", "run_lock.py")


def _load():
    spec = importlib.util.spec_from_file_location("run_lock", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


run_lock = _load()


@pytest.fixture
def lock(tmp_path):
    directory = tmp_path / "run"
    directory.mkdir(mode=0o755)
    return str(directory / "benchmark.lock")


def me(**extra):
    """A holder that is this test's process (alive, this machine)."""
    return dict(run_lock.holder(), **dict({"pid": os.getpid(), "pid_start": run_lock._start_time(os.getpid())},
                                          **extra))


def test_taken_then_entered_again_by_its_run_and_given_back_only_by_it(lock):
    first = me()
    taken = run_lock.take(lock, first, 0)
    assert taken.pop("waited_seconds") < 1  # no one to wait for: a moment, more on a loaded machine
    assert taken == {"taken": True, "waited_for": None, "taken_over": None}
    assert run_lock.read(lock) == first and oct(os.stat(lock).st_mode & 0o777) == "0o644"
    assert run_lock.take(lock, first, 0)["taken"]  # another host of the same machine (the lab's namespaces)
    assert run_lock.give(lock, "another run") == {"given": False} and run_lock.read(lock) == first
    assert run_lock.give(lock, first["run"]) == {"given": True} and not os.path.exists(lock)
    assert os.listdir(os.path.dirname(lock)) == []


def test_a_live_holder_is_waited_for_then_named(lock):
    holder = me()
    run_lock.take(lock, holder, 0)
    began = time.monotonic()
    with pytest.raises(run_lock.LockError) as err:
        run_lock.take(lock, me(), 1.5)
    assert time.monotonic() - began >= 1.5
    assert str(err.value) == (
        "another benchmark run holds the host (run %s, ansible-playbook pid %d on %s, since %s) and did not end "
        "within 1 s; nothing was changed. If that run is over, remove %s."
        % (holder["run"], os.getpid(), holder["controller"], holder["started"], lock))
    assert run_lock.read(lock) == holder


def test_the_second_run_takes_it_once_the_first_gives_it_back(lock):
    holder = me()
    run_lock.take(lock, holder, 0)
    waiter = subprocess.Popen([sys.executable, SCRIPT, "take", lock, json.dumps(me()), "30"], stdout=subprocess.PIPE,
                              text=True)
    time.sleep(2.5)
    assert waiter.poll() is None, "took a held lock"
    run_lock.give(lock, holder["run"])
    out, _err = waiter.communicate(timeout=10)
    took = json.loads(out)
    assert took["waited_for"].startswith("run %s," % holder["run"]) and took["waited_seconds"] >= 2, took


def test_a_run_that_is_gone_is_taken_over_and_another_machines_is_not(lock):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    gone = me(pid=dead.pid)  # its start time is that of a process that no longer runs
    run_lock.take(lock, gone, 0)
    mine = me()
    assert run_lock.attempt(lock, mine)["taken_over"].startswith("run %s," % gone["run"])
    assert run_lock.read(lock) == mine
    run_lock.give(lock, mine["run"])

    elsewhere = me(boot_id="another machine's boot", pid=dead.pid)
    run_lock.take(lock, elsewhere, 0)
    with pytest.raises(run_lock.LockError, match="another benchmark run holds the host .run %s," % elsewhere["run"]):
        run_lock.take(lock, me(), 0)


def test_two_runs_that_find_the_holder_gone_take_it_over_one_at_a_time(lock):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    run_lock.take(lock, me(pid=dead.pid), 0)
    runs = [me(), me()]
    outcomes = {}

    def take(run):
        try:
            outcomes[run["run"]] = run_lock.take(lock, run, 1.5)
        except run_lock.LockError as exc:
            outcomes[run["run"]] = exc

    threads = [threading.Thread(target=take, args=(run,)) for run in runs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    [winner] = [run for run in runs if isinstance(outcomes[run["run"]], dict)]
    [loser] = [run for run in runs if run is not winner]
    assert outcomes[winner["run"]]["taken_over"] and run_lock.read(lock) == winner
    assert "run %s," % winner["run"] in str(outcomes[loser["run"]])


def test_a_holder_in_another_pid_namespace_is_not_judged_gone(lock):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    in_a_container = me(pid=dead.pid, pid_namespace="pid:[1]")
    run_lock.take(lock, in_a_container, 0)
    with pytest.raises(run_lock.LockError, match="another benchmark run holds the host .run %s,"
                       % in_a_container["run"]):
        run_lock.take(lock, me(), 0)


def test_try_takes_a_free_lock_or_names_the_run_that_holds_it(lock, capsys):
    holder = me()
    assert run_lock.main(["try", lock, json.dumps(holder)]) == 0
    taken = json.loads(capsys.readouterr().out)
    assert (taken["taken"], taken["waited_for"]) == (True, None) and run_lock.read(lock) == holder
    assert run_lock.main(["try", lock, json.dumps(holder)]) == 0  # its own: held already
    assert json.loads(capsys.readouterr().out)["taken"] is True
    assert run_lock.main(["try", lock, json.dumps(me())]) == 0
    assert json.loads(capsys.readouterr().out) == {"taken": False, "holder": run_lock.describe(holder)}
    assert run_lock.read(lock) == holder


def test_never_through_a_link_nor_in_a_directory_others_may_write(lock, tmp_path, capsys):
    target = tmp_path / "elsewhere"
    os.symlink(target, lock)
    assert run_lock.main(["take", lock, json.dumps(me()), "0"]) == 1
    assert capsys.readouterr().err == "benchmark: %s is a symbolic link: refusing it as the benchmark's lock\n" % lock
    assert not target.exists()
    os.unlink(lock)
    os.chmod(os.path.dirname(lock), 0o777)
    assert run_lock.main(["take", lock, json.dumps(me()), "0"]) == 1
    assert capsys.readouterr().err == (
        "benchmark: %s is not a directory of this user's alone (uid %d, mode 777): refusing to keep the benchmark's "
        "lock there\n" % (os.path.dirname(lock), os.geteuid()))
    assert os.listdir(os.path.dirname(lock)) == []


@pytest.mark.parametrize("form", ["script", "python -m ansible playbook"])
def test_the_holder_is_the_outermost_ansible_playbook_above(tmp_path, form):
    """Run as a task runs it: under a shell under a process whose command is ansible-playbook, as its script or
    as `python -m ansible playbook` (the lab's VM has no scripts of ansible-core)."""
    code = ("import subprocess, sys\nsys.exit(subprocess.run(['sh', '-c', '\"$0\" \"$1\" holder; exit $?', "
            "sys.executable, %r], check=True).returncode)\n" % SCRIPT)
    if form == "script":
        fake = tmp_path / "ansible-playbook"
        fake.write_text(code)
        argv, env = [sys.executable, str(fake)], None
    else:
        (tmp_path / "ansible").mkdir()
        (tmp_path / "ansible" / "__init__.py").write_text("")
        (tmp_path / "ansible" / "__main__.py").write_text(code)
        argv, env = [sys.executable, "-m", "ansible", "playbook"], dict(os.environ, PYTHONPATH=str(tmp_path))
    playbook = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env=env)
    found = json.loads(playbook.communicate(timeout=30)[0])
    assert found["pid"] == playbook.pid and found["pid_start"], found
    assert found["boot_id"] == run_lock._boot_id() and len(found["run"]) == 32
