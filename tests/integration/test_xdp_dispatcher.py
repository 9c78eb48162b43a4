"""Named XDP attachments: several programs on one interface through libxdp's dispatcher, beside xdp-loader's.

The witness is xdp-tools' xdp-loader (another libxdp user): it loads a program
of its own next to ours, and its `status` lists the dispatcher's programs in
run order, which the facts must agree with. Frames are counted where they
arrive: by each program's own counter map and by the receiver's IP stack.
Where the kernel cannot run the dispatcher (this development machine's: no
freplace programs), each of these tests asserts the refusal of its own first
named attachment (the task fails saying why, nothing changed: conftest's
watch, kernel_features.Watch) and ends there; make test-vm runs them on
Debian 12's kernel, where the dispatcher works.
"""

import os
import sys
import threading

import pytest

from conftest import assert_rhythm, compile_bpf, BPF_DIR, ROOT, sh
import kernel_features
from kernel_features import xdp_loader, xdp_tools_object
from test_tc_order import old_collection, run_old
from test_xdp_program import pins
from ansible_collections.ebpf.xdp.plugins.module_utils import _facts
from ansible_collections.ebpf.xdp.plugins.module_utils.bpf import compile as _compile, libbpf as _bpf
from ansible_collections.ebpf.xdp.plugins.module_utils.host import netns as _netns
from ansible_collections.ebpf.xdp.plugins.module_utils.traffic import frames as _frames

UDP = 17
# The last commit before named XDP attachments.
BEFORE_XDP_NAMES = "09f31e2"
XDP_DROP, XDP_PASS = 1, 2


@pytest.fixture
def loader_cleanup(pair):
    """xdp-loader unloads everything libxdp attached on the receiver (its pins below /sys/fs/bpf/xdp go with it;
    deleting the namespace would leave them)."""
    yield
    sh(*xdp_loader(pair.rx, "unload", "--all", "eth0"), check=False)


def component(pair, drop_obj, name, priority, action=XDP_PASS, **extra):
    return dict(interface="eth0", netns=pair.rx, object=drop_obj, name=name, priority=priority, mode="generic",
                constants={"xdp_action": action}, **extra)


def udp_counted(result):
    with _bpf.Map.from_pin(result["maps"]["proto_count"]) as counters:
        return (_facts.read_counters(counters) or {}).get(UDP, 0)


def chain(run, pair):
    """(name or attachment, priority, owner) of the dispatcher's programs in run order, from the facts; and the
    same from xdp-loader status (name, priority), which must agree."""
    facts = run("xdp_facts", dict(netns=pair.rx, interfaces=["eth0"]))
    assert not facts.get("failed") and not facts.get("warnings"), facts
    entry = facts["ansible_facts"]["xdp"]["interfaces"]["eth0"]
    out = sh(*xdp_loader(pair.rx, "status", "eth0")).stdout.splitlines()
    listed = [(f[2], int(f[1])) for f in (line.split() for line in out if line.lstrip().startswith("=>"))]
    programs = entry["xdp_chain"] or []
    assert [(p["name"], p["priority"]) for p in programs] == listed, (programs, out)
    return [(p["attachment"] or p["name"], p["priority"], p["owner"], p["id"]) for p in programs]


class Paced(threading.Thread):
    """count UDP frames from the sender at a paced rate (every one delivered), in a thread, while a task runs."""

    def __init__(self, pair, count=6000, rate=600):
        super().__init__(name="paced")
        self.pair, self.count, self.rate = pair, count, rate
        self.sent, self.error = {}, None

    def run(self):
        try:
            with _netns.netns(self.pair.tx):
                frame = _frames.build_frame("udp", self.pair.tx_mac, self.pair.rx_mac, self.pair.tx_ip,
                                            self.pair.rx_ip)
                self.sent, _seconds = _frames.send("eth0", {"udp": frame}, self.count, rate=self.rate)
        except Exception as exc:  # pylint: disable=broad-except  # re-raised by finish()
            self.error = exc

    def finish(self):
        self.join()
        if self.error:
            raise self.error
        assert self.sent == {"udp": self.count}, self.sent
        return self.count


