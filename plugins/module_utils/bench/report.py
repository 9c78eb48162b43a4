# -*- coding: utf-8 -*-
# Copyright (c) ebpf.xdp contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""ebpf.xdp.benchmark_report: a benchmark's measurements summarised per case and written into a directory as
results.json, report.md and one plot per family.

Private to the ebpf.xdp collection: the interface may change without notice.

A case is compared with its baseline by the ratio of their medians, value / baseline, whatever the metric:
above 1 is better where higher is better (delivered packets per second), below 1 where lower is better
(nanoseconds per packet, seconds). One convention for every metric keeps a ratio what a reader computes from
the two medians in the same table; the report says next to each table which way is better.

A case that could not run is a record with an error and no value. It stays in the summary, the tables, the
plots and failed_cases, never dropped; the playbook decides whether that fails the run.
"""

from __future__ import annotations

import json
import math
import os
import statistics
from dataclasses import dataclass

from ansible_collections.ebpf.xdp.plugins.module_utils.host import cpus as _cpus, files as _files
from ansible_collections.ebpf.xdp.plugins.module_utils._errors import EbpfXdpError

# The families in the order the report shows them (issue 20's matrix).
FAMILIES = ("drop", "forward", "multicast", "generators", "cost", "control")
FAMILY_TITLES = {"drop": "Drop", "forward": "Forward and redirect", "multicast": "Multicast",
                 "generators": "Generators", "cost": "Program cost", "control": "Control plane"}
DEFAULT_TITLE = "ebpf.xdp benchmark"


@dataclass(frozen=True)
class Metric:
    """How a metric's figures are shown: in `unit`, which is `scale` of the measured unit."""

    unit: str
    scale: float
    digits: int
    axis: str
    higher_is_better: bool
    better: str


METRICS = {
    "delivered_pps": Metric("Mpps", 1e6, 3, "delivered Mpps", True, "more delivered packets per second"),
    "ns_per_packet": Metric("ns", 1.0, 1, "ns per packet", False, "fewer nanoseconds per packet"),
    "seconds": Metric("s", 1.0, 3, "seconds", False, "fewer seconds"),
}
PLOT_SUFFIX = ".png"
RESULTS_JSON = "results.json"
REPORT_MD = "report.md"


class ReportError(EbpfXdpError):
    """Measurements that cannot be summarised as given, or a directory the report cannot be written into."""


def normalise(results: list[dict]) -> list[dict]:
    """The records as results.json keeps them: keys without a value left out, higher_is_better filled in from
    the metric. What the argument spec cannot say is checked here; ReportError names the record."""
    records, seen = [], {}
    for index, given in enumerate(results):
        record = {key: value for key, value in given.items() if value is not None}
        where = "results[%d] (%s, %r, round %s)" % (
            index, record.get("family"), record.get("case"), record.get("round"))
        if not str(record.get("case", "")).strip():
            raise ReportError("results[%d]: case must name the case" % index)
        if record["round"] < 1:
            raise ReportError("%s: rounds count from 1" % where)
        key = (record["family"], record["case"], record["round"])
        if key in seen:
            raise ReportError("%s: the same round as results[%d]" % (where, seen[key]))
        seen[key] = index
        if "error" in record:
            if "value" in record:
                raise ReportError("%s: a case that could not run (error: %s) has no value; leave value out"
                                  % (where, record["error"]))
        elif "value" not in record:
            raise ReportError("%s: neither a value nor an error; a case that could not run says why in error"
                              % where)
        for name in ("value", "offered_pps", "seconds", "sent", "delivered", "non_member_frames"):
            if name in record and not (math.isfinite(record[name]) and record[name] >= 0):
                raise ReportError("%s: %s must be a finite number, 0 or more, not %s" % (where, name, record[name]))
        _check_maps(where, record)
        record.setdefault("higher_is_better", METRICS[record["metric"]].higher_is_better)
        records.append(record)
    return records


