"""program_cost's pure parts: settings, the frame as hex, medians, verdict names, which programs are measured,
and the instructions of the empty programs."""

import pytest

from ansible_collections.ebpf.xdp.plugins.module_utils.bpf import libbpf as _bpf
from ansible_collections.ebpf.xdp.plugins.module_utils.traffic import cost as _cost

OBJECT = [
    {"name": "xdp_count", "type": "xdp", "attach_type": _bpf.BPF_XDP},
    {"name": "egress_mac", "type": "xdp", "attach_type": _bpf.BPF_XDP_DEVMAP},
    {"name": "tc_count", "type": "sched_cls", "attach_type": 0},
    {"name": "on_write", "type": "tracepoint", "attach_type": 0},
]


def params(**given):
    return dict(dict(object="/o.o", programs=[], constants={}, repeat=_cost.DEFAULT_REPEAT, runs=3, frame=None),
                **given)


def test_default_frame_is_60_bytes_of_udp_over_ipv4():
    frame = _cost.Settings.from_params(params()).frame
    assert len(frame) == 60 and frame[12:14] == b"\x08\x00" and frame[23] == 17


@pytest.mark.parametrize("text", ["0011223344556677889900aabbcc", "00 11 22 33 44 55 66 77 88 99 00 aa bb cc",
                                  "00:11:22:33:44:55:66:77:88:99:00:AA:BB:CC", "0011223344556677\n889900aabbcc"])
def test_frame_as_hex_with_or_without_separators(text):
    assert _cost.Settings.from_params(params(frame=text)).frame == bytes.fromhex("0011223344556677889900aabbcc")


@pytest.mark.parametrize("given, said", [
    (dict(repeat=0), "repeat must be between 1 and 2147483647"),
    (dict(repeat=2 ** 31), "repeat must be between 1"),
    (dict(runs=0), "runs must be at least 1"),
    (dict(frame="xyz"), "frame must be the frame's bytes as hex digits"),
    (dict(frame="abc"), "frame must be the frame's bytes as hex digits"),
    (dict(frame="00" * 13), "at least an Ethernet header (14 bytes), not 13 bytes"),
    (dict(programs=["a", "b", "a"]), "programs names a more than once"),
])
def test_settings_refused(given, said):
    with pytest.raises(_cost.CostError, match=said.replace("(", r"\(").replace(")", r"\)")):
        _cost.Settings.from_params(params(**given))


def test_median_of_odd_and_even_counts():
    assert _cost.median([50, 40, 47]) == 47.0
    assert _cost.median([40, 47]) == 43.5


def test_verdict_names_by_hook():
    assert _cost.verdict_name("xdp", 1) == "XDP_DROP"
    assert _cost.verdict_name("xdp", 2) == "XDP_PASS"
    assert _cost.verdict_name("sched_cls", 2) == "TC_ACT_SHOT"
    assert _cost.verdict_name("sched_act", 0) == "TC_ACT_OK"
    assert _cost.verdict_name("sched_cls", 0xFFFFFFFF) == "TC_ACT_UNSPEC"
    assert _cost.verdict_name("xdp", 99) == "99"


def test_empty_programs_return_pass_and_ok():
    assert _cost.verdict_name("xdp", _cost.EMPTY_RETURNS["xdp"]) == "XDP_PASS"
    assert _cost.verdict_name("sched_cls", _cost.EMPTY_RETURNS["sched_cls"]) == "TC_ACT_OK"
    assert all(len(name) < _bpf.BPF_OBJ_NAME_LEN for name in _cost.EMPTY_NAMES.values())


def test_instructions_as_the_kernel_reads_them():
    # r0 = 2; exit, as llvm-objdump shows them: b7 00 00 00 02 00 00 00 / 95 00 00 00 00 00 00 00.
    assert _bpf.insn(_bpf.BPF_MOV64_IMM, dst=0, imm=2).hex() == "b700000002000000"
    assert _bpf.insn(_bpf.BPF_EXIT).hex() == "9500000000000000"
    assert _bpf.insn(_bpf.BPF_MOV64_IMM, dst=1, src=2, off=-1, imm=-1).hex() == "b721ffffffffffff"


def test_by_default_every_xdp_and_tc_program_but_devmap_egress():
    measured, skipped = _cost.choose(OBJECT, [], "/o.o")
    assert [p["name"] for p in measured] == ["xdp_count", "tc_count"]
    assert list(skipped) == ["egress_mac"] and "devmap egress" in skipped["egress_mac"]


