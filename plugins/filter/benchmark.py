# -*- coding: utf-8 -*-
# Copyright (c) ebpf.xdp contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The benchmark's matrix as data (role ebpf.xdp.benchmark runs it).

Every traffic case is one dict that the role's generic run executes: the
data path of each place it uses (an ebpf.xdp.datapath config, converged
with state overridden), shell lines before and after (a bridge, GRO),
netfilter baselines, one generator run, and where the delivered frames are
counted. Keeping the
cases here, and not as tasks, lets every family share one run and one
teardown, and lets a unit test read the whole matrix.
"""

from __future__ import annotations

import re
import shlex

from ansible.errors import AnsibleFilterError

FAMILIES = ("drop", "forward", "multicast", "generators", "cost", "control")
# The frames every traffic case sends: a multicast group address and its MAC (01:00:5e + the low 23 bits).
# One name per assignment: ansible-doc, reading this file for each filter, warns on a tuple target.
GROUP_IP = "239.1.1.1"
GROUP_MAC = "01:00:5e:01:01:01"
BENCH_BRIDGE = "brbench"
SHARED_MAPS = "bench"
PASS = {"xdp_action": 2}
# A veth takes the frames its peer redirects (the XDP generator does) only while it has a native XDP program or
# GRO on; a generic program is neither, so its port gets GRO for the case.
GRO_ON = "ethtool -K %s gro on"
GRO_OFF = "ethtool -K %s gro off"
# The line of the role's snapshot (tasks/snapshot.yml) for the table iptables' raw rules live in.
IPTABLES_RAW_TABLE = "nftables table ip raw"
# benchmark_generator: what sends the drop, forward and multicast families' frames.
GENERATORS = ("auto", "xdp_trafficgen", "trafgen")
# A generator engine as the report names it (the generators family's cases are named so).
ENGINE_NAMES = {"xdp": "xdp_trafficgen, xdp", "socket": "xdp_trafficgen, socket", "pktgen": "pktgen",
                "trafgen": "trafgen (netsniff-ng)"}


def _obj(params, name):
    return "%s/%s.o" % (params["objects_dir"], name)


def place(host, netns=None):
    """Where a part of a case runs: an inventory host and, optionally, a network namespace on it."""
    return dict(host=host, netns=netns or None)


def place_key(where):
    return where["host"] if not where.get("netns") else "%s/%s" % (where["host"], where["netns"])


def _at(params, family, role):
    p = params[family]
    return place(p[role], p.get(role + "_netns"))


def _mac(params, where, interface):
    try:
        return params["macs"][place_key(where)][interface]
    except KeyError:
        raise AnsibleFilterError("benchmark: no MAC address read for %s on %s" % (interface, place_key(where)))


def _xdp(params, interface, name, mode="native", constants=None, **extra):
    entry = dict(interface=interface, object=_obj(params, name), program=name, mode=mode, **extra)
    if constants:
        entry["constants"] = constants
    return entry


def _counter(params, interface):
    """xdp_drop_count, dropping: the receiving end that counts what was delivered."""
    return _xdp(params, interface, "xdp_drop_count")


def _count_and_pass(params, interface):
    return _xdp(params, interface, "xdp_drop_count", constants=PASS)


def _tx_port(params, where, interface, target):
    """The map entry that points xdp_redirect_map's tx_port at target (its pin, under the namespace's key)."""
    path = "%s/%s/%s/xdp/maps/tx_port" % (params["pin_root"], params["netns_keys"][place_key(where)], interface)
    return dict(path=path, exclusive=True, entries=[dict(key=0, value={"ifindex": target})])


def _datapath(where, **config):
    """One host's part of a case's data path: its datapath config, every entry in the place's namespace."""
    lists = {}
    for kind, entries in config.items():
        lists[kind] = [dict(entry, netns=where["netns"]) if where["netns"] else dict(entry) for entry in entries]
    return dict(where, config=lists)


def _shell(where, lines):
    """Shell lines run at a place (tasks/run_case.yml): every name in them is quoted, here or by their makers."""
    prefix = "ip netns exec %s " % shlex.quote(where["netns"]) if where["netns"] else ""
    return dict(where, lines=[prefix + line for line in lines])


