"""Two runs of playbooks/benchmark.yml at once on one machine, as two developers' runs (or CI beside one) meet on
the lab: the role's exporter-scrape case (the control family) uses names of the host that every run shares: the
namespace ebpf_bench_metrics, port 9438 in the cost host's namespace, the exporter's service name, configuration
and pid file under benchmark_objects_dir. The runs must not measure or tear down each other's exporter: the
second waits for the first, says so, and then measures an exporter of its own.

The cost host is a namespace of this test (reached through the ebpf.xdp.netns connection, as the lab's
receiver); both runs delegate to it, with one objects directory, as two runs with the defaults do. Two benchmark
runs, one after the other: marked long (make test-long); the run lock's logic has unit tests in make test.

And the role's order of taking hosts, with lock files of this test's: two runs over two hosts do not each hold one
and wait for the other.
"""

import importlib.util
import json
import os
import re
import threading
import time
import uuid

import pytest
import yaml

from conftest import ROOT, SYSTEM_PYTHON, ansible_playbook, sh

LOCK_FILE = "/run/ebpf_xdp/benchmark.lock"
ENSURE = "Start the exporter, or restart it on newer code or another configuration"
WAITING = "Say which benchmark run holds the hosts"
NAMED = "Name this run (its controller and ansible-playbook)"
TRY = "Take the host if no other run holds it"
TAKE = "Take the hosts for this run"
RUN_LOCK = os.path.join(ROOT, "roles", "benchmark", "files", "run_lock.py")


@pytest.fixture
def cost_host():
    name = "bm%s" % uuid.uuid4().hex[:6]
    sh("ip", "netns", "add", name)
    sh("ip", "-n", name, "link", "set", "lo", "up")
    yield name
    sh("ip", "netns", "del", name, check=False)


def task_hosts(out, name):
    """Every result of the tasks called name (a role's tasks are named "ROLE : name"), in order."""
    return [result for play in out["plays"] for task in play["tasks"]
            if name in (task["task"]["name"], task["task"]["name"].partition(" : ")[2])
            for result in task["hosts"].values()]


def only(items):
    assert len(items) == 1, items
    return items[0]


def lock_answers(out):
    """run_lock.py's answers to this run for the hosts it took: from the try (taken at once) or from the take."""
    answers = [json.loads(item["stdout"]) for result in task_hosts(out, TRY) + task_hosts(out, TAKE)
               for item in result.get("results", [result]) if "stdout" in item]
    return [answer for answer in answers if answer["taken"]]


def failures(out):
    return ["%s: %s" % (task["task"]["name"], result.get("msg") or result.get("stderr"))
            for play in out["plays"] for task in play["tasks"] for result in task["hosts"].values()
            if result.get("failed") and not result.get("skipped")]


@pytest.mark.long
def test_two_runs_at_once_each_measure_an_exporter_of_their_own(cost_host, tmp_path):
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {cost_host: {
        "ansible_connection": "ebpf.xdp.netns", "ansible_python_interpreter": SYSTEM_PYTHON}}}}))
    objects = tmp_path / "objects"
    common = {"benchmark_cases": "control", "benchmark_cost_host": cost_host, "benchmark_control_playbook": "",
              "benchmark_repeat": 1, "benchmark_cost_repeat": 1000, "benchmark_metrics_programs": [1, 4],
              "benchmark_metrics_scrapes": 3, "benchmark_objects_dir": str(objects),
              "benchmark_install_packages": False}
    outs = {}

    def benchmark(run):
        extra = dict(common, benchmark_results_dir=str(tmp_path / run))
        outs[run] = ansible_playbook("-i", str(inventory), os.path.join(ROOT, "playbooks", "benchmark.yml"),
                                     expect_ok=False, extra_vars=[extra])

    threads = [threading.Thread(target=benchmark, args=(run,)) for run in ("first", "second")]
    for thread in threads:
        thread.start()
        time.sleep(2)  # the second comes while the first prepares
    for thread in threads:
        thread.join()

    problems = {run: failures(out) for run, out in outs.items() if failures(out)}
    assert not problems, json.dumps(problems, indent=1)
    pids = {}
    for run, out in outs.items():
        [report_dir] = os.listdir(tmp_path / run)
        with open(tmp_path / run / report_dir / "results.json", encoding="utf-8") as src:
            records = json.load(src)["results"]
        scrapes = sorted(r["case"] for r in records if r["case"].startswith("metrics scrape"))
        assert scrapes == ["metrics scrape, 1 program"] * 3 + ["metrics scrape, 4 programs"] * 3, (run, scrapes)
        [ensured] = task_hosts(out, ENSURE)
        started = json.loads(ensured["stdout"])
        # Its own exporter, started by this run: not one the other run left running.
        assert started["action"] == "started", (run, started)
        pids[run] = started["pid"]
    assert pids["first"] != pids["second"], pids
    # One run waited for the other, said whose run it waited for before it did, and took the host once that run
    # had given it back; the other took it at once.
    runs = {run: json.loads(only(task_hosts(out, NAMED))["stdout"])["run"] for run, out in outs.items()}
    said = {run: [r["msg"] for r in task_hosts(out, WAITING) if not r.get("skipped")] for run, out in outs.items()}
    [waited] = [run for run, msgs in said.items() if msgs]
    [other] = set(runs) - {waited}
    assert re.fullmatch(r"benchmark: the hosts are held by another benchmark run \(run %s, ansible-playbook pid \d+ "
                        r"on .+, since .+\); waiting up to 3600 s for it to end" % runs[other],
                        only(said[waited])), said
    took = {run: only(lock_answers(out)) for run, out in outs.items()}
    assert took[other]["waited_for"] is None and took[waited]["waited_for"].startswith("run %s," % runs[other]), took
    assert took[waited]["waited_seconds"] > 10, took
    # Nothing left: no exporter, no scrape namespace, no lock of these runs, no metrics directory.
    assert "ebpf_bench_metrics" not in sh("ip", "netns", "list").stdout.split()
    if os.path.exists(LOCK_FILE):
        with open(LOCK_FILE, encoding="utf-8") as src:
            assert json.load(src)["run"] not in runs.values()
    assert not (objects / "metrics").exists()
    assert not [pid for pid in pids.values() if os.path.exists("/proc/%d" % pid)]


