"""bpf/loader's pure parts (issue 39 item 4): checksums as bpf_object returns them, the object read once and
hashed, load-time constants resolved (an interface by name where the program runs), libbpf 0.x's untyped map
sections; no object is opened, nothing reaches the kernel."""

import hashlib
import socket

import pytest

from ansible_collections.ebpf.xdp.plugins.module_utils.bpf import libbpf as _bpf, loader as _loader

DIGEST = "ab" * 32


@pytest.mark.parametrize("checksum", ["sha256:" + DIGEST, " SHA256:" + DIGEST.upper() + " ", "sha256: " + DIGEST])
def test_a_checksum_as_bpf_object_returns_it(checksum):
    assert _loader.parse_checksum(checksum) == DIGEST


@pytest.mark.parametrize("checksum, words", [
    (DIGEST, "is not sha256:<64 hex digits> (the digest ebpf.xdp.bpf_object returns as checksum)"),
    ("md5:" + "ab" * 16, "is not sha256:<64 hex digits>"),
    ("sha256:abc", "a sha256 digest is 64 hex digits, not 'abc'"),
    ("sha256:" + "g" * 64, "a sha256 digest is 64 hex digits"),
])
def test_a_checksum_that_is_none_is_refused_saying_what_one_is(checksum, words):
    with pytest.raises(_loader.LoadError) as caught:
        _loader.parse_checksum(checksum)
    assert words in str(caught.value)


def test_the_object_is_read_once_and_refused_unless_it_is_the_expected_one(tmp_path):
    obj = tmp_path / "prog.o"
    obj.write_bytes(b"\x7fELF not really")
    data, digest = _loader.read_object(str(obj))
    assert data == b"\x7fELF not really" and digest == hashlib.sha256(data).hexdigest()
    _loader.verify_checksum(str(obj), digest, "sha256:" + digest)
    _loader.verify_checksum(str(obj), digest, None)
    with pytest.raises(_loader.LoadError, match="object %s does not match its checksum: expected sha256:%s, found "
                                                "sha256:%s; nothing was loaded" % (obj, DIGEST, digest)):
        _loader.verify_checksum(str(obj), digest, "sha256:" + DIGEST)
    with pytest.raises(_loader.LoadError, match="object file %s/missing.o does not exist; compile it with "
                                                "ebpf.xdp.bpf_object" % tmp_path):
        _loader.read_object(str(tmp_path / "missing.o"))


def test_constants_are_numbers_and_an_interface_becomes_its_index_here():
    loopback = socket.if_nametoindex("lo")
    assert _loader.resolve_constants({"xdp_action": 2, "on": True, "out": {"ifindex": "lo"}}) == {
        "xdp_action": 2, "on": True, "out": loopback}
    assert _loader.resolve_constants(None) == {}
    with pytest.raises(_loader.LoadError, match=r"constant out: \{'name': 'lo'\} is not a setting; give a number, a "
                                                r"boolean, or \{ifindex: INTERFACE\}"):
        _loader.resolve_constants({"out": {"name": "lo"}})
    with pytest.raises(_loader.LoadError, match="constant out: "):
        _loader.resolve_constants({"out": {"ifindex": "nosuchif0"}})


def test_libbpf_0x_untyped_map_sections_name_their_attach_type():
    assert _loader.legacy_map_attach_type("xdp_devmap/egress") == _bpf.BPF_XDP_DEVMAP
    assert _loader.legacy_map_attach_type("xdp_cpumap/x") == _bpf.BPF_XDP_CPUMAP
    assert _loader.legacy_map_attach_type("xdp") is None and _loader.legacy_map_attach_type("xdp1") is None
