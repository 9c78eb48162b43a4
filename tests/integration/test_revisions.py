"""Revisions and rollback (revision: previous) of xdp_program and tc_program, on the real kernel.

Two builds of one counting program at the same path: the first passes what
it counts, the second drops it (a faulty release). Frames are sent for real
from the peer namespace; the receiver's IP stack says whether they got
through, the pinned proto_count map says what the programs counted.
"""

import os
import shutil

import pytest

from conftest import BPF_DIR, SYSTEM_PYTHON, ModuleRunner, assert_rhythm, sh
from kernel_features import needs
from ansible_collections.ebpf.xdp.plugins.module_utils.bpf import compile as _compile

SOURCE = r"""
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "proto_count.h"

SEC("%(section)s")
int rev_count(%(ctx)s *ctx)
{
    count_ip_proto((void *)(long)ctx->data, (void *)(long)ctx->data_end);
    return VERDICT;
}

char _license[] SEC("license") = "GPL";
"""
HOOKS = {
    "xdp": dict(section="xdp", ctx="struct xdp_md", passes=2, drops=1),
    "tc": dict(section="tc", ctx="struct __sk_buff", passes=0, drops=2),
}


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    """{hook: {"pass": object, "drop": object}} compiled once."""
    directory = tmp_path_factory.mktemp("revisions")
    out = {}
    for hook, spec in HOOKS.items():
        src = directory / ("rev_%s.bpf.c" % hook)
        src.write_text(SOURCE % spec)
        out[hook] = {}
        for verdict in ("pass", "drop"):
            obj = directory / ("rev_%s_%s.o" % (hook, verdict))
            sh(*_compile.compile_argv("clang", str(src), str(obj), [os.path.join(BPF_DIR, "include")],
                                      defines={"VERDICT": spec["passes" if verdict == "pass" else "drops"]}))
            out[hook][verdict] = str(obj)
    return out


@pytest.fixture
def run(pin_root):
    # Debian's Python: what fleet hosts run the modules with.
    return ModuleRunner(SYSTEM_PYTHON, pin_root)


@pytest.fixture
def store(tmp_path):
    return str(tmp_path / "objects")


def sha(path):
    return _compile.sha256_file(path)


def stored(store):
    return sorted(n[:-2] for n in os.listdir(store) if n.endswith(".o")) if os.path.isdir(store) else []


def program(run, pair, hook):
    """The facts of the receiver's program on the hook (xdp, or tc ingress)."""
    facts = run("xdp_facts", dict(netns=pair.rx, interfaces=["eth0"]))["ansible_facts"]["xdp"]["interfaces"]["eth0"]
    return facts["xdp"] if hook == "xdp" else facts["tc"]["ingress"][0]


def send(run, pair, count):
    """Send `count` UDP frames; return how many the receiver's IP stack took in."""
    before = pair.ip_in_receives()
    pair.burst(run, count=count, protocols=("udp",))
    return pair.ip_in_receives() - before


def module_args(hook, pair, store, **extra):
    module = "xdp_program" if hook == "xdp" else "tc_program"
    args = dict(interface="eth0", netns=pair.rx, object_store=store)
    args.update({"mode": "native"} if hook == "xdp" else {"method": "tcx", "direction": "ingress"})
    args.update(extra)
    return module, args


