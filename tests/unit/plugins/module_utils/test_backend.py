"""bpf/backend: the backend a task names, behind one protocol (what the program comes from, how it is read and
loaded, its identity), so that the converger never asks which one it has."""

import hashlib

import pytest

from ansible_collections.ebpf.xdp.plugins.module_utils.bpf import backend as _backend, bcc as _bcc, loader as _loader
from ansible_collections.ebpf.xdp.plugins.module_utils.hooks.converge import Desired


def desired(**params):
    return Desired.from_params(dict(dict(state="present"), **params))


def test_select_backend_names_each_backend_and_libbpf_by_default():
    assert _backend.select_backend(None) is _backend.select_backend("libbpf") is _backend.Libbpf
    assert _backend.select_backend("bcc") is _backend.Bcc
    assert sorted(_backend.BACKENDS) == ["bcc", "libbpf"]
    with pytest.raises(KeyError):
        _backend.select_backend("llvm")


@pytest.mark.parametrize("name", sorted(_backend.BACKENDS))
def test_every_backend_has_the_whole_protocol(name):
    backend = _backend.select_backend(name)
    assert backend.name == name
    for part in ("path", "require", "read", "loader", "identity"):
        assert callable(getattr(backend, part)), part
    assert isinstance(backend.reviews_maps, bool)


def test_libbpf_loads_the_object_or_a_revision_s_copy(tmp_path):
    obj = tmp_path / "a.o"
    obj.write_bytes(b"\x7fELF...")
    task = desired(object=str(obj), program="p", constants={"k": 1}, shared_maps="m")
    assert task.loads_with is _backend.Libbpf and task.path == str(obj)
    assert desired(object=str(obj), object_source="/store/x.o").path == "/store/x.o"
    assert task.loader() is _loader.load
    assert _backend.Libbpf.read(str(obj)) == (b"\x7fELF...", hashlib.sha256(b"\x7fELF...").hexdigest())
    assert task.identity("d", {"k": 1}) == {
        "object": str(obj), "object_sha256": "d", "program": "p", "section": None, "constants": {"k": 1},
        "resolved_constants": {"k": 1}, "shared_maps": "m"}
    with pytest.raises(_loader.LoadError, match="compile it with ebpf.xdp.bpf_object"):
        _backend.Libbpf.require(str(tmp_path / "missing.o"))


def test_bcc_compiles_the_source_and_reads_only_its_digest(tmp_path):
    src = tmp_path / "a.c"
    src.write_text("int f(void *ctx) { return 2; }\n")
    task = desired(backend="bcc", source=str(src), cflags=["-DX=1"])
    assert task.loads_with is _backend.Bcc and task.path == str(src) and not task.loads_with.reviews_maps
    assert _backend.Bcc.read(str(src)) == (None, hashlib.sha256(src.read_bytes()).hexdigest())
    assert isinstance(task.loader(), _bcc.Loader) and task.loader().cflags == ["-DX=1"]
    identity = task.identity("d", {})
    assert identity["backend"] == "bcc" and identity["source_sha256"] == "d" and identity["object_sha256"] is None
    assert identity["kernel_release"] == _bcc.kernel_release()
