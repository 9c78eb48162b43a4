#!/usr/bin/env python
"""deploy_xdp.yml as a rollout on generated labs of N receivers: wall time, time per host, module runs per host,
controller memory; with --against REV, side by side with the collection as it was at git revision REV.

    .venv/bin/python tests/benchmarks/rollout.py [--hosts 10,50,100] [--forks 10,50] [--against REV] [--reruns N]
        [--strategies linear,mitogen_linear --mitogen DIR]
    .venv/bin/python tests/benchmarks/rollout.py --smoke

For each N, scripts/fleet_lab.py writes a lab of N receiver namespaces
behind one bridge (its own prefix), lab_up.yml builds it and a broadcast
ping feeds every receiver. Then, for each forks setting: a rollout of a
new release (canary, 10%, the rest; settle 1 s, rates over 1 s, the lab's
three health rules) and an idempotent re-run. Printed per run: wall time,
wall time per host, module runs per host (the results of tasks that ran a
module on the host, counted from the json callback: not skipped, not an
action the controller answers alone such as set_fact or debug), and the
controller's peak resident memory (the largest of ansible-playbook and its
forked workers, from getrusage(RUSAGE_CHILDREN) of a child process that
runs only that playbook; on this lab the modules, children too, are smaller).

Ansible's floor, in the same run, on the same lab and with the same forks:
before each re-run, a playbook of one ansible.builtin.ping per host of the
rollout (no facts gathered), and the ratio of the re-run to it (medians).

--strategies linear,mitogen_linear --mitogen DIR: each measured run (the
ping floor, the rollout, the re-runs) under each strategy, side by side;
DIR is where Mitogen's ansible_mitogen/plugins/strategy is (a pip install
--target of mitogen 0.3.x will do: the venv need not have it).

--against REV: the collection at REV (git archive of this checkout) runs the
same lab in the same run, each forks setting alternating: REV's rollout and
re-run, then this checkout's, each rollout a new release over the one before
(the lab is first deployed once by this checkout, unmeasured, so that both
measured rollouts are upgrades). The old per-item path of issue 18 is REV
6556e7f (the commit before ebpf.xdp.datapath). --reruns N: the re-run N
times (each must change nothing), with their median, for a figure that one
burst of the shared machine's noise does not decide. --smoke: 2 hosts,
forks 2.
"""

import argparse
import collections
import itertools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

from harness.ansible_cli import ENV, ROOT

FLEET = os.path.join(ROOT, "scripts", "fleet_lab.py")
PLAYBOOK = os.path.join(ROOT, ".venv", "bin", "ansible-playbook")
# The program every receiver of the generated lab runs (scripts/fleet_lab.py).
LAB_PROGRAM = os.path.join("files", "bpf", "xdp_verdict_count.bpf.c")


# Actions the controller answers without running a module on the host.
CONTROLLER_ACTIONS = {"set_fact", "debug", "assert", "fail", "include_role", "include_tasks", "import_role",
                      "import_tasks", "include_vars", "meta", "validate_argument_spec", "add_host", "group_by",
                      "set_stats", "pause"}


def measured(argv, env, output):
    """Run argv in a child that reports its children's peak RSS, its output into the file output (its errors
    into output.err): (seconds, MiB, returncode)."""
    probe = ("import resource, subprocess, sys, json;"
             "out = open(sys.argv[1], 'w'); err = open(sys.argv[1] + '.err', 'w');"
             "rc = subprocess.run(sys.argv[2:], stdout=out, stderr=err).returncode;"
             "print(json.dumps([rc, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss]))")
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", probe, output] + argv, capture_output=True, text=True, env=env,
                          check=True)
    seconds = time.monotonic() - start
    rc, maxrss_kib = json.loads(proc.stdout)
    return seconds, maxrss_kib / 1024.0, rc


def required(argv, env, what, playbook_run=False):
    """Run an unmeasured step that must succeed (the lab's set-up, the first deploy); when it fails, exit with
    what it printed (a playbook's failed tasks from the json callback, else its output's tail), not only its
    exit status."""
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    if proc.returncode == 0:
        return
    said = []
    if playbook_run and "{\n" in proc.stdout:
        try:
            said = failures(json.loads(proc.stdout[proc.stdout.index("{\n"):]))
        except ValueError:
            pass
    raise SystemExit("rollout.py: %s failed (exit %d):\n%s" % (
        what, proc.returncode, "\n".join(said) or proc.stdout[-6000:] + proc.stderr[-3000:]))


def callback_document(output):
    """The document the json callback printed into output (ansible-playbook's stdout)."""
    with open(output) as handle:
        text = handle.read()
    try:
        # The pause module prints its own line ("Pausing for 1 seconds") before the callback's document.
        return json.loads(text[text.index("{\n"):])
    except ValueError:
        errors = ""
        if os.path.exists(output + ".err"):
            with open(output + ".err", encoding="utf-8", errors="replace") as handle:
                errors = handle.read()[-3000:]
        raise SystemExit("rollout.py: ansible-playbook printed no JSON document:\n%s%s" % (text[:2000], errors))


