#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) ebpf.xdp contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: program_cost
short_description: Measure what XDP and tc programs cost per packet, next to an empty program of the same hook
version_added: 0.1.0
description:
  - Runs each XDP and tc program of O(object) O(repeat) times on one frame with C(BPF_PROG_TEST_RUN) and reports
    the kernel's average time of one run in nanoseconds, C(programs.NAME.ns_per_packet).
  - Most of that time is the test run's own work (the frame set up again for every run), so an empty program of
    the same hook (XDP returning C(XDP_PASS), tc returning C(TC_ACT_OK)), loaded by the module from two raw
    instructions, is measured beside each program, in turns with it (program, empty program) in each of
    O(runs) rounds. C(programs.NAME.over_empty_ns) is the difference of the two medians, what the program's own
    instructions cost.
  - The object is loaded once for all its programs, with O(constants), and its maps are kept out of bpffs (a
    map declared pinned by name is a private copy here), so the measured programs count into maps of their own.
  - Nothing on the host changes. No program is attached or pinned, the frame never reaches an interface, and
    every program the module loaded is unloaded before it returns; the task always reports C(changed=false).
author:
  - ebpf.xdp developers (@ebpf-xdp)
requirements:
  - root on the managed host (C(CAP_BPF) or C(CAP_SYS_ADMIN), C(CAP_NET_ADMIN)), libbpf >= 1.0
extends_documentation_fragment:
  - ebpf.xdp.attributes
