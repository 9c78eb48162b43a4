"""The hook contract (_converge.HookAdapter) run against every registered adapter on the real kernel, in this
process, without the converger: what each adapter promises the converger, the same way for every hook.

On a fresh veth: the empty hook is observed empty; attach() places a program that observe() then finds,
ours, with the placement and holder attach() reported, once it is recorded as the converger records it; a second
program takes its place with update_link() (a link keeps its id) or replace() (held by netlink); detach()
leaves the hook empty, restore() puts the detached program back as it was held, and cleanup() leaves nothing
of the hook's own behind (tc: the clsact the adapter added). Each registered adapter (hooks/adapters: each kind's
and its variants, a named XDP attachment in libxdp's dispatcher among them) with each of its ways of holding a
program that the kernel has (kernel_features).
"""

import os

import pytest

from conftest import sh

from ansible_collections.ebpf.xdp.plugins.module_utils import _datapath
from ansible_collections.ebpf.xdp.plugins.module_utils.host import netns as _netns
from ansible_collections.ebpf.xdp.plugins.module_utils.bpf import loader as _loader
from ansible_collections.ebpf.xdp.plugins.module_utils.hooks import adapters as _adapters, converge as _converge
from ansible_collections.ebpf.xdp.plugins.module_utils.hooks.observed import HELD_BY_LINK, HookError

CASES = [
    pytest.param("xdp", {"mode": "native"}, id="xdp-native"),
    pytest.param("xdp", {"mode": "generic"}, id="xdp-generic"),
    pytest.param("xdp", {"mode": "native", "name": "contract"}, id="xdp-named-native",
                 marks=pytest.mark.kernel("xdp_dispatcher")),
    pytest.param("xdp", {"mode": "generic", "name": "contract"}, id="xdp-named-generic",
                 marks=pytest.mark.kernel("xdp_dispatcher")),
    pytest.param("tc", {"method": "tcx"}, id="tc-tcx", marks=pytest.mark.kernel("tcx")),
    pytest.param("tc", {"method": "cls_bpf"}, id="tc-cls_bpf"),
    pytest.param("tc", {"method": "act_bpf"}, id="tc-act_bpf", marks=pytest.mark.kernel("act_bpf")),
]
PROGRAMS = {"xdp": ("drop_obj", "xdp_drop_count", {"xdp_action": 2}),
            "tc": ("tc_obj", "tc_drop_count", {"tc_action": 0})}
# The adapter class each case's options build (its kind's from_params picks a variant for some).
RUN_AS = {"xdp-native": "XdpHook", "xdp-generic": "XdpHook", "xdp-named-native": "NamedXdpHook",
          "xdp-named-generic": "NamedXdpHook", "tc-tcx": "TcHook", "tc-cls_bpf": "TcHook", "tc-act_bpf": "TcHook"}


def test_every_registered_adapter_is_in_the_contract_run():
    assert sorted(_converge.ADAPTERS) == sorted(PROGRAMS)
    assert sorted({adapter.__name__ for adapter in _adapters.EVERY_ADAPTER}) == sorted(set(RUN_AS.values()))
    assert sorted(RUN_AS) == sorted(case.id for case in CASES)


