"""ebpf.xdp.xdp_program against the real kernel, on veth in namespaces."""

import json
import os

import pytest

from conftest import assert_rhythm, compile_bpf, sh, xdp_attached

BAD_PROGRAM = r"""
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
SEC("xdp")
int xdp_oob(struct xdp_md *ctx)
{
    unsigned char *data = (void *)(long)ctx->data;
    /* No check against data_end: the verifier must refuse this. */
    return data[20] == 1 ? XDP_DROP : XDP_PASS;
}
char _license[] SEC("license") = "GPL";
"""

TC_PROGRAM = r"""
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
SEC("tc")
int tc_pass(struct __sk_buff *skb) { return 0; }
char _license[] SEC("license") = "GPL";
"""

DEFAULT_ACTION_PROGRAM = r"""
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
const volatile __u32 action = ACTION;
SEC("xdp")
int xdp_act(struct xdp_md *ctx) { return action; }
char _license[] SEC("license") = "GPL";
"""


def compile_c(tmp_path, text, name):
    src = tmp_path / (name + ".bpf.c")
    src.write_text(text)
    return compile_bpf(src, tmp_path / (name + ".o"))


def pins(pin_root):
    found = []
    for dirpath, dirnames, filenames in os.walk(pin_root):
        found += [os.path.join(dirpath, f) for f in filenames]
    return sorted(found)


@pytest.mark.debian12("xdp_program", "xdp_trafficgen")
@pytest.mark.parametrize("mode", ["native", "generic"])
def test_attach_rhythm_and_counts(run, pair, drop_obj, mode):
    args = dict(interface="eth0", netns=pair.rx, object=drop_obj, program="xdp_drop_count", mode=mode)
    first, second = assert_rhythm(run, "xdp_program", args)
    assert first["mode"] == mode and second["id"] == first["id"]
    # The witness agrees with what the module reported.
    assert xdp_attached(pair.rx) == {mode: first["id"]}

    sent = pair.burst(run, count=40, protocols=("udp", "tcp", "icmp"))
    facts = run("xdp_facts", dict(netns=pair.rx))["ansible_facts"]["xdp"]
    prog = facts["interfaces"]["eth0"]["xdp"]
    assert prog["id"] == first["id"] and prog["owner"] == "ebpf.xdp" and prog["mode"] == mode
    assert prog["protocols"] == {"udp": 40, "tcp": 40, "icmp": 40}, (sent, prog)
    assert prog["counters"]["proto_count"] == {"1": 40, "6": 40, "17": 40}
    assert facts["interfaces"]["eth0"]["stats"]["rx_packets"] == 120
    # Dropped by XDP: the receiver's IP stack never saw them.
    assert pair.ip_in_receives() == 0


def test_auto_picks_native_on_veth_and_generic_on_lo(run_distro, pair, drop_obj):
    res = run_distro("xdp_program", dict(interface="eth0", netns=pair.rx, object=drop_obj, mode="auto"))
    assert res["changed"] and res["mode"] == "native", res
    lo = run_distro("xdp_program", dict(interface="lo", netns=pair.rx, object=drop_obj, mode="auto"))
    assert lo["changed"] and lo["mode"] == "generic", lo
    again = run_distro("xdp_program", dict(interface="lo", netns=pair.rx, object=drop_obj, mode="auto"))
    assert again["changed"] is False


def test_upgrade_is_atomic_and_keeps_counters(run, pair, drop_obj):
    base = dict(interface="eth0", netns=pair.rx, object=drop_obj, mode="native")
    first = run("xdp_program", base)
    pair.burst(run, count=10, protocols=("udp",))
    # Switch to count-only (XDP_PASS = 2): a new program through the same link.
    upgraded_args = dict(base, constants={"xdp_action": 2})
    check = run("xdp_program", upgraded_args, check=True, diff=True)
    assert check["changed"] and check["diff"]["before"]["constants"] == {}
    upgraded = assert_rhythm(run, "xdp_program", upgraded_args)[0]
    assert upgraded["id"] != first["id"]
    assert upgraded["link_id"] == first["link_id"], "bpf_link_update keeps the link"
    assert upgraded["maps"] == first["maps"]
    pair.burst(run, count=10, protocols=("udp",))
    prog = run("xdp_facts", dict(netns=pair.rx))["ansible_facts"]["xdp"]["interfaces"]["eth0"]
    assert prog["xdp"]["protocols"]["udp"] == 20, "counters survive the upgrade"
    assert pair.ip_in_receives() == 10, "the second program passes frames to the stack"


