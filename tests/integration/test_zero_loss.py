"""Zero loss under upgrade, proved at rate: every frame sent is counted, across old and new programs.

The collection's XDP live-frames generator (xdp_trafficgen.bpf.c through
BPF_PROG_TEST_RUN, as _trafficgen runs it) sends UDP frames from tx/eth0 in
a thread, one CPU, until told to stop, while xdp_program or tc_program
upgrades the counting program on rx/eth0 several times in a row (a new
object, new constants, back again). The counters are pinned maps the new
programs reuse, so sent == counted holds only if no frame met an
interface without a program. `sent` is every frame the generator's
program counted, and each test asserts that the sending veth refused none
(its tx_dropped did not grow): a full ring of the peer refuses frames
into it, and so, on kernels without xdp_features (Debian 12's 6.1), does
a peer with no XDP program and no GRO (no ring at all), which is just the
gap these tests look for; a refused frame is never subtracted from what
was sent. (Newer kernels, 6.18 here, do not hand those frames to the veth
at all: they vanish, counted nowhere, and show as lost.)
Rates are the delivered ones: frames counted at the receiver per second.
Where a switch cannot be atomic (a mode switch), the frames it lost are
measured, bounded by the window the result reports, and the result says
`interrupted: true`.

Every figure is printed (pytest -s shows them) for the issue's closing note.
"""

import contextlib
import json
import os
import re
import struct
import threading
import time

import pytest

import kernel_features
from conftest import BPF_DIR, VENV_PYTHON, ModuleRunner, Pair, compile_bpf, sh, skip_for_hardware
from kernel_features import needs
from test_devmap_group import V4, V4_MAC, mcast_obj, switch  # noqa: F401  # pylint: disable=unused-import
from test_tc_program import TC_SHOT
from test_xdp_trafficgen_engine import set_gro, tg_obj  # noqa: F401  # pylint: disable=unused-import

from ansible_collections.ebpf.xdp.plugins.module_utils import _facts
from ansible_collections.ebpf.xdp.plugins.module_utils.host import netns as _netns
from ansible_collections.ebpf.xdp.plugins.module_utils.bpf import libbpf as _bpf, loader as _loader
from ansible_collections.ebpf.xdp.plugins.module_utils.hooks import observed as _observed
from ansible_collections.ebpf.xdp.plugins.module_utils.traffic import trafficgen as _trafficgen

# Every test here measures rates, or a gap in time against the module's report: with nothing else beside it.
# Every one sends with live frames (Blast), which a host may refuse: there its first run is the refusal asserted.
pytestmark = [pytest.mark.quiet, pytest.mark.kernel("xdp_live_frames")]

XDP_ABORTED, XDP_DROP = 0, 1
MIN_PPS = 1e6
# tc sees skbs, and a group copies every frame: the allocations on the generator's CPU (2 CPUs here, shared
# with the module runs) bound these.
MIN_TC_PPS = 0.5e6
CHUNK = 1 << 16  # frames per test run: ~10 ms at the generator's rate, so stop() is prompt
# On an emulated CPU (the lab's VM) the receiver's NAPI, deferred to ksoftirqd or polled on the other CPU beside
# a module run, drains slower than the one-CPU generator fills its 256-slot ring, and a full ring refuses frames
# just as a peer without a program does (one counter on 6.1): there the generator sends a ring's worth at a time
# and yields its CPU between, so that a refusal again means only a gap and the counts prove the upgrades on that
# kernel; its rates are the emulation's, not judged. (Tried in the VM: a run at the idle scheduling class alone
# still had refusals, 1200 of 2359296; a 1 ms sleep per 64 frames had none at a quarter of this pace.)
PACED_CHUNK = 256
# Per mode switch, what the loss may exceed the reported window by (see the mode switch test).
SWITCH_SLACK_MS = 5.0


