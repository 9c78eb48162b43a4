"""pktgen's pure parts: the Result-line parser, thread listings, the threads' CPUs, addresses, settings and the
commands they become. The proc protocol itself runs against a real kernel (tests/integration/test_pktgen_kernel.py)."""

import pytest

from ansible_collections.ebpf.xdp.plugins.module_utils.traffic import pktgen as _pktgen

# The issue's text (samples/pktgen, pktgen_sample03_burst_single_flow.sh -t 4), one thread's Result.
ISSUE = ("Result: OK: 11791017(c11788327+d2689) usec, 59622913 (60byte,0frags)\n"
         "  5056638pps 2427Mb/sec (2427186240bps) errors: 0\n")
# Documentation/networking/pktgen.rst: a whole device file after a run.
DOC_DEVICE = """Params: count 100000  min_pkt_size: 60  max_pkt_size: 60
     frags: 0  delay: 0  clone_skb: 64  ifname: eth4@0
     flows: 0 flowlen: 0
     queue_map_min: 0  queue_map_max: 0
     dst_min: 192.168.81.2  dst_max:
     src_min:   src_max:
     src_mac: 90:e2:ba:0a:56:b4 dst_mac: 00:1b:21:3c:9d:f8
     udp_src_min: 9  udp_src_max: 109  udp_dst_min: 9  udp_dst_max: 9
     src_mac_count: 0  dst_mac_count: 0
     Flags: UDPSRC_RND  NO_TIMESTAMP  QUEUE_MAP_CPU
Current:
     pkts-sofar: 100000  errors: 0
     started: 623913381008us  stopped: 623913396439us idle: 25us
     seq_num: 100001  cur_dst_mac_offset: 0  cur_src_mac_offset: 0
     cur_saddr: 192.168.8.3  cur_daddr: 192.168.81.2
     cur_udp_dst: 9  cur_udp_src: 42
     cur_queue_map: 0
     flows: 0
Result: OK: 15430(c15405+d25) usec, 100000 (60byte,0frags)
  6480562pps 3110Mb/sec (3110669760bps) errors: 0
"""
# Seen in the lab's VM (Debian 12, 6.1): netif_receive into a device whose tc ingress drops everything.
VM_INJECT = ("Result: OK: 25972(c25971+d1) usec, 5000 (60byte,0frags)\n"
             "  192508pps 92Mb/sec (92403840bps) errors: 5000")


def test_parse_the_issues_result_line():
    assert _pktgen.parse_result(ISSUE) == {
        "sent": 59622913, "seconds": 11.791017, "idle_seconds": 0.002689, "size": 60, "frags": 0,
        "pps": 5056638, "mbps": 2427, "bps": 2427186240, "errors": 0}


def test_parse_a_whole_device_file():
    section = _pktgen.result_section(DOC_DEVICE)
    assert section.startswith("OK: 15430(c15405+d25) usec") and section.endswith("errors: 0")
    parsed = _pktgen.parse_result(section)
    assert (parsed["sent"], parsed["seconds"], parsed["pps"], parsed["mbps"]) == (100000, 0.01543, 6480562, 3110)


def test_parse_errors_and_the_label_is_optional():
    parsed = _pktgen.parse_result(_pktgen.result_section(VM_INJECT))
    assert parsed["errors"] == 5000 and parsed["sent"] == 5000 and parsed["pps"] == 192508
    assert _pktgen.parse_result(VM_INJECT) == parsed


def test_parse_nsec_of_old_kernels():
    parsed = _pktgen.parse_result("Result: OK: 2000000000(c1999000000+d1000000) nsec, 1000 (1514byte,2frags)\n"
                                  "  500pps 6Mb/sec (6056000bps) errors: 3")
    assert parsed["seconds"] == 2.0 and parsed["idle_seconds"] == 0.001 and parsed["frags"] == 2
    assert parsed["size"] == 1514 and parsed["errors"] == 3


@pytest.mark.parametrize("text", [
    "Result: Idle",
    "Result: NA",
    "Result: Starting",
    "Result: OK: add_device=eth0@0",
    "Result: OK: dstmac 02:00:00:aa:00:02",
    "Result: ERROR: can not add device nosuch@0",
    'Result: No such parameter "bogus"',
    "Result: Flag -:BOGUS:- unknown\nAvailable flags, (prepend ! to un-set flag):\nIPSRC_RND, IPDST_RND",
    "",
])
def test_not_a_run_result(text):
    assert _pktgen.parse_result(text) is None


