"""A warm start for the modules the integration tests run directly (conftest's ModuleRunner, --module-start=fork).

`python -m MODULE` pays for the interpreter and its imports on every run: well under a second here, but in the
lab's VM under software emulation a minute and more on a loaded host, three quarters of it Debian's pyroute2
0.7 importing every one of its entry points (python3 -X importtime). make test-debian12 runs some thousand
module runs there. This server imports what every module imports (ansible-core's module_utils, pyroute2)
once, and forks for each run: the child is a new process that runs the module as `python -m` would
(runpy as __main__, the arguments on its stdin, the environment the test gives it, its own stdout, stderr and
exit status), with nothing of an earlier run in it (the server never runs a module itself). What it does not
give a module is a fresh interpreter: a run without capabilities is started with `python -m` as before.

    python module_starter.py SOCKET    serve on the unix socket SOCKET until its parent goes away

One request per connection: a JSON line {"module": dotted name, "stdin": text, "cwd": dir, "env": the whole
environment}; the answer, when
the module's process has ended, is a JSON line {"returncode", "stdout", "stderr"} (a negative returncode for a
signal, as subprocess says it).
"""

import json
import os
import runpy
import signal
import socket
import sys
import tempfile
import traceback

# What every module of the collection imports, the slow part of its start.
import ansible.module_utils.basic  # noqa: F401 pylint: disable=unused-import
import pyroute2  # noqa: F401 pylint: disable=unused-import
from pyroute2 import IPRoute  # noqa: F401 pylint: disable=unused-import


def run_module(request, out_path, err_path):
    """In the forked child: become the module's process and run it; never returns."""
    code = 1
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        stdin_r, stdin_w = os.pipe()
        with os.fdopen(stdin_w, "w", encoding="utf-8") as feed:
            # The arguments are small (well under a pipe's buffer) and written before the module reads them.
            feed.write(request["stdin"])
        os.dup2(stdin_r, 0)
        os.close(stdin_r)
        for fd, path in ((1, out_path), (2, err_path)):
            target = os.open(path, os.O_WRONLY | os.O_TRUNC)
            os.dup2(target, fd)
            os.close(target)
        sys.stdin = open(0, "r", encoding="utf-8", closefd=False)  # pylint: disable=consider-using-with
        sys.stdout = open(1, "w", encoding="utf-8", closefd=False)  # pylint: disable=consider-using-with
        sys.stderr = open(2, "w", encoding="utf-8", closefd=False)  # pylint: disable=consider-using-with
        sys.argv = ["-m"]
        try:
            runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            if exc.code is not None and not isinstance(exc.code, int):
                sys.stderr.write("%s\n" % exc.code)
        except BaseException:  # pylint: disable=broad-except
            traceback.print_exc()
            code = 1
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # pylint: disable=broad-except
                pass
    finally:
        os._exit(code)  # pylint: disable=protected-access


def handle(conn):
    """In a forked handler: read the request, fork the module's process, wait for it, answer."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the server's SIG_IGN would reap the module's process
    with conn, conn.makefile("rwb") as stream:
        request = json.loads(stream.readline())
        fd_out, out_path = tempfile.mkstemp(prefix="module_starter.")
        fd_err, err_path = tempfile.mkstemp(prefix="module_starter.")
        os.close(fd_out)
        os.close(fd_err)
        try:
            pid = os.fork()
            if pid == 0:
                conn.close()
                run_module(request, out_path, err_path)
            _pid, status = os.waitpid(pid, 0)
            returncode = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
            with open(out_path, encoding="utf-8", errors="surrogateescape") as out, \
                    open(err_path, encoding="utf-8", errors="surrogateescape") as err:
                answer = {"returncode": returncode, "stdout": out.read(), "stderr": err.read()}
        finally:
            os.unlink(out_path)
            os.unlink(err_path)
        stream.write(json.dumps(answer).encode("utf-8", "surrogateescape") + b"\n")
        stream.flush()


def serve(path):
    parent = os.getppid()
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(16)
    # The handlers are reaped by the kernel: each answers its own client.
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    # Gone with the test process that started it, also when that one was killed: it looks every few seconds.
    server.settimeout(5)
    while True:
        try:
            conn, _addr = server.accept()
        except socket.timeout:
            if os.getppid() != parent:
                return
            continue
        conn.settimeout(None)
        if os.fork() == 0:
            server.close()
            code = 0
            try:
                handle(conn)
            except BaseException:  # pylint: disable=broad-except
                traceback.print_exc()
                code = 1
            finally:
                os._exit(code)  # pylint: disable=protected-access
        conn.close()


if __name__ == "__main__":
    serve(sys.argv[1])