def test_named_programs_in_the_order_given():
    measured, skipped = _cost.choose(OBJECT, ["tc_count", "xdp_count"], "/o.o")
    assert [p["name"] for p in measured] == ["tc_count", "xdp_count"] and skipped == {}


@pytest.mark.parametrize("wanted, said", [
    (["nope"], "program 'nope' is not in /o.o; its programs: xdp_count (xdp), egress_mac (xdp), "
               "tc_count (sched_cls), on_write (tracepoint)"),
    (["nope", "xdp_count", "gone"], "programs 'nope', 'gone' are not in /o.o"),
    (["xdp_count", "on_write"], "program on_write (tracepoint) is not an XDP or tc program"),
    (["egress_mac"], "egress_mac is a devmap egress program"),
])
def test_programs_that_cannot_be_measured(wanted, said):
    with pytest.raises(_cost.CostError) as caught:
        _cost.choose(OBJECT, wanted, "/o.o")
    assert said in str(caught.value)


def test_an_object_without_xdp_or_tc_programs():
    with pytest.raises(_cost.CostError, match="has no XDP or tc program to measure; its programs: on_write"):
        _cost.choose(OBJECT[3:], [], "/o.o")


def test_report_is_the_medians_and_their_difference():
    info = {"id": 7, "tag": "00" * 8}
    got = _cost.report("xdp", info, 1, [50, 47, 49], [40, 41, 39])
    assert got == {"type": "xdp", "id": 7, "tag": "00" * 8, "verdict": "XDP_DROP", "retval": 1,
                   "ns_per_packet": 49.0, "runs": [50, 47, 49], "empty_ns_per_packet": 40.0,
                   "empty_runs": [40, 41, 39], "over_empty_ns": 9.0}


# A tcbpf1-style object: programs in sections that name no type (libbpf: unspec), two of them in one section.
LEGACY = [
    {"name": "_redirect_xmit", "section": "redirect_xmit", "type": "unspec", "attach_type": 0},
    {"name": "xdp_prog1", "section": "xdp1", "type": "unspec", "attach_type": 0},
    {"name": "egress", "section": "xdp_devmap/egress", "type": "unspec", "attach_type": 0},
    {"name": "first", "section": "classifier", "type": "sched_cls", "attach_type": 0},
    {"name": "second", "section": "classifier", "type": "sched_cls", "attach_type": 0},
]


def legacy(program_type=None):
    programs = [dict(p) for p in LEGACY]
    _cost.typed_by_hook(programs, program_type)
    return programs


def test_untyped_programs_are_left_out_without_program_type_and_say_why():
    measured, skipped = _cost.choose(legacy(), [], "/o.o")
    assert [p["name"] for p in measured] == ["first", "second"]
    assert sorted(skipped) == ["_redirect_xmit", "egress", "xdp_prog1"]
    assert 'SEC("redirect_xmit") names no program type: program_type says' in skipped["_redirect_xmit"]
    with pytest.raises(_cost.CostError, match=r"program xdp_prog1: its section SEC\(\"xdp1\"\) names no program type"):
        _cost.choose(legacy(), ["xdp_prog1"], "/o.o")


def test_program_type_types_the_untyped_programs_as_their_hook_would():
    measured, skipped = _cost.choose(legacy("xdp"), [], "/o.o")
    # libbpf 0.x's SEC("xdp_devmap/...") stays a devmap egress program: the kernel does not test-run it.
    assert [p["name"] for p in measured] == ["_redirect_xmit", "xdp_prog1", "first", "second"]
    assert list(skipped) == ["egress"] and "devmap egress" in skipped["egress"]
    assert [p["type"] for p in legacy("sched_act")][:2] == ["sched_act", "sched_act"]


def test_sections_name_the_one_program_in_each():
    programs = legacy("sched_cls")
    assert _cost.in_sections(programs, ["redirect_xmit", "xdp1"], "/o.o") == ["_redirect_xmit", "xdp_prog1"]
    with pytest.raises(_cost.CostError, match=r"section 'classifier' of /o.o holds 2 programs \(first, second\)"):
        _cost.in_sections(programs, ["classifier"], "/o.o")
    with pytest.raises(_cost.CostError, match=r"/o.o has no program in section 'xdp'; its programs: "
                                              r"_redirect_xmit \(SEC\(\"redirect_xmit\"\)\)"):
        _cost.in_sections(programs, ["xdp"], "/o.o")
    with pytest.raises(_cost.CostError, match="sections names xdp1 more than once"):
        _cost.Settings(object="/o.o", sections=["xdp1", "xdp1"]).validate()
