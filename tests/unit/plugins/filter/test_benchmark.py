"""The benchmark role's matrix, schedule and records (plugins/filter/benchmark.py): pure logic."""

import copy
import pathlib
import re

import pytest
import yaml

from ansible.errors import AnsibleFilterError

from ansible_collections.ebpf.xdp.plugins.filter.benchmark import (
    ENGINE_NAMES, GENERATORS, GROUP_IP, GROUP_MAC, FilterModule, benchmark_control_records, benchmark_cost_records, benchmark_hosts,
    benchmark_machine,
    benchmark_left_behind, benchmark_matrix, benchmark_objects, benchmark_place_facts, benchmark_places,
    benchmark_record, benchmark_schedule, benchmark_scrape_plan, benchmark_scrape_records, benchmark_senders,
    benchmark_snapshot, benchmark_trafgen_result)

ROLE = pathlib.Path(__file__).resolve().parents[4] / "roles" / "benchmark"
OBJECTS, PIN_ROOT = "/var/lib/ebpf_xdp/benchmark", "/sys/fs/bpf/ebpf_xdp"
NINE = ["eth%d" % n for n in range(1, 10)]

DROP_CASES = ["XDP drop, xdp_drop_count, native", "XDP drop, xdp_drop_count, generic",
              "XDP drop, empty program, native", "tc drop, tcx", "tc drop, cls_bpf", "iptables raw drop",
              "nftables netdev ingress drop"]
FORWARD_CASES = ["XDP redirect, native", "XDP redirect_map, native", "tc redirect, tcx", "tc redirect, cls_bpf",
                 "tc redirect, act_bpf", "tc clone_redirect, tcx", "IP routing", "Linux bridge"]
MULTICAST_CASES = ["redirect_map 1 -> 1, generic", "redirect_map 1 -> 1, native", "Linux bridge 1 -> 1",
                   "broadcast 1 -> 3, generic", "broadcast 1 -> 3, native", "Linux bridge 1 -> 3",
                   "broadcast 1 -> 9, generic", "broadcast 1 -> 9, native", "Linux bridge 1 -> 9"]
GENERATOR_CASES = ["xdp_trafficgen, xdp", "xdp_trafficgen, socket", "pktgen", "trafgen (netsniff-ng)"]


def lab_params(families=("drop", "forward", "multicast", "generators", "cost", "control"), exclude=(), **places):
    """__benchmark_params as roles/benchmark/tasks/prepare.yml gathers it, with the lab's defaults; places
    updates a family's settings (a namespace, other ports)."""
    params = dict(
        families=list(families), exclude=list(exclude), objects_dir=OBJECTS, pin_root=PIN_ROOT,
        drop=dict(sender="sender", sender_interface="eth0", receiver="receiver", receiver_interface="eth0",
                  src_ip="198.18.0.1", dst_ip="198.18.0.2"),
        forward=dict(sender="sender", sender_interface="eth1", forwarder="router", forwarder_in="eth0",
                     forwarder_out="eth1", receiver="receiver", receiver_interface="eth1", src_ip="10.11.1.1",
                     dst_ip="10.11.2.2"),
        multicast=dict(sender="sender", sender_interface="eth3", switch="switch", switch_in="eth0",
                       switch_ports=list(NINE), members="members", member_interfaces=list(NINE),
                       src_ip="10.11.4.1"))
    for family, settings in places.items():
        params[family].update(settings)
    return params


def facts_results(places):
    """ebpf.xdp.xdp_facts looped over benchmark_places, registered: a MAC per place and interface, and the
    namespace key (a lab host is a namespace of its own name; a namespace on a host is keyed by its name)."""
    results = []
    for n, where in enumerate(places, 1):
        interfaces = {ifname: {"ifindex": i + 2, "mac": "02:00:00:00:%02x:%02x" % (n, i + 1), "mtu": 1500}
                      for i, ifname in enumerate(where["interfaces"])}
        results.append({"item": where, "changed": False, "failed": False,
                        "ansible_facts": {"xdp": {"netns": where["netns"] or where["host"],
                                                  "interfaces": interfaces}}})
    return results


TAKES = {"release": "6.1.0-28-amd64", "bpf_syscall": True, "btf": True, "xdp_live_frames": True,
         "xdp_live_frames_error": None}
REFUSES = dict(TAKES, release="6.18.44", xdp_live_frames=False,
               xdp_live_frames_error="this kernel refuses live-frames test runs (BPF_F_TEST_XDP_LIVE_FRAMES): "
                                     "test-run program ebpf_xdp_live: Operation not permitted (errno 1 EPERM)")


def with_facts(params, generator="auto", kernels=None):
    """params combined with the MACs and namespace keys read, the generator chosen and the senders' kernel facts
    (toolchain_facts' kernel, by default every sender's takes live frames), as the role's 'Plan the runs' task
    does."""
    results = facts_results(benchmark_places(params))
    if kernels is None:
        kernels = dict.fromkeys(benchmark_senders(params), TAKES)
    return dict(params, macs=benchmark_place_facts(results, "mac"), netns_keys=benchmark_place_facts(results, "netns"),
                generator=generator, sender_kernels=kernels)


def by_name(cases):
    return {case["case"]: case for case in cases}


def shell_lines(parts):
    return [line for part in parts for line in part["lines"]]


@pytest.fixture(name="lab")
def lab_fixture():
    return with_facts(lab_params())


@pytest.fixture(name="matrix")
def matrix_fixture(lab):
    return benchmark_matrix(lab)


# benchmark_matrix


def test_each_family_has_its_cases_and_baseline(matrix):
    names = {family: [c["case"] for c in matrix if c["family"] == family]
             for family in ("drop", "forward", "multicast", "generators")}
    assert names == {"drop": DROP_CASES, "forward": FORWARD_CASES, "multicast": MULTICAST_CASES,
                     "generators": GENERATOR_CASES}
    assert [c["case"] for c in matrix] == DROP_CASES + FORWARD_CASES + MULTICAST_CASES + GENERATOR_CASES
    baselines = {c["case"]: c["baseline"] for c in matrix}
    assert {baselines[name] for name in DROP_CASES} == {"iptables raw drop"}
    assert {baselines[name] for name in FORWARD_CASES} == {"Linux bridge"}
    assert {baselines[name] for name in GENERATOR_CASES} == {"xdp_trafficgen, xdp"}
    for name in MULTICAST_CASES:
        fanout = int(re.search(r"1 -> (\d+)", name).group(1))
        assert baselines[name] == "Linux bridge 1 -> %d" % fanout
        assert by_name(matrix)[name]["fanout"] == fanout
    assert [c["generator"]["engine"] for c in matrix if c["family"] == "generators"] == [
        "xdp", "socket", "pktgen", "trafgen"]