@pytest.mark.parametrize("hook", ["xdp", needs("tcx", "tc")])
def test_rollback_after_a_faulty_release_at_the_same_path(run, pair, builds, store, tmp_path, hook):
    """v1 passes, v2 (same path, overwritten) drops; rollback puts v1 back atomically, counters continue."""
    path = str(tmp_path / "release.o")
    shutil.copy(builds[hook]["pass"], path)
    module, args = module_args(hook, pair, store, object=path)
    first = run(module, args)
    assert first["changed"] and first["revision"]["number"] == 1 and first["previous_revision"] is None, first
    assert first["revision"]["object_sha256"] == sha(path) and first["revision"]["program"] == "rev_count"
    assert stored(store) == [sha(path)]
    assert send(run, pair, 40) == 40

    # No previous revision yet: a clear error, nothing changed.
    module, back = module_args(hook, pair, store, revision="previous")
    refused = run(module, back)
    assert refused.get("failed") and not refused["changed"] and "no previous revision" in refused["msg"], refused
    assert program(run, pair, hook)["id"] == first["id"]

    shutil.copy(builds[hook]["drop"], path)  # the faulty release overwrites the old object
    second = run(module, args)
    assert second["changed"] and second["revision"]["number"] == 2, second
    assert second["previous_revision"]["number"] == 1 and second["previous_revision"]["object_sha256"] == \
        first["revision"]["object_sha256"] and second["previous_revision"]["object"] == path
    assert send(run, pair, 40) == 0, "v2 drops"
    holder = second["link_id"]

    rolled, again = assert_rhythm(run, module, back)
    assert rolled["revision"]["number"] == 1 and rolled["revision"]["rolled_back"], rolled
    assert rolled["revision"]["object_sha256"] == first["revision"]["object_sha256"] != sha(path)
    assert rolled["previous_revision"]["number"] == 2 and rolled["previous_revision"]["object_sha256"] == sha(path)
    assert rolled["link_id"] == holder, "swapped on our link (atomic), not re-attached"
    assert rolled["maps"] == first["maps"] and rolled["tag"] == first["tag"]
    assert again["revision"] == rolled["revision"] and again["id"] == rolled["id"]
    assert send(run, pair, 40) == 40, "v1 passes again"
    facts = program(run, pair, hook)
    assert facts["protocols"]["udp"] == 120, "the counters continue over both swaps"
    assert facts["revision"]["number"] == 1 and facts["previous_revision"]["number"] == 2

    # Going forward again is an ordinary task: a new revision, the rolled-back one kept as previous.
    forward = run(module, args)
    assert forward["changed"] and forward["revision"]["number"] == 3 and not forward["revision"]["rolled_back"]
    assert forward["previous_revision"]["number"] == 1, forward
    assert stored(store) == sorted([sha(builds[hook]["pass"]), sha(builds[hook]["drop"])])

    gone = run(module, dict(args, state="absent"))
    assert gone["changed"] and not gone["attached"] and gone["revision"] is None
    assert stored(store) == [], "objects no record references are removed"


@pytest.mark.parametrize("hook", ["xdp", needs("tcx", "tc")])
def test_rollback_with_the_object_deleted_check_mode_changes_nothing(run, pair, builds, store, tmp_path, hook):
    """v1 and v2 at different paths, v1's file deleted: the store still has it; check mode touches nothing."""
    v1, v2 = str(tmp_path / "v1.o"), str(tmp_path / "v2.o")
    shutil.copy(builds[hook]["pass"], v1)
    shutil.copy(builds[hook]["drop"], v2)
    module, args = module_args(hook, pair, store, object=v1, constants={})
    run(module, args)
    second = run(module, dict(args, object=v2))
    assert second["revision"]["number"] == 2 and second["previous_revision"]["object"] == v1
    os.unlink(v1)
    module, back = module_args(hook, pair, store, revision="previous")
    preview = run(module, back, check=True)
    assert preview["changed"] and preview["revision"]["number"] == 1 and preview["revision"]["object"] == v1
    assert preview["previous_revision"]["number"] == 2
    now = program(run, pair, hook)
    assert now["id"] == second["id"] and now["revision"]["number"] == 2, "check mode changed nothing"
    rolled = run(module, back)
    assert rolled["changed"] and rolled["revision"]["number"] == 1 and rolled["id"] != second["id"]
    assert send(run, pair, 30) == 30
    assert run(module, back)["changed"] is False


def test_bad_input_changes_nothing(run, pair, builds, store, tmp_path):
    module, back = module_args("xdp", pair, store, revision="previous")
    nothing = run(module, back)
    assert nothing.get("failed") and "no program attached by ebpf.xdp" in nothing["msg"], nothing

    both = run(module, dict(back, object=builds["xdp"]["pass"]))
    assert both.get("failed") and "do not give object" in both["msg"], both

    absent = run(module, dict(back, state="absent"))
    assert absent.get("failed") and "state: absent" in absent["msg"], absent

    # The kept object vanished from the store: refused before anything changes.
    module, args = module_args("xdp", pair, store, object=builds["xdp"]["pass"])
    run(module, args)
    second = run(module, dict(args, object=builds["xdp"]["drop"]))
    os.unlink(os.path.join(store, sha(builds["xdp"]["pass"]) + ".o"))
    lost = run(module, back)
    assert lost.get("failed") and "is not in the object store" in lost["msg"], lost
    assert program(run, pair, "xdp")["id"] == second["id"]
    assert pair.xdp_line()  # still attached
