"""bench/report: the summary (median, spread, ratio to a baseline), failed cases, and report.md's shape."""

import json
import math
import re

import pytest

from ansible_collections.ebpf.xdp.plugins.module_utils.bench import report as _report

IPTABLES = "iptables raw drop"
XDP = "XDP drop (xdp_drop_count), native"
ACT_BPF = "tc drop, act_bpf"
NO_ACT_BPF = "act_bpf: this kernel has no CONFIG_NET_ACT_BPF"


def pps(case, round_, value, baseline=IPTABLES, family="drop", **extra):
    return dict(family=family, case=case, round=round_, metric="delivered_pps", value=value, baseline=baseline,
                **extra)


def drop_records():
    return [pps(IPTABLES, 1, 4.7e6, offered_pps=7.8e6), pps(XDP, 1, 23e6, offered_pps=24e6),
            pps(IPTABLES, 2, 4.9e6, offered_pps=7.6e6), pps(XDP, 2, 25e6, offered_pps=24e6),
            pps(IPTABLES, 3, 4.8e6, offered_pps=7.7e6), pps(XDP, 3, 24.5e6, offered_pps=24e6),
            dict(family="drop", case=ACT_BPF, round=1, metric="delivered_pps", baseline=IPTABLES, error=NO_ACT_BPF)]


def summary_of(records, published=None):
    return {e["case"]: e for e in _report.summarise(_report.normalise(records), published)}


def table_rows(markdown, header_start):
    """The lines of the table whose header starts with header_start, header and alignment row included."""
    lines = markdown.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header_start))
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))
    return lines[start:end]


def cells(row):
    # An escaped pipe (\|) is inside a cell.
    return re.split(r"(?<!\\)\|", row.strip())[1:-1]


def test_median_min_max_spread_and_ratio_to_the_baseline():
    summary = summary_of(drop_records())
    base, xdp = summary[IPTABLES], summary[XDP]
    assert (base["rounds"], base["median"], base["min"], base["max"]) == (3, 4.8e6, 4.7e6, 4.9e6)
    assert base["spread"] == pytest.approx(0.2e6 / 4.8e6)
    assert base["is_baseline"] and base["baseline"] == IPTABLES and base["ratio"] == 1.0
    assert xdp["median"] == 24.5e6 and xdp["ratio"] == pytest.approx(24.5 / 4.8)
    assert xdp["baseline"] == IPTABLES and not xdp["is_baseline"]
    assert xdp["offered_pps"] == 24e6 and base["offered_pps"] == 7.7e6


def test_an_even_number_of_rounds_has_the_mean_of_the_middle_two_as_median():
    summary = summary_of([pps(IPTABLES, 1, 1.0), pps(IPTABLES, 2, 4.0), pps(IPTABLES, 3, 2.0), pps(IPTABLES, 4, 3.0)])
    assert summary[IPTABLES]["median"] == 2.5


def test_a_baseline_that_names_itself_or_nothing_is_the_same_baseline():
    named_self = summary_of(drop_records())
    unnamed = summary_of([dict(r, baseline=None) if r["case"] == IPTABLES else r for r in drop_records()])
    assert named_self == unnamed


def test_a_family_without_a_baseline_has_no_ratios():
    records = [pps("generator %s" % engine, 1, value, baseline=None, family="generators")
               for engine, value in (("xdp", 7.8e6), ("socket", 0.6e6))]
    summary = _report.summarise(_report.normalise(records))
    assert [e["ratio"] for e in summary] == [None, None]
    assert not any(e["is_baseline"] for e in summary)
    text = _report.markdown("t", {}, summary)
    assert "No case of this family names a baseline: no ratios." in text
    assert [cells(row)[5].strip() for row in table_rows(text, "| case | rounds")[2:]] == ["—", "—"]


def test_a_failed_case_is_summarised_reported_and_listed():
    records = drop_records()
    summary = summary_of(records)
    failed = summary[ACT_BPF]
    assert (failed["rounds"], failed["median"], failed["ratio"], failed["spread"]) == (0, None, None, None)
    assert failed["failed_rounds"] == [1] and failed["error"] == NO_ACT_BPF
    assert _report.failed_cases(list(summary.values())) == [ACT_BPF]
    text = _report.markdown("t", {}, list(summary.values()), plots={"drop": "drop.png"})
    row = next(r for r in table_rows(text, "| case | rounds") if r.startswith("| " + ACT_BPF))
    assert cells(row)[2].strip() == "failed"
    assert "- **%s** (round 1): %s" % (ACT_BPF, NO_ACT_BPF) in text
    assert "![drop](drop.png)" in text


def test_a_case_with_some_failed_rounds_is_summarised_over_the_others():
    records = [pps(IPTABLES, 1, 4e6), pps(IPTABLES, 2, 6e6),
               dict(family="drop", case=IPTABLES, round=3, metric="delivered_pps", error="receiver counted nothing")]
    entry = summary_of(records)[IPTABLES]
    assert (entry["rounds"], entry["median"], entry["failed_rounds"]) == (2, 5e6, [3])
    assert entry["error"] == "receiver counted nothing"
    text = _report.markdown("t", {}, [entry])
    assert "round 3 failed" in text and "- **%s** (round 3): receiver counted nothing" % IPTABLES in text