def _check_maps(where: str, record: dict) -> None:
    """per_port and cpus, whose values the argument spec cannot type."""
    for port, pps in (record.get("per_port") or {}).items():
        if isinstance(pps, bool) or not isinstance(pps, (int, float)) or not (math.isfinite(pps) and pps >= 0):
            raise ReportError("%s: per_port maps a port to its delivered pps, a number 0 or more; port %s has %r"
                              % (where, port, pps))
    for role, cpus in (record.get("cpus") or {}).items():
        if isinstance(cpus, str):
            continue
        if not isinstance(cpus, list) or not all(isinstance(c, int) and not isinstance(c, bool) and c >= 0
                                                 for c in cpus):
            raise ReportError("%s: cpus maps a role to its CPUs, a list of CPU numbers or a CPU list such as "
                              "'0-3'; role %s has %r" % (where, role, cpus))


def summarise(records: list[dict], published: dict | None = None) -> list[dict]:
    """One entry per (family, case): families in FAMILIES' order, cases in the order the records name them."""
    by_case: dict[tuple, list] = {}
    for record in records:
        by_case.setdefault((record["family"], record["case"]), []).append(record)
    entries = [_entry(family, case, sorted(rounds, key=lambda r: r["round"]))
               for (family, case), rounds in by_case.items()]
    entries.sort(key=lambda e: FAMILIES.index(e["family"]))
    for family in FAMILIES:
        _compare(family, [e for e in entries if e["family"] == family])
    for entry in entries:
        entry["published"] = _published(entry, published or {})
    return entries


def _entry(family: str, case: str, rounds: list[dict]) -> dict:
    for name in ("metric", "baseline", "higher_is_better"):
        # A baseline names itself or nothing: either way the same.
        said = dict.fromkeys(r.get(name) if (name, r.get(name)) != ("baseline", case) else None for r in rounds)
        if len(said) > 1:
            raise ReportError("%s, case %r: its rounds give different %s: %s"
                              % (family, case, name, ", ".join(map(repr, said))))
    measured = [r for r in rounds if "value" in r]
    failed = [r for r in rounds if "error" in r]
    values = sorted(r["value"] for r in measured)
    median = statistics.median(values) if values else None
    return dict(
        family=family, case=case, metric=rounds[0]["metric"], higher_is_better=rounds[0]["higher_is_better"],
        baseline=next((r["baseline"] for r in rounds if "baseline" in r), None), is_baseline=False,
        rounds=len(values), failed_rounds=[r["round"] for r in failed],
        median=median, min=values[0] if values else None, max=values[-1] if values else None,
        spread=(values[-1] - values[0]) / median if median else None, ratio=None,
        offered_pps=_median(measured, "offered_pps"), sent=_median(measured, "sent"),
        delivered=_median(measured, "delivered"), per_port=_per_port(measured),
        non_member_frames=sum(r["non_member_frames"] for r in measured if "non_member_frames" in r)
        if any("non_member_frames" in r for r in measured) else None,
        cpus=next((r["cpus"] for r in rounds if "cpus" in r), None),
        host=next((r["host"] for r in rounds if "host" in r), None),
        generator=next((r["generator"] for r in rounds if "generator" in r), None),
        notes="; ".join(dict.fromkeys(r["notes"] for r in rounds if "notes" in r)) or None,
        error="; ".join(dict.fromkeys(r["error"] for r in failed)) or None)


def _median(records: list[dict], name: str) -> float | None:
    values = [r[name] for r in records if name in r]
    return statistics.median(values) if values else None


def _per_port(records: list[dict]) -> dict | None:
    ports: dict[str, list] = {}
    for record in records:
        for port, pps in (record.get("per_port") or {}).items():
            ports.setdefault(str(port), []).append(float(pps))
    return {port: statistics.median(values) for port, values in ports.items()} or None


def _compare(family: str, entries: list[dict]) -> None:
    """A case names its baseline, a baseline itself or nothing: a case that others name is a baseline either
    way (ratio 1). The ratio is the case's median over its baseline's, None when either has none."""
    by_name = {e["case"]: e for e in entries}
    named = {e["baseline"] for e in entries if e["baseline"]}
    for entry in entries:
        entry["is_baseline"] = entry["case"] in named
        if entry["is_baseline"]:
            entry["baseline"] = entry["case"]
        if not entry["baseline"]:
            continue
        base = by_name.get(entry["baseline"])
        if base is None:
            raise ReportError("%s, case %r: its baseline %r is not a case of family %s (its cases: %s)"
                              % (family, entry["case"], entry["baseline"], family, ", ".join(map(repr, by_name))))
        if base["metric"] != entry["metric"]:
            raise ReportError("%s, case %r measures %s, its baseline %r %s: a ratio needs one metric"
                              % (family, entry["case"], entry["metric"], base["case"], base["metric"]))
        if entry["median"] is not None and base["median"]:
            entry["ratio"] = entry["median"] / base["median"]


