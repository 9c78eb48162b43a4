"""ebpf.xdp.capture on a real veth: exact per-protocol counts and bytes, the count and time bounds, filters,
directions, where an XDP program on the interface hides frames (and its peer does not), check mode, bad input.

The frames are sent raw from this process inside the sender's namespace
(traffic/frames), between documentation addresses that neither namespace
has a route to, and neither forwards: the receiver's stack drops them
without a word (no ARP, no ICMP redirect or unreachable, and IPv6 is off),
so what a capture sees is exactly what was sent. Each capture runs as a module in a
thread; frames are sent once its packet socket is bound (read in
/proc/net/packet of its namespace), so none is sent before it listens.
"""

import concurrent.futures
import os
import stat
import struct
import time

import pytest

from conftest import SYSTEM_PYTHON, ModuleRunner, sh
from ansible_collections.ebpf.xdp.plugins.module_utils.host import netns as _netns
from ansible_collections.ebpf.xdp.plugins.module_utils.traffic import frames as _frames, pcap as _pcap

# TEST-NET-1 and -2 (RFC 5737): off the pair's subnet, so the receiver's stack neither answers nor forwards them.
SRC, DST = "192.0.2.1", "198.51.100.2"
SRC6, DST6 = "2001:db8::1", "2001:db8:1::2"
ETH_P_ALL = "0003"


def frame(pair, protocol, src_port=1000, dst_port=2000, version=4, **kwargs):
    src, dst = (SRC, DST) if version == 4 else (SRC6, DST6)
    return _frames.build_frame(protocol, pair.tx_mac, pair.rx_mac, src, dst, src_port, dst_port, **kwargs)


def arp(pair, target="192.0.2.2"):
    """An ARP request for an address nobody has: the receiver does not answer it."""
    body = struct.pack("!HHBBH", 1, 0x0800, 6, 4, 1) + _frames.mac_bytes(pair.tx_mac) + bytes([192, 0, 2, 1]) \
        + bytes(6) + bytes(map(int, target.split(".")))
    return (b"\xff" * 6 + _frames.mac_bytes(pair.tx_mac) + b"\x08\x06" + body).ljust(60, b"\0")


def local_experimental(pair, n):
    """EtherType 0x88b5 (IEEE local experimental): an "other" frame."""
    return (_frames.mac_bytes(pair.rx_mac) + _frames.mac_bytes(pair.tx_mac) + b"\x88\xb5" + bytes([n])).ljust(60, b"\0")


def mix(pair):
    """(expected counts, frames in the order sent): IPv4 and IPv6, a VLAN tag, ARP, other, one large frame."""
    frames = []
    for n in range(20):
        frames.append(frame(pair, "udp", src_port=1000 + n))
        if n < 10:
            frames.append(frame(pair, "tcp", src_port=2000 + n))
        if n < 5:
            frames.append(frame(pair, "icmp"))
            frames.append(frame(pair, "udp", src_port=3000 + n, version=6))
        if n < 3:
            frames.append(frame(pair, "icmp", version=6))
            frames.append(local_experimental(pair, n))
        if n < 2:
            frames.append(arp(pair))
    frames.append(frame(pair, "tcp", src_port=4000, vlan=100, size=200))
    frames.append(frame(pair, "udp", src_port=4001, size=1000))
    counts = {"udp": 26, "tcp": 11, "icmp": 5, "icmpv6": 3, "arp": 2, "other": 3}
    assert sum(counts.values()) == len(frames) and _pcap.count_protocols(frames) == counts
    return counts, frames


def send_from(ns, frames):
    """Send each frame once, in order, out of ns/eth0."""
    with _netns.netns(ns):
        sent, _seconds = _frames.send("eth0", [(str(i), f) for i, f in enumerate(frames)], 1)
    assert sum(sent.values()) == len(frames)


