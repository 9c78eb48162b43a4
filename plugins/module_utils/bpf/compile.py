# -*- coding: utf-8 -*-
# Copyright (c) ebpf.xdp contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""clang invocation and a content-addressed object cache.

Private to the ebpf.xdp collection: the interface may change without notice.

The cache key covers the source text, the flags and the clang binary; the
manifest stored with each entry lists every file the compiler read (from
clang's own dependency output) with its hash, so a changed header is a miss
even though it is not part of the key.  A hit runs no compiler at all.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sysconfig
import tempfile
import time

from ansible_collections.ebpf.xdp.plugins.module_utils.bpf import libbpf as _bpf
from ansible_collections.ebpf.xdp.plugins.module_utils.host import files as _files, names as _names
from ansible_collections.ebpf.xdp.plugins.module_utils._errors import EbpfXdpError

DEFAULT_CACHE_DIR = "/var/cache/ebpf_xdp/objects"
BASE_FLAGS = ["-target", "bpf", "-O2", "-g"]
CACHE_FORMAT = 1
# The cache is root's (the modules' user's) alone: an entry is code the kernel will run, so no one else may
# write it, and nothing in it is needed by another user (bpf_object hands out dest, or the path to read as root).
CACHE_MODE = 0o600
CACHE_DIR_MODE = 0o700
# What a task installs where it says (bpf_object's dest, datapath's sources): 0644 in 0755 directories, as
# ansible.builtin.copy leaves them, so that a non-root user can read and rebuild from them (sources, bpftool).
SHIPPED_MODE = 0o644
SHIPPED_DIR_MODE = 0o755


class CompileError(EbpfXdpError):
    def __init__(self, message, output=""):
        super().__init__(message)
        self.output = output


def sha256_file(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 16), b""):
            digest.update(chunk)
    return digest.hexdigest()


def multiarch_include() -> list[str]:
    """Debian keeps asm/ under /usr/include/<triplet>; -target bpf does not look there."""
    triplet = sysconfig.get_config_var("MULTIARCH")
    path = os.path.join("/usr/include", triplet) if triplet else None
    return [path] if path and os.path.isdir(path) else []


def compile_argv(clang: str, src: str, out: str, include_dirs=(), defines: dict | None = None, cflags=()) -> list[str]:
    argv = [clang] + BASE_FLAGS
    for name, value in sorted((defines or {}).items()):
        argv.append("-D%s" % name if value is None or value == "" else "-D%s=%s" % (name, value))
    for directory in list(include_dirs) + multiarch_include():
        argv += ["-I", directory]
    argv += list(cflags)
    argv += ["-c", src, "-o", out]
    return argv


def clang_identity(clang_path: str) -> str:
    """Identify the compiler without running it: its resolved path, size and mtime."""
    real = os.path.realpath(clang_path)
    st = os.stat(real)
    return "%s:%d:%d" % (real, st.st_size, int(st.st_mtime))


def cache_key(src: str, clang_path: str, include_dirs, defines: dict, cflags) -> str:
    material = {
        "format": CACHE_FORMAT,
        "source": sha256_file(src),
        "source_name": os.path.basename(src),
        "clang": clang_identity(clang_path),
        "include_dirs": [os.path.abspath(d) for d in include_dirs],
        "defines": sorted((defines or {}).items()),
        "cflags": list(cflags),
    }
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()


def parse_depfile(text: str) -> list[str]:
    """Files listed in a make-style dependency file written by clang -MD."""
    body = text.replace("\\\n", " ")
    deps = body.partition(": ")[2]
    files = []
    for token in deps.replace("\\ ", "\0").split():
        files.append(token.replace("\0", " "))
    return files


def listings(directories):
    """Names in each search directory, to notice a new header that would shadow another."""
    out = {}
    for directory in directories:
        try:
            out[directory] = sorted(os.listdir(directory))
        except OSError:
            out[directory] = None
    return out