def test_mode_change_reattaches(run_distro, pair, drop_obj):
    base = dict(interface="eth0", netns=pair.rx, object=drop_obj)
    run_distro("xdp_program", dict(base, mode="native"))
    res = assert_rhythm(run_distro, "xdp_program", dict(base, mode="generic"))[0]
    assert res["mode"] == "generic"
    assert "xdpgeneric" in sh("ip", "-n", pair.rx, "link", "show", "eth0").stdout


def test_absent_removes_everything(run, pair, drop_obj, pin_root):
    run("xdp_program", dict(interface="eth0", netns=pair.rx, object=drop_obj))
    assert pins(pin_root)
    args = dict(interface="eth0", netns=pair.rx, state="absent")
    first = assert_rhythm(run, "xdp_program", args)[0]
    assert first["attached"] is False
    assert pair.xdp_line() == ""
    assert pins(pin_root) == []


def test_absent_keep_maps_then_reattach_continues_counting(run_distro, pair, drop_obj, pin_root):
    base = dict(interface="eth0", netns=pair.rx, object=drop_obj)
    run_distro("xdp_program", base)
    pair.burst(run_distro, count=5, protocols=("tcp",))
    run_distro("xdp_program", dict(base, state="absent", keep_maps=True))
    assert [os.path.basename(p) for p in pins(pin_root)] == ["proto_count"]
    run_distro("xdp_program", base)
    pair.burst(run_distro, count=5, protocols=("tcp",))
    prog = run_distro("xdp_facts", dict(netns=pair.rx))["ansible_facts"]["xdp"]["interfaces"]["eth0"]["xdp"]
    assert prog["protocols"] == {"tcp": 10}


def test_attachment_outlives_the_module(run_distro, pair, drop_obj):
    res = run_distro("xdp_program", dict(interface="eth0", netns=pair.rx, object=drop_obj))
    # The module process is gone; the kernel still runs the program through the pinned link.
    out = json.loads(sh("ip", "netns", "exec", pair.rx, "bpftool", "-j", "net", "show", "dev", "eth0").stdout)
    assert [p["id"] for p in out[0]["xdp"]] == [res["id"]], out


# ------------------------------------------------------------------ bad input


def assert_untouched(pair, pin_root):
    assert pair.xdp_line() == ""
    assert pins(pin_root) == []


def test_missing_interface(run, pair, drop_obj, pin_root):
    res = run("xdp_program", dict(interface="nope0", netns=pair.rx, object=drop_obj))
    assert res["failed"] and "'nope0' does not exist" in res["msg"], res
    assert pins(pin_root) == []


def test_missing_netns(run_distro, drop_obj, pin_root):
    res = run_distro("xdp_program", dict(interface="eth0", netns="no-such-ns", object=drop_obj))
    assert res["failed"] and "network namespace 'no-such-ns' does not exist" in res["msg"], res
    assert pins(pin_root) == []


def test_missing_object(run_distro, pair, pin_root):
    res = run_distro("xdp_program", dict(interface="eth0", netns=pair.rx, object="/nonexistent.o"))
    assert res["failed"] and "does not exist" in res["msg"]
    assert pins(pin_root) == []


def test_wrong_program_name(run_distro, pair, drop_obj, pin_root):
    res = run_distro("xdp_program", dict(interface="eth0", netns=pair.rx, object=drop_obj, program="xdp_nope"))
    assert res["failed"] and "'xdp_nope' is not in" in res["msg"] and "xdp_drop_count" in res["msg"], res
    assert_untouched(pair, pin_root)


