"""Faults survived: each ends with one normal run that converges the host and a second that reports no change.

Kill points: the converger names the steps of a run (_converge.fault_point:
after_load, after_attach, after_pin, before_record; a migrating upgrade's
maps_set_aside, during_copy, after_swap and before_retire, tested in
test_map_migration with all the others, where an error after the swap puts
the old program back) and dies there with SIGKILL when EBPF_XDP_FAULT_POINT
names one. Modules run as their own
processes started directly (conftest's ModuleRunner: no ansible around
them, ~5x faster); the concurrency tests run ansible-playbook itself.
"""

import json
import os
import subprocess
import tempfile
import uuid

import pytest

from conftest import SYSTEM_PYTHON, VENV_PYTHON, ModuleRunner, ansible_cli, ansible_env, sh
import kernel_features
from kernel_features import needs, xdp_loader, xdp_tools_object
from test_tc_program import TC_SHOT, filters
from test_tc_redirect_programs import eventually
from test_xdp_program import pins
from test_xdp_dispatcher import chain, component, loader_cleanup, release_obj  # noqa: F401  # pylint: disable=unused-import
from test_zero_loss import direct, drop_v2, tc_v2  # noqa: F401  # pylint: disable=unused-import

from ansible_collections.ebpf.xdp.plugins.module_utils.host import netns as _netns
from ansible_collections.ebpf.xdp.plugins.module_utils.bpf import libbpf as _bpf
from ansible_collections.ebpf.xdp.plugins.module_utils.hooks import converge as _converge

POINTS = ["after_load", "after_attach", "after_pin", "before_record"]


def xdp_witness(pair):
    """(program id, mode) on rx/eth0 as the kernel reports it; (0, None) for none."""
    with _netns.netns(pair.rx):
        state = _bpf.xdp_query(_netns.ifindex("eth0"))
    prog_id = state["prog_id"] or state["native_prog_id"] or state["generic_prog_id"]
    return prog_id, state["mode"]


def tcx_prog_ids(ns):
    """The programs on ns/eth0's tcx ingress, as the kernel lists them; none on a kernel without tcx (6.1 answers
    a query of the hook with EINVAL: the cls_bpf cases' witness that nothing went to tcx failed there)."""
    if not kernel_features.features()["tcx"]:
        return []
    with _netns.netns(ns):
        return list(_bpf.tcx_query(_netns.ifindex("eth0"), _bpf.BPF_TCX_INGRESS)["prog_ids"])


def our_links(pin_dir):
    """The bpf_links anywhere (live or left on a deleted interface) whose program uses the counters pinned in
    pin_dir/maps: a link a killed run left behind would be one of them. Link info has no namespace, so an
    ifindex alone would also match other tests' eth0s."""
    with _bpf.Map.from_pin(os.path.join(pin_dir, "maps", "proto_count")) as counters:
        map_id = counters.info["id"]
    found = []
    for info in _bpf.links():
        try:
            with _bpf.Program.from_id(info["prog_id"]) as prog:
                if map_id in prog.info()["map_ids"]:
                    found.append(info)
        except _bpf.BpfError:
            continue  # gone while listed
    return found


def converges(run, module, args, expect_changed=None):
    """The closing pair of every fault: a normal run converges, the next one changes nothing."""
    first = run(module, args)
    assert not first.get("failed"), first
    if expect_changed is not None:
        assert first["changed"] is expect_changed, first
    second = run(module, args)
    assert second.get("changed") is False and not second.get("failed"), second
    return first


def killed(run, module, args, point):
    res = run(module, args, env={_converge.FAULT_POINT_ENV: point})
    assert res.get("killed"), res
    return res


# ---------------------------------------------------------------- kill points


@pytest.mark.parametrize("step", ["attach", "upgrade"])
@pytest.mark.parametrize("point", POINTS)
def test_xdp_killed_at_each_step(pair, drop_obj, drop_v2, pin_root, point, step,  # noqa: F811
                                 direct):
    args = dict(interface="eth0", netns=pair.rx, object=drop_obj, mode="native")
    if step == "upgrade":
        direct("xdp_program", args)
        args = dict(args, object=drop_v2)
    killed(direct, "xdp_program", args, point)
    res = converges(direct, "xdp_program", args)
    assert res["attached"] and res["attach"] == "link" and xdp_witness(pair) == (res["id"], "native")
    assert [link["prog_id"] for link in our_links(res["pin_dir"])] == [res["id"]], "one link, ours"
    directory = os.path.join(pin_root, pair.rx, "eth0", "xdp")
    assert pins(pin_root) == sorted(os.path.join(directory, f) for f in ("link", "maps/proto_count", "owner", "prog"))
    gone = direct("xdp_program", dict(interface="eth0", netns=pair.rx, state="absent"))
    assert gone["changed"] and xdp_witness(pair)[0] == 0 and pins(pin_root) == []