class ObjectCache:
    def __init__(self, directory):
        self.directory = directory

    def paths(self, key):
        base = _names.join_under(self.directory, key[:2], key)
        return base + ".o", base + ".json"

    def check(self) -> None:
        """Refuse (CompileError) a cache directory that is not the module user's alone: an entry is code the
        kernel will run, and whoever can write one chooses it. The rule is _bytecode's (host/files)."""
        try:
            _files.trusted_directory(self.directory, "cache_dir")
        except _files.UnsafePathError as exc:
            raise CompileError("%s; nothing was compiled or installed" % exc) from None

    def lookup(self, key: str, search_dirs=()) -> dict | None:
        """The manifest of a valid entry (with `data`, the object's bytes, checked against its digest), or None
        on a miss. Only files of the module's user that no one else can write, reached without a link, count."""
        self.check()
        obj, manifest_path = self.paths(key)
        text = _files.read_trusted(manifest_path)
        data = _files.read_trusted(obj)
        if text is None or data is None:
            return None
        try:
            manifest = json.loads(text)
            for path, digest in manifest["deps"].items():
                if sha256_file(path) != digest:
                    return None
            # A header added to an earlier include directory would shadow a recorded one.
            if manifest["listings"] != listings(search_dirs):
                return None
            if hashlib.sha256(data).hexdigest() != manifest["sha256"]:
                return None
        except (OSError, KeyError, ValueError, TypeError, AttributeError):
            return None
        manifest["path"] = obj
        manifest["data"] = data
        return manifest

    def build(self, key: str, run_command, argv_for, src: str, search_dirs=()) -> dict:
        """Compile into the cache; run_command(argv) -> (rc, out, err).

        An input edited while clang runs makes the build fail rather than
        cache an object that matches neither version.
        """
        obj, manifest_path = self.paths(key)
        directory = os.path.dirname(obj)
        made = not os.path.isdir(directory)
        # Checked before clang writes there (the user's alone, no link): concurrent compiles share the cache.
        os.close(_files.open_directory(directory, CACHE_DIR_MODE))
        tmp = tempfile.mkdtemp(prefix=".build-", dir=directory)
        try:
            tmp_obj = os.path.join(tmp, "out.o")
            depfile = os.path.join(tmp, "out.d")
            argv = argv_for(tmp_obj) + ["-MD", "-MF", depfile]
            src_sha = sha256_file(src)
            started = time.time()
            rc, out, err = run_command(argv)
            if rc != 0:
                raise CompileError("clang failed to compile (exit %d)" % rc, err or out)
            with open(depfile) as handle:
                deps = parse_depfile(handle.read())
            finished = time.time()
            if sha256_file(src) != src_sha or any(started <= os.stat(d).st_mtime <= finished for d in deps):
                raise CompileError("%s or a header it includes changed while compiling; run the task again" % src)
            with open(tmp_obj, "rb") as handle:
                data = handle.read()
            manifest = {
                "argv": argv_for(obj),
                "listings": listings(search_dirs),
                "deps": {os.path.abspath(d): sha256_file(d) for d in deps},
                "sha256": hashlib.sha256(data).hexdigest(),
                "warnings": (err or "").strip(),
            }
            _files.write_atomically(obj, data, CACHE_MODE, CACHE_DIR_MODE)
            _files.write_atomically(manifest_path, json.dumps(manifest, indent=1, sort_keys=True).encode(),
                                    CACHE_MODE, CACHE_DIR_MODE)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            if made:
                try:
                    os.rmdir(directory)  # a failed compile leaves the cache as it was (unless another one uses it)
                except OSError:
                    pass
            raise
        shutil.rmtree(tmp, ignore_errors=True)
        manifest["path"] = obj
        manifest["data"] = data
        return manifest


class Sources:
    """A tree of source files shipped inside a task (relative path -> text) and written under a directory on the
    host: only the files whose content differs, each atomically; files it does not name are left alone.
    What it replaced is kept, so that a failed run can put the tree back (put_back)."""

    def __init__(self, directory: str, files: dict[str, str]):
        for name in files:
            parts = name.split("/")
            if os.path.isabs(name) or not name or ".." in parts or "" in parts:
                raise CompileError("sources: %r is not a relative path below %s" % (name, directory))
        self.directory = directory
        self.files = files
        self.replaced: dict[str, bytes | None] = {}  # path -> the bytes it had (None: it did not exist)

    def _read(self, path: str) -> bytes | None:
        try:
            with open(path, "rb") as src:
                return src.read()
        except FileNotFoundError:
            return None

    def differing(self) -> list[str]:
        """The names whose file on the host is missing or holds something else."""
        return sorted(name for name, text in self.files.items()
                      if self._read(os.path.join(self.directory, name)) != text.encode())

    def write(self, names: list[str]) -> None:
        for name in names:
            path = _names.join_under(self.directory, *name.split("/"))  # a link in the tree leads nowhere else
            self.replaced.setdefault(path, self._read(path))
            _files.write_atomically(path, self.files[name].encode(), SHIPPED_MODE, SHIPPED_DIR_MODE)

    def put_back(self) -> None:
        for path, old in self.replaced.items():
            if old is None:
                os.unlink(path)
            else:
                _files.write_atomically(path, old, SHIPPED_MODE, SHIPPED_DIR_MODE)
        self.replaced = {}

    def close(self) -> None:
        self.replaced = {}


def install(src: str, dest: str, data: bytes | None = None) -> None:
    """Copy src (data: its bytes as checked) to dest atomically, creating dest's directory if needed."""
    if data is None:
        with open(src, "rb") as inp:
            data = inp.read()
    _files.write_atomically(os.path.abspath(dest), data, SHIPPED_MODE, SHIPPED_DIR_MODE)