def _traffic_engine(params, host):
    """(engine, why) of the drop, forward and multicast families on the sender host: benchmark_generator's, or
    with auto, xdp_trafficgen's live frames where the sender's kernel takes them and trafgen where it refuses
    them (one kernel answer per host, params' sender_kernels: toolchain_facts' kernel facts)."""
    chosen = params.get("generator") or "auto"
    if chosen not in GENERATORS:
        raise AnsibleFilterError("benchmark: benchmark_generator must be one of %s, not %r"
                                 % (", ".join(GENERATORS), chosen))
    if chosen == "xdp_trafficgen":
        return "xdp", "benchmark_generator: xdp_trafficgen"
    if chosen == "trafgen":
        return "trafgen", "benchmark_generator: trafgen"
    kernel = (params.get("sender_kernels") or {}).get(host)
    if not kernel or "xdp_live_frames" not in kernel:
        raise AnsibleFilterError("benchmark: benchmark_generator auto needs to know whether the kernel of the sender "
                                 "%s takes live-frames test runs (ebpf.xdp.toolchain_facts' kernel.xdp_live_frames); "
                                 "it was not read: %s" % (host, kernel))
    if kernel["xdp_live_frames"]:
        return "xdp", "auto: on %s, the kernel takes live-frames test runs" % host
    return "trafgen", "auto: on %s, %s" % (host, kernel.get("xdp_live_frames_error")
                                           or "the kernel refuses live-frames test runs (no reason given)")


def _generator(params, family, dst_mac, dst_ip=None, engine=None):
    """The generator of a case: engine, or (engine None) the traffic families' (_traffic_engine); name and why
    say in the report what sent the case's frames and why that one."""
    p = params[family]
    sender = _at(params, family, "sender")
    if engine is None:
        engine, why = _traffic_engine(params, sender["host"])
    else:
        why = "the generators family measures each generator"
    return dict(sender, interface=p["sender_interface"], src_ip=p["src_ip"], dst_ip=dst_ip or p["dst_ip"],
                dst_mac=dst_mac, src_mac=_mac(params, sender, p["sender_interface"]), engine=engine,
                name=ENGINE_NAMES[engine], why=why)


def _case(family, name, baseline, **fields):
    case = dict(family=family, case=name, baseline=baseline, metric="delivered_pps", higher_is_better=True,
                datapath=[], setup=[], teardown=[], netfilter=[], non_members=[])
    case.update(fields)
    return case


def _bridge(ports):
    """Shell lines that make the case's bridge (no STP, no forward delay, no snooping: every frame floods)."""
    return (["ip link add %s type bridge stp_state 0 forward_delay 0 mcast_snooping 0" % BENCH_BRIDGE,
             "sysctl -qw net.ipv6.conf.%s.disable_ipv6=1" % BENCH_BRIDGE]
            + ["ip link set dev %s master %s" % (shlex.quote(port), BENCH_BRIDGE) for port in ports]
            + ["ip link set %s up" % BENCH_BRIDGE])


def _gro(where, interface):
    name = shlex.quote(interface)
    return dict(setup=[_shell(where, [GRO_ON % name])], teardown=[_shell(where, [GRO_OFF % name])])