def _run_lock():
    spec = importlib.util.spec_from_file_location("run_lock", RUN_LOCK)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _waiting_takes(run_lock, lock_dir):
    """The pids of run_lock.py take processes waiting on a lock in lock_dir: asleep between two reads of a lock
    found held (a process only started, as under emulation, has not read it yet)."""
    pids = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        argv = run_lock._cmdline(int(pid))  # pylint: disable=protected-access
        try:
            with open("/proc/%s/wchan" % pid, encoding="ascii") as src:
                asleep = "nanosleep" in src.read()
        except OSError:
            continue
        if asleep and any(arg.endswith("run_lock.py") for arg in argv) and "take" in argv and any(
                arg.startswith(lock_dir + "/") for arg in argv):
            pids.append(pid)
    return pids


def test_two_runs_listing_two_hosts_in_opposite_orders_both_take_them(tmp_path):
    """Two runs over the same two hosts, each host with a lock of its own (two machines), their inventories listing
    them in opposite orders, both waiting for a third holder of both: once it gives them back, one run takes both
    and the other waits for it. Taking them in each run's own order (or trying every host) would leave each run
    holding one and waiting for the other's until benchmark_lock_wait."""
    run_lock = _run_lock()
    lock_dir = tmp_path / "run"
    lock_dir.mkdir(mode=0o755)
    hosts = ["lockhost1", "lockhost2"]
    third = dict(run_lock.holder(), pid=os.getpid(), pid_start=run_lock._start_time(os.getpid()))
    for host in hosts:
        assert run_lock.take(str(lock_dir / ("%s.lock" % host)), third, 0)["taken"]
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {host: {
        "ansible_connection": "local", "ansible_python_interpreter": SYSTEM_PYTHON} for host in hosts}}}))
    playbook = tmp_path / "lock.yml"
    tasks = [{"name": name, "ansible.builtin.include_role": {"name": "ebpf.xdp.benchmark", "tasks_from": part}}
             for name, part in (("Hold them", "lock"), ("Give them back", "unlock"))]
    playbook.write_text(yaml.safe_dump([{"name": "Hold the hosts, then give them back", "hosts": "localhost",
                                         "gather_facts": False, "tasks": tasks}]))
    # Each host's lock in a /run of its own, as on two machines (the role's private variable, set only here).
    lock_file = "{{ '%s/' ~ (__benchmark_lock_host | default(item)) ~ '.lock' }}" % lock_dir
    outs = {}

    def run(order):
        outs[order[0]] = ansible_playbook(
            "-i", str(inventory), str(playbook), expect_ok=False,
            extra_vars=[{"__benchmark_hosts": order, "__benchmark_lock_file": lock_file, "benchmark_lock_wait": 120}])

    threads = [threading.Thread(target=run, args=(order,)) for order in (hosts, hosts[::-1])]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 300
    while len(_waiting_takes(run_lock, str(lock_dir))) < 2:  # both runs found the hosts held and wait
        assert time.monotonic() < deadline and all(t.is_alive() for t in threads), outs
        time.sleep(0.2)
    for host in hosts:
        assert run_lock.give(str(lock_dir / ("%s.lock" % host)), third["run"]) == {"given": True}
    for thread in threads:
        thread.join()

    problems = {run: failures(out) for run, out in outs.items() if failures(out)}
    assert not problems, json.dumps(problems, indent=1)
    said = {run: [r["msg"] for r in task_hosts(out, WAITING) if not r.get("skipped")] for run, out in outs.items()}
    assert all(only(msgs).startswith("benchmark: the hosts are held by another benchmark run (run %s," % third["run"])
               for msgs in said.values()), said
    took = {run: lock_answers(out) for run, out in outs.items()}
    assert all(len(answers) == 2 for answers in took.values()), took
    # Both waited at the first host in the one order (by name), for the third holder.
    assert all(answers[0]["waited_for"].startswith("run %s," % third["run"]) for answers in took.values()), took
    assert os.listdir(lock_dir) == []
