#!/usr/bin/env python
"""deploy_xdp.yml under AWX job slicing, reproduced on the generated lab: N slices as N ansible-runner processes at
once, after the canary as a job of its own (an AWX workflow: the canary template, then the sliced template).

    .venv/bin/python tests/benchmarks/slices.py [--hosts 100] [--slices 1,2,4] [--forks 50]
    .venv/bin/python tests/benchmarks/slices.py --smoke

The assignment is AWX's: the enabled hosts sorted by name, slice k of N gets hosts[k-1::N] in an inventory of
its own (AWX hands each slice a pared-down inventory), and a slice left empty fails the job. The workflow, for
each N in turn on one lab of --hosts receivers (scripts/fleet_lab.py):

  canary   one job, --limit the first host by name, the inventory's batches (1 host), its gate;
  sliced   N jobs at once, each deploy_xdp.yml on its slice with batches 10% then the rest
           (xdp_serial), the slices keeping in step through markers on one host every slice reaches
           (xdp_rollout_signal_host: here localhost, which all slices of this machine share; a rollout id
           per workflow launch, as AWX's awx_workflow_job_id; xdp_rollout_slices N).

Per N: a healthy rollout of a new release, its no-change re-run (every slice changed=0), and, with N >= 2, a
release that is faulty on slice 2's first batch: slice 2's gate fails and rolls back exactly those hosts, every
other slice stops before its next batch (its first batch stays on the new release, the rest untouched) and
every slice's job fails. Printed per run: the workflow's wall time (canary + the slowest slice), and the
controller's CPU-seconds per host: the CPU of every ansible-runner process and its children (ansible-playbook,
its forks, the event callback) less what ran inside the hosts' namespaces (the modules: each nsenter of the
ebpf.xdp.netns connection is timed), so what the execution nodes would spend, not the fleet.

--smoke: 4 hosts, 2 slices (batches 1, then the rest), the fault case with its assertions, no table (~4 min: not
in make test's benchmark smoke, where tests/integration/test_rollout_slices.py asserts the same).
"""

import argparse
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
import uuid

import yaml

from harness.ansible_cli import BIN, ENV, ROOT

FLEET = os.path.join(ROOT, "scripts", "fleet_lab.py")
PLAYBOOKS = os.path.join(ROOT, "playbooks")
# ansible-runner brings its own stdout callback (the events of an AWX job).
RUNNER_ENV = {k: v for k, v in ENV.items() if k not in ("ANSIBLE_STDOUT_CALLBACK", "ANSIBLE_LOAD_CALLBACK_PLUGINS")}
# Every command of the netns connection, timed (user and system CPU seconds appended to $SLICES_HOST_CPU).
NSENTER_TIMED = """#!/bin/sh
exec /usr/bin/time -a -o "${SLICES_HOST_CPU:-/dev/null}" -f "cpu %U %S" nsenter "$@"
"""
# What runs a command and reports its children's CPU seconds: the whole process tree of one job.
PROBE = ("import resource, subprocess, sys, json;"
         "rc = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode;"
         "u = resource.getrusage(resource.RUSAGE_CHILDREN);"
         "print(json.dumps([rc, u.ru_utime + u.ru_stime]))")


def awx_slices(hosts, count):
    """AWX's job slicing: enabled hosts by name, slice k of count gets hosts[k-1::count]; an empty slice fails
    the job (awx/main/models/inventory.py, get_sliced_hosts)."""
    ordered = sorted(hosts)
    slices = [ordered[k::count] for k in range(count)]
    for number, hosts_of_slice in enumerate(slices, 1):
        if not hosts_of_slice:
            raise SystemExit("slices.py: slice %d of %d has no hosts: AWX fails the job" % (number, count))
    return slices


def batch_sizes(total, serial):
    """Ansible's serial batches (pct_to_int) of total hosts, as ebpf.xdp.rollout_batches computes them."""
    sizes, left, index = [], total, 0
    while left > 0:
        value = str(serial[min(index, len(serial) - 1)])
        size = (int(float(value[:-1]) / 100.0 * total) or 1) if value.endswith("%") else int(value)
        sizes.append(min(size, left))
        left -= sizes[-1]
        index += 1
    return sizes


