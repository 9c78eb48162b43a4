# -*- coding: utf-8 -*-
"""One benchmark run at a time on a host: the lock the role takes before it reads or changes anything there.

    run_lock.py holder                       (on the controller) who this run is, as JSON
    run_lock.py try FILE HOLDER_JSON         take FILE if no other run holds it, else name that run (JSON)
    run_lock.py take FILE HOLDER_JSON WAIT   take FILE, waiting up to WAIT seconds for another run to end
    run_lock.py give FILE RUN                give it back (only the run that holds it)

Two runs on one host share what no option separates: its interfaces (the
lab's), the namespace of the exporter-scrape case, the exporter's port,
service name, configuration and pid file, the CPUs whose time is measured.
Run side by side, one measures the other's traffic and exporter and its
clean-up removes the other's programs: so the second run waits.

The lock is a file of root's in /run (gone at a reboot), made with O_EXCL
and never through a link, holding the holder: the run's id, its controller,
the controller's boot and the pid (with its start time) of the
ansible-playbook that runs it. A holder whose controller is this machine
(the lab, CI) and whose process is gone left it behind: it is taken over.
Another machine's holder cannot be checked from here: the run waits, then
fails naming it. Standard library only: it runs on the host.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
import stat
import sys
import time
import uuid

POLL = 1.0


def _boot_id() -> str:
    with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as src:
        return src.read().strip()


def _pid_namespace() -> str:
    """This process's pid namespace: a container on the controller shares its boot id, not its pids."""
    return os.readlink("/proc/self/ns/pid")


def _start_time(pid: int) -> str | None:
    """The process's start (clock ticks after boot): a pid used again by another process has another."""
    try:
        with open("/proc/%d/stat" % pid, encoding="ascii", errors="replace") as src:
            return src.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _cmdline(pid: int) -> list[str]:
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as src:
            return [arg.decode(errors="replace") for arg in src.read().split(b"\0") if arg]
    except OSError:
        return []


