"""ebpf.xdp.program_cost on the real kernel: ns per packet of XDP and tc programs under BPF_PROG_TEST_RUN, beside
an empty program of the same hook, for every XDP and tc program of files/bpf; bad input; nothing left loaded.

Every module run goes through `measured`, which reads the kernel's program list
(bpftool, a witness apart from the collection's binding) before and after: the
ids the result reports (each measured program's and each empty program's) must
be gone afterwards, and no program with one of the names only this module and
this file's objects use may have appeared. Other tests may load and unload
programs meanwhile, so the check is by id and by these names, never by the
whole list.
"""

import glob
import json
import os
import re

import pytest

from conftest import BPF_DIR, compile_bpf, sh

INCLUDE = [os.path.join(BPF_DIR, "include")]
# Names only program_cost (its empty programs) and this file's objects give programs.
OWN_NAMES = re.compile(r"^(cost_empty_|cost_probe)")
# A sane cost of one run of any of the collection's programs on a 60-byte frame.
SANE_NS = 100000

# An XDP and a tc program beside a program of another type (a tracepoint's).
MIXED = r"""
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

SEC("tp/syscalls/sys_enter_getpid")
int cost_probe_tp(void *ctx)
{
    return 0;
}

SEC("xdp")
int cost_probe_xdp(struct xdp_md *ctx)
{
    return XDP_TX;
}

SEC("tc")
int cost_probe_tc(struct __sk_buff *skb)
{
    return 3; /* TC_ACT_PIPE */
}

char _license[] SEC("license") = "GPL";
"""

# Reads the packet without checking its bounds: the verifier refuses it.
REJECTED = r"""
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

SEC("xdp")
int cost_probe_bad(struct xdp_md *ctx)
{
    unsigned char *data = (void *)(long)ctx->data;

    return data[20] == 1 ? XDP_DROP : XDP_PASS;
}

char _license[] SEC("license") = "GPL";
"""


def loaded_programs():
    """{id: name} of every program in the kernel, as bpftool lists them."""
    return {p["id"]: p.get("name", "") for p in json.loads(sh("bpftool", "-j", "prog", "show").stdout)}


def measured(run, args, check=False):
    """The module's result; asserts that no program it loaded is still loaded afterwards."""
    before = loaded_programs()
    result = run("program_cost", args, check=check)
    after = loaded_programs()
    reported = [p["id"] for p in result.get("programs", {}).values()] + [
        p["id"] for p in result.get("empty_programs", {}).values()]
    assert not set(reported) & set(after), (reported, result)
    appeared = {i: name for i, name in after.items() if i not in before and OWN_NAMES.match(name)}
    assert not appeared, appeared
    assert result.get("changed") is False, result
    return result


def assert_sane(name, figures, runs=3):
    assert 0 < figures["ns_per_packet"] < SANE_NS, (name, figures)
    assert 0 < figures["empty_ns_per_packet"] < 10000, (name, figures)
    assert len(figures["runs"]) == runs and len(figures["empty_runs"]) == runs, (name, figures)
    assert all(0 < ns < SANE_NS for ns in figures["runs"] + figures["empty_runs"]), (name, figures)
    assert figures["over_empty_ns"] == figures["ns_per_packet"] - figures["empty_ns_per_packet"], figures
    assert figures["id"] > 0 and len(figures["tag"]) == 16, figures


@pytest.fixture(scope="module")
def objects(tmp_path_factory):
    """This file's own small objects: MIXED and REJECTED, compiled once."""
    directory = tmp_path_factory.mktemp("cost")
    out = {}
    for name, source in (("mixed", MIXED), ("rejected", REJECTED)):
        src = directory / ("%s.bpf.c" % name)
        src.write_text(source)
        out[name] = compile_bpf(src, directory / ("%s.o" % name), INCLUDE)
    return out


def test_xdp_drop_count_drops_at_a_cost_beside_the_empty_program(run, drop_obj):
    """Under both interpreters, in check mode as in a normal run: the measurement is read-only."""
    for check in (True, False):
        res = measured(run, dict(object=drop_obj), check=check)
        assert not res.get("failed"), res
        assert list(res["programs"]) == ["xdp_drop_count"] and res["skipped"] == {}
        figures = res["programs"]["xdp_drop_count"]
        assert figures["verdict"] == "XDP_DROP" and figures["retval"] == 1 and figures["type"] == "xdp"
        assert_sane("xdp_drop_count", figures)
        assert res["empty_programs"] == {"xdp": {"name": "cost_empty_xdp", "id": res["empty_programs"]["xdp"]["id"],
                                                 "verdict": "XDP_PASS"}}
        assert res["repeat"] == 1000000 and res["frame_size"] == 60 and res["object"] == drop_obj


@pytest.mark.debian12("program_cost")
def test_constants_make_it_pass_and_runs_sets_the_measurements(run_distro, drop_obj):
    res = measured(run_distro, dict(object=drop_obj, programs=["xdp_drop_count"], constants={"xdp_action": 2}, runs=5))
    figures = res["programs"]["xdp_drop_count"]
    assert figures["verdict"] == "XDP_PASS" and figures["retval"] == 2
    assert_sane("xdp_drop_count", figures, runs=5)


def test_a_tc_program_beside_the_empty_tc_program(run_distro, tc_obj):
    res = measured(run_distro, dict(object=tc_obj, programs=["tc_drop_count", "redirect_xmit"]))
    assert list(res["programs"]) == ["tc_drop_count", "redirect_xmit"]
    assert res["programs"]["tc_drop_count"]["verdict"] == "TC_ACT_SHOT"
    assert res["programs"]["redirect_xmit"]["verdict"] == "TC_ACT_REDIRECT"
    for name, figures in res["programs"].items():
        assert figures["type"] == "sched_cls"
        assert_sane(name, figures)
    assert list(res["empty_programs"]) == ["sched_cls"]
    assert res["empty_programs"]["sched_cls"]["verdict"] == "TC_ACT_OK"


