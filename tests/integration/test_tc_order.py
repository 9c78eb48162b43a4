"""Several tc programs of the collection on one hook, as named attachments, in a declared order, beside a program
the collection did not attach: on the real kernel, real veth in fresh namespaces, real frames.

The witness of the order is the kernel's own answer to BPF_PROG_QUERY on the tcx hook (through the binding:
Debian's bpftool 7.1 predates tcx in `bpftool net`), and the frames each program counts. On tcx a program
returning TCX_NEXT (-1, TC_ACT_UNSPEC) hands the frame to the next one; any other verdict ends the chain
(TC_ACT_OK passes the frame up the stack, unseen by the programs after it): so when every program but the last
returns TCX_NEXT, each one counts every frame, and when the first one passes (TC_ACT_OK), only it counts them.
cls_bpf filters in direct-action mode chain the same way, in priority order.

Tests that need tcx are marked kernel("tcx"): on a kernel without it (Debian 12's 6.1) each asserts the refusal
of its own first call that needs tcx (kernel_features.Watch), and test_ordering_without_tcx_is_refused asserts the ordering options' own refusal there.
"""

import contextlib
import json
import os
import shutil
import subprocess

import pytest

import kernel_features
import pin_snapshot
from conftest import (ROOT, SYSTEM_PYTHON, ansible_playbook, assert_rhythm, changed_by_host, module_result, sh,
                      task_results)
from kernel_features import needs
from test_tc_program import filters, has_clsact, send_paced
from test_xdp_program import compile_c, pins

from ansible_collections.ebpf.xdp.plugins.module_utils.bpf import libbpf as _bpf, loader as _loader
from ansible_collections.ebpf.xdp.plugins.module_utils.host import netns as _netns

TCX_NEXT, TC_OK, TC_SHOT = -1, 0, 2

# The program another tool attached: it counts every frame it sees, then hands it on.
FOREIGN_COUNT = r"""
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct {
    __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
    __type(key, __u32);
    __type(value, __u64);
    __uint(max_entries, 1);
} seen SEC(".maps");

SEC("tc")
int foreign_count(struct __sk_buff *skb)
{
    __u32 key = 0;
    __u64 *count = bpf_map_lookup_elem(&seen, &key);

    if (count)
        *count += 1;
    return -1; /* TCX_NEXT */
}
char _license[] SEC("license") = "GPL";
"""

# The commit before named attachments: the collection as it attached tc programs until then.
BEFORE_NAMES = "5ac49f3"


def named(pair, tc_obj, name, action, method="tcx", **extra):
    """A tc_drop_count attachment called name on rx's eth0 ingress, returning `action` after counting."""
    return dict(interface="eth0", netns=pair.rx, object=tc_obj, program="tc_drop_count", method=method, name=name,
                constants={"tc_action": action}, **extra)


def absent(pair, name=None, method="tcx"):
    args = dict(interface="eth0", netns=pair.rx, method=method, state="absent")
    if name:
        args["name"] = name
    return args


def kernel_order(pair, direction="ingress"):
    """The witness: the program ids of the tcx hook in run order, as the kernel answers BPF_PROG_QUERY."""
    attach_type = {"ingress": _bpf.BPF_TCX_INGRESS, "egress": _bpf.BPF_TCX_EGRESS}[direction]
    with _netns.netns(pair.rx):
        return pin_snapshot.tcx_prog_ids(_netns.ifindex("eth0"), attach_type)


def chain(run, pair):
    """What xdp_facts reports of the ingress hook, in its order: (our attachment's name, or the foreign program's
    name; its id; the UDP frames it counted)."""
    facts = run("xdp_facts", dict(netns=pair.rx, interfaces=["eth0"]))["ansible_facts"]["xdp"]
    out = []
    for entry in facts["interfaces"]["eth0"]["tc"]["ingress"]:
        if entry["owner"] == "ebpf.xdp":
            out.append((entry["attachment"], entry["id"], entry.get("protocols", {}).get("udp", 0)))
        else:
            assert entry["attachment"] is None, entry
            out.append((entry["name"], entry["id"], sum(entry["counters"].get("seen", {}).values())))
    return out