def ratio_label(entry: dict) -> str | None:
    """'case / baseline', the name published numbers of a ratio are given under."""
    if entry["baseline"] and entry["baseline"] != entry["case"]:
        return "%s / %s" % (entry["case"], entry["baseline"])
    return None


def _published(entry: dict, published: dict) -> str | None:
    for label in (entry["case"], ratio_label(entry)):
        if label in published:
            return str(published[label])
    return None


def failed_cases(summary: list[dict]) -> list[str]:
    return list(dict.fromkeys(e["case"] for e in summary if e["error"]))


# Markdown

def figure(value: float | None, metric: str, unit: bool = True) -> str:
    """A measured value in the metric's display unit: 24100000 pps -> '24.100 Mpps'."""
    if value is None:
        return "—"
    shown = METRICS[metric]
    text = "%.*f" % (shown.digits, value / shown.scale)
    return "%s %s" % (text, shown.unit) if unit else text


def _cell(text) -> str:
    return str(text).replace("\n", " ").replace("|", "\\|")


def _table(header: list[str], rows: list[list], right: tuple = ()) -> list[str]:
    align = ["---:" if i in right else "---" for i in range(len(header))]
    lines = ["| %s |" % " | ".join(header), "|%s|" % "|".join(align)]
    lines += ["| %s |" % " | ".join(_cell(c) for c in row) for row in rows]
    return lines


def _range_cell(entry: dict) -> str:
    return "%s–%s" % (figure(entry["min"], entry["metric"], unit=False), figure(entry["max"], entry["metric"]))


def _ratio_cell(entry: dict, by_name: dict) -> str:
    if entry["median"] is None:
        return "—"
    if entry["is_baseline"]:
        return "1.00 (baseline)"
    if entry["ratio"] is not None:
        return "%.2f" % entry["ratio"]
    if entry["baseline"]:
        base = by_name[entry["baseline"]]
        return "— (baseline failed)" if base["median"] is None else "— (baseline median 0)"
    return "—"


def _traffic_cell(entry: dict) -> str:
    """Offered next to delivered: the generator's rate against what the receiver counted."""
    if entry["offered_pps"] is not None and entry["metric"] == "delivered_pps" and entry["median"] is not None:
        return "%s → %s" % (figure(entry["offered_pps"], "delivered_pps", unit=False),
                            figure(entry["median"], "delivered_pps"))
    if entry["sent"] is not None and entry["delivered"] is not None:
        return "%d → %d frames" % (entry["sent"], entry["delivered"])
    if entry["offered_pps"] is not None:
        return "%s offered" % figure(entry["offered_pps"], "delivered_pps")
    return "—"


def _where_cell(entry: dict) -> str:
    """Each role's host and CPUs: 'generator: sender, CPU 0; datapath: router, CPU 1'."""
    hosts, cpus = entry["host"] or {}, entry["cpus"] or {}
    parts = []
    for role in dict.fromkeys(list(hosts) + list(cpus)):
        said = [str(hosts[role])] if role in hosts else []
        listed = cpus.get(role)
        if listed:
            said.append("CPU %s" % (_cpus.cpu_list(listed) if isinstance(listed, list) else listed))
        if said:
            parts.append("%s: %s" % (role, ", ".join(said)))
    return "; ".join(parts) or "—"


def _notes_cell(entry: dict) -> str:
    notes = [entry["notes"]] if entry["notes"] else []
    if entry["published"]:
        notes.append("published: %s" % entry["published"])
    if entry["error"]:
        notes.append("failed" if entry["median"] is None else
                     "round %s failed" % ", ".join(map(str, entry["failed_rounds"])))
    return "; ".join(notes) or ""


def _better(metric: str, higher_is_better: bool) -> str:
    """Which way a ratio is better, and why: '1 is better' is above 1 for more is better, below for less."""
    why = METRICS[metric].better if higher_is_better == METRICS[metric].higher_is_better else \
        "%s: %s is better in these cases" % (metric, "higher" if higher_is_better else "lower")
    return "%s 1 is better (%s)" % ("above" if higher_is_better else "below", why)