TRAFFIC = ("drop", "forward", "multicast")


def engines(cases):
    """family -> the (engine, name, why) of its cases' generators, each once."""
    found = {}
    for case in cases:
        gen = case["generator"]
        found.setdefault(case["family"], set()).add((gen["engine"], gen["name"], gen["why"]))
    return {family: sorted(said) for family, said in found.items()}


OWN = "the generators family measures each generator"
GENERATORS_OWN = [("pktgen", "pktgen", OWN), ("socket", "xdp_trafficgen, socket", OWN),
                  ("trafgen", "trafgen (netsniff-ng)", OWN), ("xdp", "xdp_trafficgen, xdp", OWN)]


def test_auto_sends_with_live_frames_where_the_sender_s_kernel_takes_them(matrix):
    taken = ("xdp", "xdp_trafficgen, xdp", "auto: on sender, the kernel takes live-frames test runs")
    assert engines(matrix) == dict(dict.fromkeys(TRAFFIC, [taken]), generators=GENERATORS_OWN)


def test_auto_sends_with_trafgen_where_the_sender_s_kernel_refuses_live_frames():
    cases = benchmark_matrix(with_facts(lab_params(), kernels={"sender": REFUSES}))
    why = ("auto: on sender, this kernel refuses live-frames test runs (BPF_F_TEST_XDP_LIVE_FRAMES): test-run "
           "program ebpf_xdp_live: Operation not permitted (errno 1 EPERM)")
    # The generators family still measures every generator: its xdp case is the kernel's refusal to report.
    assert engines(cases) == dict(dict.fromkeys(TRAFFIC, [("trafgen", "trafgen (netsniff-ng)", why)]),
                                  generators=GENERATORS_OWN)
    # trafgen builds its frames from these: every traffic case has them.
    for case in cases:
        assert case["generator"]["src_mac"] and case["generator"]["dst_mac"] and case["generator"]["src_ip"]


def test_auto_asks_each_family_s_own_sender():
    params = lab_params(["drop", "forward", "multicast"], forward=dict(sender="vm", sender_netns="sender"))
    assert benchmark_senders(params) == ["sender", "vm"]
    cases = benchmark_matrix(with_facts(params, kernels={"sender": TAKES, "vm": REFUSES}))
    engines = {c["family"]: c["generator"]["engine"] for c in cases}
    assert engines == dict(drop="xdp", forward="trafgen", multicast="xdp")
    assert {c["generator"]["why"] for c in cases if c["family"] == "forward"} == {
        "auto: on vm, %s" % REFUSES["xdp_live_frames_error"]}


@pytest.mark.parametrize("generator, engine", [("xdp_trafficgen", "xdp"), ("trafgen", "trafgen")])
@pytest.mark.parametrize("kernel", [TAKES, REFUSES])
def test_a_chosen_generator_sends_whatever_the_kernel_says(generator, engine, kernel):
    """xdp_trafficgen on a kernel that refuses live frames: its cases fail with the kernel's reason, as asked.
    No kernel facts are needed (the role reads them only for auto)."""
    for kernels in ({"sender": kernel}, {}):
        cases = benchmark_matrix(with_facts(lab_params(), generator=generator, kernels=kernels))
        said = ("benchmark_generator: %s" % generator)
        assert engines(cases) == dict(dict.fromkeys(TRAFFIC, [(engine, ENGINE_NAMES[engine], said)]),
                                      generators=GENERATORS_OWN)


def test_auto_without_the_sender_s_kernel_facts_is_an_error():
    for kernels in ({}, {"sender": {"release": "6.18.44"}}):
        with pytest.raises(AnsibleFilterError, match="auto needs to know whether the kernel of the sender sender "
                                                     "takes live-frames test runs"):
            benchmark_matrix(with_facts(lab_params(["forward"]), kernels=kernels))
    # The generators family alone needs none (its engines are its cases').
    assert len(benchmark_matrix(with_facts(lab_params(["generators"]), kernels={}))) == 4


def test_an_unknown_generator_is_an_error():
    with pytest.raises(AnsibleFilterError, match="benchmark_generator must be one of auto, xdp_trafficgen, trafgen, "
                                                 "not 'pktgen'"):
        benchmark_matrix(with_facts(lab_params(["drop"]), generator="pktgen"))


def test_senders_are_the_traffic_families_each_once():
    assert benchmark_senders(lab_params()) == ["sender"]
    assert benchmark_senders(lab_params(["generators", "cost", "control"])) == []
    assert benchmark_senders(lab_params(["multicast", "drop"], drop=dict(sender="a"), multicast=dict(sender="b"))) == [
        "b", "a"]


def test_the_role_offers_the_generators_the_filter_takes():
    spec = yaml.safe_load((ROLE / "meta" / "argument_specs.yml").read_text())["argument_specs"]["main"]["options"]
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    assert tuple(spec["benchmark_generator"]["choices"]) == GENERATORS
    assert spec["benchmark_generator"]["default"] == defaults["benchmark_generator"] == "auto"


def test_every_baseline_is_a_case_of_its_family(matrix):
    cases = {(c["family"], c["case"]) for c in matrix}
    assert len(cases) == len(matrix)
    for case in matrix:
        assert (case["family"], case["baseline"]) in cases
        assert case["metric"] == "delivered_pps" and case["higher_is_better"] is True


def test_families_run_in_the_order_given_and_cost_and_control_have_no_traffic_case():
    assert {c["family"] for c in benchmark_matrix(with_facts(lab_params(["generators", "drop"])))} == {
        "generators", "drop"}
    assert [c["case"] for c in benchmark_matrix(with_facts(lab_params(["generators", "drop"])))] == (
        GENERATOR_CASES + DROP_CASES)
    assert not benchmark_matrix(with_facts(lab_params(["cost", "control"])))


