"""Cache keys, dependency files and argv: the pure parts of _compile."""

import os

import pytest

from ansible_collections.ebpf.xdp.plugins.module_utils.bpf import compile as _compile


def test_parse_depfile_with_continuations_and_spaces():
    text = "out.o: /src/a.bpf.c /usr/include/linux/bpf.h \\\n  /src/include/my\\ header.h \\\n  /x.h\n"
    assert _compile.parse_depfile(text) == ["/src/a.bpf.c", "/usr/include/linux/bpf.h",
                                            "/src/include/my header.h", "/x.h"]


def test_cache_key_depends_on_source_flags_and_compiler(tmp_path):
    src = tmp_path / "a.bpf.c"
    src.write_text("int x;\n")
    clang = tmp_path / "clang"
    clang.write_text("#!/bin/sh\n")
    base = _compile.cache_key(str(src), str(clang), [], {}, [])
    assert base == _compile.cache_key(str(src), str(clang), [], {}, [])
    assert base != _compile.cache_key(str(src), str(clang), [], {"A": "1"}, [])
    assert base != _compile.cache_key(str(src), str(clang), [], {}, ["-mcpu=v3"])
    assert base != _compile.cache_key(str(src), str(clang), [str(tmp_path)], {}, [])
    src.write_text("int y;\n")
    changed_source = _compile.cache_key(str(src), str(clang), [], {}, [])
    assert changed_source != base
    clang.write_text("#!/bin/sh\n# another build\n")
    assert _compile.cache_key(str(src), str(clang), [], {}, []) != changed_source


def test_compile_argv_orders_defines_and_includes():
    argv = _compile.compile_argv("clang", "a.c", "a.o", ["/inc"], {"B": "2", "A": ""}, ["-Wall"])
    assert argv[:5] == ["clang", "-target", "bpf", "-O2", "-g"]
    assert argv[5:7] == ["-DA", "-DB=2"]
    assert argv[7:9] == ["-I", "/inc"]
    assert argv[-5:] == ["-Wall", "-c", "a.c", "-o", "a.o"]


def fake_clang(deps, during=None):
    """A stand-in for clang: writes the object and a depfile listing deps; calls during() first."""
    def run(argv):
        if during:
            during()
        out = argv[argv.index("-o") + 1]
        with open(out, "w") as handle:
            handle.write("object")
        with open(argv[argv.index("-MF") + 1], "w") as handle:
            handle.write("%s: %s\n" % (out, " ".join(str(d) for d in deps)))
        return 0, "", ""
    return run


def argv_for(src):
    return lambda out: ["clang", "-c", str(src), "-o", out]


def test_cache_lookup_detects_a_changed_dependency(tmp_path):
    cache = _compile.ObjectCache(str(tmp_path / "cache"))
    header = tmp_path / "h.h"
    header.write_text("#define X 1\n")
    src = tmp_path / "x.c"
    src.write_text("int x;\n")
    entry = cache.build("ab" * 32, fake_clang([header]), argv_for(src), str(src))
    assert os.path.exists(entry["path"])
    assert cache.lookup("ab" * 32)["sha256"] == entry["sha256"]
    header.write_text("#define X 2\n")
    assert cache.lookup("ab" * 32) is None
    assert cache.lookup("cd" * 32) is None


def test_a_new_header_in_a_search_directory_is_a_miss(tmp_path):
    """clang lists only headers it found: one added earlier in the search path would shadow it."""
    cache = _compile.ObjectCache(str(tmp_path / "cache"))
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    (second / "common.h").write_text("#define X 1\n")
    src = tmp_path / "x.c"
    src.write_text("int x;\n")
    dirs = [str(first), str(second)]
    cache.build("ef" * 32, fake_clang([src, second / "common.h"]), argv_for(src), str(src), dirs)
    assert cache.lookup("ef" * 32, dirs) is not None
    (first / "common.h").write_text("#define X 2\n")
    assert cache.lookup("ef" * 32, dirs) is None


def test_an_input_edited_during_the_compile_is_not_cached(tmp_path):
    cache = _compile.ObjectCache(str(tmp_path / "cache"))
    src = tmp_path / "x.c"
    src.write_text("int x;\n")
    editing_clang = fake_clang([src], during=lambda: src.write_text("int y;\n"))
    try:
        cache.build("01" * 32, editing_clang, argv_for(src), str(src))
    except _compile.CompileError as exc:
        assert "changed while compiling" in str(exc)
    else:
        raise AssertionError("an edited source was cached")
    assert cache.lookup("01" * 32) is None


def test_sources_write_what_differs_and_put_back_what_they_replaced(tmp_path):
    directory = tmp_path / "src"
    (directory / "include").mkdir(parents=True)
    (directory / "include" / "common.h").write_text("old\n")
    (directory / "kept.c").write_text("same\n")
    (directory / "theirs.c").write_text("not named\n")
    sources = _compile.Sources(str(directory), {"kept.c": "same\n", "include/common.h": "new\n", "new/prog.c": "int x;\n"})
    assert sources.differing() == ["include/common.h", "new/prog.c"]
    sources.write(sources.differing())
    assert (directory / "include" / "common.h").read_text() == "new\n"
    assert (directory / "new" / "prog.c").read_text() == "int x;\n"
    assert oct((directory / "new" / "prog.c").stat().st_mode & 0o777) == "0o644"
    assert sources.differing() == []
    sources.put_back()
    assert (directory / "include" / "common.h").read_text() == "old\n"
    assert not (directory / "new" / "prog.c").exists()
    assert (directory / "theirs.c").read_text() == "not named\n"
    assert sorted(os.listdir(directory)) == ["include", "kept.c", "new", "theirs.c"]  # no temporary file left


def test_sources_stay_below_their_directory(tmp_path):
    for name in ("../escape.c", "/etc/passwd", "a//b.c", ""):
        with pytest.raises(_compile.CompileError, match="is not a relative path below"):
            _compile.Sources(str(tmp_path), {name: "x"})


def test_cache_entries_are_the_users_alone_whatever_the_umask(tmp_path):
    """Issue 37 item 2: caches 0600 by default (an object in the cache is code the kernel will run), in a 0700
    directory: another user can neither read nor replace what a later compile loads."""
    cache = _compile.ObjectCache(str(tmp_path / "cache"))
    src = tmp_path / "x.c"
    src.write_text("int x;\n")
    old = os.umask(0)
    try:
        entry = cache.build("ef" * 32, fake_clang([]), argv_for(src), str(src))
    finally:
        os.umask(old)
    obj, manifest = cache.paths("ef" * 32)
    assert entry["path"] == obj
    assert [oct(os.stat(path).st_mode & 0o777) for path in (obj, manifest)] == ["0o600", "0o600"]
    assert oct(os.stat(os.path.dirname(obj)).st_mode & 0o777) == "0o700"