@contextlib.contextmanager
def foreign_tcx(pair, obj, **order):
    """foreign_count on rx's eth0 tcx ingress, attached the way another tool would (libbpf, no pins of ours), held
    by this process for the test's duration: its program id."""
    with _netns.netns(pair.rx), _loader.load(obj, "foreign_count", "sched_cls") as loaded:
        link = _bpf.Link.create_tcx(loaded.program, _netns.ifindex("eth0"), _bpf.BPF_TCX_INGRESS, **order)
    with link:
        yield loaded.info["id"]


@pytest.fixture
def foreign_obj(tmp_path):
    return compile_c(tmp_path, FOREIGN_COUNT, "foreign_count")


def three_around(run, pair, tc_obj, foreign):
    """first before the foreign program (by its id), second after it (by its program name), third after second
    (by our attachment's name); each with the four-step rhythm. Every one but the last hands frames on."""
    results = {}
    for name, action, order in (("first", TCX_NEXT, dict(before=foreign)),
                                ("second", TCX_NEXT, dict(after="foreign_count")),
                                ("third", TC_SHOT, dict(after="second"))):
        results[name] = assert_rhythm(run, "tc_program", named(pair, tc_obj, name, action, **order))[0]
        assert results[name]["attachment"] == name and results[name]["method"] == "tcx", results[name]
        assert results[name]["pin_dir"].endswith("/eth0/tc_ingress@" + name), results[name]
    return results


# ------------------------------------------------------------------ tcx


@pytest.mark.kernel("tcx")
def test_three_named_programs_in_the_declared_order_around_a_foreign_one(
        run_distro, pair, tc_obj, foreign_obj, pin_root):
    with foreign_tcx(pair, foreign_obj) as foreign:
        ours = three_around(run_distro, pair, tc_obj, foreign)
        ids = [ours["first"]["id"], foreign, ours["second"]["id"], ours["third"]["id"]]
        assert kernel_order(pair) == ids
        # Each has its own pins, record and maps.
        for name in ours:
            assert os.path.exists(os.path.join(pin_root, pair.rx, "eth0", "tc_ingress@" + name, "maps", "proto_count"))
        assert len({tuple(sorted(r["maps"].values())) for r in ours.values()}) == 3

        pair.burst(run_distro, count=40, protocols=["udp"])
        assert chain(run_distro, pair) == [("first", ids[0], 40), ("foreign_count", foreign, 40),
                                           ("second", ids[2], 40), ("third", ids[3], 40)]

        # The first one passes the frames (TC_ACT_OK): the chain ends there, the others see nothing more.
        passing = assert_rhythm(run_distro, "tc_program",
                                named(pair, tc_obj, "first", TC_OK, before=foreign))[0]
        assert passing["link_id"] == ours["first"]["link_id"] and passing["id"] != ids[0], passing
        assert kernel_order(pair) == [passing["id"]] + ids[1:], "an upgrade keeps its place"
        # rx's stack now answers the datagrams (an ARP reply comes back, counted as another protocol): UDP only.
        pair.burst(run_distro, count=25, protocols=["udp"])
        assert chain(run_distro, pair) == [("first", passing["id"], 65), ("foreign_count", foreign, 40),
                                           ("second", ids[2], 40), ("third", ids[3], 40)]


@pytest.mark.kernel("tcx")
def test_tagged_anchors_name_what_their_tag_says_and_nothing_else(run_distro, pair, tc_obj, foreign_obj, pin_root,
                                                                  tmp_path):
    """before/after tagged ({attachment:}, {program:}, {id:}) place each program where the tag says, in the
    four-step rhythm; a foreign program called like one of our attachments is found by {program:} and never by
    {attachment:}; a tag naming nothing there is an error that changes nothing."""
    with foreign_tcx(pair, foreign_obj) as foreign:
        steps = (("foreign_count", TCX_NEXT, dict(before={"id": foreign})),  # our attachment, called as the foreign
                 ("second", TCX_NEXT, dict(after={"program": "foreign_count"})),  # program: the tag decides
                 ("third", TC_SHOT, dict(after={"attachment": "foreign_count"})))
        ours = {}
        for name, action, order in steps:
            ours[name] = assert_rhythm(run_distro, "tc_program", named(pair, tc_obj, name, action, **order))[0]
        assert kernel_order(pair) == [ours["foreign_count"]["id"], ours["third"]["id"], foreign, ours["second"]["id"]]
        gathered = run_distro("datapath", {"state": "gathered", "namespaces": [pair.rx]})["gathered"]["tc"]
        assert {e["name"]: e.get("after") or e.get("before") for e in gathered} == {
            "foreign_count": {"id": foreign}, "second": {"program": "foreign_count"},
            "third": {"attachment": "foreign_count"}}, gathered
        where = {"namespaces": [pair.rx], "pin_root": pin_root, "objects": str(tmp_path), "cache": str(tmp_path)}
        before = pin_snapshot.snapshot(where)
        for order, words in ((dict(before={"attachment": "nope"}), "before names attachment nope of ebpf.xdp, which "
                                                                   "is not on it"),
                             (dict(before={"program": "nope"}), "before names program 'nope', and no other program "
                                                                "there is called so"),
                             (dict(before={"tag": "x"}), "before takes one of {attachment: ..., program: ...")):
            for check in (True, False):
                res = run_distro("tc_program", named(pair, tc_obj, "fourth", TCX_NEXT, **order), check=check)
                assert res.get("failed") and words in res["msg"] and not res.get("changed"), res
                assert pin_snapshot.snapshot(where) == before