def test_published_figures_name_cases_of_the_matrix(matrix):
    published = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())["__benchmark_published"]
    assert set(published) <= {c["case"] for c in matrix}


def test_a_case_is_its_whole_run(lab, matrix):
    mac = lab["macs"]
    assert by_name(matrix)["tc drop, tcx"] == dict(
        family="drop", case="tc drop, tcx", baseline="iptables raw drop", metric="delivered_pps",
        higher_is_better=True, setup=[], teardown=[], netfilter=[], non_members=[],
        datapath=[dict(host="receiver", netns=None, config=dict(
            xdp=[dict(interface="eth0", object=OBJECTS + "/xdp_drop_count.o", program="xdp_drop_count",
                      mode="native", constants={"xdp_action": 2})],
            tc=[dict(interface="eth0", object=OBJECTS + "/tc_redirect.o", program="tc_drop_count",
                     method="tcx")]))],
        generator=dict(host="sender", netns=None, interface="eth0", src_ip="198.18.0.1", dst_ip="198.18.0.2",
                       dst_mac=mac["receiver"]["eth0"], src_mac=mac["sender"]["eth0"], engine="xdp",
                       name="xdp_trafficgen, xdp", why="auto: on sender, the kernel takes live-frames test runs"),
        count=dict(host="receiver", netns=None, how="tc", interfaces=["eth0"]))


def test_each_drop_case_counts_where_its_frames_end(matrix):
    cases = by_name(matrix)
    assert {name: cases[name]["count"]["how"] for name in DROP_CASES} == {
        "XDP drop, xdp_drop_count, native": "xdp", "XDP drop, xdp_drop_count, generic": "xdp",
        "XDP drop, empty program, native": "stats", "tc drop, tcx": "tc", "tc drop, cls_bpf": "tc",
        "iptables raw drop": "netfilter", "nftables netdev ingress drop": "netfilter"}
    assert cases["iptables raw drop"]["netfilter"] == [dict(host="receiver", netns=None, interface="eth0",
                                                            backend="iptables")]
    assert cases["nftables netdev ingress drop"]["netfilter"][0]["backend"] == "nftables"


def test_forward_cases_aim_at_the_receiver_except_ip_routing(lab, matrix):
    cases = by_name(matrix)
    for name in FORWARD_CASES:
        expected = lab["macs"]["router"]["eth0"] if name == "IP routing" else lab["macs"]["receiver"]["eth1"]
        assert cases[name]["generator"]["dst_mac"] == expected
        assert cases[name]["generator"]["src_mac"] == lab["macs"]["sender"]["eth1"]
        assert cases[name]["count"] == dict(host="receiver", netns=None, how="xdp", interfaces=["eth1"])
        assert [part["host"] for part in cases[name]["datapath"]] == ["router", "receiver"]
    assert cases["XDP redirect, native"]["datapath"][0]["config"]["xdp"] == [dict(
        interface="eth0", object=OBJECTS + "/xdp_redirect.o", program="xdp_redirect", mode="native",
        constants={"redirect_ifindex": {"ifindex": "eth1"}})]
    assert [cases[name]["datapath"][0]["config"]["tc"][0]["method"] for name in FORWARD_CASES[2:6]] == [
        "tcx", "cls_bpf", "act_bpf", "tcx"]
    bridge = cases["Linux bridge"]
    assert shell_lines(bridge["setup"]) == [
        "ip link add brbench type bridge stp_state 0 forward_delay 0 mcast_snooping 0",
        "sysctl -qw net.ipv6.conf.brbench.disable_ipv6=1", "ip link set dev eth0 master brbench",
        "ip link set dev eth1 master brbench", "ip link set brbench up"]
    assert bridge["teardown"] == [dict(host="router", netns=None, lines=["ip link del brbench"])]


def test_generic_cases_turn_gro_on_their_port_for_the_case_only(matrix):
    generic = 0
    for case in matrix:
        ports = [(part["host"], entry["interface"]) for part in case["datapath"]
                 for entry in part["config"].get("xdp", []) if entry["mode"] == "generic"]
        gro_on = [(part["host"], line) for part in case["setup"] for line in part["lines"] if "gro" in line]
        gro_off = [(part["host"], line) for part in case["teardown"] for line in part["lines"] if "gro" in line]
        assert gro_on == [(host, "ethtool -K %s gro on" % port) for host, port in ports]
        assert gro_off == [(host, "ethtool -K %s gro off" % port) for host, port in ports]
        generic += bool(ports)
    assert generic == 4  # XDP drop generic and the three multicast generic cases
    assert by_name(matrix)["XDP drop, xdp_drop_count, generic"]["setup"] == [
        dict(host="receiver", netns=None, lines=["ethtool -K eth0 gro on"])]
    assert by_name(matrix)["broadcast 1 -> 9, generic"]["teardown"] == [
        dict(host="switch", netns=None, lines=["ethtool -K eth0 gro off"])]


def test_multicast_counts_the_fanout_and_watches_the_other_members():
    ends = ["m%d" % n for n in range(1, 10)]
    lab = with_facts(lab_params(["multicast"], multicast=dict(member_interfaces=ends)))
    cases = benchmark_matrix(lab)
    assert len(cases) == 9
    for case in cases:
        fanout = case["fanout"]
        assert case["count"] == dict(host="members", netns=None, how="xdp", interfaces=ends[:fanout])
        assert case["non_members"] == ends[fanout:]
        assert case["generator"]["dst_mac"] == GROUP_MAC and case["generator"]["dst_ip"] == GROUP_IP
        assert case["generator"]["src_mac"] == lab["macs"]["sender"]["eth3"]
        switch, members = case["datapath"]
        assert switch["host"] == "switch"
        assert members == dict(host="members", netns=None, config=dict(xdp=[
            dict(interface=end, object=OBJECTS + "/xdp_drop_count.o", program="xdp_drop_count", mode="native")
            for end in ends]))
    named = by_name(cases)
    for fanout in (3, 9):
        group, = named["broadcast 1 -> %d, native" % fanout]["datapath"][0]["config"]["devmap_groups"]
        assert group["members"] == NINE[:fanout] and group["addresses"] == [GROUP_IP]
        assert group["exclude_ingress"] is True and group["shared_maps"] == "bench"
        lines = shell_lines(named["Linux bridge 1 -> %d" % fanout]["setup"])
        assert [line.split()[4] for line in lines if " master " in line] == ["eth0"] + NINE[:fanout]
    assert named["redirect_map 1 -> 1, generic"]["datapath"][0]["config"]["xdp"][0]["mode"] == "generic"