def _drop_cases(params):
    rx, port = _at(params, "drop", "receiver"), params["drop"]["receiver_interface"]
    gen = _generator(params, "drop", _mac(params, rx, port))
    base = "iptables raw drop"

    def case(name, xdp=(), tc=(), count="xdp", **fields):
        return _case("drop", name, base, datapath=[_datapath(rx, xdp=xdp, tc=tc)], generator=gen,
                     count=dict(rx, how=count, interfaces=[port]), **fields)

    def tc_drop(method):
        return [dict(interface=port, object=_obj(params, "tc_redirect"), program="tc_drop_count", method=method)]

    def netfilter(backend):
        return [dict(rx, interface=port, backend=backend)]

    # iptables (the nft backend, Debian's) makes the table ip raw for its rule, and removing the rule leaves it
    # (with hooks that every packet then crosses): it goes again where the benchmark made it.
    made_raw = IPTABLES_RAW_TABLE not in params.get("snapshot", {}).get(place_key(rx), [])
    # One command (sh -c), so that a place's `ip netns exec` prefix covers the whole line, nft included.
    raw_gone = [_shell(rx, ["sh -c \"iptables-save -t raw | grep -q '^-A' || nft delete table ip raw\""])] \
        if made_raw else []

    return [
        case("XDP drop, xdp_drop_count, native", [_counter(params, port)]),
        case("XDP drop, xdp_drop_count, generic", [_xdp(params, port, "xdp_drop_count", mode="generic")],
             **_gro(rx, port)),
        case("XDP drop, empty program, native", [_xdp(params, port, "xdp_drop")], count="stats"),
        case("tc drop, tcx", [_count_and_pass(params, port)], tc_drop("tcx"), count="tc"),
        case("tc drop, cls_bpf", [_count_and_pass(params, port)], tc_drop("cls_bpf"), count="tc"),
        case(base, [_count_and_pass(params, port)], count="netfilter", netfilter=netfilter("iptables"),
             teardown=raw_gone),
        case("nftables netdev ingress drop", [_count_and_pass(params, port)], count="netfilter",
             netfilter=netfilter("nftables")),
    ]


def _forward_cases(params):
    p = params["forward"]
    fwd, rx = _at(params, "forward", "forwarder"), _at(params, "forward", "receiver")
    fin, fout, port = p["forwarder_in"], p["forwarder_out"], p["receiver_interface"]
    base = "Linux bridge"
    to_receiver = _mac(params, rx, port)

    def case(name, xdp, tc=(), dst_mac=to_receiver, map_entries=(), **fields):
        return _case("forward", name, base, generator=_generator(params, "forward", dst_mac),
                     count=dict(rx, how="xdp", interfaces=[port]),
                     datapath=[_datapath(fwd, xdp=xdp, tc=tc, map_entries=map_entries),
                               _datapath(rx, xdp=[_counter(params, port)])], **fields)

    def tc(program, method):
        return [dict(interface=fin, object=_obj(params, "tc_redirect"), program=program, method=method,
                     constants={"redirect_ifindex": {"ifindex": fout}})]

    return [
        case("XDP redirect, native",
             [_xdp(params, fin, "xdp_redirect", constants={"redirect_ifindex": {"ifindex": fout}})]),
        case("XDP redirect_map, native", [_xdp(params, fin, "xdp_redirect_map")],
             map_entries=[_tx_port(params, fwd, fin, fout)]),
        case("tc redirect, tcx", [_count_and_pass(params, fin)], tc("redirect_xmit", "tcx")),
        case("tc redirect, cls_bpf", [_count_and_pass(params, fin)], tc("redirect_xmit", "cls_bpf")),
        case("tc redirect, act_bpf", [_count_and_pass(params, fin)], tc("redirect_xmit", "act_bpf")),
        case("tc clone_redirect, tcx", [_count_and_pass(params, fin)], tc("clone_redirect_xmit", "tcx")),
        case("IP routing", [_count_and_pass(params, fin)], dst_mac=_mac(params, fwd, fin)),
        case(base, [_count_and_pass(params, fin)], setup=[_shell(fwd, _bridge([fin, fout]))],
             teardown=[_shell(fwd, ["ip link del %s" % BENCH_BRIDGE])]),
    ]


