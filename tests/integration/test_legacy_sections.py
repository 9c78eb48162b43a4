"""Programs in sections that name no program type (tests/integration/legacy_sections.py), chosen by function name
(program:) or by section (section:, iproute2's `sec`), typed by their hook: a tc redirect in SEC("redirect_xmit")
through a router namespace with every tc method (tcx and act_bpf where the kernel has them, their refusal where
not), XDP programs in SEC("xdp1") and SEC("prog") native and generic, a rollback to such a program, and
iproute2's own load of the same section as the witness.
"""

import json

import pytest

import kernel_features
from conftest import assert_rhythm, sh
from kernel_features import needs
from legacy_sections import compile_legacy

from ansible_collections.ebpf.xdp.plugins.module_utils.traffic import frames as _frames, pcap as _pcap

FORWARDING_METHODS = [needs("tcx", "tcx"), "cls_bpf", needs("act_bpf", "act_bpf")]
# How a task names the program: its function, or its section.
BY_NAME = {"program": "_redirect_xmit"}
BY_SECTION = {"section": "redirect_xmit"}


@pytest.fixture(scope="module")
def objects(tmp_path_factory):
    directory = tmp_path_factory.mktemp("legacy")
    return {name: compile_legacy(directory, name) for name in ("legacy_tc", "legacy_xdp", "mixed", "frags")}


def facts(run, netns, ifname):
    return run("xdp_facts", dict(netns=netns, interfaces=[ifname]))["ansible_facts"]["xdp"]["interfaces"][ifname]


@pytest.mark.parametrize("method", FORWARDING_METHODS)
@pytest.mark.parametrize("chosen", [BY_NAME, BY_SECTION], ids=["program", "section"])
def test_redirect_xmit_forwards_every_frame(run_distro, chain, objects, method, chosen):
    """tcbpf1's redirect_xmit on the router's eth0 sends every frame out of eth1: the receiver's SEC("xdp1")
    program counts each one."""
    receiver = dict(interface="eth0", netns=chain.rx, object=objects["legacy_xdp"], section="xdp1")
    assert not run_distro("xdp_program", receiver).get("failed")
    args = dict(interface="eth0", netns=chain.rt, object=objects["legacy_tc"], method=method,
                constants={"redirect_ifindex": {"ifindex": "eth1"}}, **chosen)
    first, second = assert_rhythm(run_distro, "tc_program", args)
    assert first["name"] == "_redirect_xmit" and second["id"] == first["id"], first
    assert first["diff"]["after"]["program"] == "_redirect_xmit"
    sent = run_distro("xdp_trafficgen", dict(interface="eth0", netns=chain.tx, src_ip=chain.pair.tx_ip,
                                             dst_ip=chain.pair.rx_ip, dst_mac=chain.pair.rx_mac,
                                             protocols=["udp", "tcp"], count=40, rate=20000))
    assert sent["sent"] == {"udp": 40, "tcp": 40}, sent
    assert facts(run_distro, chain.rx, "eth0")["xdp"]["protocols"] == {"udp": 40, "tcp": 40}
    [entry] = facts(run_distro, chain.rt, "eth0")["tc"]["ingress"]
    assert entry["program"] == "_redirect_xmit" and entry["counters"]["redirect_count"] == {"0": 80}, entry
    assert entry.get("section") == chosen.get("section"), entry
    assert entry["method"] == method


@pytest.mark.parametrize("chosen", [BY_NAME, BY_SECTION], ids=["program", "section"])
def test_the_other_way_of_naming_the_same_program_is_no_change(run_distro, chain, objects, chosen):
    """Attached by function name, the same program named by its section (and the other way) loads the very same
    program: no change, and the record says how it is named now."""
    base = dict(interface="eth0", netns=chain.rt, object=objects["legacy_tc"], method="cls_bpf",
                constants={"redirect_ifindex": {"ifindex": "eth1"}})
    first = run_distro("tc_program", dict(base, **chosen))
    assert first["changed"] and not first.get("failed"), first
    other = BY_SECTION if chosen is BY_NAME else BY_NAME
    for check in (True, False):
        res = run_distro("tc_program", dict(base, **other), check=check)
        assert res["changed"] is False and res["id"] == first["id"], res
    again = run_distro("tc_program", dict(base, **other), check=True)
    assert again["changed"] is False, again
    [entry] = facts(run_distro, chain.rt, "eth0")["tc"]["ingress"]
    assert entry["program"] == "_redirect_xmit" and entry.get("section") == other.get("section"), entry