def test_result_section():
    assert _pktgen.result_section("Running: \nStopped: eth0@0 \nResult: OK: add_device=eth0@0\n") == \
        "OK: add_device=eth0@0"
    assert _pktgen.result_section("Params: count 0\n") == ""


def test_thread_devices():
    # As kpktgend_0 reads on 6.1, with two devices, and with none.
    assert _pktgen.thread_devices("Running: \nStopped: eth0@x eth0@0 \nResult: OK: add_device=eth0@x\n") == \
        ["eth0@x", "eth0@0"]
    assert _pktgen.thread_devices("Running: eth1@1 \nStopped: \nResult: OK: add_device=eth1@1\n") == ["eth1@1"]
    assert _pktgen.thread_devices("Running: \nStopped: \nResult: OK: rem_device_all\n") == []


def test_thread_cpus_are_checked_against_the_online_ones():  # the CPU lists themselves: test_cpus.py
    _pktgen.check_cpus([0, 1], {0, 1})
    with pytest.raises(_pktgen.PktgenError, match=r"^CPU 63 is not present or not online \(online: 0-1\)"):
        _pktgen.check_cpus([0, 63], {0, 1})


@pytest.mark.parametrize("spec,expected", [
    ("10.0.0.1", (4, "10.0.0.1", "10.0.0.1")),
    ("10.0.0.1-10.0.0.20", (4, "10.0.0.1", "10.0.0.20")),
    ("198.18.0.0/15", (4, "198.18.0.0", "198.19.255.255")),  # the samples' -d example
    ("198.18.3.7/24", (4, "198.18.3.0", "198.18.3.255")),
    ("fd00::1", (6, "fd00::1", "fd00::1")),
    ("fd00::/120", (6, "fd00::", "fd00::ff")),
])
def test_addresses(spec, expected):
    assert _pktgen.parse_addresses(spec, "dst_ip") == expected


@pytest.mark.parametrize("spec", ["10.0.0.300", "10.0.0.9-10.0.0.1", "10.0.0.1-fd00::1", "fd00::/129", "eth0", ""])
def test_bad_addresses(spec):
    with pytest.raises(_pktgen.PktgenError, match="is not an IP address, a range a-b or a CIDR prefix"):
        _pktgen.parse_addresses(spec, "dst_ip")


def settings(**overrides):
    params = dict(interface="eth0", dst_ip="10.0.0.2", dst_mac="02:00:00:00:00:02", count=1000)
    params.update(overrides)
    return _pktgen.Settings.from_params({k: v for k, v in params.items() if v is not None})


def test_commands_as_the_samples_write_them():
    s = settings(cpus=[0, 1], burst=1, flags=["QUEUE_MAP_CPU", "NO_TIMESTAMP"], dst_port=1000, dst_port_max=1009)
    assert s.device_commands() == [
        "xmit_mode start_xmit", "count 1000", "clone_skb 0", "pkt_size 60", "burst 1", "delay 0",
        "dst_mac 02:00:00:00:00:02", "dst_min 10.0.0.2", "dst_max 10.0.0.2",
        "udp_src_min 9", "udp_src_max 9",
        # pktgen's udp_*_max is the port after the range
        "udp_dst_min 1000", "udp_dst_max 1010",
        "flag QUEUE_MAP_CPU", "flag NO_TIMESTAMP"]
    assert [s.device_name(c) for c in s.cpus] == ["eth0@0", "eth0@1"]


def test_commands_for_ipv6_a_duration_and_a_rate():
    s = settings(dst_ip="fd00::/120", src_ip="fd00::1", count=None, duration=5, ratep=100000,
                 src_mac="02:00:00:00:00:01", xmit_mode="netif_receive", burst=8)
    cmds = s.device_commands()
    assert cmds[:7] == ["xmit_mode netif_receive", "count 0", "clone_skb 0", "pkt_size 78", "burst 8", "delay 0",
                        "dst_mac 02:00:00:00:00:02"]
    assert "src_mac 02:00:00:00:00:01" in cmds and "dst6_min fd00::" in cmds and "dst6_max fd00::ff" in cmds
    assert "src6 fd00::1" in cmds and cmds[-1] == "ratep 100000"
    assert not any(c.startswith("flag") for c in cmds)  # dst6 sets IPV6; 6.1 refuses `flag IPV6`
    single = settings(dst_ip="fd00::2").device_commands()
    assert "dst6 fd00::2" in single and not any(c.startswith("dst_m") and "::" in c for c in single)


