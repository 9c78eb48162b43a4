"""hooks/tc_hooks' pure part: whether our ownership record describes a program found on a tc hook (tc_owned),
the test every look at a tc hook makes before it calls a program ours. Reading the hooks themselves needs the
kernel: tests/integration/test_tc_program.py and test_tc_order.py."""

import pytest

from ansible_collections.ebpf.xdp.plugins.module_utils.bpf import record as _record
from ansible_collections.ebpf.xdp.plugins.module_utils.hooks import tc_hooks as _tc_hooks


def record(**fields):
    return _record.stored(**fields)


TCX = {"prog_id": 7, "method": "tcx", "link_id": 3}
FILTER = {"prog_id": 9, "method": "cls_bpf", "priority": 2, "handle": 1}


@pytest.mark.parametrize("entry, stored, owned", [
    (TCX, record(prog_id=7, placement="tcx"), True),  # a tcx link has no place but its order
    (FILTER, dict(record(prog_id=9, placement="cls_bpf"), priority=2, handle=1), True),
    (FILTER, dict(record(prog_id=9, placement="cls_bpf"), priority=3, handle=1), False),  # another priority
    (FILTER, dict(record(prog_id=9, placement="cls_bpf"), priority=2, handle=2), False),  # another handle
    (FILTER, dict(record(prog_id=9, placement="act_bpf"), priority=2, handle=1), False),  # held another way
    (TCX, record(prog_id=8, placement="tcx"), False),  # another program
    (TCX, None, False),  # no record
])
def test_our_record_owns_only_the_program_it_describes_in_its_place(entry, stored, owned):
    assert _tc_hooks.tc_owned(entry, stored) is owned
    assert _tc_hooks.tc_owned(entry, _record.of(stored)) is owned  # typed or as stored, alike