def test_map_entries_pin_under_pin_root_and_the_namespace_key(matrix):
    cases = by_name(matrix)
    assert cases["XDP redirect_map, native"]["datapath"][0]["config"]["map_entries"] == [dict(
        path=PIN_ROOT + "/router/eth0/xdp/maps/tx_port", exclusive=True, entries=[dict(key=0, value={
            "ifindex": "eth1"})])]
    assert cases["redirect_map 1 -> 1, native"]["datapath"][0]["config"]["map_entries"] == [dict(
        path=PIN_ROOT + "/switch/eth0/xdp/maps/tx_port", exclusive=True, entries=[dict(key=0, value={
            "ifindex": "eth1"})])]
    keyed = with_facts(lab_params(["forward"]))
    keyed["netns_keys"]["router"] = "netns-4026532301"
    entries = by_name(benchmark_matrix(keyed))["XDP redirect_map, native"]["datapath"][0]["config"]["map_entries"]
    assert entries[0]["path"] == PIN_ROOT + "/netns-4026532301/eth0/xdp/maps/tx_port"


def test_places_in_the_initial_namespace_give_no_netns_to_entries(matrix):
    for case in matrix:
        for part in case["datapath"]:
            assert part["netns"] is None
            assert all("netns" not in entry for entries in part["config"].values() for entry in entries)
        assert not any(line.startswith("ip netns") for part in case["setup"] + case["teardown"]
                       for line in part["lines"])


def test_places_with_a_namespace_run_everything_in_it():
    lab = with_facts(lab_params(["drop", "forward", "multicast"],
                                drop=dict(receiver="vm", receiver_netns="receiver"),
                                forward=dict(forwarder="vm", forwarder_netns="router"),
                                multicast=dict(switch="vm", switch_netns="switch")))
    assert set(lab["macs"]) == {"sender", "vm/receiver", "receiver", "vm/router", "vm/switch", "members"}
    cases = benchmark_matrix(lab)
    inside = {"drop": "receiver", "forward": "router", "multicast": "switch"}
    for case in cases:
        part = case["datapath"][0]
        netns = inside[case["family"]]
        assert part["host"] == "vm" and part["netns"] == netns
        entries = [entry for kind in part["config"].values() for entry in kind]
        assert entries and all(entry["netns"] == netns for entry in entries)
        for shell in case["setup"] + case["teardown"]:
            assert shell["host"] == "vm" and shell["netns"] == netns
            assert all(line.startswith("ip netns exec %s " % netns) for line in shell["lines"])
        assert all(rule["netns"] == netns for rule in case["netfilter"])
    named = by_name(cases)
    generic = named["XDP drop, xdp_drop_count, generic"]
    assert generic["setup"][0]["lines"] == ["ip netns exec receiver ethtool -K eth0 gro on"]
    assert generic["count"] == dict(host="vm", netns="receiver", how="xdp", interfaces=["eth0"])
    assert generic["generator"]["dst_mac"] == lab["macs"]["vm/receiver"]["eth0"]
    assert named["iptables raw drop"]["netfilter"] == [dict(host="vm", netns="receiver", interface="eth0",
                                                            backend="iptables")]
    assert named["IP routing"]["generator"]["dst_mac"] == lab["macs"]["vm/router"]["eth0"]
    assert named["XDP redirect_map, native"]["datapath"][0]["config"]["map_entries"][0]["path"] == (
        PIN_ROOT + "/router/eth0/xdp/maps/tx_port")
    assert named["Linux bridge"]["teardown"][0]["lines"] == ["ip netns exec router ip link del brbench"]
    assert named["broadcast 1 -> 3, native"]["datapath"][0]["config"]["devmap_groups"][0]["netns"] == "switch"


def test_names_in_shell_lines_are_quoted():
    """The role refuses such names before the matrix is made; quoting keeps any that got through one word."""
    lab = with_facts(lab_params(["drop", "forward"], drop=dict(receiver="vm", receiver_netns="rx;x"),
                                forward=dict(forwarder="vm", forwarder_netns="fw$(x)", forwarder_in="a b")))
    named = by_name(benchmark_matrix(lab))
    assert named["XDP drop, xdp_drop_count, generic"]["setup"][0]["lines"] == [
        "ip netns exec 'rx;x' ethtool -K eth0 gro on"]
    assert shell_lines(named["Linux bridge"]["setup"])[2] == "ip netns exec 'fw$(x)' ip link set dev 'a b' master brbench"


def test_a_place_without_its_mac_read_is_named():
    lab = with_facts(lab_params(["drop"], drop=dict(receiver="vm", receiver_netns="receiver")))
    del lab["macs"]["vm/receiver"]
    with pytest.raises(AnsibleFilterError, match="no MAC address read for eth0 on vm/receiver"):
        benchmark_matrix(lab)


def test_an_unknown_family_is_an_error(lab):
    with pytest.raises(AnsibleFilterError, match="unknown case families routing; choose among drop, forward"):
        benchmark_matrix(dict(lab, families=["drop", "routing"]))


@pytest.mark.parametrize("families, exclude", [
    (["drop"], ["tc redirect, act_bpf"]),  # a case, but not of the chosen families
    (["drop", "forward"], ["tc redirect, act_bpf", "tc redirect act_bpf"]),
])
def test_an_exclude_that_names_no_case_is_an_error(lab, families, exclude):
    with pytest.raises(AnsibleFilterError, match="benchmark_exclude names no case of the chosen families: "
                                                 + re.escape(exclude[-1])):
        benchmark_matrix(dict(lab, families=families, exclude=exclude))