def listening(ns, dev="eth0"):
    """Packet sockets for every protocol bound to ns/dev (there are none but a capture's)."""
    with _netns.netns(ns):
        index = _netns.ifindex(dev)
        with open("/proc/thread-self/net/packet") as table:
            rows = [line.split() for line in table.readlines()[1:]]
    return sum(1 for row in rows if row[3] == ETH_P_ALL and row[4] == str(index))


class Captures:
    """Module runs in threads, each started and waited for until its socket listens."""

    def __init__(self, run, module_start_seconds):
        self.run = run
        self.start_allowance = 20 + 3 * module_start_seconds
        self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=4)

    def start(self, ns, path, **args):
        before = listening(ns)
        future = self.pool.submit(self.run, "capture", dict(dict(interface="eth0", netns=ns, path=str(path)), **args))
        deadline = time.monotonic() + self.start_allowance
        while listening(ns) == before:
            assert not future.done(), future.result()
            assert time.monotonic() < deadline, "the capture in %s never listened" % ns
            time.sleep(0.01)
        return future

    def close(self):
        self.pool.shutdown(wait=True)


@pytest.fixture
def pair(pair):
    """conftest's pair, neither end forwarding (new namespaces may inherit ip_forward=1 from the host)."""
    for ns in (pair.tx, pair.rx):
        sh("ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv4.ip_forward=0")
    return pair


@pytest.fixture
def captures(run_distro, module_start_seconds):
    c = Captures(run_distro, module_start_seconds)
    yield c
    c.close()


def result(future):
    res = future.result(timeout=60)
    assert not res.get("failed") and res["changed"] is True, res
    return res


def frames_in(path):
    linktype, records = _pcap.read(str(path))
    assert linktype == _pcap.LINKTYPE_ETHERNET
    return records


# ---------------------------------------------------------------- what is captured, exactly


@pytest.mark.debian12("capture")
def test_receiver_captures_exactly_what_was_sent(captures, pair, tmp_path):
    counts, frames = mix(pair)
    path = tmp_path / "rx.pcap"
    # One frame more than is sent: the capture ends on its time bound, so a frame nobody sent would show.
    started = time.time()
    future = captures.start(pair.rx, path, count=len(frames) + 1, seconds=3)
    send_from(pair.tx, frames)
    res = result(future)
    assert res["frames"] == len(frames) and res["protocols"] == counts, res
    assert res["bytes"] == sum(map(len, frames)) and res["truncated"] == 0 and res["dropped"] == 0, res
    assert res["path"] == str(path) and 3 <= res["seconds"] < 6, res
    records = frames_in(path)
    # Byte for byte, in order, the VLAN tag (which the kernel takes out of the frame) put back.
    assert [r.data for r in records] == frames
    assert [r.length for r in records] == [len(f) for f in frames]
    stamps = [r.timestamp for r in records]
    assert stamps == sorted(stamps) and started <= stamps[0] <= stamps[-1] <= time.time()


def test_count_bound_stops_at_count(captures, pair, tmp_path):
    frames = [frame(pair, "udp", src_port=5000 + n) for n in range(50)]
    path = tmp_path / "ten.pcap"
    future = captures.start(pair.rx, path, count=10, seconds=30)
    send_from(pair.tx, frames)
    res = result(future)
    assert res["frames"] == 10 and res["protocols"]["udp"] == 10 and res["seconds"] < 5, res
    assert [r.data for r in frames_in(path)] == frames[:10]


def test_time_bound_without_traffic(run, pair, tmp_path, module_start_seconds):
    path = tmp_path / "quiet.pcap"
    started = time.monotonic()
    res = run("capture", dict(interface="eth0", netns=pair.rx, path=str(path), seconds=1))
    took = time.monotonic() - started
    assert not res.get("failed") and res["changed"] is True, res
    assert res["frames"] == 0 and res["bytes"] == 0 and res["protocols"] == dict.fromkeys(_pcap.PROTOCOLS, 0), res
    assert 1.0 <= res["seconds"] < 2 and took < 10 + 3 * module_start_seconds, (res, took)
    assert os.path.getsize(path) == 24 and frames_in(path) == []