class Lab:
    """The generated lab of N receivers and what the slices' jobs need around it."""

    def __init__(self, hosts, forks):
        self.hosts_count, self.forks = hosts, forks
        self.prefix = "sl" + uuid.uuid4().hex[:4]
        self.work = tempfile.mkdtemp(prefix="slices-bench-")
        self.inventory = os.path.join(self.work, "lab")
        self.signals = os.path.join(self.work, "signals")
        self.nsenter = os.path.join(self.work, "nsenter-timed")
        with open(self.nsenter, "w", encoding="utf-8") as handle:
            handle.write(NSENTER_TIMED)
        os.chmod(self.nsenter, stat.S_IRWXU)
        self.hosts = ["%s%03d" % (self.prefix, i) for i in range(1, hosts + 1)]
        self.jobs = 0

    def up(self):
        subprocess.run([sys.executable, FLEET, "inventory", self.inventory, "-n", str(self.hosts_count),
                        "--prefix", self.prefix], check=True, stdout=subprocess.DEVNULL)
        subprocess.run([os.path.join(BIN, "ansible-playbook"), "-i", self.inventory, "-f", "10",
                        os.path.join(PLAYBOOKS, "lab_up.yml")], env=ENV, check=True, stdout=subprocess.DEVNULL)
        subprocess.run([sys.executable, FLEET, "traffic", self.inventory, "start"], check=True,
                       stdout=subprocess.DEVNULL)

    def down(self):
        subprocess.run([sys.executable, FLEET, "traffic", self.inventory, "stop"], check=False,
                       stdout=subprocess.DEVNULL)
        subprocess.run([os.path.join(BIN, "ansible-playbook"), "-i", self.inventory, "-f", "10",
                        os.path.join(PLAYBOOKS, "lab_down.yml")], env=ENV, check=False, stdout=subprocess.DEVNULL)
        for host in self.hosts:
            shutil.rmtree("/var/lib/ebpf_xdp/lab/%s" % host, ignore_errors=True)
        shutil.rmtree(self.work, ignore_errors=True)

    def slice_inventory(self, name, hosts):
        """The lab's inventory pared down to hosts, as AWX hands a slice its own: same groups and group_vars."""
        directory = os.path.join(self.work, "inventory-" + name)
        if os.path.isdir(directory):
            shutil.rmtree(directory)
        os.makedirs(directory)
        shutil.copytree(os.path.join(self.inventory, "group_vars"), os.path.join(directory, "group_vars"))
        with open(os.path.join(self.inventory, "hosts.yml"), encoding="utf-8") as handle:
            inventory = yaml.safe_load(handle)
        receivers = inventory["all"]["children"]["lab"]["children"]["fleet_receivers"]
        receivers["hosts"] = {host: None for host in hosts}
        with open(os.path.join(directory, "hosts.yml"), "w", encoding="utf-8") as handle:
            yaml.safe_dump(inventory, handle, sort_keys=False)
        return directory

    def start_job(self, name, hosts, extra_vars, limit=None, check=False):
        """One AWX job: ansible-runner run of deploy_xdp.yml on hosts' inventory, as a process of its own."""
        self.jobs += 1
        data = os.path.join(self.work, "job-%d-%s" % (self.jobs, name))
        os.makedirs(data)
        cpu_file = os.path.join(data, "host-cpu")
        argv = [os.path.join(BIN, "ansible-runner"), "run", data, "-p", "deploy_xdp.yml", "--project-dir", PLAYBOOKS,
                "--inventory", self.slice_inventory(name, hosts), "--forks", str(self.forks), "--ident", "job", "-q",
                "--cmdline", "-e '%s'" % json.dumps(dict(extra_vars, ansible_netns_nsenter_path=self.nsenter))
                + (" --check" if check else "")]
        if limit:
            argv += ["--limit", limit]
        env = dict(RUNNER_ENV, SLICES_HOST_CPU=cpu_file)
        # pylint: disable-next=consider-using-with
        proc = subprocess.Popen([sys.executable, "-c", PROBE] + argv, stdout=subprocess.PIPE, text=True, env=env)
        return {"name": name, "hosts": hosts, "dir": data, "proc": proc, "cpu_file": cpu_file}

    def finish_job(self, job):
        out = job["proc"].communicate()[0]
        rc, cpu = json.loads(out)
        host_cpu = 0.0
        if os.path.exists(job["cpu_file"]):
            with open(job["cpu_file"], encoding="utf-8") as handle:
                for line in handle:
                    parts = line.split()
                    if len(parts) == 3 and parts[0] == "cpu":
                        host_cpu += float(parts[1]) + float(parts[2])
        events = []
        directory = os.path.join(job["dir"], "artifacts", "job", "job_events")
        for entry in os.listdir(directory) if os.path.isdir(directory) else []:
            with open(os.path.join(directory, entry), encoding="utf-8") as handle:
                events.append(json.load(handle))
        events.sort(key=lambda event: event["counter"])
        job.update(rc=rc, cpu=cpu, host_cpu=host_cpu, events=events)
        return job


