"""The tc adapter's pure decisions: method resolution and places, with the kernel probe stood in for."""

import pytest

from ansible_collections.ebpf.xdp.plugins.module_utils.hooks import tc as _tc, tc_hooks as _tc_hooks
from ansible_collections.ebpf.xdp.plugins.module_utils.hooks.observed import HELD_BY_NETLINK, HookError, Observed


def hook(method, priority=None, handle=None, verdict="drop"):
    return _tc.TcHook("eth0", 2, pins=None, clsact=None, direction="ingress", method=method,
                      priority=priority, handle=handle, verdict=verdict)


@pytest.fixture
def no_tcx(monkeypatch):
    """A kernel older than 6.6: the tcx probe fails (the probe itself is tested on the real kernel)."""
    monkeypatch.setattr(_tc_hooks, "tcx_supported", lambda ifindex: False)
    monkeypatch.setattr(_tc.platform, "release", lambda: "6.1.0-28-amd64")


def test_tcx_on_a_kernel_without_it_names_the_version(no_tcx):
    with pytest.raises(HookError, match=r"method: tcx needs tcx links, which Linux has from 6.6; "
                                        r"this kernel is 6.1.0-28-amd64. Use method: cls_bpf, or auto"):
        hook("tcx")._resolve_method(None)


def test_auto_falls_back_to_cls_bpf_and_keeps_an_attached_method(no_tcx):
    fresh = hook("auto")
    fresh._resolve_method(None)
    assert fresh.method == "cls_bpf" and fresh.load_as is None
    kept = hook("auto")
    kept._resolve_method({"mode": "act_bpf"})
    assert kept.method == "act_bpf" and kept.load_as == "sched_act"


def filter_at(priority, handle, method="cls_bpf", verdict=None):
    extra = {"direction": "ingress", "priority": priority, "handle": handle}
    if verdict:
        extra["verdict"] = verdict
    return Observed(prog_id=5, placement=method, holder=HELD_BY_NETLINK, extra=extra, placement_key="method")


@pytest.mark.parametrize("wanted, observed, in_place", [
    (hook("cls_bpf"), filter_at(3, 1), True),  # no place named: where it is
    (hook("cls_bpf", 3, 1), filter_at(3, 1), True),
    (hook("cls_bpf", 4), filter_at(3, 1), False),
    (hook("tcx"), filter_at(3, 1), False),  # another method
    (hook("act_bpf", 3, 1), filter_at(3, 0x80000001, "act_bpf"), True),  # u32 handles carry their table
    (hook("act_bpf", 3, 2), filter_at(3, 0x80000001, "act_bpf"), False),
])
def test_in_place(wanted, observed, in_place):
    assert wanted.in_place(observed) is in_place


def test_a_new_act_bpf_verdict_is_not_settled_but_in_place():
    wanted = hook("act_bpf", verdict="pass")
    observed = filter_at(1, 0x80000001, "act_bpf", verdict="drop")
    assert wanted.in_place(observed) and not wanted.settled(observed)