def upgraded_under_traffic(run, pair, args, others, rhythm=True):
    """An upgrade (its four-step rhythm, or one run) while frames flow; every frame reaches the receiver's stack
    and every other program of ours (others: their results) counts each once. The upgraded one's result."""
    counts = [udp_counted(other) for other in others]
    arrived = pair.ip_in_receives()
    paced = Paced(pair)
    paced.start()
    try:
        result = assert_rhythm(run, "xdp_program", args)[0] if rhythm else run("xdp_program", args)
        assert result["changed"] and not result.get("failed"), result
    finally:
        sent = paced.finish()
    assert pair.ip_in_receives() - arrived == sent
    assert [udp_counted(other) - before for other, before in zip(others, counts)] == [sent] * len(others)
    return result


def burst(pair, run, count=100):
    before = pair.ip_in_receives()
    pair.burst(run, count=count, protocols=("udp",))
    return pair.ip_in_receives() - before


@pytest.fixture
def release_obj(tmp_path):
    """xdp_drop_count with one more load-time constant in its code path: another program, the same maps."""
    with open(os.path.join(BPF_DIR, "xdp_drop_count.bpf.c")) as f:
        text = f.read().replace("\treturn xdp_action;", "\tif (release == 0)\n\t\treturn XDP_ABORTED;\n\treturn xdp_action;")
    text = text.replace("const volatile __u32 xdp_action = XDP_DROP;",
                        "const volatile __u32 xdp_action = XDP_DROP;\nconst volatile __u32 release = 2;")
    assert "release == 0" in text and "release = 2" in text
    src = tmp_path / "xdp_drop_count.bpf.c"
    src.write_text(text)
    return compile_bpf(src, tmp_path / "release2.o", [os.path.join(BPF_DIR, "include")])


@pytest.mark.kernel("xdp_dispatcher")
def test_two_of_ours_beside_xdp_loaders_program(run_distro, pair, drop_obj, release_obj, loader_cleanup):
    """A program loaded by xdp-loader and two of ours share eth0 in the declared order; each of ours is upgraded
    (the others keep their ids and count exactly), re-ordered by priority, and removed, theirs staying."""
    run = run_distro
    sh(*xdp_loader(pair.rx, "load", "-m", "skb", "-P", "30", "eth0", xdp_tools_object("xdpfilt_alw_all")))
    first = assert_rhythm(run, "xdp_program", component(pair, drop_obj, "first", 10))[0]
    second = assert_rhythm(run, "xdp_program", component(pair, drop_obj, "second", 20))[0]
    assert first["attach"] == second["attach"] == "dispatcher" and second["attachment"] == "second", second
    assert second["priority"] == 20 and second["chain_call_actions"] == ["pass"], second
    now = chain(run, pair)
    assert [c[:3] for c in now] == [("first", 10, "ebpf.xdp"), ("second", 20, "ebpf.xdp"),
                                    ("xdpfilt_alw_all", 30, "unmanaged")], now
    theirs = now[2][3]
    # Every frame passes through the three of them to the receiver's stack, counted once by each of ours.
    assert burst(pair, run) == 100
    assert udp_counted(first) == udp_counted(second) == 100

    # Each of ours upgraded (another program: one more load-time constant in its code) while frames flow; the
    # other one and theirs keep running with their ids, and every frame arrives, counted once by the other.
    upgraded = upgraded_under_traffic(run, pair, component(pair, release_obj, "second", 20), [first])
    assert upgraded["id"] != second["id"] and any("both ran" in w for w in upgraded.get("warnings", [])), upgraded
    assert [c[3] for c in chain(run, pair)] == [first["id"], upgraded["id"], theirs]
    renewed = upgraded_under_traffic(run, pair, component(pair, release_obj, "first", 10), [upgraded], rhythm=False)
    assert [c[3] for c in chain(run, pair)] == [renewed["id"], upgraded["id"], theirs]
    # Their maps stayed (pinned in their attachments): both count the next frames from where they were.
    counts = [udp_counted(renewed), udp_counted(upgraded)]
    assert burst(pair, run) == 100
    assert [udp_counted(renewed), udp_counted(upgraded)] == [counts[0] + 100, counts[1] + 100]

    # A lower priority runs the second first.
    moved = assert_rhythm(run, "xdp_program", component(pair, release_obj, "second", 5))[0]
    assert [c[:2] for c in chain(run, pair)] == [("second", 5), ("first", 10), ("xdpfilt_alw_all", 30)]

    # Ours removed one by one; theirs stays, with its id, and frames still arrive.
    assert_rhythm(run, "xdp_program", dict(component(pair, release_obj, "first", 10), state="absent"))
    assert [c[3] for c in chain(run, pair)] == [moved["id"], theirs]
    gone = run("xdp_program", dict(component(pair, release_obj, "second", 5), state="absent"))
    assert gone["changed"] and [c[3] for c in chain(run, pair)] == [theirs], gone
    assert burst(pair, run) == 100