def test_protocol_and_port_filters(captures, pair, tmp_path):
    _counts, frames = mix(pair)
    dns = [frame(pair, "udp", 40000, 53), frame(pair, "tcp", 53, 40001), frame(pair, "udp", 53, 53, version=6),
           frame(pair, "tcp", 40002, 53, vlan=7)]
    frames = frames[:20] + [dns[0]] + frames[20:40] + dns[1:3] + frames[40:] + [dns[3]]
    by_port, by_protocol = tmp_path / "dns.pcap", tmp_path / "icmp.pcap"
    # Bounded by count, not time: a module that starts slowly on a busy machine must not end the other's time.
    on_port = captures.start(pair.rx, by_port, ports=[53], protocols=["udp", "tcp"], count=4, seconds=30)
    on_protocol = captures.start(pair.rx, by_protocol, protocols=["icmp", "icmpv6", "arp"], count=10, seconds=30)
    send_from(pair.tx, frames)
    res = result(on_port)
    assert res["frames"] == 4 and res["protocols"] == dict(dict.fromkeys(_pcap.PROTOCOLS, 0), udp=2, tcp=2), res
    assert [r.data for r in frames_in(by_port)] == dns
    res = result(on_protocol)
    assert res["protocols"] == dict(dict.fromkeys(_pcap.PROTOCOLS, 0), icmp=5, icmpv6=3, arp=2), res
    wanted = ("icmp", "icmpv6", "arp")
    assert [r.data for r in frames_in(by_protocol)] == [f for f in frames if _pcap.protocol(f) in wanted]


def test_snaplen_cuts_frames_and_keeps_their_length(captures, pair, tmp_path):
    frames = [frame(pair, "udp", size=1000), frame(pair, "tcp", size=90), frame(pair, "udp", size=101)]
    path = tmp_path / "cut.pcap"
    future = captures.start(pair.rx, path, snaplen=100, count=3)
    send_from(pair.tx, frames)
    res = result(future)
    assert res["frames"] == 3 and res["truncated"] == 2 and res["bytes"] == 1191, res
    records = frames_in(path)
    assert [(r.data, r.length) for r in records] == [(f[:100], len(f)) for f in frames]


def test_directions(captures, pair, tmp_path):
    """Frames rx/eth0 receives (from tx) and frames it sends (from a raw socket on rx itself)."""
    arriving = [frame(pair, "udp", src_port=6000 + n) for n in range(5)]
    leaving = [_frames.build_frame("tcp", pair.rx_mac, pair.tx_mac, DST, SRC, 7000 + n, 80) for n in range(3)]
    paths = {d: tmp_path / ("%s.pcap" % d) for d in ("in", "out", "both")}
    expected = {"in": arriving, "out": leaving, "both": arriving + leaving}
    futures = {d: captures.start(pair.rx, paths[d], direction=d, count=len(expected[d]), seconds=30) for d in paths}
    send_from(pair.tx, arriving)
    send_from(pair.rx, leaving)
    for direction, frames in expected.items():
        res = result(futures[direction])
        assert res["frames"] == len(frames), (direction, res)
        assert [r.data for r in frames_in(paths[direction])] == frames, direction


# ---------------------------------------------------------------- XDP hides frames from the receiver's socket


