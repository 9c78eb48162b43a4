# -*- coding: utf-8 -*-
# Copyright (c) ebpf.xdp contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""A benchmark family's plot as PNG bytes: a horizontal bar per case at its median, the min-max spread of its
rounds as error bars, the baseline marked and each ratio written beside its bar.

Private to the ebpf.xdp collection: the interface may change without notice.

matplotlib is imported when a plot is drawn, not when this file is: a module that only checks its options
(and ansible-test's import test) does not need it, and its absence is said by benchmark_report, naming the
package. Figures are drawn on Agg's canvas directly, without pyplot: no display, no global figure state.
"""

from __future__ import annotations

import importlib.util
import io
import sys

from ansible_collections.ebpf.xdp.plugins.module_utils.bench import report as _report

# Found, not imported (its import takes about a second).
HAS_MATPLOTLIB = importlib.util.find_spec("matplotlib") is not None
MATPLOTLIB_IMPORT_ERROR = None if HAS_MATPLOTLIB else "No module named 'matplotlib' on %s" % sys.executable
PIP_PACKAGE = "matplotlib"

BAR, BASELINE_BAR, FAILED = "tab:blue", "tab:gray", "tab:red"
INCHES_PER_CASE = 0.45
ERROR_CHARS = 70


def _agg():
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise _report.ReportError("the plots need matplotlib, which %s cannot import (%s); install the pip package "
                                  "%s into the controller's Python" % (sys.executable, exc, PIP_PACKAGE))
    return Figure, FigureCanvasAgg


def family_png(title: str, entries: list[dict]) -> bytes:
    """One family's plot: a panel per metric (a family usually has one), the cases top to bottom in order."""
    figure_class, canvas_class = _agg()
    metrics = list(dict.fromkeys(e["metric"] for e in entries))
    panels = [[e for e in entries if e["metric"] == metric] for metric in metrics]
    height = 1.0 + sum(1.0 + INCHES_PER_CASE * len(p) for p in panels)
    figure = figure_class(figsize=(10, height), layout="constrained")
    canvas_class(figure)
    axes = figure.subplots(len(panels), 1, squeeze=False,
                           gridspec_kw={"height_ratios": [1 + len(p) for p in panels]})[:, 0]
    for ax, panel in zip(axes, panels):
        _bars(ax, panel)
    figure.suptitle(title)
    out = io.BytesIO()
    figure.savefig(out, format="png", dpi=100)
    return out.getvalue()


def _bars(ax, entries: list[dict]) -> None:
    metric = entries[0]["metric"]
    shown = _report.METRICS[metric]
    highest = max([e["max"] / shown.scale for e in entries if e["max"] is not None] or [0]) or 1.0
    for y, entry in enumerate(entries):
        if entry["median"] is None:
            error = entry["error"] if len(entry["error"]) <= ERROR_CHARS else entry["error"][:ERROR_CHARS - 1] + "…"
            ax.text(0, y, " failed: %s" % error, va="center", color=FAILED)
            continue
        median = entry["median"] / shown.scale
        ax.barh(y, median, xerr=[[median - entry["min"] / shown.scale], [entry["max"] / shown.scale - median]],
                color=BASELINE_BAR if entry["is_baseline"] else BAR, hatch="//" if entry["is_baseline"] else None,
                edgecolor="black", capsize=4)
        ax.text(entry["max"] / shown.scale + highest * 0.01, y, " " + _label(entry), va="center")
    ax.set_yticks(range(len(entries)))
    ax.set_yticklabels(["%s (baseline)" % e["case"] if e["is_baseline"] else e["case"] for e in entries])
    ax.set_ylim(len(entries) - 0.5, -0.5)  # the first case on top, as in the table
    ax.set_xlim(0, highest * 1.3)  # room for the ratios beside the longest bar
    ax.set_xlabel("%s: median of the rounds, whiskers min to max; ratio to baseline, %s"
                  % (shown.axis, "above 1 is better" if entries[0]["higher_is_better"] else "below 1 is better"))
    ax.grid(axis="x", alpha=0.3)


def _label(entry: dict) -> str:
    label = "baseline" if entry["is_baseline"] else "" if entry["ratio"] is None else "%.2f×" % entry["ratio"]
    if entry["failed_rounds"]:
        label += " (round %s failed)" % ", ".join(map(str, entry["failed_rounds"]))
    return label.strip()
