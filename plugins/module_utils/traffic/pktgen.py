# -*- coding: utf-8 -*-
# Copyright (c) ebpf.xdp contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The kernel's packet generator (pktgen) through /proc/net/pktgen, behind ebpf.xdp.pktgen.

Private to the ebpf.xdp collection: the interface may change without notice.

The protocol is the one samples/pktgen speaks (functions.sh: pg_ctrl,
pg_thread, pg_set), one command per write():

- /proc/net/pktgen/kpktgend_N, one kernel thread per CPU:
  `add_device DEV@N` creates /proc/net/pktgen/DEV@N, `rem_device_all`
  removes every device of the thread;
- /proc/net/pktgen/DEV@N: the device's settings (`count 1000`,
  `dst_min 10.0.0.1`, `flag QUEUE_MAP_CPU`, ...); after a run its
  `Result:` reads, for example,
  `OK: 11791017(c11788327+d2689) usec, 59622913 (60byte,0frags)` then
  `5056638pps 2427Mb/sec (2427186240bps) errors: 0`;
- /proc/net/pktgen/pgctrl: `start` runs every thread that has devices and
  returns when all are done; `stop` ends a run; `reset` removes everything.

pktgen keeps one such tree per network namespace (measured on Debian 12's
6.1: each namespace has its own pgctrl and kpktgend_N files once the
module is loaded), so a task with `netns` runs pktgen there after setns.
`start` runs *every* configured device of the namespace, so a run refuses
to start while other devices are configured, and always removes its own.

A rejected command shows in two ways: the write fails (EINVAL, ENOTSUPP,
ENETDOWN) and the Result line may still be the previous command's, or the
write succeeds and the Result line says why (an unknown flag). Both are
checked after every command.