def test_the_peer_sees_what_xdp_drops(run_distro, captures, pair, drop_obj, tmp_path):
    attached = run_distro("xdp_program", dict(interface="eth0", netns=pair.rx, object=drop_obj))
    assert attached["changed"] and not attached.get("failed"), attached
    _counts, frames = mix(pair)
    at_receiver, at_sender = tmp_path / "rx.pcap", tmp_path / "tx.pcap"
    # The sender's capture first (bounded by count), the receiver's, bounded by time, just before the frames.
    sender = captures.start(pair.tx, at_sender, direction="out", count=len(frames), seconds=30)
    receiver = captures.start(pair.rx, at_receiver, seconds=3)
    send_from(pair.tx, frames)
    res = result(receiver)
    assert res["frames"] == 0, res
    assert frames_in(at_receiver) == []
    res = result(sender)
    assert res["frames"] == len(frames) and res["protocols"] == _pcap.count_protocols(frames), res
    assert [r.data for r in frames_in(at_sender)] == frames
    # The program did see (and drop) every one of them, and is still there, as it was.
    prog = run_distro("xdp_facts", dict(netns=pair.rx))["ansible_facts"]["xdp"]["interfaces"]["eth0"]["xdp"]
    assert sum(prog["counters"]["proto_count"].values()) == len(frames), prog
    assert prog["id"] == attached["id"] == pair.xdp_prog_id()


# ---------------------------------------------------------------- check mode, runs again, bad input


def test_check_mode_writes_nothing_and_every_run_writes(run_distro, captures, pair, tmp_path):
    path = tmp_path / "out.pcap"
    args = dict(interface="eth0", netns=pair.rx, path=str(path), seconds=0.5)
    res = run_distro("capture", args, check=True)
    assert res["changed"] is True and not res.get("failed") and res["frames"] == 0 and res["seconds"] == 0, res
    assert os.listdir(tmp_path) == []
    first = run_distro("capture", args)
    assert first["changed"] is True and first["frames"] == 0, first
    inode = os.stat(path).st_ino
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600, "frames are other people's traffic"
    # Not idempotent by nature: a second run captures anew and writes the file again (a new file, renamed over).
    future = captures.start(pair.rx, path, count=2)
    send_from(pair.tx, [frame(pair, "udp"), frame(pair, "tcp")])
    assert result(future)["frames"] == 2
    assert os.stat(path).st_ino != inode and len(frames_in(path)) == 2
    assert os.listdir(tmp_path) == ["out.pcap"]


def test_an_interface_going_down_fails_the_capture_and_writes_nothing(captures, pair, tmp_path):
    future = captures.start(pair.rx, tmp_path / "x.pcap", seconds=20)
    sh("ip", "-n", pair.rx, "link", "set", "eth0", "down")
    res = future.result(timeout=60)
    assert res.get("failed") is True and res["changed"] is False, res
    assert res["msg"] == "capture on eth0 stopped after 0 frames: the interface went down or was removed; nothing " \
                         "was written", res
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("args,message", [
    (dict(interface="nosuch0"), "interface 'nosuch0' does not exist in this network namespace"),
    (dict(netns="nosuch-ns"), "network namespace 'nosuch-ns' does not exist (no /run/netns/nosuch-ns)"),
    (dict(path="{tmp}/nosuch/out.pcap"),
     "cannot write {tmp}/nosuch/out.pcap: its directory {tmp}/nosuch does not exist"),
    (dict(path="{tmp}"), "cannot write {tmp}: it is a directory; give the path of the pcap file"),
    (dict(snaplen=65536), "snaplen must be between 1 and 65535 bytes, not 65536"),
    (dict(snaplen=0), "snaplen must be between 1 and 65535 bytes, not 0"),
    (dict(count=0), "count must be a positive number of frames, not 0"),
    (dict(seconds=-1), "seconds must be a positive number of seconds, not -1.0"),
    (dict(ports=[53], protocols=["icmp"]), "ports match UDP and TCP frames only, and protocols lists neither udp nor "
                                           "tcp"),
    (dict(ports=[65536]), "ports must be between 0 and 65535, not 65536"),
    (dict(direction="up"), "value of direction must be one of: in, out, both, got: up"),
    (dict(protocols=["sctp"]), "value of protocols must be one or more of: udp, tcp, icmp, icmpv6, arp, other. Got no "
                               "match for: sctp"),
])
@pytest.mark.parametrize("check", [True, False], ids=["check", "run"])
def test_bad_input_fails_and_writes_nothing(run_distro, pair, tmp_path, args, message, check):
    out = tmp_path / "out"
    out.mkdir()
    names = dict(tmp=str(out))
    args = {k: (v.format(**names) if isinstance(v, str) else v) for k, v in args.items()}
    res = run_distro("capture", dict(dict(interface="eth0", netns=pair.rx, path=str(out / "x.pcap"), seconds=0.2),
                                     **args), check=check)
    assert res.get("failed") is True and res["changed"] is False, res
    assert res["msg"] == message.format(**names), res
    assert os.listdir(out) == []


