"""bpf/libbpf's pure parts (issue 39 item 4): errors in words (libbpf's own error codes named, the kernel's too),
the verifier log's tail, libbpf's return convention, the instructions written by hand, and the bounded cache of
program and map info; nothing here loads libbpf or calls the kernel."""

import errno
import struct
import sys

import pytest

from ansible_collections.ebpf.xdp.plugins.module_utils.bpf import libbpf as _bpf


def test_an_error_names_the_operation_the_errno_and_what_it_means():
    error = _bpf.BpfError("cannot attach xdp_drop_count to eth0", errno.EBUSY)
    assert str(error) == "cannot attach xdp_drop_count to eth0: %s (errno %d EBUSY)" % (
        _bpf.strerror(errno.EBUSY), errno.EBUSY)
    assert error.errno == errno.EBUSY and error.log == "" and error.log_tail() == []
    assert str(_bpf.BpfError("no errno")) == "no errno" and _bpf.BpfError("no errno").errno is None


def test_libbpf_s_own_codes_are_named_and_said_in_words():
    error = _bpf.BpfError("cannot load prog.o", 4007, log="line 1\nline 2\n\n")
    assert str(error) == "cannot load prog.o: the kernel verifier rejected the program (errno 4007 " \
                         "LIBBPF_ERRNO__VERIFY)"
    assert error.log_tail() == ["line 1", "line 2"] and error.log_tail(1) == ["line 2"]
    assert _bpf.strerror(4001).startswith("not a BPF object")
    assert _bpf.strerror(errno.ENOENT) == "No such file or directory"


def test_a_negative_return_is_its_errno_and_anything_else_passes():
    assert _bpf._check(0, "x") == 0 and _bpf._check(7, "x") == 7
    with pytest.raises(_bpf.BpfError) as caught:
        _bpf._check(-errno.EPERM, "cannot create a map")
    assert caught.value.errno == errno.EPERM and str(caught.value).startswith("cannot create a map: ")


def test_an_instruction_is_packed_as_the_kernel_reads_it():
    mov = _bpf.insn(_bpf.BPF_MOV64_IMM, dst=0, imm=2)
    assert len(mov) == 8 and struct.unpack("=BBhi", mov) == (0xb7, 0, 0, 2)
    regs = _bpf.insn(_bpf.BPF_MOV64_IMM, dst=1, src=2)[1]
    assert regs == (0x21 if sys.byteorder == "little" else 0x12)
    assert _bpf.insn(_bpf.BPF_EXIT) == struct.pack("=BBhi", 0x95, 0, 0, 0)


def test_info_kept_by_id_is_bounded():
    kept = {}
    for key in range(_bpf.INFO_KEPT):
        _bpf._keep(kept, key, key)
    _bpf._keep(kept, 0, "again")  # a key it has: kept as it is, nothing dropped
    assert len(kept) == _bpf.INFO_KEPT and kept[0] == "again"
    _bpf._keep(kept, _bpf.INFO_KEPT, "one more")  # full: started afresh rather than growing without end
    assert kept == {_bpf.INFO_KEPT: "one more"}