Debian 12's 6.1 kernel panics (kernel BUG in pskb_expand_head, called by
do_xdp_generic) when pktgen's skbs, which it shares with itself, reach a
generic-mode XDP program: through xmit_mode netif_receive on the device,
and through a veth into its peer. Both were reproduced on a scratch VM; such
targets are refused before anything is configured.
"""

from __future__ import annotations

import errno
import ipaddress
import os
import re
import threading
import time
from dataclasses import dataclass, field

from ansible_collections.ebpf.xdp.plugins.module_utils.host import cpus as _cpus, netlink as _netlink, netns as _netns
from ansible_collections.ebpf.xdp.plugins.module_utils.bpf import pins as _pins
from ansible_collections.ebpf.xdp.plugins.module_utils.traffic import frames as _frames
from ansible_collections.ebpf.xdp.plugins.module_utils._errors import EbpfXdpError

PROC_DIR = "/proc/net/pktgen"
PGCTRL = "pgctrl"
XMIT_MODES = ("start_xmit", "netif_receive")
# pktgen's device flags: Linux 6.1's list (what an unknown flag's error prints), and SHARED from later
# kernels; a kernel that lacks one refuses it with its own list, which the error passes on.
FLAGS = ("IPSRC_RND", "IPDST_RND", "UDPSRC_RND", "UDPDST_RND", "MACSRC_RND", "MACDST_RND", "TXSIZE_RND", "IPV6",
         "MPLS_RND", "VID_RND", "SVID_RND", "FLOW_SEQ", "QUEUE_MAP_RND", "QUEUE_MAP_CPU", "UDPCSUM", "NO_TIMESTAMP",
         "IPSEC", "NODE_ALLOC", "SHARED")
ETH_HEADER = 14
UDP_HEADER = 8
IP_HEADER = {4: 20, 6: 40}
# pktgen puts its own 16-byte header (magic, sequence number, timestamp) in every UDP payload and grows
# smaller frames to hold it: a 42-byte IPv4 frame is sent as 58 bytes while the Result line says 42.
PKTGEN_HEADER = 16
MIN_SIZE = {v: ETH_HEADER + IP_HEADER[v] + UDP_HEADER + PKTGEN_HEADER for v in (4, 6)}
# pktgen's default is 60 bytes (ETH_ZLEN); over IPv6 the smallest frame it really sends.
DEFAULT_SIZE = {4: 60, 6: MIN_SIZE[6]}
DEFAULT_TIMEOUT = 600.0
ENOTSUPP = 524  # the kernel's internal "not supported", which pktgen returns to write()

# One Result section; older kernels print nsec where newer print usec.
RESULT_RE = re.compile(
    r"OK:\s*(?P<elapsed>\d+)\(c(?P<busy>\d+)\+d(?P<idle>\d+)\)\s*(?P<unit>usec|nsec),\s*(?P<sent>\d+)\s*"
    r"\((?P<size>\d+)byte,(?P<frags>\d+)frags\)\s*(?P<pps>\d+)pps\s+(?P<mbps>\d+)Mb/sec\s*"
    r"\((?P<bps>\d+)bps\)\s*errors:\s*(?P<errors>\d+)")


class PktgenError(EbpfXdpError):
    """A setting pktgen cannot take, a target it must not run against, or a run that went wrong."""


class NoPktgenError(PktgenError):
    """The kernel has no pktgen."""


# ---------------------------------------------------------------- pure parsing


def result_section(text: str) -> str:
    """The text after "Result: " in a pktgen proc file (it may span lines), or "" without one."""
    at = text.find("Result:")
    return text[at + len("Result:"):].strip() if at >= 0 else ""


def parse_result(text: str) -> dict | None:
    """A run's figures from a Result section (with or without its "Result:" label); None when the section
    is not a run's result (Idle, NA, Starting, the last command's OK, an error)."""
    match = RESULT_RE.search(text)
    if not match:
        return None
    num = {k: int(v) for k, v in match.groupdict().items() if k != "unit"}
    scale = 1e6 if match.group("unit") == "usec" else 1e9
    return {"sent": num["sent"], "seconds": num["elapsed"] / scale, "idle_seconds": num["idle"] / scale,
            "size": num["size"], "frags": num["frags"], "pps": num["pps"], "mbps": num["mbps"],
            "bps": num["bps"], "errors": num["errors"]}


def thread_devices(text: str) -> list[str]:
    """The devices a kpktgend_N file lists as running or stopped."""
    devices = []
    for line in text.splitlines():
        head, sep, rest = line.partition(":")
        if sep and head.strip() in ("Running", "Stopped"):
            devices += rest.split()
    return devices


def parse_addresses(spec: str, what: str) -> tuple[int, str, str]:
    """(IP version, first, last) of one address, a range "a-b" or a CIDR prefix (every address of it,
    network and broadcast included, as samples/pktgen's parse_addr)."""
    spec = spec.strip()
    try:
        if "/" in spec:
            net = ipaddress.ip_network(spec, strict=False)
            return net.version, str(net.network_address), str(net.broadcast_address)
        if "-" in spec:
            low, high = (ipaddress.ip_address(part.strip()) for part in spec.split("-", 1))
            if low.version != high.version:
                raise ValueError("the ends are not of one IP version")
            if int(high) < int(low):
                raise ValueError("the range ends before it starts")
            return low.version, str(low), str(high)
        address = ipaddress.ip_address(spec)
        return address.version, str(address), str(address)
    except ValueError as exc:
        raise PktgenError("%s %r is not an IP address, a range a-b or a CIDR prefix: %s" % (what, spec, exc))


def parse_mac(mac: str, what: str) -> str:
    try:
        return _frames.mac_text(_frames.mac_bytes(mac))
    except ValueError:
        raise PktgenError("%s %r is not a MAC address (six hex bytes separated by colons)" % (what, mac))


# ---------------------------------------------------------------- settings


@dataclass
class Settings:
    """What to send and how, validated; built from the module's parameters by from_params."""

    interface: str
    dst_ip: str
    dst_mac: str
    netns: str | None = None
    cpus: list[int] = field(default_factory=lambda: [0])
    count: int | None = None
    duration: float | None = None
    timeout: float = DEFAULT_TIMEOUT
    size: int | None = None
    src_ip: str | None = None
    src_mac: str | None = None
    src_port: int = 9
    src_port_max: int | None = None
    dst_port: int = 9
    dst_port_max: int | None = None
    burst: int = 1
    clone_skb: int = 0
    delay: int = 0
    rate: int | None = None
    ratep: int | None = None
    flags: list[str] = field(default_factory=list)
    xmit_mode: str = "start_xmit"
    force: bool = False
    ip_version: int = 4
    dst_range: tuple[str, str] = ("", "")
    src_range: tuple[str, str] | None = None

    @classmethod
    def from_params(cls, params: dict) -> Settings:
        keys = set(cls.__dataclass_fields__) - {"ip_version", "dst_range", "src_range"}
        settings = cls(**{k: params[k] for k in keys if k in params and params[k] is not None})
        settings.validate()
        return settings

    def validate(self) -> None:
        """Everything that can be checked without the kernel; PktgenError names the setting."""
        if self.count is None and self.duration is None:
            raise PktgenError("give count (packets per thread) or duration (seconds): pktgen runs never "
                              "unbounded here")
        if self.count is not None and self.count <= 0:
            raise PktgenError("count must be a positive number of packets per thread, not %d" % self.count)
        if self.duration is not None and not self.duration > 0:
            raise PktgenError("duration must be a positive number of seconds, not %s" % self.duration)
        if not self.timeout > 0:
            raise PktgenError("timeout must be a positive number of seconds, not %s" % self.timeout)
        problem = _cpus.list_problem(self.cpus)
        if problem:
            raise PktgenError(problem)
        if self.xmit_mode not in XMIT_MODES:
            raise PktgenError("xmit_mode must be one of %s, not %r" % (", ".join(XMIT_MODES), self.xmit_mode))
        self.dst_mac = parse_mac(self.dst_mac, "dst_mac")
        if self.src_mac is not None:
            self.src_mac = parse_mac(self.src_mac, "src_mac")
        self._validate_addresses()
        self._validate_ports()
        if self.size is None:
            self.size = DEFAULT_SIZE[self.ip_version]
        if self.size < MIN_SIZE[self.ip_version]:
            raise PktgenError("size must be at least %d bytes for UDP over IPv%d (Ethernet %d + IP %d + UDP %d + "
                              "pktgen's own header %d, which pktgen adds anyway), not %d"
                              % (MIN_SIZE[self.ip_version], self.ip_version, ETH_HEADER,
                                 IP_HEADER[self.ip_version], UDP_HEADER, PKTGEN_HEADER, self.size))
        for name in ("burst", "clone_skb", "delay", "rate", "ratep"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise PktgenError("%s must not be negative, not %d" % (name, value))
        if self.burst < 1:
            raise PktgenError("burst must be at least 1 (1: one packet per transmit), not %d" % self.burst)
        if self.xmit_mode == "netif_receive" and self.clone_skb:
            raise PktgenError("clone_skb does not work with xmit_mode netif_receive (pktgen refuses it); "
                              "use burst instead")
        paced = [name for name in ("delay", "rate", "ratep") if getattr(self, name)]
        if len(paced) > 1:
            raise PktgenError("give one of delay, rate and ratep: each sets pktgen's gap between packets "
                              "(given: %s)" % ", ".join(paced))
        self._validate_flags()

    def _validate_addresses(self) -> None:
        version, first, last = parse_addresses(self.dst_ip, "dst_ip")
        self.ip_version, self.dst_range = version, (first, last)
        if version == 6 and first != last and "/" not in self.dst_ip:
            # pktgen draws IPv6 destinations as random bits between dst6_min and dst6_max: a prefix.
            raise PktgenError("dst_ip %r: pktgen varies IPv6 destinations only within a prefix; give a CIDR "
                              "such as fd00::/120" % self.dst_ip)
        if self.src_ip is not None:
            src_version, first, last = parse_addresses(self.src_ip, "src_ip")
            if src_version != version:
                raise PktgenError("src_ip %s and dst_ip %s are not of one IP version" % (self.src_ip, self.dst_ip))
            if version == 6 and first != last:
                raise PktgenError("src_ip %r: pktgen takes a single IPv6 source address (src6)" % self.src_ip)
            self.src_range = (first, last)

    def _validate_ports(self) -> None:
        for name in ("src_port", "dst_port"):
            value = getattr(self, name)
            if not 0 <= value <= 65535:
                raise PktgenError("%s must be between 0 and 65535, not %d" % (name, value))
        for first, last in (("src_port", "src_port_max"), ("dst_port", "dst_port_max")):
            low, high = getattr(self, first), getattr(self, last)
            if high is None:
                continue
            if high < low:
                raise PktgenError("%s (%s) must not be below %s (%s)" % (last, high, first, low))
            # pktgen's udp_*_max is the 16-bit port *after* the range.
            if high > 65534:
                raise PktgenError("%s must be at most 65534: pktgen ends a port range before a 16-bit "
                                  "udp_*_max, so 65535 cannot be its last port" % last)

    def _validate_flags(self) -> None:
        names = []
        for flag in self.flags:
            name = flag[1:] if flag.startswith("!") else flag
            if name not in FLAGS:
                raise PktgenError("unknown pktgen flag %r; pktgen's flags are %s (a leading ! clears one)"
                                  % (flag, ", ".join(FLAGS)))
            names.append(name)
        if "IPV6" in names:
            # pktgen lists IPV6 among its flags, but Linux 6.1 refuses `flag IPV6`: dst6 sets it.
            raise PktgenError("IPV6 is not a flag to give: an IPv6 dst_ip sets it")

    def device_commands(self) -> list[str]:
        """The commands for one device file, in the order the samples write them (xmit_mode first: burst
        and clone_skb are checked against it)."""
        cmds = ["xmit_mode %s" % self.xmit_mode,
                "count %d" % (self.count or 0),  # 0: until stopped, which a duration run does
                "clone_skb %d" % self.clone_skb, "pkt_size %d" % self.size, "burst %d" % self.burst,
                "delay %d" % self.delay, "dst_mac %s" % self.dst_mac]
        if self.src_mac:
            cmds.append("src_mac %s" % self.src_mac)
        first, last = self.dst_range
        if self.ip_version == 4:
            cmds += ["dst_min %s" % first, "dst_max %s" % last]
            if self.src_range:
                cmds += ["src_min %s" % self.src_range[0], "src_max %s" % self.src_range[1]]
        else:
            cmds += ["dst6 %s" % first] if first == last else ["dst6_min %s" % first, "dst6_max %s" % last]
            if self.src_range:
                cmds.append("src6 %s" % self.src_range[0])
        for proto_port in ("src", "dst"):
            low = getattr(self, proto_port + "_port")
            high = getattr(self, proto_port + "_port_max")
            cmds += ["udp_%s_min %d" % (proto_port, low),
                     "udp_%s_max %d" % (proto_port, low if high is None else high + 1)]
        cmds += ["flag %s" % flag for flag in self.flags]
        # After pkt_size: rate turns Mb/s into a gap from the packet size.
        if self.rate:
            cmds.append("rate %d" % self.rate)
        if self.ratep:
            cmds.append("ratep %d" % self.ratep)
        return cmds

    def device_name(self, cpu: int) -> str:
        return "%s@%d" % (self.interface, cpu)


# ---------------------------------------------------------------- the target device


@dataclass
class Target:
    """What decides whether pktgen may run on an interface."""

    name: str
    up: bool
    carrier: bool
    mtu: int
    kind: str | None = None
    generic_xdp: int = 0  # the id of a generic-mode XDP program on the device
    peer_generic_xdp: int = 0  # veth: the same on its peer

    def check(self, settings: Settings) -> None:
        what = "%s %s" % (self.kind or "interface", self.name)
        if not self.up:
            raise PktgenError("%s is down; pktgen sends only on an interface that is up" % what)
        if not self.carrier:
            raise PktgenError("%s has no carrier%s; pktgen would stop at once" % (
                what, " (its peer is down)" if self.kind == "veth" else ""))
        largest = self.mtu + ETH_HEADER
        if settings.size > largest:
            raise PktgenError("size %d is larger than %s can send (MTU %d + Ethernet header %d = %d)"
                              % (settings.size, what, self.mtu, ETH_HEADER, largest))
        crash = ("pktgen shares its packets between transmits, and a generic-mode XDP program that receives one "
                 "crashes Linux 6.1 (kernel BUG in pskb_expand_head, reproduced on Debian 12's kernel)")
        if settings.xmit_mode == "netif_receive" and self.generic_xdp:
            raise PktgenError("refusing xmit_mode netif_receive into %s: it has a generic-mode XDP program (id %d); "
                              "%s. Attach the program in native mode or count at tc ingress instead"
                              % (what, self.generic_xdp, crash))
        if settings.xmit_mode == "start_xmit" and self.peer_generic_xdp:
            raise PktgenError("refusing to send out of %s: its peer has a generic-mode XDP program (id %d); %s. "
                              "Attach the peer's program in native mode instead"
                              % (what, self.peer_generic_xdp, crash))


def _generic_prog(link: dict) -> int:
    xdp = link["xdp"]
    return xdp["prog_id"] if xdp["mode"] == "generic" else xdp["generic_prog_id"]


def read_target(ifname: str) -> Target:
    """The interface in the current namespace, and for a veth its peer's generic XDP program (the peer is
    read where IFLA_LINK_NETNSID says it is, with IFLA_IF_NETNSID, without entering that namespace)."""
    link = _netlink.interface(ifname)
    target = Target(name=ifname, up=link["up"], carrier=link["carrier"], mtu=link["mtu"], kind=link["kind"],
                    generic_xdp=_generic_prog(link))
    if target.kind == "veth":
        peer = _netlink.peer(link)  # None: one we may not read, nothing to refuse for
        target.peer_generic_xdp = _generic_prog(peer) if peer else 0
    return target


def check_cpus(cpus: list[int], online: set[int]) -> None:
    absent = [c for c in cpus if c not in online]
    if absent:
        raise PktgenError("CPU %s is not present or not online (online: %s)" % (
            ", ".join(map(str, absent)), _cpus.cpu_list(online)))


# ---------------------------------------------------------------- /proc/net/pktgen


class Proc:
    """The pktgen files of the current network namespace."""

    def __init__(self, root: str = PROC_DIR):
        self.root = root

    def path(self, name: str) -> str:
        return os.path.join(self.root, name)

    def read(self, name: str) -> str:
        with open(self.path(name)) as f:
            return f.read()

    def threads(self) -> dict[int, list[str]]:
        """Every kpktgend_N thread of the namespace and the devices it holds."""
        found = {}
        for entry in os.listdir(self.root):
            if entry.startswith("kpktgend_") and entry[len("kpktgend_"):].isdigit():
                found[int(entry[len("kpktgend_"):])] = thread_devices(self.read(entry))
        return found

    def write(self, name: str, command: str) -> None:
        """One command, as `echo command > file`; the kernel takes one per write()."""
        fd = os.open(self.path(name), os.O_WRONLY)
        try:
            os.write(fd, (command + "\n").encode())
        finally:
            os.close(fd)

    def command(self, name: str, command: str) -> None:
        """A thread or device command that must succeed: the write's error, or a Result that is not OK."""
        before = result_section(self.read(name))
        try:
            self.write(name, command)
        except OSError as exc:
            after = result_section(self.read(name)) if os.path.exists(self.path(name)) else ""
            reason = os.strerror(exc.errno) if exc.errno != ENOTSUPP else "not supported"
            said = "; pktgen says: %s" % after if after and after != before else ""
            raise PktgenError("pktgen refused %r on %s (%s)%s%s"
                              % (command, name, reason, said, _hint(command, exc.errno)))
        after = result_section(self.read(name))
        if not after.startswith("OK"):
            raise PktgenError("pktgen refused %r on %s: %s" % (command, name, after))


def _hint(command: str, code: int) -> str:
    word = command.split()[0]
    if code == ENOTSUPP and word in ("burst", "clone_skb"):
        return (". In xmit_mode start_xmit, burst above 1 and clone_skb need a device that lets pktgen share "
                "its packets (IFF_TX_SKB_SHARING; a veth does not); netif_receive takes burst")
    if code == errno.ENETDOWN:
        return ". The interface is down"
    return ""


def ensure_pktgen(run_command, check_mode: bool) -> bool:
    """Whether the module had to be loaded; NoPktgenError when the kernel has none.
    In check mode only asks modprobe whether it could load it."""
    if os.path.isdir(PROC_DIR):
        return False
    argv = ["modprobe", "--dry-run", "pktgen"] if check_mode else ["modprobe", "pktgen"]
    try:
        rc, out, err = run_command(argv)
    except OSError as exc:  # no modprobe at all
        rc, out, err = 1, "", str(exc)
    if rc == 0 and (check_mode or os.path.isdir(PROC_DIR)):
        return True
    said = (err or out or "exit status %d" % rc).strip()
    raise NoPktgenError("this kernel (%s) has no pktgen: `%s` failed (%s) and there is no %s; pktgen needs "
                        "CONFIG_NET_PKTGEN (Debian's stock kernels ship it as the module pktgen)"
                        % (os.uname().release, " ".join(argv), said, PROC_DIR))


# ---------------------------------------------------------------- a run


class Run:
    """One pktgen run in the current namespace: configure, start, wait (bounded), collect, clean up."""

    def __init__(self, settings: Settings, proc: Proc | None = None):
        self.settings = settings
        self.proc = proc or Proc()
        self.configured: list[int] = []
        # pktgen's state was touched (a reset, a device added): a failure from here on is a change.
        self.touched = False
        self.stopped = False
        self.timed_out = False
        self.seconds = 0.0

    def prepare(self) -> None:
        threads = self.proc.threads()
        missing = [c for c in self.settings.cpus if c not in threads]
        if missing:
            raise PktgenError("pktgen has no thread for CPU %s (threads: %s); pktgen starts one per CPU online "
                              "when it is loaded" % (", ".join(map(str, missing)), _cpus.cpu_list(threads) or "none"))
        others = {cpu: devices for cpu, devices in sorted(threads.items()) if devices}
        if others:
            listed = "; ".join("kpktgend_%d: %s" % (cpu, " ".join(devices)) for cpu, devices in others.items())
            if not self.settings.force:
                raise PktgenError("pktgen in this network namespace already has devices (%s): another run is in "
                                  "progress or one was interrupted, and a start would run them too. "
                                  "force: true resets pktgen here first" % listed)
            self.touched = True
            self.proc.write(PGCTRL, "reset")

    def configure(self) -> None:
        for cpu in self.settings.cpus:
            device = self.settings.device_name(cpu)
            self.configured.append(cpu)
            self.touched = True
            self.proc.command("kpktgend_%d" % cpu, "add_device %s" % device)
            for command in self.settings.device_commands():
                self.proc.command(device, command)

    def start(self) -> None:
        """pgctrl's start blocks until every device is done; a duration, or the timeout, ends it by stop."""
        failure = []

        def body():
            try:
                self.proc.write(PGCTRL, "start")
            except OSError as exc:
                failure.append(exc)

        runner = threading.Thread(target=body, name="pktgen-start", daemon=True)
        began = time.monotonic()
        runner.start()
        bound = self.settings.duration if self.settings.duration is not None else self.settings.timeout
        try:
            runner.join(bound)
        finally:
            # The bound, or anything that interrupted the wait: nothing may keep sending.
            if runner.is_alive():
                self.stopped = True
                self.timed_out = self.settings.duration is None
                self.proc.write(PGCTRL, "stop")
                runner.join()
        self.seconds = time.monotonic() - began
        if failure:
            raise PktgenError("pktgen's start failed: %s" % failure[0])

    def collect(self) -> list[dict]:
        threads = []
        for cpu in self.settings.cpus:
            device = self.settings.device_name(cpu)
            section = result_section(self.proc.read(device))
            figures = parse_result(section)
            if figures is None:
                raise PktgenError("pktgen did not run %s on CPU %d: Result: %s" % (device, cpu, section))
            threads.append(dict(cpu=cpu, device=device, sent=figures["sent"], seconds=figures["seconds"],
                                pps=figures["pps"], mbps=figures["mbps"], errors=figures["errors"],
                                result="Result: " + section))
        return threads

    def partial(self) -> list[dict]:
        """After a failure: the threads whose Result line says what they sent (the others are left out)."""
        threads = []
        for cpu in self.configured:
            try:
                section = result_section(self.proc.read(self.settings.device_name(cpu)))
            except OSError:
                continue
            figures = parse_result(section)
            if figures is not None:
                threads.append(dict(cpu=cpu, device=self.settings.device_name(cpu), result="Result: " + section,
                                    **{k: figures[k] for k in ("sent", "seconds", "pps", "mbps", "errors")}))
        return threads

    def cleanup(self) -> list[str]:
        """Remove what this run added, whatever happened; returns what could not be removed."""
        problems = []
        for cpu in self.configured:
            try:
                self.proc.write("kpktgend_%d" % cpu, "rem_device_all")
            except OSError as exc:
                problems.append("kpktgend_%d: %s" % (cpu, exc))
        return problems


def summary(threads: list[dict]) -> dict:
    """Totals: threads run in parallel, so rates add up and the run lasts as long as its longest thread."""
    return {"total": sum(t["sent"] for t in threads), "seconds": max((t["seconds"] for t in threads), default=0.0),
            "pps": sum(t["pps"] for t in threads), "mbps": sum(t["mbps"] for t in threads),
            "errors": sum(t["errors"] for t in threads)}


def generate(settings: Settings, run_command, check_mode: bool = False) -> dict:
    """Validate against this host, then (unless check_mode) run pktgen; the module's result without
    `changed`."""
    check_cpus(settings.cpus, _cpus.online_cpus())
    with _netns.netns(settings.netns):
        read_target(settings.interface).check(settings)
        loaded = ensure_pktgen(run_command, check_mode)
        result = {"interface": settings.interface, "xmit_mode": settings.xmit_mode,
                  "commands": settings.device_commands(), "module_loaded": loaded, "stopped": False}
        if check_mode:
            zeros = [dict(cpu=cpu, device=settings.device_name(cpu), sent=0, seconds=0.0, pps=0, mbps=0, errors=0,
                          result="") for cpu in settings.cpus]
            return dict(result, threads=zeros, **summary(zeros))
        # ':' is in no interface name: one lock per namespace for every pktgen run there.
        with _pins.lock(_netns.netns_key(settings.netns), ":pktgen"):
            return execute(Run(settings), result)


def execute(run: Run, result: dict) -> dict:
    """A run from prepare() to cleanup(), its figures added to result. A failure once pktgen was touched (or
    loaded: result["module_loaded"]) is RunFailed, a change, with the threads' results so far."""
    error = None
    try:
        run.prepare()
        run.configure()
        run.start()
        threads = run.collect()
    except (EbpfXdpError, OSError) as exc:
        error = exc
        threads = run.partial()  # before cleanup() removes the devices that hold them
    finally:
        leftovers = run.cleanup()
    result.update(threads=threads, stopped=run.stopped, **summary(threads))
    if error is not None and not (run.touched or result.get("module_loaded")):
        raise error
    problems = [str(error)] if error is not None else []
    if leftovers:
        problems.append("pktgen ran, but its devices could not be removed: %s" % "; ".join(leftovers))
    if problems:
        raise RunFailed(result, "; ".join(problems)) from error
    if run.timed_out:
        raise TimeoutRun(result, run.settings.timeout)
    return result


class RunFailed(PktgenError):
    """A run that failed after it changed pktgen (or loaded it): a change, with the partial results."""

    def __init__(self, result: dict, message: str):
        self.result = result
        self.details = dict(result, changed=True)  # for the failure result
        super().__init__(message)


class TimeoutRun(RunFailed):
    """A count run that had not finished within the timeout; it was stopped, the results are partial."""

    def __init__(self, result: dict, timeout: float):
        super().__init__(result, "pktgen had not sent its count of packets per thread after timeout %s s; it was "
                                 "stopped and its devices removed (%d sent in all)" % (timeout, result["total"]))
