"""One revision's no-change ebpf.xdp.datapath runs, in this process, for tests/benchmarks/datapath.py.

    python datapath_runs.py COLLECTIONS NETNS PARAMS_JSON RUNS

COLLECTIONS is the directory holding that revision's ansible_collections/ebpf/xdp; the runs are made in the
network namespace NETNS, each in a host session of its own, and each must change nothing. Printed: one JSON
document, the milliseconds of each run and the last run's session counts (the kinds only, as that revision
counts them: its bpf() and netlink counts where it has them). datapath.py runs this under strace for the
system calls, which every revision makes alike.
"""

import json
import sys
import time


def main():
    collections, netns, params_path, runs = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    sys.path.insert(0, collections)
    # pylint: disable=import-outside-toplevel
    from ansible_collections.ebpf.xdp.plugins.module_utils import _datapath
    from ansible_collections.ebpf.xdp.plugins.module_utils.host import netns as _netns, session as _session
    with open(params_path) as handle:
        params = json.load(handle)
    times, counts = [], {}
    with _netns.netns(netns):
        for _run in range(runs):
            with _session.host() as session:
                began = time.monotonic()
                result, _warnings = _datapath.run(params, False, None, None)
                times.append((time.monotonic() - began) * 1000)
            if result.get("failed") or result.get("changed"):
                sys.exit("not a no-change run: %s" % json.dumps(result)[:2000])
            counts = {kind: n for kind, n in session.counts.items() if ":" not in kind}
    print(json.dumps({"times": times, "counts": counts}))


if __name__ == "__main__":
    main()
