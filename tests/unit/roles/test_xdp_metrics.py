"""The pure parts of roles/xdp_metrics: configuration checks, facts -> samples, and the Grafana dashboard."""

import importlib
import importlib.util
import json
import os
import re
import sys
import threading
import time

import pytest

ROLE = os.path.join(os.path.dirname(__file__), "..", "..", "..", "roles", "xdp_metrics")
DASHBOARD = os.path.join(ROLE, "files", "grafana", "ebpf_xdp.json")


def _load_exporter():
    path = os.path.join(ROLE, "files", "ebpf_xdp_exporter.py")
    spec = importlib.util.spec_from_file_location("ebpf_xdp_exporter", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


exporter = _load_exporter()

FACTS = {
    "netns": "rx",
    "interfaces": {
        "eth0": {
            "ifindex": 2, "stats": {"rx_packets": 310, "tx_packets": 1, "rx_bytes": 18600, "tx_bytes": 60,
                                    "rx_dropped": 0, "tx_dropped": 0},
            "xdp": {"attached": True, "id": 42, "name": "xdp_drop_count", "tag": "8a80a4514121157e",
                    "mode": "native", "owner": "ebpf.xdp", "program": "xdp_drop_count",
                    "counters": {"proto_count": {"6": 100, "17": 200}, "mcast_frames": {"1": 10},
                                 "mcast_copies": {"1": 20}}, "protocols": {"tcp": 100, "udp": 200}},
            "tc": {"ingress": [{"id": 51, "name": "redirect_xmit", "tag": "aa", "method": "tcx", "owner": "ebpf.xdp",
                                "program": "redirect_xmit", "counters": {"redirect_count": {"0": 20, "1": 2}}}],
                   "egress": [{"id": 60, "name": "foreign", "tag": "bb", "method": "cls_bpf", "owner": "unmanaged",
                               "counters": {}},
                              {"id": 61, "name": "foreign", "tag": "bb", "method": "cls_bpf", "owner": "unmanaged",
                               "counters": {"hits": {"3": 5}}},
                              {"id": 62, "name": "foreign", "tag": "bb", "method": "cls_bpf", "owner": "unmanaged",
                               "counters": {"hits": {"3": 7}}}]},
        },
    },
    "devmap_groups": {"multicast": [
        {"id": 1, "name": "video", "members": [{"name": "eth1", "ifindex": 3}, {"name": "eth2", "ifindex": 4}],
         "frames": 10, "copies": 20, "owner": "ebpf.xdp"},
        {"id": 2, "name": None, "members": [], "frames": 0, "copies": 0, "owner": "unmanaged"}]},
}


def _samples(facts=None, config=None, errors=0):
    config = exporter.load_config(config or {})
    return exporter.build_samples(config, {"rx": FACTS if facts is None else facts}, 0.01, errors).values


ALL_PROGRAMS = {"unmanaged_programs": True}


def test_program_info_has_every_program_with_its_identity():
    info = _samples(config=ALL_PROGRAMS)["ebpf_xdp_program"]
    assert info[("rx", "eth0", "xdp", "xdp_drop_count", "", "native", "42", "8a80a4514121157e", "ebpf.xdp")] == 1
    assert ("rx", "eth0", "tc_ingress", "redirect_xmit", "", "tcx", "51", "aa", "ebpf.xdp") in info
    assert ("rx", "eth0", "tc_egress", "foreign", "", "cls_bpf", "60", "bb", "unmanaged") in info
    assert len(info) == 5


def test_other_tools_programs_are_left_out_unless_asked_for():
    values = _samples()
    assert {labels[-1] for labels in values["ebpf_xdp_program"]} == {"ebpf.xdp"}
    assert len(values["ebpf_xdp_program"]) == 2
    assert not [labels for labels in values["ebpf_xdp_map_entry"] if labels[3] == "foreign"]
    # An interface where only other tools' programs run is not ours to show either.
    facts = json.loads(json.dumps(FACTS))
    facts["interfaces"]["eth1"] = {"stats": {"rx_packets": 5}, "tc": {"egress": FACTS["interfaces"]["eth0"]["tc"]["egress"]}}
    assert _samples(facts)["ebpf_xdp_network_receive_packets"] == {("rx", "eth0"): 310}
    assert _samples(facts, ALL_PROGRAMS)["ebpf_xdp_network_receive_packets"] == {("rx", "eth0"): 310, ("rx", "eth1"): 5}


def test_protocol_counters_are_packets_by_protocol_name():
    packets = _samples()["ebpf_xdp_packets"]
    assert packets == {("rx", "eth0", "xdp", "xdp_drop_count", "", "proto_count", "tcp"): 100,
                       ("rx", "eth0", "xdp", "xdp_drop_count", "", "proto_count", "udp"): 200}


def test_other_maps_are_generic_counters_and_same_named_programs_add_up():
    values = _samples(config=ALL_PROGRAMS)
    counters = values["ebpf_xdp_map_entry"]
    assert counters[("rx", "eth0", "tc_ingress", "redirect_xmit", "", "redirect_count", "0")] == 20
    # Two foreign programs with one name on one hook: one series, their sum (never a duplicate series).
    assert counters[("rx", "eth0", "tc_egress", "foreign", "", "hits", "3")] == 12
    assert values["ebpf_xdp_map_entry_keys"][("rx", "eth0", "tc_ingress", "redirect_xmit", "", "redirect_count")] == 2


def test_named_attachments_of_one_program_on_one_hook_stay_apart():
    facts = json.loads(json.dumps(FACTS))
    named = [dict(facts["interfaces"]["eth0"]["tc"]["ingress"][0], id=70 + i, attachment=name,
                  counters={"redirect_count": {"0": 5 * (i + 1)}}) for i, name in enumerate(("first", "second"))]
    facts["interfaces"]["eth0"]["tc"]["ingress"] += named
    values = _samples(facts)
    counters = values["ebpf_xdp_map_entry"]
    assert [counters[("rx", "eth0", "tc_ingress", "redirect_xmit", name, "redirect_count", "0")]
            for name in ("", "first", "second")] == [20, 5, 10]
    assert ("rx", "eth0", "tc_ingress", "redirect_xmit", "second", "tcx", "71", "aa", "ebpf.xdp") in \
        values["ebpf_xdp_program"]


def test_keys_per_map_are_capped_but_counted():
    facts = json.loads(json.dumps(FACTS))
    facts["interfaces"]["eth0"]["tc"]["ingress"][0]["counters"]["redirect_count"] = {str(k): 1 for k in range(100)}
    values = _samples(facts, {"max_keys_per_map": 10})
    keys = [labels[-1] for labels in values["ebpf_xdp_map_entry"] if labels[3] == "redirect_xmit"]
    assert keys == [str(k) for k in range(10)]
    assert values["ebpf_xdp_map_entry_keys"][("rx", "eth0", "tc_ingress", "redirect_xmit", "", "redirect_count")] == 100


def test_interface_statistics_and_groups():
    values = _samples()
    assert values["ebpf_xdp_network_receive_packets"] == {("rx", "eth0"): 310}
    assert values["ebpf_xdp_network_receive_bytes"] == {("rx", "eth0"): 18600}
    assert values["ebpf_xdp_group_frames"] == {("rx", "multicast", "video", "1"): 10, ("rx", "multicast", "2", "2"): 0}
    assert values["ebpf_xdp_group_copies"][("rx", "multicast", "video", "1")] == 20
    assert values["ebpf_xdp_group_members"][("rx", "multicast", "video", "1")] == 2
    # The group counter maps, shared by every port of the set, are not repeated per port as generic counters.
    assert not [labels for labels in values["ebpf_xdp_map_entry"] if labels[5].startswith("mcast_")]


def test_a_namespace_that_failed_is_down_and_has_no_series():
    config = exporter.load_config({"service": "s"})
    values = exporter.build_samples(config, {"rx": None, "host": {"interfaces": {}}}, 0.5, 3).values
    assert values["ebpf_xdp_netns_up"] == {("rx",): 0, ("host",): 1}
    assert values["ebpf_xdp_program"] == {} and values["ebpf_xdp_collect_errors"] == {(): 3}
    assert values["ebpf_xdp_exporter"] == {("s", "http"): 1}


def test_every_metric_follows_the_naming_conventions():
    for name, (kind, text, labels) in exporter.METRICS.items():
        assert re.fullmatch(r"ebpf_xdp_[a-z_]+", name) and text, name
        assert not name.endswith("_total") and not name.endswith("_info"), name  # the client adds them
        assert kind in ("counter", "gauge", "info"), name
        assert len(set(labels)) == len(labels), name
    assert "ebpf_xdp_packets_total" in exporter.exposed_names()
    assert "ebpf_xdp_program_info" in exporter.exposed_names()
    assert "ebpf_xdp_collect_duration_seconds" in exporter.exposed_names()


@pytest.mark.parametrize("raw,message", [
    ({"mode": "push"}, "mode 'push' is not one of http, textfile"),
    ({"port": 70000}, "port 70000 is not a TCP port"),
    ({"port": "9436"}, "is not a TCP port"),
    ({"pin_root": "relative/path"}, "is not an absolute path"),
    ({"netns": "rx"}, "netns must be a list"),
    ({"textfile_path": "/tmp/metrics.txt"}, "must be an absolute path ending in .prom"),
    ({"interval": 0}, "interval 0 must be a positive number"),
    ({"max_keys_per_map": -1}, "max_keys_per_map -1"),
    ({"listen_address": ""}, "listen_address is empty"),
    ({"colour": "blue"}, "unknown setting(s) colour"),
    ({"unmanaged_programs": "yes"}, "unmanaged_programs 'yes' must be true or false"),
    ({"cache_seconds": -1}, "cache_seconds -1 must be a number of seconds >= 0"),
    ({"max_connections": 0}, "max_connections 0 must be a number >= 1"),
    ({"max_connections": True}, "max_connections True must be a number >= 1"),
    ({"request_timeout": 0}, "request_timeout 0 must be a positive number"),
    ({"web_config_file": "web.yml"}, "web_config_file 'web.yml' must be an absolute path"),
    ({"maps": "xdp_stats_map"}, "maps 'xdp_stats_map' must be a list of map name globs"),
    ({"maps": [""]}, "must be a list of map name globs"),
    ({"max_entries_per_map": 0}, "max_entries_per_map 0 must be a number >= 1"),
    ({"max_entries_per_map": -3}, "max_entries_per_map -3 must be a number >= 1"),
    ({"max_series_per_map": True}, "max_series_per_map True must be a number >= 1"),
])
def test_bad_configurations_are_named(raw, message):
    with pytest.raises(exporter.ConfigError, match=re.escape(message)):
        exporter.load_config(raw)


def test_wanted_namespaces_are_ours_and_those_with_pins(tmp_path):
    for name in ("rx", "tx", "own"):
        (tmp_path / name).mkdir()
    (tmp_path / "stray_file").write_text("")
    config = exporter.load_config({"pin_root": str(tmp_path)})
    assert exporter.wanted_namespaces(config, "own") == ["own", "rx", "tx"]
    assert exporter.wanted_namespaces(dict(config, netns=["tx", "tx"]), "own") == ["tx"]
    assert exporter.wanted_namespaces(dict(config, pin_root=str(tmp_path / "none")), "own") == ["own"]


# ---------------------------------------------------------------- one collection for concurrent scrapes


def _scrapes(max_age, collect_seconds=0.0):
    """Scrapes serving from a thread of its own (the exporter's main thread) until the test ends."""
    calls = []

    def collect_once():
        calls.append(threading.get_ident())
        time.sleep(collect_seconds)
        return len(calls)

    scrapes = exporter.Scrapes(collect_once, max_age)
    done = threading.Event()
    thread = threading.Thread(target=scrapes.serve, args=(done.is_set, 0.05), daemon=True)
    thread.start()
    return scrapes, calls, done, thread


def test_concurrent_scrapes_share_one_collection_in_one_thread():
    scrapes, calls, done, thread = _scrapes(max_age=60, collect_seconds=0.3)
    try:
        answers = []
        askers = [threading.Thread(target=lambda: answers.append(scrapes.get(5))) for _asker in range(8)]
        for asker in askers:
            asker.start()
        for asker in askers:
            asker.join()
        assert answers == [1] * 8 and len(calls) == 1
        assert calls[0] == thread.ident  # never in the askers' threads (setns moves only its caller)
        assert scrapes.get(5) == 1 and len(calls) == 1  # within max_age: from the cache
    finally:
        done.set()


def test_a_scrape_after_the_cache_interval_collects_again():
    scrapes, calls, done, _thread = _scrapes(max_age=0.2)
    try:
        assert scrapes.get(5) == 1
        time.sleep(0.3)
        assert scrapes.get(5) == 2 and len(calls) == 2
    finally:
        done.set()


def test_a_collection_begun_longer_than_the_cache_interval_ago_is_not_handed_to_a_new_scrape():
    # A slow collection (a namespace that takes long to read) still running when a scrape comes in more than
    # max_age after it began: what it shows is older than the cache allows, so the scrape waits for the next.
    release = threading.Event()
    calls = []

    def collect_once():
        calls.append(time.monotonic())
        if len(calls) == 1:
            release.wait(5)
        return len(calls)

    scrapes = exporter.Scrapes(collect_once, 0.2)
    done = threading.Event()
    threading.Thread(target=scrapes.serve, args=(done.is_set, 0.05), daemon=True).start()
    try:
        answers = {}
        first = threading.Thread(target=lambda: answers.update(first=scrapes.get(5)))
        first.start()
        time.sleep(0.4)
        asked = time.monotonic()
        late = threading.Thread(target=lambda: answers.update(late=scrapes.get(5)))
        late.start()
        time.sleep(0.1)
        release.set()
        first.join()
        late.join()
        # (The first scrape may get the second collection too, when it ends before that scrape wakes.)
        assert answers["late"] == 2 and answers["first"] in (1, 2), answers
        assert calls[1] >= asked  # the late scrape's page was collected after it asked
        # A scrape that came while a collection it may take was running shares it (max_age 0: one that began
        # after the scrape came).
        assert scrapes.get(5) == 2 and len(calls) == 2
    finally:
        release.set()
        done.set()


def test_with_no_cache_every_scrape_gets_a_collection_begun_after_it_came():
    release = threading.Event()
    calls = []

    def collect_once():
        calls.append(time.monotonic())
        if len(calls) == 1:
            release.wait(5)
        return len(calls)

    scrapes = exporter.Scrapes(collect_once, 0)
    done = threading.Event()
    threading.Thread(target=scrapes.serve, args=(done.is_set, 0.05), daemon=True).start()
    try:
        answers = {}
        first = threading.Thread(target=lambda: answers.update(first=scrapes.get(5)))
        first.start()
        time.sleep(0.1)
        asked = time.monotonic()
        others = [threading.Thread(target=lambda n=n: answers.update({n: scrapes.get(5)})) for n in range(4)]
        for other in others:
            other.start()
        time.sleep(0.1)
        release.set()
        for thread in [first] + others:
            thread.join()
        # The four that came during the first collection share the one after it.
        assert answers.pop("first") in (1, 2) and answers == {0: 2, 1: 2, 2: 2, 3: 2}, answers
        assert len(calls) == 2 and calls[1] >= asked
        assert scrapes.get(5) == 3
    finally:
        release.set()
        done.set()


def test_a_failed_collection_fails_the_scrapes_that_waited_for_it_and_the_next_scrape_collects_again():
    calls = []

    def collect_once():
        calls.append(1)
        if len(calls) == 1:
            raise OSError("netlink went away")
        return len(calls)

    scrapes = exporter.Scrapes(collect_once, 60)
    done = threading.Event()
    threading.Thread(target=scrapes.serve, args=(done.is_set, 0.05), daemon=True).start()
    try:
        with pytest.raises(RuntimeError):
            scrapes.get(5)
        assert scrapes.get(5) == 2 and scrapes.get(5) == 2 and len(calls) == 2
    finally:
        done.set()


def test_a_collection_slower_than_the_deadline_is_a_timeout():
    scrapes, _calls, done, _thread = _scrapes(max_age=0, collect_seconds=1.0)
    try:
        with pytest.raises(TimeoutError):
            scrapes.get(0.2)
    finally:
        done.set()


# ---------------------------------------------------------------- the dashboard


def _dashboard():
    with open(DASHBOARD, encoding="utf-8") as src:
        return json.load(src)


def _targets(panels):
    for panel in panels:
        yield from panel.get("targets", [])
        yield from _targets(panel.get("panels", []))


def test_dashboard_queries_use_exported_metrics_only():
    names = exporter.exposed_names()
    exprs = [target["expr"] for target in _targets(_dashboard()["panels"])]
    assert len(exprs) >= 10
    for expr in exprs:
        used = set(re.findall(r"\b(ebpf_xdp_[a-z_]+)\b", expr))
        assert used, expr
        assert used <= names, (expr, used - names)
    variables = [v.get("definition", "") for v in _dashboard()["templating"]["list"]]
    for text in variables:
        assert set(re.findall(r"\b(ebpf_xdp_[a-z_]+)\b", text)) <= names, text


def test_dashboard_has_the_panels_the_issue_asks_for():
    titles = {panel["title"] for panel in _dashboard()["panels"]}
    for title in ("Packets per interface", "Packets per program", "Packets per protocol", "Drop share",
                  "Group copies", "User map rates", "User map values"):
        assert title in titles
    ids = [panel["id"] for panel in _dashboard()["panels"]]
    assert len(ids) == len(set(ids))
    for panel in _dashboard()["panels"]:
        refs = [t["refId"] for t in panel.get("targets", [])]
        assert len(refs) == len(set(refs)), panel["title"]


def test_module_utils_import_from_the_roles_one_file(tmp_path):
    """module_utils.json (path -> source) gives packages, modules and their relative imports, as a tree would."""
    bundle = tmp_path / "module_utils.json"
    bundle.write_text(json.dumps({
        "zz_layer/__init__.py": "",
        "zz_layer/low.py": "VALUE = 41\n",
        "zz_top.py": "from ansible_collections.ebpf.xdp.plugins.module_utils.zz_layer import low as _low\n"
                     "VALUE = _low.VALUE + 1\n",
    }))
    finder = exporter._Bundled(str(bundle))
    prefix = exporter.MODULE_UTILS
    assert finder.find_spec("json") is None
    assert finder.is_package(prefix + ".zz_layer") and finder.is_package("ansible_collections")
    assert not finder.is_package(prefix + ".zz_top")
    sys.meta_path.insert(0, finder)
    try:
        module = importlib.import_module(prefix + ".zz_top")
        assert module.VALUE == 42
        assert module.__loader__.get_source(prefix + ".zz_layer.low") == "VALUE = 41\n"
    finally:
        sys.meta_path.remove(finder)
        for name in (prefix + ".zz_top", prefix + ".zz_layer", prefix + ".zz_layer.low"):
            sys.modules.pop(name, None)


STATS_MAP = {"id": 7, "name": "xdp_stats_map", "type": "percpu_array", "btf": True, "key_type": "__u32",
             "value_type": "struct xdp_stats_record", "entries_read": 5, "truncated": False, "entries_total": 5,
             "entries": [{"key": 1, "value": {"rx_packets": 30, "packets": 30, "rx_bytes": 2700, "bytes": 2700}},
                         {"key": 2, "value": {"rx_packets": 30, "packets": 30, "rx_bytes": 2700, "bytes": 2700}}]}
FLOWS_MAP = {"id": 8, "name": "flows", "type": "hash", "btf": True, "entries_read": 2, "truncated": True,
             "entries_total": None,
             "entries": [{"key": {"ifindex": 2, "addr": {"hex": "0a000001"}, "ports": [53, 54]},
                          "value": {"hist": [1, 2], "label": "dns", "state": "OPEN"}},
                         {"key": {"ifindex": 9, "addr": {"hex": "0a000002"}, "ports": [53, 55]},
                          "value": {"hist": [3, 4], "label": "dns", "state": "OPEN"}}]}


def _decoded_facts(maps, counters=None):
    return {"netns": "rx", "interface_names": {1: "lo", 2: "eth0"}, "interfaces": {"eth0": {
        "ifindex": 2, "stats": {},
        "xdp": {"id": 42, "name": "xdpfilt_alw_udp", "tag": "87", "mode": "generic", "owner": "ebpf.xdp",
                "program": "xdpfilt_alw_udp", "counters": counters or {}, "maps": maps}}}}


def _map_values(values):
    """ebpf_xdp_map_value's series as {(map, field, key labels...): value}."""
    fixed = len(exporter.MAP_VALUE_LABELS)
    return {(labels[5], labels[6]) + labels[fixed:]: value for labels, value in values["ebpf_xdp_map_value"].items()}


def test_every_number_of_a_decoded_map_is_a_sample_with_its_key_as_labels():
    values = _samples(_decoded_facts([STATS_MAP, FLOWS_MAP]))
    series = _map_values(values)
    # A struct value: a series per field (both names of a union's members), the key that is one number as key.
    assert series[("xdp_stats_map", "rx_packets", ("key", "1"))] == 30
    assert series[("xdp_stats_map", "bytes", ("key", "2"))] == 2700
    # A struct key: a label per field (array items and {hex} bytes too); an ifindex by its interface's name
    # where the namespace has it. Text and enumerators of the value are no numbers.
    assert series[("flows", "hist[1]", ("key_ifindex", "eth0"), ("key_addr", "0a000001"), ("key_ports_0", "53"),
                   ("key_ports_1", "54"))] == 2
    assert series[("flows", "hist[0]", ("key_ifindex", "9"), ("key_addr", "0a000002"), ("key_ports_0", "53"),
                   ("key_ports_1", "55"))] == 3
    assert len(series) == 8 + 4
    where = ("rx", "eth0", "xdp", "xdpfilt_alw_udp", "")
    assert values["ebpf_xdp_map_entries_read"][where + ("flows",)] == 2
    assert values["ebpf_xdp_map_truncated"][where + ("flows",)] == 1
    assert values["ebpf_xdp_map_truncated"][where + ("xdp_stats_map",)] == 0
    assert values["ebpf_xdp_map_series_dropped"][where + ("xdp_stats_map",)] == 0


def test_series_per_map_are_capped_and_what_was_left_out_is_counted():
    values = _samples(_decoded_facts([STATS_MAP, FLOWS_MAP]), {"max_series_per_map": 3})
    series = _map_values(values)
    assert len([s for s in series if s[0] == "xdp_stats_map"]) == 3
    assert len([s for s in series if s[0] == "flows"]) == 3
    where = ("rx", "eth0", "xdp", "xdpfilt_alw_udp", "")
    assert values["ebpf_xdp_map_series_dropped"][where + ("xdp_stats_map",)] == 5
    assert values["ebpf_xdp_map_series_dropped"][where + ("flows",)] == 1


def test_maps_of_counters_stay_counters_and_other_tools_maps_need_unmanaged():
    counters = dict(STATS_MAP, name="totals", entries=[{"key": 0, "value": 5}])
    values = _samples(_decoded_facts([counters], {"totals": {"0": 5}}))
    assert not values["ebpf_xdp_map_value"] and values["ebpf_xdp_map_entry"]
    foreign = _decoded_facts([STATS_MAP])
    foreign["interfaces"]["eth0"]["xdp"]["owner"] = "unmanaged"
    assert not _samples(foreign)["ebpf_xdp_map_value"]
    assert _samples(foreign, ALL_PROGRAMS)["ebpf_xdp_map_value"]


def test_a_web_server_file_that_is_missing_is_a_clear_error_not_a_traceback(tmp_path, monkeypatch, capsys):
    """Its install directory cleaned up under a running role (two benchmark runs at once did that, before the
    benchmark took its hosts one run at a time), or never installed: --check says which file and what to do."""
    missing = str(tmp_path / "ebpf_xdp_web.py")
    monkeypatch.setattr(exporter, "WEB_MODULE", missing)
    monkeypatch.delitem(sys.modules, "ebpf_xdp_web", raising=False)
    monkeypatch.setattr(exporter, "check_environment", lambda config: None)  # bpffs, module_utils: not the point
    config = tmp_path / "exporter.json"
    config.write_text(json.dumps({"service": "web-gone", "port": 1, "pid_file": str(tmp_path / "pid")}))
    assert exporter.main(["--config", str(config), "--check"]) == 2
    assert capsys.readouterr().err == (
        "ebpf_xdp_exporter: the exporter's web server %s cannot be read: No such file or directory (the role "
        "installs it next to the exporter: run it again)\n" % missing)