def variant(tmp_path_factory, source, marker, extra):
    """A copy of files/bpf/<source> with `extra` C inserted before `marker`: another object, another program
    (an unreachable test: its instructions, hence its tag, differ), the same maps."""
    with open(os.path.join(BPF_DIR, source)) as handle:
        text = handle.read()
    assert text.count(marker) == 1, marker
    directory = tmp_path_factory.mktemp("variant")
    src = directory / source.replace(".bpf.c", "_v2.bpf.c")
    src.write_text(text.replace(marker, extra + marker))
    return compile_bpf(src, directory / source.replace(".bpf.c", "_v2.o"), [os.path.join(BPF_DIR, "include")])


@pytest.fixture(scope="module")
def drop_v2(tmp_path_factory):
    return variant(tmp_path_factory, "xdp_drop_count.bpf.c", "\tcount_ip_proto(",
                   "\tif (ctx->rx_queue_index == 0xffff)\n\t\treturn XDP_PASS;\n")


@pytest.fixture(scope="module")
def tc_v2(tmp_path_factory):
    return variant(tmp_path_factory, "tc_redirect.bpf.c", "\tcount_ip_proto((void *)(long)skb->data",
                   "\tif (skb->mark == 0xdeadbeef)\n\t\treturn TC_ACT_OK;\n")


@pytest.fixture
def direct(pin_root):
    """The venv's Python: the kill tests need no second interpreter."""
    return ModuleRunner(VENV_PYTHON, pin_root)


class Blast:
    """The XDP live-frames generator sending UDP from ns/ifname in a thread, from start() until stop()."""

    def __init__(self, pair, obj, ns=None, ifname="eth0", src_mac=None, dst_mac=None, dst_ip=None):
        self.ns = ns or pair.tx
        self.ifname = ifname
        self.src_mac, self.dst_mac = src_mac or pair.tx_mac, dst_mac or pair.rx_mac
        self.src_ip, self.dst_ip = pair.tx_ip, dst_ip or pair.rx_ip
        self.obj = obj
        self.stopping = threading.Event()
        self.running = threading.Event()
        self.thread = threading.Thread(target=self._send, name="blast")
        self.error = None
        self.generated = self.refused = 0
        self.seconds = 0.0
        self.paced = not kernel_features.features()["native_cpu"]

    def _send(self):
        try:
            with _netns.netns(self.ns):
                self._run()
        except Exception as exc:  # pylint: disable=broad-except  # re-raised by stop()
            self.error = exc
            self.running.set()

    def _run(self):
        settings = _trafficgen.Settings(interface=self.ifname, src_ip=self.src_ip, dst_ip=self.dst_ip,
                                        dst_mac=self.dst_mac)
        [kind] = _trafficgen.build_kinds(settings, self.src_mac)
        ctx = _trafficgen.XDP_MD.pack(0, len(kind.frame), 0, _netns.ifindex(self.ifname), 0, 0)
        with _loader.load(self.obj, _trafficgen.PROGRAM, "xdp") as loaded, \
                loaded.open_map(_trafficgen.COUNTER_MAP) as counters, \
                loaded.open_map(_trafficgen.TEMPLATE_MAP) as template:
            template.update(struct.pack("=I", 0), kind.template())
            chunk = PACED_CHUNK if self.paced else CHUNK
            before = _trafficgen.tx_dropped(self.ifname)
            start = time.monotonic()
            while not self.stopping.is_set():
                loaded.program.test_run(kind.frame, repeat=chunk, flags=_bpf.BPF_F_TEST_XDP_LIVE_FRAMES,
                                        batch_size=_trafficgen.DEFAULT_BATCH, ctx=ctx)
                self.running.set()
                if self.paced:
                    os.sched_yield()
            self.seconds = time.monotonic() - start
            self.generated = sum(int.from_bytes(v, "little") for v in counters.lookup(struct.pack("=I", 0)))
            self.refused = _trafficgen.tx_dropped(self.ifname) - before

    @property
    def sent(self):
        """Every frame the generator's program sent, refused ones included: see none_refused()."""
        return self.generated

    def start(self):
        self.thread.start()
        assert self.running.wait(10), "the generator did not start"
        if self.error:
            raise self.error
        return self

    def stop(self):
        self.stopping.set()
        self.thread.join()
        if self.error:
            raise self.error
        return self

    def pps(self):
        """The offered rate, for the report: the rate checks use the delivered one (delivered_pps)."""
        return self.generated / self.seconds


