#!/usr/bin/env python
"""A no-change ebpf.xdp.datapath run on the lab's switch: its 10 XDP programs (xdp_multicast on eth0..eth9,
one shared map set) and 2 multicast groups in one module run, and what that run costs.

    .venv/bin/python tests/benchmarks/datapath.py [--runs 20] | --smoke

The lab is brought up and the switch converged by the role ebpf.xdp.xdp_deploy with the inventory's
variables (lab_up.yml, then one play of the role on the switch: what deploy_xdp.yml does to it). Then
`state: gathered` reads the switch's data path in the config's shape, and the same config is converged again
with `state: overridden`, a no-change run, three ways, alternating round after round:

- in process: _datapath.run() in the switch's namespace, the module's own work (no start-up);
- the module as a task starts it on the host: Debian's Python, `python3 -m ...modules.datapath`, its
  arguments on stdin (start-up and work);
- one `ansible switch -m ebpf.xdp.datapath` (the controller's part too).

Every run must report no change. Printed: median, min and max milliseconds of each.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from harness.ansible_cli import COLLECTIONS, ROOT, import_module_utils, module, playbook, write_play

SWITCH = "switch"
PIN_ROOT = "/sys/fs/bpf/ebpf_xdp"  # the lab's (xdp_deploy_pin_root's default)
DEPLOY_SWITCH = [{"name": "Converge the switch as the inventory says", "hosts": SWITCH, "gather_facts": False,
                  "roles": [{"role": "ebpf.xdp.xdp_deploy"}]}]


def module_path():
    """A PYTHONPATH with ansible-core and the collection only, for Debian's Python (as tests/integration does)."""
    import ansible  # pylint: disable=import-outside-toplevel
    path = os.path.join(ROOT, ".build", "module-path")
    os.makedirs(path, exist_ok=True)
    for name, target in (("ansible", os.path.dirname(ansible.__file__)),
                         ("ansible_collections", os.path.join(COLLECTIONS, "ansible_collections"))):
        link = os.path.join(path, name)
        if not os.path.islink(link):
            os.symlink(target, link)
    return path


def started(args):
    """The module as a task starts it on the host: its result."""
    payload = {"ANSIBLE_MODULE_ARGS": dict(args, _ansible_module_name="ebpf.xdp.datapath")}
    # nsenter, not `ip netns exec`: that mounts a sysfs of the namespace over /sys, hiding bpffs (the netns
    # connection enters the namespace only, too).
    proc = subprocess.run(["nsenter", "--net=/run/netns/" + SWITCH, "/usr/bin/python3", "-m",
                           "ansible_collections.ebpf.xdp.plugins.modules.datapath"],
                          input=json.dumps(payload), capture_output=True, text=True, cwd="/tmp", check=False,
                          env=dict(os.environ, PYTHONPATH=module_path()))
    try:
        return json.loads(proc.stdout)
    except ValueError:
        raise SystemExit("datapath printed no result:\n%s%s" % (proc.stdout[-2000:], proc.stderr[-2000:]))


def in_process(params):
    # pylint: disable=import-outside-toplevel
    from ansible_collections.ebpf.xdp.plugins.module_utils import _datapath
    from ansible_collections.ebpf.xdp.plugins.module_utils.host import netns as _netns
    with _netns.netns(SWITCH):
        result, _warnings = _datapath.run(params, False, None, None)
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--smoke", action="store_true", help="3 runs each: does it still work?")
    opts = parser.parse_args()
    runs = 3 if opts.smoke else opts.runs
    import_module_utils()

    playbook("lab_up.yml")
    playbook(write_play("datapath_bench_switch.yml", DEPLOY_SWITCH))
    gathered = module(SWITCH, "datapath", {"state": "gathered"})["gathered"]
    sizes = (len(gathered["xdp"]), len(gathered["devmap_groups"]))
    args = {"state": "overridden", "config": gathered, "pin_root": PIN_ROOT}
    params = dict(args, namespaces=[], sources=None)
    ways = {"in process": lambda: in_process(params), "module started": lambda: started(args),
            "ansible -m": lambda: module(SWITCH, "datapath", args)}
    times = {name: [] for name in ways}
    for round_ in range(runs):
        names = list(ways)
        for name in names[round_ % len(names):] + names[:round_ % len(names)]:
            began = time.monotonic()
            result = ways[name]()
            times[name].append((time.monotonic() - began) * 1000)
            if result.get("failed") or result.get("changed"):
                sys.exit("%s: not a no-change run: %s" % (name, json.dumps(result)[:2000]))

    print("the lab's switch: %d XDP programs, %d multicast groups; a no-change run with state overridden, "
          "%d runs each" % (sizes[0], sizes[1], runs))
    print("%-16s %9s %9s %9s" % ("", "median ms", "min ms", "max ms"))
    for name, values in times.items():
        print("%-16s %9.1f %9.1f %9.1f" % (name, statistics.median(values), min(values), max(values)))


if __name__ == "__main__":
    main()
