"""Running the collection's modules and playbooks from a benchmark, the way a user's controller runs them.

The benchmarks in tests/benchmarks/*.py import this (their directory is on
sys.path when run as scripts); it lives in a subdirectory so that
scripts/benchmark.sh, which runs every tests/benchmarks/*.py, does not run it.
"""

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
# Inside the Debian 12 VM (make test-debian12, test_rollout_slices.py), which has no venv: the same commands made
# by the controller on the machine that runs it (scripts/test_vm.sh, tests/vm/host_controller.py).
BIN = os.environ.get("EBPF_XDP_ANSIBLE_BIN") or os.path.join(ROOT, ".venv", "bin")
COLLECTIONS = os.path.join(ROOT, ".build", "collections")
# The json callback: one document per run, results by play, task and host.
ENV = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_COLLECTIONS_PATH=COLLECTIONS,
           ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json", ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
           ANSIBLE_LOCALHOST_WARNING="false", ANSIBLE_INVENTORY_UNPARSED_WARNING="false")
# Run on this machine itself, with Debian's Python (as on a lab host), outside any inventory.
LOCALHOST = ("-c", "local", "-i", "localhost,", "-e", "ansible_python_interpreter=/usr/bin/python3")


def import_module_utils():
    """Make the collection importable (ansible_collections.ebpf.xdp...) for benchmarks that use module_utils."""
    if COLLECTIONS not in sys.path:
        sys.path.insert(0, COLLECTIONS)


def module(host, name, args, allow_failure=False, options=()):
    """One module run on host (a name without a dot is ebpf.xdp's); its result. options go before -m
    (LOCALHOST for this machine outside the inventory)."""
    argv = [os.path.join(BIN, "ansible"), host, *options, "-m", name if "." in name else "ebpf.xdp." + name]
    if args:  # "{}" would be raw parameters to ansible
        argv += ["-a", json.dumps(args)]
    proc = subprocess.run(argv, capture_output=True, text=True, env=ENV, cwd=ROOT, check=False)
    try:
        result = json.loads(proc.stdout)["plays"][0]["tasks"][0]["hosts"][host]
    except (ValueError, KeyError, IndexError):
        raise SystemExit("ansible printed no result for %s %s:\n%s%s" % (host, name, proc.stdout[-3000:],
                                                                         proc.stderr[-2000:]))
    if result.get("failed") and not allow_failure:
        raise SystemExit("%s on %s failed: %s" % (name, host, result.get("msg")))
    return result


def playbook(*paths):
    """Run playbooks (a name without a slash is one of playbooks/); their results, or exit with what failed."""
    argv = [os.path.join(BIN, "ansible-playbook")] + [p if "/" in p else os.path.join(ROOT, "playbooks", p)
                                                      for p in paths]
    proc = subprocess.run(argv, capture_output=True, text=True, env=ENV, cwd=ROOT, check=False)
    try:
        out = json.loads(proc.stdout)
    except ValueError:
        raise SystemExit("%s printed no results:\n%s%s" % (" ".join(paths), proc.stdout[-3000:], proc.stderr[-2000:]))
    if proc.returncode:
        failed = ["%s on %s: %s" % (task["task"]["name"], host, result.get("msg"))
                  for play in out["plays"] for task in play["tasks"] for host, result in task["hosts"].items()
                  if result.get("failed") or result.get("unreachable")]
        raise SystemExit("%s failed:\n%s" % (" ".join(paths), "\n".join(failed) or proc.stderr[-2000:]))
    return out


def write_play(name, plays):
    """A generated playbook under .build (JSON is YAML); its path."""
    path = os.path.join(ROOT, ".build", name)
    with open(path, "w") as f:
        json.dump(plays, f)
    return path
