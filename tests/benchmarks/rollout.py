#!/usr/bin/env python
"""deploy_xdp.yml as a rollout on generated labs of N receivers: wall time, time per host, controller memory.

    .venv/bin/python tests/benchmarks/rollout.py [--hosts 10,50,100] [--forks 10,50] | --smoke

For each N, scripts/fleet_lab.py writes a lab of N receiver namespaces
behind one bridge (its own prefix), lab_up.yml builds it and a broadcast
ping feeds every receiver. Then, for each forks setting: a rollout of a
new release (canary, 10%, the rest; settle 1 s, rates over 1 s, the lab's
three health rules) and an idempotent re-run. Printed per run: wall time,
wall time per host, and the controller's peak resident memory (the largest
of ansible-playbook and its forked workers, from getrusage(RUSAGE_CHILDREN)
of a child process that runs only that playbook; on this lab the modules, children too, are smaller). --smoke: 2 hosts, forks 2.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid

from harness.ansible_cli import ENV, ROOT

FLEET = os.path.join(ROOT, "scripts", "fleet_lab.py")
PLAYBOOK = os.path.join(ROOT, ".venv", "bin", "ansible-playbook")


def measured(argv, env):
    """Run argv in a child that reports its children's peak RSS: (seconds, MiB, returncode)."""
    probe = ("import resource, subprocess, sys, json;"
             "rc = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode;"
             "print(json.dumps([rc, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss]))")
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", probe] + argv, capture_output=True, text=True, env=env, check=True)
    seconds = time.monotonic() - start
    rc, maxrss_kib = json.loads(proc.stdout)
    return seconds, maxrss_kib / 1024.0, rc


def playbook(inventory, name, forks, *extra):
    argv = [PLAYBOOK, "-i", inventory, "-f", str(forks), os.path.join(ROOT, "playbooks", name)]
    for value in extra:
        argv += ["-e", json.dumps(value)]
    return argv


def run_lab(hosts, forks_list, release_base):
    prefix = "bn" + uuid.uuid4().hex[:4]
    directory = tempfile.mkdtemp(prefix="fleet-bench-")
    env = dict(ENV)
    rows = []
    try:
        subprocess.run([sys.executable, FLEET, "inventory", directory, "-n", str(hosts), "--prefix", prefix],
                       check=True, stdout=subprocess.DEVNULL)
        start = time.monotonic()
        subprocess.run([PLAYBOOK, "-i", directory, os.path.join(ROOT, "playbooks", "lab_up.yml")], env=env,
                       check=True, stdout=subprocess.DEVNULL)
        lab_seconds = time.monotonic() - start
        subprocess.run([sys.executable, FLEET, "traffic", directory, "start"], check=True, stdout=subprocess.DEVNULL)
        for n, forks in enumerate(forks_list):
            release = {"fleet_release": release_base + n}
            for kind in ("rollout", "re-run"):
                seconds, mib, rc = measured(playbook(directory, "deploy_xdp.yml", forks, release), env)
                if rc != 0:
                    raise SystemExit("rollout.py: deploy_xdp.yml failed (%s, %d hosts, forks %d)" % (kind, hosts, forks))
                rows.append((hosts, forks, kind, seconds, seconds / hosts, mib))
                print("%5d hosts  forks %3d  %-8s %7.1f s  %5.2f s/host  %6.0f MiB" % rows[-1], flush=True)
    finally:
        subprocess.run([sys.executable, FLEET, "traffic", directory, "stop"], check=False, stdout=subprocess.DEVNULL)
        subprocess.run([PLAYBOOK, "-i", directory, os.path.join(ROOT, "playbooks", "lab_down.yml")], env=env,
                       check=False, stdout=subprocess.DEVNULL)
        for i in range(1, hosts + 1):
            shutil.rmtree("/var/lib/ebpf_xdp/lab/%s%03d" % (prefix, i), ignore_errors=True)
        shutil.rmtree(directory, ignore_errors=True)
    return lab_seconds, rows


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hosts", default="10,50,100")
    parser.add_argument("--forks", default="10,50")
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    if args.smoke:
        args.hosts, args.forks = "2", "2"  # does it still run? (test_rollout rolls out to 4 hosts)
    forks_list = [int(f) for f in args.forks.split(",")]
    print("deploy_xdp.yml rollout (batches 1, 10%, rest; settle 1 s, rates 1 s) and its idempotent re-run")
    table = []
    for hosts in (int(h) for h in args.hosts.split(",")):
        lab_seconds, rows = run_lab(hosts, forks_list, release_base=2)
        print("%5d hosts  lab_up.yml %.1f s" % (hosts, lab_seconds), flush=True)
        table += rows
    print("\n| hosts | forks | run | wall s | s/host | controller peak RSS MiB |")
    print("|---|---|---|---|---|---|")
    for row in table:
        print("| %d | %d | %s | %.1f | %.2f | %.0f |" % row)


if __name__ == "__main__":
    main()
