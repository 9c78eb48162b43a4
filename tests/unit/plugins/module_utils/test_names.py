"""Names and paths (host/names) and the Ansible edge that runs their checks (_common.check_names): examples of
each rule, and properties over arbitrary text: a check accepts a value that is safe where it goes (one path
component, an absolute normalised path, a path that stays under its root) or raises BadNameError naming the
option and the value, never anything else."""

import os

import pytest
from hypothesis import given, settings, strategies as st

from ansible_collections.ebpf.xdp.plugins.module_utils import _common, _datapath
from ansible_collections.ebpf.xdp.plugins.module_utils.bpf import pins as _pins
from ansible_collections.ebpf.xdp.plugins.module_utils.host import names as _names
from ansible_collections.ebpf.xdp.plugins.module_utils._errors import EbpfXdpError

# Bounded: make test runs these with everything else.
PROPERTY = settings(max_examples=200, deadline=None, database=None)
TRICKY = ["", ".", "..", "/", "a/b", "/etc/passwd", "../x", "a\nb", "a\0b", "eth0", "eth0:1", "eth 0", "x" * 15,
          "x" * 16, "é" * 7, "é" * 8, "\xa0", "à", "\ud800", "a\tb", "-", "_", "a.b", "A", "a" * 64, "a" * 65]
# Text from anywhere, text made of what paths are made of, and the values above.
ANY_TEXT = st.one_of(st.text(), st.text(alphabet="./:-_ \n\t\0aZ9é", max_size=24), st.sampled_from(TRICKY))
ANY_VALUE = st.one_of(ANY_TEXT, st.none(), st.integers(), st.booleans(), st.lists(st.text(max_size=3), max_size=2))
COMPONENT_CHECKS = {"interface": _names.check_interface, "netns": _names.check_netns,
                    "shared_maps": _names.check_map_set, "name": _names.check_attachment}


def one_component(value):
    """Whether value, joined onto a directory, names an entry of that directory and nothing else."""
    return (isinstance(value, str) and value not in ("", ".", "..") and "/" not in value and "\0" not in value
            and os.path.dirname(os.path.join("/root", value)) == "/root")


# ---------------------------------------------------------------- examples


@pytest.mark.parametrize("name", ["eth0", "veth-a.1", "x" * 15, "é" * 7, "br_0@x"])
def test_interface_names_the_kernel_takes(name):
    assert _names.check_interface(name) == name


@pytest.mark.parametrize("name", ["", ".", "..", "/tmp/p", "a/b", "../x", "x" * 16, "é" * 8, "eth0:1", "eth 0",
                                  "eth0\n", "a\0b", "à", "\ud800", 7, None])
def test_interface_names_the_kernel_refuses(name):
    with pytest.raises(_names.BadNameError) as caught:
        _names.check_interface(name, "members[2]")
    assert str(caught.value) == ("members[2] %r is not an interface name: 1 to 15 bytes without '/', ':', whitespace "
                                 "or control characters, and not '.' or '..'" % (name,))


@pytest.mark.parametrize("name", ["ns1", "lab host", "x" * 255, "a.b", "-"])
def test_namespace_names_ip_netns_takes(name):
    assert _names.check_netns(name) == name


@pytest.mark.parametrize("name", ["", "..", ".", "a/b", "../../proc/1/ns/net", "a\nb", "a\0", "x" * 256])
def test_namespace_names_that_are_paths_or_break_lines(name):
    with pytest.raises(_names.BadNameError, match=r"^netns .* is not a network namespace name \(a name under "
                                                  r"/run/netns, as `ip netns list` shows; no '/', not '\.' or "
                                                  r"'\.\.', no control characters, at most 255 bytes\)$"):
        _names.check_netns(name)


@pytest.mark.parametrize("name, check, ok", [
    ("multicast", _names.check_map_set, True), ("Set-1_a", _names.check_map_set, True),
    ("a.b", _names.check_map_set, False), ("a\n", _names.check_map_set, False), ("a" * 65, _names.check_map_set, False),
    ("web-1", _names.check_attachment, True), ("web\n", _names.check_attachment, False),
    ("video 1", _names.check_group, True), ("v" * 64, _names.check_group, True), ("v" * 65, _names.check_group, False),
    ("a\nb", _names.check_group, False), ("", _names.check_group, False),
])
def test_map_set_attachment_and_group_names(name, check, ok):
    if ok:
        assert check(name, "opt") == name
    else:
        with pytest.raises(_names.BadNameError, match=r"^opt .* is not a usable (map set|attachment|group) name: "):
            check(name, "opt")


