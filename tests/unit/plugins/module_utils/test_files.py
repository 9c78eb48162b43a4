"""host/files: every file the collection writes is written whole, never through a link, in a directory only the
writing user can change; the refusals say what is wrong and leave everything as it was."""

import os
import stat

import pytest

from ansible_collections.ebpf.xdp.plugins.module_utils.host import files as _files


def mode(path):
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_a_file_is_written_whole_with_its_mode_whatever_the_umask(tmp_path):
    path = tmp_path / "new" / "deeper" / "record"
    old = os.umask(0)
    try:
        _files.write_atomically(str(path), b"one")
    finally:
        os.umask(old)
    assert path.read_bytes() == b"one" and mode(path) == 0o600
    assert mode(tmp_path / "new") == 0o700 and mode(tmp_path / "new" / "deeper") == 0o700
    _files.write_atomically(str(path), b"two", 0o644)
    assert path.read_bytes() == b"two" and mode(path) == 0o644 and os.listdir(path.parent) == ["record"]


def test_a_failed_write_leaves_the_old_file_and_no_temporary_one(tmp_path):
    path = tmp_path / "report"
    path.write_bytes(b"old")
    with pytest.raises(RuntimeError):
        with _files.AtomicFile(str(path)) as out:
            out.write(b"half")
            raise RuntimeError("failed")
    assert path.read_bytes() == b"old" and os.listdir(tmp_path) == ["report"]


def test_a_target_that_is_a_link_is_refused_and_what_it_points_to_untouched(tmp_path):
    victim = tmp_path / "victim"
    victim.write_bytes(b"keep")
    os.chmod(victim, 0o644)
    link = tmp_path / "cache.json"
    link.symlink_to(victim)
    with pytest.raises(_files.UnsafePathError) as err:
        _files.write_atomically(str(link), b"metrics")
    assert str(err.value) == "refusing to write %s: it is a symbolic link (to %s); remove it or give the real " \
        "path" % (link, victim)
    assert victim.read_bytes() == b"keep" and mode(victim) == 0o644 and link.is_symlink()
    assert sorted(os.listdir(tmp_path)) == ["cache.json", "victim"]


def test_a_link_planted_at_the_temporary_name_is_never_opened(tmp_path, monkeypatch):
    """The temporary name is fresh each time; one planted at it (here: every name tried, the token pinned) is
    never followed (O_EXCL | O_NOFOLLOW): another name is tried, and when all are taken the write is refused."""
    victim = tmp_path / "victim"
    victim.write_bytes(b"keep")
    target = tmp_path / "out.pcap"
    planted = tmp_path / ".out.pcap.planted.tmp"
    planted.symlink_to(victim)
    monkeypatch.setattr(_files, "_token", lambda: "planted")
    with pytest.raises(_files.UnsafePathError) as err:
        _files.write_atomically(str(target), b"frames")
    assert str(err.value) == "cannot write %s: %d temporary names in %s were all taken" % (
        target, _files.TEMPORARY_ATTEMPTS, tmp_path)
    assert victim.read_bytes() == b"keep" and planted.is_symlink() and not target.exists()
    # One planted name among fresh ones: skipped, the file written, the link left alone.
    tokens = iter(["planted", "fresh"])
    monkeypatch.setattr(_files, "_token", lambda: next(tokens))
    _files.write_atomically(str(target), b"frames")
    assert target.read_bytes() == b"frames" and victim.read_bytes() == b"keep" and planted.is_symlink()


@pytest.mark.parametrize("bits", [0o777, 0o775, 0o757, 0o1777])
def test_a_directory_others_can_write_is_refused(tmp_path, bits):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, bits)
    with pytest.raises(_files.UnsafePathError) as err:
        _files.write_atomically(str(shared / "record"), b"x")
    assert str(err.value) == (
        "refusing to write in %s: %s is writable by its group or by others (mode %04o); another user could replace "
        "what is written there (make it uid %d's and writable by it alone, or use another directory)"
        % (shared, shared, bits, os.geteuid()))
    assert os.listdir(shared) == []


def test_a_directory_of_another_user_is_refused(tmp_path):
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o755)
    os.chown(theirs, 65534, 65534)
    with pytest.raises(_files.UnsafePathError) as err:
        _files.write_atomically(str(theirs / "record"), b"x")
    assert "refusing to write in %s: %s belongs to uid 65534, not to uid %d that runs the module" % (
        theirs, theirs, os.geteuid()) in str(err.value)
    assert os.listdir(theirs) == []
    # Nor below it: its owner could put another directory in the place of ours.
    mine = theirs / "mine"
    os.mkdir(mine, 0o700)
    with pytest.raises(_files.UnsafePathError) as err:
        _files.write_atomically(str(mine / "record"), b"x")
    assert str(err.value) == "refusing to write in %s: %s above it belongs to uid 65534, who could put another " \
        "directory in its place" % (mine, theirs)
    # A sticky directory (as /tmp) above is fine: no one renames what is not theirs in it.
    sticky = tmp_path / "sticky"
    sticky.mkdir()
    os.chmod(sticky, 0o1777)
    _files.write_atomically(str(sticky / "mine" / "record"), b"x")
    assert (sticky / "mine" / "record").read_bytes() == b"x"


def test_a_directory_that_is_a_link_is_refused(tmp_path):
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    link = tmp_path / "cache"
    link.symlink_to(real)
    with pytest.raises(_files.UnsafePathError) as err:
        _files.write_atomically(str(link / "entry"), b"x")
    assert str(err.value) == "refusing to write in %s: it is a symbolic link (to %s); give the real directory" % (
        link, real)
    assert os.listdir(real) == []


def test_a_lock_is_never_opened_through_a_link(tmp_path):
    victim = tmp_path / "victim"
    victim.write_bytes(b"keep")
    locks = tmp_path / "locks"
    fd = _files.open_lock(str(locks / "eth0.lock"))
    os.close(fd)
    assert mode(locks / "eth0.lock") == 0o600 and mode(locks) == 0o700
    (locks / "eth1.lock").symlink_to(victim)
    with pytest.raises(_files.UnsafePathError) as err:
        _files.open_lock(str(locks / "eth1.lock"))
    assert str(err.value) == "refusing to open the lock %s: it is a symbolic link" % (locks / "eth1.lock")
    assert victim.read_bytes() == b"keep"


def test_trusted_reads(tmp_path):
    entry = tmp_path / "entry"
    _files.write_atomically(str(entry), b"code")
    assert _files.read_trusted(str(entry)) == b"code"
    os.chmod(entry, 0o620)
    assert _files.read_trusted(str(entry)) is None, "writable by the group: not trusted"
    os.chmod(entry, 0o600)
    (tmp_path / "link").symlink_to(entry)
    assert _files.read_trusted(str(tmp_path / "link")) is None and _files.read_trusted(str(tmp_path / "no")) is None
    _files.trusted_directory(str(tmp_path / "missing"), "cache_dir")  # nothing to read from: fine
    os.chmod(tmp_path, 0o777)
    try:
        with pytest.raises(_files.UnsafePathError) as err:
            _files.trusted_directory(str(tmp_path), "cache_dir")
    finally:
        os.chmod(tmp_path, 0o700)
    assert str(err.value).startswith("cache_dir %s is not trusted: %s is writable by its group or by others (mode "
                                     "0777)" % (tmp_path, tmp_path))