def test_exclude_removes_exactly_the_named_cases(lab, matrix):
    left = benchmark_matrix(dict(lab, exclude=["tc redirect, act_bpf", "pktgen"]))
    assert left == [c for c in matrix if c["case"] not in ("tc redirect, act_bpf", "pktgen")]
    assert len(left) == len(matrix) - 2


def test_excluding_a_baseline_its_family_still_uses_is_an_error(lab):
    # The report compares each case with its baseline: without it, the whole run would fail only at the end.
    with pytest.raises(AnsibleFilterError, match="names the baseline of cases it keeps: Linux bridge$"):
        benchmark_matrix(dict(lab, exclude=["Linux bridge"]))
    assert [c["case"] for c in benchmark_matrix(dict(lab, families=["forward"], exclude=FORWARD_CASES[:-1]))] == [
        "Linux bridge"]


@pytest.mark.parametrize("ports, ends", [(NINE[:8], NINE[:8]), (NINE, NINE[:8]), ([], [])])
def test_multicast_needs_nine_paired_ports(ports, ends):
    params = lab_params(["multicast"], multicast=dict(switch_ports=ports, member_interfaces=ends))
    with pytest.raises(AnsibleFilterError, match="must pair up, 9 or more"):
        benchmark_matrix(with_facts(params))


def test_more_than_nine_ports_count_on_the_first_nine():
    ten = NINE + ["eth10"]
    params = lab_params(["multicast"], multicast=dict(switch_ports=ten, member_interfaces=ten))
    cases = benchmark_matrix(with_facts(params))
    assert by_name(cases)["broadcast 1 -> 3, native"]["non_members"] == NINE[3:]


# benchmark_schedule


def test_schedule_runs_every_case_once_per_round_from_a_rotating_start(matrix):
    runs = benchmark_schedule(matrix, 3)
    assert len(runs) == 3 * len(matrix)
    for rnd in (1, 2, 3):
        order = [run["case"] for run in runs if run["round"] == rnd]
        assert order == matrix[rnd - 1:] + matrix[:rnd - 1]
    assert [run["round"] for run in runs] == sorted(run["round"] for run in runs)


def test_schedule_wraps_its_start_and_takes_no_cases():
    assert [(run["round"], run["case"]) for run in benchmark_schedule(["a", "b"], 3)] == [
        (1, "a"), (1, "b"), (2, "b"), (2, "a"), (3, "a"), (3, "b")]
    assert not benchmark_schedule([], 2)


@pytest.mark.parametrize("repeat", [0, -1])
def test_schedule_needs_a_round(matrix, repeat):
    with pytest.raises(AnsibleFilterError, match="repeat must be 1 or more, not %d" % repeat):
        benchmark_schedule(matrix, repeat)


# benchmark_record


def reading(interfaces, netfilter=0):
    """One read_counters.yml reading: xdp_facts' interfaces and the netfilter rule's packets."""
    return {"interfaces": interfaces, "netfilter": netfilter}


def xdp_facts(udp, rx_packets=0):
    return {"mac": "02:00:00:00:00:01", "stats": {"rx_packets": rx_packets, "tx_packets": 0},
            "xdp": {"name": "xdp_drop_count", "mode": "native", "protocols": {"tcp": 7, "udp": udp}}, "tc": {
                "ingress": [], "egress": []}}


SENT = {"total": 3000000, "refused": 150000, "seconds": 3.0, "cpus": [0]}


def test_record_xdp_counts_udp_at_the_receiver(matrix):
    case = by_name(matrix)["XDP drop, xdp_drop_count, native"]
    record = benchmark_record(case, 2, reading({"eth0": xdp_facts(1000)}), reading({"eth0": xdp_facts(2701000)}),
                              SENT)
    assert record == dict(family="drop", case="XDP drop, xdp_drop_count, native", round=2,
                          baseline="iptables raw drop", metric="delivered_pps", higher_is_better=True,
                          value=900000.0, delivered=2700000, sent=3150000, seconds=3.0, offered_pps=1050000.0,
                          per_port={"eth0": 900000.0}, host=dict(generator="sender", receiver="receiver"),
                          cpus=dict(generator=[0]), generator=dict(
                              name="xdp_trafficgen, xdp", why="auto: on sender, the kernel takes live-frames test runs"))


def test_record_xdp_counts_from_zero_when_no_program_was_there(matrix):
    case = by_name(matrix)["XDP redirect, native"]
    before = reading({"eth1": dict(xdp_facts(0), xdp=None)})
    assert benchmark_record(case, 1, before, reading({"eth1": xdp_facts(600)}), SENT)["delivered"] == 600


def test_record_tc_sums_the_ingress_programs(matrix):
    case = by_name(matrix)["tc drop, tcx"]

    def tc(*udp):
        facts = xdp_facts(999999)  # the passing XDP counter sees frames tc then drops: not what is counted
        facts["tc"]["ingress"] = [{"name": "tc_drop_count", "method": "tcx", "protocols": {"udp": n}} for n in udp]
        facts["tc"]["ingress"].append({"name": "other", "method": "cls_bpf", "counters": {}})
        return facts

    record = benchmark_record(case, 1, reading({"eth0": tc(10, 5)}), reading({"eth0": tc(1010, 1005)}), SENT)
    assert record["delivered"] == 2000 and record["per_port"] == {"eth0": 2000 / 3.0}
    empty = dict(xdp_facts(0), tc=None)
    assert benchmark_record(case, 1, reading({"eth0": empty}), reading({"eth0": tc(30)}), SENT)["delivered"] == 30


def test_record_stats_count_received_frames(matrix):
    case = by_name(matrix)["XDP drop, empty program, native"]
    record = benchmark_record(case, 1, reading({"eth0": xdp_facts(0, rx_packets=40)}),
                              reading({"eth0": xdp_facts(0, rx_packets=3000040)}), SENT)
    assert record["delivered"] == 3000000 and record["value"] == 1000000.0


