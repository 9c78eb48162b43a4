"""bench/plots: a benchmark family's PNG (matplotlib's Agg canvas) and the label beside each bar: the ratio to the
baseline, the baseline itself, the rounds that failed. The report it goes into: test_bench_report.py."""

import struct

import pytest

from ansible_collections.ebpf.xdp.plugins.module_utils.bench import plots as _plots

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def entry(case, median, ratio=None, baseline=False, failed_rounds=(), metric="delivered_pps", error=""):
    spread = None if median is None else (median * 0.9, median * 1.1)
    return {"case": case, "metric": metric, "median": median, "min": spread and spread[0],
            "max": spread and spread[1], "ratio": ratio, "is_baseline": baseline, "failed_rounds": list(failed_rounds),
            "higher_is_better": metric == "delivered_pps", "error": error}


@pytest.mark.parametrize("given, label", [
    (entry("xdp", 2e6, ratio=1.5), "1.50×"),
    (entry("iptables", 1e6, baseline=True), "baseline"),
    (entry("xdp", 2e6, ratio=0.25, failed_rounds=[2, 3]), "0.25× (round 2, 3 failed)"),
    (entry("xdp", 2e6), ""),  # no baseline to compare with
])
def test_the_label_beside_a_bar(given, label):
    assert _plots._label(given) == label


def size(png):
    assert png.startswith(PNG_SIGNATURE)
    return struct.unpack(">II", png[16:24])  # IHDR: width, height


def test_a_family_is_one_png_a_panel_per_metric_taller_with_each_case():
    two = [entry("iptables", 1e6, baseline=True), entry("xdp", 2e6, ratio=2.0)]
    four = two + [entry("tc", 1.5e6, ratio=1.5), entry("nft", None, error="x" * 200)]  # a failed case too
    width, height = size(_plots.family_png("drop", two))
    assert (width, size(_plots.family_png("drop", four))[0]) == (1000, 1000)  # 10 inches at 100 dpi
    assert size(_plots.family_png("drop", four))[1] > height
    panels = two + [entry("xdp", 50.0, ratio=0.5, metric="ns_per_packet"),
                    entry("tc", 100.0, baseline=True, metric="ns_per_packet")]
    assert size(_plots.family_png("cost", panels))[1] > size(_plots.family_png("drop", four))[1]