@pytest.mark.parametrize("step", ["attach", "upgrade"])
@pytest.mark.parametrize("point", ["after_attach", "before_record"])
@pytest.mark.parametrize("method", [needs("tcx", "tcx"), "cls_bpf"])
def test_tc_killed_at_each_step(pair, tc_obj, tc_v2, pin_root, method, point, step,  # noqa: F811
                                direct):
    args = dict(interface="eth0", netns=pair.rx, object=tc_obj, program="tc_drop_count", method=method,
                constants={"tc_action": TC_SHOT})
    if step == "upgrade":
        direct("tc_program", args)
        args = dict(args, object=tc_v2)
    killed(direct, "tc_program", args, point)
    res = converges(direct, "tc_program", args)
    assert res["attached"] and res["method"] == method
    if method == "tcx":
        assert tcx_prog_ids(pair.rx) == [res["id"]] and filters(pair.rx) == []
    else:
        assert [f["options"]["prog"]["id"] for f in filters(pair.rx)] == [res["id"]] and tcx_prog_ids(pair.rx) == []
    gone = direct("tc_program", dict(interface="eth0", netns=pair.rx, method=method, state="absent"))
    assert gone["changed"] and filters(pair.rx) == [] and tcx_prog_ids(pair.rx) == [] and pins(pin_root) == []


@pytest.mark.parametrize("step", ["attach", "upgrade"])
@pytest.mark.parametrize("point", ["after_attach", "after_pin"])
@pytest.mark.parametrize("module", ["xdp_program", "tc_program"])
def test_an_error_after_the_attach_keeps_the_proof_that_the_program_is_ours(pair, drop_obj, drop_v2, tc_obj,  # noqa
                                                                              tc_v2, pin_root, module, point, step,
                                                                              direct):
    """An exception (not a kill) once the new program is on the hook: the failure path leaves the attachment's
    maps/ (and its link) in place, since they are what proves the program ours. The task fails with the error,
    the program stays attached, and the next run takes it back (no force) and converges; a tc cls_bpf filter has
    no link pin, so its maps are the only proof."""
    if module == "xdp_program":
        args, newer = dict(interface="eth0", netns=pair.rx, object=drop_obj, mode="native"), drop_v2
    else:
        args, newer = dict(interface="eth0", netns=pair.rx, object=tc_obj, program="tc_drop_count",
                           method="cls_bpf", constants={"tc_action": TC_SHOT}), tc_v2
    if step == "upgrade":
        direct(module, args)
        args = dict(args, object=newer)
    res = direct(module, args, env={_converge.FAULT_POINT_ENV: "raise:" + point})
    assert res.get("failed") and res["msg"] == "fault injected at %s" % point, res
    on_hook = xdp_witness(pair)[0] if module == "xdp_program" else filters(pair.rx)[0]["options"]["prog"]["id"]
    hook = "xdp" if module == "xdp_program" else "tc_ingress"
    directory = os.path.join(pin_root, pair.rx, "eth0", hook)
    with _bpf.Program.from_id(on_hook) as prog:
        map_ids = prog.info()["map_ids"]
    with _bpf.Map.from_pin(os.path.join(directory, "maps", "proto_count")) as kept:
        assert kept.info["id"] in map_ids, "the program on the hook uses the maps the failed run kept"
    first = converges(direct, module, args)
    assert first["attached"] and not first.get("failed"), first
    gone = direct(module, dict(args, state="absent"))
    assert gone["changed"] and pins(pin_root) == [], gone


