#!/usr/bin/env python
"""Side-by-side timings for the spine, as ratios (the machines are shared and noisy).

    .venv/bin/python tests/benchmarks/spine.py [--rounds 5 | --smoke]

It first runs playbooks/lab_up.yml and playbooks/deploy_xdp.yml (what `make
deploy` runs), so the lab is up and receiver eth0 has the deployed
xdp_drop_count, then times:

1. bpf_object: cache miss (empty cache) vs cache hit, in process and through Ansible.
2. A no-op xdp_program run vs ansible.builtin.ping on the same lab host.
Each pair runs alternately, round after round, and the medians are compared.
--smoke runs one round of 1 only, on localhost without the lab, to show the
benchmark still works (2's no-op run is what every idempotency test checks).
The lab is left up: `make lab-down` removes it (`make benchmark` does both).
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

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ANSIBLE = os.path.join(ROOT, ".venv", "bin", "ansible")
ANSIBLE_PLAYBOOK = ANSIBLE + "-playbook"
SRC = os.path.join(ROOT, "files", "bpf", "xdp_drop_count.bpf.c")
# What inventories/lab/host_vars/receiver.yml has deploy_xdp.yml attach.
NOOP = dict(interface="eth0", object="/var/lib/ebpf_xdp/objects/xdp_drop_count.o",
            program="xdp_drop_count", mode="native")
ENV = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"),
           ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, ".build", "collections"))


def run(argv):
    proc = subprocess.run(argv, capture_output=True, text=True, env=ENV, cwd=ROOT, check=False)
    if proc.returncode != 0:
        raise SystemExit("failed: %s\n%s%s" % (" ".join(argv), proc.stdout[-4000:], proc.stderr[-2000:]))
    return proc.stdout


def timed(argv):
    start = time.monotonic()
    run(argv)
    return time.monotonic() - start


def prepare():
    """Bring up the lab and deploy, then check that the timed xdp_program run changes nothing."""
    run([ANSIBLE_PLAYBOOK] + [os.path.join(ROOT, "playbooks", name) for name in ("lab_up.yml", "deploy_xdp.yml")])
    out = run(adhoc("receiver", "ebpf.xdp.xdp_program", NOOP))
    if not out.startswith("receiver | SUCCESS"):
        raise SystemExit("xdp_program is not a no-op after deploy_xdp.yml:\n%s" % out)


def adhoc(host, module, args):
    return [ANSIBLE, host, "-m", module, "-a", json.dumps(args) if isinstance(args, dict) else args]


def pair(name_a, argv_a, name_b, argv_b, rounds, before_a=None):
    a, b = [], []
    for _round in range(rounds):
        if before_a:
            before_a()
        a.append(timed(argv_a()))
        b.append(timed(argv_b()))
    ma, mb = statistics.median(a), statistics.median(b)
    print("%-34s median %6.3f s   (min %.3f, max %.3f)" % (name_a, ma, min(a), max(a)))
    print("%-34s median %6.3f s   (min %.3f, max %.3f)" % (name_b, mb, min(b), max(b)))
    print("%-34s %.2f" % ("ratio", ma / mb))
    print()


def compile_in_process(iterations):
    """The compile layer alone, without Ansible's per-task start-up cost."""
    sys.path.insert(0, os.path.join(ROOT, ".build", "collections"))
    from ansible_collections.ebpf.xdp.plugins.module_utils.bpf import compile as _compile

    def run_command(argv):
        proc = subprocess.run(argv, capture_output=True, text=True, check=False)
        return proc.returncode, proc.stdout, proc.stderr

    clang = shutil.which("clang")
    include = [os.path.dirname(SRC), os.path.join(os.path.dirname(SRC), "include")]
    miss, hit = [], []
    for _round in range(iterations):
        cache_dir = tempfile.mkdtemp(prefix="ebpf_xdp_bench_cache.")
        try:
            cache = _compile.ObjectCache(cache_dir)
            start = time.monotonic()
            key = _compile.cache_key(SRC, clang, include, {}, [])
            if cache.lookup(key, include) is None:
                cache.build(key, run_command, lambda out: _compile.compile_argv(clang, SRC, out, include), SRC, include)
            miss.append(time.monotonic() - start)
            start = time.monotonic()
            key = _compile.cache_key(SRC, clang, include, {}, [])
            assert cache.lookup(key, include) is not None
            hit.append(time.monotonic() - start)
        finally:
            shutil.rmtree(cache_dir, ignore_errors=True)
    mm, mh = statistics.median(miss), statistics.median(hit)
    print("%-34s median %6.1f ms" % ("compile layer, cache miss", mm * 1000))
    print("%-34s median %6.1f ms" % ("compile layer, cache hit", mh * 1000))
    print("%-34s %.1f" % ("ratio", mm / mh))
    print()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--smoke", action="store_true", help="one round, one compile: check that it still runs")
    args = parser.parse_args()
    rounds = 1 if args.smoke else args.rounds

    if not args.smoke:
        prepare()
    compile_in_process(1 if args.smoke else rounds * 4)
    host = "localhost" if args.smoke else "receiver"
    cache = tempfile.mkdtemp(prefix="ebpf_xdp_bench_cache.")
    try:
        compile_args = dict(src=SRC, cache_dir=cache)
        pair("bpf_object, cache miss", lambda: adhoc(host, "ebpf.xdp.bpf_object", compile_args),
             "bpf_object, cache hit", lambda: adhoc(host, "ebpf.xdp.bpf_object", compile_args),
             rounds, before_a=lambda: shutil.rmtree(cache, ignore_errors=True))
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    if args.smoke:
        return

    pair("xdp_program no-op (receiver)", lambda: adhoc("receiver", "ebpf.xdp.xdp_program", NOOP),
         "ansible.builtin.ping (receiver)", lambda: adhoc("receiver", "ansible.builtin.ping", ""),
         rounds)


if __name__ == "__main__":
    main()
