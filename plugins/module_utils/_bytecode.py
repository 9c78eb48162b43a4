# -*- coding: utf-8 -*-
# Copyright (c) ebpf.xdp contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The collection's module_utils, compiled once per host instead of on every module run.

Private to the ebpf.xdp collection: the interface may change without notice.

Ansible ships a module and the module_utils it imports as a zip that Python
imports from (zipimport), which never writes bytecode: every module run
compiles every file again, ~9,000 lines for ebpf.xdp.datapath, a third of
the module's start-up on a fleet's no-change run. Importing this module
(first thing _common does, so before the rest of the collection's
module_utils) makes those imports use bytecode kept in CACHE_DIR, compiled
from the very source the zip carries: a file is named by its module, the
interpreter's cache tag and the source's digest, so a changed source is
compiled afresh, and the entry it replaces goes.

Bytecode is code: it is loaded only from a directory and a file that belong
to the user running the module and that no one else may write (a root-owned
0700 directory when run as root). Anything else (no such directory and no
right to make one, another owner, a broken file) and the module compiles as
before; the cache never fails a module run. A check-mode run reads the cache and writes nothing (it changes
nothing on the host, files included). Outside a zip (unit tests,
ansible-test's import test, a module run from a checkout) nothing changes.
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.util
import json
import marshal
import os
import stat
import sys
import zipimport

# Imported through Ansible's zip as before the finder exists: host/files and _errors are compiled each run.
from ansible_collections.ebpf.xdp.plugins.module_utils.host import files as _files

CACHE_DIR = "/var/cache/ebpf_xdp/bytecode"
PACKAGE = "ansible_collections.ebpf.xdp."


class CachedZipLoader(importlib.abc.Loader):
    """A zipimporter's module executed from cached bytecode of its source."""

    def __init__(self, zip_loader: zipimport.zipimporter, cache_dir: str):
        self.zip_loader = zip_loader
        self.cache_dir = cache_dir

    def create_module(self, spec):
        return None  # the default module object

    def exec_module(self, module) -> None:
        exec(self.get_code(module.__spec__.name), module.__dict__)  # pylint: disable=exec-used

    def get_source(self, fullname: str) -> str | None:
        return self.zip_loader.get_source(fullname)  # tracebacks show the lines

    def is_package(self, fullname: str) -> bool:
        return self.zip_loader.is_package(fullname)

    def get_code(self, fullname: str):
        source = self.zip_loader.get_source(fullname)
        if source is None:
            return self.zip_loader.get_code(fullname)
        data = source.encode("utf-8")
        # A path that is the same in every run (the zip's own is a new temporary file each time).
        filename = fullname.replace(".", "/") + ("/__init__.py" if self.is_package(fullname) else ".py")
        prefix = "%s.%s." % (fullname, sys.implementation.cache_tag)
        path = os.path.join(self.cache_dir, prefix + hashlib.sha256(data).hexdigest()[:32])
        code = _read(path, self.cache_dir)
        if code is None:
            code = compile(data, filename, "exec", dont_inherit=True)
            _write(path, code, self.cache_dir, prefix)
        return code


class CachingFinder(importlib.abc.MetaPathFinder):
    """A module of `package` in a zip on the import path: its spec, loaded through CachedZipLoader.

    The spec is made here: zipimporter's own find_spec compiles the module to
    learn its file name (Python 3.11), which is the very cost this saves."""

    def __init__(self, package: str, cache_dir: str):
        self.package = package
        self.cache_dir = cache_dir

    def find_spec(self, fullname, path, target=None):
        if not fullname.startswith(self.package):
            return None
        name = fullname.rpartition(".")[2]
        for entry in sys.path if path is None else path:
            try:
                importer = zipimport.zipimporter(entry)
                package = importer.is_package(fullname)
            except (zipimport.ZipImportError, OSError, TypeError):
                continue  # not a zip, or not in this one: the path finder looks after it
            where = os.path.join(entry, name)
            spec = importlib.util.spec_from_loader(
                fullname, CachedZipLoader(importer, self.cache_dir),
                origin=os.path.join(where, "__init__.py") if package else where + ".py", is_package=package)
            spec.has_location = True  # __file__, as zipimport sets it
            if package:
                spec.submodule_search_locations = [where]
            return spec
        return None


def _trusted(st: os.stat_result) -> bool:
    return st.st_uid == os.geteuid() and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def _read(path: str, cache_dir: str):
    try:
        if not _trusted(os.lstat(cache_dir)) or not stat.S_ISDIR(os.lstat(cache_dir).st_mode):
            return None
        data = _files.read_trusted(path)  # the same rules: no link, the user's file, written by no one else
        return None if data is None else marshal.loads(data)
    except (OSError, EOFError, ValueError, TypeError):
        return None


def _check_mode() -> bool:
    """Whether this module run is in check mode, which leaves the host as it found it: the cache is then read,
    never written. Ansible's wrapper hands the arguments to ansible.module_utils.basic before the module runs;
    arguments that cannot be read count as check mode (nothing written)."""
    basic = sys.modules.get("ansible.module_utils.basic")
    arguments = getattr(basic, "_ANSIBLE_ARGS", None)
    if not arguments:
        return True
    try:
        return bool(json.loads(arguments)["ANSIBLE_MODULE_ARGS"].get("_ansible_check_mode", False))
    except (ValueError, TypeError, KeyError, AttributeError):
        return True


def _write(path: str, code, cache_dir: str, prefix: str) -> None:
    if _check_mode():
        return
    try:
        # Written as every file of the collection is (host/files): no link followed, a directory that is the
        # user's alone (made 0700), the file 0600; an untrusted directory is refused there, and skipped here.
        _files.write_atomically(path, marshal.dumps(code), 0o600, 0o700)
        for name in os.listdir(cache_dir):  # the entries of older sources of the same module
            if name.startswith(prefix) and os.path.join(cache_dir, name) != path and not name.endswith(".tmp"):
                os.unlink(os.path.join(cache_dir, name))
    except (OSError, _files.UnsafePathError):
        pass


def install(package: str = PACKAGE, cache_dir: str = CACHE_DIR) -> None:
    """Put the finder first on sys.meta_path (once): later imports of `package` from a zip use the cache."""
    if not any(isinstance(f, CachingFinder) and f.package == package for f in sys.meta_path):
        sys.meta_path.insert(0, CachingFinder(package, cache_dir))


# Only inside Ansible's zip: as a file (unit tests, the import sanity test) this module changes nothing.
if isinstance(globals().get("__loader__"), zipimport.zipimporter):
    install()
