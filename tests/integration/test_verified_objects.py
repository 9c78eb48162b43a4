"""Verified objects: bpf_object's checksum fed to xdp_program and tc_program, a wrong one refused with nothing
changed (check mode too), the bytes checked being the bytes loaded (the file swapped in between), a tampered or
untrusted object store and compile cache refused, and the pins, records and locks the collection creates
readable by root only."""

import hashlib
import os
import shutil
import stat

import pytest

import pin_snapshot
from conftest import BPF_DIR, SYSTEM_PYTHON, ModuleRunner, assert_rhythm, sh, xdp_attached

from ansible_collections.ebpf.xdp.plugins.module_utils.bpf import libbpf as _bpf, loader as _loader, pins as _pins


@pytest.fixture(scope="module")
def objects(tmp_path_factory):
    """xdp_drop_count and tc_redirect compiled by bpf_object into an empty directory, once for the file (no test
    writes to them): {name: its result}."""
    found, where = {}, tmp_path_factory.mktemp("objects")
    compile_ = ModuleRunner(SYSTEM_PYTHON, str(where / "pins"))
    for name in ("xdp_drop_count", "tc_redirect", "xdp_drop"):
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
    before = pin_snapshot.snapshot(where, whole_host=True)
    for check in (True, False):
        res = run_distro("xdp_program", dict(args, object=tc["path"], program="tc_drop_count"), check=check)
        assert res.get("failed") and not res.get("changed"), res
        assert res["msg"] == ("object %s does not match its checksum: expected %s, found %s; nothing was loaded"
                              % (tc["path"], drop["checksum"], tc["checksum"])), res
        assert pin_snapshot.snapshot(where, whole_host=True) == before

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
    attached = [run_distro("xdp_program", dict(interface="eth0", netns=pair.rx, object=objects["xdp_drop_count"]["path"])),
                run_distro("tc_program", dict(interface="eth0", netns=pair.rx, object=objects["tc_redirect"]["path"],
                                              program="tc_drop_count", method="cls_bpf"))]
    assert all(one["changed"] and not one.get("failed") for one in attached), attached
    seen = {"dirs": 0, "pins": 0}
    for base, dirs, files in os.walk(pin_root):
        for name in dirs + files:
            st = os.lstat(os.path.join(base, name))
            assert st.st_uid == 0 and st.st_mode & 0o077 == 0, (os.path.join(base, name), oct(st.st_mode))
            seen["dirs" if stat.S_ISDIR(st.st_mode) else "pins"] += 1
    # prog, link (or the filter's prog), owner and maps of both hooks at least, and the pin root itself.
    assert seen["dirs"] >= 5 and seen["pins"] >= 5, (seen, sh("find", pin_root, "-ls").stdout)
    assert os.stat(pin_root).st_mode & 0o077 == 0
    locks = os.path.join(_pins.LOCK_DIR, pair.rx)
    assert os.stat(locks).st_mode & 0o077 == 0
    for name in os.listdir(locks):
        assert os.stat(os.path.join(locks, name)).st_mode & 0o077 == 0, name


def digest(path):
    with open(path, "rb") as handle:
        return hashlib.sha256(handle.read()).hexdigest()


@pytest.mark.parametrize("check", [False, True], ids=["run", "check"])
def test_the_bytes_checked_are_the_bytes_loaded(run_distro, pair, objects, tmp_path, check):
    """The object file is replaced by another (tc_redirect's) right after the module hashed it (the loader's test
    hook): the program loaded and attached is still the checked one, the object store keeps the checked bytes,
    and the record names their digest. Before, libbpf opened the path again and loaded whatever was there."""
    drop, tc = objects["xdp_drop_count"], objects["tc_redirect"]
    path = tmp_path / "release.o"
    shutil.copy(drop["path"], path)
    store = tmp_path / "store"
    args = dict(interface="eth0", netns=pair.rx, object=str(path), checksum=drop["checksum"], mode="native",
                object_store=str(store))
    res = run_distro("xdp_program", args, check=check, env={_loader.SWAP_AFTER_HASH_ENV: tc["path"]})
    assert res["changed"] and not res.get("failed"), res
    assert digest(path) == tc["sha256"], "the file was swapped after the check"
    if check:
        assert res["tag"] and xdp_attached(pair.rx) == {} and not store.exists(), res
        return
    assert xdp_attached(pair.rx) == {"native": res["id"]}
    with _bpf.Program.from_id(res["id"]) as prog:
        info = prog.info()
    assert info["name"] == "xdp_drop_count" and info["type"] == "xdp", info
    assert res["revision"]["object_sha256"] == drop["sha256"], res
    assert sorted(os.listdir(store)) == [".lock", drop["sha256"] + ".o", drop["sha256"] + ".refs"]
    assert digest(store / (drop["sha256"] + ".o")) == drop["sha256"]


