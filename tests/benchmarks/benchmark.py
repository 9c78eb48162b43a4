#!/usr/bin/env python
"""playbooks/benchmark.py on the lab, as a user runs it, and a check of its report.

    .venv/bin/python tests/benchmarks/benchmark.py [--repeat 3] [--seconds 3] [--cases drop,forward] | --smoke

The measuring is the product's (role ebpf.xdp.benchmark, modules
netfilter_drop, program_cost, benchmark_report); this script brings the lab
up, runs the playbook with every case, and reads the report it wrote under
.build/benchmark-results/<start time>/.

A case fails where this kernel lacks what it needs (act_bpf, tcx, pktgen,
live frames for the generators family's xdp_trafficgen xdp case), as the
playbook promises: the script reads the kernel feature table of the
integration tests (probes independent of the collection) and requires that
exactly those cases failed, each with the collection's refusal words for its
feature (or its name), and that every other case ran. The drop, forward and
multicast families send with benchmark_generator auto: the report must say,
for every record and under each family's table, that xdp_trafficgen's live
frames sent them where this kernel takes live-frames runs, trafgen where it
refuses them. No case may count more frames than were offered (times the
members of a multicast case). --smoke runs, once for a fraction of a second, one case of each
traffic family with its baseline (SMOKE_CASES), every case whose kernel
feature is missing here (its clear refusal is what the smoke then checks),
and the cost and control families, and checks the report: its files,
delivered traffic in every round of every case run, no frame at a multicast
non-member, nothing left behind, and the control family's no-change converge
(the playbook fails when it changes anything); the exporter's scrapes with 1
and 10 programs instead of 100. The full run is what measures every case.
"""

import argparse
import glob
import json
import os
import re
import subprocess
import sys

from harness.ansible_cli import BIN, ENV, ROOT, playbook

sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
# pylint: disable-next=wrong-import-position
import kernel_features  # noqa: E402

RESULTS = os.path.join(ROOT, ".build", "benchmark-results")
# Cases that need a kernel feature (the word their refusal must name): (feature, family, case).
NEEDS = [("tcx", "drop", "tc drop, tcx"), ("tcx", "forward", "tc redirect, tcx"),
         ("tcx", "forward", "tc clone_redirect, tcx"), ("act_bpf", "forward", "tc redirect, act_bpf"),
         ("pktgen", "generators", "pktgen"), ("xdp_live_frames", "generators", "xdp_trafficgen, xdp")]
FAMILIES = ("drop", "forward", "multicast", "generators", "cost", "control")
# Every traffic case by family (as the report names them), and the smoke's: one case and its baseline each.
TRAFFIC_CASES = {
    "drop": ["XDP drop, xdp_drop_count, native", "XDP drop, xdp_drop_count, generic", "XDP drop, empty program, native",
             "tc drop, tcx", "tc drop, cls_bpf", "iptables raw drop", "nftables netdev ingress drop"],
    "forward": ["XDP redirect, native", "XDP redirect_map, native", "tc redirect, tcx", "tc redirect, cls_bpf",
                "tc redirect, act_bpf", "tc clone_redirect, tcx", "IP routing", "Linux bridge"],
    "multicast": ["redirect_map 1 -> %d, %s" % (1, mode) for mode in ("generic", "native")] + [
        "broadcast 1 -> %d, %s" % (fanout, mode) for fanout in (3, 9) for mode in ("generic", "native")] + [
        "Linux bridge 1 -> %d" % fanout for fanout in (1, 3, 9)],
    "generators": ["xdp_trafficgen, xdp", "xdp_trafficgen, socket", "pktgen", "trafgen (netsniff-ng)"],
}
# report.md's section titles of the families whose cases benchmark_generator sends.
TITLES = {"drop": "Drop", "forward": "Forward and redirect", "multicast": "Multicast"}
SMOKE_CASES = {"XDP drop, xdp_drop_count, native", "iptables raw drop", "XDP redirect, native", "Linux bridge",
               "broadcast 1 -> 3, native", "Linux bridge 1 -> 3", "xdp_trafficgen, socket", "xdp_trafficgen, xdp"}


def expected_failures(families):
    """case -> the feature it lacks on this kernel, for the chosen families."""
    table = kernel_features.features()
    return {case: feature for feature, family, case in NEEDS if family in families and not table[feature]}


def refusal_words(feature):
    """What a case's error must say where this kernel lacks the feature: the collection's words for the refusal
    (the integration tests' table), or the feature's name where the table has none."""
    return kernel_features.REFUSED_WITH.get(feature) or (feature,)


def expected_generator():
    """The generator (as the report names it) of the drop, forward and multicast cases with benchmark_generator
    auto, on this machine's lab (every sender a namespace of this kernel)."""
    return "xdp_trafficgen, xdp" if kernel_features.features()["xdp_live_frames"] else "trafgen (netsniff-ng)"


def record_fanout(record):
    """How many copies of each frame the case delivers: the members a multicast case sends to, else one."""
    found = re.search(r"1 -> (\d+)", record["case"]) if record["family"] == "multicast" else None
    return int(found.group(1)) if found else 1


def smoke_exclude(families):
    """The traffic cases the smoke leaves out: all but SMOKE_CASES and those this kernel must refuse."""
    refused = expected_failures(families)
    return sorted(case for family in families for case in TRAFFIC_CASES.get(family, ())
                  if case not in SMOKE_CASES and case not in refused)


