"""The bad-input matrix: every module, each mistake a new user makes, the exact message, and a host left alone.

One host (a Pair of namespaces) is set up once for the file with a program of
every kind already there: xdp_drop_count (XDP) and tc_drop_count (cls_bpf) on
rx/eth0, xdp_multicast with a shared map set and one group on tx/eth0. Each
case then runs in check mode and for real, must fail with its message
(matched in full, or by a regex of the whole message), and must leave the
host as it was: the program ids the kernel reports (ip -j, tc -j), the pin
tree (names, modes, inodes, the contents of every pinned map and record), the
lock directories of both namespaces, and the object and cache directories (no
temporary file left next to them).
"""

import hashlib
import os
import re
import shutil
import uuid

import pytest

import kernel_features
import pin_snapshot
from conftest import BPF_DIR, PIN_ROOT_BASE, VENV_PYTHON, ModuleRunner, Pair, compile_bpf
from legacy_sections import compile_legacy
from ansible_collections.ebpf.xdp.plugins.module_utils.traffic import frames as _frames, pcap as _pcap

# The snapshots see the whole host (kernel modules too): nothing else may run beside this file.
pytestmark = pytest.mark.quiet

INCLUDE = os.path.join(BPF_DIR, "include")
SET = "badinput"
WRONG = "sha256:" + "0" * 64
NOT_ELF = re.compile(re.escape("open BPF object /etc/passwd: not a BPF object (not an ELF file, or an ELF file that is "
                               "not for BPF) (errno 4001 LIBBPF_ERRNO__FORMAT); last lines of the log:\n")
                     + ".*" + re.escape("'passwd' is not a proper ELF object"), re.S)


class Host:
    """The namespaces, objects and pin root every case works on."""

    def __init__(self, tmp):
        self.pair = Pair()
        self.tx, self.rx = self.pair.tx, self.pair.rx
        self.pin_root = "%s/bad-%s" % (PIN_ROOT_BASE, uuid.uuid4().hex[:8])
        self.objects = str(tmp / "objects")
        self.cache = str(tmp / "cache")
        os.makedirs(self.objects)
        os.makedirs(self.cache)
        self.run = ModuleRunner(VENV_PYTHON, self.pin_root)
        self.drop = self.objects + "/xdp_drop_count.o"
        self.tc = self.objects + "/tc_redirect.o"
        self.mcast = self.objects + "/xdp_multicast.o"
        self.mixed = self.objects + "/mixed.o"  # legacy_sections.MIXED
        self.broken = self.objects + "/broken.bpf.c"
        self.pcap = self.objects + "/frames.pcap"
        self.pcapng = self.objects + "/frames.pcapng"
        self.drop_map = None

    def up(self):
        self.pair.up()
        for src, out in (("xdp_drop_count", self.drop), ("tc_redirect", self.tc), ("xdp_multicast", self.mcast)):
            compile_bpf(os.path.join(BPF_DIR, src + ".bpf.c"), out, [INCLUDE])
        compile_legacy(self.objects, "mixed")
        with open(self.broken, "w") as handle:
            handle.write("int f(void) { return missing; }\n")
        _pcap.write(self.pcap, [_frames.build_frame("udp", self.pair.tx_mac, self.pair.rx_mac, self.pair.tx_ip,
                                                    self.pair.rx_ip)])
        with open(self.pcapng, "wb") as handle:  # a section header block's type, then nothing that matters
            handle.write(bytes.fromhex("0a0d0d0a") + bytes(24))
        self.ok("xdp_program", interface="eth0", netns=self.rx, object=self.drop, mode="native",
                constants={"xdp_action": 2})
        if not os.environ.get("BAD_INPUT_NO_TC"):
            self.ok("tc_program", interface="eth0", netns=self.rx, object=self.tc, program="tc_drop_count",
                    method="cls_bpf", constants={"tc_action": 0})
        res = self.ok("xdp_program", interface="eth0", netns=self.tx, object=self.mcast, program="xdp_multicast",
                      shared_maps=SET, mode="generic")
        assert res["maps"], res
        self.ok("devmap_group", netns=self.tx, name="video", shared_maps=SET, members=["eth0"],
                addresses=["239.1.1.1"], pin_root=self.pin_root)
        self.drop_map = os.path.join(self.pin_root, self.rx, "eth0", "xdp", "maps", "proto_count")
        assert os.path.exists(self.drop_map)

    def down(self):
        self.pair.down()
        shutil.rmtree(self.pin_root, ignore_errors=True)
        for ns in (self.tx, self.rx):  # the namespaces are gone, and their names are not reused
            shutil.rmtree(os.path.join(pin_snapshot.LOCK_DIR, ns), ignore_errors=True)

    def ok(self, module, **args):
        res = self.run(module, args)
        assert not res.get("failed") and res.get("changed"), res
        return res

    # ------------------------------------------------------------ what "unchanged" means

    def where(self):
        """What pin_snapshot.snapshot() needs."""
        return {"namespaces": [self.tx, self.rx], "pin_root": self.pin_root, "objects": self.objects,
                "cache": self.cache}


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    h = Host(tmp_path_factory.mktemp("bad_input"))
    try:
        h.up()
        yield h
    finally:
        h.down()


# ---------------------------------------------------------------- the cases


class Warned(str):
    """Check mode succeeds with this warning: an earlier task of the same play may still create what is missing."""


def not_an_interface(name, option="interface"):
    return ("%s %r is not an interface name: 1 to 15 bytes without '/', ':', whitespace or control characters, and "
            "not '.' or '..'" % (option, name))


def not_netns(name, option="netns"):
    return ("%s %r is not a network namespace name (a name under /run/netns, as `ip netns list` shows; no '/', not "
            "'.' or '..', no control characters, at most 255 bytes)" % (option, name))