def _multicast_cases(params):
    p = params["multicast"]
    sw, members = _at(params, "multicast", "switch"), _at(params, "multicast", "members")
    sin, ports, ends = p["switch_in"], p["switch_ports"], p["member_interfaces"]
    if len(ports) != len(ends) or len(ports) < 9:
        raise AnsibleFilterError("benchmark multicast: switch_ports and member_interfaces must pair up, 9 or more "
                                 "(the cases fan out to 1, 3 and 9): %s, %s" % (ports, ends))
    gen = _generator(params, "multicast", GROUP_MAC, dst_ip=GROUP_IP)
    counters = _datapath(members, xdp=[_counter(params, end) for end in ends])
    cases = []

    def case(name, fanout, switch, baseline, **fields):
        cases.append(_case("multicast", name, baseline, generator=gen, fanout=fanout,
                           datapath=[_datapath(sw, **switch), counters],
                           count=dict(members, how="xdp", interfaces=ends[:fanout]),
                           non_members=ends[fanout:9], **fields))

    for fanout in (1, 3, 9):
        bridge = "Linux bridge 1 -> %d" % fanout
        for mode in ("generic", "native"):
            gro = _gro(sw, sin) if mode == "generic" else {}
            if fanout == 1:
                case("redirect_map 1 -> 1, %s" % mode, 1,
                     dict(xdp=[_xdp(params, sin, "xdp_redirect_map", mode)],
                          map_entries=[_tx_port(params, sw, sin, ports[0])]), bridge, **gro)
            else:
                group = dict(name="bench", shared_maps=SHARED_MAPS, members=ports[:fanout], addresses=[GROUP_IP],
                             exclude_ingress=True, exclusive=True)
                case("broadcast 1 -> %d, %s" % (fanout, mode), fanout,
                     dict(xdp=[_xdp(params, sin, "xdp_multicast", mode, shared_maps=SHARED_MAPS)],
                          devmap_groups=[group]), bridge, **gro)
        case(bridge, fanout, dict(xdp=[_count_and_pass(params, sin)]), bridge,
             setup=[_shell(sw, _bridge([sin] + ports[:fanout]))],
             teardown=[_shell(sw, ["ip link del %s" % BENCH_BRIDGE])])
    return cases


def _generator_cases(params):
    rx, port = _at(params, "drop", "receiver"), params["drop"]["receiver_interface"]
    # Where the kernel refuses live frames, the baseline's xdp engine fails with the kernel's reason (the case
    # is reported, and the ratios with it): it stays the baseline, the figure the others are read against.
    base = ENGINE_NAMES["xdp"]
    return [_case("generators", ENGINE_NAMES[engine], base,
                  generator=_generator(params, "drop", _mac(params, rx, port), engine=engine),
                  datapath=[_datapath(rx, xdp=[_counter(params, port)])],
                  count=dict(rx, how="xdp", interfaces=[port]))
            for engine in ("xdp", "socket", "pktgen", "trafgen")]


TRAFFIC = {"drop": _drop_cases, "forward": _forward_cases, "multicast": _multicast_cases,
           "generators": _generator_cases}


def benchmark_matrix(params):
    """The traffic cases of the families in params['families'], less the cases named in params['exclude'].

    params: objects_dir, pin_root, families, exclude, macs (place key -> interface -> MAC), netns_keys (place
    key -> the namespace's key in pin paths) and per family its places and ports (see the role's argument
    specs)."""
    unknown = set(params.get("families") or ()) - set(FAMILIES)
    if unknown:
        raise AnsibleFilterError("benchmark: unknown case families %s; choose among %s"
                                 % (", ".join(sorted(unknown)), ", ".join(FAMILIES)))
    cases = []
    for family in params["families"]:
        if family in TRAFFIC:
            cases += TRAFFIC[family](params)
    exclude = set(params.get("exclude") or ())
    known = {case["case"] for case in cases}
    if exclude - known:
        raise AnsibleFilterError("benchmark: benchmark_exclude names no case of the chosen families: %s"
                                 % ", ".join(sorted(exclude - known)))
    kept = [case for case in cases if case["case"] not in exclude]
    # The report compares every case with its baseline: fail now, not after the whole run.
    needed = sorted(exclude & {case["baseline"] for case in kept})
    if needed:
        raise AnsibleFilterError("benchmark: benchmark_exclude names the baseline of cases it keeps: %s"
                                 % ", ".join(needed))
    return kept


def benchmark_schedule(cases, repeat):
    """Every case once per round, each round starting one case later, so that no case always runs first
    or always follows the same one (the machines are shared and noisy)."""
    if repeat < 1:
        raise AnsibleFilterError("benchmark: repeat must be 1 or more, not %s" % repeat)
    runs = []
    for rnd in range(repeat):
        shift = rnd % len(cases) if cases else 0
        for case in cases[shift:] + cases[:shift]:
            runs.append(dict(round=rnd + 1, case=case))
    return runs