def test_not_an_xdp_program(run_distro, pair, tmp_path, pin_root):
    obj = compile_c(tmp_path, TC_PROGRAM, "tc_pass")
    res = run_distro("xdp_program", dict(interface="eth0", netns=pair.rx, object=obj, program="tc_pass"))
    assert res["failed"] and "not xdp" in res["msg"], res
    assert_untouched(pair, pin_root)


def test_unknown_constant(run_distro, pair, drop_obj, pin_root):
    res = run_distro("xdp_program", dict(interface="eth0", netns=pair.rx, object=drop_obj,
                                         constants={"no_such_setting": 1}))
    assert res["failed"] and "no_such_setting" in res["msg"] and "xdp_action" in res["msg"], res
    assert_untouched(pair, pin_root)


def test_unsupported_mode_value(run_distro, pair, drop_obj):
    res = run_distro("xdp_program", dict(interface="eth0", netns=pair.rx, object=drop_obj, mode="offload"))
    assert res["failed"] and "value of mode must be one of" in res["msg"], res


def test_native_on_a_driver_without_xdp(run_distro, pair, drop_obj, pin_root):
    res = run_distro("xdp_program", dict(interface="lo", netns=pair.rx, object=drop_obj, mode="native"))
    assert res["failed"] and "no native XDP support" in res["msg"], res
    assert pins(pin_root) == []
    assert "prog/xdp" not in sh("ip", "-n", pair.rx, "link", "show", "lo").stdout


def test_verifier_rejection_keeps_the_old_program(run_distro, pair, drop_obj, tmp_path, pin_root):
    good = run_distro("xdp_program", dict(interface="eth0", netns=pair.rx, object=drop_obj))
    before = pins(pin_root)
    bad = compile_c(tmp_path, BAD_PROGRAM, "xdp_oob")
    for check in (True, False):
        res = run_distro("xdp_program", dict(interface="eth0", netns=pair.rx, object=bad), check=check)
        assert res["failed"], res
        assert "rejected" in res["msg"] and res["verifier_log_tail"], res
        assert any("invalid access to packet" in line for line in res["verifier_log_tail"]), res
    assert pair.xdp_prog_id() == good["id"]
    assert pins(pin_root) == before


def test_verifier_rejection_on_first_attach_leaves_nothing(run_distro, pair, tmp_path, pin_root):
    bad = compile_c(tmp_path, BAD_PROGRAM, "xdp_oob")
    res = run_distro("xdp_program", dict(interface="eth0", netns=pair.rx, object=bad))
    assert res["failed"] and res["verifier_log_tail"]
    assert_untouched(pair, pin_root)
    assert not os.path.exists(pin_root) or os.listdir(pin_root) == []


def test_no_bpffs(run_distro, pair, drop_obj, tmp_path):
    res = run_distro("xdp_program", dict(interface="eth0", netns=pair.rx, object=drop_obj,
                                         pin_root=str(tmp_path / "pins")))
    assert res["failed"] and "not on a BPF filesystem" in res["msg"], res
    assert pair.xdp_line() == ""
    assert not (tmp_path / "pins").exists()


def test_no_privileges(run_distro, pair, drop_obj, pin_root):
    res = run_distro("xdp_program", dict(interface="eth0", netns=pair.rx, object=drop_obj), no_caps=True)
    assert res["failed"] and "needs CAP_BPF, CAP_NET_ADMIN, CAP_SYS_ADMIN" in res["msg"], res
    assert_untouched(pair, pin_root)


def attach_foreign(pair, obj):
    """Attach the way users do by hand today: ip link set ... xdp obj (netlink, no pins of ours)."""
    sh("ip", "-n", pair.rx, "link", "set", "dev", "eth0", "xdpdrv", "obj", obj, "sec", "xdp")
    line = pair.xdp_line()
    assert "prog/xdp" in line
    return line