@pytest.mark.parametrize("path, normalised", [
    ("/sys/fs/bpf/x", "/sys/fs/bpf/x"), ("/sys/fs/bpf/x/", "/sys/fs/bpf/x"), ("//var//lib/./x", "/var/lib/x"),
    ("/", "/")])
def test_absolute_paths_are_normalised(path, normalised):
    assert _names.check_absolute(path, "pin_root") == normalised


@pytest.mark.parametrize("path, message", [
    ("relative/dir", "pin_root 'relative/dir' is not an absolute path: give it from / (a relative path depends on the "
                     "directory the module runs in)"),
    ("", "pin_root '' is not an absolute path: give it from / (a relative path depends on the directory the module "
         "runs in)"),
    ("/sys/fs/bpf/../../etc", "pin_root '/sys/fs/bpf/../../etc' has a '..' component: give the path it means "
                              "without one"),
    ("/a\nb", "pin_root '/a\\nb' is not a usable path: no control characters (newline, NUL, ...)"),
    ("/a\0b", "pin_root '/a\\x00b' is not a usable path: no control characters (newline, NUL, ...)"),
])
def test_roots_that_are_relative_or_climb(path, message):
    with pytest.raises(_names.BadNameError) as caught:
        _names.check_absolute(path, "pin_root")
    assert str(caught.value) == message


def test_a_path_under_a_root_stays_there_after_links(tmp_path):
    root = tmp_path / "root"
    (root / "ns").mkdir(parents=True)
    (root / "ns" / "out").symlink_to(tmp_path)
    assert _names.join_under(str(root), "ns", "eth0") == str(root / "ns" / "eth0")
    with pytest.raises(_names.OutsideRootError, match="resolves to %s/x, outside %s" % (tmp_path, root)):
        _names.join_under(str(root), "ns", "out", "x")
    (root / "ns" / "eth1").symlink_to("/etc")
    with pytest.raises(_names.OutsideRootError, match="resolves to /etc, outside"):
        _names.join_under(str(root), "ns", "eth1")
    (root / "ns" / "in").symlink_to(root / "ns")
    assert _names.join_under(str(root), "ns", "in", "x") == str(root / "ns" / "in" / "x")
    for parts in (("..", "x"), ("/etc", "x"), ("a/b",), ("",)):
        with pytest.raises(_names.OutsideRootError, match="must be one path component"):
            _names.join_under(str(root), *parts)


def test_an_absolute_interface_never_names_a_lock_or_pin_outside_the_roots(tmp_path):
    """The issue's case: interface /x/P made root create /x/P.lock."""
    with pytest.raises(_names.BadNameError, match="is not an interface name"):
        _pins.attachment_dir("/sys/fs/bpf/ebpf_xdp", "host", str(tmp_path / "P"), "xdp")
    with pytest.raises(_names.OutsideRootError):
        with _pins.lock("host", str(tmp_path / "P")):
            pass
    assert not os.listdir(tmp_path)


def test_a_relative_pin_root_is_refused_not_walked_for_ever():
    with pytest.raises(_names.BadNameError, match="^pin_root 'relative/dir' is not an absolute path"):
        _pins.check_bpffs("relative/dir")


def test_check_names_names_the_option_and_normalises_roots():
    params = dict(interface="eth0", netns="", shared_maps=None, members=["eth0", "eth1"], pin_root="/sys/fs/bpf/x/",
                  facts_before=dict(interfaces=["lo"], netns="ns1"), program="not/a/path")
    _common.check_names(params)
    assert params["pin_root"] == "/sys/fs/bpf/x" and params["program"] == "not/a/path"
    for bad, message in [
            (dict(members=["eth0", "a/b"]), "members[1] 'a/b' is not an interface name"),
            (dict(facts_before=dict(netns="..")), "facts_before.netns '..' is not a network namespace name"),
            (dict(object_store="store"), "object_store 'store' is not an absolute path"),
            (dict(name="a b"), "name 'a b' is not a usable attachment name")]:
        with pytest.raises(_names.BadNameError) as caught:
            _common.check_names(bad, _common.PROGRAM_NAMES)
        assert str(caught.value).startswith(message), caught.value
    _common.check_names(dict(name="a b"), _common.DEVMAP_GROUP_NAMES)


