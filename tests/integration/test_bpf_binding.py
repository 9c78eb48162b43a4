"""The libbpf binding's owned fds and its tcx support, against the real kernel.

tcx is driven through bpf() directly (Debian's libbpf 1.1 predates it):
these tests show the layout of those calls is the kernel's.
"""

import errno
import os

import pytest

from conftest import compile_bpf
from ansible_collections.ebpf.xdp.plugins.module_utils.host import netns as _netns
from ansible_collections.ebpf.xdp.plugins.module_utils.bpf import libbpf as _bpf, loader as _loader

TC_PROGRAMS = r"""
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
SEC("tc")
int tc_first(struct __sk_buff *skb) { return -1; /* TCX_NEXT */ }
SEC("tc")
int tc_second(struct __sk_buff *skb) { return -1; }
char _license[] SEC("license") = "GPL";
"""


@pytest.fixture(scope="module")
def tc_obj(tmp_path_factory):
    src = tmp_path_factory.mktemp("tc") / "tc_two.bpf.c"
    src.write_text(TC_PROGRAMS)
    return compile_bpf(src, src.with_suffix(".o"))


@pytest.mark.kernel("tcx")
def test_tcx_link_create_query_update_detach(pair, tc_obj):
    with _netns.netns(pair.rx):
        index = _netns.ifindex("eth0")
        assert _bpf.tcx_query(index, _bpf.BPF_TCX_INGRESS)["prog_ids"] == []
        with _loader.load(tc_obj, "tc_first", "sched_cls") as first, \
                _loader.load(tc_obj, "tc_second", "sched_cls") as second:
            with _bpf.Link.create_tcx(first.program, index, _bpf.BPF_TCX_INGRESS) as link:
                info = link.info()
                assert info["type"] == "tcx" and info["attach_type"] == "tcx_ingress", info
                assert info["ifindex"] == index and info["prog_id"] == first.info["id"]
                hook = _bpf.tcx_query(index, _bpf.BPF_TCX_INGRESS)
                assert hook["prog_ids"] == [first.info["id"]] and hook["link_ids"] == [info["id"]]
                assert _bpf.tcx_query(index, _bpf.BPF_TCX_EGRESS)["prog_ids"] == []

                # Ordering: the second program goes before the first one's program id.
                with _bpf.Link.create_tcx(second.program, index, _bpf.BPF_TCX_INGRESS, flags=_bpf.BPF_F_BEFORE,
                                          relative_id=first.info["id"]) as before:
                    order = _bpf.tcx_query(index, _bpf.BPF_TCX_INGRESS)
                    assert order["prog_ids"] == [second.info["id"], first.info["id"]], order
                    before.detach()

                # A stale expected revision is refused, and the error names what was tried.
                with pytest.raises(_bpf.BpfError) as stale:
                    _bpf.Link.create_tcx(second.program, index, _bpf.BPF_TCX_INGRESS, expected_revision=1)
                assert stale.value.errno == errno.ESTALE
                assert "attach tcx_ingress link to ifindex %d" % index in str(stale.value)

                link.update(second.program)
                assert _bpf.tcx_query(index, _bpf.BPF_TCX_INGRESS)["prog_ids"] == [second.info["id"]]
                link.detach()
                assert _bpf.tcx_query(index, _bpf.BPF_TCX_INGRESS)["prog_ids"] == []


def program_id_of_fd(fd):
    """The id of the BPF program fd refers to in this process, from the kernel's /proc/self/fdinfo (None when
    fd is not open, or not a program)."""
    try:
        with open("/proc/self/fdinfo/%d" % fd) as handle:
            fields = dict(line.split(":", 1) for line in handle if ":" in line)
    except FileNotFoundError:
        return None
    return int(fields["prog_id"]) if "prog_id" in fields else None


def test_fds_are_owned_and_errors_name_the_target(tc_obj):
    with _loader.load(tc_obj, "tc_first", "sched_cls") as loaded:
        fd = loaded.program.fd
        prog_id = loaded.program.info()["id"]
        # Not just a number: an open fd of this process, on that very program, by the kernel's word.
        assert os.readlink("/proc/self/fd/%d" % fd) == "anon_inode:bpf-prog"
        assert program_id_of_fd(fd) == prog_id > 0
    assert loaded.program.fd == -1, "the with block closed the program's fd"
    # ...and really closed it: the number no longer refers to the program (it may name something opened since).
    assert program_id_of_fd(fd) != prog_id
    with pytest.raises(_bpf.BpfError, match="open BPF link id 4294967295"):
        _bpf.Link.from_id(2 ** 32 - 1)
    with pytest.raises(_bpf.BpfError, match="open pinned map /sys/fs/bpf/no-such-pin"):
        _bpf.Map.from_pin("/sys/fs/bpf/no-such-pin")


def test_select_program_messages(tc_obj):
    with _bpf.BpfObject(tc_obj) as obj:
        with pytest.raises(_loader.LoadError, match="has 2 tc classifier programs .tc_first, tc_second.; name one"):
            _loader.select_program(obj, None, "sched_cls")
        with pytest.raises(_loader.LoadError, match="is a sched_cls program, not xdp; XDP programs are in SEC"):
            _loader.select_program(obj, "tc_first", "xdp")
        with pytest.raises(_loader.LoadError, match="'nope' is not in .*it has: tc_first, tc_second"):
            _loader.select_program(obj, "nope", "sched_cls")
        assert _loader.select_program(obj, "tc_second", "sched_cls") == "tc_second"