options:
  object:
    description:
      - Path of the compiled BPF object on the managed host (see M(ebpf.xdp.bpf_object)).
    type: path
    required: true
  programs:
    description:
      - Function names of the programs to measure, in this order.
      - By default every XDP and tc (C(sched_cls), C(sched_act)) program of O(object), except devmap egress
        (section C(xdp/devmap)) and cpumap (C(xdp/cpumap)) programs, which the kernel does not test-run
        (RV(skipped) lists them).
      - A name that is not in O(object) is an error listing its programs; a program of another type (a tracing
        program, say), or a devmap egress program, is an error naming it.
      - Mutually exclusive with O(sections).
    type: list
    elements: str
    default: []
  sections:
    description:
      - The programs to measure by their section names (their C(SEC()), as iproute2's C(sec) takes them), in this
        order, instead of O(programs); each section must hold one program (a section holding several is an error
        listing them by function name).
      - Mutually exclusive with O(programs).
    type: list
    elements: str
    default: []
  program_type:
    description:
      - "The type to load and measure the programs whose section names no program type libbpf knows
        (C(SEC(\"xdp1\")), C(SEC(\"redirect_xmit\")), ...) as, the type their hook would give them: V(xdp),
        V(sched_cls) (tc, tcx and cls_bpf) or V(sched_act) (act_bpf)."
      - Without it, such programs are left out (RV(skipped) says why), and naming one is an error.
    type: str
    choices: [xdp, sched_cls, sched_act]
  constants:
    description:
      - "Load-time settings written into the programs' C(const volatile) globals before loading, as
        O(ebpf.xdp.xdp_program#module:constants) takes them, for example C({xdp_action: 2}) to make
        C(xdp_drop_count) pass instead of drop."
      - "Values are integers or booleans, or C({ifindex: INTERFACE}), resolved in the module's network
        namespace."
      - Unknown names are an error listing the known ones.
    type: dict
    default: {}
  repeat:
    description:
      - How many times the kernel runs a program on the frame in one measurement; the kernel reports the
        average. At least 1; the default makes each measurement take about 0.05 s for a small program.
    type: int
    default: 1000000
  runs:
    description:
      - Measurements of each program (and of the empty program beside it); the result gives each and their
        median. At least 1.
    type: int
    default: 3
  frame:
    description:
      - The frame the programs run on, as hex (two digits a byte; spaces and colons between bytes are allowed),
        from the Ethernet header on, at least 14 bytes.
      - By default a 60-byte Ethernet frame with UDP over IPv4 (C(192.0.2.1:1024 > 192.0.2.2:9), from
        C(02:00:00:00:00:01) to C(02:00:00:00:00:02)).
    type: str
attributes:
  check_mode:
    support: full
    details:
      - The module changes nothing, so check mode measures as well, exactly as a normal run.
  diff_mode:
    support: none
  idempotent:
    support: full
    details:
      - It changes nothing; the figures of two runs differ by the measurement's noise.
notes:
  - The figures are those of the CPU the module runs on, with the kernel's JIT; they are comparable between
    programs of one run, and between hosts of the same kind. The time a program takes on a real receive path
    also depends on the driver, the caches and what its helpers do with real devices (a redirect, say).
  - A program whose cost is within the noise can show a negative C(programs.NAME.over_empty_ns).
seealso:
  - module: ebpf.xdp.replay
  - module: ebpf.xdp.bpf_object
"""

EXAMPLES = r"""
- name: Compile the counter
  ebpf.xdp.bpf_object:
    src: /var/lib/ebpf_xdp/src/xdp_drop_count.bpf.c
    dest: /var/lib/ebpf_xdp/objects/xdp_drop_count.o

- name: What does it cost per packet?
  ebpf.xdp.program_cost:
    object: /var/lib/ebpf_xdp/objects/xdp_drop_count.o
  register: cost

- name: Show it next to the empty XDP program
  ansible.builtin.debug:
    msg: >-
      xdp_drop_count: {{ cost.programs.xdp_drop_count.ns_per_packet }} ns per packet
      ({{ cost.programs.xdp_drop_count.over_empty_ns }} ns over an empty program),
      verdict {{ cost.programs.xdp_drop_count.verdict }}

- name: Two tc programs on a TCP SYN to port 80, five measurements each
  ebpf.xdp.program_cost:
    object: /var/lib/ebpf_xdp/objects/tc_redirect.o
    programs: [tc_drop_count, redirect_xmit]
    runs: 5
    frame: >-
      02 00 00 00 00 02 02 00 00 00 00 01 08 00 45 00 00 2e 00 00 40 00 40 06 b6 c6 c0 00 02 01
      c0 00 02 02 04 00 00 50 00 00 00 01 00 00 00 00 50 02 ff ff 27 88 00 00 00 00 00 00 00 00

- name: The kernel sample's program, in SEC("xdp1") (a section that names no type), measured as XDP
  ebpf.xdp.program_cost:
    object: /var/lib/ebpf_xdp/objects/xdp1_kern.o
    sections: [xdp1]
    program_type: xdp
"""

RETURN = r"""
object:
  description: The object measured.
  returned: success
  type: str
  sample: /var/lib/ebpf_xdp/objects/xdp_drop_count.o
repeat:
  description: Runs of a program per measurement (O(repeat)).
  returned: success
  type: int
  sample: 1000000
frame_size:
  description: Bytes of the frame the programs ran on.
  returned: success
  type: int
  sample: 60
programs:
  description: Per program measured, by name, in the order measured.
  returned: success
  type: dict
  contains:
    type:
      description: The program type (C(xdp), C(sched_cls), C(sched_act)), which decides its empty program.
      type: str
    id:
      description: The id the program had while loaded (it is unloaded when the module returns).
      type: int
    tag:
      description: The kernel's tag of the program's instructions.
      type: str
    verdict:
      description: What the program returned for the frame, by name (C(XDP_DROP), C(TC_ACT_SHOT), ...).
      type: str
    retval:
      description: The same as a number.
      type: int
    ns_per_packet:
      description: The median of C(programs.NAME.runs).
      type: float
    runs:
      description: Each measurement, the kernel's average ns of one run of the program.
      type: list
      elements: int
    empty_ns_per_packet:
      description: The median of C(programs.NAME.empty_runs).
      type: float
    empty_runs:
      description: The measurements of the empty program of the same hook, each taken right after the program's.
      type: list
      elements: int
    over_empty_ns:
      description: C(programs.NAME.ns_per_packet) less C(programs.NAME.empty_ns_per_packet).
      type: float
  sample:
    xdp_drop_count: {type: xdp, id: 4211, tag: 8a80a4514121157e, verdict: XDP_DROP, retval: 1, ns_per_packet: 47.0,
                     runs: [47, 46, 49], empty_ns_per_packet: 40.0, empty_runs: [40, 41, 40], over_empty_ns: 7.0}
empty_programs:
  description: The empty program of each program type measured, by type, with its name, id while loaded and
    verdict.
  returned: success
  type: dict
  sample: {xdp: {name: cost_empty_xdp, id: 4212, verdict: XDP_PASS}}
skipped:
  description: Programs of the object of a measured kind left out by default, by name, with the reason (the
    kernel does not test-run devmap egress and cpumap programs; a program whose section names no type is measured
    only with O(program_type)).
  returned: success
  type: dict
  sample: {xdp_egress_mac: 'a devmap egress program (SEC("xdp/devmap")): the kernel does not test-run it'}
seconds:
  description: Time the module spent loading and measuring.
  returned: success
  type: float
  sample: 0.41
"""

from ansible_collections.ebpf.xdp.plugins.module_utils import _common
from ansible_collections.ebpf.xdp.plugins.module_utils.traffic import cost as _cost

ARGUMENT_SPEC = dict(
    object=dict(type="path", required=True),
    programs=dict(type="list", elements="str", default=[]),
    sections=dict(type="list", elements="str", default=[]),
    program_type=dict(type="str", choices=["xdp", "sched_cls", "sched_act"]),
    constants=_common.PROGRAM_ARGS["constants"],
    repeat=dict(type="int", default=_cost.DEFAULT_REPEAT),
    runs=dict(type="int", default=_cost.DEFAULT_RUNS),
    frame=dict(type="str"),
)


def measure(params, _check_mode, _module):
    # Read-only: check mode measures too, and nothing ever changes.
    return dict(changed=False, **_cost.measure(_cost.Settings.from_params(params))), []


def main():
    _common.run_module(ARGUMENT_SPEC, rules=dict(mutually_exclusive=[("programs", "sections")]), libraries=dict(pyroute2=False, predicts=False), work=measure)


if __name__ == "__main__":
    main()
