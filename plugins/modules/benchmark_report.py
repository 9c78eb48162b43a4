#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) ebpf.xdp contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: benchmark_report
short_description: Write a benchmark's measurements as results.json, a Markdown report and PNG plots
version_added: 0.1.0
description:
  - Turns the measurements a benchmark playbook collected (O(results), one record per case and round) into three
    kinds of files in the directory O(dest), on the host the module runs on. It is meant for the controller;
    delegate it to C(localhost) and run it with the playbook's Python, C(ansible_playbook_python), as the
    examples do.
  - C(results.json) holds O(machine), every record (keys without a value left out, C(higher_is_better) filled
    in) and the summary (RV(summary)), per family and case the successful rounds, median, min, max, spread, the
    ratio to its baseline, the medians of offered pps, sent and delivered frames, per port medians and frames at
    non-members, the CPUs and hosts, notes, errors and the matching O(published) number.
  - C(report.md) holds O(title), the machine section and one section per family present in the order drop,
    forward, multicast, generators, cost, control. Each section has a table (case, rounds, median, min-max,
    spread, ratio to baseline, offered next to delivered, each role's host and CPUs, notes and published
    numbers), a per-port table where a case has O(results[].per_port) or O(results[].non_member_frames), the
    failed cases with their errors, and its plot. A last section lists every O(published) number next to the
    figure of this run it answers.
  - C(FAMILY.png) per family with at least one measured case, drawn with matplotlib (Agg, no display),
    horizontal bars of each case's median with the min-max spread of its rounds as whiskers, the baseline bar
    hatched and grey, each ratio written beside its bar, and the unit on the axis (Mpps, ns, s).
  - The ratio of a case is its median over its baseline's median, value / baseline, for every metric. Where
    higher is better (O(results[].metric=delivered_pps)) above 1 is better; where lower is better
    (V(ns_per_packet), V(seconds)) below 1 is better. The report says which way next to each table and on each
    plot's axis.
  - A case that could not run is a record with O(results[].error) and no O(results[].value). It is reported, not
    hidden, in the summary, the table (as failed), the failed list of its section, its plot and
    RV(failed_cases); the module itself does not fail because of it, the playbook decides (for example with
    C(failed_when) on RV(failed_cases)). A case with some failed rounds is summarised over the others, and its
    failed rounds are listed.
  - Each file is written to a temporary file beside it and renamed over it, so a reader never finds half a file.
    Other files in O(dest) are left alone.
  - "Writing the report is an action, as a command is: every run writes the files anew and reports
    C(changed=true). In check mode the module checks the records and O(dest), writes nothing, creates nothing
    and reports C(changed=true) with the files it would write."
author:
  - ebpf.xdp developers (@ebpf-xdp)
requirements:
  - matplotlib (the pip package C(matplotlib)) in the Python the module runs with; the collection's C(.venv) has
    it (C(scripts/setup.sh), C(requirements-dev.txt))
extends_documentation_fragment:
  - ebpf.xdp.attributes
