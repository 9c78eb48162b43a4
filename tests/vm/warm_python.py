"""warm_python.py: inside the lab's emulated VM (scripts/test_vm.sh), the modules that make test-debian12's host
controller runs there through Ansible start from an interpreter that has ansible-core's module_utils imported
already, instead of a new one each.

Why: under the VM's software emulation a task's module run was ~5-7 s, and ~2.5-3.5 s of it was the new
interpreter importing ansible.module_utils.basic (dataclasses built at import, typing, inspect: `python3 -X
importtime` there), the same work in every run. The files of conftest's HOST_CONTROLLED (the roles' playbook
chains) are most of make test-debian12's time, and their time is module runs. Warm, a module runs in 0.2-0.6 s
there (by the runner's clock); test_xdp_metrics.py's four slowest tests in the VM took 271 s, 452 s without.

  warm_python.py serve SOCKET SITE: the server. Imports ansible-core's module_utils from SITE (the VM's copy
      of the venv's packages: the same ansible-core as the controller's), then answers each connection on SOCKET
      with a process forked from itself that runs the connection's module. Returns once it listens, leaving the
      server behind (its pid in SOCKET.pid).
  warm_python.py (no arguments, the AnsiballZ payload on stdin, as Ansible's pipelining runs `python`): the
      client, started in place of the interpreter by /usr/local/libexec/ebpf-xdp-tests/python (in the namespace
      the connection names). It hands the server its stdin, stdout, stderr, network namespace, working
      directory, umask and environment, and exits with the module's exit status. With no server it becomes the
      interpreter it stands for (exec), the payload still unread.

The forked process is the run a new interpreter would make: it enters the client's namespace, takes its file
descriptors, directory, umask and environment, restores the signal dispositions a new interpreter has, and runs
the payload as __main__ with the sys.path a new interpreter would have; its modules are imported from the
payload as before, but for ansible-core's, which are the server's (the same release: test_vm.sh installs the
controller's pinned ansible-core into SITE). What a module registered with atexit runs before it exits.
"""

import importlib
import json
import os
import socket
import sys

PYTHON = "/usr/bin/python3"
SOCKET = "/run/ebpf-xdp-warm-python.sock"  # scripts/test_vm.sh starts the server on it
CLONE_NEWNET = 0x40000000
STATUS_BYTES = 4
# What a runner imports (_run), then what the AnsiballZ wrapper and every module import first.
PREIMPORTED = ("atexit", "ctypes", "traceback", "types", "base64", "resource", "shutil", "tempfile", "zipfile",
               "ansible.module_utils.basic", "ansible.module_utils._internal._ansiballz._loader")


def client(path):
    """The interpreter's stand-in: the module's exit status as this process's."""
    try:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(path)
    except OSError:
        os.execv(PYTHON, [PYTHON])
    umask = os.umask(0)
    os.umask(umask)
    netns = os.open("/proc/self/ns/net", os.O_RDONLY)
    header = json.dumps({"cwd": os.getcwd(), "env": dict(os.environ), "umask": umask}).encode()
    socket.send_fds(sock, [len(header).to_bytes(4, "big") + header], [0, 1, 2, netns])
    status = b""
    while len(status) < STATUS_BYTES:
        chunk = sock.recv(STATUS_BYTES - len(status))
        if not chunk:
            sys.stderr.write("warm_python: the module's process ended without an exit status (killed?)\n")
            return 1
        status += chunk
    return int.from_bytes(status, "big")


def _receive(conn):
    """(header, [fds]) of a client's connection: the header's length (4 bytes), the header."""
    data, fds, _flags, _addr = socket.recv_fds(conn, 65536, 4)
    while len(data) < 4 or len(data) < 4 + int.from_bytes(data[:4], "big"):
        more = conn.recv(65536)
        if not more:
            raise EOFError("the client left before its request was whole")
        data += more
    return json.loads(data[4:]), fds


def _run(conn, new_path):
    """In the forked process: become the client's interpreter, run its payload, send back its exit status."""
    import atexit  # pylint: disable=import-outside-toplevel
    import ctypes  # pylint: disable=import-outside-toplevel
    import signal  # pylint: disable=import-outside-toplevel
    import traceback  # pylint: disable=import-outside-toplevel
    import types  # pylint: disable=import-outside-toplevel

    header, fds = _receive(conn)
    stdin, stdout, stderr, netns = fds
    if ctypes.CDLL(None, use_errno=True).setns(netns, CLONE_NEWNET) != 0:
        raise OSError(ctypes.get_errno(), "setns into the client's network namespace")
    for fd, target in ((stdin, 0), (stdout, 1), (stderr, 2)):
        os.dup2(fd, target)
    for fd in fds:
        os.close(fd)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the server's SIG_IGN would reap the module's children
    os.chdir(header["cwd"])
    os.umask(header["umask"])
    os.environ.clear()
    os.environ.update(header["env"])
    sys.argv = [""]
    sys.path[:] = new_path
    main = types.ModuleType("__main__")
    sys.modules["__main__"] = main
    status = 1
    try:
        with open(0, "rb", closefd=False) as src:
            source = src.read()
        exec(compile(source, "<stdin>", "exec"), main.__dict__)  # pylint: disable=exec-used
        status = 0
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            status = exc.code or 0
        else:
            sys.stderr.write("%s\n" % exc.code)
    except BaseException:  # pylint: disable=broad-exception-caught  # what a new interpreter would print
        traceback.print_exc()
    try:
        atexit._run_exitfuncs()  # pylint: disable=protected-access
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        conn.sendall(status.to_bytes(STATUS_BYTES, "big"))
        os._exit(status)


def serve(path, site):
    """Listen on path; fork a runner for each connection. Returns (in the parent) once listening."""
    import signal  # pylint: disable=import-outside-toplevel

    # A new interpreter's path (`python3` reading its script from stdin, PYTHONPATH as the wrapper sets it).
    new_path = [""] + [entry for entry in sys.path[1:] if entry != site]
    sys.path.insert(0, site)
    for name in PREIMPORTED:
        importlib.import_module(name)
    sys.path.remove(site)

    try:  # a server an earlier run left (its socket is replaced: it would serve no one)
        with open(path + ".pid", encoding="ascii") as src:
            os.kill(int(src.read()), signal.SIGTERM)
    except (OSError, ValueError):
        pass
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    os.chmod(path, 0o600)
    server.listen(64)
    pid = os.fork()
    if pid:
        with open(path + ".pid", "w", encoding="ascii") as out:
            out.write("%d\n" % pid)
        return
    os.setsid()
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # runners are reaped by the kernel
    while True:
        conn, _addr = server.accept()
        if os.fork() == 0:
            server.close()
            try:
                _run(conn, new_path)
            finally:
                os._exit(1)
        conn.close()


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "serve":
        serve(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 1:
        sys.exit(client(SOCKET))
    else:
        sys.exit("usage: warm_python.py serve SOCKET SITE | warm_python.py (the payload on stdin)")