def stats(job):
    """The job's playbook_on_stats: per kind (changed, failures, dark), the hosts with a count."""
    found = [e["event_data"] for e in job["events"] if e["event"] == "playbook_on_stats"]
    if not found:
        raise SystemExit("slices.py: job %s printed no stats (rc %s):\n%s" % (job["name"], job["rc"], failures(job)))
    return found[0]


def summary(job):
    """The rollout's summary (entry point summary's xdp_rollout_summary) of the job."""
    for event in job["events"]:
        data = event.get("event_data", {})
        if event["event"] == "runner_on_ok" and data.get("task") == "Sum up the rollout":
            return data["res"]["ansible_facts"]["xdp_rollout_summary"]
    raise SystemExit("slices.py: job %s has no summary (rc %s):\n%s" % (job["name"], job["rc"], failures(job)))


def failures(job, most=8):
    lines = []
    for event in job["events"]:
        data = event.get("event_data", {})
        if event["event"] in ("runner_on_failed", "runner_on_unreachable") and not data.get("ignore_errors"):
            lines.append("%s: %s: %s" % (data.get("host"), data.get("task"), str(data["res"].get("msg", ""))[:400]))
    if not lines:  # no task failed: the job's own output says why (a playbook error, ansible-runner's)
        stdout = os.path.join(job["dir"], "artifacts", "job", "stdout")
        if os.path.exists(stdout):
            with open(stdout, encoding="utf-8", errors="replace") as handle:
                lines.append(handle.read()[-3000:])
    return "\n".join(lines[:most])


def workflow(lab, count, release, serial, fault_hosts=(), check=False, extra=None, only=None):
    """The canary job, then count slices at once (only: the numbers of those that run, all by default); the jobs
    and the wall times (canary, sliced step). extra: more variables for the slices."""
    common = {"fleet_release": release, "fleet_fault_hosts": sorted(fault_hosts)}
    canary_host = sorted(lab.hosts)[0]
    start = time.monotonic()
    canary = lab.finish_job(lab.start_job("canary", lab.hosts, common, limit=canary_host, check=check))
    canary_wall = time.monotonic() - start
    if canary["rc"] != 0:
        raise SystemExit("slices.py: the canary job failed:\n%s" % failures(canary))
    sliced = dict(common, xdp_serial=serial, xdp_rollout_signal_host="localhost",
                  xdp_rollout_signal_dir=lab.signals, xdp_rollout_id=uuid.uuid4().hex, xdp_rollout_slices=count,
                  **(extra or {}))
    start = time.monotonic()
    jobs = [lab.start_job("slice%d" % number, hosts, sliced, check=check)
            for number, hosts in enumerate(awx_slices(lab.hosts, count), 1) if only is None or number in only]
    jobs = [lab.finish_job(job) for job in jobs]
    for job in jobs:
        job["rollout_id"] = sliced["xdp_rollout_id"]
    return canary, jobs, canary_wall, time.monotonic() - start


def check_healthy(canary, jobs, rerun):
    for job in [canary] + jobs:
        if job["rc"] != 0:
            raise SystemExit("slices.py: job %s failed:\n%s" % (job["name"], failures(job)))
        changed = [host for host, count in stats(job)["changed"].items() if count]
        if rerun and changed:
            raise SystemExit("slices.py: the re-run of %s changed %s" % (job["name"], ", ".join(changed)))
    if not rerun:
        updated = set(summary(canary)["updated"])
        for job in jobs:
            updated |= set(summary(job)["updated"])
        missing = sorted(set(h for job in jobs for h in job["hosts"]) - updated)
        if missing:
            raise SystemExit("slices.py: the rollout left %s on the old release" % ", ".join(missing))