@pytest.mark.parametrize("mode", ["native", "generic"])
@pytest.mark.parametrize("section, program, verdict", [("xdp1", "xdp_prog1", "drop"),
                                                       ("prog", "xdp_pass_count", "pass")])
@pytest.mark.parametrize("by", ["program", "section"])
def test_xdp_program_in_a_legacy_section(run, pair, objects, mode, section, program, verdict, by):
    """samples/bpf/xdp1's section and iproute2's default XDP section, attached natively and generically: each
    frame counted, dropped or passed as the program says."""
    args = dict(interface="eth0", netns=pair.rx, object=objects["legacy_xdp"], mode=mode,
                **({"program": program} if by == "program" else {"section": section}))
    first, second = assert_rhythm(run, "xdp_program", args)
    assert first["mode"] == mode and first["name"] == program and second["id"] == first["id"], first
    assert pair.xdp_prog_id() == first["id"]
    received = pair.ip_in_receives()
    pair.burst(run, count=50)
    xdp = facts(run, pair.rx, "eth0")["xdp"]
    # A program that passes frames may also see what the stack's answers bring back (not IP: "other").
    assert xdp["program"] == program, xdp
    assert {k: xdp["protocols"].get(k) for k in ("udp", "tcp")} == {"udp": 50, "tcp": 50}, xdp
    assert xdp.get("section") == (section if by == "section" else None), xdp
    assert pair.ip_in_receives() - received == (100 if verdict == "pass" else 0)


def test_a_section_that_says_frags_takes_multi_buffer_frames(run_distro, pair, objects):
    """veth refuses native XDP when its peer's MTU is more than a page, unless the program takes multi-buffer
    frames: the untyped program whose section says frags is attached, its twin without it refused (nothing left)."""
    for ns in (pair.tx, pair.rx):
        sh("ip", "-n", ns, "link", "set", "dev", "eth0", "mtu", "9000")
    args = dict(interface="eth0", netns=pair.rx, object=objects["frags"], mode="native")
    first, _second = assert_rhythm(run_distro, "xdp_program", dict(args, section="xdp_frags"))
    assert first["name"] == "pass_frags" and pair.xdp_prog_id() == first["id"], first
    assert run_distro("xdp_program", dict(args, state="absent"))["changed"]
    res = run_distro("xdp_program", dict(args, section="xdp_pass"))
    # veth's own words ("Peer MTU is too large to set XDP") come only with netlink's extack; a link says ERANGE.
    assert res.get("failed") and res["errno"] == 34, res
    assert pair.xdp_prog_id() is None


def test_two_programs_in_one_section_by_function_name(run_distro, pair, objects):
    """A section holding two programs: each is still attached by its function name, and the section alone is
    refused with both named (the host unchanged: test_bad_input's matrix checks that in full)."""
    hook = dict(interface="eth0", netns=pair.rx, object=objects["mixed"], method="cls_bpf")
    first, _second = assert_rhythm(run_distro, "tc_program", dict(hook, program="first_count"))
    res = run_distro("tc_program", dict(hook, section="classifier"))
    assert res.get("failed") and "section 'classifier' of %s holds 2 programs (first_count, second_drop)" \
        % objects["mixed"] in res["msg"], res
    assert res["changed"] is False
    [entry] = facts(run_distro, pair.rx, "eth0")["tc"]["ingress"]
    assert entry["id"] == first["id"] and entry["program"] == "first_count"