def _counted(case, reading):
    """Frames counted per interface (and the non-members') in one reading of the case's counter."""
    how = case["count"]["how"]
    if how == "netfilter":
        return {case["count"]["interfaces"][0]: int(reading["netfilter"])}
    counts = {}
    for ifname, facts in reading["interfaces"].items():
        if how == "xdp":
            counts[ifname] = ((facts.get("xdp") or {}).get("protocols") or {}).get("udp", 0)
        elif how == "tc":
            programs = (facts.get("tc") or {}).get("ingress") or []
            counts[ifname] = sum(((prog.get("protocols") or {}).get("udp", 0)) for prog in programs)
        else:
            counts[ifname] = facts["stats"]["rx_packets"]
    return counts


def benchmark_record(case, rnd, before, after, sent):
    """One round of a traffic case: delivered pps (at the receiver, summed over its counted ports), offered pps
    (the generator's), per port, and frames at the non-members (multicast)."""
    # float and int: before ansible-core 2.19, set_fact renders "{{ number }}" as a string.
    seconds = float(sent.get("seconds") or 0)
    if seconds <= 0:
        raise AnsibleFilterError("benchmark %s: the generator reports no running time: %s" % (case["case"], sent))
    # What the generator made, the frames its own interface refused included (they were offered).
    offered = int(sent.get("total", 0)) + int(sent.get("refused", 0))
    was, now = _counted(case, before), _counted(case, after)
    grown = {ifname: now[ifname] - was.get(ifname, 0) for ifname in now}
    counted = case["count"]["interfaces"]
    delivered = sum(grown[ifname] for ifname in counted)
    record = dict(family=case["family"], case=case["case"], round=rnd, baseline=case["baseline"],
                  metric="delivered_pps", higher_is_better=True, value=delivered / seconds,
                  delivered=delivered, sent=offered, seconds=seconds, offered_pps=offered / seconds,
                  per_port={ifname: grown[ifname] / seconds for ifname in counted},
                  host=dict(generator=place_key(case["generator"]), receiver=place_key(case["count"])),
                  cpus=dict(generator=sent.get("cpus") or []), generator=benchmark_generator_said(case))
    if case["family"] == "multicast":
        record["non_member_frames"] = sum(grown.get(ifname, 0) for ifname in case["non_members"])
    return record


def benchmark_generator_said(case):
    """What the report says of a case's generator: its name and why it sent the case (also for a case that
    could not run)."""
    return dict(name=case["generator"]["name"], why=case["generator"]["why"])


def benchmark_senders(params):
    """The hosts that send the drop, forward and multicast families' frames (whose kernels benchmark_generator
    auto asks about live frames), each once, in the order of the chosen families."""
    hosts = [params[family]["sender"] for family in params["families"] if family in ("drop", "forward", "multicast")]
    return list(dict.fromkeys(hosts))


def benchmark_places(params):
    """Every place (host and namespace) the chosen families use, with the interfaces of it they use (whose MACs
    the matrix needs) and its key, in a stable order."""
    places = {}

    def add(family, role, *names):
        where = _at(params, family, role)
        entry = places.setdefault(place_key(where), dict(where, key=place_key(where), interfaces=[]))
        entry["interfaces"] += [name for name in names if name not in entry["interfaces"]]

    families = set(params["families"])
    if {"drop", "generators"} & families:
        p = params["drop"]
        add("drop", "sender", p["sender_interface"])
        add("drop", "receiver", p["receiver_interface"])
    if "forward" in families:
        p = params["forward"]
        add("forward", "sender", p["sender_interface"])
        add("forward", "forwarder", p["forwarder_in"], p["forwarder_out"])
        add("forward", "receiver", p["receiver_interface"])
    if "multicast" in families:
        p = params["multicast"]
        add("multicast", "sender", p["sender_interface"])
        add("multicast", "switch", p["switch_in"], *p["switch_ports"])
        add("multicast", "members", *p["member_interfaces"])
    return list(places.values())


def benchmark_hosts(places, extra=()):
    """Inventory host -> the namespaces on it that the benchmark uses (datapath's namespaces option), for the
    places and any extra hosts (the cost host)."""
    hosts = {}
    for where in places:
        netns = hosts.setdefault(where["host"], [])
        if where.get("netns") and where["netns"] not in netns:
            netns.append(where["netns"])
    for host in extra:
        hosts.setdefault(host, [])
    return hosts


