"""source_tree: a directory of the controller as datapath's sources.files (pure logic, a temporary tree)."""

import os

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.ebpf.xdp.plugins.filter.source_tree import source_tree

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))


def test_every_regular_file_by_relative_path_sorted_links_left_out(tmp_path):
    (tmp_path / "include").mkdir()
    (tmp_path / "include" / "b.h").write_text("#define B 1\n")
    (tmp_path / "a.bpf.c").write_text("int a;\n\n")
    (tmp_path / "bcc").mkdir()
    (tmp_path / "bcc" / "x.c").write_text("x")
    os.symlink(tmp_path / "a.bpf.c", tmp_path / "link.c")
    assert list(source_tree(str(tmp_path)).items()) == [
        ("a.bpf.c", "int a;\n\n"), ("bcc/x.c", "x"), ("include/b.h", "#define B 1\n")]
    assert list(source_tree(str(tmp_path), ["bcc/"])) == ["a.bpf.c", "include/b.h"]


def test_the_collections_sources_whole(tmp_path):
    bpf = os.path.join(ROOT, "files", "bpf")
    tree = source_tree(bpf)
    assert "include/parsing_helpers.h" in tree and "xdp_verdict_count.bpf.c" in tree
    with open(os.path.join(bpf, "xdp_verdict_count.bpf.c")) as handle:
        assert tree["xdp_verdict_count.bpf.c"] == handle.read()


def test_a_missing_directory_is_empty_and_a_bad_one_is_refused(tmp_path):
    assert source_tree(str(tmp_path / "nothing")) == {}
    with pytest.raises(AnsibleFilterError, match="must be a path"):
        source_tree(None)
    (tmp_path / "bad.c").write_bytes(b"\xff\xfe")
    with pytest.raises(AnsibleFilterError, match="cannot read .*bad.c as text"):
        source_tree(str(tmp_path))
