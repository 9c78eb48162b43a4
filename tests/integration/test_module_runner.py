"""The integration tests start modules directly (conftest's ModuleRunner); Ansible must report the same.

Each case runs once through `ansible localhost -m` and once directly, on the
same kernel state, and the two results must be equal but for what only
Ansible adds. This is what lets the kernel tests skip the controller. A run
forked from the warm starter (--module-start=fork, make test-debian12's) must
report what a new interpreter reports.
"""

import json
import os
import shutil

import pytest

from conftest import ModuleRunner, sh

from ansible_collections.ebpf.xdp.plugins.module_utils import _bytecode
from ansible_collections.ebpf.xdp.plugins.module_utils.hooks import converge as _converge

# Added by Ansible's task executor and action plugin around the module's own result.
ANSIBLE_ONLY = {"_ansible_no_log", "action", "deprecations", "exception"}


def comparable(res):
    res = {k: v for k, v in res.items() if k not in ANSIBLE_ONLY}
    if not res.get("warnings"):
        res.pop("warnings", None)
    res.get("ansible_facts", {}).pop("discovered_interpreter_python", None)
    return res


def both(python, pin_root, module, args, **kwargs):
    via_ansible = ModuleRunner(python, pin_root, via_ansible=True)(module, args, **kwargs)
    direct = ModuleRunner(python, pin_root)(module, args, **kwargs)
    assert comparable(direct) == comparable(via_ansible)
    return direct


def test_direct_and_ansible_runs_report_the_same(python, pair, drop_obj, pin_root):
    args = dict(interface="eth0", netns=pair.rx, object=drop_obj)
    planned = both(python, pin_root, "xdp_program", args, check=True, diff=True)
    assert planned["changed"] and planned["diff"]["after"], planned
    assert pair.xdp_prog_id() is None

    # A run that changes something cannot be made twice: run it through Ansible, then compare no-change runs.
    attached = ModuleRunner(python, pin_root, via_ansible=True)("xdp_program", args)
    assert attached["changed"] and pair.xdp_prog_id() == attached["id"], attached
    same = both(python, pin_root, "xdp_program", args, diff=True)
    assert same["changed"] is False and same["id"] == attached["id"], same

    facts = both(python, pin_root, "xdp_facts", dict(netns=pair.rx))
    assert facts["ansible_facts"]["xdp"]["interfaces"]["eth0"]["xdp"]["id"] == attached["id"], facts

    # Arguments longer than a file name may be (a direct run reads them from stdin).
    planned = both(python, pin_root, "xdp_trafficgen", dict(
        interface="eth0", netns=pair.tx, src_ip=pair.tx_ip, dst_ip=pair.rx_ip, dst_mac=pair.rx_mac,
        protocols=["udp", "tcp"], count=10, src_port=1000, src_port_max=2000), check=True)
    assert planned["changed"] and len(json.dumps(planned["invocation"])) > 255, planned

    # Failures: the argument spec's, and the module's own.
    bad = both(python, pin_root, "xdp_program", dict(args, mode="offloaded"))
    assert bad["failed"] and "mode" in bad["msg"], bad
    missing = both(python, pin_root, "xdp_program", dict(args, interface="nosuch0"))
    assert missing["failed"] and "nosuch0" in missing["msg"], missing

    # A warning, as text both ways: a program attached by hand is not ours to remove.
    sh("ip", "-n", pair.tx, "link", "set", "dev", "eth0", "xdpgeneric", "obj", drop_obj, "sec", "xdp")
    left = both(python, pin_root, "xdp_program", dict(interface="eth0", netns=pair.tx, state="absent"))
    assert left["changed"] is False and any("not managed by ebpf.xdp" in w for w in left["warnings"]), left


def test_forked_and_new_interpreter_runs_report_the_same(python, pair, drop_obj, pin_root):
    """--module-start=fork against python -m, on the same kernel state: a plan, the argument spec's refusal and
    the module's own, a run killed at a fault point (SIGKILL, the test's environment reaching the module), the
    run that attaches, and the no-change run after it."""
    started = ModuleRunner(python, pin_root, start="exec")
    forked = ModuleRunner(python, pin_root, start="fork")

    def same(args, **kwargs):
        new, warm = started("xdp_program", args, **kwargs), forked("xdp_program", args, **kwargs)
        assert warm == new
        return warm

    args = dict(interface="eth0", netns=pair.rx, object=drop_obj)
    planned = same(args, check=True, diff=True)
    assert planned["changed"] and planned["diff"]["after"] and pair.xdp_prog_id() is None, planned
    assert same(dict(args, mode="offloaded"))["failed"]
    assert "nosuch0" in same(dict(args, interface="nosuch0"))["msg"]
    for runner in (started, forked):
        killed = runner("xdp_program", args, env={_converge.FAULT_POINT_ENV: "after_load"})
        assert killed == {"failed": True, "killed": True, "changed": False}, killed
    attached = forked("xdp_program", args)
    assert attached["changed"] and pair.xdp_prog_id() == attached["id"], attached
    again = same(args)
    assert again["changed"] is False and again["id"] == attached["id"], again


@pytest.mark.quiet  # moves the host's bytecode cache aside for a moment: no other run through Ansible beside it
def test_a_check_mode_run_through_ansible_writes_no_bytecode(python, pair, drop_obj, pin_root):
    """Through Ansible (the module_utils come from its zip, so _bytecode is active): a check-mode task writes no
    bytecode cache (/var/cache/ebpf_xdp/bytecode is not even made); the same task for real writes it."""
    cache = _bytecode.CACHE_DIR
    aside = cache + ".aside-%d" % os.getpid()
    had = os.path.isdir(cache)
    if had:
        os.rename(cache, aside)
    try:
        run = ModuleRunner(python, pin_root, via_ansible=True)
        args = dict(interface="eth0", netns=pair.rx, object=drop_obj)
        planned = run("xdp_program", args, check=True)
        assert planned["changed"] and not planned.get("failed"), planned
        assert not os.path.exists(cache), os.listdir(cache)
        attached = run("xdp_program", args)
        assert attached["changed"] and os.listdir(cache), "a run that is not in check mode keeps the bytecode"
    finally:
        shutil.rmtree(cache, ignore_errors=True)
        if had:
            os.rename(aside, cache)