@pytest.mark.kernel("xdp_dispatcher")
def test_priority_decides_who_sees_the_frames(run_distro, pair, drop_obj, loader_cleanup):
    """A filter that drops and a counter: the counter sees the frames only when it runs before the filter."""
    run = run_distro
    # (Attaching has its rhythm asserted in the test above; here the re-ordering has.)
    filt = run("xdp_program", component(pair, drop_obj, "filter", 10, action=XDP_DROP))
    counter = run("xdp_program", component(pair, drop_obj, "counter", 20))
    assert filt["changed"] and counter["changed"] and not counter.get("failed"), (filt, counter)
    assert burst(pair, run) == 0
    assert udp_counted(filt) == 100 and udp_counted(counter) == 0
    assert_rhythm(run, "xdp_program", component(pair, drop_obj, "counter", 5))
    assert burst(pair, run) == 0
    assert udp_counted(counter) == 100 and udp_counted(filt) == 200


@pytest.mark.kernel("xdp_dispatcher")
def test_bad_input_changes_nothing(run_distro, pair, drop_obj, tmp_path, pin_root, loader_cleanup):
    """An 11th program, a dispatcher in the other mode, an object without BTF, a program attached alone: each a
    clear error, in check mode and for real, with nothing changed."""
    run = run_distro

    def refused(args, words):
        status = sh(*xdp_loader(pair.rx, "status", "eth0")).stdout
        for check in (True, False):
            res = run("xdp_program", args, check=check)
            assert res.get("failed") and words in res["msg"], (check, res)
        assert sh(*xdp_loader(pair.rx, "status", "eth0")).stdout == status
        assert not os.path.exists(os.path.join(pin_root, pair.rx, "eth0", "xdp@" + args["name"])), "pins left"

    # A program attached alone: the unnamed attachment (one program per interface).
    alone = run("xdp_program", dict(interface="eth0", netns=pair.rx, object=drop_obj, mode="generic",
                                    constants={"xdp_action": XDP_PASS}))
    assert alone["changed"], alone
    refused(component(pair, drop_obj, "late", 10), "attached on its own, not through libxdp's dispatcher")
    run("xdp_program", dict(interface="eth0", netns=pair.rx, object=drop_obj, state="absent"))

    # An object without BTF (compiled without -g; libbpf needs BTF for maps, so this one has none).
    src = tmp_path / "plain.bpf.c"
    src.write_text('#include <linux/bpf.h>\n__attribute__((section("xdp"), used)) int plain(struct xdp_md *ctx)\n'
                   '{\n\treturn XDP_PASS;\n}\nchar _license[] __attribute__((section("license"), used)) = "GPL";\n')
    plain = tmp_path / "plain.o"
    sh(*[arg for arg in _compile.compile_argv("clang", str(src), str(plain), []) if arg != "-g"])
    refused(dict(component(pair, str(plain), "plain", 10), constants={}), "has no BTF")

    # Ten programs of xdp-loader's fill the dispatcher, in generic mode.
    sh(*xdp_loader(pair.rx, "load", "-m", "skb", "eth0", *[xdp_tools_object(name) for name in (
        "xdpfilt_alw_all", "xdpfilt_alw_eth", "xdpfilt_alw_ip", "xdpfilt_alw_tcp", "xdpfilt_alw_udp",
        "xdpfilt_dny_all", "xdpfilt_dny_eth", "xdpfilt_dny_ip", "xdpfilt_dny_tcp", "xdpfilt_dny_udp")]))
    refused(dict(component(pair, drop_obj, "native", 10), mode="native"), "runs in generic mode")
    refused(component(pair, drop_obj, "eleventh", 10), "already runs 10 programs")
    refused(dict(component(pair, drop_obj, "bad", 10), priority=-1), "priority must be between")


