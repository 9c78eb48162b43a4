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

from ansible_collections.ebpf.xdp.plugins.module_utils._errors import EbpfXdpError

DEFAULT_CACHE_DIR = "/var/cache/ebpf_xdp/objects"
BASE_FLAGS = ["-target", "bpf", "-O2", "-g"]
CACHE_FORMAT = 1


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
        base = os.path.join(self.directory, key[:2], key)
        return base + ".o", base + ".json"

    def lookup(self, key: str, search_dirs=()) -> dict | None:
        """The manifest of a valid entry, or None on a miss."""
        obj, manifest_path = self.paths(key)
        try:
            with open(manifest_path) as handle:
                manifest = json.load(handle)
        except (OSError, ValueError):
            return None
        try:
            for path, digest in manifest["deps"].items():
                if sha256_file(path) != digest:
                    return None
            # A header added to an earlier include directory would shadow a recorded one.
            if manifest["listings"] != listings(search_dirs):
                return None
            if sha256_file(obj) != manifest["sha256"]:
                return None
        except (OSError, KeyError):
            return None
        manifest["path"] = obj
        return manifest

    def build(self, key: str, run_command, argv_for, src: str, search_dirs=()) -> dict:
        """Compile into the cache; run_command(argv) -> (rc, out, err).

        An input edited while clang runs makes the build fail rather than
        cache an object that matches neither version.
        """
        obj, manifest_path = self.paths(key)
        directory = os.path.dirname(obj)
        made = not os.path.isdir(directory)
        os.makedirs(directory, 0o755, exist_ok=True)  # concurrent compiles share the cache
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
            manifest = {
                "argv": argv_for(obj),
                "listings": listings(search_dirs),
                "deps": {os.path.abspath(d): sha256_file(d) for d in deps},
                "sha256": sha256_file(tmp_obj),
                "warnings": (err or "").strip(),
            }
            os.rename(tmp_obj, obj)
            with open(manifest_path + ".tmp", "w") as handle:
                json.dump(manifest, handle, indent=1, sort_keys=True)
            os.rename(manifest_path + ".tmp", manifest_path)
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
        return manifest


def install(src: str, dest: str) -> None:
    """Copy src to dest atomically (write a temporary file, then rename)."""
    directory = os.path.dirname(os.path.abspath(dest))
    fd, tmp = tempfile.mkstemp(prefix=".ebpf_xdp-", dir=directory)
    try:
        with os.fdopen(fd, "wb") as out, open(src, "rb") as inp:
            shutil.copyfileobj(inp, out)
        os.chmod(tmp, 0o644)
        os.rename(tmp, dest)
    except Exception:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
