"""Every map read through its BTF: ebpf.xdp.xdp_facts decodes a program's maps (struct values and keys, enums,
unions, bitfields, text) after real traffic, bounded by its options; what ebpf.xdp.bpf_map_entry writes,
xdp_facts reads back the same, and writes back unchanged."""

import json
import os
import subprocess

import pytest

from conftest import SYSTEM_PYTHON, compile_bpf, module_path, sh

PROGRAM = r"""
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/in.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

enum frame_kind { FRAME_UDP = 0, FRAME_TCP = 1, FRAME_OTHER = 2 };

struct counts {
    __u64 packets;
    __u64 bytes;
};

struct flow {
    __u32 saddr;
    __u16 sport;
    __u16 dport;
    __u8 proto;
    __u8 pad[3];
};

struct config {
    char label[16];
    enum { MODE_COUNT = 1, MODE_SAMPLE = 2 } mode;
    union {
        __u32 limit;
        __u8 limit_bytes[4];
    };
    __u32 shift:4, weight:12, spare:16;
};

struct {
    __uint(type, BPF_MAP_TYPE_PERCPU_HASH);
    __type(key, enum frame_kind);
    __type(value, struct counts);
    __uint(max_entries, 4);
} kinds SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __type(key, struct flow);
    __type(value, struct counts);
    __uint(max_entries, 4096);
} flows SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __type(key, __u32);
    __type(value, struct config);
    __uint(max_entries, 8);
} config SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
    __type(key, __u32);
    __type(value, __u64);
    __uint(max_entries, 4);
} totals SEC(".maps");

static void add(struct counts *c, __u64 len)
{
    __sync_fetch_and_add(&c->packets, 1);
    __sync_fetch_and_add(&c->bytes, len);
}

SEC("xdp")
int xdp_btf_count(struct xdp_md *ctx)
{
    void *data = (void *)(long)ctx->data, *data_end = (void *)(long)ctx->data_end;
    __u64 len = data_end - data;
    enum frame_kind kind = FRAME_OTHER;
    struct ethhdr *eth = data;
    struct iphdr *ip = (void *)(eth + 1);
    struct udphdr *udp = (void *)(ip + 1);
    struct counts zero = {}, *c;
    __u32 index = 0;
    __u64 *total;

    struct config *cfg = bpf_map_lookup_elem(&config, &index);

    if (cfg && cfg->mode == 99)
        return XDP_DROP;
    total = bpf_map_lookup_elem(&totals, &index);
    if (total)
        *total += 1;
    if ((void *)(udp + 1) <= data_end && eth->h_proto == bpf_htons(ETH_P_IP) && ip->protocol == IPPROTO_TCP)
        kind = FRAME_TCP;
    if ((void *)(udp + 1) <= data_end && eth->h_proto == bpf_htons(ETH_P_IP) && ip->ihl == 5
        && ip->protocol == IPPROTO_UDP) {
        struct flow key = { .saddr = ip->saddr, .sport = bpf_ntohs(udp->source), .dport = bpf_ntohs(udp->dest),
                            .proto = IPPROTO_UDP };
        kind = FRAME_UDP;
        c = bpf_map_lookup_elem(&flows, &key);
        if (!c) {
            bpf_map_update_elem(&flows, &key, &zero, BPF_NOEXIST);
            c = bpf_map_lookup_elem(&flows, &key);
        }
        if (c)
            add(c, len);
    }
    c = bpf_map_lookup_elem(&kinds, &kind);
    if (!c) {
        bpf_map_update_elem(&kinds, &kind, &zero, BPF_NOEXIST);
        c = bpf_map_lookup_elem(&kinds, &kind);
    }
    if (c) {
        c->packets += 1;
        c->bytes += len;
    }
    return XDP_PASS;
}

char _license[] SEC("license") = "GPL";
"""

SIZE = 100
PORTS = list(range(2000, 2010))