def test_foreign_program_is_left_alone(run, pair, drop_obj, pin_root):
    line = attach_foreign(pair, drop_obj)
    res = run("xdp_program", dict(interface="eth0", netns=pair.rx, object=drop_obj))
    assert res["failed"] and "did not attach" in res["msg"] and "force: true" in res["msg"], res
    absent = run("xdp_program", dict(interface="eth0", netns=pair.rx, state="absent"))
    assert absent["changed"] is False and "not managed by ebpf.xdp" in " ".join(absent.get("warnings", []))
    facts = run("xdp_facts", dict(netns=pair.rx))["ansible_facts"]["xdp"]
    assert facts["interfaces"]["eth0"]["xdp"]["owner"] == "unmanaged"
    assert pair.xdp_line() == line
    assert pins(pin_root) == []


def test_force_takes_over_a_netlink_program_atomically(run_distro, pair, drop_obj, pin_root):
    attach_foreign(pair, drop_obj)
    args = dict(interface="eth0", netns=pair.rx, object=drop_obj, force=True, mode="native")
    res = assert_rhythm(run_distro, "xdp_program", args)[0]
    assert res["attach"] == "netlink", res
    # An upgrade of a netlink-held program replaces it with XDP_FLAGS_REPLACE.
    up = assert_rhythm(run_distro, "xdp_program", dict(args, constants={"xdp_action": 2}))[0]
    assert up["attach"] == "netlink" and up["id"] != res["id"]
    assert pair.xdp_prog_id() == up["id"]
    gone = run_distro("xdp_program", dict(interface="eth0", netns=pair.rx, state="absent"))
    assert gone["changed"] and pair.xdp_line() == "" and pins(pin_root) == []


def test_force_removes_a_foreign_program(run_distro, pair, drop_obj):
    attach_foreign(pair, drop_obj)
    res = run_distro("xdp_program", dict(interface="eth0", netns=pair.rx, state="absent", force=True))
    assert res["changed"] and pair.xdp_line() == ""


def test_interpreter_without_pyroute2_respawns_under_system_python(pair, drop_obj, pin_root, tmp_path):
    """A bare virtualenv (no pyroute2) still works: xdp_program needs no pyroute2, xdp_facts re-runs
    under /usr/bin/python3."""
    from conftest import ModuleRunner
    venv = tmp_path / "bare"
    sh("/usr/bin/python3", "-m", "venv", "--without-pip", str(venv))
    bare = ModuleRunner(str(venv / "bin" / "python3"), pin_root, via_ansible=True)  # respawn needs AnsiballZ
    res = bare("xdp_program", dict(interface="eth0", netns=pair.rx, object=drop_obj))
    assert res["changed"] and res["attached"], res
    assert pair.xdp_prog_id() == res["id"]
    facts = bare("xdp_facts", dict(netns=pair.rx))
    assert facts["ansible_facts"]["xdp"]["interfaces"]["eth0"]["xdp"]["id"] == res["id"], facts


def test_concurrent_runs_on_one_interface_are_serialised(run_distro, pair, drop_obj):
    """Two tasks racing for one interface: the lock lets one attach, the other finds it done."""
    from concurrent.futures import ThreadPoolExecutor
    args = dict(interface="eth0", netns=pair.rx, object=drop_obj)
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(lambda _n: run_distro("xdp_program", args), range(2)))
    assert not any(r.get("failed") for r in results), [r.get("msg") for r in results]
    assert sorted(r["changed"] for r in results) == [False, True], results
    assert results[0]["id"] == results[1]["id"]
    assert pair.xdp_prog_id() == results[0]["id"]


def test_program_name_may_be_omitted(run_distro, pair, drop_obj):
    args = dict(interface="eth0", netns=pair.rx, object=drop_obj)
    first = run_distro("xdp_program", args)
    assert first["changed"] and first["name"] == "xdp_drop_count"
    facts = run_distro("xdp_facts", dict(netns=pair.rx))["ansible_facts"]["xdp"]
    assert facts["interfaces"]["eth0"]["xdp"]["program"] == "xdp_drop_count"
    assert run_distro("xdp_program", args)["changed"] is False