@pytest.mark.quiet  # a snapshot of the whole host
def test_a_tampered_or_untrusted_store_is_refused_and_nothing_changes(run_distro, pair, objects, pin_root, tmp_path):
    """revision: previous loads the kept object only when its bytes hash to the digest it is kept as, from a store
    that is root's alone: a tampered entry (another valid object under the old digest's name) and a store others
    can write are refused, in check mode too, with the host as it was."""
    drop, other = objects["xdp_drop_count"], objects["xdp_drop"]
    store = tmp_path / "store"
    args = dict(interface="eth0", netns=pair.rx, mode="native", object_store=str(store))
    first = run_distro("xdp_program", dict(args, object=drop["path"]))
    second = run_distro("xdp_program", dict(args, object=other["path"]))
    assert first["changed"] and second["changed"] and second["previous_revision"]["number"] == 1, second
    kept = store / (drop["sha256"] + ".o")
    shutil.copy(other["path"], kept)  # someone's object under the previous revision's digest
    where = {"namespaces": [pair.rx], "pin_root": pin_root, "objects": str(store), "cache": str(tmp_path / "none")}
    before = pin_snapshot.snapshot(where, whole_host=True)
    back = dict(args, revision="previous")
    for check in (True, False):
        res = run_distro("xdp_program", back, check=check)
        assert res.get("failed") and not res["changed"], res
        assert res["msg"] == ("the previous revision of XDP cannot be loaded: %s holds an object whose sha256 is %s, "
                              "not the %s it is kept as (the object store was changed by something other than "
                              "ebpf.xdp); nothing was changed" % (kept, other["sha256"], drop["sha256"])), res
        assert pin_snapshot.snapshot(where, whole_host=True) == before
    assert xdp_attached(pair.rx) == {"native": second["id"]}

    shutil.copy(drop["path"], kept)
    os.chmod(store, 0o777)  # the right bytes, in a store anyone can write: refused all the same
    before = pin_snapshot.snapshot(where, whole_host=True)
    for check in (True, False):
        res = run_distro("xdp_program", back, check=check)
        assert res.get("failed") and not res["changed"], res
        assert res["msg"] == ("revision 1 of the XDP hook of eth0 cannot be put back: object store %s is not trusted: "
                              "%s is writable by its group or by others (mode 0777); another user could replace what "
                              "is written there (make it uid 0's and writable by it alone, or use another directory); "
                              "nothing was changed" % (store, store)), res
        assert pin_snapshot.snapshot(where, whole_host=True) == before
    os.chmod(store, 0o700)
    rolled = run_distro("xdp_program", back)
    assert rolled["changed"] and rolled["revision"]["number"] == 1 and rolled["tag"] == first["tag"], rolled


@pytest.mark.parametrize("plant", ["world-writable", "other user's", "link"])
@pytest.mark.parametrize("check", [True, False], ids=["check", "run"])
def test_a_compile_cache_others_can_write_is_refused(run_distro, tmp_path, plant, check):
    """An entry of the compile cache is code the kernel will run: a cache_dir another user owns or can write (or a
    link to one) is refused before anything is read from it or compiled into it, with nothing written."""
    cache = tmp_path / "cache"
    if plant == "link":
        real = tmp_path / "real"
        real.mkdir(mode=0o700)
        cache.symlink_to(real)
        why = "cache_dir %s is not trusted: it is a symbolic link (to %s); give the real directory" % (cache, real)
    else:
        cache.mkdir(mode=0o700)
        if plant == "world-writable":
            os.chmod(cache, 0o777)
            why = "cache_dir %s is not trusted: %s is writable by its group or by others (mode 0777); another user " \
                  "could replace what is written there (make it uid 0's and writable by it alone, or use another " \
                  "directory)" % (cache, cache)
        else:
            os.chown(cache, 65534, 65534)
            why = "cache_dir %s is not trusted: %s belongs to uid 65534, not to uid 0 that runs the module; another " \
                  "user could replace what is written there (make it uid 0's and writable by it alone, or use " \
                  "another directory)" % (cache, cache)
    dest = tmp_path / "out.o"
    res = run_distro("bpf_object", dict(src=os.path.join(BPF_DIR, "xdp_drop.bpf.c"), dest=str(dest),
                                        cache_dir=str(cache)), check=check)
    assert res.get("failed") and not res["changed"], res
    assert res["msg"] == why + "; nothing was compiled or installed", res
    assert os.listdir(cache) == [] and not dest.exists()


@pytest.mark.parametrize("check", [True, False], ids=["check", "run"])
def test_a_store_others_can_write_is_refused_before_anything_changes(run_distro, pair, objects, tmp_path, check):
    """The store keeps code the kernel will run (revision: previous loads it): a program task that would keep
    its object in a store another user can write is refused before it loads or attaches anything."""
    store = tmp_path / "store"
    store.mkdir()
    os.chmod(store, 0o777)
    res = run_distro("xdp_program", dict(interface="eth0", netns=pair.rx, object=objects["xdp_drop_count"]["path"],
                                         object_store=str(store)), check=check)
    assert res.get("failed") and not res["changed"], res
    assert res["msg"] == ("object store %s is not trusted: %s is writable by its group or by others (mode 0777); "
                          "another user could replace what is written there (make it uid 0's and writable by it "
                          "alone, or use another directory); nothing was changed" % (store, store)), res
    assert os.listdir(store) == [] and xdp_attached(pair.rx) == {}
