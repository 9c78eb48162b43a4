"""host/privileges: the capabilities a BPF or netlink change needs, read from a /proc/<pid>/status text, and which
of them a capability set lacks (CAP_SYS_ADMIN standing in for CAP_BPF, as kernels before 5.8 have only it)."""

import pytest

from ansible_collections.ebpf.xdp.plugins.module_utils.host import privileges as _privileges

ROOT_STATUS = "Name:\tpython3\nCapInh:\t0000000000000000\nCapPrm:\t000001ffffffffff\nCapEff:\t000001ffffffffff\n"


def caps(*names):
    return sum(1 << _privileges.CAPABILITIES[name] for name in names)


@pytest.mark.parametrize("status, effective", [
    (ROOT_STATUS, 0x1FFFFFFFFFF),
    ("CapEff:\t0000000000003000\n", caps("CAP_NET_ADMIN", "CAP_NET_RAW")),
    ("Name:\tx\n", None),  # no CapEff line
    ("CapEff:\tzz\n", None),  # not hexadecimal
    ("CapEff:\n", None),
])
def test_the_effective_set_is_read_from_a_status_text(status, effective):
    assert _privileges.capability_set(status) == effective


@pytest.mark.parametrize("effective, missing", [
    (caps("CAP_BPF", "CAP_NET_ADMIN", "CAP_SYS_ADMIN"), []),
    (caps("CAP_NET_ADMIN", "CAP_SYS_ADMIN"), []),  # CAP_SYS_ADMIN grants what CAP_BPF grants
    (caps("CAP_BPF", "CAP_NET_ADMIN"), ["CAP_SYS_ADMIN"]),
    (caps("CAP_NET_RAW"), ["CAP_BPF", "CAP_NET_ADMIN", "CAP_SYS_ADMIN"]),
    (0, ["CAP_BPF", "CAP_NET_ADMIN", "CAP_SYS_ADMIN"]),
])
def test_what_a_bpf_change_needs_and_a_set_lacks(effective, missing):
    assert _privileges.lacking(_privileges.BPF_CAPABILITIES, effective) == missing


def test_this_process_is_read_as_the_same_text():
    with open("/proc/self/status") as status:
        assert _privileges.effective_capabilities() == _privileges.capability_set(status.read())
