"""Imported at the start of every Python process of the tests inside the lab's emulated VM (scripts/test_vm.sh
puts this directory on PYTHONPATH): the byte code of what is imported from a zip, kept between processes.

A module run through Ansible imports ansible-core's module_utils and the collection's from its AnsiballZ zip,
where zipimport compiles each source again in every run and writes no byte code: under the VM's software
emulation that was 0.6-1.3 s of each task (a six-task playbook there, with and without this file). Here a
compiled module is kept under the hash of its source (and of the interpreter's byte-code format), so a module
run compiles only a source no earlier run compiled: the code is what compile() makes of those bytes, only made
once. The file name in the kept code is set again to the zip's path of this run, so tracebacks name the file
that ran. (It shadows Debian's own sitecustomize, which only installs apport's hook, and Debian has no apport.)

The checked directory and the atomic write are the collection's host/files.write_atomically in small: that
cannot be imported here, where this code runs in the middle of an import from the same zip that holds it.
"""

import _imp
import marshal
import os
import stat
import sys
import zipimport
from importlib._bootstrap_external import MAGIC_NUMBER

CACHE = "/var/tmp/ebpf-xdp-zip-bytecode"

_compile_source = zipimport._compile_source  # pylint: disable=protected-access


def _own_directory(path):
    """path made if missing; True when it is a directory (not a link) of this user's that no one else may write:
    what is read from it becomes code."""
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        status = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(status.st_mode) and status.st_uid == os.getuid() and not status.st_mode & 0o022


def _keep(path, code):
    """Written beside its final name and renamed over it: a process reading it sees the whole of it or none."""
    temporary = "%s.%d" % (path, os.getpid())
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(marshal.dumps(code))
    os.replace(temporary, path)


def _compile_kept(pathname, source):
    # Imported here, not at the start: every Python process of the tests starts with this file, most never import
    # from a zip, and hashlib's import alone costs ~0.1 s under emulation.
    import hashlib  # pylint: disable=import-outside-toplevel

    key = hashlib.sha256(MAGIC_NUMBER + bytes([sys.flags.optimize]) + source).hexdigest()
    path = os.path.join(CACHE, key)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        code = _compile_source(pathname, source)
        try:
            _keep(path, code)
        except OSError:
            pass  # not kept: compiled again next time, as without this file
        return code
    with os.fdopen(fd, "rb") as kept:
        code = marshal.loads(kept.read())
    _imp._fix_co_filename(code, pathname)  # pylint: disable=protected-access
    return code


if _own_directory(CACHE):
    zipimport._compile_source = _compile_kept  # pylint: disable=protected-access