def not_a_map_set(name):
    return ("shared_maps %r is not a usable map set name: 1 to 64 of letters, digits, '_' and '-', starting with a "
            "letter or digit" % (name,))


def not_absolute(option, path):
    return ("%s %r is not an absolute path: give it from / (a relative path depends on the directory the module "
            "runs in)" % (option, path))


def climbs(option, path):
    """path has {placeholders}, filled in by the case (the message is formatted once, like the args)."""
    return "%s '%s' has a '..' component: give the path it means without one" % (option, path)


# An interface name that is an absolute path into a directory the snapshot watches: it once made state absent create
# <path>.lock there, as root.
ABSOLUTE_IFNAME = "{objects}/P"
LONG_IFNAME = "abcdefghijklmnop"  # 16 bytes: IFNAMSIZ with its NUL is 16

# (id, module, args with {rx}/{tx}/{drop}/... placeholders, the message: a string matched in full, or a compiled
# regex matched against the whole message). A case whose check mode answers differently gives a dict
# {"check": ..., "run": ...}; a check-mode answer of None succeeds, Warned(...) succeeds with that warning.

CASES = [
    # xdp_program
    ("xdp-not-elf", "xdp_program", dict(interface="eth0", netns="{rx}", object="/etc/passwd"), NOT_ELF),
    ("xdp-netns-path", "xdp_program", dict(interface="eth0", netns="../../proc/1/ns/net", object="{drop}"),
     not_netns("../../proc/1/ns/net")),
    ("xdp-no-netns", "xdp_program", dict(interface="eth0", netns="nosuch-ns-{tag}", object="{drop}"),
     "network namespace 'nosuch-ns-{tag}' does not exist (no /run/netns/nosuch-ns-{tag})"),
    ("xdp-no-interface", "xdp_program", dict(interface="nosuch0", netns="{rx}", object="{drop}"),
     "interface 'nosuch0' does not exist in this network namespace"),
    ("xdp-no-program", "xdp_program", dict(interface="eth0", netns="{rx}", object="{drop}", program="xdp_nosuch"),
     "program 'xdp_nosuch' is not in {drop}; it has: xdp_drop_count"),
    ("xdp-wrong-type", "xdp_program", dict(interface="eth0", netns="{rx}", object="{tc}", program="tc_drop_count"),
     "program 'tc_drop_count' in {tc} is a sched_cls program, not xdp; XDP programs are in SEC(\"xdp\"), or in a "
     "section that names no program type (this one is in SEC(\"tc\"))"),
    ("xdp-no-xdp-program", "xdp_program", dict(interface="eth0", netns="{rx}", object="{tc}"),
     "{tc} has 0 XDP programs (none); name one with program: or section:"),
    # section: a program by its SEC() name (a section of another type, two programs in one, none such)
    ("xdp-section-of-another-type", "xdp_program",
     dict(interface="eth0", netns="{rx}", object="{mixed}", section="kprobe/do_sys_openat2"),
     "program 'open_probe' in {mixed} is a kprobe program, not xdp; XDP programs are in SEC(\"xdp\"), or in a "
     "section that names no program type (this one is in SEC(\"kprobe/do_sys_openat2\"))"),
    ("xdp-no-such-section", "xdp_program", dict(interface="eth0", netns="{rx}", object="{mixed}", section="xdp"),
     "{mixed} has no program in section 'xdp'; its programs: first_count (SEC(\"classifier\")), second_drop "
     "(SEC(\"classifier\")), open_probe (SEC(\"kprobe/do_sys_openat2\")), socket_all (SEC(\"socket\"))"),
    ("xdp-section-and-program", "xdp_program",
     dict(interface="eth0", netns="{rx}", object="{drop}", program="xdp_drop_count", section="xdp"),
     "parameters are mutually exclusive: program|section"),
    ("xdp-section-with-previous", "xdp_program",
     dict(interface="eth0", netns="{rx}", revision="previous", section="xdp"),
     "revision: previous puts back the revision kept on the hook, with its own object, program (or section), "
     "constants and map set; do not give section with it"),
    ("xdp-section-with-bcc", "xdp_program",
     dict(interface="eth0", netns="{rx}", backend="bcc", source="{broken}", section="xdp"),
     "section names a program of a compiled object by its SEC(); backend bcc compiles a source and takes the "
     "function's name as program: instead"),
    ("xdp-bad-mode", "xdp_program", dict(interface="eth0", netns="{rx}", object="{drop}", mode="offload"),
     "value of mode must be one of: native, generic, auto, got: offload"),
    ("xdp-no-object", "xdp_program", dict(interface="eth0", netns="{rx}"),
     re.compile(r"state is present but any of the following are missing: object(, \w+)*")),
    ("xdp-missing-object", "xdp_program", dict(interface="eth0", netns="{rx}", object="{objects}/nosuch.o"),
     {"check": Warned("object {objects}/nosuch.o does not exist yet; it would be attached once it does"),
      "run": "object file {objects}/nosuch.o does not exist; compile it with ebpf.xdp.bpf_object"}),
    ("xdp-unknown-constant", "xdp_program",
     dict(interface="eth0", netns="{rx}", object="{drop}", constants={"xdp_actoin": 2}),
     "{drop} has no const volatile setting named xdp_actoin; it has: xdp_action"),
    ("xdp-constant-not-a-setting", "xdp_program",
     dict(interface="eth0", netns="{rx}", object="{drop}", constants={"xdp_action": {"value": 2}}),
     "constant xdp_action: {{'value': 2}} is not a setting; give a number, a boolean, or {{ifindex: INTERFACE}}"),
    ("xdp-constant-no-interface", "xdp_program",
     dict(interface="eth0", netns="{rx}", object="{drop}", constants={"xdp_action": {"ifindex": "nosuch1"}}),
     "constant xdp_action: interface 'nosuch1' does not exist in this network namespace"),
    ("xdp-constant-too-big", "xdp_program",
     dict(interface="eth0", netns="{rx}", object="{drop}", constants={"xdp_action": 2 ** 40}),
     "setting xdp_action=1099511627776 does not fit its 4-byte variable"),
    ("xdp-checksum-wrong", "xdp_program", dict(interface="eth0", netns="{rx}", object="{drop}", checksum=WRONG),
     "object {drop} does not match its checksum: expected %s, found sha256:{drop_sha}; nothing was loaded" % WRONG),
    ("xdp-checksum-md5", "xdp_program", dict(interface="eth0", netns="{rx}", object="{drop}", checksum="md5:00"),
     "checksum 'md5:00' is not sha256:<64 hex digits> (the digest ebpf.xdp.bpf_object returns as checksum)"),
    ("xdp-checksum-short", "xdp_program",
     dict(interface="eth0", netns="{rx}", object="{drop}", checksum="sha256:abc"),
     "checksum 'sha256:abc': a sha256 digest is 64 hex digits, not 'abc'"),
    ("xdp-shared-maps-path", "xdp_program",
     dict(interface="eth0", netns="{rx}", object="{drop}", shared_maps="../x"),
     not_a_map_set("../x")),
    ("xdp-pin-root-not-bpffs", "xdp_program",
     dict(interface="eth0", netns="{rx}", object="{drop}", pin_root="{objects}/pins"),
     "{objects}/pins is not on a BPF filesystem (bpffs); mount it with 'mount -t bpf bpf /sys/fs/bpf' or apply "
     "the ebpf.xdp.toolchain role"),
    # tc_program
    ("tc-bad-direction", "tc_program", dict(interface="eth0", netns="{rx}", object="{tc}", direction="sideways"),
     "value of direction must be one of: ingress, egress, got: sideways"),
    ("tc-bad-method", "tc_program", dict(interface="eth0", netns="{rx}", object="{tc}", method="xdp"),
     "value of method must be one of: tcx, cls_bpf, act_bpf, auto, got: xdp"),
    ("tc-priority-range", "tc_program",
     dict(interface="eth0", netns="{rx}", object="{tc}", program="tc_drop_count", priority=70000),
     "priority must be between 1 and 65535, not 70000"),
    ("tc-handle-range", "tc_program",
     dict(interface="eth0", netns="{rx}", object="{tc}", program="tc_drop_count", method="act_bpf", handle=5000),
     "handle must be between 1 and 4095 for method act_bpf, not 5000"),
    ("tc-wrong-type", "tc_program", dict(interface="eth0", netns="{rx}", object="{drop}"),
     "{drop} has 0 tc classifier programs (none); name one with program: or section:"),
    ("tc-ambiguous", "tc_program", dict(interface="eth0", netns="{rx}", object="{tc}"),
     "{tc} has 4 tc classifier programs (redirect_xmit, redirect_ingress, clone_redirect_xmit, tc_drop_count); "
     "name one with program: or section:"),
    ("tc-section-two-programs", "tc_program",
     dict(interface="eth0", netns="{rx}", object="{mixed}", section="classifier", method="cls_bpf"),
     "section 'classifier' of {mixed} holds 2 programs (first_count, second_drop); name one with program: instead"),
    ("tc-socket-filter", "tc_program",
     dict(interface="eth0", netns="{rx}", object="{mixed}", program="socket_all", method="cls_bpf",
          direction="egress"),
     "program 'socket_all' in {mixed} is a socket_filter program, not sched_cls; tc classifier programs are in "
     "SEC(\"tc\"), or in a section that names no program type (this one is in SEC(\"socket\"))"),
    ("tc-not-elf", "tc_program",
     dict(interface="eth0", netns="{rx}", object="/etc/passwd", program="tc_drop_count", method="cls_bpf"), NOT_ELF),
    ("tc-no-interface", "tc_program",
     dict(interface="nosuch0", netns="{rx}", object="{tc}", program="tc_drop_count"),
     "interface 'nosuch0' does not exist in this network namespace"),
    ("tc-checksum-wrong", "tc_program",
     dict(interface="eth0", netns="{rx}", object="{tc}", program="tc_drop_count", checksum=WRONG),
     "object {tc} does not match its checksum: expected %s, found sha256:{tc_sha}; nothing was loaded" % WRONG),
    # xdp_facts
    ("facts-no-interface", "xdp_facts", dict(netns="{rx}", interfaces=["nosuch0"]),
     "interface nosuch0 does not exist in this network namespace"),
    ("facts-negative-rate", "xdp_facts", dict(netns="{rx}", rate_interval=-1), "rate_interval must not be negative"),
    ("facts-zero-entries", "xdp_facts", dict(netns="{rx}", max_entries=0),
     "max_entries must be a positive number of entries to read from each map, not 0"),
    ("facts-negative-entries", "xdp_facts", dict(netns="{rx}", max_entries=-1),
     "max_entries must be a positive number of entries to read from each map, not -1"),
    ("facts-netns-path", "xdp_facts", dict(netns="a/b"), not_netns("a/b")),
    # xdp_trafficgen
    ("gen-bad-ip", "xdp_trafficgen", dict(interface="eth0", netns="{tx}", src_ip="10.0.0.1", dst_ip="10.0.0.300"),
     "dst_ip '10.0.0.300' is not an IPv4 or IPv6 address"),
    ("gen-bad-mac", "xdp_trafficgen",
     dict(interface="eth0", netns="{tx}", src_ip="10.0.0.1", dst_ip="10.0.0.2", dst_mac="02:00:zz:00:00:01"),
     "dst_mac '02:00:zz:00:00:01' is not a MAC address (six hex bytes separated by colons)"),
    ("gen-mixed-families", "xdp_trafficgen",
     dict(interface="eth0", netns="{tx}", src_ip="10.0.0.1", dst_ip="fe80::1"),
     "src_ip 10.0.0.1 and dst_ip fe80::1 are not of one IP version"),
    ("gen-bad-cpu", "xdp_trafficgen",
     dict(interface="eth0", netns="{tx}", src_ip="10.0.0.1", dst_ip="10.0.0.2", count=10, cpus=[4096]),
     re.compile(r"CPU 4096 is not one this task may run on \(allowed: [0-9,-]+\)")),
    ("gen-port-range", "xdp_trafficgen",
     dict(interface="eth0", netns="{tx}", src_ip="10.0.0.1", dst_ip="10.0.0.2", src_port=100, src_port_max=10),
     "src_port_max (10) must not be below src_port (100)"),
    ("gen-no-interface", "xdp_trafficgen",
     dict(interface="nosuch0", netns="{tx}", src_ip="10.0.0.1", dst_ip="10.0.0.2", count=10),
     "interface 'nosuch0' does not exist in this network namespace"),
    ("gen-bad-protocol", "xdp_trafficgen",
     dict(interface="eth0", netns="{tx}", src_ip="10.0.0.1", dst_ip="10.0.0.2", protocols=["sctp"]),
     "value of protocols must be one or more of: udp, tcp, icmp. Got no match for: sctp"),
    # pktgen
    ("pktgen-no-count", "pktgen", dict(interface="eth0", netns="{tx}", dst_ip="10.0.0.2", dst_mac="02:00:00:00:00:01"),
     "one of the following is required: count, duration"),
    ("pktgen-bad-mac", "pktgen", dict(interface="eth0", netns="{tx}", dst_ip="10.0.0.2", dst_mac="nope", count=10),
     "dst_mac 'nope' is not a MAC address (six hex bytes separated by colons)"),
    ("pktgen-rate-and-ratep", "pktgen",
     dict(interface="eth0", netns="{tx}", dst_ip="10.0.0.2", dst_mac="02:00:00:00:00:01", count=10, rate=10,
          ratep=10),
     "give one of delay, rate and ratep: each sets pktgen's gap between packets (given: rate, ratep)"),
    # replay
    ("replay-no-interface", "replay", dict(interface="nosuch0", netns="{rx}", pcap="{pcap}", object="{drop}"),
     "interface 'nosuch0' does not exist in this network namespace"),
    ("replay-no-netns", "replay", dict(interface="eth0", netns="nosuch-ns-{tag}", pcap="{pcap}", object="{drop}"),
     "network namespace 'nosuch-ns-{tag}' does not exist (no /run/netns/nosuch-ns-{tag})"),
    ("replay-no-pcap", "replay", dict(interface="eth0", netns="{rx}", pcap="{objects}/nosuch.pcap", object="{drop}"),
     "pcap {objects}/nosuch.pcap does not exist on the host"),
    ("replay-pcapng", "replay", dict(interface="eth0", netns="{rx}", pcap="{pcapng}", object="{drop}"),
     "{pcapng}: this is a pcapng file, not a classic pcap; convert it first: tcpdump -r in.pcapng -w out.pcap, or "
     "editcap -F pcap in.pcapng out.pcap"),
    ("replay-nothing-attached", "replay", dict(interface="lo", netns="{rx}", pcap="{pcap}", object="{drop}"),
     "ebpf.xdp has no program on the xdp hook of lo: replay compares a candidate with the program the collection "
     "attached there"),
    ("replay-no-program", "replay",
     dict(interface="eth0", netns="{rx}", pcap="{pcap}", object="{drop}", program="xdp_nosuch"),
     "program 'xdp_nosuch' is not in {drop}; it has: xdp_drop_count"),
    ("replay-not-elf", "replay", dict(interface="eth0", netns="{rx}", pcap="{pcap}", object="/etc/passwd"), NOT_ELF),
    ("xdp-replay-absent", "xdp_program",
     dict(interface="eth0", netns="{rx}", object="{drop}", replay="{pcap}", state="absent"),
     "replay compares the attached program with the task's object: it needs state present, an object (backend "
     "libbpf) and no revision previous"),
    # bpf_map_entry
    ("map-no-pin", "bpf_map_entry", dict(path="{pin_root}/nosuch", entries=[{"key": 0, "value": 1}]),
     "no pinned map at {pin_root}/nosuch: nothing is pinned there"),
    ("map-not-bpffs", "bpf_map_entry", dict(path="/etc/passwd", entries=[{"key": 0, "value": 1}]),
     "/etc/passwd is not a pinned BPF object (not on bpffs), not a pinned map"),
    ("map-a-program", "bpf_map_entry", dict(path="{rx_prog}", entries=[{"key": 0, "value": 1}]),
     "{rx_prog} is a pinned prog, not a map"),
    ("map-key-out-of-range", "bpf_map_entry", dict(path="{drop_map}", entries=[{"key": 4096, "value": 1}]),
     "entries[0].key: 4096 is out of range for proto_count, a percpu_array of 256 entries (0..255)"),
    ("map-key-not-a-number", "bpf_map_entry", dict(path="{drop_map}", entries=[{"key": "udp", "value": 1}]),
     "entries[0].key: 'udp' is not a value for __u32; give an integer, {{ifindex: NAME}}, an IP or MAC address, "
     "or {{hex: BYTES}}"),
    ("map-value-too-big", "bpf_map_entry", dict(path="{drop_map}", entries=[{"key": 1, "value": 2 ** 70}]),
     "entries[0].value: 1180591620717411303424 is out of range for __u64 (0..18446744073709551615)"),
    ("map-netns-path", "bpf_map_entry", dict(path="{drop_map}", netns="..", entries=[{"key": 1, "value": 1}]),
     not_netns("..")),
    # devmap_group
    ("group-no-member", "devmap_group",
     dict(netns="{tx}", name="video", shared_maps=SET, members=["nosuch0"]),
     "member nosuch0: no such interface in network namespace {tx}"),
    ("group-unicast-address", "devmap_group",
     dict(netns="{tx}", name="video", shared_maps=SET, members=["eth0"], addresses=["10.0.0.1"]),
     "address 10.0.0.1 is not a multicast address; a group takes IPv4 224.0.0.0/4, IPv6 ff00::/8 or a multicast "
     "MAC"),
    ("group-no-set", "devmap_group", dict(netns="{tx}", name="video", shared_maps="nosuch", members=["eth0"]),
     {"check": Warned("map set nosuch does not exist yet in {pin_root}/{tx}/shared_maps/nosuch; the group would "
                      "be created once the multicast program is attached with shared_maps: nosuch"),
      "run": re.compile(re.escape("map set 'nosuch' has no pinned mcast_groups, mcast_addrs, mcast_config, "
                                  "mcast_frames, mcast_copies, mcast_port_mac in ")
                        + r"\S+/shared_maps/nosuch: attach the multicast program with shared_maps: nosuch first.*")}),
    ("group-id-range", "devmap_group", dict(netns="{tx}", id=100000, shared_maps=SET, members=["eth0"]),
     "group id 100000 is out of range: ids run from 1 to 255 (0 means no group)"),
    ("group-no-name", "devmap_group", dict(netns="{tx}", shared_maps=SET),
     "one of the following is required: name, id"),
    ("group-egress-not-elf", "devmap_group",
     dict(netns="{tx}", name="video", shared_maps=SET, members=["eth0"], egress_program={"object": "/etc/passwd"}),
     NOT_ELF),
    # egress_program by section: with program too, a section of two programs, a section the object does not have
    ("group-egress-section-and-program", "devmap_group",
     dict(netns="{tx}", name="video", shared_maps=SET, members=["eth0"],
          egress_program={"object": "{mcast}", "program": "xdp_egress_mac", "section": "xdp/devmap"}),
     "parameters are mutually exclusive: program|section found in egress_program"),
    ("group-egress-section-two-programs", "devmap_group",
     dict(netns="{tx}", name="video", shared_maps=SET, members=["eth0"],
          egress_program={"object": "{mixed}", "section": "classifier"}),
     "section 'classifier' of {mixed} holds 2 programs (first_count, second_drop); name one with program: instead"),
    ("group-egress-no-such-section", "devmap_group",
     dict(netns="{tx}", name="video", shared_maps=SET, members=["eth0"],
          egress_program={"object": "{mcast}", "section": "xdp_devmap/nosuch"}),
     "{mcast} has no program in section 'xdp_devmap/nosuch'; its programs: xdp_multicast (SEC(\"xdp\")), "
     "xdp_egress_mac (SEC(\"xdp/devmap\"))"),
    # datapath: each entry as its module would check it, named by its place in config; a failing entry puts back
    # what the entries before it changed (lo's new program here)
    ("datapath-two-entries-one-hook", "datapath",
     dict(config={"xdp": [dict(interface="eth0", netns="{rx}", object="{drop}"),
                          dict(interface="eth0", netns="{rx}", object="{drop}", mode="generic")]}),
     "config.xdp[0] and config.xdp[1] both manage the XDP hook of eth0 in netns {rx}: give each one entry"),
    ("datapath-entry-option", "datapath",
     dict(config={"tc": [dict(interface="eth0", netns="{rx}", object="{tc}", method="xdp")]}),
     "config.tc[0]: value of method must be one of: tcx, cls_bpf, act_bpf, auto, got: xdp"),
    ("datapath-entry-section-and-program", "datapath",
     dict(config={"tc": [dict(interface="eth0", netns="{rx}", object="{mixed}", program="first_count",
                              section="classifier")]}),
     "config.tc[0]: parameters are mutually exclusive: program|section"),
    ("datapath-entry-section-of-another-type", "datapath",
     dict(config={"tc": [dict(interface="eth0", netns="{rx}", object="{mixed}", section="socket",
                              method="cls_bpf", direction="egress")]}),
     "config.tc[0]: program 'socket_all' in {mixed} is a socket_filter program, not sched_cls; tc classifier "
     "programs are in SEC(\"tc\"), or in a section that names no program type (this one is in SEC(\"socket\"))"),
    ("datapath-group-egress-section-and-program", "datapath",
     dict(config={"devmap_groups": [dict(netns="{tx}", name="video", shared_maps=SET, members=["eth0"],
                                         egress_program={"object": "{mcast}", "program": "xdp_egress_mac",
                                                         "section": "xdp/devmap"})]}),
     "config.devmap_groups[0]: parameters are mutually exclusive: program|section found in egress_program"),
    ("datapath-group-egress-section-two-programs", "datapath",
     dict(config={"devmap_groups": [dict(netns="{tx}", name="video", shared_maps=SET, members=["eth0"],
                                         egress_program={"object": "{mixed}", "section": "classifier"})]}),
     "config.devmap_groups[0]: section 'classifier' of {mixed} holds 2 programs (first_count, second_drop); name "
     "one with program: instead"),
    ("datapath-entry-pin-root", "datapath",
     dict(config={"xdp": [dict(interface="eth0", netns="{rx}", object="{drop}", pin_root="{pin_root}")]}),
     "config.xdp[0]: pin_root is set once for the task, not per entry"),
    ("datapath-bcc", "datapath",
     dict(config={"xdp": [dict(interface="eth0", netns="{rx}", object="{drop}", backend="bcc")]}),
     "config.xdp[0]: backend bcc is not available in ebpf.xdp.datapath; use ebpf.xdp.xdp_program for it"),
    ("datapath-entry-fails-after-a-change", "datapath",
     dict(config={"xdp": [dict(interface="lo", netns="{rx}", object="{drop}", mode="generic"),
                          dict(interface="eth0", netns="{rx}", object="{drop}", program="xdp_nosuch")]}),
     "config.xdp[1]: program 'xdp_nosuch' is not in {drop}; it has: xdp_drop_count"),
    # bpf_object
    ("object-no-source", "bpf_object", dict(src="{objects}/nosuch.bpf.c", cache_dir="{cache}"),
     {"check": Warned("source {objects}/nosuch.bpf.c does not exist yet; it would be compiled once it does"),
      "run": "source {objects}/nosuch.bpf.c does not exist"}),
    ("object-compile-error", "bpf_object", dict(src="{broken}", dest="{objects}/broken.o", cache_dir="{cache}"),
     # Check mode compiles aside (d19cd69), so it finds the error as the run does.
     re.compile(r"clang failed to compile \(exit 1\):\n\S+/broken\.bpf\.c:1:22: error: use of undeclared "
                r"identifier 'missing'\n.*1 error generated\.", re.S)),
    ("object-no-clang", "bpf_object", dict(src="{broken}", clang="clang-nosuch", cache_dir="{cache}"),
     "clang-nosuch not found; install clang (the ebpf.xdp.toolchain role does)"),
]
# Names that would be paths and paths that are not absolute or climb (issue 37): refused, by option and value,
# before anything happens, in every module that takes them and in datapath's entries.
NAMES_AND_PATHS = [
    # xdp_program
    ("xdp-interface-absolute-absent", "xdp_program", dict(interface=ABSOLUTE_IFNAME, netns="{rx}", state="absent"),
     not_an_interface(ABSOLUTE_IFNAME)),
    ("xdp-interface-dotdot", "xdp_program", dict(interface="..", netns="{rx}", object="{drop}"),
     not_an_interface("..")),
    ("xdp-interface-16-bytes", "xdp_program", dict(interface=LONG_IFNAME, netns="{rx}", object="{drop}"),
     not_an_interface(LONG_IFNAME)),
    ("xdp-interface-newline", "xdp_program", dict(interface="eth0\nlo", netns="{rx}", object="{drop}"),
     not_an_interface("eth0\nlo")),
    ("xdp-netns-newline", "xdp_program", dict(interface="eth0", netns="{rx}\nx", object="{drop}"),
     not_netns("{rx}\nx")),
    ("xdp-name-path", "xdp_program", dict(interface="eth0", netns="{rx}", object="{drop}", name="../x"),
     "name '../x' is not a usable attachment name: 1 to 32 of a-z, 0-9, '_' and '-', starting with a letter or digit"),
    ("xdp-shared-maps-newline", "xdp_program",
     dict(interface="eth0", netns="{rx}", object="{drop}", shared_maps="set\nx"), not_a_map_set("set\nx")),
    ("xdp-pin-root-relative", "xdp_program",
     dict(interface="eth0", netns="{rx}", object="{drop}", pin_root="relative/dir"),
     not_absolute("pin_root", "relative/dir")),
    ("xdp-pin-root-relative-absent", "xdp_program",
     dict(interface="nosuch0", netns="{rx}", state="absent", pin_root="relative/dir"),
     not_absolute("pin_root", "relative/dir")),
    ("xdp-pin-root-dotdot", "xdp_program",
     dict(interface="eth0", netns="{rx}", object="{drop}", pin_root="{pin_root}/../../x"),
     climbs("pin_root", "{pin_root}/../../x")),
    ("xdp-object-store-relative", "xdp_program",
     dict(interface="eth0", netns="{rx}", object="{drop}", object_store="revisions"),
     not_absolute("object_store", "revisions")),
    ("xdp-replay-relative", "xdp_program",
     dict(interface="eth0", netns="{rx}", object="{drop}", replay="frames.pcap"), not_absolute("replay", "frames.pcap")),
    # tc_program
    ("tc-interface-absolute-absent", "tc_program",
     dict(interface=ABSOLUTE_IFNAME, netns="{rx}", state="absent", direction="egress"),
     not_an_interface(ABSOLUTE_IFNAME)),
    ("tc-interface-16-bytes", "tc_program",
     dict(interface=LONG_IFNAME, netns="{rx}", object="{tc}", program="tc_drop_count"), not_an_interface(LONG_IFNAME)),
    ("tc-name-path", "tc_program",
     dict(interface="eth0", netns="{rx}", object="{tc}", program="tc_drop_count", name="/x"),
     "name '/x' is not a usable attachment name: 1 to 32 of a-z, 0-9, '_' and '-', starting with a letter or digit"),
    ("tc-pin-root-relative", "tc_program",
     dict(interface="eth0", netns="{rx}", object="{tc}", program="tc_drop_count", pin_root="pins"),
     not_absolute("pin_root", "pins")),
    ("tc-object-store-dotdot", "tc_program",
     dict(interface="eth0", netns="{rx}", object="{tc}", program="tc_drop_count", object_store="{objects}/../r"),
     climbs("object_store", "{objects}/../r")),
    # devmap_group
    ("group-member-path", "devmap_group", dict(netns="{tx}", name="video", shared_maps=SET, members=["eth0", "../x"]),
     not_an_interface("../x", "members[1]")),
    ("group-member-16-bytes", "devmap_group",
     dict(netns="{tx}", name="video", shared_maps=SET, members=[LONG_IFNAME]),
     not_an_interface(LONG_IFNAME, "members[0]")),
    ("group-name-newline", "devmap_group", dict(netns="{tx}", name="video\nx", shared_maps=SET, members=["eth0"]),
     "name 'video\\nx' is not a usable group name: 1 to 64 characters without control characters"),
    ("group-set-dotdot", "devmap_group", dict(netns="{tx}", name="video", shared_maps="..", members=["eth0"]),
     not_a_map_set("..")),
    ("group-pin-root-relative", "devmap_group",
     dict(netns="{tx}", name="video", shared_maps=SET, members=["eth0"], pin_root="x"), not_absolute("pin_root", "x")),
    # bpf_map_entry
    ("map-netns-newline", "bpf_map_entry", dict(path="{drop_map}", netns="x\ny", entries=[{"key": 1, "value": 1}]),
     not_netns("x\ny")),
    # xdp_facts
    ("facts-interface-path", "xdp_facts", dict(netns="{rx}", interfaces=["eth0", "../../etc"]),
     not_an_interface("../../etc", "interfaces[1]")),
    ("facts-pin-root-relative", "xdp_facts", dict(netns="{rx}", pin_root="relative/dir"),
     not_absolute("pin_root", "relative/dir")),
    ("facts-pin-root-dotdot", "xdp_facts", dict(netns="{rx}", pin_root="/sys/fs/bpf/../../etc"),
     climbs("pin_root", "/sys/fs/bpf/../../etc")),
    # datapath: the task's options and each entry's, as its module checks them
    ("datapath-interface-absolute", "datapath",
     dict(config={"xdp": [dict(interface=ABSOLUTE_IFNAME, netns="{rx}", state="absent")]}),
     "config.xdp[0]: " + not_an_interface(ABSOLUTE_IFNAME)),
    ("datapath-tc-16-bytes", "datapath",
     dict(config={"tc": [dict(interface=LONG_IFNAME, netns="{rx}", object="{tc}", program="tc_drop_count")]}),
     "config.tc[0]: " + not_an_interface(LONG_IFNAME)),
    ("datapath-member-newline", "datapath",
     dict(config={"devmap_groups": [dict(netns="{tx}", name="video", shared_maps=SET, members=["eth0\n"])]}),
     "config.devmap_groups[0]: " + not_an_interface("eth0\n", "members[0]")),
    ("datapath-map-netns-dotdot", "datapath",
     dict(config={"map_entries": [dict(path="{drop_map}", netns="..", entries=[{"key": 1, "value": 1}])]}),
     "config.map_entries[0]: " + not_netns("..")),
    ("datapath-object-cache-relative", "datapath",
     dict(config={"objects": [dict(src="{broken}", dest="{objects}/broken.o", cache_dir="cache")]}),
     "config.objects[0]: " + not_absolute("cache_dir", "cache")),
    ("datapath-namespaces-dotdot", "datapath", dict(namespaces=["{rx}", ".."]), not_netns("..", "namespaces[1]")),
    ("datapath-pin-root-relative", "datapath", dict(config={}, pin_root="relative/dir"),
     not_absolute("pin_root", "relative/dir")),
    ("datapath-facts-interface-absolute", "datapath", dict(config={}, facts_before=dict(interfaces=["/etc/x"])),
     not_an_interface("/etc/x", "facts_before.interfaces[0]")),
    # replay
    ("replay-pcap-relative", "replay", dict(interface="eth0", netns="{rx}", pcap="frames.pcap", object="{drop}"),
     not_absolute("pcap", "frames.pcap")),
    ("replay-interface-dotdot", "replay", dict(interface="..", netns="{rx}", pcap="{pcap}", object="{drop}"),
     not_an_interface("..")),
    ("replay-object-store-relative", "replay",
     dict(interface="eth0", netns="{rx}", pcap="{pcap}", object="{drop}", object_store="store"),
     not_absolute("object_store", "store")),
    # capture
    ("capture-path-relative", "capture", dict(interface="eth0", netns="{rx}", path="frames.pcap", count=1),
     not_absolute("path", "frames.pcap")),
    ("capture-path-dotdot", "capture", dict(interface="eth0", netns="{rx}", path="{objects}/../x.pcap", count=1),
     climbs("path", "{objects}/../x.pcap")),
    ("capture-interface-absolute", "capture", dict(interface=ABSOLUTE_IFNAME, netns="{rx}", path="{objects}/x.pcap"),
     not_an_interface(ABSOLUTE_IFNAME)),
    # bpf_object
    ("object-cache-relative", "bpf_object", dict(src="{broken}", cache_dir="cache"), not_absolute("cache_dir", "cache")),
    ("object-cache-dotdot", "bpf_object", dict(src="{broken}", cache_dir="{cache}/../c"),
     climbs("cache_dir", "{cache}/../c")),
    # the generators and netfilter_drop: the interface is a path component of /proc/net/pktgen, or an argv
    ("pktgen-interface-path", "pktgen",
     dict(interface="../pgctrl", netns="{tx}", dst_ip="10.0.0.2", dst_mac="02:00:00:00:00:01", count=10),
     not_an_interface("../pgctrl")),
    ("gen-interface-newline", "xdp_trafficgen",
     dict(interface="eth0\n", netns="{tx}", src_ip="10.0.0.1", dst_ip="10.0.0.2", count=1),
     not_an_interface("eth0\n")),
    ("netfilter-netns-dotdot", "netfilter_drop", dict(interface="eth0", netns="..", backend="nftables"),
     not_netns("..")),
]
CASES += NAMES_AND_PATHS
if not kernel_features.features()["pktgen"]:  # bad input only where the kernel cannot do it
    CASES.append(
        ("pktgen-no-pktgen", "pktgen",
         dict(interface="eth0", netns="{tx}", dst_ip="10.0.0.2", dst_mac="02:00:00:00:00:01", count=10),
         re.compile(r"this kernel \(\S+\) has no pktgen: `modprobe (--dry-run )?pktgen` failed \(.*\) and there is "
                    r"no /proc/net/pktgen; pktgen needs CONFIG_NET_PKTGEN \(Debian's stock kernels ship it as the "
                    r"module pktgen\)")))