@pytest.mark.kernel("xdp_dispatcher")
def test_named_xdp_killed_then_converges_with_one_program_of_ours(run_distro, pair, drop_obj, release_obj,  # noqa
                                                                   pin_root, loader_cleanup):
    """A named XDP attachment (libxdp's dispatcher, see test_xdp_dispatcher) killed before its first record was
    written, or after an upgrade's attach (the record names the old program): the next run takes the program back
    (its maps are ours) instead of adding a second one, the one after changes nothing, and the dispatcher runs
    one program of ours beside xdp-loader's."""
    run = run_distro
    sh(*xdp_loader(pair.rx, "load", "-m", "skb", "-P", "30", "eth0", xdp_tools_object("xdpfilt_alw_all")))
    directory = os.path.join(pin_root, pair.rx, "eth0", "xdp@counter")
    for step, point in (("attach", "before_record"), ("upgrade", "after_attach")):
        args = component(pair, drop_obj, "counter", 10)
        if step == "upgrade":
            assert run("xdp_program", args)["changed"] is True
            args = component(pair, release_obj, "counter", 10)
        res = run("xdp_program", args, env={_converge.FAULT_POINT_ENV: point})
        assert res.get("killed"), res
        first = run("xdp_program", args)
        assert not first.get("failed") and any("taken back" in w for w in first.get("warnings", [])), (point, first)
        assert run("xdp_program", args)["changed"] is False
        now = chain(run, pair)
        assert [c[:3] for c in now] == [("counter", 10, "ebpf.xdp"), ("xdpfilt_alw_all", 30, "unmanaged")], \
            (step, point, now)
        assert sorted(os.listdir(directory)) == ["maps", "owner", "prog"], (step, point)
        gone = run("xdp_program", dict(args, state="absent"))
        assert gone["changed"] and [c[2] for c in chain(run, pair)] == ["unmanaged"], (step, point, gone)


# ---------------------------------------------------------------- the interface and its namespace


def recreate_rx(pair):
    """Make the deleted veth again: same names, new ifindexes."""
    sh("ip", "link", "add", "eth0", "netns", pair.tx, "address", pair.tx_mac, "type", "veth",
       "peer", "name", "eth0", "netns", pair.rx, "address", pair.rx_mac)
    for ns in (pair.tx, pair.rx):
        sh("ip", "-n", ns, "link", "set", "eth0", "up")


def test_interface_deleted_then_recreated_with_a_new_ifindex(direct, pair, drop_obj, pin_root):
    args = dict(interface="eth0", netns=pair.rx, object=drop_obj, mode="native")
    first = direct("xdp_program", args)
    sh("ip", "-n", pair.rx, "link", "del", "eth0")
    res = direct("xdp_program", args)
    assert res["failed"] and "'eth0' does not exist" in res["msg"], res
    recreate_rx(pair)
    res = converges(direct, "xdp_program", args, expect_changed=True)
    assert res["ifindex"] != first["ifindex"] and xdp_witness(pair) == (res["id"], "native")
    assert res["maps"] == first["maps"] and len(our_links(res["pin_dir"])) == 1


@pytest.mark.parametrize("module, extra", [("xdp_program", dict(mode="native")),
                                           ("tc_program", dict(method="cls_bpf", program="tc_drop_count")),
                                           needs("tcx", "tc_program", dict(method="tcx", program="tc_drop_count"))])
def test_interface_deleted_for_good_then_absent(direct, pair, drop_obj, tc_obj, pin_root, module, extra):  # noqa
    """Its program went with it; state absent clears what is left of ours (a link to no interface, the
    program and maps it keeps in memory) instead of failing on "does not exist" for ever."""
    obj = drop_obj if module == "xdp_program" else tc_obj
    args = dict(interface="eth0", netns=pair.rx, **extra)
    direct(module, dict(args, object=obj))
    sh("ip", "-n", pair.rx, "link", "del", "eth0")
    check = direct(module, dict(args, state="absent"), check=True)
    assert check["changed"] and pins(pin_root), check
    gone = converges(direct, module, dict(args, state="absent"), expect_changed=True)
    assert gone["attached"] is False and "does not exist (any more)" in json.dumps(gone["warnings"]), gone
    assert pins(pin_root) == [] and not os.path.exists(os.path.join(pin_root, pair.rx))


def test_namespace_deleted_and_recreated_like_a_reboot_of_the_lab(direct, pair, drop_obj, pin_root):
    args = dict(interface="eth0", netns=pair.rx, object=drop_obj, mode="native")
    direct("xdp_program", args)
    pair.down()
    pair.up()
    res = converges(direct, "xdp_program", args, expect_changed=True)
    assert xdp_witness(pair) == (res["id"], "native") and len(our_links(res["pin_dir"])) == 1
    gone = converges(direct, "xdp_program", dict(args, state="absent"), expect_changed=True)
    assert gone["attached"] is False and pins(pin_root) == []


# ---------------------------------------------------------------- pins and programs changed out of band


def test_pins_removed_while_attached(direct, pair, drop_obj, pin_root):
    """The pinned link is what keeps a link-held program: removing the pins detaches it too (said here, seen
    by the witness); the next run attaches it again."""
    args = dict(interface="eth0", netns=pair.rx, object=drop_obj, mode="native")
    first = direct("xdp_program", args)
    sh("rm", "-r", os.path.join(pin_root, pair.rx, "eth0", "xdp"))
    # The kernel frees a link whose last reference was its pin in a work item, after rm returns.
    assert eventually(lambda: xdp_witness(pair), (0, None), timeout=5.0) == (0, None), "the link went with its pin"
    res = converges(direct, "xdp_program", args, expect_changed=True)
    assert res["id"] != first["id"] and xdp_witness(pair) == (res["id"], "native")


