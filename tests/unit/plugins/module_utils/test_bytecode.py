"""_bytecode: module_utils imported from a zip load from bytecode kept in a trusted directory."""

import builtins
import json
import os
import sys
import traceback
import zipfile

import pytest

from ansible.module_utils import basic

from ansible_collections.ebpf.xdp.plugins.module_utils import _bytecode


def module_arguments(monkeypatch, check_mode):
    """What Ansible's wrapper hands ansible.module_utils.basic before a module runs (its arguments)."""
    monkeypatch.setattr(basic, "_ANSIBLE_ARGS", json.dumps(
        {"ANSIBLE_MODULE_ARGS": {"_ansible_check_mode": check_mode}}).encode())


@pytest.fixture
def zipped(tmp_path, monkeypatch):
    """A package cachedpkg in a zip on sys.path, and a finder for it with its cache in tmp_path/cache; the
    module run it is part of is not in check mode."""
    module_arguments(monkeypatch, check_mode=False)
    archive = tmp_path / "modlib.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("cachedpkg/__init__.py", "")
        zf.writestr("cachedpkg/mod.py", "VALUE = 41 + 1\n\ndef fail():\n    raise ValueError('from mod')\n")
    cache = tmp_path / "cache"
    sys.path.insert(0, str(archive))
    _bytecode.install("cachedpkg", str(cache))  # the package itself too
    try:
        yield cache
    finally:
        sys.path.remove(str(archive))
        sys.meta_path[:] = [f for f in sys.meta_path if getattr(f, "package", None) != "cachedpkg"]
        for name in [n for n in sys.modules if n.startswith("cachedpkg")]:
            del sys.modules[name]
        sys.path_importer_cache.pop(str(archive), None)


def fresh_import():
    for name in [n for n in sys.modules if n.startswith("cachedpkg")]:
        del sys.modules[name]
    from cachedpkg import mod  # pylint: disable=import-outside-toplevel,import-error
    return mod


def counting_compile(monkeypatch):
    """The file names compile() is given from now on."""
    compiled = []
    real_compile = builtins.compile

    def counting(*args, **kwargs):
        compiled.append(args[1])
        return real_compile(*args, **kwargs)

    monkeypatch.setattr(builtins, "compile", counting)
    return compiled


def test_a_zipped_module_is_compiled_once_then_loaded_from_the_cache(zipped, monkeypatch):
    mod = fresh_import()
    assert mod.VALUE == 42
    entries = sorted(os.listdir(zipped))
    tag = sys.implementation.cache_tag
    assert [e.rpartition(".")[0] for e in entries] == ["cachedpkg." + tag, "cachedpkg.mod." + tag], entries
    assert oct(os.stat(zipped).st_mode & 0o777) == "0o700"
    assert all(oct(os.stat(zipped / e).st_mode & 0o777) == "0o600" for e in entries)
    # The second import compiles nothing: every module comes from the cache.
    compiled = counting_compile(monkeypatch)
    mod = fresh_import()
    assert mod.VALUE == 42 and compiled == [], compiled
    monkeypatch.undo()
    # A traceback names the file inside the package and shows its line (the loader gives the source).
    with pytest.raises(ValueError) as raised:
        mod.fail()
    shown = "".join(traceback.format_exception(raised.value))
    assert 'File "cachedpkg/mod.py", line 4, in fail\n    raise ValueError' in shown, shown


def test_an_untrusted_or_broken_cache_is_not_used(zipped, monkeypatch):
    fresh_import()
    [entry] = [e for e in os.listdir(zipped) if e.startswith("cachedpkg.mod.")]
    compiled = counting_compile(monkeypatch)
    os.chmod(zipped / entry, 0o622)  # others may write it: never loaded
    assert fresh_import().VALUE == 42 and "cachedpkg/mod.py" in compiled
    compiled.clear()
    (zipped / entry).write_bytes(b"not marshal data")
    os.chmod(zipped / entry, 0o600)
    assert fresh_import().VALUE == 42 and "cachedpkg/mod.py" in compiled, "a broken entry is compiled again"
    compiled.clear()
    os.chmod(zipped, 0o777)  # a directory others may write: neither read nor written
    assert fresh_import().VALUE == 42 and "cachedpkg/mod.py" in compiled


def test_outside_a_zip_the_finder_changes_nothing(tmp_path):
    (tmp_path / "plainpkg").mkdir()
    (tmp_path / "plainpkg" / "__init__.py").write_text("")
    finder = _bytecode.CachingFinder("plainpkg", str(tmp_path / "cache"))
    spec = finder.find_spec("plainpkg", [str(tmp_path)])
    assert spec is None or not isinstance(spec.loader, _bytecode.CachedZipLoader)
    assert finder.find_spec("other", None) is None
    assert not (tmp_path / "cache").exists()


def test_a_check_mode_run_reads_the_cache_and_writes_nothing(zipped, monkeypatch):
    """Check mode changes nothing on the host, files included: no cache directory, no entry; a later run
    that is not in check mode writes them, and a check-mode run then uses them."""
    module_arguments(monkeypatch, check_mode=True)
    assert fresh_import().VALUE == 42
    assert not zipped.exists()
    monkeypatch.setattr(basic, "_ANSIBLE_ARGS", None)  # arguments not known: as check mode
    assert fresh_import().VALUE == 42 and not zipped.exists()
    module_arguments(monkeypatch, check_mode=False)
    fresh_import()
    entries = sorted(os.listdir(zipped))
    assert len(entries) == 2, entries
    module_arguments(monkeypatch, check_mode=True)
    compiled = counting_compile(monkeypatch)
    assert fresh_import().VALUE == 42 and compiled == [] and sorted(os.listdir(zipped)) == entries