def failures(doc, most=10):
    """The first failed task results of a json callback document, one line each: host, task, message."""
    found = []
    for play in doc["plays"]:
        for task in play["tasks"]:
            for host, result in task["hosts"].items():
                if result.get("failed") or result.get("unreachable"):
                    # A loop's message says that an item failed: the item's says why.
                    failed = [item for item in result.get("results", []) if item.get("failed")] or [result]
                    found.append("%s: %s: %s" % (host, task["task"]["name"], str(failed[0].get("msg", ""))[:500]))
    return found[:most]


def module_runs(doc, hosts):
    """Module runs per host in a json callback document (task results that ran something on a host), and
    how many of them each module made, per host."""
    modules = collections.Counter()
    for play in doc["plays"]:
        for task in play["tasks"]:
            for result in task["hosts"].values():
                action = result.get("action", "").rpartition(".")[2]
                if not result.get("skipped") and action not in CONTROLLER_ACTIONS:
                    modules[action] += len([r for r in result.get("results", [result]) if not r.get("skipped")])
    return sum(modules.values()) / hosts, {name: count / hosts for name, count in modules.most_common()}


# Ansible's floor on the same lab: one module run per host of the rollout, nothing else.
PING = """- name: Ansible's floor, one ping per host
  hosts: xdp_hosts
  gather_facts: false
  tasks:
    - name: Ping
      ansible.builtin.ping:
"""


def playbook(root, inventory, name, forks, *extra):
    path = name if os.path.isabs(name) else os.path.join(root, "playbooks", name)
    argv = [PLAYBOOK, "-i", inventory, "-f", str(forks), path]
    for value in extra:
        argv += ["-e", json.dumps(value)]
    return argv