def none_refused(blast):
    """Assert the sending veth refused none of the generator's frames (its tx_dropped did not grow).

    The veth counts in the sender's tx_dropped every frame it cannot put into the peer's XDP ring: a full
    ring, and, where the kernel still hands it such frames (no xdp_features: 6.1), a peer with no ring at all,
    which is a peer without an XDP program and without GRO, just the gap an upgrade must not open. The counter
    cannot tell the two apart, so a refusal is a lost frame, never one taken off what was sent. (6.18 drops
    the frames for a ringless peer before the veth, counted nowhere: a generator aimed at a receiver without
    program or GRO had 720896 frames vanish with tx_dropped 0, so there the count comparison finds the gap.
    No full ring has refused a frame in these tests on a native CPU: the receivers keep up with the one-CPU
    generator; on an emulated one they do so only with the generator paced, Blast.paced.)"""
    assert blast.refused == 0, ("the sending veth refused %d of %d frames: lost for want of a program or of "
                                "room in the peer's ring" % (blast.refused, blast.generated))


def delivered_pps(frames, blast):
    """The delivered rate: frames counted at the receiver per second of generating."""
    return frames / blast.seconds


def counted(path):
    """Frames a counting program counted, from its pinned proto_count map, once in-flight frames are in."""
    last = None
    for _attempt in range(50):
        with _bpf.Map.from_pin(path) as counters:
            now = sum((_facts.read_counters(counters) or {}).values())
        if now == last:
            return now
        last = now
        time.sleep(0.05)
    return last


def upgrades(run, module, args, steps, blast):
    """Run the steps (extra args each) one after another while the generator runs; their results."""
    results = []
    blast.start()
    try:
        time.sleep(0.2)
        for extra in steps:
            res = run(module, dict(args, **extra))
            assert res.get("changed") is True and not res.get("failed"), res
            results.append(res)
        time.sleep(0.2)
    finally:
        blast.stop()
    return results


def check_rate(request, pps, minimum, blast):
    """The rate the issue asks for; on a machine loaded beyond twice its CPUs (other test runs) a shortfall is
    an expected failure that says so, not a pass: the exact counts above are asserted either way. A paced
    generator (an emulated CPU) has no rate to judge: the one skip for hardware, with what it delivered."""
    if blast.paced:
        skip_for_hardware(request.node, "native_cpu", "%.0f frames/s delivered by a generator paced for the emulated "
                          "receiver, every frame counted (asserted); the floor of %.2f Mpps is a native CPU's"
                          % (pps, minimum / 1e6))
    if pps >= minimum:
        return
    load = os.getloadavg()
    if load[0] > 2 * os.cpu_count():
        # conftest lists it apart by these words ("load average"), with what was measured.
        pytest.xfail("%.2f Mpps, below %.2f, excused by a load average of %.1f (5 min: %.1f) on %d CPUs"
                     % (pps / 1e6, minimum / 1e6, load[0], load[1], os.cpu_count()))
    assert pps >= minimum


def report(what, blast, counted_frames, results):
    print("\n%s: %d upgrades, sent %d, counted %d, lost %d, delivered %.2f Mpps (generator %.2f Mpps, %d refused), "
          "%.1f s" % (what, len(results), blast.sent, counted_frames, blast.sent - counted_frames,
                      delivered_pps(counted_frames, blast) / 1e6, blast.pps() / 1e6, blast.refused, blast.seconds))


# ---------------------------------------------------------------- XDP