def benchmark_objects(names, objects_dir):
    """datapath's config.objects for the named sources under objects_dir/src, compiled to objects_dir/NAME.o."""
    return [dict(src="%s/src/%s.bpf.c" % (objects_dir, name), dest="%s/%s.o" % (objects_dir, name))
            for name in names]


def benchmark_place_facts(results, what):
    """Place key -> interface -> MAC (what 'mac'), or place key -> the namespace's key in pin paths (what
    'netns'), from xdp_facts looped over benchmark_places."""
    out = {}
    for result in results:
        facts = result["ansible_facts"]["xdp"]
        key = result["item"]["key"]
        if what == "netns":
            out[key] = facts["netns"]
        else:
            out[key] = {ifname: info.get("mac") for ifname, info in facts["interfaces"].items()}
    return out


def benchmark_cost_records(results):
    """Records of the cost family from looped program_cost results: ns per packet of each program per run,
    each against the empty program of its hook, whose runs (taken right after each program's) are one case
    per hook."""
    empty_name = {"xdp": "empty XDP program"}
    records, empty = [], {}
    for result in results:
        for name, prog in result["programs"].items():
            baseline = empty_name.get(prog["type"], "empty tc program")
            for rnd, ns in enumerate(prog["runs"], 1):
                records.append(dict(family="cost", case="%s (%s)" % (name, prog["verdict"]), round=rnd,
                                    baseline=baseline, metric="ns_per_packet", higher_is_better=False,
                                    value=float(ns), notes="over the empty program: %.1f ns" % prog["over_empty_ns"]))
            empty.setdefault(baseline, []).extend(prog["empty_runs"])
    for baseline, runs in empty.items():
        records += [dict(family="cost", case=baseline, round=rnd, baseline=baseline, metric="ns_per_packet",
                         higher_is_better=False, value=float(ns)) for rnd, ns in enumerate(runs, 1)]
    return records


def benchmark_control_records(steps, clock, rnd, baseline=None):
    """Records of the control family: the seconds between consecutive readings of the clock, one per step,
    each compared with baseline (by default the first step)."""
    if len(clock) != len(steps) + 1:
        raise AnsibleFilterError("benchmark control: %d steps need %d clock readings, not %d"
                                 % (len(steps), len(steps) + 1, len(clock)))
    return [dict(family="control", case=step, round=int(rnd), baseline=baseline or steps[0], metric="seconds",
                 higher_is_better=False, value=float(clock[i + 1]) - float(clock[i]))
            for i, step in enumerate(steps)]


def benchmark_scrape_plan(programs, netns, objects_dir):
    """The metrics scrape control case: how many veth pairs the namespace needs, and per step (a number of
    programs, increasing) the datapath config that attaches xdp_drop_count to that many of their ends."""
    if not programs or any(not isinstance(n, int) or isinstance(n, bool) or n < 1 for n in programs) \
            or list(programs) != sorted(set(programs)):
        raise AnsibleFilterError("benchmark: benchmark_metrics_programs must be increasing numbers of programs, "
                                 "1 or more: %s" % (programs,))
    pairs = (max(programs) + 1) // 2
    ends = ["b%d" % i for i in range(pairs)] + ["a%d" % i for i in range(pairs)]
    return dict(pairs=pairs, steps=[
        dict(programs=count, xdp=[dict(interface=end, netns=netns, object="%s/xdp_drop_count.o" % objects_dir,
                                       program="xdp_drop_count", mode="native") for end in ends[:count]])
        for count in programs])


def scrape_case(programs):
    return "metrics scrape, %d program%s" % (programs, "" if programs == 1 else "s")