options:
  dest:
    description:
      - The directory to write into. It is created when missing; its parent directory must exist.
      - An absolute path without C(..) components.
    type: path
    required: true
  results:
    description:
      - The measurements, one record per case and round. A case is identified by O(results[].family) and
        O(results[].case) together; the records of one case must agree on its metric, baseline and
        O(results[].higher_is_better).
    type: list
    elements: dict
    required: true
    suboptions:
      family:
        description: The part of the benchmark the case belongs to; each family is a section and a plot.
        type: str
        choices: [drop, forward, multicast, generators, cost, control]
        required: true
      case:
        description:
          - The case's human name, unique within its family, for example V(iptables raw drop) or
            V(XDP drop, native).
        type: str
        required: true
      round:
        description: The round, counted from 1; one record per case and round.
        type: int
        required: true
      metric:
        description:
          - What O(results[].value) measures. V(delivered_pps) packets per second counted at the receiver (shown in
            Mpps), V(ns_per_packet) nanoseconds per packet, V(seconds) a duration.
        type: str
        choices: [delivered_pps, ns_per_packet, seconds]
        required: true
      value:
        description:
          - The figure that is compared, in the unit of O(results[].metric); a finite number, 0 or more.
          - Absent exactly when O(results[].error) is given.
        type: float
      baseline:
        description:
          - The O(results[].case) of the same family this case is compared with (the ratio of their medians).
          - A baseline case names itself or nothing; a case that another names is a baseline either way. A case
            that names none and that no case names has no ratio.
        type: str
      higher_is_better:
        description:
          - Whether a higher O(results[].value) is better. By default V(true) for V(delivered_pps) and V(false) for
            V(ns_per_packet) and V(seconds).
          - It says which way a ratio is better (above or below 1); the ratio itself is always value / baseline.
        type: bool
      offered_pps:
        description: The generator's offered rate in packets per second, shown next to the delivered one.
        type: float
      sent:
        description: Frames the generator sent.
        type: int
      delivered:
        description: Frames the receiver counted.
        type: int
      seconds:
        description: How long the measurement ran.
        type: float
      per_port:
        description: Delivered packets per second per port (multicast), a port name mapped to a number.
        type: dict
      non_member_frames:
        description: Frames counted at ports that are not members of the group (multicast); they should be 0.
        type: int
      cpus:
        description:
          - "The CPUs each role used, a role mapped to a list of CPU numbers or a CPU list string, for example
            C({generator: [0], datapath: [1]})."
        type: dict
      host:
        description: "The inventory host of each role, for example C({generator: sender, datapath: router})."
        type: dict
      generator:
        description:
          - What sent the case's frames and why that generator, shown under the family's table (one line where
            one generator sent every case of the family).
        type: dict
        suboptions:
          name:
            description: The generator, for example C(trafgen (netsniff-ng)) or C(xdp_trafficgen, xdp).
            type: str
            required: true
          why:
            description: "Why it sent the case, for example C(auto: the kernel of sender refuses live-frames test runs)."
            type: str
      notes:
        description: A remark shown in the case's row.
        type: str
      error:
        description:
          - "Why the case could not run in this round, for example C(act_bpf: this kernel has no
            CONFIG_NET_ACT_BPF); then O(results[].value) is absent."
        type: str
  machine:
    description:
      - Free-form facts about where the benchmark ran, shown at the top of the report and kept in C(results.json)
        (the controller's and hosts' kernels, CPU models and counts, the date, the collection's version, the
        inventory). Nested dictionaries become nested lists.
    type: dict
  title:
    description: The report's title, also on each plot.
    type: str
    default: ebpf.xdp benchmark
  published:
    description:
      - "Published numbers to show next to this run's, a name mapped to its text, for example
        C(XDP drop / iptables raw drop) mapped to C(paper: 5x)."
      - A name that is a case, or a ratio C(CASE / BASELINE) of this run, is shown in that case's row and answered
        by its median or ratio in the last section; any other name is listed there too, as answered by nothing.
    type: dict
attributes:
  check_mode:
    support: full
    details:
      - Check mode checks the records and O(dest), writes and creates nothing, and reports a change (it would write
        the files) with RV(files) and RV(summary).
  diff_mode:
    support: none
  idempotent:
    support: none
    details:
      - Every run writes the files anew and reports C(changed=true); it is an action, not a state.
notes:
  - The module reads nothing from the hosts; the playbook collects the measurements and C(machine).
seealso:
  - module: ebpf.xdp.xdp_trafficgen
  - module: ebpf.xdp.pktgen
  - module: ebpf.xdp.xdp_facts
"""

EXAMPLES = r"""
- name: Write the report on the controller
  ebpf.xdp.benchmark_report:
    dest: "{{ playbook_dir }}/../results/{{ benchmark_stamp }}"
    title: ebpf.xdp benchmark on the lab
    machine:
      controller: "{{ ansible_facts.kernel }}"
      date: "{{ now(utc=true).isoformat() }}"
    results: "{{ benchmark_results }}"
    published:
      "XDP drop (xdp_drop_count), native / iptables raw drop": "paper: 5x"
  delegate_to: localhost
  run_once: true
  become: false
  vars:
    ansible_python_interpreter: "{{ ansible_playbook_python }}"
  register: benchmark_report

- name: Two records of one round, a case that could not run
  ebpf.xdp.benchmark_report:
    dest: /tmp/bench
    results:
      - {family: drop, case: iptables raw drop, round: 1, metric: delivered_pps, value: 4.8e6,
         offered_pps: 7.8e6, cpus: {generator: [0], datapath: [1]}}
      - {family: drop, case: "XDP drop (xdp_drop_count), native", round: 1, metric: delivered_pps,
         value: 2.4e7, baseline: iptables raw drop}
      - {family: forward, case: tc redirect (act_bpf), round: 1, metric: delivered_pps,
         error: "act_bpf: this kernel has no CONFIG_NET_ACT_BPF"}
  delegate_to: localhost
  vars:
    ansible_python_interpreter: "{{ ansible_playbook_python }}"

- name: Fail the play when a case could not run, after the report is written
  ansible.builtin.assert:
    that: benchmark_report.failed_cases | length == 0
    fail_msg: "cases that could not run: {{ benchmark_report.failed_cases | join(', ') }}"
"""

RETURN = r"""
dest:
  description: The directory written into, absolute.
  returned: always
  type: str
  sample: /home/me/ebpf_xdp/results/20261202T120000
files:
  description: The files written (in check mode, those that would be), absolute, plots first.
  returned: always
  type: list
  elements: str
  sample: [/tmp/bench/drop.png, /tmp/bench/results.json, /tmp/bench/report.md]
failed_cases:
  description: The cases with an error in any round, each name once, in the report's order.
  returned: always
  type: list
  elements: str
  sample: [tc redirect (act_bpf)]