def test_xdp_upgrades_at_rate_lose_no_frame(request, direct, pair, drop_obj, drop_v2, tg_obj):  # noqa: F811
    args = dict(interface="eth0", netns=pair.rx, mode="native")
    first = direct("xdp_program", dict(args, object=drop_obj))
    assert first["changed"] and first["attach"] == "link", first
    steps = [dict(object=drop_v2), dict(object=drop_v2, constants={"xdp_action": XDP_ABORTED}),
             dict(object=drop_obj), dict(object=drop_v2), dict(object=drop_obj)]
    blast = Blast(pair, tg_obj)
    results = upgrades(direct, "xdp_program", args, steps, blast)
    ids = [first["id"]] + [r["id"] for r in results]
    assert len(set(ids)) == len(ids), "every step is a new program"
    assert all(r["link_id"] == first["link_id"] and r["interrupted"] is False for r in results), results
    assert all(r["maps"] == first["maps"] for r in results), "the counters are reused"
    total = counted(first["maps"]["proto_count"])
    report("xdp native, bpf_link update", blast, total, results)
    none_refused(blast)  # rx/eth0 has no GRO: a frame that met it without a program is refused (6.1) or lost
    assert total == blast.sent and blast.sent > 0
    check_rate(request, delivered_pps(total, blast), MIN_PPS, blast)


def test_xdp_forced_takeover_of_a_netlink_program_is_atomic(direct, pair, drop_obj, tg_obj):  # noqa: F811
    """A foreign program attached with ip(8): force replaces it with XDP_FLAGS_REPLACE, frames all counted
    by the one or the other."""
    sh("ip", "-n", pair.rx, "link", "set", "dev", "eth0", "xdpdrv", "obj", drop_obj, "sec", "xdp")
    with _netns.netns(pair.rx):
        foreign_id = _bpf.xdp_query(_netns.ifindex("eth0"))["prog_id"]
    with _bpf.Program.from_id(foreign_id) as foreign:
        [map_id] = [i for i in foreign.info()["map_ids"] if _bpf.Map.from_id(i).info["name"] == "proto_count"]
    with _bpf.Map.from_id(map_id) as foreign_counts:  # the foreign program's counters outlive it while held
        blast = Blast(pair, tg_obj)
        [res] = upgrades(direct, "xdp_program", dict(interface="eth0", netns=pair.rx, object=drop_obj),
                         [dict(force=True)], blast)
        assert res["interrupted"] is False and res["attach"] == "netlink" and res["id"] != foreign_id, res
        assert res["diff"]["before"]["owner"] == "unmanaged" and "briefly" not in json.dumps(res), res
        by_foreign = sum(_facts.read_counters(foreign_counts).values())
    ours = counted(res["maps"]["proto_count"])
    report("xdp forced takeover (netlink replace): foreign %d + ours %d" % (by_foreign, ours), blast,
           by_foreign + ours, [res])
    none_refused(blast)  # no GRO: a frame that met rx/eth0 between the programs is refused (6.1) or lost
    assert by_foreign > 0 and ours > 0 and by_foreign + ours == blast.sent