def test_a_family_whose_cases_all_failed_has_no_plot():
    records = [dict(family="forward", case="tc redirect, act_bpf", round=1, metric="delivered_pps",
                    error=NO_ACT_BPF)]
    report = _report.Report(records)
    assert report.plotted() == [] and report.file_names() == ["results.json", "report.md"]
    assert "No plot: no case of this family has a measurement." in report.content("report.md", plot=None).decode()


def test_lower_is_better_keeps_the_plain_ratio_and_says_below_1_is_better():
    records = [dict(family="cost", case="xdp_drop_count", round=1, metric="ns_per_packet", value=30.0,
                    baseline="empty XDP"),
               dict(family="cost", case="empty XDP", round=1, metric="ns_per_packet", value=12.0)]
    summary = _report.summarise(_report.normalise(records))
    assert [e["higher_is_better"] for e in summary] == [False, False]
    assert summary[0]["ratio"] == pytest.approx(2.5)
    text = _report.markdown("t", {}, summary)
    assert "below 1 is better (fewer nanoseconds per packet)" in text
    assert "| 30.0 ns |" in text and "| 2.50 |" in text


def test_higher_is_better_given_against_the_metric_is_kept_and_said():
    records = [dict(family="control", case="cache hit", round=1, metric="seconds", value=2.0, baseline="miss",
                    higher_is_better=True),
               dict(family="control", case="miss", round=1, metric="seconds", value=4.0, higher_is_better=True)]
    text = _report.markdown("t", {}, _report.summarise(_report.normalise(records)))
    assert "above 1 is better (seconds: higher is better in these cases)" in text


def test_markdown_tables_have_a_cell_for_every_column():
    records = drop_records() + [
        dict(family="multicast", case="devmap broadcast 1->3 | native", round=1, metric="delivered_pps", value=3e6,
             per_port={"m1": 1e6, "m2": 1e6, "m3": 1e6}, non_member_frames=0, notes="two\nlines",
             cpus={"generator": [0, 1, 2, 5]}, host={"generator": "sender", "switch": "switch"})]
    machine = {"controller": {"kernel": "6.18.0", "cpus": 2}, "date": "2026-12-02", "hosts": ["sender", "router"]}
    published = {"%s / %s" % (XDP, IPTABLES): "paper: 5x", "XDP forwarding / routing": "~3x"}
    text = _report.markdown("My bench", machine, _report.summarise(_report.normalise(records), published), published)
    assert text.startswith("# My bench\n\n## Machine\n\n- controller:\n  - kernel: 6.18.0\n  - cpus: 2\n")
    assert "- hosts: sender, router" in text
    sections = [line for line in text.splitlines() if line.startswith("## ")]
    assert sections == ["## Machine", "## Drop", "## Multicast", "## Published numbers"]
    for header in ("| case | rounds", "| case | per port", "| case or ratio"):
        for table in [table_rows(text, header)]:
            width = len(cells(table[0]))
            assert all(len(cells(row)) == width for row in table), table
            assert set(cells(table[1])) <= {"---", "---:"}
    assert "devmap broadcast 1->3 \\| native" in text and "two lines" in text
    assert "generator: sender, CPU 0-2,5; switch: switch" in text
    assert "m1 1.000 Mpps, m2 1.000 Mpps, m3 1.000 Mpps" in text
    xdp_row = next(r for r in table_rows(text, "| case | rounds") if r.startswith("| " + XDP))
    assert [c.strip() for c in cells(xdp_row)[1:7]] == [
        "3", "24.500 Mpps", "23.000–25.000 Mpps", "8.2%", "%.2f" % (24.5 / 4.8), "24.000 → 24.500 Mpps"]
    assert "published: paper: 5x" in xdp_row
    published = table_rows(text, "| case or ratio")
    assert "| %s / %s | paper: 5x | %.2f |" % (XDP, IPTABLES, 24.5 / 4.8) in published
    assert "| XDP forwarding / routing | ~3x | — (no case or ratio of this run has this name) |" in published


def test_per_port_shows_where_it_says_more_than_the_delivered_column():
    single = [pps(IPTABLES, 1, 4.8e6, per_port={"eth0": 4.8e6}, cpus={"generator": []}, host={"generator": "s"})]
    text = _report.markdown("t", {}, _report.summarise(_report.normalise(single)))
    assert "| case | per port" not in text and "| generator: s |" in text
    fanout = [dict(family="multicast", case="bridge flooding 1->3", round=1, metric="delivered_pps", value=3e6,
                   per_port={"m1": 1e6, "m2": 1e6, "m3": 1e6}, non_member_frames=0)]
    text = _report.markdown("t", {}, _report.summarise(_report.normalise(fanout)))
    assert "| bridge flooding 1->3 | m1 1.000 Mpps, m2 1.000 Mpps, m3 1.000 Mpps | 0 |" in text


