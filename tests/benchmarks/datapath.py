#!/usr/bin/env python
"""A no-change ebpf.xdp.datapath run, and what it costs: on the lab's switch (its 10 XDP programs, xdp_multicast on
eth0..eth9 with one shared map set, and 2 multicast groups), or on N programs in one namespace of its own;
with --against REV, side by side with the collection as it was at git revision REV.

    .venv/bin/python tests/benchmarks/datapath.py [--runs 20] [--programs N] [--against REV] | --smoke

The lab's switch: the lab is brought up and the switch converged by the role ebpf.xdp.xdp_deploy with the
inventory's variables (lab_up.yml, then one play of the role on the switch: what deploy_xdp.yml does to it).
--programs N instead: a namespace of its own with N veth pairs, xdp_multicast on one end of each (generic mode, one
shared map set), put there by one datapath run of this checkout, and removed at the end. Then `state:
gathered` reads the data path in the config's shape, and the same config is converged again with `state:
overridden`, a no-change run, alternating round after round:

- in process: _datapath.run() in the namespace, the module's own work (no start-up), each revision in a
  process of its own (harness/datapath_runs.py);
- the module as a task starts it on the host: Debian's Python, `python3 -m ...modules.datapath`, its
  arguments on stdin (start-up and work);
- one `ansible switch -m ebpf.xdp.datapath` (the controller's part too; the lab's switch, this checkout only).

Every run must report no change. Printed: median, min and max milliseconds of each, and the system calls of one
in-process run of each revision, counted by strace: bpf() (libxdp's own included) and netlink requests (sendto
and sendmsg: the module uses no other socket), with this checkout's host session counts (bpf, netlink, records).
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

from harness.ansible_cli import COLLECTIONS, ROOT, import_module_utils, module, playbook, write_play

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "harness", "datapath_runs.py")

SWITCH = "switch"
PIN_ROOT = "/sys/fs/bpf/ebpf_xdp"  # the lab's (xdp_deploy_pin_root's default)
DEPLOY_SWITCH = [{"name": "Converge the switch as the inventory says", "hosts": SWITCH, "gather_facts": False,
                  "roles": [{"role": "ebpf.xdp.xdp_deploy"}]}]


def collection_at(revision, directory):
    """This checkout's collection as it was at revision, under directory/ansible_collections/ebpf/xdp; directory."""
    root = os.path.join(directory, "ansible_collections", "ebpf", "xdp")
    os.makedirs(root)
    archive = subprocess.run(["git", "-C", ROOT, "archive", revision], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", root], input=archive, check=True)
    return directory


def module_path(collections, path):
    """A PYTHONPATH with ansible-core and one collection only, for Debian's Python (as tests/integration does)."""
    import ansible  # pylint: disable=import-outside-toplevel
    os.makedirs(path, exist_ok=True)
    for name, target in (("ansible", os.path.dirname(ansible.__file__)),
                         ("ansible_collections", os.path.join(collections, "ansible_collections"))):
        link = os.path.join(path, name)
        if not os.path.islink(link):
            os.symlink(target, link)
    return path


def started(args, netns, path):
    """The module as a task starts it on the host: its result."""
    payload = {"ANSIBLE_MODULE_ARGS": dict(args, _ansible_module_name="ebpf.xdp.datapath")}
    # nsenter, not `ip netns exec`: that mounts a sysfs of the namespace over /sys, hiding bpffs (the netns
    # connection enters the namespace only, too).
    proc = subprocess.run(["nsenter", "--net=/run/netns/" + netns, "/usr/bin/python3", "-m",
                           "ansible_collections.ebpf.xdp.plugins.modules.datapath"],
                          input=json.dumps(payload), capture_output=True, text=True, cwd="/tmp", check=False,
                          env=dict(os.environ, PYTHONPATH=path))
    try:
        return json.loads(proc.stdout)
    except ValueError:
        raise SystemExit("datapath printed no result:\n%s%s" % (proc.stdout[-2000:], proc.stderr[-2000:]))


def in_process(collections, netns, params_file, runs, strace=None):
    """runs no-change runs of the revision in collections, in a process of its own: {"times", "counts"}; under
    strace, counting its system calls into the file strace."""
    argv = [sys.executable, WORKER, collections, netns, params_file, str(runs)]
    if strace:
        argv = ["strace", "-f", "-qq", "-c", "-e", "trace=bpf,sendto,sendmsg", "-o", strace] + argv
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    if proc.returncode:
        raise SystemExit("datapath_runs.py failed:\n%s%s" % (proc.stdout[-2000:], proc.stderr[-2000:]))
    return json.loads(proc.stdout)


def syscalls(collections, netns, params_file, directory):
    """One in-process run's bpf() calls and netlink requests, by strace; and the run's own session counts."""
    path = os.path.join(directory, "strace.txt")
    counts = in_process(collections, netns, params_file, 1, strace=path)["counts"]
    calls = {}
    with open(path) as table:
        for line in table:
            fields = line.split()
            if len(fields) >= 5 and fields[-1] in ("bpf", "sendto", "sendmsg") and fields[3].isdigit():
                calls[fields[-1]] = int(fields[3])
    return {"bpf": calls.get("bpf", 0), "netlink": calls.get("sendto", 0) + calls.get("sendmsg", 0)}, counts


def switch_case():
    """The lab's switch, converged by the role: (netns, its config gathered, cleanup)."""
    playbook("lab_up.yml")
    playbook(write_play("datapath_bench_switch.yml", DEPLOY_SWITCH))
    gathered = module(SWITCH, "datapath", {"state": "gathered"})["gathered"]
    return SWITCH, gathered, lambda: None


def programs_case(count, directory):
    """A namespace of its own with count veth pairs, xdp_multicast on one end of each (one map set): (netns, its
    config gathered, what removes it all)."""
    # pylint: disable=import-outside-toplevel
    from ansible_collections.ebpf.xdp.plugins.module_utils import _datapath
    from ansible_collections.ebpf.xdp.plugins.module_utils.bpf import compile as _compile
    from ansible_collections.ebpf.xdp.plugins.module_utils.host import netns as _netns
    netns = "dpbench-" + uuid.uuid4().hex[:6]
    obj = os.path.join(directory, "xdp_multicast.o")
    subprocess.run(_compile.compile_argv("clang", os.path.join(ROOT, "files", "bpf", "xdp_multicast.bpf.c"), obj,
                                         [os.path.join(ROOT, "files", "bpf", "include")]), check=True)
    subprocess.run(["ip", "netns", "add", netns], check=True)

    def cleanup():
        subprocess.run(["ip", "netns", "del", netns], check=False)
        shutil.rmtree(os.path.join(PIN_ROOT, netns), ignore_errors=True)

    try:
        subprocess.run(["ip", "-n", netns, "-batch", "-"], check=True, text=True, input="".join(
            "link add d%d type veth peer name e%d\nlink set d%d up\nlink set e%d up\n" % (i, i, i, i)
            for i in range(count)))
        config = {"xdp": [{"interface": "d%d" % i, "object": obj, "program": "xdp_multicast", "mode": "generic",
                           "shared_maps": "bench"} for i in range(count)]}
        params = {"config": config, "state": "merged", "namespaces": [], "sources": None, "pin_root": PIN_ROOT}
        with _netns.netns(netns):
            result, _warnings = _datapath.run(params, False, None, None)
            if result.get("failed") or len(result["changes"]) != count:
                raise SystemExit("could not put %d programs in place: %s" % (count, json.dumps(result)[:2000]))
            gathered, _warnings = _datapath.run(dict(params, state="gathered", config={}), False, None, None)
    except BaseException:
        cleanup()
        raise
    return netns, gathered["gathered"], cleanup


def median_row(name, values):
    return "%-28s %9.1f %9.1f %9.1f" % (name, statistics.median(values), min(values), max(values))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--programs", type=int, default=0, help="N programs in a namespace of their own instead of "
                                                                "the lab's switch")
    parser.add_argument("--against", metavar="REV", help="also the collection at this git revision, side by side")
    parser.add_argument("--smoke", action="store_true", help="3 runs each: does it still work?")
    opts = parser.parse_args()
    runs = 3 if opts.smoke else opts.runs
    import_module_utils()
    directory = tempfile.mkdtemp(prefix="datapath-bench-")
    revisions = [("this checkout", COLLECTIONS)]
    if opts.against:
        revisions.append((opts.against, collection_at(opts.against, os.path.join(directory, "against"))))
    paths = {name: module_path(collections, os.path.join(directory, "module-path-%d" % i))
             for i, (name, collections) in enumerate(revisions)}
    netns, gathered, cleanup = programs_case(opts.programs, directory) if opts.programs else switch_case()
    try:
        sizes = (len(gathered["xdp"]), len(gathered["devmap_groups"]))
        args = {"state": "overridden", "config": gathered, "pin_root": PIN_ROOT}
        params_file = os.path.join(directory, "params.json")
        with open(params_file, "w") as handle:
            json.dump(dict(args, namespaces=[], sources=None), handle)
        ways = {}
        for name, collections in revisions:
            ways["%s: in process" % name] = (collections, None)
            ways["%s: module started" % name] = (collections, paths[name])
        if not opts.programs:
            ways["this checkout: ansible -m"] = (None, None)
        times = {name: [] for name in ways}
        for round_ in range(runs):
            names = list(ways)
            for name in names[round_ % len(names):] + names[:round_ % len(names)]:
                collections, path = ways[name]
                if path is None and collections:
                    times[name] += in_process(collections, netns, params_file, 1)["times"]
                    continue
                began = time.monotonic()
                result = started(args, netns, path) if path else module(SWITCH, "datapath", args)
                times[name].append((time.monotonic() - began) * 1000)
                if result.get("failed") or result.get("changed"):
                    sys.exit("%s: not a no-change run: %s" % (name, json.dumps(result)[:2000]))
        calls = {name: syscalls(collections, netns, params_file, directory) for name, collections in revisions}
    finally:
        cleanup()
        shutil.rmtree(directory, ignore_errors=True)

    where = "%d programs in one namespace" % opts.programs if opts.programs else "the lab's switch"
    print("%s: %d XDP programs, %d multicast groups; a no-change run with state overridden, %d runs each"
          % (where, sizes[0], sizes[1], runs))
    print("%-28s %9s %9s %9s" % ("", "median ms", "min ms", "max ms"))
    for name, values in times.items():
        print(median_row(name, values))
    print("\none in-process run's system calls (strace), and the host session's own counts")
    for name, (traced, counts) in calls.items():
        print("%-16s bpf() %5d  netlink requests %4d   session: %s" % (
            name, traced["bpf"], traced["netlink"],
            ", ".join("%s %d" % (kind, counts[kind]) for kind in ("bpf", "netlink", "record") if kind in counts)
            or "(counts no bpf(), netlink or records)"))


if __name__ == "__main__":
    main()