def _ratio_sentence(entries: list[dict]) -> str:
    baselines = list(dict.fromkeys(e["case"] for e in entries if e["is_baseline"]))
    if not baselines:
        return "No case of this family names a baseline: no ratios."
    directions = dict.fromkeys((e["metric"], e["higher_is_better"]) for e in entries if e["baseline"])
    return ("Ratio: a case's median over its baseline's median (baseline: %s); %s."
            % (", ".join("**%s**" % _cell(b) for b in baselines), "; ".join(_better(*d) for d in directions)))


def _generator_lines(entries: list[dict]) -> list[str]:
    """Which generator sent the family's cases, and why that one: one sentence where one sent every case, else
    one line per generator naming its cases. A delivered rate is bounded by what its generator could offer."""
    sent_by: dict[tuple, list] = {}
    # A family whose cases are named by their generators (generators) says no more in these lines.
    if all(not e.get("generator") or e["generator"]["name"] == e["case"] for e in entries):
        return []
    for entry in entries:
        if entry.get("generator"):
            said = entry["generator"]
            sent_by.setdefault((said["name"], said.get("why")), []).append(entry["case"])
    if not sent_by:
        return []
    if len(sent_by) == 1 and len(next(iter(sent_by.values()))) == len(entries):
        name, why = next(iter(sent_by))
        return ["", "Generator: **%s**%s." % (_cell(name), " (%s)" % _cell(why) if why else "")]
    lines = ["", "Generators:", ""]
    for (name, why), cases in sent_by.items():
        lines.append("- **%s**%s: %s" % (_cell(name), " (%s)" % _cell(why) if why else "",
                                         ", ".join(_cell(c) for c in cases)))
    return lines


def family_markdown(family: str, entries: list[dict], plot: str | None) -> list[str]:
    by_name = {e["case"]: e for e in entries}
    lines = ["## %s" % FAMILY_TITLES[family], "", _ratio_sentence(entries), ""]
    rows = [[e["case"], e["rounds"], "failed" if e["median"] is None else figure(e["median"], e["metric"]),
             "—" if e["median"] is None else _range_cell(e),
             "—" if e["spread"] is None else "%.1f%%" % (100 * e["spread"]),
             _ratio_cell(e, by_name), _traffic_cell(e), _where_cell(e), _notes_cell(e)]
            for e in entries]
    lines += _table(["case", "rounds", "median", "min–max", "spread", "ratio to baseline", "offered → delivered",
                     "where", "notes"], rows, right=(1, 2, 3, 4, 5))
    ported = [e for e in entries if e["per_port"] or e["non_member_frames"] is not None]
    # One port per case says no more than the delivered column.
    if any(len(e["per_port"] or ()) > 1 or e["non_member_frames"] is not None for e in ported):
        lines += ["", "Per port (delivered, median of the rounds) and frames at non-members (all rounds):", ""]
        lines += _table(["case", "per port", "non-member frames"],
                        [[e["case"], ", ".join("%s %s" % (port, figure(pps, "delivered_pps"))
                                               for port, pps in (e["per_port"] or {}).items()) or "—",
                          "—" if e["non_member_frames"] is None else e["non_member_frames"]] for e in ported],
                        right=(2,))
    lines += _generator_lines(entries)
    failed = [e for e in entries if e["error"]]
    if failed:
        lines += ["", "Failed:", ""]
        lines += ["- **%s** (round %s): %s" % (_cell(e["case"]), ", ".join(map(str, e["failed_rounds"])),
                                               e["error"]) for e in failed]
    lines += ["", "![%s](%s)" % (family, plot) if plot else "No plot: no case of this family has a measurement."]
    return lines


def _machine_lines(facts, depth: int = 0) -> list[str]:
    lines = []
    for key, value in facts.items():
        indent = "  " * depth
        if isinstance(value, dict):
            lines.append("%s- %s:" % (indent, key))
            lines += _machine_lines(value, depth + 1)
        elif isinstance(value, list):
            shown = ", ".join(v if isinstance(v, str) else json.dumps(v) for v in value)
            lines.append("%s- %s: %s" % (indent, key, shown))
        else:
            lines.append("%s- %s: %s" % (indent, key, value))
    return lines