def test_a_case_name_answers_a_published_number_with_its_median():
    summary = summary_of(drop_records(), published={IPTABLES: "paper: 4.8 Mpps"})
    assert summary[IPTABLES]["published"] == "paper: 4.8 Mpps"
    text = _report.markdown("t", {}, list(summary.values()), published={IPTABLES: "paper: 4.8 Mpps"})
    assert "| %s | paper: 4.8 Mpps | 4.800 Mpps |" % IPTABLES in text


def test_records_keep_only_what_was_given_and_results_json_round_trips():
    given = [dict(pps(IPTABLES, 1, 4.8e6), sent=None, notes=None)]
    report = _report.Report(given, machine={"date": "today"})
    assert report.records == [dict(pps(IPTABLES, 1, 4.8e6), higher_is_better=True)]
    document = json.loads(report.content("results.json", plot=None))
    assert document == dict(machine={"date": "today"}, results=report.records, summary=report.summary)


@pytest.mark.parametrize("records, said", [
    ([dict(pps(IPTABLES, 1, 4.8e6), error="no")], "a case that could not run (error: no) has no value"),
    ([dict(pps(IPTABLES, 1, None))], "neither a value nor an error"),
    ([pps(IPTABLES, 1, 4.8e6), pps(IPTABLES, 1, 4.9e6)], "the same round as results[0]"),
    ([pps(IPTABLES, 0, 4.8e6)], "rounds count from 1"),
    ([pps(IPTABLES, 1, -1.0)], "value must be a finite number, 0 or more, not -1.0"),
    ([pps(IPTABLES, 1, math.nan)], "value must be a finite number"),
    ([dict(pps(IPTABLES, 1, 4.8e6), case=" ")], "results[0]: case must name the case"),
    ([pps(XDP, 1, 24e6, baseline="iptables")], "its baseline 'iptables' is not a case of family drop (its cases: "),
    ([pps(XDP, 1, 24e6), dict(pps(IPTABLES, 1, 30.0), metric="ns_per_packet")], "a ratio needs one metric"),
    ([pps(XDP, 1, 24e6), pps(XDP, 2, 24e6, baseline=None), pps(IPTABLES, 1, 4.8e6)],
     "its rounds give different baseline: 'iptables raw drop', None"),
    ([dict(pps(IPTABLES, 1, 4.8e6), per_port={"m1": "fast"})], "port m1 has 'fast'"),
    ([dict(pps(IPTABLES, 1, 4.8e6), cpus={"generator": [-1]})], "role generator has [-1]"),
])
def test_records_that_cannot_be_summarised_are_refused_by_name(records, said):
    with pytest.raises(_report.ReportError) as error:
        _report.Report(records)
    assert said in str(error.value)


def test_a_baseline_is_looked_for_in_its_own_family_only():
    records = [pps(XDP, 1, 24e6), dict(pps(IPTABLES, 1, 4.8e6), family="forward")]
    with pytest.raises(_report.ReportError, match="is not a case of family drop"):
        _report.Report(records)


TRAFGEN = dict(name="trafgen (netsniff-ng)", why="auto: the kernel of sender refuses live-frames test runs (EPERM)")


def test_one_generator_of_every_case_is_one_sentence_under_the_table():
    records = [dict(r, generator=TRAFGEN) for r in drop_records()]
    summary = _report.summarise(_report.normalise(records))
    assert {e["case"]: e["generator"] for e in summary} == dict.fromkeys([IPTABLES, XDP, ACT_BPF], TRAFGEN)
    drop = "\n".join(_report.family_markdown("drop", summary, None))
    assert drop.count("Generator") == 1
    assert ("\nGenerator: **trafgen (netsniff-ng)** (auto: the kernel of sender refuses live-frames test runs "
            "(EPERM)).\n") in drop


def test_several_generators_each_name_their_cases():
    xdp = dict(name="xdp_trafficgen, xdp", why="benchmark_generator: xdp_trafficgen")
    records = [pps(IPTABLES, 1, 1e5, generator=TRAFGEN), pps(XDP, 1, 6e5, generator=xdp),
               pps(ACT_BPF, 1, None, generator=TRAFGEN), pps("no generator said", 1, 1e5)]
    del records[2]["value"]
    records[2]["error"] = NO_ACT_BPF
    lines = _report.family_markdown("drop", _report.summarise(_report.normalise(records)), None)
    start = lines.index("Generators:")
    assert lines[start + 2:start + 4] == [
        "- **trafgen (netsniff-ng)** (%s): %s, %s" % (TRAFGEN["why"], IPTABLES, ACT_BPF),
        "- **xdp_trafficgen, xdp** (benchmark_generator: xdp_trafficgen): %s" % XDP]


def test_a_family_named_by_its_generators_or_without_any_says_nothing_of_them():
    own = "the generators family measures each generator"
    records = [pps(name, 1, 1e5, baseline="pktgen", family="generators", generator=dict(name=name, why=own))
               for name in ("pktgen", "trafgen (netsniff-ng)")]
    assert not _report._generator_lines(_report.summarise(_report.normalise(records)))
    assert not _report._generator_lines(_report.summarise(_report.normalise(drop_records())))