@pytest.mark.kernel("tcx")
def test_each_upgraded_under_traffic_while_the_others_count_every_frame(run_distro, pair, tc_obj, foreign_obj):
    """Each of ours upgraded in turn (a new program: an unrelated setting changed), with the four-step rhythm,
    while frames arrive: the link stays, so its place does, and no program of the chain misses a frame."""
    with foreign_tcx(pair, foreign_obj) as foreign:
        ours = three_around(run_distro, pair, tc_obj, foreign)
        before = kernel_order(pair)
        sent = 12000
        sender = send_paced(pair, sent, 2000)
        try:
            for name, action, order in (("first", TCX_NEXT, dict(before=foreign)),
                                        ("second", TCX_NEXT, dict(after="foreign_count")),
                                        ("third", TC_SHOT, dict(after="second"))):
                args = named(pair, tc_obj, name, action, **order)
                args["constants"] = dict(args["constants"], after_clone=1)
                up = assert_rhythm(run_distro, "tc_program", args)[0]
                assert up["link_id"] == ours[name]["link_id"] and up["id"] != ours[name]["id"], up
                assert up["maps"] == ours[name]["maps"] and not up["interrupted"], up
                assert up["revision"]["number"] == 2, up
                before[before.index(ours[name]["id"])] = up["id"]
                assert kernel_order(pair) == before, "the upgrade of %s kept every place" % name
        finally:
            sender.wait()
        assert sender.returncode == 0
        assert [seen for _name, _id, seen in chain(run_distro, pair)] == [sent] * 4


@pytest.mark.kernel("tcx")
def test_removed_one_by_one_the_foreign_one_stays(run_distro, pair, tc_obj, foreign_obj, pin_root):
    with foreign_tcx(pair, foreign_obj) as foreign:
        ours = three_around(run_distro, pair, tc_obj, foreign)
        gone = assert_rhythm(run_distro, "tc_program", absent(pair, "second"))[0]
        assert gone["attached"] is False and gone["pin_dir"].endswith("tc_ingress@second"), gone
        assert kernel_order(pair) == [ours["first"]["id"], foreign, ours["third"]["id"]]
        left = sorted(os.listdir(os.path.join(pin_root, pair.rx, "eth0")))
        assert left == ["tc_ingress@first", "tc_ingress@third"], left
        # third still says "after: second", which names nothing now: an error, nothing changed.
        res = run_distro("tc_program", named(pair, tc_obj, "third", TC_SHOT, after="second"))
        assert res["failed"] and "after 'second' names nothing there" in res["msg"], res
        # The unnamed attachment is not any of them: removing it removes nothing.
        nothing = run_distro("tc_program", absent(pair))
        assert nothing["changed"] is False and not nothing.get("failed"), nothing
        for name in ("third", "first"):
            assert_rhythm(run_distro, "tc_program", absent(pair, name))
        assert kernel_order(pair) == [foreign]
        assert pins(pin_root) == []
        assert [entry[0] for entry in chain(run_distro, pair)] == ["foreign_count"]