@pytest.mark.parametrize("section, entry, message", [
    ("xdp", dict(interface="/tmp/P", object="/x.o"), "config.xdp[0]: interface '/tmp/P' is not an interface name"),
    ("tc", dict(interface="eth0", netns="a\nb", object="/x.o"), "config.tc[0]: netns 'a\\nb' is not a network"),
    ("devmap_groups", dict(name="g", members=["x" * 16]), "config.devmap_groups[0]: members[0] 'xxxxxxxxxxxxxxxx' is"),
    ("devmap_groups", dict(name="g\n"), "config.devmap_groups[0]: name 'g\\n' is not a usable group name"),
    ("objects", dict(src="/a.c", cache_dir="cache"), "config.objects[0]: cache_dir 'cache' is not an absolute path"),
    ("map_entries", dict(path="/sys/fs/bpf/m", netns=".."), "config.map_entries[0]: netns '..' is not a network"),
])
def test_datapath_entries_get_their_modules_checks(section, entry, message):
    with pytest.raises(_datapath.ConfigError) as caught:
        _datapath.validate({section: [entry]}, "/sys/fs/bpf/ebpf_xdp")
    assert str(caught.value).startswith(message), caught.value


# ---------------------------------------------------------------- properties


@PROPERTY
@given(option=st.sampled_from(sorted(COMPONENT_CHECKS)), value=ANY_VALUE)
def test_a_component_check_accepts_one_path_component_or_says_which_option(option, value):
    try:
        accepted = COMPONENT_CHECKS[option](value, option)
    except _names.BadNameError as exc:
        assert str(exc).startswith("%s %r is not a" % (option, value))
        return
    assert accepted == value and one_component(value)
    assert "\n" not in value and len(value.encode()) <= 255


@PROPERTY
@given(value=ANY_VALUE)
def test_an_accepted_interface_name_is_one_the_kernel_could_have(value):
    try:
        _names.check_interface(value)
    except _names.BadNameError:
        return
    raw = value.encode()
    assert 1 <= len(raw) <= 15 and not any(c in raw for c in b"/: \t\n\v\f\r\0")


@PROPERTY
@given(value=ANY_VALUE)
def test_a_group_name_is_short_text_on_one_line(value):
    try:
        _names.check_group(value, "name")
    except _names.BadNameError as exc:
        assert str(exc).startswith("name %r is not a usable group name" % (value,))
        return
    assert 1 <= len(value) <= 64 and not any(ord(c) < 32 or ord(c) == 127 for c in value)


@PROPERTY
@given(value=st.one_of(ANY_VALUE, st.builds(lambda parts: "/" + "/".join(parts),
                                            st.lists(st.sampled_from(["a", ".", "..", "", "b c", "\n"]), max_size=5))))
def test_an_accepted_root_is_absolute_normalised_and_means_what_was_given(value):
    try:
        accepted = _names.check_absolute(value, "pin_root")
    except _names.BadNameError as exc:
        assert str(exc).startswith("pin_root %r " % (value,))
        return
    assert accepted.startswith("/") and os.path.normpath(accepted) in (accepted, "/" + accepted)
    assert ".." not in accepted.split("/") and accepted == "/" + os.path.normpath(value).lstrip("/")


@PROPERTY
@given(parts=st.lists(ANY_TEXT, min_size=1, max_size=4))
def test_join_under_stays_under_its_root_or_refuses(tmp_path_factory, parts):
    root = str(tmp_path_factory.getbasetemp() / "join-root")
    try:
        path = _names.join_under(root, *parts)
    except _names.OutsideRootError:
        return
    assert os.path.realpath(path).startswith(os.path.realpath(root) + "/")


@PROPERTY
@given(params=st.dictionaries(st.sampled_from(["interface", "netns", "members", "shared_maps", "pin_root", "name",
                                               "namespaces", "cache_dir", "facts_before"]),
                              st.one_of(ANY_TEXT, st.lists(ANY_TEXT, max_size=3), st.none(),
                                        st.fixed_dictionaries({"netns": ANY_TEXT}))))
def test_check_names_accepts_or_raises_a_clear_error(params):
    try:
        _common.check_names(dict(params), _common.PROGRAM_NAMES)
    except EbpfXdpError as exc:
        assert isinstance(exc, _names.BadNameError), exc
        assert " is not a" in str(exc) or " has a '..' component" in str(exc), exc


# ---------------------------------------------------------------- ownership records (bpf/pins.check_record)

DIGEST = "ab" * 32
GOOD_RECORD = {"managed_by": "ebpf.xdp", "version": 1, "object_sha256": DIGEST,
               "previous": {"object_sha256": "cd" * 32, "revision": 1}}