def sections(source_path):
    """{function: section} of the programs a BPF C source declares, read from the source itself."""
    with open(source_path) as handle:
        text = handle.read()
    return {name: section for section, name in re.findall(r'SEC\("([^"]+)"\)\s*\n\s*int\s+(\w+)\s*\(', text)}


def test_every_xdp_and_tc_program_of_files_bpf_is_measured(run_distro, tmp_path):
    """All of files/bpf, whatever it holds when the test runs: every program in an XDP or tc section has a sane
    figure, except devmap egress programs, which the kernel does not test-run and the result says so."""
    sources = sorted(glob.glob(os.path.join(BPF_DIR, "*.bpf.c")))
    assert sources
    seen = 0
    for src in sources:
        declared = {name: section for name, section in sections(src).items()
                    if section.split("/")[0] in ("xdp", "tc", "tcx", "classifier", "action")}
        if not declared:
            continue
        obj = compile_bpf(src, tmp_path / (os.path.basename(src)[:-len(".bpf.c")] + ".o"), INCLUDE)
        res = measured(run_distro, dict(object=obj))
        assert not res.get("failed"), (src, res)
        devmap = {name for name, section in declared.items() if section == "xdp/devmap"}
        assert set(res["programs"]) == set(declared) - devmap, (src, res)
        assert set(res["skipped"]) == devmap, (src, res)
        for name, figures in res["programs"].items():
            assert_sane(name, figures)
            assert figures["verdict"].startswith("XDP_" if declared[name].startswith("xdp") else "TC_ACT_"), figures
            seen += 1
    assert seen >= 8


def test_programs_of_other_types_are_left_out_and_refused_by_name(run_distro, objects):
    res = measured(run_distro, dict(object=objects["mixed"]))
    assert list(res["programs"]) == ["cost_probe_xdp", "cost_probe_tc"], res
    assert res["programs"]["cost_probe_xdp"]["verdict"] == "XDP_TX"
    assert res["programs"]["cost_probe_tc"]["verdict"] == "TC_ACT_PIPE"
    assert sorted(res["empty_programs"]) == ["sched_cls", "xdp"]
    for name, figures in res["programs"].items():
        assert_sane(name, figures)
    res = measured(run_distro, dict(object=objects["mixed"], programs=["cost_probe_xdp", "cost_probe_tp"]))
    assert res.get("failed") and "program cost_probe_tp (tracepoint) is not an XDP or tc program" in res["msg"], res


def test_a_frame_the_kernel_refuses_closes_what_was_loaded(run_distro, objects):
    """The programs are loaded when the kernel refuses the test run (a tc program's frame larger than a page):
    the error says so, and measured() checks that both the program and the empty program are gone."""
    res = measured(run_distro, dict(object=objects["mixed"], programs=["cost_probe_tc"], frame="00" * 8000))
    assert res.get("failed") and "refused a test run of program cost_probe_tc with a 8000-byte frame" in res["msg"], res


def test_a_frame_given_as_hex(run_distro, drop_obj):
    arp = "ff" * 6 + "020000000001" + "0806" + "00" * 46
    res = measured(run_distro, dict(object=drop_obj, frame=arp, runs=1))
    assert res["frame_size"] == 60 and res["programs"]["xdp_drop_count"]["verdict"] == "XDP_DROP"
    assert_sane("xdp_drop_count", res["programs"]["xdp_drop_count"], runs=1)


def test_a_verifier_rejection_shows_the_log_tail(run_distro, objects):
    res = measured(run_distro, dict(object=objects["rejected"]))
    assert res.get("failed") and "the kernel rejected rejected.o" in res["msg"], res
    assert "last lines of the log" in res["msg"] and res["verifier_log_tail"], res
    assert any("invalid access to packet" in line for line in res["verifier_log_tail"]), res


@pytest.mark.parametrize("args, said", [
    (dict(object="/nonexistent/cost.o"), "object file /nonexistent/cost.o does not exist"),
    (dict(programs=["xdp_nope"]), "program 'xdp_nope' is not in {obj}; its programs: xdp_drop_count (xdp)"),
    (dict(repeat=0), "repeat must be between 1 and 2147483647 runs of the program per measurement, not 0"),
    (dict(runs=0), "runs must be at least 1"),
    (dict(frame="not hex"), "frame must be the frame's bytes as hex digits"),
    (dict(frame="0102"), "frame must hold at least an Ethernet header (14 bytes), not 2 bytes"),
    (dict(constants={"nope": 1}), "has no const volatile setting named nope; it has: xdp_action"),
])
def test_bad_input_is_a_clear_error(run_distro, drop_obj, args, said):
    res = measured(run_distro, dict(dict(object=drop_obj), **args))
    assert res.get("failed") and said.format(obj=drop_obj) in res["msg"], res


def test_a_devmap_egress_program_is_skipped_and_refused_by_name(run_distro, tmp_path):
    obj = compile_bpf(os.path.join(BPF_DIR, "xdp_multicast.bpf.c"), tmp_path / "xdp_multicast.o", INCLUDE)
    res = measured(run_distro, dict(object=obj))
    assert list(res["programs"]) == ["xdp_multicast"] and "devmap egress" in res["skipped"]["xdp_egress_mac"], res
    res = measured(run_distro, dict(object=obj, programs=["xdp_egress_mac"]))
    assert res.get("failed") and "xdp_egress_mac is a devmap egress program" in res["msg"], res
    assert "does not test-run" in res["msg"], res
