"""A snapshot of what a bad-input case must leave as it found it (test_bad_input.py, test_datapath.py and
test_verified_objects.py compare one taken before a case with one taken after it).

What a failed case could leave behind, wherever the modules put things: programs on every hook (XDP, tcx
links, tc filters of any kind, their actions too), qdiscs (a clsact added for a filter that then failed),
kernel modules (pktgen, act_bpf loaded for a run refused later), and files (pins and their map contents, locks,
objects, the compile cache, and the collection's directories on the host: /var/cache/ebpf_xdp, bytecode cache
included, and /var/lib/ebpf_xdp).
"""

import errno
import json
import os
import subprocess

from ansible_collections.ebpf.xdp.plugins.module_utils.host import netns as _netns
from ansible_collections.ebpf.xdp.plugins.module_utils.bpf import libbpf as _bpf, pins as _pins

LOCK_DIR = _pins.LOCK_DIR
# The host's own directories the collection writes by default, whatever the case names: the compile cache and
# the module_utils bytecode cache (/var/cache/ebpf_xdp), the object store and shipped sources (/var/lib/ebpf_xdp).
# The pins and the locks are in the snapshot by namespace; the cases' own objects and cache by `where`.
COLLECTION_DIRS = ("/var/cache/ebpf_xdp", "/var/lib/ebpf_xdp")
TCX = {"tcx_ingress": _bpf.BPF_TCX_INGRESS, "tcx_egress": _bpf.BPF_TCX_EGRESS}


def snapshot(where, pins_by_object=False, whole_host=False):
    """The host as the cases must leave it, as JSON-comparable data. pins_by_object: each pin by the object it
    holds, not by its inode (for a put-back, which may pin the same program or map again). whole_host: the
    collection's own directories of the host too (COLLECTION_DIRS), which any other module run on the machine
    writes: only for a test marked quiet, which runs with nothing beside it."""
    found = {"programs": {ns: programs(ns) for ns in where["namespaces"]},
             "qdiscs": {ns: qdiscs(ns) for ns in where["namespaces"]},
             "modules": kernel_modules(),
             "pins": tree(where["pin_root"], pinned="by object" if pins_by_object else True),
             "locks": {ns: tree(os.path.join(LOCK_DIR, ns)) for ns in where["namespaces"]},
             "objects": tree(where["objects"]), "cache": tree(where["cache"])}
    if whole_host:
        found["collection_dirs"] = {top: tree(top) for top in COLLECTION_DIRS}
    return found


def programs(ns):
    """Program ids by interface and hook, parsed from ip's and tc's JSON (the witnesses), never by substring,
    and the tcx hooks from the kernel's own answer (ip and tc 6.1 do not list tcx links)."""
    found = {}
    links = json_of("ip", "-n", ns, "-d", "-j", "link", "show")
    for link in links:
        xdp = link.get("xdp") or {}
        found[link["ifname"] + "/xdp"] = [xdp.get("mode"), (xdp.get("prog") or {}).get("id")]
        for direction in ("ingress", "egress"):
            filters = json_of("tc", "-n", ns, "-j", "filter", "show", "dev", link["ifname"], direction)
            # Every filter, whatever its kind: a u32 filter holding an act_bpf action is a program on the hook
            # as much as a cls_bpf filter is, and any other filter left behind is a change too.
            found[link["ifname"] + "/" + direction] = sorted((tc_filter(f) for f in filters), key=json.dumps)
    with _netns.netns(ns):
        for link in links:
            for hook, attach_type in TCX.items():
                found[link["ifname"] + "/" + hook] = tcx_prog_ids(link["ifindex"], attach_type)
    return found


def tc_filter(entry):
    """One entry of `tc -j filter show`: its kind, pref, protocol, chain and handle (u32 says fh), the program
    of a cls_bpf filter and the actions (order, kind, index and program: act_bpf's) of any filter. tc also lists
    each pref's classifier itself, without options: it is kept too (its kind and pref)."""
    options = entry.get("options") or {}
    actions = [[a.get("order"), a.get("kind"), a.get("index"), (a.get("prog") or {}).get("id")]
               for a in options.get("actions") or []]
    return {"kind": entry.get("kind"), "pref": entry.get("pref"), "protocol": entry.get("protocol"),
            "chain": entry.get("chain"), "handle": options.get("handle", options.get("fh")),
            "prog_id": (options.get("prog") or {}).get("id"), "actions": actions}


def tcx_prog_ids(ifindex, attach_type):
    """The program ids on one tcx hook in run order; None on a kernel without tcx (it answers EINVAL)."""
    try:
        return _bpf.tcx_query(ifindex, attach_type)["prog_ids"]
    except _bpf.BpfError as exc:
        if exc.errno == errno.EINVAL:
            return None
        raise


def qdiscs(ns):
    """Every qdisc of the namespace: its device, kind, handle and parent (tc -j; refcnt left out, it counts
    users, not configuration)."""
    return sorted(([q.get("dev"), q.get("kind"), q.get("handle"), q.get("parent", "root" if q.get("root") else None)]
                   for q in json_of("tc", "-n", ns, "-j", "qdisc", "show")), key=json.dumps)


def kernel_modules():
    """The names of the loaded kernel modules; None for a kernel built without them (no /proc/modules)."""
    try:
        with open("/proc/modules") as handle:
            return sorted(line.split()[0] for line in handle if line.strip())
    except FileNotFoundError:
        return None


def json_of(*argv):
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    return json.loads(proc.stdout) if proc.returncode == 0 and proc.stdout.strip() else []


def tree(top, pinned=False):
    """Every path under top with its mode and inode (a pin made again is another inode); on bpffs the entries
    of every pinned map and record too. pinned="by object": a pin by what it holds instead of its inode (a
    link by its program: a link made again for the same program is another link) and a directory by its mode."""
    found = {}
    for base, dirs, files in os.walk(top):
        for name in dirs + files:
            path = os.path.join(base, name)
            st = os.lstat(path)
            entry = [st.st_mode, st.st_ino]
            if pinned == "by object":
                entry = [st.st_mode, pinned_object(path) if name in files else None]
                if name == "owner":  # an ownership record: it names the link, another one if made again
                    found[os.path.relpath(path, top)] = entry + [dict(_pins.Record(path).read(), link_id=None)]
                    continue
            if pinned and name in files:
                entry.append(map_contents(path))
            elif not pinned:
                entry.append(st.st_size)
            found[os.path.relpath(path, top)] = entry
    return found


def pinned_object(path):
    """What a pin holds: ("prog", id), ("map", id), or a link as ("link to prog", its program's id)."""
    with _bpf.Fd.from_pin(path) as pinned:
        kind, ident = pinned.identity()
    if kind == "link":
        with _bpf.Link.from_pin(path) as link:
            return ["link to prog", link.info()["prog_id"]]
    return [kind, ident]


def map_contents(path):
    try:
        with _bpf.open_pinned_map(path) as pinned:
            return sorted([key.hex(), [v.hex() for v in value] if isinstance(value, list) else value.hex()]
                          for key, value in pinned.items())
    except _bpf.BpfError:
        return None  # a program or a link