@pytest.mark.kernel("tcx")
def test_a_program_on_the_wrong_side_is_moved_without_a_gap(run_distro, pair, tc_obj, foreign_obj):
    """Attached without before/after it goes last (where the kernel appends); a task then saying before the
    foreign program moves it there: a new link at the place first, then the old one detached (warned), never
    without the program; the maps, counts and revision stay. The default place is no change for a task without
    before/after."""
    # Both hand the frames on, up rx's stack: a permanent neighbour entry for tx spares it the ARP request whose
    # reply the foreign program would count (it counts every frame, not only UDP).
    sh("ip", "-n", pair.rx, "neigh", "replace", pair.tx_ip, "lladdr", pair.tx_mac, "dev", "eth0", "nud", "permanent")
    with foreign_tcx(pair, foreign_obj) as foreign:
        args = named(pair, tc_obj, "mover", TCX_NEXT)
        last = assert_rhythm(run_distro, "tc_program", args)[0]
        assert kernel_order(pair) == [foreign, last["id"]]
        pair.burst(run_distro, count=10, protocols=["udp"])
        moved = assert_rhythm(run_distro, "tc_program", dict(args, before="foreign_count"))[0]
        assert moved["id"] != last["id"] and moved["link_id"] != last["link_id"], moved
        assert moved["interrupted"] is False and moved["maps"] == last["maps"], moved
        assert moved["revision"]["number"] == 1 and moved["previous_revision"] is None, moved
        assert any("moved to its place (before foreign_count)" in w and "ran at both places" in w
                   for w in moved["warnings"]), moved
        assert kernel_order(pair) == [moved["id"], foreign]
        pair.burst(run_distro, count=10, protocols=["udp"])
        assert chain(run_distro, pair) == [("mover", moved["id"], 20), ("foreign_count", foreign, 20)]
        # Without before/after, any place is the task's: no change.
        still = run_distro("tc_program", args)
        assert still["changed"] is False and kernel_order(pair) == [moved["id"], foreign], still


@pytest.mark.kernel("tcx")
def test_a_new_foreign_program_in_front_is_left_where_its_tool_put_it(run_distro, pair, tc_obj, foreign_obj):
    """after: X is satisfied anywhere after X: another program put between them moves nothing."""
    first = assert_rhythm(run_distro, "tc_program", named(pair, tc_obj, "a", TCX_NEXT))[0]
    second = assert_rhythm(run_distro, "tc_program", named(pair, tc_obj, "b", TCX_NEXT, after="a"))[0]
    with foreign_tcx(pair, foreign_obj, flags=_bpf.BPF_F_AFTER, relative_id=first["id"]) as foreign:
        assert kernel_order(pair) == [first["id"], foreign, second["id"]]
        again = run_distro("tc_program", named(pair, tc_obj, "b", TCX_NEXT, after="a"))
        assert again["changed"] is False and kernel_order(pair) == [first["id"], foreign, second["id"]], again


# ------------------------------------------------------------------ attachments made before names existed


def old_collection(tmp_path, commit=BEFORE_NAMES):
    """A PYTHONPATH with ansible-core and the collection as it was at commit (from this checkout's git), or None
    where the checkout has no such history (a copy without .git, or no git: the lab's VM)."""
    if not shutil.which("git"):
        return None
    path = tmp_path / "old"
    tree = path / "ansible_collections" / "ebpf" / "xdp"
    tree.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", ROOT, "archive", commit, "plugins"], capture_output=True, check=False)
    if archive.returncode != 0:
        return None
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)
    import ansible  # pylint: disable=import-outside-toplevel
    os.symlink(os.path.dirname(ansible.__file__), path / "ansible")
    return str(path)


def run_old(path, args, module="tc_program"):
    """A module of the collection at path (see old_collection), run as conftest's ModuleRunner runs a module
    (watched as it watches one, on a kernel without a feature the test needs)."""
    def run():
        proc = subprocess.run([SYSTEM_PYTHON, "-m", "ansible_collections.ebpf.xdp.plugins.modules." + module],
                              input=json.dumps({"ANSIBLE_MODULE_ARGS": dict(args, _ansible_module_name=module)}),
                              capture_output=True, text=True, cwd="/tmp", check=False,
                              env=dict(os.environ, PYTHONPATH=path))
        return module_result(proc)
    watch = kernel_features.watching()
    return watch.module_run(run, module, args, False) if watch else run()