def collection_at(revision, directory):
    """This checkout's collection as it was at revision, under directory/ansible_collections/ebpf/xdp: the
    collections path and the collection's root."""
    root = os.path.join(directory, "ansible_collections", "ebpf", "xdp")
    os.makedirs(root)
    archive = subprocess.run(["git", "-C", ROOT, "archive", revision], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", root], input=archive, check=True)
    # Both run the lab's program as this checkout has it: the inventory sets constants an older one lacks.
    shutil.copy(os.path.join(ROOT, LAB_PROGRAM), os.path.join(root, LAB_PROGRAM))
    return directory, root


def with_strategy(name, env, strategy, mitogen):
    """A collection's (name, env) for one strategy plugin: the default linear one as it is."""
    if strategy == "linear":
        return name, env
    if not mitogen:
        raise SystemExit("rollout.py: --strategies %s needs --mitogen DIR" % strategy)
    return "%s, %s" % (name, strategy), dict(env, ANSIBLE_STRATEGY=strategy, ANSIBLE_STRATEGY_PLUGINS=mitogen)


def measure(name, argv, env, output, hosts, forks, kind):
    """One measured run of a playbook that must succeed: its row and module runs per module."""
    seconds, mib, rc = measured(argv, env, output)
    doc = callback_document(output)
    if rc != 0:
        with open(output + ".err", encoding="utf-8", errors="replace") as handle:
            errors = handle.read()[-3000:]  # what no task result says (an unreachable play, a syntax error)
        raise SystemExit("rollout.py: %s of %s failed (exit %d, %d hosts, forks %d):\n%s"
                         % (kind, name, rc, hosts, forks, "\n".join(failures(doc)) or errors))
    runs, modules = module_runs(doc, hosts)
    if kind != "rollout" and any(host["changed"] for host in doc["stats"].values()):
        raise SystemExit("rollout.py: the %s of %s changed something" % (kind, name))
    row = (name, hosts, forks, kind, seconds, seconds / hosts, runs, mib)
    print("%-14s %5d hosts  forks %3d  %-9s %7.1f s  %5.2f s/host  %5.1f module runs/host  %6.0f MiB" % row,
          flush=True)
    print("%14s per host: %s" % ("", ", ".join("%s %g" % item for item in modules.items())))
    return row


def run_lab(hosts, forks_list, against=None, reruns=1, strategies=("linear",), mitogen=None, lab=None):
    """The measurements on one generated lab of hosts receivers (lab: one that is up already, its traffic
    running, left as it is): (lab_up seconds, rows)."""
    prefix = "bn" + uuid.uuid4().hex[:4]
    directory = lab or tempfile.mkdtemp(prefix="fleet-bench-")
    env = dict(ENV)
    collections = [("this checkout", ROOT, env)]
    others = tempfile.mkdtemp(prefix="fleet-against-")  # out of the inventory directory, which Ansible reads whole
    if against:
        path, root = collection_at(against, others)
        collections.insert(0, (against, root, dict(env, ANSIBLE_COLLECTIONS_PATH=path)))
    variants = []
    for name, root, run_env in collections:
        for strategy in strategies:
            variants.append((root,) + with_strategy(name, run_env, strategy, mitogen))
    output = directory + ".json"  # next to the inventory directory: Ansible would read a file in it as inventory
    ping = os.path.join(others, "ping.yml")
    with open(ping, "w", encoding="utf-8") as handle:
        handle.write(PING)
    rows = []
    lab_seconds = 0.0
    try:
        if not lab:
            required([sys.executable, FLEET, "inventory", directory, "-n", str(hosts), "--prefix", prefix], env,
                     "fleet_lab.py inventory")
            start = time.monotonic()
            required(playbook(ROOT, directory, "lab_up.yml", 10), env, "lab_up.yml", playbook_run=True)
            lab_seconds = time.monotonic() - start
            required([sys.executable, FLEET, "traffic", directory, "start"], env, "fleet_lab.py traffic start")
        release = int(time.time()) if lab else 1  # a release the kept lab has not had
        if against:  # both measured rollouts are upgrades
            required(playbook(ROOT, directory, "deploy_xdp.yml", max(forks_list), {"fleet_release": release}), env,
                     "the first (unmeasured) deploy of this checkout", playbook_run=True)
        for forks in forks_list:
            for root, name, run_env in variants:
                release += 1
                deploy = playbook(root, directory, "deploy_xdp.yml", forks, {"fleet_release": release})
                rows.append(measure(name, deploy, run_env, output, hosts, forks, "rollout"))
                # The floor just before each re-run: one burst of the shared machine's noise hits both alike.
                for _run in range(reruns):
                    rows.append(measure(name, playbook(root, directory, ping, forks), run_env, output, hosts, forks,
                                        "ping floor"))
                    rows.append(measure(name, deploy, run_env, output, hosts, forks, "re-run"))
    finally:
        if not lab:
            subprocess.run([sys.executable, FLEET, "traffic", directory, "stop"], check=False,
                           stdout=subprocess.DEVNULL)
            subprocess.run(playbook(ROOT, directory, "lab_down.yml", 10), env=env, check=False,
                           stdout=subprocess.DEVNULL)
            for i in range(1, hosts + 1):
                shutil.rmtree("/var/lib/ebpf_xdp/lab/%s%03d" % (prefix, i), ignore_errors=True)
            shutil.rmtree(directory, ignore_errors=True)
        shutil.rmtree(others, ignore_errors=True)
        for path in (output, output + ".err"):
            if os.path.exists(path):
                os.unlink(path)
    return lab_seconds, rows


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hosts", default="10,50,100")
    parser.add_argument("--forks", default="10,50")
    parser.add_argument("--against", metavar="REV", help="also the collection at this git revision, side by side")
    parser.add_argument("--reruns", type=int, default=1, help="the no-change re-run this many times")
    parser.add_argument("--strategies", default="linear",
                        help="strategy plugins to measure side by side (linear, mitogen_linear)")
    parser.add_argument("--mitogen", metavar="DIR", help="the directory of Mitogen's strategy plugins")
    parser.add_argument("--lab", metavar="DIR", help="a generated lab that is up (fleet_lab.py, lab_up.yml, "
                        "its traffic started), of --hosts receivers: measured as it is, left up")
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    # Each run's line as it ends: a long run stopped half-way keeps what it measured.
    sys.stdout.reconfigure(line_buffering=True)
    if args.smoke:
        args.hosts, args.forks = "2", "2"  # does it still run? (test_rollout rolls out to 4 hosts)
    forks_list = [int(f) for f in args.forks.split(",")]
    print("deploy_xdp.yml rollout (batches 1, 10%, rest; settle 1 s, rates 1 s) and its idempotent re-run")
    table = []
    for hosts in (int(h) for h in args.hosts.split(",")):
        lab_seconds, rows = run_lab(hosts, forks_list, args.against, args.reruns, args.strategies.split(","),
                                    args.mitogen and os.path.abspath(args.mitogen), args.lab)
        print("%5d hosts  lab_up.yml %.1f s" % (hosts, lab_seconds), flush=True)
        table += rows
    print("\n| collection | hosts | forks | run | wall s | s/host | module runs/host | controller peak RSS MiB |")
    print("|---|---|---|---|---|---|---|---|")
    for row in table:
        print("| %s | %d | %d | %s | %.1f | %.2f | %.1f | %.0f |" % row)
    for (name, hosts, forks), rows in itertools.groupby(table, key=lambda row: row[:3]):
        rows = list(rows)
        seconds = sorted(row[4] for row in rows if row[3] == "re-run")
        floor = sorted(row[4] for row in rows if row[3] == "ping floor")
        print("%s, %d hosts, forks %d: re-run median %.1f s (min %.1f, max %.1f, %d runs); ping floor median %.1f s"
              " (min %.1f, max %.1f); re-run / ping floor %.2f"
              % (name, hosts, forks, statistics.median(seconds), seconds[0], seconds[-1], len(seconds),
                 statistics.median(floor), floor[0], floor[-1], statistics.median(seconds) / statistics.median(floor)))
    if args.smoke and any(row[6] < 1 for row in table):
        raise SystemExit("rollout.py: a run counted no module runs on its hosts")


if __name__ == "__main__":
    main()