def run(opts, excluded):
    playbook("lab_up.yml")
    before = set(glob.glob(os.path.join(RESULTS, "*")))
    extra = {"benchmark_results_dir": RESULTS, "benchmark_cases": opts.cases, "benchmark_repeat": opts.repeat,
             "benchmark_seconds": opts.seconds, "benchmark_cost_repeat": opts.cost_repeat,
             "benchmark_metrics_programs": [1, 10] if opts.smoke else [1, 100],
             "benchmark_metrics_scrapes": 3 if opts.smoke else 20,
             "benchmark_exclude": excluded,
             # set-up installed them; the lab's namespaces reach no mirror
             "benchmark_install_packages": False}
    env = dict(ENV, ANSIBLE_STDOUT_CALLBACK="ansible.builtin.default")
    proc = subprocess.run([os.path.join(BIN, "ansible-playbook"), os.path.join(ROOT, "playbooks", "benchmark.yml"),
                           "-e", json.dumps(extra)], env=env, cwd=ROOT, capture_output=True, text=True, check=False)
    made = sorted(set(glob.glob(os.path.join(RESULTS, "*"))) - before)
    if not made:
        sys.exit("benchmark.yml wrote no report (exit %d):\n%s" % (proc.returncode, proc.stdout[-4000:]))
    return proc, made[-1]


def check(report_dir, families, proc, smoke, excluded=()):
    """Problems with the report, as lines (none when it is sound)."""
    with open(os.path.join(report_dir, "results.json")) as f:
        report = json.load(f)
    problems = []
    for name in ["report.md"] + ["%s.png" % family for family in families]:
        if not os.path.getsize(os.path.join(report_dir, name)):
            problems.append("%s is empty" % name)
    with open(os.path.join(report_dir, "report.md")) as f:
        sections = {part.partition("\n")[0]: part for part in f.read().split("\n## ")}
    # Each traffic family's section names the generator that sent all its cases, and why.
    named = "Generator: **%s** (auto: on " % expected_generator()
    problems += ["report.md does not say, under %s, %r" % (TITLES[family], named) for family in families
                 if family in TITLES and named not in sections.get(TITLES[family], "")]
    if report["machine"].get("left_behind") not in ("nothing", [], None):
        problems.append("left behind: %s" % report["machine"]["left_behind"])
    expected = expected_failures(families)
    generator = expected_generator()
    failed = {}
    for record in report["results"]:
        said = record.get("generator") or {}
        if record["family"] in ("drop", "forward", "multicast") and (
                said.get("name") != generator or not said.get("why")):
            problems.append("%s round %d: sent by %s, not by %s (benchmark_generator auto on this kernel)"
                            % (record["case"], record["round"], said or "no generator named", generator))
        if record.get("error"):
            failed[record["case"]] = record["error"]
            continue
        if record["metric"] == "delivered_pps" and not record.get("delivered"):
            problems.append("%s round %d delivered nothing" % (record["case"], record["round"]))
        # More than was offered (to each member) is someone else's traffic counted. A few frames of slack: the
        # interface statistics count the kernel's own (IPv6 neighbour discovery).
        if record["metric"] == "delivered_pps" and record.get("delivered", 0) > (
                record.get("sent", 0) * record_fanout(record) + 100):
            problems.append("%s round %d: %d frames delivered of %d offered" % (
                record["case"], record["round"], record["delivered"], record.get("sent", 0)))
        if record["family"] == "multicast" and record.get("non_member_frames"):
            problems.append("%s: %d frames reached non-members" % (record["case"], record["non_member_frames"]))
        if not record.get("value", 0) > 0:
            problems.append("%s round %d measured %s" % (record["case"], record["round"], record.get("value")))
    for case, error in failed.items():
        if case not in expected:
            problems.append("%s could not run: %s" % (case, error))
        elif not any(words in error for words in refusal_words(expected[case])):
            problems.append("%s failed without saying %s: %s"
                            % (case, " or ".join(map(repr, refusal_words(expected[case]))), error))
    for case in set(expected) - set(failed):
        problems.append("%s ran, but this kernel lacks %s" % (case, expected[case]))
    ran = {record["family"] for record in report["results"]}
    problems += ["the family %s has no record" % family for family in families if family not in ran]
    recorded = {record["case"] for record in report["results"]}
    problems += ["%s has no record" % case for family in families for case in TRAFFIC_CASES.get(family, ())
                 if case not in excluded and case not in recorded]
    if (proc.returncode == 0) != (not expected):
        problems.append("benchmark.yml exited %d with %d case(s) expected to fail"
                        % (proc.returncode, len(expected)))
    if smoke and not problems:
        print("smoke: report sound; failed as this kernel requires: %s" % (", ".join(sorted(failed)) or "none"))
    return problems


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--cost-repeat", type=int, default=1000000)
    parser.add_argument("--cases", default=",".join(FAMILIES))
    parser.add_argument("--smoke", action="store_true", help="briefly, one case a family: does the benchmark work?")
    opts = parser.parse_args()
    if opts.smoke:
        opts.repeat, opts.seconds, opts.cost_repeat = 1, 0.5, 10000
    families = [family.strip() for family in opts.cases.split(",")]
    excluded = smoke_exclude(families) if opts.smoke else []
    proc, report_dir = run(opts, excluded)
    with open(os.path.join(report_dir, "report.md")) as f:
        print(f.read())
    problems = check(report_dir, families, proc, opts.smoke, excluded)
    if problems:
        print(proc.stdout[-3000:])
        sys.exit("benchmark.py: %s" % "\n".join(problems))


if __name__ == "__main__":
    main()