def without_names(record_path):
    """The record as the collection wrote it before names (the keys this change added, left out)."""
    script = ("import sys; sys.path.insert(0, %r)\n"
              "from ansible_collections.ebpf.xdp.plugins.module_utils.bpf import pins as _pins\n"
              "record = _pins.Record(%r)\n"
              "old = {k: v for k, v in record.read().items()\n"
              "       if k not in ('attachment', 'requested_before', 'requested_after')}\n"
              "record.write(old)\n" % (ROOT + "/.build/collections", record_path))
    sh(SYSTEM_PYTHON, "-c", script)


@pytest.mark.parametrize("method", [needs("tcx", "tcx"), "cls_bpf"])
def test_an_attachment_made_before_names_keeps_working(run_distro, pair, tc_obj, pin_root, tmp_path, method):
    """An attachment made by the collection before names (its code from git, or, in a copy without history, its
    record as that code wrote it): a task without a name is no change and upgrades it in place; a task with a
    name attaches a second program beside it; absent without a name removes only the old one."""
    old_path = old_collection(tmp_path)
    args = dict(interface="eth0", netns=pair.rx, object=tc_obj, program="tc_drop_count", method=method,
                constants={"tc_action": TCX_NEXT})
    if old_path:
        made = run_old(old_path, dict(args, pin_root=pin_root))
        print("\nattached by the collection at %s" % BEFORE_NAMES)
    else:
        made = run_distro("tc_program", args)
        without_names(os.path.join(made["pin_dir"], "owner"))
        print("\nno git history: the record rewritten as before names")
    assert made["changed"] and not made.get("failed"), made
    assert made["pin_dir"] == os.path.join(pin_root, pair.rx, "eth0", "tc_ingress")
    before = pins(pin_root)

    for check in (True, False):
        same = run_distro("tc_program", args, check=check)
        assert same["changed"] is False and same["id"] == made["id"] and same["attachment"] is None, same
    assert pins(pin_root) == before

    up = assert_rhythm(run_distro, "tc_program", dict(args, constants={"tc_action": TC_SHOT}))[0]
    assert up["id"] != made["id"] and up["pin_dir"] == made["pin_dir"] and up["revision"]["number"] == 2, up
    assert up["maps"] == made["maps"] and not up["interrupted"], up

    beside = assert_rhythm(run_distro, "tc_program", dict(args, name="beside"))[0]
    assert beside["attachment"] == "beside" and beside["pin_dir"] == made["pin_dir"] + "@beside", beside
    assert beside["maps"] != up["maps"] and beside["revision"]["number"] == 1, beside
    if method == "tcx":
        assert kernel_order(pair) == [up["id"], beside["id"]]
    else:
        assert beside["priority"] == up["priority"] + 1, (up, beside)
        assert [f["options"]["prog"]["id"] for f in sorted(filters(pair.rx), key=lambda f: f["pref"])] == \
            [up["id"], beside["id"]]
    facts = run_distro("xdp_facts", dict(netns=pair.rx, interfaces=["eth0"]))["ansible_facts"]["xdp"]
    assert [(e["attachment"], e["id"]) for e in facts["interfaces"]["eth0"]["tc"]["ingress"]] == [
        (None, up["id"]), ("beside", beside["id"])]

    gone = assert_rhythm(run_distro, "tc_program", absent(pair, method=method))[0]
    assert gone["attached"] is False, gone
    kept = run_distro("tc_program", dict(args, name="beside"))
    assert kept["changed"] is False and kept["id"] == beside["id"], kept
    assert sorted(os.listdir(os.path.join(pin_root, pair.rx, "eth0"))) == (
        ["clsact"] if method == "cls_bpf" else []) + ["tc_ingress@beside"]
    assert_rhythm(run_distro, "tc_program", absent(pair, "beside", method=method))
    assert pins(pin_root) == [] and not has_clsact(pair.rx)


# ------------------------------------------------------------------ cls_bpf