summary:
  description:
    - One entry per family and case, families in the report's order, cases in the order of O(results); the
      medians, minima and maxima are in the unit of the metric (packets per second, not Mpps).
  returned: always
  type: list
  elements: dict
  contains:
    family:
      description: The case's family.
      type: str
    case:
      description: The case's name.
      type: str
    metric:
      description: What the figures measure.
      type: str
    higher_is_better:
      description: Whether a higher figure is better, so whether a ratio above 1 is.
      type: bool
    baseline:
      description: The case this one is compared with (itself for a baseline), or null.
      type: str
    is_baseline:
      description: Whether this case is a baseline (another case, or itself, names it).
      type: bool
    rounds:
      description: Rounds with a value.
      type: int
    failed_rounds:
      description: Rounds with an error.
      type: list
      elements: int
    median:
      description: The median value of the rounds; null when every round failed.
      type: float
    min:
      description: The least value.
      type: float
    max:
      description: The greatest value.
      type: float
    spread:
      description: (max - min) / median; null without a median or when it is 0.
      type: float
    ratio:
      description:
        - median / the baseline's median (1 for a baseline); null without a baseline, when either failed or the
          baseline's median is 0. Above 1 is better when RV(summary[].higher_is_better), below 1 otherwise.
      type: float
    offered_pps:
      description: The median offered rate, or null.
      type: float
    sent:
      description: The median of frames sent, or null.
      type: float
    delivered:
      description: The median of frames delivered, or null.
      type: float
    per_port:
      description: Per port the median delivered pps, or null.
      type: dict
    non_member_frames:
      description: Frames at non-members over all rounds, or null.
      type: int
    cpus:
      description: The CPUs per role, as given.
      type: dict
    host:
      description: The host per role, as given.
      type: dict
    generator:
      description: What sent the case's frames and why (C(name), C(why)), as given, or null.
      type: dict
    notes:
      description: The rounds' notes, each once, or null.
      type: str
    error:
      description: The failed rounds' errors, each once, or null.
      type: str
    published:
      description: The O(published) text of this case or of its ratio, or null.
      type: str
  sample:
    - {family: drop, case: iptables raw drop, metric: delivered_pps, higher_is_better: true,
       baseline: iptables raw drop, is_baseline: true, rounds: 3, failed_rounds: [], median: 4800000.0,
       min: 4700000.0, max: 4900000.0, spread: 0.0417, ratio: 1.0, offered_pps: 7800000.0, sent: null,
       delivered: null, per_port: null, non_member_frames: null, cpus: {generator: [0], datapath: [1]},
       host: null, generator: null, notes: null, error: null, published: null}
"""

from ansible.module_utils.basic import missing_required_lib

from ansible_collections.ebpf.xdp.plugins.module_utils import _common
from ansible_collections.ebpf.xdp.plugins.module_utils.host import names as _names
from ansible_collections.ebpf.xdp.plugins.module_utils.bench import plots as _plots, report as _report

RECORD_OPTIONS = dict(
    family=dict(type="str", choices=list(_report.FAMILIES), required=True),
    case=dict(type="str", required=True),
    round=dict(type="int", required=True),
    metric=dict(type="str", choices=list(_report.METRICS), required=True),
    value=dict(type="float"),
    baseline=dict(type="str"),
    higher_is_better=dict(type="bool"),
    offered_pps=dict(type="float"),
    sent=dict(type="int"),
    delivered=dict(type="int"),
    seconds=dict(type="float"),
    per_port=dict(type="dict"),
    non_member_frames=dict(type="int"),
    cpus=dict(type="dict"),
    host=dict(type="dict"),
    generator=dict(type="dict", options=dict(name=dict(type="str", required=True), why=dict(type="str"))),
    notes=dict(type="str"),
    error=dict(type="str"),
)

ARGUMENT_SPEC = dict(
    dest=dict(type="path", required=True),
    results=dict(type="list", elements="dict", required=True, options=RECORD_OPTIONS),
    machine=dict(type="dict"),
    title=dict(type="str", default=_report.DEFAULT_TITLE),
    published=dict(type="dict"),
)


def require_matplotlib(module) -> None:
    """Also in check mode: a report that could not draw its plots is not a change it could make."""
    if not _plots.HAS_MATPLOTLIB:
        reason = ("to draw the plots (pip install %s into the Python that runs this module; on the controller, "
                  "ansible_playbook_python's)" % _plots.PIP_PACKAGE)
        module.fail_json(msg=missing_required_lib(_plots.PIP_PACKAGE, reason=reason),
                         exception=_plots.MATPLOTLIB_IMPORT_ERROR)


def benchmark_report(params, check_mode, _module):
    return _report.write(params, check_mode, plot=_plots.family_png), []


def main():
    _common.run_module(ARGUMENT_SPEC, work=benchmark_report, prepare=require_matplotlib,
                       names=dict(_common.NAMES, dest=_names.check_absolute),
                       libraries=dict(libbpf=False, pyroute2=False), privileges=())


if __name__ == "__main__":
    main()