@pytest.mark.parametrize("kind,options", CASES)
def test_an_adapter_keeps_the_hook_contract_on_the_kernel(request, pair, pin_root, kind, options):
    fixture, program, constants = PROGRAMS[kind]
    obj = request.getfixturevalue(fixture)
    [params] = _datapath.validate({kind: [dict(options, interface="eth0", netns=pair.rx, object=obj,
                                               program=program)]}, pin_root)[kind]
    with _netns.netns(pair.rx):
        hook = _converge.ADAPTERS[kind].from_params(params, _netns.ifindex("eth0"), _netns.netns_key(pair.rx))
        assert type(hook).__name__ == RUN_AS[request.node.callspec.id]
        os.makedirs(hook.pins.directory)

        def load(value):
            return _loader.load(obj, program, hook.prog_type, {list(constants)[0]: value}, load_as=hook.load_as)

        def placed(loaded, attachment):
            """What the converger does after an attach: record it (observe() reads ownership from it). A hook that
            loads its own copy of the program (the dispatcher's) says which program it attached."""
            prog_id = attachment.program.info()["id"] if attachment.program is not None else loaded.info["id"]
            hook.pins.record.write(dict(hook.identity(), prog_id=prog_id, program_name=loaded.name,
                                        **attachment.as_record()))
            found = hook.observe()
            assert (found.prog_id, found.placement, found.holder, found.owned) == (
                prog_id, attachment.placement, attachment.holder, True), (found, attachment)
            return found

        empty = hook.observe()
        assert not empty.attached and empty.placement_key == hook.placement_key, empty
        hook.refuse(empty)  # nothing there to refuse
        planned = hook.planned_placement(empty)

        with load(constants[list(constants)[0]]) as first, load(1) as second:
            hook.prepare(first)  # as the converger does right before the swap
            attachment = hook.attach(first.program)
            assert attachment.placement == planned, (attachment, planned)
            there = placed(first, attachment)
            assert hook.in_place(there) and hook.settled(there), there

            # The second program takes the first one's place in one step: a link keeps its id.
            hook.prepare(second)
            if there.holder == HELD_BY_LINK:
                swapped = hook.update_link(there, second.program)
                assert swapped.link_id == there.link_id, (swapped, there)
            else:
                swapped = hook.replace(there, second.program)
            now = placed(second, swapped)
            assert (now.placement, now.holder) == (there.placement, there.holder), (now, there)

            # As the converger switches: the program held by its id while it is off the hook, then put back.
            with hook.hold(now.prog_id) as old:
                hook.detach(now)
                assert not hook.observe().attached
                hook.restore(now, old)
            back = hook.observe()
            assert (back.prog_id, back.placement, back.holder) == (now.prog_id, now.placement, now.holder), back
            # A dispatcher's component comes back with the run priority and chain call actions it had.
            assert back.extra == now.extra, (back, now)

            hook.detach(back)
            hook.cleanup()
            assert not hook.observe().attached
    # Nothing of the adapter's own is left on the interface (no program, no qdisc it added).
    assert "prog/xdp" not in sh("ip", "-n", pair.rx, "-d", "link", "show", "eth0").stdout
    assert "clsact" not in sh("tc", "-n", pair.rx, "qdisc", "show", "dev", "eth0").stdout


@pytest.mark.kernel("xdp_dispatcher")
def test_a_named_xdp_component_goes_back_only_with_the_settings_libxdp_reads_from_it(pair, pin_root, drop_obj):
    """libxdp sets a run priority only on a program it has not loaded: a component detached for a switch goes back
    with the settings libxdp reads from the program (its .xdp_run_config, else 50 and pass; the contract test's
    case), and one that ran at another priority is refused with words saying so, attaching nothing."""
    [params] = _datapath.validate({"xdp": [dict(mode="native", name="prio", priority=10, interface="eth0",
                                                netns=pair.rx, object=drop_obj, program="xdp_drop_count")]},
                                  pin_root)["xdp"]
    with _netns.netns(pair.rx):
        hook = _converge.ADAPTERS["xdp"].from_params(params, _netns.ifindex("eth0"), _netns.netns_key(pair.rx))
        os.makedirs(hook.pins.directory)
        hook.refuse(hook.observe())
        with _loader.load(drop_obj, "xdp_drop_count", "xdp", {"xdp_action": 2}) as loaded:
            hook.prepare(loaded)
            attachment = hook.attach(loaded.program)
            prog_id = attachment.program.info()["id"]
            hook.pins.record.write(dict(hook.identity(), prog_id=prog_id, program_name=loaded.name,
                                        **attachment.as_record()))
            there = hook.observe()
            assert (there.prog_id, there.extra["priority"]) == (prog_id, 10), there
            with hook.hold(there.prog_id) as old:
                hook.detach(there)
                with pytest.raises(HookError) as refused:
                    hook.restore(there, old)
            assert ("its program (id %d) cannot go back into libxdp's dispatcher with priority 10 and chain call "
                    "actions pass" % prog_id) in str(refused.value), refused.value
            assert "here priority 50 and pass" in str(refused.value), refused.value
            assert not hook.observe().attached
            attachment.program.close()
            hook.cleanup()