def test_record_netfilter_counts_the_rule(matrix):
    case = by_name(matrix)["iptables raw drop"]
    record = benchmark_record(case, 3, reading({"eth0": xdp_facts(5)}, netfilter=12),
                              reading({"eth0": xdp_facts(2000005)}, netfilter=1500012), SENT)
    assert record["delivered"] == 1500000 and record["per_port"] == {"eth0": 500000.0}


def test_record_takes_the_strings_older_ansible_templates_give(matrix):
    # Before ansible-core 2.19 (meta/runtime.yml allows 2.16), set_fact renders "{{ n }}" as a string.
    case = by_name(matrix)["iptables raw drop"]
    sent = {"total": "3000000", "refused": "0", "seconds": "2.5", "cpus": [0]}
    record = benchmark_record(case, 1, reading({"eth0": xdp_facts(0)}, netfilter="10"),
                              reading({"eth0": xdp_facts(0)}, netfilter="2500010"), sent)
    assert record["value"] == 1000000.0 and record["seconds"] == 2.5 and record["offered_pps"] == 1200000.0


def test_record_multicast_counts_the_fanout_and_the_non_members(matrix):
    case = by_name(matrix)["broadcast 1 -> 3, native"]
    before = reading({end: xdp_facts(100) for end in NINE})
    after = reading({end: xdp_facts(100 + (300000 if end in NINE[:3] else 2)) for end in NINE})
    record = benchmark_record(case, 1, before, after, SENT)
    assert record["delivered"] == 900000 and record["value"] == 300000.0
    assert record["per_port"] == {"eth1": 100000.0, "eth2": 100000.0, "eth3": 100000.0}
    assert record["non_member_frames"] == 12
    assert record["host"] == dict(generator="sender", receiver="members")
    assert "non_member_frames" not in benchmark_record(
        by_name(matrix)["pktgen"], 1, reading({"eth0": xdp_facts(0)}), reading({"eth0": xdp_facts(1)}), SENT)


@pytest.mark.parametrize("sent", [dict(SENT, seconds=0), dict(SENT, seconds=None), {"total": 5}])
def test_record_needs_the_generator_s_time(matrix, sent):
    case = by_name(matrix)["pktgen"]
    with pytest.raises(AnsibleFilterError, match="benchmark pktgen: the generator reports no running time"):
        benchmark_record(case, 1, reading({"eth0": xdp_facts(0)}), reading({"eth0": xdp_facts(1)}), sent)


# benchmark_places, benchmark_hosts, benchmark_place_facts, benchmark_objects


def test_places_list_each_place_once_with_its_interfaces():
    places = benchmark_places(lab_params())
    assert places == [
        dict(host="sender", netns=None, key="sender", interfaces=["eth0", "eth1", "eth3"]),
        dict(host="receiver", netns=None, key="receiver", interfaces=["eth0", "eth1"]),
        dict(host="router", netns=None, key="router", interfaces=["eth0", "eth1"]),
        dict(host="switch", netns=None, key="switch", interfaces=["eth0"] + NINE),
        dict(host="members", netns=None, key="members", interfaces=NINE)]
    assert benchmark_places(lab_params(["generators"])) == [
        dict(host="sender", netns=None, key="sender", interfaces=["eth0"]),
        dict(host="receiver", netns=None, key="receiver", interfaces=["eth0"])]
    assert not benchmark_places(lab_params(["cost", "control"]))
    assert benchmark_hosts(places, ["receiver"]) == {
        "sender": [], "receiver": [], "router": [], "switch": [], "members": []}


def test_places_in_namespaces_are_keyed_host_slash_netns():
    params = lab_params(["drop", "forward"], drop=dict(receiver="vm", receiver_netns="receiver"),
                        forward=dict(forwarder="vm", forwarder_netns="router", receiver="vm",
                                     receiver_netns="receiver"))
    places = benchmark_places(params)
    assert [(p["key"], p["host"], p["netns"], p["interfaces"]) for p in places] == [
        ("sender", "sender", None, ["eth0", "eth1"]), ("vm/receiver", "vm", "receiver", ["eth0", "eth1"]),
        ("vm/router", "vm", "router", ["eth0", "eth1"])]
    assert benchmark_hosts(places, ["receiver"]) == {"sender": [], "vm": ["receiver", "router"], "receiver": []}
    assert benchmark_hosts([], []) == {}


def test_place_facts_give_macs_and_namespace_keys():
    results = [
        {"item": dict(host="receiver", netns=None, key="receiver", interfaces=["eth0"]),
         "ansible_facts": {"xdp": {"netns": "receiver", "interfaces": {
             "eth0": {"ifindex": 2, "mac": "02:00:00:00:02:01", "xdp": None}}}}},
        {"item": dict(host="vm", netns="receiver", key="vm/receiver", interfaces=["eth0", "eth1"]),
         "ansible_facts": {"xdp": {"netns": "receiver", "interfaces": {
             "eth0": {"ifindex": 5, "mac": "52:54:00:12:34:56"}, "eth1": {"ifindex": 6}}}}}]
    assert benchmark_place_facts(results, "mac") == {
        "receiver": {"eth0": "02:00:00:00:02:01"}, "vm/receiver": {"eth0": "52:54:00:12:34:56", "eth1": None}}
    assert benchmark_place_facts(results, "netns") == {"receiver": "receiver", "vm/receiver": "receiver"}


def test_objects_compile_each_source_under_src():
    assert benchmark_objects(["xdp_drop", "tc_redirect"], OBJECTS) == [
        dict(src=OBJECTS + "/src/xdp_drop.bpf.c", dest=OBJECTS + "/xdp_drop.o"),
        dict(src=OBJECTS + "/src/tc_redirect.bpf.c", dest=OBJECTS + "/tc_redirect.o")]


# benchmark_cost_records, benchmark_control_records


def cost_program(kind, verdict, runs, empty_runs):
    return dict(type=kind, id=4211, tag="8a80a4514121157e", verdict=verdict, retval=1, runs=runs,
                ns_per_packet=float(sorted(runs)[1]), empty_runs=empty_runs,
                empty_ns_per_packet=float(sorted(empty_runs)[1]),
                over_empty_ns=float(sorted(runs)[1] - sorted(empty_runs)[1]))