def test_named_cls_bpf_filters_run_in_priority_order(run, pair, tc_obj, pin_root):
    """Two named cls_bpf attachments: each its own priority (the first free one, in the order the tasks run), and
    the chain follows it: the first one hands frames on (TC_ACT_UNSPEC) until it passes them (TC_ACT_OK)."""
    first = assert_rhythm(run, "tc_program", named(pair, tc_obj, "a", TCX_NEXT, method="cls_bpf"))[0]
    second = assert_rhythm(run, "tc_program", named(pair, tc_obj, "b", TC_SHOT, method="cls_bpf"))[0]
    assert (first["priority"], second["priority"]) == (1, 2), (first, second)
    assert [(f["pref"], f["options"]["prog"]["id"]) for f in sorted(filters(pair.rx), key=lambda f: f["pref"])] == \
        [(1, first["id"]), (2, second["id"])]
    pair.burst(run, count=30, protocols=["udp"])
    assert chain(run, pair) == [("a", first["id"], 30), ("b", second["id"], 30)]
    passing = assert_rhythm(run, "tc_program", named(pair, tc_obj, "a", TC_OK, method="cls_bpf"))[0]
    assert passing["priority"] == 1 and not passing["interrupted"], passing
    pair.burst(run, count=30, protocols=["udp"])
    assert chain(run, pair) == [("a", passing["id"], 60), ("b", second["id"], 30)]
    for name in ("a", "b"):
        assert_rhythm(run, "tc_program", absent(pair, name, method="cls_bpf"))
    assert filters(pair.rx) == [] and not has_clsact(pair.rx) and pins(pin_root) == []


# ------------------------------------------------------------------ bad input


@pytest.fixture
def hook_in_use(run_distro, pair, tc_obj, pin_root, tmp_path):
    """rx's eth0 with a named cls_bpf attachment at priority 1 (and, where the kernel has tcx, a named tcx one):
    what every bad-input case must leave exactly as it found it."""
    run_distro("tc_program", named(pair, tc_obj, "kept", TCX_NEXT, method="cls_bpf", priority=1))
    where = {"namespaces": [pair.rx], "pin_root": pin_root, "objects": str(tmp_path), "cache": str(tmp_path)}
    return where


BAD = [
    pytest.param(dict(before="nothing-here"), "before 'nothing-here' names nothing there", id="before-nothing",
                 marks=pytest.mark.kernel("tcx")),
    pytest.param(dict(after=999999), "after names program id 999999, which is not on it", id="after-no-such-id",
                 marks=pytest.mark.kernel("tcx")),
    pytest.param(dict(before="kept"), "before names attachment kept of ebpf.xdp, which is not a tcx program there",
                 id="before-a-filter-of-ours", marks=pytest.mark.kernel("tcx")),
    pytest.param(dict(before="kept", after="kept"), "before and after are mutually exclusive", id="before-and-after"),
    pytest.param(dict(name="Bad.Name"), "name 'Bad.Name' is not a usable attachment name", id="bad-name"),
    pytest.param(dict(name="x" * 33), "is not a usable attachment name: 1 to 32 of a-z", id="long-name"),
    pytest.param(dict(before="new"), "before names this attachment itself", id="before-itself"),
    pytest.param(dict(before=True), "before names an attachment of ebpf.xdp on the hook by its name", id="bool"),
    pytest.param(dict(method="cls_bpf", before="kept"), "cls_bpf filters run in priority order",
                 id="before-with-cls_bpf"),
    pytest.param(dict(method="act_bpf"), "name: act_bpf holds one program per hook here", id="name-with-act_bpf"),
    pytest.param(dict(method="cls_bpf", priority=1), "priority 1 is taken by attachment kept of ebpf.xdp",
                 id="priority-of-another-attachment"),
]


@pytest.mark.parametrize("extra, words", BAD)
def test_bad_input_is_a_clear_error_that_changes_nothing(run_distro, pair, tc_obj, hook_in_use, extra, words):
    args = named(pair, tc_obj, "new", TCX_NEXT)
    args.update(extra)
    before = pin_snapshot.snapshot(hook_in_use)
    for check in (True, False):
        res = run_distro("tc_program", args, check=check)
        assert res.get("failed") and words in res["msg"], res
    assert pin_snapshot.snapshot(hook_in_use) == before