# Cases that change the host before they fail, and must put it back.
PUTS_BACK = {"datapath-entry-fails-after-a-change"}


def fill(value, names):
    if isinstance(value, Warned):
        return Warned(value.format(**names))
    if isinstance(value, str):
        return value.format(**names)
    if isinstance(value, dict):
        return {k: fill(v, names) for k, v in value.items()}
    if isinstance(value, list):
        return [fill(v, names) for v in value]
    return value


def names_of(host):
    return {"rx": host.rx, "tx": host.tx, "drop": host.drop, "tc": host.tc, "mcast": host.mcast, "mixed": host.mixed,
            "objects": host.objects, "cache": host.cache, "broken": host.broken, "pin_root": host.pin_root,
            "drop_map": host.drop_map, "rx_prog": os.path.join(host.pin_root, host.rx, "eth0", "xdp", "prog"),
            "tag": "x", "drop_sha": sha256(host.drop), "tc_sha": sha256(host.tc), "pcap": host.pcap,
            "pcapng": host.pcapng}


def sha256(path):
    with open(path, "rb") as handle:
        return hashlib.sha256(handle.read()).hexdigest()


PIN_MODULES = ("xdp_program", "tc_program", "xdp_facts", "devmap_group", "datapath", "replay")
# Messages of Ansible's own argument-spec checks, which fail before any code of the module runs.
ARGSPEC = ("value of ", "one of the following is required: ", "missing required arguments: ",
           "parameters are mutually exclusive: ", "Unsupported parameters ")


