"""A snapshot of what a bad-input case must leave as it found it, printed as JSON (the playbook of
test_bad_input.py runs it between the cases as a raw task: stdlib and _bpf only, no pytest, so it starts fast).

    python pin_snapshot.py '{"namespaces": [...], "pin_root": ..., "objects": ..., "cache": ...}'
"""

import json
import os
import subprocess
import sys

from ansible_collections.ebpf.xdp.plugins.module_utils import _bpf, _pins

LOCK_DIR = _pins.LOCK_DIR


def snapshot(where):
    """The host as the cases must leave it, as JSON-comparable data."""
    return {"programs": {ns: programs(ns) for ns in where["namespaces"]},
            "pins": tree(where["pin_root"], pinned=True),
            "locks": {ns: tree(os.path.join(LOCK_DIR, ns)) for ns in where["namespaces"]},
            "objects": tree(where["objects"]), "cache": tree(where["cache"])}


def programs(ns):
    """Program ids by interface and hook, parsed from ip's and tc's JSON (the witnesses), never by substring."""
    found = {}
    for link in json_of("ip", "-n", ns, "-d", "-j", "link", "show"):
        xdp = link.get("xdp") or {}
        found[link["ifname"] + "/xdp"] = [xdp.get("mode"), (xdp.get("prog") or {}).get("id")]
        for direction in ("ingress", "egress"):
            filters = json_of("tc", "-n", ns, "-j", "filter", "show", "dev", link["ifname"], direction)
            found[link["ifname"] + "/" + direction] = sorted(
                [f.get("pref"), f["options"].get("handle"), f["options"].get("prog", {}).get("id")]
                for f in filters if f.get("kind") == "bpf" and f.get("options"))
    return found


def json_of(*argv):
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    return json.loads(proc.stdout) if proc.returncode == 0 and proc.stdout.strip() else []


def tree(top, pinned=False):
    """Every path under top with its mode and inode (a pin made again is another inode); on bpffs the entries
    of every pinned map and record too."""
    found = {}
    for base, dirs, files in os.walk(top):
        for name in dirs + files:
            path = os.path.join(base, name)
            st = os.lstat(path)
            entry = [st.st_mode, st.st_ino]
            if pinned and name in files:
                entry.append(map_contents(path))
            elif not pinned:
                entry.append(st.st_size)
            found[os.path.relpath(path, top)] = entry
    return found


def map_contents(path):
    try:
        with _bpf.open_pinned_map(path) as pinned:
            return sorted([key.hex(), [v.hex() for v in value] if isinstance(value, list) else value.hex()]
                          for key, value in pinned.items())
    except _bpf.BpfError:
        return None  # a program or a link


if __name__ == "__main__":
    print(json.dumps(snapshot(json.loads(sys.argv[1]))))