def test_a_datapath_entry_takes_the_same_options_and_checks(run_distro, pair, tc_obj, hook_in_use):
    """datapath's tc entries are tc_program's options: a bad name is the entry's error, before anything changes;
    two entries for one named attachment are refused; two names on one hook are two attachments."""
    before = pin_snapshot.snapshot(hook_in_use)
    bad = run_distro("datapath", dict(config=dict(tc=[named(pair, tc_obj, "Bad.Name", TCX_NEXT)])))
    assert bad["failed"] and "config.tc[0]: name 'Bad.Name' is not a usable attachment name" in bad["msg"], bad
    twice = run_distro("datapath", dict(config=dict(tc=[named(pair, tc_obj, "x", TCX_NEXT, method="cls_bpf"),
                                                        named(pair, tc_obj, "x", TC_OK, method="cls_bpf")])))
    assert twice["failed"] and "both manage the tc ingress hook of eth0 (attachment x) in netns %s" % pair.rx \
        in twice["msg"], twice
    assert pin_snapshot.snapshot(hook_in_use) == before
    config = dict(tc=[named(pair, tc_obj, "kept", TCX_NEXT, method="cls_bpf", priority=1),
                      named(pair, tc_obj, "other", TC_SHOT, method="cls_bpf")])
    res = assert_rhythm(run_distro, "datapath", dict(config=config))[0]
    assert [r["attachment"] for r in res["item_results"]["tc"]] == ["kept", "other"], res
    gathered = run_distro("datapath", dict(state="gathered", namespaces=[pair.rx]))["gathered"]["tc"]
    assert sorted((e.get("name"), e.get("priority")) for e in gathered) == [("kept", 1), ("other", None)], gathered
    # Gathered, fed back as overridden: no change; then deleted: both go.
    same = run_distro("datapath", dict(state="overridden", config=dict(tc=gathered), namespaces=[pair.rx]))
    assert same["changed"] is False and not same.get("failed"), same
    assert_rhythm(run_distro, "datapath", dict(state="deleted", namespaces=[pair.rx]))
    assert filters(pair.rx) == []


@pytest.mark.kernel_either("tcx")
def test_ordering_without_tcx_is_refused(run_distro, pair, tc_obj, pin_root, features):
    """before/after place programs on the tcx hook: on a kernel without tcx (method auto resolving to cls_bpf)
    they are a clear error with nothing changed; where the kernel has tcx, auto resolves to it and they work."""
    args = named(pair, tc_obj, "ordered", TCX_NEXT, method="auto", after="anchor")
    if features["tcx"]:
        first = run_distro("tc_program", named(pair, tc_obj, "anchor", TCX_NEXT, method="auto"))
        res = assert_rhythm(run_distro, "tc_program", args)[0]
        assert res["method"] == "tcx" and kernel_order(pair) == [first["id"], res["id"]], res
        return
    for check in (True, False):
        res = run_distro("tc_program", args, check=check)
        assert res.get("failed") and "after places a program among the programs of the tcx hook, which Linux has " \
            "from 6.6" in res["msg"], res
    assert pins(pin_root) == [] and not has_clsact(pair.rx)


def test_the_unnamed_attachment_has_a_null_name(run_distro, pair, tc_obj):
    """attachment is null in results and facts for the unnamed attachment (as for programs the collection did not
    attach, see chain())."""
    ours = run_distro("tc_program", dict(interface="eth0", netns=pair.rx, object=tc_obj, program="tc_drop_count",
                                         method="cls_bpf", constants={"tc_action": TC_OK}))
    assert ours["attachment"] is None, ours
    facts = run_distro("xdp_facts", dict(netns=pair.rx, interfaces=["eth0"]))["ansible_facts"]["xdp"]
    [entry] = facts["interfaces"]["eth0"]["tc"]["ingress"]
    assert entry["attachment"] is None and entry["owner"] == "ebpf.xdp", entry


