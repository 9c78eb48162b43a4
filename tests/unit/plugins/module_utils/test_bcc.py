"""_bcc's pure parts: where kernel headers are, which function to load, what a bcc task may not ask."""

import os

import pytest

from ansible_collections.ebpf.xdp.plugins.module_utils.bpf import bcc as _bcc


def tree(root, files):
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return str(root)


def test_a_complete_tree_is_bccs_kernel_source(tmp_path):
    path = tree(tmp_path / "full", {"include/linux/kconfig.h": "", "include/generated/autoconf.h": ""})
    assert _bcc.headers(path) == (path, [])


def test_a_debian_build_directory_brings_its_common_tree(tmp_path):
    common = tree(tmp_path / "linux-headers-6.1.0-1-common", {"include/linux/kconfig.h": ""})
    build = tree(tmp_path / "linux-headers-6.1.0-1-cloud-amd64", {
        "Makefile": "include %s/Makefile\n" % common, "include/generated/autoconf.h": ""})
    source, flags = _bcc.headers(build)
    assert source == common
    assert "-I%s/include" % build in flags
    assert all(flag.startswith("-I" + build) for flag in flags)


@pytest.mark.parametrize("files", [{}, {"Makefile": "all:\n"}, {"include/generated/autoconf.h": ""}])
def test_what_is_not_a_headers_tree_names_both_ways_out(tmp_path, files):
    path = tree(tmp_path / "other", dict(files, **{"README": ""}))
    with pytest.raises(_bcc.BccError) as err:
        _bcc.headers(path)
    assert "not a kernel headers tree" in str(err.value)
    assert "linux-headers-%s" % os.uname().release in str(err.value) and "kernel_headers" in str(err.value)


def test_a_missing_directory(tmp_path):
    with pytest.raises(_bcc.BccError, match="is not a directory.*kernel_headers"):
        _bcc.headers(str(tmp_path / "nowhere"))


def test_the_only_function_or_the_named_one():
    assert _bcc._select(["xdp_a"], None, "x.c") == "xdp_a"
    assert _bcc._select(["xdp_a", "xdp_b"], "xdp_b", "x.c") == "xdp_b"
    with pytest.raises(_bcc.BccError, match="2 functions.*xdp_a, xdp_b.*program:"):
        _bcc._select(["xdp_a", "xdp_b"], None, "x.c")
    with pytest.raises(_bcc.BccError, match="'xdp_c' is not in x.c; it has: xdp_a"):
        _bcc._select(["xdp_a"], "xdp_c", "x.c")


def test_constants_are_refused_with_what_to_do_instead(tmp_path):
    with pytest.raises(_bcc.BccError, match="cflags, for example -DXDP_ACTION=2"):
        _bcc.load(str(tmp_path / "x.c"), None, "xdp", [], None, constants={"xdp_action": 2})