def benchmark_scrape_records(scrape, programs, baseline_programs):
    """Records of the metrics scrape control case from scrape_times.py's output: one per scrape (its seconds as
    the client saw them), each noting the exporter's median collect time, the page and the exporter's memory;
    an error when a page (every one, not only the last) does not show the programs attached."""
    shown = scrape.get("programs") or []
    collect = scrape.get("collect_seconds") or []
    down = scrape.get("netns_down") or []
    wrong = ["scrape %d of %d: %s (collect %s s%s)" % (
        n, len(shown), count, collect[n - 1] if n <= len(collect) else "?",
        "; not read: %s" % ", ".join(down[n - 1]) if n <= len(down) and down[n - 1] else "")
        for n, count in enumerate(shown, 1) if count != programs]
    if wrong or not shown:
        raise AnsibleFilterError("benchmark metrics scrape: %d programs are attached, the exporter shows %s"
                                 % (programs, "; ".join(wrong) or "no page"))
    collect = sorted(c for c in scrape.get("collect_seconds") or () if c is not None)
    notes = "%sexporter: %d samples, %.0f KiB page, VmHWM %.1f MiB" % (
        "collect %.1f ms (median), " % (1000 * collect[len(collect) // 2]) if collect else "",
        scrape.get("samples", 0), scrape.get("page_bytes", 0) / 1024, scrape.get("hwm_mib", 0))
    return [dict(family="control", case=scrape_case(programs), round=rnd, baseline=scrape_case(baseline_programs),
                 metric="seconds", higher_is_better=False, value=float(seconds), notes=notes)
            for rnd, seconds in enumerate(scrape["seconds"], 1)]


def benchmark_machine(facts):
    """What the report says of a machine, from ansible.builtin.setup's facts (subsets min and hardware)."""
    processor = facts.get("ansible_processor") or []
    distribution = [str(facts[key]) for key in ("ansible_distribution", "ansible_distribution_version")
                    if facts.get(key)]
    return dict(name=facts.get("ansible_hostname"), kernel=facts.get("ansible_kernel"),
                cpu=processor[2] if len(processor) > 2 else (processor[-1] if processor else None),
                vcpus=facts.get("ansible_processor_vcpus"), distribution=" ".join(distribution))


def benchmark_trafgen_result(output):
    """Frames sent and seconds from what trafgen prints when SIGINT stops it (its total and its CPU's time)."""
    sent = re.search(r"(\d+) packets outgoing", output or "")
    took = re.search(r"(\d+) sec, (\d+) usec on CPU\d+", output or "")
    if not sent or not took:
        raise AnsibleFilterError("trafgen printed no result: %s" % (output or "")[-1000:])
    return dict(total=int(sent.group(1)), seconds=int(took.group(1)) + int(took.group(2)) / 1e6)


def benchmark_snapshot(results):
    """Place key -> the sorted lines of its snapshot (looped shell results of the role's snapshot.yml)."""
    return {result["item"]["key"]: sorted({line.strip() for line in (result.get("stdout") or "").split("\n")
                                           if line.strip()})
            for result in results}


def benchmark_left_behind(before, after, snapshot_before, snapshot_after):
    """What the benchmark left on its hosts (or took away), one line each: a data path that differs from the
    one read before the benchmark (looped datapath state=gathered results), and each line of a place's snapshot
    (links, qdiscs, netfilter tables and rules, GRO, the pktgen module) that is new or gone. Empty when every
    host is as it was."""
    found = []
    was = {result["item"]: result.get("gathered") for result in before}
    for result in after:
        host = result["item"]
        if result.get("gathered") != was.get(host):
            found.append("%s: its data path differs from before the benchmark: %s, now %s"
                         % (host, was.get(host), result.get("gathered")))
    for key, lines in snapshot_after.items():
        earlier = set(snapshot_before.get(key, []))
        found += ["%s: %s (new)" % (key, line) for line in lines if line not in earlier]
        found += ["%s: %s (gone)" % (key, line) for line in sorted(earlier - set(lines))]
    return found


class FilterModule:
    def filters(self):
        return {"benchmark_matrix": benchmark_matrix, "benchmark_schedule": benchmark_schedule,
                "benchmark_record": benchmark_record, "benchmark_objects": benchmark_objects,
                "benchmark_place_facts": benchmark_place_facts, "benchmark_places": benchmark_places,
                "benchmark_hosts": benchmark_hosts,
                "benchmark_left_behind": benchmark_left_behind, "benchmark_snapshot": benchmark_snapshot,
                "benchmark_cost_records": benchmark_cost_records,
                "benchmark_control_records": benchmark_control_records,
                "benchmark_machine": benchmark_machine, "benchmark_scrape_plan": benchmark_scrape_plan, "benchmark_scrape_records": benchmark_scrape_records,
                "benchmark_trafgen_result": benchmark_trafgen_result,
                "benchmark_generator_said": benchmark_generator_said, "benchmark_senders": benchmark_senders}