def test_rollback_to_a_legacy_section_program(run, pair, objects, drop_obj, tmp_path):
    """revision: previous puts back a program chosen by its section: chosen so again and typed by the hook again,
    with the four-step rhythm, and it runs as before (it passes and counts)."""
    store = str(tmp_path / "store")
    base = dict(interface="eth0", netns=pair.rx, mode="generic", object_store=store)
    legacy = run("xdp_program", dict(base, object=objects["legacy_xdp"], section="prog"))
    assert legacy["changed"] and legacy["revision"]["section"] == "prog", legacy
    upgraded = run("xdp_program", dict(base, object=drop_obj))
    assert upgraded["changed"] and upgraded["previous_revision"]["program"] == "xdp_pass_count", upgraded
    back, _again = assert_rhythm(run, "xdp_program", dict(base, revision="previous"))
    assert back["name"] == "xdp_pass_count" and back["revision"]["rolled_back"], back
    assert back["revision"]["section"] == "prog" and back["revision"]["number"] == 1, back
    assert back["previous_revision"]["program"] == "xdp_drop_count", back
    received = pair.ip_in_receives()
    pair.burst(run, count=20)
    xdp = facts(run, pair.rx, "eth0")["xdp"]
    assert xdp["program"] == "xdp_pass_count" and xdp["section"] == "prog", xdp
    assert xdp["protocols"]["udp"] == 20, xdp
    assert pair.ip_in_receives() - received == 40
    # Forward again with the section as the first run named it: the revision kept, no change.
    res = run("xdp_program", dict(base, object=objects["legacy_xdp"], section="prog"))
    assert res["changed"] is False and res["id"] == back["id"], res


def test_iproute2_loads_the_same_program_from_the_same_section(run_distro, pair, objects):
    """The witnesses: `tc filter add ... bpf da obj F sec redirect_xmit` and `ip link set ... xdp obj F sec xdp1` load
    the same instructions (same tag) as tc_program and xdp_program with those sections."""
    ours = run_distro("tc_program", dict(interface="eth0", netns=pair.rx, object=objects["legacy_tc"],
                                         section="redirect_xmit", method="cls_bpf", direction="egress"))
    assert ours["changed"] and not ours.get("failed"), ours
    sh("tc", "-n", pair.tx, "qdisc", "add", "dev", "eth0", "clsact")
    sh("tc", "-n", pair.tx, "filter", "add", "dev", "eth0", "ingress", "bpf", "da", "obj", objects["legacy_tc"],
       "sec", "redirect_xmit")
    [theirs] = json.loads(sh("tc", "-n", pair.tx, "-j", "filter", "show", "dev", "eth0", "ingress").stdout)[1:] or [None]
    assert theirs["options"]["prog"]["tag"] == ours["tag"], (theirs, ours)
    assert theirs["options"]["prog"]["name"] == "_redirect_xmit"
    # And `ip link set dev eth0 xdpgeneric obj F sec xdp1` beside xdp_program's section: xdp1.
    ours = run_distro("xdp_program", dict(interface="eth0", netns=pair.rx, object=objects["legacy_xdp"],
                                          section="xdp1", mode="generic"))
    assert ours["changed"] and not ours.get("failed"), ours
    sh("ip", "-n", pair.tx, "link", "set", "dev", "eth0", "xdpgeneric", "obj", objects["legacy_xdp"], "sec", "xdp1")
    [link] = json.loads(sh("ip", "-n", pair.tx, "-d", "-j", "link", "show", "dev", "eth0").stdout)
    assert link["xdp"]["prog"]["tag"] == ours["tag"], (link["xdp"], ours)


def test_program_cost_measures_untyped_programs_as_their_hook_would_run_them(run_distro, objects):
    """program_cost by section, with the type the hook would give: each program's own verdict on the frame."""
    res = run_distro("program_cost", dict(object=objects["legacy_xdp"], sections=["xdp1", "prog"], program_type="xdp",
                                          repeat=1000, runs=1))
    assert not res.get("failed") and res["changed"] is False, res
    assert list(res["programs"]) == ["xdp_prog1", "xdp_pass_count"]
    assert [p["verdict"] for p in res["programs"].values()] == ["XDP_DROP", "XDP_PASS"]
    assert {p["type"] for p in res["programs"].values()} == {"xdp"}
    tc = run_distro("program_cost", dict(object=objects["legacy_tc"], program_type="sched_cls", repeat=1000, runs=1))
    assert list(tc["programs"]) == ["_redirect_xmit", "cls_count"] and tc["skipped"] == {}, tc
    assert tc["programs"]["cls_count"]["verdict"] == "TC_ACT_OK"
    # Without program_type nothing of legacy_xdp can be measured: its sections name no type.
    bare = run_distro("program_cost", dict(object=objects["legacy_xdp"], repeat=1000, runs=1))
    assert bare.get("failed") and "has no XDP or tc program to measure" in bare["msg"], bare
    both = run_distro("program_cost", dict(object=objects["legacy_xdp"], sections=["xdp1"], programs=["xdp_prog1"]))
    assert both.get("failed") and both["msg"] == "parameters are mutually exclusive: programs|sections", both