def test_a_record_of_ours_is_read_as_written():
    assert _pins.check_record(dict(GOOD_RECORD), "/p/owner") == GOOD_RECORD
    assert _pins.check_record(dict(GOOD_RECORD, object_sha256=None, previous=None), "/p/owner")["previous"] is None
    assert _pins.check_record({"managed_by": "ebpf.xdp", "version": 1, "egress": {"object_sha256": DIGEST}}, "/g")


@pytest.mark.parametrize("change, message", [
    (dict(managed_by="other-tool"), "ownership record /p/owner was not written by ebpf.xdp (managed_by 'other-tool'): "
                                    "the program there is not this collection's; remove the record by hand if it "
                                    "should be"),
    (dict(managed_by=None), "ownership record /p/owner was not written by ebpf.xdp (managed_by None)"),
    (dict(version=2), "ownership record /p/owner has version 2; this collection reads version 1 to 1 (a newer "
                      "ebpf.xdp wrote it? use that one)"),
    (dict(version="1"), "ownership record /p/owner has version '1'"),
    (dict(version=True), "ownership record /p/owner has version True"),
    (dict(object_sha256="../../etc/passwd"), "ownership record /p/owner: object_sha256 '../../etc/passwd' is not a "
                                             "sha256 digest (64 lowercase hex digits); it was not written by this "
                                             "collection, remove it by hand"),
    (dict(object_sha256=DIGEST.upper()), "ownership record /p/owner: object_sha256 '%s' is not" % DIGEST.upper()),
    (dict(previous={"object_sha256": "/etc/x"}), "ownership record /p/owner: previous.object_sha256 '/etc/x' is not"),
    (dict(previous="x"), "ownership record /p/owner: previous.object_sha256 'x' is not a sha256 digest"),
])
def test_a_record_we_did_not_write_is_refused_before_use(change, message):
    with pytest.raises(_pins.PinError) as caught:
        _pins.check_record(dict(GOOD_RECORD, **change), "/p/owner")
    assert str(caught.value).startswith(message), caught.value


JSON = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), ANY_TEXT),
                    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=5), inner,
                                                                                         max_size=3)), max_leaves=8)


@PROPERTY
@given(record=st.one_of(JSON, st.fixed_dictionaries(
    {"managed_by": st.sampled_from(["ebpf.xdp", "other"]), "version": st.one_of(st.sampled_from([0, 1, 2]), JSON)},
    optional={"object_sha256": st.one_of(st.sampled_from([DIGEST, None, "../x"]), JSON),
              "previous": st.one_of(st.none(), JSON, st.fixed_dictionaries({"object_sha256": ANY_TEXT})),
              "egress": JSON})))
def test_any_json_is_a_record_with_usable_digests_or_a_clear_error(record):
    try:
        checked = _pins.check_record(record, "/p/owner")
    except _pins.PinError as exc:
        assert str(exc).startswith(("ownership record /p/owner ", "ownership record /p/owner: ")), exc
        return
    assert checked["managed_by"] == "ebpf.xdp" and checked["version"] == 1
    for holder in (checked, checked.get("previous"), checked.get("egress")):
        digest = (holder or {}).get("object_sha256")
        assert digest is None or _names.join_under("/store", digest + ".o") == "/store/%s.o" % digest


def test_shipped_sources_and_cache_entries_stay_under_their_directory(tmp_path):
    """datapath's sources: a link planted in the tree (include -> /tmp/outside) is not written through."""
    from ansible_collections.ebpf.xdp.plugins.module_utils.bpf import compile as _compile
    outside, tree = tmp_path / "outside", tmp_path / "tree"
    outside.mkdir()
    tree.mkdir()
    (tree / "include").symlink_to(outside)
    sources = _compile.Sources(str(tree), {"prog.bpf.c": "int x;\n", "include/x.h": "#define X 1\n"})
    with pytest.raises(_names.OutsideRootError, match="resolves to %s/x.h, outside %s" % (outside, tree)):
        sources.write(sorted(sources.files))  # include/x.h first
    assert not os.listdir(outside)
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "ab").symlink_to(outside)
    with pytest.raises(_names.OutsideRootError):
        _compile.ObjectCache(str(cache)).paths("ab" + "0" * 62)
    assert _compile.ObjectCache(str(cache)).paths("cd" + "0" * 62)[0] == str(cache / "cd" / ("cd" + "0" * 62 + ".o"))