def argspec_case(message):
    """A case the argument spec refuses: it cannot change the host, so it gets no snapshot of its own (the
    next case's snapshot still covers it)."""
    return isinstance(message, str) and message.startswith(ARGSPEC)


def run_matrix(host, check):
    """Every case, check mode or not, each followed by a snapshot of the host; {case: (result, before, after)}.

    The modules start directly (conftest's ModuleRunner: the module's own code, argument spec and check mode,
    without a controller per case); test_module_runner shows that Ansible reports the same.
    """
    names = names_of(host)
    before = pin_snapshot.snapshot(host.where(), whole_host=True)
    outcomes = {}
    for name, module, args, message in CASES:
        args = fill(args, names)
        if module in PIN_MODULES:
            args.setdefault("pin_root", host.pin_root)
        res = host.run(module, args, check=check)
        if argspec_case(message):
            outcomes[name] = (res, before, before)
            continue
        after = pin_snapshot.snapshot(host.where(), whole_host=True)
        outcomes[name] = (res, before, after)
        before = after
    return outcomes


@pytest.fixture(scope="module")
def outcomes(host):
    """Check mode first, then the real run: the cases' results with the host before and after each."""
    return {"check": run_matrix(host, check=True), "run": run_matrix(host, check=False)}


def expect(message, res):
    if message is None:
        assert not res.get("failed"), res
        return
    if isinstance(message, Warned):
        assert not res.get("failed") and message in res.get("warnings", []), (message, res)
        return
    assert res.get("failed") is True, res
    assert res.get("changed") is not True, res
    if isinstance(message, re.Pattern):
        assert message.fullmatch(res["msg"]), (message.pattern, res["msg"])
    else:
        assert res["msg"] == message, res


