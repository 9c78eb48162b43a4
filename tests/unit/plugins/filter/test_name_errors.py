"""The names roles put into commands (plugins/filter/name_errors.py): pure logic."""

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.ebpf.xdp.plugins.filter.name_errors import FilterModule, name_errors


@pytest.mark.parametrize("name", ["eth0", "br0", "a" * 15, "veth-1_x.100", "é" * 7, "@x"])
def test_good_interface_names(name):
    assert name_errors(name, "interface") == []


@pytest.mark.parametrize("name,why", [
    ("", "is empty"),
    ("a" * 16, "is longer than 15 bytes"),
    ("é" * 8, "is longer than 15 bytes"),
    (".", "is '.' or '..'"),
    ("..", "is '.' or '..'"),
    ("a/b", "holds '/' or ':'"),
    ("/etc/x", "holds '/' or ':'"),
    ("eth0:1", "holds '/' or ':'"),
    ("a b", "holds whitespace"),
    ("a\nb", "holds whitespace"),
    ("a\tb", "holds whitespace"),
    ("a\u00a0b", "holds whitespace"),
    ("a\0b", "holds a NUL byte"),
    (7, "is a int, not a string"),
    (None, "is a NoneType, not a string"),
])
def test_bad_interface_names(name, why):
    [message] = name_errors([name], "interface", what="lab_links")
    shown = '"%s"' % name.replace("\n", "\\n").replace("\t", "\\t").replace("\0", "\\u0000") \
        if isinstance(name, str) and name.isascii() else None
    assert message.startswith("lab_links ") and message.endswith("is not an interface name: it " + why), message
    if shown:
        assert shown in message


@pytest.mark.parametrize("name", ["sender", "tr1a2b3c-s", "a" * 255, "x:y", "ns.1"])
def test_good_netns_names(name):
    assert name_errors([name], "netns") == []


@pytest.mark.parametrize("name,why", [
    ("a b", "holds whitespace"), ("a\nnetns del x", "holds whitespace"), ("..", "is '.' or '..'"),
    ("../../proc/1/ns/net", "holds '/'"), ("a" * 256, "is longer than 255 bytes"), ("", "is empty"),
])
def test_bad_netns_names(name, why):
    [message] = name_errors(name, "netns")
    assert message.endswith("is not a network namespace name: it " + why), message


def test_every_bad_name_is_told_in_order():
    assert name_errors(["ok", "a b", "fine", "c\nd"], "netns", what="lab_namespaces") == [
        'lab_namespaces "a b" is not a network namespace name: it holds whitespace',
        'lab_namespaces "c\\nd" is not a network namespace name: it holds whitespace']


@pytest.mark.parametrize("name", ['a"b', "a'b", "a#b", "a\\"])
def test_ip_batch_syntax_is_refused_only_when_asked(name):
    assert name_errors(name, "interface") == []
    [message] = name_errors(name, "interface", ip_batch=True)
    assert message.endswith("which ip -batch reads as syntax"), message


@pytest.mark.parametrize("name", ["net.ipv4.ip_forward", "net.ipv6.conf.eth0/100.disable_ipv6", "net.core.a-b"])
def test_good_sysctl_names(name):
    assert name_errors(name, "sysctl") == []


@pytest.mark.parametrize("name", ["net.//.kernel.core_pattern", "net./.x", "net..x", "net.x.", "net.a=1",
                                  "net.a b", ""])
def test_bad_sysctl_names(name):
    [message] = name_errors(name, "sysctl")
    assert "is not a sysctl name" in message, message


@pytest.mark.parametrize("path,under", [("/var/lib/x", None), ("/", None), ("/var/lib/x/metrics", "/var/lib/x"),
                                        ("/a/b", "/")])
def test_good_paths(path, under):
    assert name_errors(path, "path", under=under) == []


@pytest.mark.parametrize("path,under,why", [
    ("relative/dir", None, "is not absolute"),
    ("", None, "is not absolute"),
    ("/var/lib/../../etc", None, "is not normalised (no '.', '..', '//' or trailing '/'; it reads as /etc)"),
    ("/var/lib/x/", None, "is not normalised"),
    ("//var", None, "is not normalised"),
    ("/var/./x", None, "is not normalised"),
    ("/var/lib/x\n/etc", None, "holds a NUL byte or a newline"),
    ("/var/lib/x", "/var/lib/x", "is not below /var/lib/x"),
    ("/var/lib/xy", "/var/lib/x", "is not below /var/lib/x"),
    ("/etc", "/var/lib/x", "is not below /var/lib/x"),
])
def test_bad_paths(path, under, why):
    [message] = name_errors(path, "path", what="dir", under=under)
    assert message.startswith("dir ") and (": it " + why) in message, message


@pytest.mark.parametrize("kind,value,why", [
    ("mac", "02:00:00:00:00:01", None),
    ("mac", "02:00:00:00:00:01\nnetns add x", "is not six pairs of hex digits joined by colons"),
    ("mac", "2:0:0:0:0:1", "is not six pairs of hex digits joined by colons"),
    ("ipv4", "10.11.0.1", None),
    ("ipv4", "10.11.0.1\n", "is not a dotted quad"),
    ("ipv4", "10.11.0.1/24", "is not a dotted quad"),
    ("ipv4", "300.1.1.1", "is not a dotted quad (Octet 300 (> 255) not permitted in '300.1.1.1')"),
    ("ipv4_prefix", "10.11.0.1/24", None),
    ("ipv4_prefix", "10.11.0.1/24\n", "is not a dotted quad and /PREFIXLEN"),
    ("ipv4_prefix", "10.11.0.1", "is not a dotted quad and /PREFIXLEN"),
    ("ipv4_prefix", "10.11.0.1/33", "is not a dotted quad and /PREFIXLEN ('33' is not a valid netmask)"),
    ("ipv4_prefix", 10, "is a int, not a string"),
])
def test_addresses(kind, value, why):
    found = name_errors([value], kind)
    assert found == ([] if why is None else [found[0].partition(": it ")[0] + ": it " + why]), found


def test_a_bad_root_or_kind_is_the_caller_s_error():
    with pytest.raises(AnsibleFilterError, match="under=\"relative\" is not absolute"):
        name_errors("/a", "path", under="relative")
    with pytest.raises(AnsibleFilterError, match="kind must be one of"):
        name_errors("a", "file")


def test_the_filter_is_registered():
    assert FilterModule().filters() == {"name_errors": name_errors}