# Documented in plugins/modules/bpf_object.py; ebpf.xdp.datapath's objects take the same options.
OBJECT_ARGS = dict(
    src=dict(type="path", required=True),
    dest=dict(type="path"),
    include_dirs=dict(type="list", elements="path", default=[]),
    defines=dict(type="dict", default={}),
    cflags=dict(type="list", elements="str", default=[]),
    clang=dict(type="str", default="clang"),
    cache_dir=dict(type="path", default=DEFAULT_CACHE_DIR),
)


def compile_aside(run_command, argv_for) -> str:
    """The SHA-256 of what argv_for(out) compiles, in a temporary directory removed after (check mode)."""
    with tempfile.TemporaryDirectory(prefix="ebpf_xdp_check-") as tmp:
        out = os.path.join(tmp, "out.o")
        rc, stdout, err = run_command(argv_for(out))
        if rc != 0:
            raise CompileError("clang failed to compile (exit %d)" % rc, err or stdout)
        return sha256_file(out)


def converge_object(params: dict, check_mode: bool, run_command, find_clang,
                    sources_pending: bool = False) -> tuple[dict, list[str]]:
    """bpf_object's work: compile params["src"] through the content cache and install it at dest when its bytes
    differ. run_command(argv) -> (rc, out, err); find_clang(name) -> path or None. sources_pending: check mode
    of a run that would first write sources which differ on the host (datapath's), so that what is there now
    says nothing of what would be compiled. Returns the result (with `diff`) and the warnings; raises
    CompileError, a _bpf.BpfError or OSError."""
    p = params
    if not os.path.isfile(p["src"]):
        if check_mode:
            # An earlier task of the same run (a copy, say) would have created it.
            return (dict(changed=True, path=p["dest"], cache_hit=False),
                    ["source %s does not exist yet; it would be compiled once it does" % p["src"]])
        raise CompileError("source %s does not exist" % p["src"])
    clang = p["clang"] if os.path.isabs(p["clang"]) else find_clang(p["clang"])
    if not clang or not os.path.exists(clang):
        raise CompileError("%s not found; install clang (the ebpf.xdp.toolchain role does)" % p["clang"])

    src_dir = os.path.dirname(os.path.abspath(p["src"]))
    include_dirs = [src_dir] + [d for d in [os.path.join(src_dir, "include")] if os.path.isdir(d)] + p["include_dirs"]
    defines = {k: "" if v is None else str(v) for k, v in p["defines"].items()}

    def argv_for(out):
        return compile_argv(clang, p["src"], out, include_dirs, defines, p["cflags"])

    cache = ObjectCache(p["cache_dir"])
    key = cache_key(p["src"], clang, include_dirs, defines, p["cflags"])
    entry = cache.lookup(key, include_dirs)
    dest = p["dest"]
    before_sha = sha256_file(dest) if dest and os.path.isfile(dest) else None
    cache_hit = entry is not None
    warnings = []
    if check_mode and sources_pending:
        return (dict(changed=True, cache_hit=cache_hit, path=dest or cache.paths(key)[0],
                     cmd=argv_for(dest or cache.paths(key)[0]),
                     diff=dict(before={"sha256": before_sha}, after={"sha256": "(compiled from the sources shipped)"})),
                warnings)
    if not cache_hit:
        if check_mode:
            # The run would compile; whether dest changes depends on the bytes (a cold cache often compiles what
            # dest holds already): compiled aside, in a directory removed after, so that check mode says what the
            # run will. Nothing is cached or installed.
            sha = compile_aside(run_command, argv_for)
            return (dict(changed=before_sha != sha if dest else True, cache_hit=False,
                         path=dest or cache.paths(key)[0], cmd=argv_for(dest or cache.paths(key)[0]), sha256=sha,
                         checksum="sha256:" + sha, diff=dict(before={"sha256": before_sha}, after={"sha256": sha})),
                    warnings)
        try:
            entry = cache.build(key, run_command, argv_for, p["src"], include_dirs)
        except (CompileError, OSError) as exc:
            exc.details = dict(cmd=argv_for(dest or cache.paths(key)[0]), src=p["src"])  # for the failure result
            raise
        if entry["warnings"]:
            warnings.append("clang: " + entry["warnings"])
    if dest:
        # What counts is dest: a recompile that yields the same bytes changes nothing.
        changed = before_sha != entry["sha256"]
        if changed and not check_mode:
            try:
                install(entry["path"], dest, entry["data"])  # the bytes checked against the manifest
            except OSError as exc:
                exc.details = dict(src=p["src"])  # for the failure result, as a failed compile has
                raise
    else:
        changed = not cache_hit
    with _bpf.BpfObject(entry["path"], entry["data"]) as obj:
        programs, maps = obj.programs(), obj.maps()
    return (dict(changed=changed, cache_hit=cache_hit, path=dest or entry["path"], sha256=entry["sha256"],
                 checksum="sha256:" + entry["sha256"], programs=programs, maps=maps, cmd=entry["argv"],
                 diff=dict(before={"sha256": before_sha}, after={"sha256": entry["sha256"]})), warnings)