@pytest.mark.parametrize("mode", ["check", "run"])
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_bad_input_fails_with_its_message_and_changes_nothing(host, outcomes, case, mode):
    name, _module, _args, message = case
    res, before, after = outcomes[mode][name]
    wanted = message[mode] if isinstance(message, dict) else message
    expect(fill(wanted, names_of(host)) if isinstance(wanted, str) else wanted, res)
    if name in PUTS_BACK and mode == "run":
        # It changed lo and put it back: the lock file it took for lo stays (empty, in /run), as after any run.
        added = {ns: sorted(set(after["locks"][ns]) - set(before["locks"].get(ns, {}))) for ns in after["locks"]}
        assert added == {host.tx: [], host.rx: ["lo.lock"]}, added
        after = dict(after, locks=before["locks"])
    assert after == before


def test_a_failing_datapath_entry_says_what_it_put_back(host, outcomes):
    res = outcomes["run"]["datapath-entry-fails-after-a-change"][0]
    assert res["put_back"] == ["config.xdp[0] (the XDP hook of lo in netns %s): put back" % host.rx], res
    assert outcomes["check"]["datapath-entry-fails-after-a-change"][0]["put_back"] == [], "check mode changed"


def test_the_matrix_covers_every_module():
    modules = {module for _name, module, _args, _message in CASES}
    assert modules == {"bpf_object", "xdp_program", "tc_program", "xdp_facts", "xdp_trafficgen", "pktgen",
                       "bpf_map_entry", "devmap_group", "datapath", "replay", "capture", "netfilter_drop"}
    assert len(CASES) >= 30


def test_names_and_paths_are_refused_in_every_module_that_takes_them():
    """Each module whose options name an interface, a namespace or a root has a case of its own (issue 37)."""
    modules = {module for _name, module, _args, _message in NAMES_AND_PATHS}
    assert modules == {"bpf_object", "xdp_program", "tc_program", "xdp_facts", "xdp_trafficgen", "pktgen",
                       "bpf_map_entry", "devmap_group", "datapath", "replay", "capture", "netfilter_drop"}
    assert len(NAMES_AND_PATHS) == 45