def test_xdp_mode_switch_says_it_interrupted_and_measures_the_window(direct, pair, drop_obj, tg_obj):  # noqa
    """native -> generic -> native cannot be atomic: the frames that reach the stack meanwhile are the window.

    GRO on the receiver lets its veth take the generator's frames without a native program (generic XDP
    then runs on the skbs), so nothing is refused for want of a program and the loss is measurable.
    """
    set_gro(pair.rx, True)
    args = dict(interface="eth0", netns=pair.rx, object=drop_obj)
    first = direct("xdp_program", dict(args, mode="native"))
    blast = Blast(pair, tg_obj)
    results = upgrades(direct, "xdp_program", args, [dict(mode="generic"), dict(mode="native")], blast)
    assert [r["mode"] for r in results] == ["generic", "native"]
    assert all(r["interrupted"] is True for r in results), results
    # A module run alone reports warnings as structured summaries (ansible-core 2.19): read their text.
    windows = [float(m) for r in results for m in re.findall(
        r"briefly without its XDP program while switching mode \(at most ([0-9.]+) ms\)", json.dumps(r["warnings"]))]
    assert len(windows) == 2, results
    total = counted(first["maps"]["proto_count"])
    report("xdp mode switch native->generic->native", blast, total, results)
    # With GRO a frame that meets rx/eth0 without a program goes up the stack uncounted (the loss measured
    # here); none may have been refused, or the loss would be undercounted.
    none_refused(blast)
    lost = blast.sent - total
    # The rate frames reached rx/eth0 at: every one the generator sent, since none was refused. (The counted
    # rate would leave out the very frames bounded here; they are a fraction of a percent of it.)
    arriving = blast.sent / blast.seconds
    # The bound: _converge._reattach times each window from before the detach to after the attach, so the
    # hook's empty time lies inside it, and a frame is lost only if the receiver handled it then: at most
    # arriving * window. SWITCH_SLACK_MS per switch covers (a) the frames already queued when the detach takes
    # effect (the veth's 256-slot XDP ring and a 64-frame NAPI poll: 0.4 ms at 0.8 Mpps), handled inside the
    # window though they arrived before it, (b) the warning's rounding to 0.01 ms, and (c) the rate being the
    # run's average, while the generator shares the 2 CPUs with the module runs and other tests and may run
    # faster than that during a window. (c) has no hard bound; the room is in the window itself, which also
    # holds the detach's and attach's own synchronisation (RCU, generic XDP's static key): measured here the
    # windows are 15-60 ms each and the loss 0.5-4.5 ms of frames each, a seventh to a fiftieth of the bound.
    bound = arriving * sum(w + SWITCH_SLACK_MS for w in windows) / 1000
    print("mode switch window: %d frames lost in 2 switches (%.1f us each at %.2f Mpps delivered); module says: "
          "%s; bound %d frames" % (lost, lost / 2 / arriving * 1e6, arriving / 1e6,
                                   ", ".join("at most %.2f ms" % w for w in windows), bound))
    # lost >= 0: no frame counted twice (or counted that the generator did not send).
    assert 0 <= lost <= bound, "%d frames lost, more than %.2f Mpps in windows of %s ms (+%.0f ms each)" % (
        lost, arriving / 1e6, windows, SWITCH_SLACK_MS)


# ---------------------------------------------------------------- tc


@pytest.mark.parametrize("method", [needs("tcx", "tcx"), "cls_bpf"])
def test_tc_upgrades_at_rate_lose_no_frame(request, direct, pair, tc_obj, tc_v2, tg_obj, method):  # noqa: F811
    """The frames reach tc as skbs (GRO on the receiving veth takes XDP frames into its stack).

    The receiver's stack runs inline on the generator's CPU (a threaded NAPI on the other CPU only made its
    ring overflow and left the module runs no CPU), so the rate is the skb path's, lower than XDP's.
    """
    set_gro(pair.rx, True)
    args = dict(interface="eth0", netns=pair.rx, program="tc_drop_count", method=method)
    shot = {"tc_action": TC_SHOT}
    first = direct("tc_program", dict(args, object=tc_obj, constants=shot))
    assert first["changed"] and first["method"] == method, first
    steps = [dict(object=tc_v2, constants=shot), dict(object=tc_v2, constants=dict(shot, after_clone=0)),
             dict(object=tc_obj, constants=shot)]
    blast = Blast(pair, tg_obj)
    results = upgrades(direct, "tc_program", args, steps, blast)
    ids = [first["id"]] + [r["id"] for r in results]
    assert len(set(ids)) == len(ids) and all(r["interrupted"] is False for r in results), results
    if method == "tcx":
        assert all(r["link_id"] == first["link_id"] for r in results)
    else:
        assert all((r["priority"], r["handle"]) == (first["priority"], first["handle"]) for r in results)
    total = counted(first["maps"]["proto_count"])
    report("tc %s" % method, blast, total, results)
    none_refused(blast)  # GRO: a frame without a tc program goes up the stack uncounted, a refused one is lost too
    assert total == blast.sent and blast.sent > 0
    check_rate(request, delivered_pps(total, blast), MIN_TC_PPS, blast)


