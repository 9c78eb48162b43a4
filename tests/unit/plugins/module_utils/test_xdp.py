"""hooks/xdp's planning, apart from the kernel (issue 39 item 4): the adapter a task's options give, its part of a
program's identity, when a new program takes the old one's place without a mode switch, the placement check mode
predicts, and the converger's swap that follows from it."""

import pytest

from ansible_collections.ebpf.xdp.plugins.module_utils.hooks.converge import (
    ATTACH, REATTACH, REPLACE, UPDATE_LINK, plan_swap)
from ansible_collections.ebpf.xdp.plugins.module_utils.hooks.observed import (
    HELD_BY_LINK, HELD_BY_NETLINK, HookError, Observed)
from ansible_collections.ebpf.xdp.plugins.module_utils.hooks.xdp import NamedXdpHook, XdpHook

OURS = {"mode": "native", "attach": "link", "prog_id": 5}


def hook(mode):
    params = dict(interface="eth0", mode=mode, pin_root="/sys/fs/bpf/ebpf_xdp", name=None)
    return XdpHook.from_params(params, 4, "ns1")


def test_a_task_s_options_give_the_unnamed_hook_and_its_pins():
    xdp = hook("generic")
    assert (xdp.ifname, xdp.ifindex, xdp.mode, xdp.name) == ("eth0", 4, "generic", "xdp")
    assert xdp.pins.directory == "/sys/fs/bpf/ebpf_xdp/ns1/eth0/xdp" and not isinstance(xdp, NamedXdpHook)
    assert xdp.identity() == {"requested_mode": "generic"}


@pytest.mark.parametrize("mode, observed, in_place, placement", [
    ("auto", Observed(), True, "native"),  # nothing there: native first
    ("auto", Observed(prog_id=5, placement="generic", holder=HELD_BY_LINK, record=OURS), True, "generic"),
    ("native", Observed(prog_id=5, placement="native", holder=HELD_BY_LINK, record=OURS), True, "native"),
    ("native", Observed(prog_id=5, placement="generic", holder=HELD_BY_NETLINK), False, "native"),
    ("generic", Observed(), False, "generic"),
])
def test_in_place_only_without_a_mode_switch(mode, observed, in_place, placement):
    xdp = hook(mode)
    assert xdp.in_place(observed) is in_place
    assert xdp.planned_placement(observed) == placement


@pytest.mark.parametrize("mode, observed, action", [
    ("auto", Observed(), ATTACH),
    ("native", Observed(prog_id=5, placement="native", holder=HELD_BY_LINK, record=OURS), UPDATE_LINK),
    ("auto", Observed(prog_id=5, placement="generic", holder=HELD_BY_NETLINK, record=dict(OURS, attach="netlink")),
     REPLACE),
    ("generic", Observed(prog_id=5, placement="native", holder=HELD_BY_LINK, record=OURS), REATTACH),
])
def test_the_swap_the_converger_makes_of_it(mode, observed, action):
    xdp = hook(mode)
    assert plan_swap(observed, xdp.in_place(observed), same_program=False, movable=xdp.movable(observed)) == action


def test_an_offloaded_program_is_refused_and_others_are_not():
    xdp = hook("auto")
    with pytest.raises(HookError, match="eth0 has an offloaded \\(hardware\\) XDP program, which ebpf.xdp does not "
                                        "manage"):
        xdp.refuse(Observed(prog_id=9, placement="offload", holder=HELD_BY_NETLINK))
    xdp.refuse(Observed(prog_id=9, placement="native", holder=HELD_BY_NETLINK))
    xdp.refuse(Observed())