@pytest.mark.parametrize("plant", ["link", "world-writable", "other user's"])
@pytest.mark.parametrize("check", [True, False], ids=["check", "run"])
def test_a_link_or_a_shared_directory_is_refused_before_capturing(run_distro, pair, tmp_path, plant, check):
    """Root never writes through a link nor where another user could swap the file: refused with what is wrong,
    the link's target untouched, nothing written."""
    out = tmp_path / "out"
    out.mkdir(mode=0o700)
    victim = tmp_path / "victim"
    victim.write_bytes(b"keep")
    path = out / "x.pcap"
    if plant == "link":
        path.symlink_to(victim)
        message = "cannot write %s: it is a symbolic link (to %s); the capture never writes through a link: " \
                  "remove it or give the real path" % (path, victim)
    elif plant == "world-writable":
        os.chmod(out, 0o777)
        message = "cannot write %s: refusing to write in %s: %s is writable by its group or by others (mode 0777); " \
                  "another user could replace what is written there (make it uid 0's and writable by it alone, " \
                  "or use another directory)" % (path, out, out)
    else:
        os.chown(out, 65534, 65534)
        message = "cannot write %s: refusing to write in %s: %s belongs to uid 65534, not to uid 0 that runs the " \
                  "module; another user could replace what is written there (make it uid 0's and writable by it " \
                  "alone, or use another directory)" % (path, out, out)
    before = sorted(os.listdir(out))
    res = run_distro("capture", dict(interface="eth0", netns=pair.rx, path=str(path), seconds=0.2), check=check)
    assert res.get("failed") is True and res["changed"] is False, res
    assert res["msg"] == message, res
    assert sorted(os.listdir(out)) == before and victim.read_bytes() == b"keep"


def test_without_privileges(run_distro, pair, tmp_path):
    res = run_distro("capture", dict(interface="eth0", netns=pair.rx, path=str(tmp_path / "x.pcap")), no_caps=True)
    assert res["failed"] and res["msg"].startswith("this task needs CAP_NET_RAW, CAP_SYS_ADMIN, which the module's "
                                                   "process lacks"), res
    res = run_distro("capture", dict(interface="lo", path=str(tmp_path / "x.pcap")), no_caps=True)
    assert res["failed"] and res["msg"].startswith("this task needs CAP_NET_RAW, which"), res
    assert os.listdir(tmp_path) == []


def test_fetch_to_copies_the_pcap_to_the_controller(pair, tmp_path):
    """Through Ansible (the action plugin does the copy): the file on the host and its copy are the same; in check
    mode nothing is written or copied."""
    runner = ModuleRunner(SYSTEM_PYTHON, pin_root=None, via_ansible=True)
    host_path, copy = tmp_path / "host.pcap", tmp_path / "controller" / "sample.pcap"
    args = dict(interface="eth0", netns=pair.tx, direction="out", path=str(host_path), seconds=0.3,
                fetch_to=str(copy))
    res = runner("capture", args, check=True)
    assert res["changed"] and not res.get("failed") and "fetched" not in res, res
    assert not host_path.exists() and not copy.exists()
    res = runner("capture", args)
    assert res["changed"] and res["fetched"] == str(copy), res
    assert copy.read_bytes() == host_path.read_bytes()