def test_pins_removed_under_a_netlink_held_program(direct, pair, drop_obj, pin_root):
    """A program held by netlink (taken over from ip(8)) stays without its pins, and nothing proves it ours any
    more: the next run refuses it as foreign and says how to take it; force does, atomically."""
    sh("ip", "-n", pair.rx, "link", "set", "dev", "eth0", "xdpdrv", "obj", drop_obj, "sec", "xdp")
    args = dict(interface="eth0", netns=pair.rx, object=drop_obj, mode="native")
    first = direct("xdp_program", dict(args, force=True))
    assert first["attach"] == "netlink" and first["interrupted"] is False
    sh("rm", "-r", os.path.join(pin_root, pair.rx, "eth0", "xdp"))
    assert xdp_witness(pair)[0] == first["id"]
    res = direct("xdp_program", args)
    assert res["failed"] and "that ebpf.xdp did not attach" in res["msg"] and "force: true" in res["msg"], res
    res = converges(direct, "xdp_program", dict(args, force=True), expect_changed=True)
    assert res["interrupted"] is False and xdp_witness(pair) == (res["id"], "native")


def test_pins_removed_under_a_cls_bpf_filter(direct, pair, tc_obj, pin_root):  # noqa: F811
    """A cls_bpf filter stays without its pins, unprovably ours. A task that names no place takes the first free
    priority: the old filter is left there like any filter the collection did not put (tc filters coexist);
    a task that names the place finds it taken and is refused, and force replaces it in place."""
    args = dict(interface="eth0", netns=pair.rx, object=tc_obj, program="tc_drop_count", method="cls_bpf")
    first = direct("tc_program", args)
    sh("rm", "-r", os.path.join(pin_root, pair.rx, "eth0", "tc_ingress"))
    res = converges(direct, "tc_program", args, expect_changed=True)
    assert (res["priority"], first["priority"]) == (2, 1)
    assert [f["options"]["prog"]["id"] for f in filters(pair.rx)] == [first["id"], res["id"]]
    sh("rm", "-r", os.path.join(pin_root, pair.rx, "eth0", "tc_ingress"))
    placed = dict(args, priority=2, handle=1)
    res = direct("tc_program", placed)
    assert res["failed"] and "that ebpf.xdp did not attach" in res["msg"] and "force: true" in res["msg"], res
    again = converges(direct, "tc_program", dict(placed, force=True), expect_changed=True)
    assert again["interrupted"] is False and again["priority"] == 2
    assert [f["options"]["prog"]["id"] for f in filters(pair.rx)] == [first["id"], again["id"]]


def test_detached_out_of_band(direct, pair, drop_obj, pin_root):
    """ip(8) cannot take off a link-held program (the kernel refuses: EBUSY); bpftool's link detach and
    unpinning the link can, and the next run puts it back while the other pins stay."""
    args = dict(interface="eth0", netns=pair.rx, object=drop_obj, mode="native")
    first = direct("xdp_program", args)
    off = sh("ip", "-n", pair.rx, "link", "set", "dev", "eth0", "xdp", "off", check=False)
    assert off.returncode != 0 and xdp_witness(pair)[0] == first["id"], off.stderr
    sh("bpftool", "link", "detach", "id", str(first["link_id"]))
    assert xdp_witness(pair) == (0, None)
    res = converges(direct, "xdp_program", args, expect_changed=True)
    assert xdp_witness(pair) == (res["id"], "native") and len(our_links(res["pin_dir"])) == 1
    os.unlink(os.path.join(pin_root, pair.rx, "eth0", "xdp", "link"))
    # The last reference gone, the kernel releases the link from a work queue: a moment later under load.
    assert eventually(lambda: xdp_witness(pair), (0, None)) == (0, None)
    res = converges(direct, "xdp_program", args, expect_changed=True)
    assert xdp_witness(pair) == (res["id"], "native")


def test_netlink_held_program_detached_with_ip(direct, pair, drop_obj, pin_root):
    sh("ip", "-n", pair.rx, "link", "set", "dev", "eth0", "xdpdrv", "obj", drop_obj, "sec", "xdp")
    args = dict(interface="eth0", netns=pair.rx, object=drop_obj, mode="native", force=True)
    direct("xdp_program", args)
    sh("ip", "-n", pair.rx, "link", "set", "dev", "eth0", "xdp", "off")
    assert xdp_witness(pair) == (0, None)
    res = converges(direct, "xdp_program", args, expect_changed=True)
    assert xdp_witness(pair) == (res["id"], "native")