def test_failed_mode_switch_puts_the_old_program_back(run_distro, pair, drop_obj, pin_root):
    """lo has no native XDP: switching its generic program to native fails and keeps the old one."""
    base = dict(interface="lo", netns=pair.rx, object=drop_obj)
    first = run_distro("xdp_program", dict(base, mode="generic"))
    res = run_distro("xdp_program", dict(base, mode="native"))
    assert res["failed"] and "no native XDP support" in res["msg"], res
    assert xdp_attached(pair.rx, "lo") == {"generic": first["id"]}
    again = run_distro("xdp_program", dict(base, mode="generic"))
    assert again["changed"] is False and again["id"] == first["id"], again


def test_rebuilt_object_with_a_different_default_is_a_change(run_distro, pair, tmp_path):
    """Same instructions, different .rodata default: the tag is equal, the behaviour is not."""
    src_dir = tmp_path / "src"
    src_dir.mkdir()
    objs = []
    for action in ("XDP_DROP", "XDP_PASS"):
        (src_dir / "act.bpf.c").write_text(DEFAULT_ACTION_PROGRAM.replace("ACTION", action))
        objs.append(compile_bpf(src_dir / "act.bpf.c", tmp_path / ("act_%s.o" % action)))
    drop = run_distro("xdp_program", dict(interface="eth0", netns=pair.rx, object=objs[0]))
    passing = run_distro("xdp_program", dict(interface="eth0", netns=pair.rx, object=objs[1]))
    assert passing["changed"] and passing["tag"] == drop["tag"] and passing["id"] != drop["id"], passing
    # The same object copied elsewhere (new path, same bytes) changes nothing in the kernel.
    copy = tmp_path / "copy.o"
    copy.write_bytes(open(objs[1], "rb").read())
    same = run_distro("xdp_program", dict(interface="eth0", netns=pair.rx, object=str(copy)))
    assert same["changed"] is False and same["id"] == passing["id"]
    assert run_distro("xdp_program", dict(interface="eth0", netns=pair.rx, object=str(copy)))["changed"] is False


TARGET_PROGRAM = r"""
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
const volatile __u32 target_ifindex = 0;
SEC("xdp")
int xdp_tgt(struct xdp_md *ctx) { return target_ifindex ? XDP_PASS : XDP_ABORTED; }
char _license[] SEC("license") = "GPL";
"""


def test_interface_constants_resolve_in_the_namespace_and_follow_a_recreated_target(run_distro, pair, tmp_path):
    """constants: {target_ifindex: {ifindex: tgt0}} is tgt0's index where the program runs; a new index reloads."""
    obj = compile_c(tmp_path, TARGET_PROGRAM, "xdp_tgt")
    sh("ip", "-n", pair.rx, "link", "add", "tgt0", "type", "veth", "peer", "name", "tgt1")
    args = dict(interface="eth0", netns=pair.rx, object=obj, constants={"target_ifindex": {"ifindex": "tgt0"}})
    first = assert_rhythm(run_distro, "xdp_program", args)[0]
    # The name is looked up where the program runs: the sender has no tgt0.
    elsewhere = run_distro("xdp_program", dict(args, netns=pair.tx))
    assert elsewhere["failed"] and "interface 'tgt0' does not exist" in elsewhere["msg"], elsewhere
    sh("ip", "-n", pair.rx, "link", "del", "tgt0")
    sh("ip", "-n", pair.rx, "link", "add", "tgt0", "type", "veth", "peer", "name", "tgt1")
    again = run_distro("xdp_program", args)
    assert again["changed"] and again["id"] != first["id"], "a re-created target has a new ifindex: reload"
    assert run_distro("xdp_program", args)["changed"] is False
    sh("ip", "-n", pair.rx, "link", "del", "tgt0")
    res = run_distro("xdp_program", args)
    assert res["failed"] and "constant target_ifindex: interface 'tgt0' does not exist" in res["msg"], res
    assert pair.xdp_prog_id() == again["id"], "a failed run leaves the program in place"
    res = run_distro("xdp_program", dict(args, constants={"target_ifindex": {"name": "tgt0"}}))
    assert res["failed"] and "give a number, a boolean, or {ifindex: INTERFACE}" in res["msg"], res