@pytest.fixture(scope="module")
def btf_obj(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("btfmaps")
    (tmp / "btf_count.bpf.c").write_text(PROGRAM)
    return compile_bpf(tmp / "btf_count.bpf.c", tmp / "btf_count.o")


@pytest.fixture
def counted(run, pair, btf_obj):
    """xdp_btf_count on the receiver, 50 UDP frames of 100 bytes from 10 source ports (5 each) and 20 TCP
    frames sent to it; the attach result."""
    attached = run("xdp_program", dict(interface="eth0", netns=pair.rx, object=btf_obj, program="xdp_btf_count"))
    assert attached["changed"] and not attached.get("failed"), attached
    for protocol, count in (("udp", 50), ("tcp", 20)):
        sent = run("xdp_trafficgen", dict(interface="eth0", netns=pair.tx, src_ip=pair.tx_ip, dst_ip=pair.rx_ip,
                                          dst_mac=pair.rx_mac, protocols=[protocol], count=count, size=SIZE,
                                          src_port=PORTS[0], src_port_max=PORTS[-1], dst_port=53, engine="socket"))
        assert sent["sent"] == {protocol: count}, sent
    return attached


def decoded(facts, name):
    prog = facts["ansible_facts"]["xdp"]["interfaces"]["eth0"]["xdp"]
    return next(item for item in prog["maps"] if item["name"] == name)


def test_struct_counters_equal_the_frames_sent(run, pair, counted):
    facts = run("xdp_facts", dict(netns=pair.rx))
    assert not facts.get("failed") and not facts.get("warnings"), facts
    kinds = decoded(facts, "kinds")
    # An enum key by its enumerator's name; a per-CPU struct summed field by field over CPUs.
    # (The kernel's own frames, such as a neighbour solicitation, count as FRAME_OTHER.)
    by_kind = {entry["key"]: entry["value"] for entry in kinds["entries"]}
    assert by_kind["FRAME_UDP"] == {"packets": 50, "bytes": 50 * SIZE}, kinds
    assert by_kind["FRAME_TCP"] == {"packets": 20, "bytes": 20 * SIZE}, kinds
    assert [entry["key"] for entry in kinds["entries"]][:2] == ["FRAME_UDP", "FRAME_TCP"], "sorted by key"
    assert (kinds["btf"], kinds["key_type"], kinds["value_type"]) == (True, "enum frame_kind", "struct counts")
    assert (kinds["entries_read"], kinds["truncated"]) == (len(by_kind), False)
    assert kinds["entries_total"] == len(by_kind)
    counted_frames = sum(value["packets"] for value in by_kind.values())
    flows = decoded(facts, "flows")
    # A struct key as a dict; every source port of the range seen, the frames shared between them.
    keys = [entry["key"] for entry in flows["entries"]]
    assert sorted(key["sport"] for key in keys) == PORTS and {key["dport"] for key in keys} == {53}
    assert all(key["proto"] == 17 and key["pad"] == {"hex": "000000"} for key in keys), keys
    assert sum(entry["value"]["packets"] for entry in flows["entries"]) == 50
    assert sum(entry["value"]["bytes"] for entry in flows["entries"]) == 50 * SIZE
    # A map of 64-bit counters keeps its counters, and is decoded too.
    prog = facts["ansible_facts"]["xdp"]["interfaces"]["eth0"]["xdp"]
    assert prog["counters"]["totals"] == {"0": counted_frames}
    assert decoded(facts, "totals")["entries"] == [{"key": 0, "value": counted_frames}]
    # An array's all-zero entries are left out (nothing written to config yet); its size is its total.
    config = decoded(facts, "config")
    assert (config["entries"], config["entries_read"], config["entries_total"]) == ([], 8, 8)
    assert facts["ansible_facts"]["xdp"]["unmatched"] == {"maps": [], "programs": []}

    # Each CPU's copy on request, next to the sum.
    per_cpu = decoded(run("xdp_facts", dict(netns=pair.rx, maps=["kinds"], per_cpu=True)), "kinds")
    for entry in per_cpu["entries"]:
        assert sum(value["packets"] for value in entry["values"]) == entry["value"]["packets"], entry
        assert len(entry["values"]) == len(per_cpu["entries"][0]["values"]) >= 1


def test_options_choose_maps_and_programs_and_bound_the_entries(run, pair, counted):
    facts = run("xdp_facts", dict(netns=pair.rx, maps=["fl*", "no_such_map"], programs=["xdp_btf_*", "other"],
                                  max_entries=3))
    assert not facts.get("failed"), facts
    assert facts["ansible_facts"]["xdp"]["unmatched"] == {"maps": ["no_such_map"], "programs": ["other"]}
    assert sorted(facts["warnings"]) == ["maps: no_such_map matches no map", "programs: other matches no program"]
    flows = decoded(facts, "flows")
    # 10 flows, 3 read: what was left out is said, and the total of a hash not read to its end is unknown.
    assert (len(flows["entries"]), flows["entries_read"], flows["truncated"], flows["entries_total"]) == (
        3, 3, True, None)
    # Maps not chosen are listed as before, without entries; counters stay.
    assert "entries" not in decoded(facts, "kinds") and "entries" not in decoded(facts, "totals")
    prog = facts["ansible_facts"]["xdp"]["interfaces"]["eth0"]["xdp"]
    assert prog["counters"]["totals"]["0"] >= 70
    # No map decoded for a program no glob names; none at all with maps: [] (the facts of before).
    other = run("xdp_facts", dict(netns=pair.rx, programs=["other"]))
    assert all("entries" not in item for item in other["ansible_facts"]["xdp"]["interfaces"]["eth0"]["xdp"]["maps"])
    plain = run("xdp_facts", dict(netns=pair.rx, maps=[]))
    assert all("entries" not in item for item in plain["ansible_facts"]["xdp"]["interfaces"]["eth0"]["xdp"]["maps"])


@pytest.mark.parametrize("max_entries", [0, -5])
def test_an_entry_limit_that_is_not_positive_is_refused(run, pair, counted, max_entries):
    def host():
        """The receiver's program and maps, and the bytes of its config map."""
        prog = run("xdp_facts", dict(netns=pair.rx, maps=[]))["ansible_facts"]["xdp"]["interfaces"]["eth0"]["xdp"]
        return prog["id"], prog["maps"], sh("bpftool", "-j", "map", "dump", "pinned", counted["maps"]["config"]).stdout

    before = host()
    facts = run("xdp_facts", dict(netns=pair.rx, max_entries=max_entries))
    assert facts["failed"] and facts["msg"] == (
        "max_entries must be a positive number of entries to read from each map, not %d" % max_entries), facts
    assert "Traceback" not in json.dumps(facts)
    assert host() == before


def test_rates_of_every_number_of_a_decoded_value(run, pair, counted):
    facts = run("xdp_facts", dict(netns=pair.rx, maps=["kinds", "flows"], rate_interval=0.2))
    assert not facts.get("failed"), facts
    kinds = decoded(facts, "kinds")
    # Nothing is sent while the facts sample: every field's rate is 0, in the value's own shape.
    assert [entry["rates"] for entry in kinds["entries"]] == [{"packets": 0.0, "bytes": 0.0}] * len(kinds["entries"])
    assert [entry["rates"] for entry in decoded(facts, "flows")["entries"]] == [{"packets": 0.0, "bytes": 0.0}] * 10


CONFIG = [
    {"key": 0, "value": {"label": "edge-1", "mode": "MODE_SAMPLE", "limit": 1000, "shift": 3, "weight": 4095}},
    {"key": 5, "value": {"label": "", "mode": 7, "limit_bytes": [1, 2, 3, 4], "spare": 65535}},
]


def test_what_bpf_map_entry_writes_xdp_facts_reads_back_and_writes_back_unchanged(run, pair, btf_obj, counted):
    path = counted["maps"]["config"]
    written = run("bpf_map_entry", dict(path=path, entries=CONFIG))
    assert written["changed"] and not written.get("failed"), written
    facts = run("xdp_facts", dict(netns=pair.rx, maps=["config"]))
    entries = decoded(facts, "config")["entries"]
    # The union's members both show (the bytes they share); an enum value no enumerator has as a number.
    assert entries == [
        {"key": 0, "value": {"label": "edge-1", "mode": "MODE_SAMPLE", "limit": 1000,
                             "limit_bytes": {"hex": (1000).to_bytes(4, "little").hex()}, "shift": 3, "weight": 4095,
                             "spare": 0}},
        {"key": 5, "value": {"label": "", "mode": 7, "limit": int.from_bytes(bytes([1, 2, 3, 4]), "little"),
                             "limit_bytes": {"hex": "01020304"}, "shift": 0, "weight": 0, "spare": 65535}},
    ], entries
    assert entries == written["entries"]
    # The facts' entries are bpf_map_entry's notation: written back, they change nothing.
    again = run("bpf_map_entry", dict(path=path, entries=entries))
    assert again["changed"] is False and not again.get("failed"), again
    # bpftool decodes the same bytes through the same BTF (an anonymous union under the name "", where C and
    # these facts name its members directly; bitfields as hex strings).
    dump = json.loads(sh("bpftool", "-j", "map", "dump", "pinned", path).stdout)
    formatted = {item["formatted"]["key"]: item["formatted"]["value"] for item in dump}
    first, second = formatted[0], formatted[5]
    assert (first["label"], first["mode"], first[""]["limit"]) == ("edge-1", "MODE_SAMPLE", 1000), first
    assert (int(first["shift"], 16), int(first["weight"], 16)) == (3, 4095), first
    assert (second[""]["limit_bytes"], int(second["spare"], 16), second["mode"]) == ([1, 2, 3, 4], 65535, 7), second


def test_datapath_facts_before_decode_maps_with_the_same_options(run, pair, counted, btf_obj):
    entry = dict(interface="eth0", netns=pair.rx, object=btf_obj, program="xdp_btf_count")
    res = run("datapath", {"config": {"xdp": [entry]},
                           "facts_before": dict(netns=pair.rx, maps=["kinds"], max_entries=1, only_if_changing=False)})
    assert not res.get("failed") and not res["changed"], res
    prog = res["facts_before"]["interfaces"]["eth0"]["xdp"]
    kinds = next(item for item in prog["maps"] if item["name"] == "kinds")
    assert (len(kinds["entries"]), kinds["truncated"]) == (1, True) and kinds["entries"][0]["key"] in (
        "FRAME_UDP", "FRAME_TCP", "FRAME_OTHER")
    assert all("entries" not in item for item in prog["maps"] if item["name"] != "kinds")
    bad = run("datapath", {"config": {"xdp": [entry]},
                           "facts_before": dict(netns=pair.rx, max_entries=0, only_if_changing=False)})
    assert bad["failed"] and "facts_before.max_entries must be a positive number" in bad["msg"], bad


def test_a_map_without_btf_reads_by_its_sizes(run, pair, tmp_path):
    source = tmp_path / "nobtf.bpf.c"
    source.write_text(r"""
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
struct { __uint(type, BPF_MAP_TYPE_HASH); __uint(key_size, 6); __uint(value_size, 12); __uint(max_entries, 4); }
    raw SEC(".maps");
SEC("xdp")
int xdp_raw(struct xdp_md *ctx)
{
    char key[6] = {1, 2, 3, 4, 5, 6}, value[12] = {7};
    bpf_map_update_elem(&raw, key, value, BPF_ANY);
    return XDP_PASS;
}
char _license[] SEC("license") = "GPL";
""")
    obj = compile_bpf(source, tmp_path / "nobtf.o")
    attached = run("xdp_program", dict(interface="eth0", netns=pair.rx, object=obj, program="xdp_raw"))
    assert not attached.get("failed"), attached
    pair.burst(run, count=1, protocols=["udp"])
    item = decoded(run("xdp_facts", dict(netns=pair.rx)), "raw")
    assert (item["btf"], item["key_type"], item["value_type"]) == (False, "a 6-byte key", "a 12-byte value")
    assert item["entries"] == [{"key": {"hex": "010203040506"}, "value": {"hex": "07" + "00" * 11}}], item
    assert os.path.exists(attached["maps"]["raw"])


def test_a_map_whose_btf_the_kernel_refuses_reads_by_its_sizes(run, pair, tmp_path):
    """Malformed BTF: a value nested 33 structs deep, past the kernel's limit (the kernel refuses the object's
    BTF with E2BIG, and libbpf loads the object without it, as bpftool does). The program attaches, and the facts
    read its map by its sizes (btf: false), without a failure or a traceback, and change nothing."""
    nested = "".join("struct l%d { struct l%d in; };\n" % (level, level - 1) for level in range(1, 33))
    source = tmp_path / "deep.bpf.c"
    source.write_text(r"""
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
struct l0 { __u64 packets; };
%s
struct { __uint(type, BPF_MAP_TYPE_ARRAY); __type(key, __u32); __type(value, struct l32); __uint(max_entries, 1); }
    deep SEC(".maps");
SEC("xdp")
int xdp_deep(struct xdp_md *ctx)
{
    __u32 key = 0;
    struct l32 *value = bpf_map_lookup_elem(&deep, &key);
    if (value)
        __sync_fetch_and_add((__u64 *)value, 1);
    return XDP_PASS;
}
char _license[] SEC("license") = "GPL";
""" % nested)
    obj = compile_bpf(source, tmp_path / "deep.o")
    attached = run("xdp_program", dict(interface="eth0", netns=pair.rx, object=obj, program="xdp_deep"))
    assert not attached.get("failed"), attached
    pair.burst(run, count=3, protocols=["udp"])
    before = sh("bpftool", "-j", "map", "dump", "pinned", attached["maps"]["deep"]).stdout
    facts = run("xdp_facts", dict(netns=pair.rx))
    assert not facts.get("failed") and "Traceback" not in json.dumps(facts), facts
    item = decoded(facts, "deep")
    assert (item["btf"], item["key_type"], item["value_type"]) == (False, "a 4-byte key", "a 8-byte value"), item
    # Every frame counted (3 sent; a frame of the kernel's own may come too), as bpftool reads the bytes.
    [raw] = json.loads(before)
    assert item["entries"] == [{"key": 0, "value": int.from_bytes(bytes(int(b, 16) for b in raw["value"]), "little")}]
    assert item["entries"][0]["value"] >= 3, item
    assert sh("bpftool", "-j", "map", "dump", "pinned", attached["maps"]["deep"]).stdout == before


def test_a_reader_that_wants_no_counter_maps_decoded_reads_them_once(run, pair, counted):
    """The exporter's reading (counter_maps False): a map of 64-bit counters (totals) keeps its counters and is
    not decoded a second time; the other maps are decoded as xdp_facts decodes them."""
    script = ("import json, sys\n"
              "from ansible_collections.ebpf.xdp.plugins.module_utils import _facts\n"
              "reading = _facts.MapReading()\n"
              "reading.counter_maps = False\n"
              "print(json.dumps(_facts.snapshot(sys.argv[1], sys.argv[2], [], reading=reading)))\n")
    proc = subprocess.run(["nsenter", "--net=/run/netns/%s" % pair.rx, SYSTEM_PYTHON, "-c", script, run.pin_root,
                           pair.rx], capture_output=True, text=True, check=False,
                          env=dict(os.environ, PYTHONPATH=module_path()))
    assert proc.returncode == 0, proc.stderr
    prog = json.loads(proc.stdout)["interfaces"]["eth0"]["xdp"]
    maps = {item["name"]: item for item in prog["maps"]}
    assert prog["counters"]["totals"]["0"] >= 70 and "entries" not in maps["totals"], prog
    facts = run("xdp_facts", dict(netns=pair.rx, maps=["kinds", "flows"]))
    assert [maps[name]["entries"] for name in ("kinds", "flows")] == [
        decoded(facts, name)["entries"] for name in ("kinds", "flows")]