# ---------------------------------------------------------------- devmap group membership


def dropping_hosts(sw, drop_obj, stack):
    """The hosts' counting programs swapped for ones that drop: three copies of every frame into three stacks
    on one CPU would measure the stacks, not the group (the switch helper's programs pass, for its own tests).
    The new programs, whose counters count from here on."""
    dropping = []
    with _netns.netns(sw.ports.hosts):
        for port, loaded in enumerate(sw.hosts):
            dropping.append(stack.enter_context(
                _loader.load(drop_obj, "xdp_drop_count", "xdp", {"xdp_action": XDP_DROP})))
            link_id = _observed.find_link(_netns.ifindex("h%d" % port), loaded.program.info()["id"], "xdp")
            with _bpf.Link.from_id(link_id) as link:
                link.update(dropping[-1].program)
    return dropping


def received(loaded):
    with loaded.open_map("proto_count") as counters:
        return sum((_facts.read_counters(counters) or {}).values())


def test_devmap_group_members_that_stay_lose_nothing_at_rate(request, direct, mcast_obj, drop_obj, pin_root,
                                                              tg_obj):  # noqa: F811
    """h0 -> p0 (xdp_multicast) -> group members p1..p3 -> counting h1..h3, natively; p2 leaves and comes back
    while the generator runs (devmap_group edits the group's devmap in place). p1 and p3 get every frame the
    generator sent, p2 part of them, and no veth on the way refuses one (h0 into p0, p1..p3 into h1..h3)."""
    with switch(4, mcast_obj, drop_obj, direct, pin_root, mode="native") as sw, contextlib.ExitStack() as stack:
        hosts = dropping_hosts(sw, drop_obj, stack)
        sw.ok(name="video", members=["p1", "p2", "p3"], addresses=[V4])
        prog_ids = sw.prog_ids()

        def refused():
            with _netns.netns(sw.ports.sw):
                return [_trafficgen.tx_dropped("p%d" % i) for i in range(sw.ports.count)]

        before = refused()
        ports = sw.ports
        blast = Blast(Pair(), tg_obj, ns=ports.hosts, ifname="h0", src_mac=ports.host_macs[0], dst_mac=V4_MAC,
                      dst_ip=V4)
        steps = [dict(members=["p1", "p3"]), dict(members=["p1", "p2", "p3"])]
        results = upgrades(lambda _module, args: sw.group(**args), "devmap_group",
                           dict(name="video", addresses=[V4], exclusive=True), steps, blast)
        time.sleep(0.1)
        got = [received(host) for host in hosts]
        dropped = [after - first for after, first in zip(refused(), before)]
        copies = delivered_pps(sum(got), blast)
        figures = (blast.sent, blast.pps() / 1e6, copies / 1e6, got[1], dropped[1], got[2], got[3], dropped[3])
        print("\ndevmap group p2 out, back in: sent %d at %.2f Mpps (%.2f M copies/s delivered); p1 got %d "
              "(+%d refused), p2 %d, p3 %d (+%d)" % figures)
        # A refusal is a lost frame, whatever its cause (none_refused): none at h0 (p0's program takes every
        # frame), none at p0..p3 (a full ring of a host, or a host without its program, would show there).
        none_refused(blast)
        assert dropped == [0] * ports.count, dropped
        assert got[1] == blast.sent == got[3] and blast.sent > 0, got
        assert 0 < got[2] < blast.sent and got[0] == 0
        assert sw.prog_ids() == prog_ids and all(r["changed"] for r in results)
        # Every frame is copied to three (or two) members on the generator's CPU: the copies are the rate.
        check_rate(request, copies, MIN_TC_PPS, blast)
