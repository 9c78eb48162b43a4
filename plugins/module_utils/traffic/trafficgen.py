# -*- coding: utf-8 -*-
# Copyright (c) ebpf.xdp contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The traffic generator behind ebpf.xdp.xdp_trafficgen: settings, engine choice, and both engines.

Private to the ebpf.xdp collection: the interface may change without notice.

Two engines send the same frames:

- `xdp`: files/bpf/xdp_trafficgen.bpf.c, loaded and never attached, run with
  BPF_PROG_TEST_RUN and BPF_F_TEST_XDP_LIVE_FRAMES. The kernel hands the
  program a copy of the template frame `repeat` times; each XDP_TX it
  returns leaves through the interface named as the run's ingress_ifindex
  (the kernel turns XDP_TX into a redirect there, which works on a veth and
  is a little faster than bpf_redirect to the same index). Millions of
  frames per second per core, counted by the program itself per kind and
  per CPU. The kernel copies the template into each page of its pool only
  once and a receiver may change a frame in place (a router rewrites the
  MACs and the TTL), so the program writes the template's headers back into
  every frame from its tg_template map, filled here before each kind's runs.
- `socket`: an AF_PACKET socket, frame by frame from Python; works on any
  device, sends exact small bursts, and paces with `rate`.

A redirected XDP frame is only delivered when the device takes such frames
(ndo_xdp_xmit: for a veth, while its peer has an XDP program or GRO);
otherwise the kernel drops it without counting it anywhere, so the xdp
engine is only used where `_netdev.xdp_features` (or, on kernels before
6.3, the veth peer's XDP program) says the frames can go out.

Threads: one per listed CPU, each pinning itself there (the kernel runs a
test run on the calling thread's CPU, and the program's counters are per
CPU, so a pinned thread's frames are exactly its CPU's counts). ctypes
releases the GIL during the bpf() call, so the threads run in parallel.
Frame kinds are sent one after another, each by all threads at once: the
interface's drop counter read between kinds tells each kind's drops apart.
"""

from __future__ import annotations

import os
import socket
import struct
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from ansible_collections.ebpf.xdp.plugins.module_utils.host import (
    cpus as _cpus, netdev as _netdev, netlink as _netlink, netns as _netns, privileges as _privileges)
from ansible_collections.ebpf.xdp.plugins.module_utils.bpf import libbpf as _bpf, loader as _loader
from ansible_collections.ebpf.xdp.plugins.module_utils.traffic import frames as _frames
from ansible_collections.ebpf.xdp.plugins.module_utils._errors import EbpfXdpError

PROGRAM = "xdp_trafficgen"
COUNTER_MAP = "tx_count"
TEMPLATE_MAP = "tg_template"
ENGINES = ("auto", "xdp", "socket")
DEFAULT_COUNT = 100
# The kernel refuses larger live-frames batches (TEST_XDP_MAX_BATCH).
MAX_BATCH = 256
# A veth peer's XDP ring has 256 slots; batches of 64 (the kernel's default,
# NAPI_POLL_WEIGHT) were measured to never overflow it from one CPU.
DEFAULT_BATCH = 64
# Frames per test run at most: `repeat` is a C int, and the kernel only
# checks for signals between batches, so a run stays within seconds.
MAX_REPEAT = 1 << 24
# Longest single test run when sending for a duration. Each run costs ~25 ms
# of setup and teardown in the kernel (page pool), so runs are long.
CHUNK_SECONDS = 1.0
FIRST_CHUNK = 1 << 15
# A count is a promise of frames out of the interface: what the device
# refused (a veth peer's full ring) is sent again, from the first CPU, round
# after round while each round gets some out, up to this many rounds (a
# round is one test run, ~25 ms of kernel setup). Debian 12's 6.1 kernel
# refused ~1-2.5% of 100,000-200,000 frames from one CPU into a veth peer in
# the emulated VM; 6.18 here none, but 39% into a router's stack under load.
MAKE_UP_ROUNDS = 32

# struct tg_template in xdp_trafficgen.bpf.c: kind, L4 type, header length, L4 offset, header bytes
# (TG_HEADER_MAX of them: MAX_L4_OFFSET 128 plus a TCP header, in 8-byte words).
HEADER_MAX = 152
TEMPLATE = struct.Struct("=IBBH%ds" % HEADER_MAX)
L4_TYPES = {"udp": 1, "tcp": 2, "icmp": 0}
# struct xdp_md: data, data_end, data_meta, ingress_ifindex, rx_queue_index, egress_ifindex.
XDP_MD = struct.Struct("=6I")
# The live-frames probe's frame: the smallest Ethernet frame, all zeros (dropped by the probe's program).
PROBE_FRAME_SIZE = 60


class TrafficgenError(EbpfXdpError):
    """Settings that cannot be sent, or a device that cannot take what the engine sends."""


# ---------------------------------------------------------------- settings


@dataclass
class Settings:
    """What to send and how, validated; built from the module's parameters by from_params."""

    interface: str
    src_ip: str
    dst_ip: str
    netns: str | None = None
    engine: str = "auto"
    protocols: list[str] = field(default_factory=lambda: ["udp"])
    count: int | None = None  # None with no duration: DEFAULT_COUNT
    duration: float | None = None
    cpus: list[int] | None = None
    batch_size: int = DEFAULT_BATCH
    src_mac: str | None = None
    dst_mac: str = "ff:ff:ff:ff:ff:ff"
    src_port: int = 9
    src_port_max: int | None = None
    dst_port: int = 9
    dst_port_max: int | None = None
    size: int | None = None  # None: the smallest frame of every protocol
    vlan: int | None = None
    rate: int = 0
    object: str | None = None
    ip_version: int = 4

    @classmethod
    def from_params(cls, params: dict) -> Settings:
        keys = set(cls.__dataclass_fields__) - {"ip_version"}
        settings = cls(**{k: params[k] for k in keys if k in params and params[k] is not None})
        settings.validate()
        return settings

    def validate(self) -> None:
        """Everything that can be checked without the kernel; TrafficgenError names the setting."""
        if self.engine not in ENGINES:
            raise TrafficgenError("engine must be one of %s, not %r" % (", ".join(ENGINES), self.engine))
        if self.count is not None and self.duration is not None:
            raise TrafficgenError("give count or duration, not both")
        if self.count is None and self.duration is None:
            self.count = DEFAULT_COUNT
        if self.count is not None and self.count <= 0:
            raise TrafficgenError("count must be a positive number of frames per protocol, not %d" % self.count)
        if self.duration is not None and not self.duration > 0:
            raise TrafficgenError("duration must be a positive number of seconds, not %s" % self.duration)
        if self.rate < 0:
            raise TrafficgenError("rate must not be negative")
        if not self.protocols:
            raise TrafficgenError("protocols must list at least one of udp, tcp, icmp")
        unknown = [p for p in self.protocols if p not in _frames.PROTOCOLS]
        if unknown:
            raise TrafficgenError("unsupported protocol %s; choose from udp, tcp, icmp" % ", ".join(unknown))
        # One kind per protocol: a protocol listed twice is sent once per round.
        self.protocols = list(dict.fromkeys(self.protocols))
        for name in ("src_port", "dst_port", "src_port_max", "dst_port_max"):
            value = getattr(self, name)
            if value is not None and not 0 <= value <= 65535:
                raise TrafficgenError("%s must be between 0 and 65535, not %d" % (name, value))
        for first, last in (("src_port", "src_port_max"), ("dst_port", "dst_port_max")):
            low, high = getattr(self, first), getattr(self, last)
            if high is not None and high < low:
                raise TrafficgenError("%s (%s) must not be below %s (%s)" % (last, high, first, low))
        if self.vlan is not None and not 0 <= self.vlan <= 4095:
            raise TrafficgenError("vlan must be between 0 and 4095, not %d" % self.vlan)
        if not 1 <= self.batch_size <= MAX_BATCH:
            raise TrafficgenError("batch_size must be between 1 and %d, not %d" % (MAX_BATCH, self.batch_size))
        # Each mistake names its option, as pktgen's settings do.
        for option in ("dst_mac", "src_mac"):
            mac = getattr(self, option)
            if mac is not None:
                try:
                    _frames.mac_bytes(mac)
                except ValueError:
                    raise TrafficgenError("%s %r is not a MAC address (six hex bytes separated by colons)"
                                          % (option, mac))
        versions = {}
        for option in ("src_ip", "dst_ip"):
            try:
                versions[option] = _frames.ip_version(getattr(self, option))
            except ValueError:
                raise TrafficgenError("%s %r is not an IPv4 or IPv6 address" % (option, getattr(self, option)))
        self.ip_version = versions["src_ip"]
        if versions["dst_ip"] != self.ip_version:
            raise TrafficgenError("src_ip %s and dst_ip %s are not of one IP version" % (self.src_ip, self.dst_ip))
        if self.size is None:
            self.size = self.min_size()
        if self.size < self.min_size() or self.size > 9000:
            raise TrafficgenError(self._size_message(9000))
        problem = _cpus.list_problem(self.cpus) if self.cpus is not None else None
        if problem:
            raise TrafficgenError(problem)
        if self.engine == "xdp":
            if self.rate:
                raise TrafficgenError("rate paces the socket engine only; the xdp engine sends as fast as "
                                      "it can (use engine: socket, or leave rate out)")
            if not self.object:
                raise TrafficgenError("engine xdp needs object: the xdp_trafficgen program compiled by "
                                      "ebpf.xdp.bpf_object from files/bpf/xdp_trafficgen.bpf.c")

    def min_size(self) -> int:
        return max(_frames.min_size(p, self.ip_version, self.vlan) for p in self.protocols)

    def max_size(self, mtu: int) -> int:
        """The largest frame the interface sends: its MTU plus the Ethernet header (and the VLAN tag)."""
        return mtu + _frames.ETH_HEADER + (_frames.VLAN_TAG if self.vlan is not None else 0)

    def _size_message(self, largest: int, where: str = "") -> str:
        return "size must be between %d and %d bytes for %s over IPv%d%s%s, not %d" % (
            self.min_size(), largest, "/".join(self.protocols), self.ip_version,
            " with a VLAN tag" if self.vlan is not None else "", where, self.size)

    def check_size(self, mtu: int) -> None:
        if self.size > self.max_size(mtu):
            raise TrafficgenError(self._size_message(self.max_size(mtu), " on %s (MTU %d)" % (self.interface, mtu)))

    def ports(self) -> tuple[int, int, int, int]:
        """(src first, src span, dst first, dst span): how the engines vary the ports."""
        src_span = (self.src_port_max - self.src_port + 1) if self.src_port_max is not None else 1
        dst_span = (self.dst_port_max - self.dst_port + 1) if self.dst_port_max is not None else 1
        return self.src_port, src_span, self.dst_port, dst_span


def check_cpus(cpus: list[int] | None, allowed: set[int]) -> list[int]:
    """The CPUs to run threads on: those listed, each one this process may run on; by default the first."""
    if cpus is None:
        return [min(allowed)]
    outside = [c for c in cpus if c not in allowed]
    if outside:
        raise TrafficgenError("CPU %s is not one this task may run on (allowed: %s)" % (
            ", ".join(map(str, outside)), _cpus.cpu_list(allowed)))
    return list(cpus)


def share(total: int, parts: int, index: int) -> int:
    """Part `index` of `total` split as evenly as possible over `parts` (the first ones get the rest)."""
    return total // parts + (1 if index < total % parts else 0)


@dataclass
class Kind:
    """One kind of frame: its name (the protocol), template, counter key and UDP/TCP header offset."""

    name: str
    frame: bytes
    index: int
    l4_offset: int

    @property
    def has_ports(self) -> bool:
        return self.name in ("udp", "tcp")

    @property
    def header_size(self) -> int:
        """Bytes up to the end of the L4 header: what the xdp program restores in every frame."""
        return self.l4_offset + _frames.L4_HEADER[self.name]

    def template(self) -> bytes:
        """struct tg_template for the xdp program: the kind, where its ports are, and its headers."""
        if self.header_size > HEADER_MAX:
            raise TrafficgenError("%s frames have %d bytes of headers; the xdp engine restores %d at most"
                                  % (self.name, self.header_size, HEADER_MAX))
        return TEMPLATE.pack(self.index, L4_TYPES[self.name], self.header_size, self.l4_offset,
                             self.frame[:self.header_size])


def build_kinds(settings: Settings, src_mac: str) -> list[Kind]:
    try:
        return [Kind(proto, _frames.build_frame(proto, src_mac, settings.dst_mac, settings.src_ip, settings.dst_ip,
                                                settings.src_port, settings.dst_port, settings.size, settings.vlan),
                     index, _frames.l4_offset(settings.ip_version, settings.vlan))
                for index, proto in enumerate(settings.protocols)]
    except ValueError as exc:
        raise TrafficgenError("cannot build frames: %s" % exc)


# ---------------------------------------------------------------- can the device take XDP frames?


@dataclass
class Device:
    """What decides whether XDP frames can leave an interface."""

    name: str
    up: bool
    carrier: bool
    kind: str | None = None  # IFLA_INFO_KIND: veth, vlan, ...; None for a physical device
    features: int | None = None  # _netdev.xdp_features; None on kernels without the netdev family
    peer_xdp: bool | None = None  # veth only: whether the peer has an XDP program (None: not asked)
    peer_gro: bool | None = None  # veth only, before 6.3: whether the peer has GRO on (None: not asked)

    def xdp_ability(self) -> tuple[bool, str]:
        """(whether frames redirected to the device leave it, and why), from what the kernel says."""
        what = "%s %s" % ("veth" if self.kind == "veth" else "interface", self.name)
        if not self.up:
            return False, "%s is down" % what
        if not self.carrier:
            return False, "%s has no carrier%s" % (what, " (its peer is down)" if self.kind == "veth" else "")
        if self.features is not None:
            if self.features & _netdev.XDP_ACT_NDO_XMIT:
                return True, "%s takes XDP frames (xdp_features: %s)" % (
                    what, ", ".join(_netdev.feature_names(self.features)))
            if self.kind == "veth":
                return False, ("%s cannot take XDP frames: its peer has neither an XDP program nor GRO enabled, "
                               "and frames redirected into it would be dropped uncounted" % what)
            return False, "%s cannot take XDP frames (its driver has no ndo-xmit in xdp_features: %s)" % (
                what, ", ".join(_netdev.feature_names(self.features)) or "none")
        # Before Linux 6.3 nothing reports xdp_features: a veth's peer XDP program, or GRO on the peer, is
        # what can be seen (the two cases in which the peer's XDP ring exists).
        if self.kind == "veth" and self.peer_xdp:
            return True, "%s takes XDP frames: its peer has an XDP program" % what
        if self.kind == "veth" and self.peer_gro:
            return True, "%s takes XDP frames: its peer has GRO enabled" % what
        if self.kind == "veth" and self.peer_xdp is False and self.peer_gro is None:
            return False, ("%s: its peer has no XDP program, and its GRO cannot be read here (the peer's network "
                           "namespace has no name under /run/netns; Linux < 6.3 has no xdp_features)" % what)
        if self.kind == "veth":
            return False, ("%s cannot take XDP frames: its peer has neither an XDP program nor GRO enabled, "
                           "and frames redirected into it would be dropped uncounted" % what)
        return False, ("cannot tell whether %s takes XDP frames: this kernel has no netdev netlink family "
                       "(Linux < 6.3) to report its xdp_features" % what)


def read_device(link: dict) -> Device:
    """The interface's state (link: as host/netlink describes it), its xdp_features and (on old kernels, for a
    veth) its peer's XDP program."""
    device = Device(name=link["ifname"], up=link["up"], carrier=link["carrier"], kind=link["kind"])
    device.features = _netdev.xdp_features(link["ifindex"])
    if device.features is None and device.kind == "veth":
        # Read where the peer is (IFLA_LINK_NETNSID), without entering that namespace.
        peer = _netlink.peer(link)
        device.peer_xdp = bool(peer["xdp"]["prog_id"]) if peer else None
        if peer and not device.peer_xdp:
            device.peer_gro = _peer_gro(link, peer["ifname"])
    return device


def _peer_gro(link: dict, peer_name: str) -> bool | None:
    """Whether the veth's peer has GRO on, read in the peer's namespace (ethtool asks by name there); None
    when that namespace is none this host names."""
    if link["link_netnsid"] is None:
        return _netdev.gro_enabled(peer_name)
    try:
        with _netns.by_netnsid(link["link_netnsid"]):
            return _netdev.gro_enabled(peer_name)
    except _netns.NotFoundError:
        return None


def choose_engine(settings: Settings, device: Callable[[], Device], libbpf_error: Callable[[], str | None],
                  live_frames_error: Callable[[], str | None]) -> tuple[str, str]:
    """(engine, why) for the requested engine; TrafficgenError when engine xdp cannot deliver.

    device() reads the interface, libbpf_error() tries libbpf and
    live_frames_error() the kernel's live-frames runs: each only when the
    answer depends on it, so the socket engine needs none of them.
    """
    if settings.engine == "socket":
        return "socket", "requested"
    if settings.engine == "auto":
        if settings.rate:
            return "socket", "rate paces the socket engine only"
        if not settings.object:
            return "socket", "no object given for the xdp engine"
    missing = libbpf_error()
    if missing:
        if settings.engine == "xdp":
            raise TrafficgenError("engine xdp needs libbpf >= 1.0 (Debian: libbpf1): %s" % missing)
        return "socket", "libbpf is not available: %s" % missing
    able, why = device().xdp_ability()
    if settings.engine == "xdp" and not able:
        raise TrafficgenError("engine xdp cannot deliver frames: %s; use engine: socket or auto" % why)
    if not able:
        return "socket", why
    refused = live_frames_error()
    if refused:
        if settings.engine == "xdp":
            raise TrafficgenError("engine xdp cannot send: %s; use engine: socket or auto" % refused)
        return "socket", refused
    return "xdp", why


def live_frames_error() -> str | None:
    """Why the kernel refuses the xdp engine's live-frames test runs, or None.

    One live-frames run of a program that drops its one frame, so nothing is
    sent. A kernel before 5.18 does not know the flag; a 6.18 host was seen
    answering EPERM to every live-frames run while it ran the same program
    without the flag, so the release alone cannot tell.
    """
    code = _bpf.insn(_bpf.BPF_MOV64_IMM, dst=0, imm=_bpf.XDP_DROP) + _bpf.insn(_bpf.BPF_EXIT)
    try:
        probe = _bpf.Program.from_instructions("xdp", "ebpf_xdp_live", code)
    except _bpf.BpfError as exc:
        return "cannot load a program to try a live-frames run: %s" % exc
    with probe:
        try:
            probe.test_run(bytes(PROBE_FRAME_SIZE), flags=_bpf.BPF_F_TEST_XDP_LIVE_FRAMES, batch_size=1)
        except _bpf.BpfError as exc:
            return "this kernel refuses live-frames test runs (BPF_F_TEST_XDP_LIVE_FRAMES): %s" % exc
    return None


def libbpf_error() -> str | None:
    """Why libbpf cannot be used here, or None."""
    try:
        _bpf.lib()
    except ImportError as exc:
        return str(exc)
    return None


# ---------------------------------------------------------------- running


@dataclass
class Result:
    engine: str
    engine_reason: str
    sent: dict[str, int]
    seconds: float
    threads: list[dict]
    tx_dropped: int

    def as_dict(self) -> dict:
        total = sum(self.sent.values())
        return dict(engine=self.engine, engine_reason=self.engine_reason, sent=self.sent, total=total,
                    seconds=round(self.seconds, 6), pps=rate(total, self.seconds), threads=self.threads,
                    tx_dropped=self.tx_dropped)


def rate(frames: int, seconds: float) -> float:
    return round(frames / seconds, 1) if seconds > 0 else 0.0


def in_threads(cpus: list[int], work: Callable[[int, int], object]) -> list:
    """work(index, cpu) in one thread per CPU, each pinned to its CPU first; results in order.

    Threads start in the caller's network namespace (a new thread inherits
    the creating thread's), which is where sockets and test runs must be.
    """
    results = [None] * len(cpus)
    errors = []

    def body(index, cpu):
        try:
            # Pid 0 is the calling thread: only this thread moves.
            os.sched_setaffinity(0, {cpu})
            results[index] = work(index, cpu)
        except Exception as exc:  # pylint: disable=broad-except  # re-raised in the caller's thread
            errors.append(exc)

    threads = [threading.Thread(target=body, args=(i, cpu), name="trafficgen-cpu%d" % cpu)
               for i, cpu in enumerate(cpus)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return results


def tx_dropped(ifname: str) -> int:
    return _netlink.interface(ifname)["stats"]["tx_dropped"]


def run_socket(settings: Settings, kinds: list[Kind], cpus: list[int]) -> tuple[dict, float, list[dict]]:
    """Rounds of frames from one AF_PACKET socket per thread; `count` rounds split over the threads."""
    frames = [(k.name, k.frame, k.l4_offset if k.has_ports else None) for k in kinds]
    thread_rate = settings.rate / len(cpus) if settings.rate else 0

    def work(index, _cpu):
        until = time.monotonic() + settings.duration if settings.duration else None
        rounds = share(settings.count, len(cpus), index) if settings.count else None
        if rounds == 0:
            return dict.fromkeys((k.name for k in kinds), 0), 0.0
        with socket.socket(socket.AF_PACKET, socket.SOCK_RAW) as sock:
            sock.bind((settings.interface, 0))
            return _frames.send_rounds(sock, frames, rounds=rounds, until=until, rate=thread_rate,
                                       ports=settings.ports())

    start = time.monotonic()
    results = in_threads(cpus, work)
    seconds = time.monotonic() - start
    sent = {k.name: sum(r[0][k.name] for r in results) for k in kinds}
    threads = [thread_result(cpu, sum(r[0].values()), r[1]) for cpu, r in zip(cpus, results)]
    return sent, seconds, threads


def thread_result(cpu: int, sent: int, seconds: float) -> dict:
    return dict(cpu=cpu, sent=sent, seconds=round(seconds, 6), pps=rate(sent, seconds))


def _xdp_send(program: _bpf.Program, data: bytes, ctx: bytes, batch: int, frames: int | None,
              until: float | None) -> float:
    """Test runs of `frames` frames, or until the monotonic deadline `until`; the seconds they took."""
    start = time.monotonic()
    left = frames
    chunk = FIRST_CHUNK
    while True:
        now = time.monotonic()
        if frames is not None:
            if left <= 0:
                break
            chunk = min(left, MAX_REPEAT)
        elif now >= until:
            break
        program.test_run(data, repeat=chunk, flags=_bpf.BPF_F_TEST_XDP_LIVE_FRAMES, batch_size=batch, ctx=ctx)
        if frames is not None:
            left -= chunk
            continue
        # Size the next run from the rate just seen (setup cost included, so it errs short):
        # at most CHUNK_SECONDS, and 10% short of the deadline, which other threads may slow down.
        # Runs go on until the deadline has passed: a duration is sent in full, overrun by at
        # most one short run.
        end = time.monotonic()
        remaining = until - end
        if remaining <= 0:
            break
        chunk = int(min(chunk / max(end - now, 1e-6) * min(remaining, CHUNK_SECONDS) * 0.9, MAX_REPEAT))
        chunk = max(chunk, 1)
    return time.monotonic() - start


def _make_up(settings: Settings, program: _bpf.Program, data: bytes, ctx: bytes, cpu: int, since: int) -> float:
    """Send again from cpu what the device refused since its tx_dropped was `since`, round after round while
    it refuses some of them and takes others; the seconds."""
    seconds = 0.0
    mark = tx_dropped(settings.interface)
    refused = mark - since
    for _round in range(MAKE_UP_ROUNDS):
        if refused <= 0:
            break
        seconds += in_threads([cpu], lambda _index, _cpu, frames=refused: _xdp_send(
            program, data, ctx, settings.batch_size, frames, None))[0]
        now = tx_dropped(settings.interface)
        again, mark = now - mark, now
        if again >= refused:
            break  # it took none of them: the shortfall stays in `sent`
        refused = again
    return seconds


def run_xdp(settings: Settings, kinds: list[Kind], cpus: list[int], ifindex: int) -> tuple[dict, float, list[dict]]:
    """Kind after kind, every thread sending its share; `sent` is what the program counted, less drops.

    The program's template is the kind's before its runs start. The
    interface's tx_dropped is read between kinds: a veth counts there the
    frames its peer's full ring refused, which left the program but never
    the interface. With a count, the refused frames are sent again
    (MAKE_UP_ROUNDS), so that `count` frames leave where the device lets them.
    """
    src_first, src_span, dst_first, dst_span = settings.ports()
    constants = dict(src_port_min=src_first, src_port_span=src_span, dst_port_min=dst_first,
                     dst_port_span=dst_span)
    seconds = 0.0
    thread_seconds = [0.0] * len(cpus)
    dropped = {}
    with _loader.load(settings.object, PROGRAM, "xdp", constants) as loaded, \
            loaded.open_map(COUNTER_MAP) as counters, loaded.open_map(TEMPLATE_MAP) as template:
        for kind in kinds:
            template.update(struct.pack("=I", 0), kind.template())
            data = kind.frame
            ctx = XDP_MD.pack(0, len(data), 0, ifindex, 0, 0)  # no metadata
            before = tx_dropped(settings.interface)
            start = time.monotonic()
            # In duration mode the kinds share the time equally, one after the other.
            until = start + settings.duration / len(kinds) if settings.duration else None

            def work(index, _cpu, data=data, ctx=ctx, until=until):
                frames = share(settings.count, len(cpus), index) if settings.count else None
                return _xdp_send(loaded.program, data, ctx, settings.batch_size, frames, until)

            try:
                took = in_threads(cpus, work)
                if settings.count:
                    took[0] += _make_up(settings, loaded.program, data, ctx, cpus[0], before)
            except _bpf.BpfError as exc:
                raise TrafficgenError(_explain(exc, settings, kind, data))
            seconds += time.monotonic() - start
            dropped[kind.name] = tx_dropped(settings.interface) - before
            thread_seconds = [a + b for a, b in zip(thread_seconds, took)]
        per_cpu = {k.name: counters.lookup(struct.pack("=I", k.index)) for k in kinds}
    counted = {name: [int.from_bytes(v, sys.byteorder) for v in values] for name, values in per_cpu.items()}
    sent = {name: max(0, sum(values) - dropped[name]) for name, values in counted.items()}
    threads = [thread_result(cpu, sum(values[cpu] for values in counted.values()), thread_seconds[i])
               for i, cpu in enumerate(cpus)]
    return sent, seconds, threads


def _explain(exc: _bpf.BpfError, settings: Settings, kind: Kind, data: bytes) -> str:
    if exc.errno == 22:  # EINVAL: most likely a frame that does not fit a page with the kernel's head/tailroom
        return ("%s; the kernel refused a live-frames run of %d-byte %s frames (size %d): frames must fit in "
                "one page with the kernel's headroom" % (exc, len(data), kind.name, settings.size))
    return str(exc)


def generate(settings: Settings, check_mode: bool = False) -> dict:
    """Decide the engine, then (unless check_mode) send; the module's result, without `changed`."""
    cpus = check_cpus(settings.cpus, os.sched_getaffinity(0))
    with _netns.netns(settings.netns):
        iface = _netlink.interface(settings.interface)
        settings.check_size(iface["mtu"])
        kinds = build_kinds(settings, settings.src_mac or iface["mac"])
        engine, why = choose_engine(settings, lambda: read_device(iface), libbpf_error, live_frames_error)
        if check_mode:
            return Result(engine, why, {k.name: 0 for k in kinds}, 0.0,
                          [thread_result(cpu, 0, 0.0) for cpu in cpus], 0).as_dict()
        if engine == "xdp":
            missing = _privileges.missing_capabilities(_privileges.BPF_CAPABILITIES)
            if missing:
                raise TrafficgenError("engine xdp needs %s, which the module's process lacks; run it as root "
                                      "(become: true)" % ", ".join(missing))
        before = iface["stats"]["tx_dropped"]
        if engine == "xdp":
            sent, seconds, threads = run_xdp(settings, kinds, cpus, iface["ifindex"])
        else:
            sent, seconds, threads = run_socket(settings, kinds, cpus)
        return Result(engine, why, sent, seconds, threads, tx_dropped(settings.interface) - before).as_dict()