def exporter_once(pin_root, netns):
    """One exposition of the xdp_metrics role's exporter (run from the checkout) for the namespace."""
    config = {"service": "tc-order", "pin_root": pin_root, "netns": [netns], "port": 9, "pid_file": "/dev/null"}
    proc = subprocess.run([SYSTEM_PYTHON, "-s", os.path.join(ROOT, "roles", "xdp_metrics", "files",
                                                             "ebpf_xdp_exporter.py"),
                           "--config", "/dev/null", "--config-json", json.dumps(config), "--once"],
                          capture_output=True, text=True, check=False,
                          env=dict(os.environ, PYTHONPATH=os.path.join(ROOT, ".build", "collections")))
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def deploy_named(pair, pin_root, tmp_path, check=False, tc_programs=None):
    """The xdp_deploy role on this machine: tc_drop_count twice on rx's eth0 ingress, `first`, then `second`
    after it; both hand each frame on (TCX_NEXT). Its output (the json callback)."""
    entry = dict(interface="eth0", netns=pair.rx, object="tc_redirect", program="tc_drop_count", method="tcx",
                 constants={"tc_action": TCX_NEXT})
    play = [{"hosts": "localhost", "gather_facts": False, "roles": [{"role": "ebpf.xdp.xdp_deploy"}], "vars": {
        "xdp_deploy_src_dir": str(tmp_path / "src"), "xdp_deploy_object_dir": str(tmp_path / "objects"),
        "xdp_deploy_pin_root": pin_root, "xdp_deploy_programs": [],
        "xdp_deploy_objects": [{"name": "tc_redirect", "src": "tc_redirect.bpf.c"}],
        "xdp_deploy_tc_programs": tc_programs if tc_programs is not None else [
            dict(entry, name="first"), dict(entry, name="second", after="first")]}}]
    path = tmp_path / "deploy.yml"
    path.write_text(json.dumps(play))
    return ansible_playbook("-c", "local", "-i", "localhost,", "-e", "ansible_python_interpreter=%s" % SYSTEM_PYTHON,
                            str(path), check=check)


@pytest.mark.kernel("tcx")
def test_xdp_deploy_converges_named_programs_in_order(run_distro, pair, pin_root, tmp_path):
    """The role's tc entries with name and after: the four-step rhythm, the kernel's order, both counting every
    frame, what the role records for a rollout (each attachment by name), and its rollback putting back one."""
    changed = [changed_by_host(deploy_named(pair, pin_root, tmp_path, check=check))["localhost"]
               for check in (True, False, True, False)]
    assert changed[0] > 0 and changed[1] > 0 and changed[2:] == [0, 0], changed
    order = kernel_order(pair)
    pair.burst(run_distro, count=30, protocols=["udp"])
    assert chain(run_distro, pair) == [("first", order[0], 30), ("second", order[1], 30)]
    # The metrics exporter keeps the two programs' series apart by their attachment names.
    page = exporter_once(pin_root, pair.rx)
    for name in ("first", "second"):
        assert ('ebpf_xdp_packets_total{attachment="%s",hook="tc_ingress",interface="eth0",map="proto_count",'
                'netns="%s",program="tc_drop_count",proto="udp"} 30.0' % (name, pair.rx)) in page, page

    # A new release of `second` only: the role records that attachment, by name, with its previous revision.
    entry = dict(interface="eth0", netns=pair.rx, object="tc_redirect", program="tc_drop_count", method="tcx")
    release = [dict(entry, name="first", constants={"tc_action": TCX_NEXT}),
               dict(entry, name="second", after="first", constants={"tc_action": TCX_NEXT, "after_clone": 1})]
    out = deploy_named(pair, pin_root, tmp_path, tc_programs=release)
    recorded = task_results(out, "Record what this run changed")["localhost"]["ansible_facts"]
    assert [(c["name"], c["previous"]) for c in recorded["xdp_deploy_changed"]] == [("second", True)], recorded
    assert [(a["name"], a["program_name"]) for a in recorded["xdp_deploy_attached"]] == [
        ("first", "tc_drop_count"), ("second", "tc_drop_count")], recorded
    upgraded = kernel_order(pair)
    assert upgraded[0] == order[0] and upgraded[1] != order[1], (order, upgraded)
    # The role's rollback entry point for what that run changed: `second` back on its previous revision, in place.
    rollback = tmp_path / "rollback.yml"
    rollback.write_text(json.dumps([{"hosts": "localhost", "gather_facts": False, "tasks": [{
        "name": "Roll back", "ansible.builtin.include_role": {"name": "ebpf.xdp.xdp_deploy", "tasks_from": "rollback"},
        "vars": {"xdp_deploy_rollback": recorded["xdp_deploy_changed"], "xdp_deploy_pin_root": pin_root}}]}]))
    out = ansible_playbook("-c", "local", "-i", "localhost,", "-e", "ansible_python_interpreter=%s" % SYSTEM_PYTHON,
                           str(rollback))
    assert changed_by_host(out)["localhost"] == 1
    back = kernel_order(pair)
    assert back[0] == order[0] and back[1] not in (order[1], upgraded[1]), (order, upgraded, back)
    pair.burst(run_distro, count=10, protocols=["udp"])
    assert chain(run_distro, pair) == [("first", back[0], 40), ("second", back[1], 40)], "the maps were kept"