def test_priority_without_a_name_is_refused(run_distro, pair, drop_obj):
    res = run_distro("xdp_program", dict(interface="eth0", netns=pair.rx, object=drop_obj, priority=10))
    assert res.get("failed") and "only a named attachment (name:) runs through libxdp's dispatcher" in res["msg"]


@pytest.mark.quiet  # compares test-run times: beside another worker in the VM, its sanity check failed on noise
@pytest.mark.kernel("xdp_dispatcher")
def test_the_dispatcher_cost_benchmark_smoke():
    """tests/benchmarks/dispatcher.py --smoke (its full run's figures are for the closing note): a dispatcher with
    1 and 3 programs test-run beside the program alone, the figures sane, libxdp's pins gone after."""
    pins_before = sorted(os.listdir("/sys/fs/bpf/xdp")) if os.path.isdir("/sys/fs/bpf/xdp") else []
    res = sh(sys.executable, os.path.join(ROOT, "tests", "benchmarks", "dispatcher.py"), "--smoke")
    if "libxdp's dispatcher cannot work here: this kernel refuses freplace (BPF_PROG_TYPE_EXT)" in res.stdout:
        kernel_features.asserted("xdp_dispatcher", "dispatcher.py refused: %r" % res.stdout.strip()[:120])
    assert "figures sane" in res.stdout, res.stdout
    assert (sorted(os.listdir("/sys/fs/bpf/xdp")) if os.path.isdir("/sys/fs/bpf/xdp") else []) == pins_before


def test_an_xdp_attachment_made_before_names_keeps_working(run_distro, pair, drop_obj, release_obj, pin_root,
                                                           tmp_path):
    """An XDP attachment made by the collection before names (its code from git; in a copy without history, by
    this code, whose unnamed attachment is unchanged): a task without a name is no change, upgrades it in place,
    with its pins and maps, and removes it."""
    old_path = old_collection(tmp_path, BEFORE_XDP_NAMES)
    args = dict(interface="eth0", netns=pair.rx, object=drop_obj, mode="generic", constants={"xdp_action": XDP_PASS})
    if old_path:
        made = run_old(old_path, dict(args, pin_root=pin_root), "xdp_program")
    else:
        made = run_distro("xdp_program", args)
    assert made["changed"] and not made.get("failed"), made
    assert made["pin_dir"] == os.path.join(pin_root, pair.rx, "eth0", "xdp")
    before = pins(pin_root)
    for check in (True, False):
        same = run_distro("xdp_program", args, check=check)
        assert same["changed"] is False and same["id"] == made["id"] and "attachment" not in same, same
    assert pins(pin_root) == before
    up = assert_rhythm(run_distro, "xdp_program", dict(args, object=release_obj))[0]
    assert up["id"] != made["id"] and up["pin_dir"] == made["pin_dir"] and up["revision"]["number"] == 2, up
    assert up["maps"] == made["maps"] and up["attach"] == "link", up
    assert_rhythm(run_distro, "xdp_program", dict(args, state="absent"))
    assert pins(pin_root) == [] and pair.xdp_prog_id() is None