COST_RESULTS = [
    {"item": "xdp_drop_count", "object": OBJECTS + "/xdp_drop_count.o", "repeat": 1000000, "programs": {
        "xdp_drop_count": cost_program("xdp", "XDP_DROP", [47, 46, 49], [40, 41, 40])}},
    {"item": "tc_redirect", "object": OBJECTS + "/tc_redirect.o", "repeat": 1000000, "programs": {
        "tc_drop_count": cost_program("sched_cls", "TC_ACT_SHOT", [30, 31, 29], [20, 21, 22]),
        "redirect_act": cost_program("sched_act", "TC_ACT_REDIRECT", [35, 36, 37], [23, 24, 25])}},
    {"item": "xdp_redirect", "object": OBJECTS + "/xdp_redirect.o", "repeat": 1000000, "programs": {
        "xdp_redirect": cost_program("xdp", "XDP_REDIRECT", [60, 61, 62], [41, 42, 43])}},
]


def test_cost_records_compare_each_program_with_the_empty_one_of_its_hook():
    records = benchmark_cost_records(COST_RESULTS)
    cases = {}
    for record in records:
        assert record["family"] == "cost" and record["metric"] == "ns_per_packet"
        assert record["higher_is_better"] is False
        cases.setdefault(record["case"], []).append(record)
    assert list(cases) == ["xdp_drop_count (XDP_DROP)", "tc_drop_count (TC_ACT_SHOT)",
                           "redirect_act (TC_ACT_REDIRECT)", "xdp_redirect (XDP_REDIRECT)", "empty XDP program",
                           "empty tc program"]
    for name in cases:
        assert cases[name][0]["baseline"] in cases
    drop = cases["xdp_drop_count (XDP_DROP)"]
    assert [(r["round"], r["value"], r["baseline"]) for r in drop] == [
        (1, 47.0, "empty XDP program"), (2, 46.0, "empty XDP program"), (3, 49.0, "empty XDP program")]
    assert drop[0]["notes"] == "over the empty program: 7.0 ns"
    assert cases["tc_drop_count (TC_ACT_SHOT)"][0]["baseline"] == "empty tc program"
    assert cases["redirect_act (TC_ACT_REDIRECT)"][0]["baseline"] == "empty tc program"
    # Every empty run of a hook, taken after whichever program, is a round of its empty case.
    assert [(r["round"], r["value"]) for r in cases["empty XDP program"]] == list(enumerate(
        [40.0, 41.0, 40.0, 41.0, 42.0, 43.0], 1))
    assert [r["value"] for r in cases["empty tc program"]] == [20.0, 21.0, 22.0, 23.0, 24.0, 25.0]
    assert {r["baseline"] for r in cases["empty tc program"]} == {"empty tc program"}
    assert not benchmark_cost_records([])


def test_control_records_time_each_step_against_the_first():
    steps = ["ansible.builtin.ping", "ebpf.xdp.datapath, no change", "ebpf.xdp.bpf_object, cache miss (clang)",
             "ebpf.xdp.bpf_object, cache hit"]
    clock = ["1718000000.25", 1718000000.75, 1718000002.0, 1718000003.5, "1718000004.0"]
    records = benchmark_control_records(steps, clock, "2")
    assert [(r["case"], r["value"]) for r in records] == list(zip(steps, [0.5, 1.25, 1.5, 0.5]))
    assert {(r["family"], r["round"], r["baseline"], r["metric"], r["higher_is_better"]) for r in records} == {
        ("control", 2, "ansible.builtin.ping", "seconds", False)}


@pytest.mark.parametrize("readings", [4, 6])
def test_control_records_need_one_reading_more_than_steps(readings):
    with pytest.raises(AnsibleFilterError, match="4 steps need 5 clock readings, not %d" % readings):
        benchmark_control_records(["a", "b", "c", "d"], list(range(readings)), 1)


# benchmark_scrape_plan, benchmark_scrape_records


def test_scrape_plan_attaches_more_ends_at_each_step():
    plan = benchmark_scrape_plan([1, 4, 5], "bm", OBJECTS)
    assert plan["pairs"] == 3
    assert [[e["interface"] for e in step["xdp"]] for step in plan["steps"]] == [
        ["b0"], ["b0", "b1", "b2", "a0"], ["b0", "b1", "b2", "a0", "a1"]]
    assert [step["programs"] for step in plan["steps"]] == [1, 4, 5]
    assert plan["steps"][0]["xdp"] == [dict(interface="b0", netns="bm", object=OBJECTS + "/xdp_drop_count.o",
                                            program="xdp_drop_count", mode="native")]


@pytest.mark.parametrize("programs", [[], [0, 5], [5, 1], [1, 1], ["1"], [True]])
def test_scrape_plan_needs_increasing_numbers(programs):
    with pytest.raises(AnsibleFilterError, match="must be increasing numbers of programs"):
        benchmark_scrape_plan(programs, "bm", OBJECTS)


SCRAPE = {"seconds": [0.02, 0.03], "collect_seconds": [0.015, 0.02], "programs": [100, 100], "netns_down": [[], []],
          "samples": 900, "page_bytes": 120000, "rss_mib": 30.5, "hwm_mib": 31.0}


def test_scrape_records_one_per_scrape_against_the_first_step():
    records = benchmark_scrape_records(SCRAPE, 100, 1)
    assert [(r["case"], r["round"], r["value"]) for r in records] == [
        ("metrics scrape, 100 programs", 1, 0.02), ("metrics scrape, 100 programs", 2, 0.03)]
    assert {(r["family"], r["baseline"], r["metric"], r["higher_is_better"], r["notes"]) for r in records} == {
        ("control", "metrics scrape, 1 program", "seconds", False,
         "collect 20.0 ms (median), exporter: 900 samples, 117 KiB page, VmHWM 31.0 MiB")}


def test_scrape_records_need_every_page_to_show_every_program():
    # Not only the last page: a first scrape that missed them, the later ones collecting again, is an error.
    with pytest.raises(AnsibleFilterError, match=r"^benchmark metrics scrape: 100 programs are attached, the "
                       r"exporter shows scrape 1 of 2: 0 \(collect 0.015 s; not read: bm\)$"):
        benchmark_scrape_records(dict(SCRAPE, programs=[0, 100], netns_down=[["bm"], []]), 100, 1)
    with pytest.raises(AnsibleFilterError, match=r"shows scrape 2 of 2: 99 \(collect 0.02 s\)$"):
        benchmark_scrape_records(dict(SCRAPE, programs=[100, 99]), 100, 1)
    with pytest.raises(AnsibleFilterError, match="shows no page"):
        benchmark_scrape_records(dict(SCRAPE, programs=[]), 100, 1)