# ---------------------------------------------------------------- bpffs


@pytest.fixture
def private_bpffs():
    """A bpffs of our own, mounted in a temporary directory (never /sys/fs/bpf)."""
    directory = tempfile.mkdtemp(prefix="ebpf-xdp-bpffs-")
    sh("mount", "-t", "bpf", "bpf", directory)
    yield directory
    sh("umount", directory, check=False)
    os.rmdir(directory)


def test_bpffs_unmounted_and_mounted_again(pair, drop_obj, private_bpffs):
    run = ModuleRunner(VENV_PYTHON, os.path.join(private_bpffs, "ebpf_xdp"))
    args = dict(interface="eth0", netns=pair.rx, object=drop_obj, mode="native")
    first = run("xdp_program", args)
    assert first["changed"] and first["pin_dir"].startswith(private_bpffs)
    sh("umount", private_bpffs)
    res = run("xdp_program", args)
    assert res["failed"] and "is not on a BPF filesystem" in res["msg"], res
    sh("mount", "-t", "bpf", "bpf", private_bpffs)
    res = converges(run, "xdp_program", args, expect_changed=True)
    assert xdp_witness(pair) == (res["id"], "native") and len(our_links(res["pin_dir"])) == 1


# ---------------------------------------------------------------- concurrent runs


def playbook(directory, tasks, python=SYSTEM_PYTHON):
    path = os.path.join(directory, "play-%s.yml" % uuid.uuid4().hex[:6])
    with open(path, "w") as handle:
        json.dump([{"hosts": "all", "gather_facts": False, "tasks": tasks}], handle)
    # Popen, not conftest's ansible_playbook: two run at once.
    argv = ansible_cli("ansible-playbook") + ["-i", os.path.join(directory, "hosts.ini"),
                                              "-e", "ansible_python_interpreter=%s" % python, path]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ansible_env(),
                            cwd=directory)


def task_results(proc):
    out, err = proc.communicate()
    assert proc.returncode == 0, out + err
    return [task["hosts"]["localhost"] for task in json.loads(out)["plays"][0]["tasks"]]


@pytest.fixture
def inventory(tmp_path):
    (tmp_path / "hosts.ini").write_text("localhost ansible_connection=local\n")
    return str(tmp_path)


def test_two_playbooks_at_once(pair, drop_obj, pin_root, inventory):
    task = {"ebpf.xdp.xdp_program": dict(interface="eth0", netns=pair.rx, object=drop_obj, mode="native",
                                         pin_root=pin_root)}
    procs = [playbook(inventory, [task]), playbook(inventory, [task])]
    [first], [second] = [task_results(p) for p in procs]
    assert sorted([first["changed"], second["changed"]]) == [False, True], (first, second)
    assert first["id"] == second["id"] and xdp_witness(pair) == (first["id"], "native")
    assert len(our_links(first["pin_dir"])) == 1
    directory = os.path.join(pin_root, pair.rx, "eth0", "xdp")
    assert pins(pin_root) == sorted(os.path.join(directory, f) for f in ("link", "maps/proto_count", "owner", "prog"))
    [again] = task_results(playbook(inventory, [task]))
    assert again["changed"] is False
    assert not [f for f in os.listdir(inventory) if f not in ("hosts.ini",) and not f.startswith("play-")]


def test_the_same_interface_from_two_tasks_of_one_play(pair, drop_obj, drop_v2, pin_root, inventory):  # noqa: F811
    """The same program twice: the second task finds it converged. Two different objects on one hook: the
    last task wins, and every run changes it twice (the play contradicts itself; nothing refuses that)."""
    args = dict(interface="eth0", netns=pair.rx, object=drop_obj, mode="native", pin_root=pin_root)
    same = [{"ebpf.xdp.xdp_program": args}, {"ebpf.xdp.xdp_program": args}]
    assert [r["changed"] for r in task_results(playbook(inventory, same))] == [True, False]
    assert [r["changed"] for r in task_results(playbook(inventory, same))] == [False, False]
    other = [{"ebpf.xdp.xdp_program": args}, {"ebpf.xdp.xdp_program": dict(args, object=drop_v2)}]
    results = task_results(playbook(inventory, other))
    assert [r["changed"] for r in results] == [False, True]
    results = task_results(playbook(inventory, other))
    assert [r["changed"] for r in results] == [True, True] and xdp_witness(pair)[0] == results[1]["id"]