def test_ipv4_source_range_and_sizes():
    s = settings(src_ip="10.0.1.0/30", size=1514, rate=300)
    cmds = s.device_commands()
    assert "src_min 10.0.1.0" in cmds and "src_max 10.0.1.3" in cmds and "pkt_size 1514" in cmds
    assert cmds.index("rate 300") > cmds.index("pkt_size 1514")  # rate turns Mb/s into a gap from the size
    assert settings(size=58).size == 58 and settings(dst_ip="fd00::2").size == 78


def test_macs_are_normalised():
    assert settings(dst_mac="2:0:0:AA:0:2").dst_mac == "02:00:00:aa:00:02"


@pytest.mark.parametrize("overrides,message", [
    (dict(count=None), "give count (packets per thread) or duration"),
    (dict(count=0), "count must be a positive number of packets per thread, not 0"),
    (dict(count=-5), "not -5"),
    (dict(count=None, duration=0), "duration must be a positive number of seconds"),
    (dict(timeout=0), "timeout must be a positive number"),
    (dict(cpus=[]), "cpus must list at least one CPU"),
    (dict(cpus=[1, 1]), "cpus lists CPU 1 more than once"),
    (dict(cpus=[-2]), "CPU -2 is not a CPU number"),
    (dict(xmit_mode="queue_xmit"), "xmit_mode must be one of start_xmit, netif_receive"),
    (dict(dst_mac="02:00:00:aa:00"), "dst_mac '02:00:00:aa:00' is not a MAC address"),
    (dict(dst_mac="02:00:00:aa:00:0g"), "is not a MAC address"),
    (dict(src_mac="02-00-00-aa-00-01"), "src_mac '02-00-00-aa-00-01' is not a MAC address"),
    (dict(dst_ip="10.0.0.256"), "dst_ip '10.0.0.256' is not an IP address"),
    (dict(src_ip="10.0.0"), "src_ip '10.0.0' is not an IP address"),
    (dict(src_ip="fd00::1"), "are not of one IP version"),
    (dict(dst_ip="fd00::1-fd00::9"), "pktgen varies IPv6 destinations only within a prefix"),
    (dict(dst_ip="fd00::2", src_ip="fd00::/120"), "pktgen takes a single IPv6 source address"),
    (dict(size=57), "size must be at least 58 bytes for UDP over IPv4"),
    (dict(dst_ip="fd00::2", size=77), "size must be at least 78 bytes for UDP over IPv6"),
    (dict(src_port=70000), "src_port must be between 0 and 65535"),
    (dict(dst_port=100, dst_port_max=99), "dst_port_max (99) must not be below dst_port (100)"),
    (dict(src_port_max=65535), "src_port_max must be at most 65534"),
    (dict(burst=0), "burst must be at least 1"),
    (dict(clone_skb=-1), "clone_skb must not be negative"),
    (dict(delay=-1), "delay must not be negative"),
    (dict(xmit_mode="netif_receive", clone_skb=8), "clone_skb does not work with xmit_mode netif_receive"),
    (dict(rate=100, ratep=1000), "give one of delay, rate and ratep"),
    (dict(delay=1000, rate=100), "(given: delay, rate)"),
    (dict(flags=["NO_TIMESTAMP", "BOGUS"]), "unknown pktgen flag 'BOGUS'"),
    (dict(flags=["!NOPE"]), "unknown pktgen flag '!NOPE'"),
    (dict(flags=["IPV6"]), "IPV6 is not a flag to give: an IPv6 dst_ip sets it"),
])
def test_bad_settings(overrides, message):
    with pytest.raises(_pktgen.PktgenError) as err:
        settings(**overrides)
    assert message in str(err.value)


def test_a_flag_can_be_cleared():
    assert settings(flags=["!SHARED"]).device_commands()[-1] == "flag !SHARED"


def target(**overrides):
    values = dict(name="eth0", up=True, carrier=True, mtu=1500, kind="veth")
    values.update(overrides)
    return _pktgen.Target(**values)


def test_target_checks():
    target().check(settings(size=1514))
    with pytest.raises(_pktgen.PktgenError, match="is larger than veth eth0 can send .MTU 1500"):
        target().check(settings(size=1515))
    with pytest.raises(_pktgen.PktgenError, match="^veth eth0 is down"):
        target(up=False).check(settings())
    with pytest.raises(_pktgen.PktgenError, match=r"^veth eth0 has no carrier \(its peer is down\)"):
        target(carrier=False).check(settings())