# benchmark_trafgen_result


TRAFGEN_OUTPUT = ("8 packets to schedule\n528 bytes in total\nRunning! Hang up with ^C!\n\n"
                  "\n  123456 packets outgoing\n  7407360 bytes outgoing\n"
                  "  1 sec, 2345 usec on CPU0 (123456 packets)\n")


def test_trafgen_result_reads_frames_and_cpu_time():
    assert benchmark_trafgen_result(TRAFGEN_OUTPUT) == dict(total=123456, seconds=pytest.approx(1.002345))
    # trafgen starts its result lines with a carriage return (over its progress line); generate.yml joins
    # stdout and stderr.
    carriage = TRAFGEN_OUTPUT.replace("\n  ", "\n\r  ")
    assert benchmark_trafgen_result(carriage) == benchmark_trafgen_result(TRAFGEN_OUTPUT)


@pytest.mark.parametrize("output", [
    "", None, "trafgen: Cannot bind to device eth0: No such device\n",
    "\n  123456 packets outgoing\n  7407360 bytes outgoing\n",  # stopped before it printed its time
])
def test_trafgen_garbage_is_an_error(output):
    with pytest.raises(AnsibleFilterError, match="trafgen printed no result"):
        benchmark_trafgen_result(output)


# benchmark_left_behind


GATHERED = {"xdp": [{"interface": "eth0", "object": "/var/lib/ebpf_xdp/objects/xdp_drop_count.o",
                     "program": "xdp_drop_count", "mode": "native"}], "tc": [], "devmap_groups": []}


def gathered(host, config):
    return {"item": host, "changed": False, "gathered": copy.deepcopy(config)}


def snapshot(key, netns, stdout):
    return {"item": dict(host="vm" if netns else key, netns=netns, key=key, interfaces=["eth0"]), "stdout": stdout}


def test_left_behind_is_empty_when_every_host_is_as_it_was():
    before = [gathered("receiver", GATHERED), gathered("router", {})]
    after = [gathered("receiver", GATHERED), gathered("router", {})]
    taken = benchmark_snapshot([snapshot("receiver", None, "link eth0\nqdisc clsact ffff:\n"),
                                snapshot("vm/receiver", "receiver", "\n")])
    assert taken == {"receiver": ["link eth0", "qdisc clsact ffff:"], "vm/receiver": []}
    assert benchmark_left_behind(before, after, taken, taken) == []


def test_left_behind_names_the_host_and_what_stayed_or_went():
    changed = copy.deepcopy(GATHERED)
    changed["tc"] = [{"interface": "eth0", "object": OBJECTS + "/tc_redirect.o", "program": "tc_drop_count"}]
    before = [gathered("receiver", GATHERED), gathered("router", {})]
    after = [gathered("receiver", changed), gathered("router", {})]
    was = benchmark_snapshot([snapshot("vm/switch", "switch", "link eth0\neth0 generic-receive-offload: off\n")])
    now = benchmark_snapshot([snapshot("vm/switch", "switch",
                                       "link eth0 enslaved\nlink brbench\nnftables table netdev ebpf_xdp_drop_eth0\n"
                                       "eth0 generic-receive-offload: off\n")])
    found = benchmark_left_behind(before, after, was, now)
    assert len(found) == 5
    assert found[0].startswith("receiver: its data path differs from before the benchmark: ")
    assert "tc_drop_count" in found[0]
    assert found[1:] == ["vm/switch: link brbench (new)", "vm/switch: link eth0 enslaved (new)",
                         "vm/switch: nftables table netdev ebpf_xdp_drop_eth0 (new)", "vm/switch: link eth0 (gone)"]


# The role's tasks


def test_every_filter_the_role_uses_is_registered():
    used = set()
    for tasks in (ROLE / "tasks").glob("*.yml"):
        used |= set(re.findall(r"\|\s*ebpf\.xdp\.(benchmark_\w+)", tasks.read_text()))
    assert "benchmark_matrix" in used and used <= set(FilterModule().filters())


RAW_GONE = "sh -c \"iptables-save -t raw | grep -q '^-A' || nft delete table ip raw\""


def test_the_iptables_case_removes_the_raw_table_only_where_the_benchmark_made_it():
    def raw_teardown(snapshot, **places):
        params = dict(with_facts(lab_params(["drop"], **places)), snapshot=snapshot)
        return next(case for case in benchmark_matrix(params) if case["case"] == "iptables raw drop")["teardown"]

    made = raw_teardown({"receiver": ["link eth0"]})
    assert [entry["lines"] for entry in made] == [[RAW_GONE]]
    assert raw_teardown({"receiver": ["nftables table ip raw"]}) == []
    # In a namespace of a host (the VM's): the whole line runs there, nft delete included (it once ran outside).
    inside = raw_teardown({"vm/receiver": ["link eth0"]}, drop=dict(receiver="vm", receiver_netns="receiver"))
    assert [entry["lines"] for entry in inside] == [["ip netns exec receiver " + RAW_GONE]]


# benchmark_machine


def test_machine_is_what_setup_read():
    facts = {"ansible_hostname": "vm", "ansible_kernel": "6.1.0-50-amd64", "ansible_processor_vcpus": 2,
             "ansible_processor": ["0", "AuthenticAMD", "AMD EPYC", "1", "AuthenticAMD", "AMD EPYC"],
             "ansible_distribution": "Debian", "ansible_distribution_version": "12.11"}
    assert benchmark_machine(facts) == dict(name="vm", kernel="6.1.0-50-amd64", cpu="AMD EPYC", vcpus=2,
                                            distribution="Debian 12.11")
    assert benchmark_machine({"ansible_processor": ["QEMU Virtual CPU"]})["cpu"] == "QEMU Virtual CPU"