def _parent(pid: int) -> int:
    try:
        with open("/proc/%d/stat" % pid, encoding="ascii", errors="replace") as src:
            return int(src.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def _is_ansible_playbook(argv: list[str]) -> bool:
    """ansible-playbook, run as its script (directly or by its interpreter) or as `python -m ansible playbook`
    (where ansible-core has no scripts on the PATH, as in the lab's VM)."""
    return (any(os.path.basename(arg) == "ansible-playbook" for arg in argv[:2])
            or argv[1:4] == ["-m", "ansible", "playbook"])


def holder() -> dict:
    """This run: the outermost ansible-playbook above this process (its workers are forks of it)."""
    playbook, pid = None, os.getppid()
    while pid > 1:
        if _is_ansible_playbook(_cmdline(pid)):
            playbook = pid
        pid = _parent(pid)
    playbook = playbook or os.getppid()
    return {"run": uuid.uuid4().hex, "controller": socket.gethostname(), "boot_id": _boot_id(),
            "pid_namespace": _pid_namespace(), "pid": playbook, "pid_start": _start_time(playbook),
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def describe(other: dict) -> str:
    return "run %s, ansible-playbook pid %s on %s, since %s" % (
        other.get("run"), other.get("pid"), other.get("controller"), other.get("started"))


def gone(other: dict) -> bool:
    """Whether the holder's run is over: its controller is this machine and its ansible-playbook is not running."""
    if other.get("boot_id") != _boot_id():
        return False  # another machine (or an earlier boot, whose /run is gone anyway)
    if other.get("pid_namespace", _pid_namespace()) != _pid_namespace():
        return False  # a container of this machine: its pid means nothing here
    pid = other.get("pid")
    return not isinstance(pid, int) or _start_time(pid) != other.get("pid_start")


class LockError(Exception):
    pass


class HeldError(LockError):
    """Another run holds the lock: holder names it."""

    def __init__(self, message: str, holder: str):
        super().__init__(message)
        self.holder = holder


def _directory(path: str) -> int:
    """The lock's directory, made if missing, opened without following a link: root's and no one else's."""
    try:
        os.mkdir(path, 0o755)
    except FileExistsError:
        pass
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    info = os.fstat(fd)
    if info.st_uid != os.geteuid() or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        os.close(fd)
        raise LockError("%s is not a directory of this user's alone (uid %d, mode %o): refusing to keep the "
                        "benchmark's lock there" % (path, info.st_uid, stat.S_IMODE(info.st_mode)))
    return fd


def read(path: str) -> dict | None:
    """The holder written in the lock, None without one (or a lock half written: see take)."""
    directory = _directory(os.path.dirname(path))
    try:
        fd = os.open(os.path.basename(path), os.O_RDONLY | os.O_NOFOLLOW, dir_fd=directory)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise LockError("%s is a symbolic link: refusing it as the benchmark's lock" % path) from None
        raise
    finally:
        os.close(directory)
    with os.fdopen(fd, encoding="utf-8") as src:
        try:
            found = json.load(src)
        except ValueError:
            return {}
    return found if isinstance(found, dict) else {}


def _write(path: str, me: dict, replace: bool) -> bool:
    """Write the lock: made with O_EXCL (False when another run made it first), or over a holder that is gone."""
    directory = _directory(os.path.dirname(path))
    name = os.path.basename(path)
    try:
        temp = "%s.%s.tmp" % (name, me["run"])
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644, dir_fd=directory)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump(me, out)
            out.flush()
            os.fsync(out.fileno())
        if replace:
            os.rename(temp, name, src_dir_fd=directory, dst_dir_fd=directory)
            return True
        try:
            os.link(temp, name, src_dir_fd=directory, dst_dir_fd=directory, follow_symlinks=False)
        except FileExistsError:
            return False
        finally:
            os.unlink(temp, dir_fd=directory)
        return True
    finally:
        os.close(directory)


def _take_over(path: str, me: dict, other: dict) -> bool:
    """Replace the lock of a holder found gone, if it still names that holder. Two runs that both found it gone
    take turns on the directory's flock, so the second reads the first's lock and waits for it."""
    directory = _directory(os.path.dirname(path))
    try:
        fcntl.flock(directory, fcntl.LOCK_EX)
        return read(path) == other and _write(path, me, replace=True)
    finally:
        os.close(directory)  # and its flock with it


def take(path: str, me: dict, wait: float) -> dict:
    """Take the lock for run me, waiting up to wait seconds; what it waited for (and how long), or LockError."""
    began = time.monotonic()
    waited_for, taken_over = None, None
    while True:
        other = read(path)
        if other is not None and other.get("run") == me["run"]:
            break  # this run holds it already (hosts that share /run, the lab's namespaces)
        if other is None:
            if _write(path, me, replace=False):
                break
            continue
        if other and gone(other):
            if _take_over(path, me, other):
                taken_over = other
                break
            continue
        waited_for = waited_for or other
        if time.monotonic() - began >= wait:
            holder = describe(other) if other else "an unreadable lock"
            raise HeldError("another benchmark run holds the host (%s) and did not end within %d s; nothing was "
                            "changed. If that run is over, remove %s." % (holder, wait, path), holder)
        time.sleep(POLL)
    return {"taken": True, "waited_seconds": round(time.monotonic() - began, 1),
            "waited_for": describe(waited_for) if waited_for else None,
            "taken_over": describe(taken_over) if taken_over else None}


def attempt(path: str, me: dict) -> dict:
    """Take the lock for run me if no live run holds it (take's answer), else {"taken": False, "holder": ...}. One
    step: a run that looked first and took later could find the lock taken in between, and wait without having
    said for whom."""
    try:
        return take(path, me, 0)
    except HeldError as exc:
        return {"taken": False, "holder": exc.holder}


def give(path: str, run: str) -> dict:
    other = read(path)
    if other is None or other.get("run") != run:
        return {"given": False}
    directory = _directory(os.path.dirname(path))
    try:
        os.unlink(os.path.basename(path), dir_fd=directory)
    finally:
        os.close(directory)
    return {"given": True}


def main(argv: list[str]) -> int:
    try:
        if argv[:1] == ["holder"]:
            out = holder()
        elif argv[:1] == ["try"] and len(argv) == 3:
            out = attempt(argv[1], json.loads(argv[2]))
        elif argv[:1] == ["take"] and len(argv) == 4:
            out = take(argv[1], json.loads(argv[2]), float(argv[3]))
        elif argv[:1] == ["give"] and len(argv) == 3:
            out = give(argv[1], argv[2])
        else:
            print(__doc__.split("\n\n", 1)[1].split("\n\n", 1)[0], file=sys.stderr)
            return 2
    except LockError as exc:
        print("benchmark: %s" % exc, file=sys.stderr)
        return 1
    json.dump(out, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
