"""Maps of a program this collection did not write: xdp-tools' own xdp-filter object (Debian's libxdp1 ships it),
attached with ebpf.xdp.xdp_program, its rule set with ebpf.xdp.bpf_map_entry, and its statistics read by
ebpf.xdp.xdp_facts through their BTF, against bpftool's dump of the same map through the same BTF."""

import json

from conftest import sh
from kernel_features import xdp_tools_object

SIZE = 90
XDP_DROP, XDP_PASS = 1, 2
# xdp-filter's rule flags (xdp-filter/common_kern_user.h): a destination port, of UDP.
MAP_FLAG_DST, MAP_FLAG_UDP = 1 << 1, 1 << 3
PORT = 53


def merged_pairs(pairs):
    """json.loads' object hook: bpftool names every anonymous member "" (xdp_stats_record has two anonymous
    unions), so keys that repeat are merged instead of the last one winning."""
    out = {}
    for key, value in pairs:
        if key in out and isinstance(out[key], dict) and isinstance(value, dict):
            out[key] = dict(out[key], **value)
        else:
            out[key] = value
    return out


def flatten(value):
    """bpftool's formatted value with its anonymous members ("") lifted into their parent, as C names them."""
    if not isinstance(value, dict):
        return value
    out = {}
    for key, inner in value.items():
        out.update(flatten(inner) if key == "" else {key: flatten(inner)})
    return out


def bpftool_stats(map_id):
    """xdp_stats_map per XDP action as bpftool decodes it, each field summed over CPUs."""
    dump = json.loads(sh("bpftool", "-j", "map", "dump", "id", str(map_id)).stdout, object_pairs_hook=merged_pairs)
    out = {}
    for item in dump:
        per_cpu = [flatten(cpu["value"]) for cpu in item["formatted"]["values"]]
        out[item["formatted"]["key"]] = {field: sum(value[field] for value in per_cpu) for field in per_cpu[0]}
    return out


def send(run, pair, dst_port, count):
    sent = run("xdp_trafficgen", dict(interface="eth0", netns=pair.tx, src_ip=pair.tx_ip, dst_ip=pair.rx_ip,
                                      dst_mac=pair.rx_mac, protocols=["udp"], count=count, size=SIZE,
                                      dst_port=dst_port, engine="socket"))
    assert sent["sent"] == {"udp": count}, sent


def test_xdp_filters_statistics_decoded_as_bpftool_decodes_them(run, pair):
    """xdpfilt_alw_udp (policy allow: what no rule denies passes) on the receiver; port 53 denied through its
    filter_ports map (keyed by the port in network byte order); 30 frames to port 53 are dropped, 20 to port 54
    pass: xdp_stats_map (struct xdp_stats_record per XDP action, per CPU) in the facts equals what the program
    counted as bpftool reads it, and the frames sent."""
    obj = xdp_tools_object("xdpfilt_alw_udp")
    attached = run("xdp_program", dict(interface="eth0", netns=pair.rx, object=obj, program="xdpfilt_alw_udp",
                                       mode="generic"))
    assert attached["changed"] and not attached.get("failed"), attached
    key = int.from_bytes(PORT.to_bytes(2, "big"), "little")  # 53 in network byte order: 13568
    rule = run("bpf_map_entry", dict(path=attached["maps"]["filter_ports"],
                                     entries=[{"key": key, "value": MAP_FLAG_DST | MAP_FLAG_UDP}]))
    assert rule["changed"] and not rule.get("failed"), rule
    send(run, pair, PORT, 30)
    send(run, pair, PORT + 1, 20)

    # filter_ports has an entry per port: all 65536 read, where port 53 in network byte order is.
    for _attempt in range(3):
        facts = run("xdp_facts", dict(netns=pair.rx, maps=["xdp_stats_map", "filter_ports"], per_cpu=True,
                                      max_entries=65536))
        assert not facts.get("failed") and not facts.get("warnings"), facts
        prog = facts["ansible_facts"]["xdp"]["interfaces"]["eth0"]["xdp"]
        stats = next(item for item in prog["maps"] if item["name"] == "xdp_stats_map")
        decoded = {entry["key"]: entry["value"] for entry in stats["entries"]}
        witness = {action: value for action, value in bpftool_stats(stats["id"]).items() if value["packets"]}
        if witness == decoded:
            break  # else a frame of the kernel's own (a neighbour solicitation) came in between: read again
    assert witness == decoded, (witness, decoded)
    assert prog["name"] == "xdpfilt_alw_udp" and prog["owner"] == "ebpf.xdp", prog
    assert (stats["btf"], stats["value_type"], stats["truncated"]) == (True, "struct xdp_stats_record", False)
    # The two anonymous unions of struct xdp_stats_record flattened, both names of each shown.
    assert decoded[XDP_DROP] == {"packets": 30, "rx_packets": 30, "bytes": 30 * SIZE, "rx_bytes": 30 * SIZE}, decoded
    # (XDP_PASS also counts the kernel's own frames, which no rule denies.)
    assert decoded[XDP_PASS]["packets"] >= 20 and decoded[XDP_PASS]["bytes"] >= 20 * SIZE, decoded

    # The port's hit counter (value = flags | hits << 6, per CPU): the frames its rule dropped.
    ports = next(item for item in prog["maps"] if item["name"] == "filter_ports")
    [entry] = ports["entries"]
    assert entry["key"] == key and (ports["entries_read"], ports["truncated"]) == (65536, False), ports
    assert sum(value >> 6 for value in entry["values"]) == 30, entry
    assert all(value & 0x3f == MAP_FLAG_DST | MAP_FLAG_UDP for value in entry["values"]), entry

    # With the default limit, only the first 1024 ports are read, and the facts say so.
    bounded = run("xdp_facts", dict(netns=pair.rx, maps=["filter_ports"]))
    ports = next(item for item in bounded["ansible_facts"]["xdp"]["interfaces"]["eth0"]["xdp"]["maps"]
                 if item["name"] == "filter_ports")
    assert (ports["entries"], ports["entries_read"], ports["truncated"], ports["entries_total"]) == (
        [], 1024, True, 65536), ports