def test_datapath_entry_by_section_and_gathered_fed_back(run_distro, pair, objects, tmp_path):
    """A datapath entry names its program by section: four-step rhythm; gathered shows the section and the
    function, and fed back (overridden) is no change."""
    config = {"xdp": [dict(interface="eth0", netns=pair.rx, object=objects["legacy_xdp"], section="prog",
                           mode="generic")],
              "tc": [dict(interface="eth0", netns=pair.rx, object=objects["legacy_tc"], section="classifier",
                          method="tcx" if kernel_features.features()["tcx"] else "cls_bpf")]}
    first, _second = assert_rhythm(run_distro, "datapath", {"config": config})
    gathered = run_distro("datapath", {"state": "gathered", "namespaces": [pair.rx]})["gathered"]
    assert [(e.get("program"), e["section"]) for e in gathered["xdp"] + gathered["tc"]] == [
        (None, "prog"), (None, "classifier")], gathered
    back = run_distro("datapath", {"state": "overridden", "config": gathered, "namespaces": [pair.rx]})
    assert back["changed"] is False and not back.get("failed"), back
    pair.burst(run_distro, count=10, protocols=("udp",))
    hooks = facts(run_distro, pair.rx, "eth0")
    assert hooks["xdp"]["program"] == "xdp_pass_count" and hooks["xdp"]["section"] == "prog", hooks
    [tc] = hooks["tc"]["ingress"]
    assert tc["program"] == "cls_count" and tc["section"] == "classifier" and tc["protocols"]["udp"] == 10, tc


def test_replay_candidate_by_section(run_distro, pair, objects, tmp_path):
    """replay's candidate named by its section, beside an attached program chosen by its section: the attached
    one is loaded again from the object store with its type from the hook, and the two compared frame by frame."""
    store = str(tmp_path / "store")
    attached = run_distro("xdp_program", dict(interface="eth0", netns=pair.rx, object=objects["legacy_xdp"],
                                              section="prog", object_store=store))
    assert attached["changed"], attached
    pcap = str(tmp_path / "udp.pcap")
    _pcap.write(pcap, [_frames.build_frame("udp", pair.tx_mac, pair.rx_mac, pair.tx_ip, pair.rx_ip)] * 3)
    res = run_distro("replay", dict(interface="eth0", netns=pair.rx, pcap=pcap, object=objects["legacy_xdp"],
                                    section="xdp1", object_store=store))
    assert not res.get("failed") and res["changed"] is False, res
    assert res["attached"]["program"] == "xdp_pass_count" and res["candidate"]["program"] == "xdp_prog1", res
    assert res["transitions"]["XDP_PASS -> XDP_DROP"]["frames"] == 3, res
    bad = run_distro("replay", dict(interface="eth0", netns=pair.rx, pcap=pcap, object=objects["mixed"],
                                    section="socket", object_store=store))
    assert bad.get("failed") and "is a socket_filter program, not xdp" in bad["msg"], bad


def test_a_task_naming_another_program_by_section_is_refused_on_a_taken_hook(run_distro, pair, objects):
    """tc_program keeps one program per attachment: a second task that names another program by its section is
    refused as one naming it by function is, and the hook keeps its program."""
    hook = dict(interface="eth0", netns=pair.rx, method="cls_bpf")
    first = run_distro("tc_program", dict(hook, object=objects["mixed"], program="first_count"))
    assert first["changed"], first
    for check in (True, False):
        res = run_distro("tc_program", dict(hook, object=objects["legacy_tc"], section="redirect_xmit"), check=check)
        assert res.get("failed") and "already holds ebpf.xdp program 'first_count'" in res["msg"], res
    [entry] = facts(run_distro, pair.rx, "eth0")["tc"]["ingress"]
    assert entry["id"] == first["id"]
