# -*- coding: utf-8 -*-
# Copyright (c) ebpf.xdp contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""What a host has of the collection's toolchain, read at once, and whether that is all it needs.

`read` is toolchain_facts' work; `unready` is the decision the role ebpf.xdp.toolchain takes on it (a
provisioned host skips the install steps), made here so that ebpf.xdp.datapath can take it too, in its own
run, before it changes anything. Standard library only: it runs on a host that has nothing yet.

Private to the ebpf.xdp collection: the interface may change without notice.
"""

from __future__ import annotations

import hashlib
import os
import re

from ansible_collections.ebpf.xdp.plugins.module_utils.host.privileges import CAPABILITIES, effective_capabilities

# /etc/os-release ID (or an ID_LIKE) -> what ansible.builtin.setup calls the distribution and its family.
DISTRIBUTIONS = {"debian": "Debian", "ubuntu": "Ubuntu"}
DEBIAN_LIKE = ("debian", "ubuntu")


def installed(run_command, find_program, packages, admin_dir="/var/lib/dpkg") -> tuple[dict, bool]:
    """Name to installed version (None when not installed); and whether dpkg is there. Read from dpkg's
    status file, as dpkg-query reads it: a dpkg-query started from a module cost a rollout's no-change probe
    ~40 ms of each host's CPU (docs/scale.md), the file ~4 ms. While dpkg has updates not yet merged into the
    file (an interrupted run), or without the file, dpkg-query answers."""
    found = dict.fromkeys(packages)
    if packages and not _pending_updates(admin_dir):
        try:
            with open(os.path.join(admin_dir, "status"), encoding="utf-8", errors="replace") as status:
                text = status.read()
        except OSError:
            pass
        else:
            _read_status(text, found)
            return found, True
    dpkg = find_program("dpkg-query")
    if not dpkg or not packages:
        return found, bool(dpkg)
    # dpkg-query exits 1 when a package is unknown, and still prints the others.
    dummy_rc, out, dummy_err = run_command(
        [dpkg, "-W", "-f=${Package}\t${db:Status-Status}\t${Version}\n"] + list(packages))
    for line in out.splitlines():
        name, _sep, rest = line.partition("\t")
        status, _sep, version = rest.partition("\t")
        # A multiarch package may be named with its architecture.
        name = name.split(":")[0]
        if name in found and status == "installed":
            found[name] = version
    return found, True


def _pending_updates(admin_dir):
    """Whether dpkg's journal holds updates not yet in its status file (files named by a number, deb-status(5)):
    True when it cannot be read, so that dpkg-query answers."""
    try:
        return any(name.isdigit() for name in os.listdir(os.path.join(admin_dir, "updates")))
    except FileNotFoundError:
        return False
    except OSError:
        return True


def _read_status(text, found):
    """Fill found (name -> None) with the version of each package whose stanza in dpkg's status file says it
    is installed (the last word of Status, dpkg-query's db:Status-Status); one stanza per architecture of a
    multiarch package, any installed one counts."""
    for stanza in text.split("\n\n"):
        stanza = stanza.strip("\n")
        # dpkg writes Package first: the other stanzas are passed over without reading their fields.
        first, _sep, _rest = stanza.partition("\n")
        if first.startswith("Package:") and first[8:].strip() not in found:
            continue
        fields = {}
        for line in stanza.split("\n"):
            key, sep, value = line.partition(":")
            if sep and not line[:1].isspace():
                fields[key] = value.strip()
        name = fields.get("Package")
        if name in found and fields.get("Status", "").rsplit(" ", 1)[-1] == "installed":
            found[name] = fields.get("Version")


def mount_type(path):
    try:
        with open("/proc/self/mounts", encoding="utf-8") as mounts:
            types = [line.split()[2] for line in mounts if line.split()[1:2] == [path]]
    except OSError:
        return None
    return types[-1] if types else None


def sha1(path):
    try:
        with open(path, "rb") as f:
            return hashlib.sha1(f.read()).hexdigest()
    except OSError:
        return None


def os_release(path="/etc/os-release"):
    """distribution, os_family and version_id, as setup would report them for the distributions we know."""
    fields = {}
    try:
        with open(path, encoding="utf-8") as src:
            for line in src:
                key, sep, value = line.strip().partition("=")
                if sep:
                    fields[key] = value.strip().strip("\"'")
    except OSError:
        pass
    ident = fields.get("ID", "").lower()
    family = "Debian" if {ident, *fields.get("ID_LIKE", "").lower().split()} & set(DEBIAN_LIKE) else None
    return {"distribution": DISTRIBUTIONS.get(ident, ident or None), "os_family": family,
            "version_id": fields.get("VERSION_ID")}


def asked_packages(packages, require) -> list[str]:
    """The packages to ask dpkg about: those named, and every one a requirement could need on any distribution
    (the distribution is read in the same run)."""
    require = require or {}
    names = list(packages) + list(require.get("packages") or [])
    for more in (require.get("distribution_packages") or {}).values():
        names += more
    return list(dict.fromkeys(names))


def live_frames() -> dict:
    """Whether the kernel takes the live-frames test runs (BPF_F_TEST_XDP_LIVE_FRAMES) that xdp_trafficgen's
    xdp engine sends with, and why not: the kernel's own answer to one such run of a drop program (the release
    cannot tell: a 6.18 host was seen refusing them all). Without libbpf nothing is asked, and that is the
    reason."""
    # Imported here: datapath's toolchain check, which every rollout probe runs, never asks (~20 ms a host).
    from ansible_collections.ebpf.xdp.plugins.module_utils.traffic import (  # pylint: disable=import-outside-toplevel
        trafficgen as _trafficgen)
    error = _trafficgen.libbpf_error()
    error = "not asked, libbpf cannot be used: %s" % error if error else _trafficgen.live_frames_error()
    return {"xdp_live_frames": error is None, "xdp_live_frames_error": error}


def read(run_command, find_program, packages=(), bpffs_path="/sys/fs/bpf", files=(), require=None,
         with_live_frames=False) -> dict:
    """The host's toolchain facts (toolchain_facts' ansible_facts.ebpf_xdp_toolchain); with `require`, also
    `ready` and `unready` (see unready); with `with_live_frames`, the kernel's answer to a live-frames run
    (live_frames: a program loaded, which datapath's own check does not need)."""
    found, dpkg = installed(run_command, find_program, asked_packages(packages, require))
    caps = effective_capabilities() or 0
    facts = {
        "os": os_release(),
        "packages": found,
        "dpkg": dpkg,
        "bpffs": {"path": bpffs_path, "mounted": os.path.ismount(bpffs_path), "fstype": mount_type(bpffs_path)},
        "kernel": {"release": os.uname().release,
                   "bpf_syscall": os.path.exists("/proc/sys/kernel/unprivileged_bpf_disabled"),
                   "btf": os.path.exists("/sys/kernel/btf/vmlinux")},
        "uid": os.geteuid(),
        "capabilities": {"effective": caps, "net_admin": bool(caps >> CAPABILITIES["CAP_NET_ADMIN"] & 1),
                         "bpf": bool(caps >> CAPABILITIES["CAP_BPF"] & 1),
                         "sys_admin": bool(caps >> CAPABILITIES["CAP_SYS_ADMIN"] & 1)},
        "files": {path: sha1(path) for path in files},
    }
    if with_live_frames:
        facts["kernel"].update(live_frames())
    if require is not None:
        facts["unready"] = unready(facts, require)
        facts["ready"] = not facts["unready"]
    return facts


def _version(release: str) -> tuple[int, ...]:
    """6.1.0-28-amd64 -> (6, 1, 0): the leading dotted numbers of a kernel release or a version."""
    match = re.match(r"[0-9]+(\.[0-9]+)*", release or "")
    return tuple(int(part) for part in match.group(0).split(".")) if match else (0,)


def unready(facts: dict, require: dict) -> list[str]:
    """What keeps this host from being ready, in words (empty: ready). `require` says what ready means:
    `os_family` (default Debian), `packages` installed, `distribution_packages` ({distribution: [package]})
    installed on that distribution, bpffs mounted, `absent_files` missing, a kernel with the bpf() syscall,
    BTF when `btf`, at least `min_kernel`, and CAP_NET_ADMIN with CAP_BPF or CAP_SYS_ADMIN."""
    reasons = []
    family = require.get("os_family", "Debian")
    if facts["os"]["os_family"] != family:
        reasons.append("the distribution is %s, not of the %s family" % (facts["os"]["distribution"], family))
    wanted = list(require.get("packages") or [])
    wanted += (require.get("distribution_packages") or {}).get(facts["os"]["distribution"]) or []
    missing = [name for name in dict.fromkeys(wanted) if not facts["packages"].get(name)]
    if missing:
        reasons.append("packages not installed: %s" % ", ".join(missing))
    if facts["bpffs"]["fstype"] != "bpf":
        reasons.append("no bpffs at %s" % facts["bpffs"]["path"])
    present = [path for path in require.get("absent_files") or []
               if (facts["files"][path] if path in facts["files"] else sha1(path))]
    if present:
        reasons.append("present: %s" % ", ".join(present))
    if not facts["kernel"]["bpf_syscall"]:
        reasons.append("the kernel has no bpf() syscall")
    if require.get("btf") and not facts["kernel"]["btf"]:
        reasons.append("the kernel has no BTF (/sys/kernel/btf/vmlinux)")
    if require.get("min_kernel") and _version(facts["kernel"]["release"]) < _version(str(require["min_kernel"])):
        reasons.append("kernel %s is older than %s" % (facts["kernel"]["release"], require["min_kernel"]))
    caps = facts["capabilities"]
    if not caps["net_admin"] or not (caps["bpf"] or caps["sys_admin"]):
        reasons.append("the process lacks CAP_NET_ADMIN, or both CAP_BPF and CAP_SYS_ADMIN (uid %d)" % facts["uid"])
    return reasons


# The options of ebpf.xdp.toolchain_facts, which ebpf.xdp.datapath's `toolchain` takes too (documented in
# plugins/modules/toolchain_facts.py).
ARGS = dict(
    packages=dict(type="list", elements="str", default=[]),
    bpffs_path=dict(type="path", default="/sys/fs/bpf"),
    files=dict(type="list", elements="path", default=[]),
    require=dict(type="dict", options=dict(
        os_family=dict(type="str", default="Debian"),
        packages=dict(type="list", elements="str", default=[]),
        distribution_packages=dict(type="dict", default={}),
        absent_files=dict(type="list", elements="path", default=[]),
        min_kernel=dict(type="str"),
        btf=dict(type="bool", default=False),
    )),
)