def check_fault(jobs, serial, fault_hosts, canary_host):
    """Slice 2 rolled back exactly its faulty first batch; every other slice stopped before its batch 2."""
    for number, job in enumerate(jobs, 1):
        if job["rc"] == 0:
            raise SystemExit("slices.py: slice %d's job passed a rollout that stopped" % number)
        result = summary(job)
        first = job["hosts"][:batch_sizes(len(job["hosts"]), serial)[0]]
        rest = job["hosts"][len(first):]
        if number == 2:
            expected = {"rolled_back": sorted(fault_hosts), "updated": [], "untouched": rest, "stopped_at_batch": 1,
                        "stopped_by": None}
        else:
            expected = {"rolled_back": [], "updated": [h for h in first if h != canary_host], "untouched": rest,
                        "stopped_at_batch": 2, "stopped_by": "slice %s stopped" % jobs[1]["hosts"][0]}
        got = {key: sorted(result[key]) if isinstance(result[key], list) else result[key] for key in expected}
        got["stopped_at_batch"] = int(got["stopped_at_batch"])
        expected = {key: sorted(value) if isinstance(value, list) else value for key, value in expected.items()}
        if got != expected:
            raise SystemExit("slices.py: slice %d after the fault:\n  expected %s\n  got      %s"
                             % (number, expected, got))


def measure(lab, counts, serial, smoke):
    rows, release = [], 1
    canary_host = sorted(lab.hosts)[0]
    for count in counts:
        runs = [("rollout", False), ("re-run", True)] + ([("fault", None)] if count >= 2 else [])
        for kind, rerun in runs:
            if kind != "re-run":
                release += 1
            fault = awx_slices(lab.hosts, count)[1][:batch_sizes(len(awx_slices(lab.hosts, count)[1]), serial)[0]] \
                if kind == "fault" else []
            canary, jobs, canary_wall, sliced_wall = workflow(lab, count, release, serial, fault)
            if kind == "fault":
                check_fault(jobs, serial, fault, canary_host)
            else:
                check_healthy(canary, jobs, rerun)
            cpu = sum(job["cpu"] for job in [canary] + jobs)
            host_cpu = sum(job["host_cpu"] for job in [canary] + jobs)
            walls = [canary_wall, sliced_wall]
            rows.append((count, kind, walls[0] + walls[1], walls[0], walls[1], (cpu - host_cpu) / lab.hosts_count,
                         host_cpu / lab.hosts_count,
                         max(job["cpu"] - job["host_cpu"] for job in jobs)))
            print("%d slices  %-8s wall %6.1f s (canary %5.1f, sliced %6.1f)  controller %.3f CPU-s/host  "
                  "hosts %.3f CPU-s/host  slowest slice's controller %.1f CPU-s" % rows[-1], flush=True)
            if kind == "fault" and smoke:
                print("  slice 2 rolled back %s; the other slices stopped before their batch 2" % ", ".join(fault))
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hosts", type=int, default=100)
    parser.add_argument("--slices", default="1,2,4")
    parser.add_argument("--forks", type=int, default=50)
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    sys.stdout.reconfigure(line_buffering=True)
    serial = ["10%", "100%"]
    if args.smoke:
        args.hosts, args.slices, args.forks, serial = 4, "2", 4, [1, "100%"]
    counts = [int(c) for c in args.slices.split(",")]
    print("deploy_xdp.yml as an AWX workflow: the canary job, then N slices at once (batches %s each); %d hosts, "
          "forks %d per job" % (", ".join(map(str, serial)), args.hosts, args.forks))
    lab = Lab(args.hosts, args.forks)
    try:
        lab.up()
        rows = measure(lab, counts, serial, args.smoke)
    finally:
        lab.down()
    if args.smoke:
        return
    print("\n| slices | run | wall s | canary s | sliced s | controller CPU-s/host | host CPU-s/host "
          "| slowest slice's controller CPU-s |")
    print("|---|---|---|---|---|---|---|---|")
    for row in rows:
        print("| %d | %s | %.1f | %.1f | %.1f | %.3f | %.3f | %.1f |" % row)


if __name__ == "__main__":
    main()
