"""ebpf.xdp.bpf_object: real clang, real cache, real objects."""

import os
import stat

import pytest

from conftest import BPF_DIR, assert_rhythm

XDP_SOURCE = r"""
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "answer.h"
SEC("xdp")
int xdp_answer(struct xdp_md *ctx) { return ANSWER; }
char _license[] SEC("license") = "GPL";
"""


def clang_wrapper(tmp_path):
    """A clang that logs each run, to prove a cache hit runs no compiler."""
    log = tmp_path / "clang.log"
    wrapper = tmp_path / "clang-logged"
    wrapper.write_text("#!/bin/sh\necho run >> %s\nexec clang \"$@\"\n" % log)
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IEXEC)
    return str(wrapper), log


def runs(log):
    return len(log.read_text().splitlines()) if log.exists() else 0


@pytest.mark.debian12("bpf_object")
def test_compile_rhythm_and_cache(run, tmp_path):
    clang, log = clang_wrapper(tmp_path)
    args = dict(src=os.path.join(BPF_DIR, "xdp_drop_count.bpf.c"), dest=str(tmp_path / "out.o"),
                cache_dir=str(tmp_path / "cache"), clang=clang)
    first, second = assert_rhythm(run, "bpf_object", args)
    # The first check mode compiles aside (a cold cache), the first run into the cache; nothing after.
    assert runs(log) == 2, "only the first check mode and the first real run compile"
    assert first["cache_hit"] is False and second["cache_hit"] is True
    assert first["sha256"] == second["sha256"]
    assert first["programs"] == [{"name": "xdp_drop_count", "section": "xdp", "type": "xdp"}]
    assert first["maps"] == [{"name": "proto_count", "type": "percpu_array", "key_size": 4,
                              "value_size": 8, "max_entries": 256}]
    # A lost dest is restored from the cache without compiling.
    os.unlink(args["dest"])
    again = run("bpf_object", args)
    assert again["changed"] and again["cache_hit"] and runs(log) == 2
    assert os.path.exists(args["dest"])


def test_header_change_is_a_miss(run_distro, tmp_path):
    clang, log = clang_wrapper(tmp_path)
    (tmp_path / "src").mkdir()
    src = tmp_path / "src" / "answer.bpf.c"
    src.write_text(XDP_SOURCE)
    header = tmp_path / "src" / "include"
    header.mkdir()
    (header / "answer.h").write_text("#define ANSWER XDP_PASS\n")
    args = dict(src=str(src), cache_dir=str(tmp_path / "cache"), clang=clang)
    first = run_distro("bpf_object", args)
    assert first["changed"] and runs(log) == 1
    assert run_distro("bpf_object", args)["changed"] is False and runs(log) == 1
    (header / "answer.h").write_text("#define ANSWER XDP_DROP\n")
    changed = run_distro("bpf_object", args)
    assert changed["changed"] and changed["sha256"] != first["sha256"] and runs(log) == 2
    # Defines are part of the key too.
    defined = run_distro("bpf_object", dict(args, defines={"EXTRA": 1}))
    assert defined["changed"] and runs(log) == 3


def test_compile_error_shows_clang_lines(run_distro, tmp_path):
    src = tmp_path / "broken.bpf.c"
    src.write_text("int broken(\n")
    dest = tmp_path / "broken.o"
    res = run_distro("bpf_object", dict(src=str(src), dest=str(dest), cache_dir=str(tmp_path / "cache")))
    assert res["failed"] and "clang failed" in res["msg"]
    assert any("broken.bpf.c:1" in line and "error" in line for line in res["stderr_lines"]), res
    assert not dest.exists()


def test_missing_source_and_missing_clang(run_distro, tmp_path):
    res = run_distro("bpf_object", dict(src=str(tmp_path / "nope.c"), cache_dir=str(tmp_path / "c")))
    assert res["failed"] and "does not exist" in res["msg"]
    res = run_distro("bpf_object", dict(src=os.path.join(BPF_DIR, "xdp_drop_count.bpf.c"),
                                        cache_dir=str(tmp_path / "c"), clang="clang-does-not-exist"))
    assert res["failed"] and "clang-does-not-exist not found" in res["msg"]


def test_a_recompile_with_identical_output_leaves_dest_unchanged(run_distro, tmp_path):
    args = dict(src=os.path.join(BPF_DIR, "xdp_drop_count.bpf.c"), dest=str(tmp_path / "out.o"),
                cache_dir=str(tmp_path / "cache-a"))
    assert run_distro("bpf_object", args)["changed"]
    # A cold cache recompiles, but the object comes out the same: no change to report, and check mode says so
    # first (it said "changed" on every cache miss: a rollout's probe predicted a change its converge did not make).
    cold = dict(args, cache_dir=str(tmp_path / "cache-b"))
    predicted = run_distro("bpf_object", cold, check=True)
    assert predicted["changed"] is False and predicted["sha256"] == fresh_sha(args), predicted
    assert not os.path.exists(cold["cache_dir"]) or not os.listdir(cold["cache_dir"]), "check mode cached nothing"
    fresh = run_distro("bpf_object", cold)
    assert fresh["cache_hit"] is False and fresh["changed"] is False, fresh
    # A dest that differs: check mode and the run both say changed.
    with open(args["dest"], "ab") as handle:
        handle.write(b"\0")
    assert run_distro("bpf_object", cold, check=True)["changed"] is True
    assert run_distro("bpf_object", cold)["changed"] is True
    assert run_distro("bpf_object", cold)["changed"] is False


def fresh_sha(args):
    import hashlib  # pylint: disable=import-outside-toplevel
    with open(args["dest"], "rb") as handle:
        return hashlib.sha256(handle.read()).hexdigest()


def test_datapath_check_mode_judges_objects_by_the_sources_it_would_ship(run_distro, tmp_path):
    """datapath ships a source and compiles it; then the source changes in the task. Check mode does not write it,
    so the source on the host says nothing of the object the run will compile: it predicts the object changes,
    as the run then does (it judged the object by the old source's cached compile, and predicted no change)."""
    src_dir, dest = tmp_path / "src", str(tmp_path / "out.o")
    (tmp_path / "cache").mkdir(mode=0o700)

    def task(answer):
        source = XDP_SOURCE.replace('#include "answer.h"', "#define ANSWER %s" % answer)
        return {"sources": {"dir": str(src_dir), "files": {"answer.bpf.c": source}},
                "config": {"objects": [{"src": str(src_dir / "answer.bpf.c"), "dest": dest,
                                        "cache_dir": str(tmp_path / "cache")}]}}

    first = run_distro("datapath", task("XDP_PASS"))
    assert first["changed"] and not first.get("failed"), first
    assert run_distro("datapath", task("XDP_PASS"), check=True)["changed"] is False
    predicted = run_distro("datapath", task("XDP_DROP"), check=True)
    converged = run_distro("datapath", task("XDP_DROP"))
    assert [c["section"] for c in predicted["changes"]] == [c["section"] for c in converged["changes"]] == [
        "sources", "objects"], (predicted, converged)
    assert run_distro("datapath", task("XDP_DROP"), check=True)["changed"] is False
