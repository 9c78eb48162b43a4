"""bpf/pins' pure parts: the names of attachment directories, finding a hook's attachments in a directory tree,
and the directories made and pruned around a pin directory (plain directories: no bpffs needed)."""

import os

import pytest

from ansible_collections.ebpf.xdp.plugins.module_utils.bpf import pins as _pins
from ansible_collections.ebpf.xdp.plugins.module_utils.host import names as _names
# The hook adapters bring their attachment directories as they register (what hook_kind knows).
from ansible_collections.ebpf.xdp.plugins.module_utils.hooks import adapters as _adapters


@pytest.mark.parametrize("kind, direction, name, directory", [
    ("xdp", None, None, "xdp"),
    ("xdp", None, "filter", "xdp@filter"),
    ("tc", "ingress", None, "tc_ingress"),
    ("tc", "egress", "a-1", "tc_egress@a-1"),
])
def test_an_attachment_directory_names_its_hook_and_attachment(kind, direction, name, directory):
    assert _pins.hook_dir(kind, direction, name) == directory
    assert _pins.split_hook_dir(directory) == (_pins.hook_dir(kind, direction), name)
    assert _pins.hook_kind(directory) == kind


@pytest.mark.parametrize("directory", ["maps", "shared_maps", "clsact", "owner", "tc", "xdp@Bad", "xdp@a.b",
                                       "tc_ingress@", "xdpx"])
def test_any_other_directory_is_no_hook(directory):
    assert _pins.hook_kind(directory) is None


def test_every_hook_directory_is_one_kind_s():
    assert _pins.attachment_dirs() == ("xdp", "tc_ingress", "tc_egress")
    assert list(_pins.HOOK_DIRS) == [adapter.kind for adapter in _adapters.HOOKS]
    assert {_pins.hook_kind(d) for d in _pins.attachment_dirs()} == set(_pins.HOOK_DIRS)


def test_a_hook_s_attachments_are_found_by_name_and_nothing_else(tmp_path):
    interface = tmp_path / "ns" / "eth0"
    for entry in ("tc_ingress", "tc_ingress@a", "tc_ingress@b", "tc_egress@a", "xdp", "tc_ingress@Bad", "clsact"):
        (interface / entry).mkdir(parents=True)
    (interface / "tc_ingress@file").write_text("")  # not a directory
    found = _pins.hook_attachments(str(tmp_path), str(interface), "tc_ingress")
    assert sorted(found, key=str) == [None, "a", "b"]
    assert found["a"].directory == str(interface / "tc_ingress@a") and found["a"].pin_root == str(tmp_path)
    assert found[None].record.path == str(interface / "tc_ingress" / "owner")
    assert _pins.hook_attachments(str(tmp_path), str(tmp_path / "gone"), "xdp") == {}


def test_paths_are_built_under_the_pin_root_only(tmp_path):
    root = str(tmp_path)
    assert _pins.attachment_dir(root, "host", "eth0", "xdp") == os.path.join(root, "host", "eth0", "xdp")
    assert _pins.shared_maps_dir(root, "ns1", "mc") == os.path.join(root, "ns1", "shared_maps", "mc")
    assert _pins.shared_maps_lock("mc") == "shared_maps:mc"
    with pytest.raises(_names.BadNameError):
        _pins.attachment_dir(root, "host", "../eth0", "xdp")
    with pytest.raises(_names.BadNameError):
        _pins.shared_maps_dir(root, "host", "a/b")
    assert _pins.shared_maps_named(_pins.shared_maps_dir(root, "ns1", "mc")) == ("ns1", "mc")


def test_a_lock_s_generation_is_advanced_by_its_holder_and_read_without_it(tmp_path, monkeypatch):
    """What a run that read before the lock compares under it (maps/devmap's catch_up): 0 for a lock never
    taken (and reading it makes no file), the holder's count once it advanced it, None for a file no run
    wrote."""
    monkeypatch.setattr(_pins, "LOCK_DIR", str(tmp_path / "locks"))
    assert _pins.lock_generation("ns1", "shared_maps:mc") == 0 and not (tmp_path / "locks").exists()
    with _pins.lock("ns1", "shared_maps:mc") as held:
        assert held.generation() == 0
        assert held.advance() == 1 and held.advance() == 2 and held.generation() == 2
        assert _pins.lock_generation("ns1", "shared_maps:mc") == 2
    with _pins.lock("ns1", "shared_maps:mc") as held:  # taking the lock again keeps the count
        assert held.generation() == 2
    assert _pins.lock_generation("ns1", "shared_maps:other") == 0
    with open(_pins.lock_path("ns1", "shared_maps:mc"), "w") as handle:
        handle.write("not a count")
    assert _pins.lock_generation("ns1", "shared_maps:mc") is None
    with _pins.lock("ns1", "shared_maps:mc") as held:
        assert held.generation() is None and held.advance() == 1
    assert _pins.lock_generation("ns1", "shared_maps:mc") == 1


def test_made_directories_are_undone_deepest_first_and_empty_parents_pruned(tmp_path):
    pins = _pins.PinDir(str(tmp_path), str(tmp_path / "ns" / "eth0" / "xdp"))
    created = pins.make()
    assert created == [pins.maps_dir, pins.directory, str(tmp_path / "ns" / "eth0"), str(tmp_path / "ns")]
    assert pins.make() == [] and pins.exists() and not pins.has_link()
    (tmp_path / "ns" / "eth0" / "xdp" / "maps" / "counters").write_text("")  # a map libbpf pinned in the load
    _pins.PinDir.undo(created)
    assert os.listdir(str(tmp_path)) == []

    kept = tmp_path / "ns" / "eth1"
    kept.mkdir(parents=True)
    _pins.make_dirs(str(tmp_path / "ns" / "eth0" / "xdp"))
    _pins.prune_empty(str(tmp_path / "ns" / "eth0" / "xdp"), str(tmp_path))
    assert sorted(os.listdir(str(tmp_path / "ns"))) == ["eth1"]  # stops at a directory that is not empty
    _pins.prune_empty(str(tmp_path / "ns" / "gone"), str(tmp_path))  # already gone: nothing to do
