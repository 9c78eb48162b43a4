"""bpf/libxdp's pure parts: a failure in words (the operation, errno by number and name, and the last things
libxdp printed meanwhile), the return convention, names. The binding itself runs against libxdp and the kernel in
tests/integration/test_xdp_dispatcher.py (and refuses clearly where the dispatcher cannot run)."""

import errno

import pytest

from ansible_collections.ebpf.xdp.plugins.module_utils.bpf import libxdp as _libxdp


@pytest.fixture(autouse=True)
def no_messages_left():
    _libxdp.take_messages()
    yield
    _libxdp.take_messages()


def test_a_failure_names_the_operation_and_the_errno_by_number_and_name():
    error = _libxdp.LibxdpError("attach to libxdp's dispatcher on ifindex 3", errno.EBUSY)
    assert str(error) == "attach to libxdp's dispatcher on ifindex 3: Device or resource busy (errno %d EBUSY)" \
        % errno.EBUSY
    assert error.errno == errno.EBUSY


def test_what_libxdp_printed_is_told_once_its_last_five_lines():
    _libxdp._messages.extend("line %d" % n for n in range(7))
    error = _libxdp.LibxdpError("detach", None)
    assert str(error) == "detach; libxdp said: line 2 / line 3 / line 4 / line 5 / line 6"
    assert error.errno is None
    assert _libxdp.take_messages() == []  # taken: the next error does not repeat them


def test_a_negative_return_is_an_error_and_anything_else_passes_through():
    assert _libxdp._check(0, "set priority") == 0 and _libxdp._check(5, "set priority") == 5
    with pytest.raises(_libxdp.LibxdpError) as caught:
        _libxdp._check(-errno.EBUSY, "set priority")
    assert caught.value.errno == errno.EBUSY and str(caught.value).startswith("set priority: ")


def test_names_come_back_as_text():
    assert _libxdp._name(b"xdp_pass") == "xdp_pass" and _libxdp._name(None) == ""
    assert _libxdp._name(b"bad\xff") == "bad\ufffd"