def _published_lines(summary: list[dict], published: dict) -> list[str]:
    """Every published number next to what this run measured under that name, also those nothing answers."""
    measured = {}
    for entry in summary:
        measured[entry["case"]] = figure(entry["median"], entry["metric"]) if entry["median"] is not None else "failed"
        label = ratio_label(entry)
        if label:
            measured[label] = "—" if entry["ratio"] is None else "%.2f" % entry["ratio"]
    rows = [[label, text, measured.get(label, "— (no case or ratio of this run has this name)")]
            for label, text in published.items()]
    return ["## Published numbers", ""] + _table(["case or ratio", "published", "this run"], rows)


def markdown(title: str, machine: dict, summary: list[dict], published: dict | None = None,
             plots: dict | None = None) -> str:
    """report.md: the machine, one section per family present (table, failures, plot), the published numbers."""
    lines = ["# %s" % title, "", "## Machine", ""]
    lines += _machine_lines(machine) or ["Not given."]
    for family in FAMILIES:
        entries = [e for e in summary if e["family"] == family]
        if entries:
            lines += [""] + family_markdown(family, entries, (plots or {}).get(family))
    if published:
        lines += [""] + _published_lines(summary, published)
    return "\n".join(lines) + "\n"


# The directory

class Report:
    """The files of one report, built from the module's options."""

    def __init__(self, results: list[dict], title: str = DEFAULT_TITLE, machine: dict | None = None,
                 published: dict | None = None):
        self.title = title
        self.machine = machine or {}
        self.published = published or {}
        self.records = normalise(results)
        self.summary = summarise(self.records, self.published)

    def plotted(self) -> list[str]:
        """The families with a plot: those with at least one measured case."""
        return [f for f in FAMILIES if any(e["family"] == f and e["median"] is not None for e in self.summary)]

    def file_names(self) -> list[str]:
        # report.md last: once it is there, the plots it links are too.
        return [f + PLOT_SUFFIX for f in self.plotted()] + [RESULTS_JSON, REPORT_MD]

    def content(self, name: str, plot) -> bytes:
        """A file's bytes; plot(title, entries) draws a family's PNG."""
        if name == RESULTS_JSON:
            document = dict(machine=self.machine, results=self.records, summary=self.summary)
            return (json.dumps(document, indent=2, allow_nan=False) + "\n").encode()
        if name == REPORT_MD:
            plots = {f: f + PLOT_SUFFIX for f in self.plotted()}
            return markdown(self.title, self.machine, self.summary, self.published, plots).encode()
        family = name[:-len(PLOT_SUFFIX)]
        return plot("%s: %s" % (self.title, FAMILY_TITLES[family]), [e for e in self.summary if e["family"] == family])


def destination(dest: str) -> str:
    """The directory to write into, absolute: it may be missing (it is created), its parent may not."""
    dest = os.path.abspath(dest)
    parent = os.path.dirname(dest)
    if os.path.isdir(dest):
        target = dest
    elif os.path.lexists(dest):
        raise ReportError("cannot write the report into %s: it exists and is not a directory" % dest)
    elif not os.path.isdir(parent):
        raise ReportError("cannot write the report into %s: its parent directory %s does not exist (only the last "
                          "directory is created)" % (dest, parent))
    else:
        target = parent
    if not os.access(target, os.W_OK | os.X_OK):
        raise ReportError("cannot write the report into %s: %s is not writable by uid %d" % (dest, target,
                                                                                             os.geteuid()))
    return dest


def write(params: dict, check_mode: bool, plot) -> dict:
    """benchmark_report's work: the report's files written into dest (check mode: named, not written)."""
    report = Report(params["results"], params["title"], params["machine"], params["published"])
    dest = destination(params["dest"])
    paths = [os.path.join(dest, name) for name in report.file_names()]
    if not check_mode:
        if not os.path.isdir(dest):
            os.mkdir(dest, 0o755)
        for path in paths:
            # 0644: a report is for people (published, served, opened by another user), not a secret.
            try:
                _files.write_atomically(path, report.content(os.path.basename(path), plot), 0o644, dir_mode=None)
            except _files.UnsafePathError as exc:
                raise ReportError(str(exc)) from None
    # Every run writes the files anew, as a command would: always a change.
    return dict(changed=True, dest=dest, files=paths, summary=report.summary,
                failed_cases=failed_cases(report.summary))