def test_targets_that_crash_6_1_are_refused():
    with pytest.raises(_pktgen.PktgenError, match=r"^refusing xmit_mode netif_receive into veth eth0: .* \(id 7\)"):
        target(generic_xdp=7).check(settings(xmit_mode="netif_receive"))
    with pytest.raises(_pktgen.PktgenError, match=r"^refusing to send out of veth eth0: its peer .* \(id 9\)"):
        target(peer_generic_xdp=9).check(settings())
    # The other direction of each is safe: the packets do not reach that program.
    target(generic_xdp=7).check(settings())
    target(peer_generic_xdp=9).check(settings(xmit_mode="netif_receive"))


def test_summary_adds_rates_and_takes_the_longest_thread():
    threads = [dict(sent=10, seconds=1.5, pps=7, mbps=3, errors=0),
               dict(sent=20, seconds=2.0, pps=10, mbps=4, errors=1)]
    assert _pktgen.summary(threads) == {"total": 30, "seconds": 2.0, "pps": 17, "mbps": 7, "errors": 1}
    assert _pktgen.summary([])["total"] == 0


class FakeProc(_pktgen.Proc):
    """/proc/net/pktgen as a dict: device files answer `results` (else Idle); `refuse` names commands that
    fail, `stuck` threads that keep their devices."""

    def __init__(self, cpus=(0, 1), results=None, refuse=(), stuck=(), devices=None):
        super().__init__("/nonexistent")
        self.cpus = cpus
        self.results = results or {}
        self.refuse = refuse
        self.stuck = stuck
        self.devices = devices or {cpu: [] for cpu in cpus}
        self.written = []

    def threads(self):
        return {cpu: list(devices) for cpu, devices in self.devices.items()}

    def read(self, name):
        return self.results.get(name, "Result: Idle\n")

    def write(self, name, command):
        self.written.append((name, command))
        if command in self.refuse:
            raise OSError(22, "Invalid argument")
        if command.startswith("add_device "):
            self.devices[int(name[len("kpktgend_"):])].append(command.split()[1])
        elif command == "rem_device_all":
            if int(name[len("kpktgend_"):]) in self.stuck:
                raise OSError(16, "Device or resource busy")
            self.devices[int(name[len("kpktgend_"):])] = []
        elif command == "reset":
            self.devices = {cpu: [] for cpu in self.cpus}

    def command(self, name, command):
        self.write(name, command)


def execute(proc, **overrides):
    result = {"module_loaded": False}
    return _pktgen.execute(_pktgen.Run(settings(cpus=[0, 1], **overrides), proc), result), result


def test_a_failure_after_devices_were_added_is_a_change_with_the_partial_results():
    # Thread 0 ran, thread 1 did not: collect() fails, the devices still go, and what 0 sent is reported.
    proc = FakeProc(results={"eth0@0": ISSUE})
    with pytest.raises(_pktgen.RunFailed, match="pktgen did not run eth0@1 on CPU 1") as failed:
        execute(proc)
    assert [t["device"] for t in failed.value.result["threads"]] == ["eth0@0"]
    assert failed.value.result["total"] == 59622913
    assert proc.devices == {0: [], 1: []}
    # A setting pktgen refuses on the second device: the first device was added, so this is a change too.
    proc = FakeProc(refuse=("count 1000",))
    with pytest.raises(_pktgen.RunFailed, match="Invalid argument"):
        execute(proc)
    assert ("kpktgend_0", "add_device eth0@0") in proc.written and proc.devices == {0: [], 1: []}


def test_devices_that_cannot_be_removed_are_a_change_with_the_results():
    proc = FakeProc(results={"eth0@0": ISSUE, "eth0@1": ISSUE}, stuck=(1,))
    with pytest.raises(_pktgen.RunFailed, match=r"^pktgen ran, but its devices could not be removed: kpktgend_1") \
            as failed:
        execute(proc)
    assert failed.value.result["total"] == 2 * 59622913 and len(failed.value.result["threads"]) == 2


def test_a_failure_before_pktgen_was_touched_is_no_change():
    # Another run's devices, without force: refused before anything is written; the error itself.
    proc = FakeProc(devices={0: ["eth9@0"], 1: []})
    with pytest.raises(_pktgen.PktgenError, match="already has devices .*kpktgend_0: eth9@0") as failed:
        execute(proc)
    assert not isinstance(failed.value, _pktgen.RunFailed) and proc.written == []
    # The same after pktgen was loaded by this run is a change.
    with pytest.raises(_pktgen.RunFailed, match="already has devices"):
        _pktgen.execute(_pktgen.Run(settings(cpus=[0, 1]), FakeProc(devices={0: ["eth9@0"], 1: []})),
                        {"module_loaded": True})
