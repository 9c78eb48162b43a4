"""host/netdev: the netdev generic netlink family's answers read with the standard library (a device's
xdp_features), and the features named as `ynl` prints them. The requests go to the kernel in
tests/integration (devmap groups' warnings, xdp_trafficgen's engine choice); here the answers are the kernel's
bytes, built by hand."""

import errno
import struct

import pytest

from ansible_collections.ebpf.xdp.plugins.module_utils.host import netdev as _netdev, nlmsg as _nlmsg, \
    session as _session

NETDEV_FAMILY = 0x22


def message(kind, seq, body):
    return struct.pack("=IHHII", 16 + len(body), kind, 0, seq, 0) + body


def genl(attrs):
    return struct.pack("=BBH", 1, 1, 0) + attrs  # genlmsghdr: cmd, version, reserved


class Answers:
    """A generic netlink socket's other end: what was sent, and the datagrams the kernel answers, in turn."""

    def __init__(self, *datagrams):
        self.datagrams = list(datagrams)
        self.sent = []

    def send(self, data):
        self.sent.append(data)

    def recv(self, _size):
        return self.datagrams.pop(0)


def test_the_family_is_asked_by_name_and_its_id_read():
    sock = Answers(message(_netdev.GENL_ID_CTRL, 1, genl(
        _nlmsg.attr(_netdev.CTRL_ATTR_FAMILY_NAME, b"netdev\0")
        + _nlmsg.attr(_netdev.CTRL_ATTR_FAMILY_ID, struct.pack("=H", NETDEV_FAMILY) + b"\0\0"))))
    assert _netdev._family_id(sock) == NETDEV_FAMILY
    [request] = sock.sent
    length, kind, flags, seq, _pid = struct.unpack_from("=IHHII", request)
    assert (length, kind, flags, seq) == (len(request), _netdev.GENL_ID_CTRL, _nlmsg.NLM_F_REQUEST, 1)
    assert request[16] == _netdev.CTRL_CMD_GETFAMILY
    assert _nlmsg.attributes(request, 20) == {_netdev.CTRL_ATTR_FAMILY_NAME: b"netdev\0"}


def test_a_kernel_without_the_family_answers_none():
    # Linux < 6.3: the controller answers ENOENT for the name.
    sock = Answers(message(_nlmsg.NLMSG_ERROR, 1, struct.pack("=i", -errno.ENOENT) + b"\0" * 16))
    assert _netdev._family_id(sock) is None


def test_an_error_is_the_kernels_errno():
    sock = Answers(message(_nlmsg.NLMSG_ERROR, 2, struct.pack("=i", -errno.ENODEV) + b"\0" * 16))
    with pytest.raises(OSError) as caught:
        _netdev._request(sock, NETDEV_FAMILY, _netdev.NETDEV_CMD_DEV_GET, b"", 2)
    assert caught.value.errno == errno.ENODEV


def test_answers_to_other_requests_are_passed_over():
    features = _nlmsg.attr(_netdev.NETDEV_A_DEV_XDP_FEATURES, struct.pack("=Q", 0x7))
    datagram = message(NETDEV_FAMILY, 1, genl(b"")) + message(NETDEV_FAMILY, 2, genl(features))
    answer = _netdev._request(Answers(datagram), NETDEV_FAMILY, _netdev.NETDEV_CMD_DEV_GET, b"", 2)
    assert answer == {_netdev.NETDEV_A_DEV_XDP_FEATURES: struct.pack("=Q", 0x7)}


def test_no_answer_to_the_request_is_a_protocol_error():
    with pytest.raises(OSError) as caught:
        _netdev._request(Answers(message(NETDEV_FAMILY, 9, genl(b""))), NETDEV_FAMILY, 1, b"", 2)
    assert caught.value.errno == errno.EPROTO


def test_each_request_is_counted_in_the_host_session():
    with _session.host() as session:
        _netdev._request(Answers(message(NETDEV_FAMILY, 2, genl(b""))), NETDEV_FAMILY, 1, b"", 2)
    assert session.counts["netlink:xdp_features"] == 1


@pytest.mark.parametrize("features, names", [
    (0x23, ["basic", "redirect", "rx-sg"]),  # a veth whose peer has neither an XDP program nor GRO
    (0x27, ["basic", "redirect", "ndo-xmit", "rx-sg"]),
    (0, []),
])
def test_features_are_named_as_ynl_prints_them(features, names):
    assert _netdev.feature_names(features) == names
