"""The host session's bookkeeping: sockets per namespace, dumps read once until a write, probes asked once.
The namespace and the socket are stood in for (a real run's round trips are counted in
tests/integration/test_tc_program.py::test_a_first_attach_reads_the_kernel_once)."""

import pytest

from ansible_collections.ebpf.xdp.plugins.module_utils.host import session as _session


class FakeSocket:
    opened = 0

    def __init__(self):
        FakeSocket.opened += 1
        self.closed = False

    def close(self):
        self.closed = True


class Where(dict):
    """The namespace the calling thread is in ("now"); a move is announced as host/netns does after setns."""

    reads = 0

    def __setitem__(self, key, value):
        super().__setitem__(key, value)
        _session.moved()

    def read(self):
        self.reads += 1
        return self["now"]


@pytest.fixture
def netns(monkeypatch):
    """The namespace the calling thread is in, as the test says; sockets are fakes."""
    where = Where(now=(0, 1))
    monkeypatch.setattr(_session, "current_netns", where.read)
    monkeypatch.setattr(_session, "open_socket", FakeSocket)
    FakeSocket.opened = 0
    return where


def reader(answers):
    calls = []

    def read():
        calls.append(1)
        return answers[len(calls) - 1]
    return read, calls


def test_one_socket_per_namespace_closed_with_the_session(netns):
    with _session.host() as session:
        with _session.socket() as first, _session.socket() as again:
            assert first is again
        netns["now"] = (0, 2)
        with _session.socket() as other:
            assert other is not first
    assert FakeSocket.opened == 2 and first.closed and other.closed
    assert session.counts["sockets"] == 2


def test_outside_a_session_each_call_has_its_own_socket(netns):
    with _session.socket() as one:
        pass
    with _session.socket() as two:
        pass
    assert one is not two and one.closed and two.closed


def test_a_dump_is_read_once_until_a_write_in_its_namespace(netns):
    read, calls = reader(["qdiscs 1", "qdiscs 2", "qdiscs 3"])
    filters, filter_calls = reader(["filters 1", "filters 2"])
    with _session.host() as session:
        assert _session.dump(("qdiscs",), read) == _session.dump(("qdiscs",), read) == "qdiscs 1"
        assert _session.dump(("filters", 2, "ingress", 0), filters) == "filters 1"
        _session.wrote("filters")  # a filter changed: the qdiscs stand
        assert _session.dump(("qdiscs",), read) == "qdiscs 1"
        assert _session.dump(("filters", 2, "ingress", 0), filters) == "filters 2"
        netns["now"] = (0, 2)
        _session.wrote()  # another namespace's write
        netns["now"] = (0, 1)
        assert _session.dump(("qdiscs",), read) == "qdiscs 1"
        _session.wrote()  # a qdisc changed here: every dump of the namespace goes
        assert _session.dump(("qdiscs",), read) == "qdiscs 2"
    assert len(calls) == 2 and len(filter_calls) == 2
    assert session.counts["dump:qdiscs"] == 2 and session.counts["dump:filters"] == 2


def test_what_is_read_by_path_is_forgotten_by_kind_or_by_path_and_known_without_reading(netns):
    """A map set's state and groups listing are forgotten for that set alone when another run changed it
    (maps/devmap's catch_up), in every namespace; what this run wrote it knows without reading."""
    sets = {path: reader(["%s 1" % path, "%s 2" % path]) for path in ("/a", "/b")}
    with _session.host() as session:
        for path, (read, _calls) in sets.items():
            assert _session.dump(("map_set", path), read) == path + " 1"
        netns["now"] = (0, 2)
        _session.forget("map_set", "/a")  # from another namespace: read by path, the same everywhere
        netns["now"] = (0, 1)
        assert [_session.dump(("map_set", path), sets[path][0]) for path in sets] == ["/a 2", "/b 1"]
        _session.known(("generation", "/a"), 7)
        assert _session.dump(("generation", "/a"), lambda: pytest.fail("read again")) == 7
        session.records = {"/a/groups/1/owner": ("stamp", b"{}"), "/b/groups/1/owner": ("stamp", b"{}"),
                           "/a/groupsx/owner": ("stamp", b"{}")}
        _session.forget_records("/a/groups")
        assert sorted(session.records) == ["/a/groupsx/owner", "/b/groups/1/owner"]
    assert [len(calls) for _read, calls in sets.values()] == [2, 1]


def test_outside_a_session_every_dump_is_read(netns):
    read, calls = reader(["a", "b"])
    assert [_session.dump(("qdiscs",), read), _session.dump(("qdiscs",), read)] == ["a", "b"]
    _session.wrote()  # nothing to forget: no error


def test_a_failed_read_is_not_kept(netns):
    def fails():
        raise OSError("gone")
    read, _calls = reader(["qdiscs"])
    with _session.host():
        with pytest.raises(OSError):
            _session.dump(("qdiscs",), fails)
        assert _session.dump(("qdiscs",), read) == "qdiscs"


def test_a_probe_is_asked_once_per_session_and_nested_sessions_share_it(netns):
    asked = []
    with _session.host() as outer:
        assert _session.probe("tcx", lambda: asked.append(1) or True) is True
        with _session.host() as inner:
            assert inner is outer
            assert _session.probe("tcx", lambda: asked.append(1) or False) is True
    assert asked == [1] and outer.counts["probe:tcx"] == 1
    assert _session.active() is None


def test_the_namespace_is_read_once_until_the_thread_moves(netns):
    read, _calls = reader(["qdiscs"] * 4)
    with _session.host():
        for _again in range(3):
            _session.dump(("qdiscs",), read)
        assert netns.reads == 1
        netns["now"] = (0, 2)
        _session.dump(("qdiscs",), read)
        with _session.socket():
            pass
        assert netns.reads == 2


def test_round_trips_are_counted_by_kind_and_what_inside_a_session_only():
    _session.count("bpf", "obj_get")  # outside a session: nowhere to count, and no error
    with _session.host() as session:
        _session.count("bpf", "obj_get")
        _session.count("bpf", "map_lookup_elem")
        _session.count("netlink", "links")
    assert session.counts["bpf"] == 2 and session.counts["bpf:obj_get"] == 1
    assert session.counts["netlink"] == 1 and session.counts["netlink:links"] == 1
