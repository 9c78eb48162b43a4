"""Verified objects: bpf_object's checksum fed to xdp_program and tc_program, a wrong one refused with nothing
changed (check mode too), and the pins, records and locks the collection creates readable by root only."""

import hashlib
import os
import stat

import pytest

import pin_snapshot
from conftest import BPF_DIR, SYSTEM_PYTHON, ModuleRunner, assert_rhythm, xdp_attached

from ansible_collections.ebpf.xdp.plugins.module_utils.bpf import pins as _pins


@pytest.fixture(scope="module")
def objects(tmp_path_factory):
    """xdp_drop_count and tc_redirect compiled by bpf_object into an empty directory, once for the file (no test
    writes to them): {name: its result}."""
    found, where = {}, tmp_path_factory.mktemp("objects")
    compile_ = ModuleRunner(SYSTEM_PYTHON, str(where / "pins"))
    for name in ("xdp_drop_count", "tc_redirect"):
        res = compile_("bpf_object", dict(src=os.path.join(BPF_DIR, name + ".bpf.c"), dest=str(where / (name + ".o")),
                                          cache_dir=str(where / "cache")))
        assert not res.get("failed") and res["checksum"] == "sha256:" + res["sha256"], res
        with open(res["path"], "rb") as handle:
            assert res["checksum"] == "sha256:" + hashlib.sha256(handle.read()).hexdigest()
        found[name] = res
    return found


@pytest.mark.quiet  # a snapshot of the whole host
def test_the_digest_bpf_object_returns_attaches_and_another_object_is_refused(run_distro, pair, objects, pin_root):
    drop, tc = objects["xdp_drop_count"], objects["tc_redirect"]
    args = dict(interface="eth0", netns=pair.rx, object=drop["path"], checksum=drop["checksum"], mode="native")
    first, _second = assert_rhythm(run_distro, "xdp_program", args)
    assert xdp_attached(pair.rx) == {"native": first["id"]}

    # Another object under the pinned digest (a tampered or rebuilt file): refused in check mode and for real,
    # before anything is loaded; the program, its pins and locks stay as they were.
    where = {"namespaces": [pair.rx], "pin_root": pin_root, "objects": os.path.dirname(drop["path"]),
             "cache": os.path.dirname(drop["path"])}
    before = pin_snapshot.snapshot(where)
    for check in (True, False):
        res = run_distro("xdp_program", dict(args, object=tc["path"], program="tc_drop_count"), check=check)
        assert res.get("failed") and not res.get("changed"), res
        assert res["msg"] == ("object %s does not match its checksum: expected %s, found %s; nothing was loaded"
                              % (tc["path"], drop["checksum"], tc["checksum"])), res
        assert pin_snapshot.snapshot(where) == before

    # The digest in upper case is the same digest (get_url accepts either).
    again = run_distro("xdp_program", dict(args, checksum=drop["checksum"].upper().replace("SHA256:", "sha256:")))
    assert not again.get("failed") and not again["changed"], again


def test_tc_program_takes_a_checksum_too(run_distro, pair, objects):
    tc = objects["tc_redirect"]
    args = dict(interface="eth0", netns=pair.rx, object=tc["path"], program="tc_drop_count", method="cls_bpf",
                checksum=tc["checksum"])
    check = run_distro("tc_program", args, check=True)
    assert check["changed"] and not check.get("failed"), check
    res = run_distro("tc_program", args)
    assert res["changed"] and res["method"] == "cls_bpf", res
    wrong = run_distro("tc_program", dict(args, checksum=objects["xdp_drop_count"]["checksum"]))
    assert wrong.get("failed") and wrong["msg"].startswith("object %s does not match its checksum" % tc["path"])
    assert run_distro("tc_program", args)["changed"] is False


def test_pins_records_and_locks_are_root_only(run_distro, pair, objects, pin_root):
    """bpffs makes a pin 0600 (less under a umask); the collection's directories are 0700 and its locks 0600."""
    run_distro("xdp_program", dict(interface="eth0", netns=pair.rx, object=objects["xdp_drop_count"]["path"]))
    run_distro("tc_program", dict(interface="eth0", netns=pair.rx, object=objects["tc_redirect"]["path"],
                                  program="tc_drop_count", method="cls_bpf"))
    seen = {"dirs": 0, "pins": 0}
    for base, dirs, files in os.walk(pin_root):
        for name in dirs + files:
            st = os.lstat(os.path.join(base, name))
            assert st.st_uid == 0 and st.st_mode & 0o077 == 0, (os.path.join(base, name), oct(st.st_mode))
            seen["dirs" if stat.S_ISDIR(st.st_mode) else "pins"] += 1
    # prog, link (or the filter's prog), owner and maps of both hooks at least, and the pin root itself.
    assert seen["dirs"] >= 5 and seen["pins"] >= 5, seen
    assert os.stat(pin_root).st_mode & 0o077 == 0
    locks = os.path.join(_pins.LOCK_DIR, pair.rx)
    assert os.stat(locks).st_mode & 0o077 == 0
    for name in os.listdir(locks):
        assert os.stat(os.path.join(locks, name)).st_mode & 0o077 == 0, name
