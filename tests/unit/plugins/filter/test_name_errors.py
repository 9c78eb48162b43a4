"""The names roles put into commands (plugins/filter/name_errors.py): pure logic.

Interface and namespace names and roots are the modules' validators' (module_utils/host/names, tested there);
these tests hold the filter to them and to what the roles add.
"""

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.ebpf.xdp.plugins.filter.name_errors import FilterModule, name_errors
from ansible_collections.ebpf.xdp.plugins.module_utils.host import names

IFNAME_RULE = "is not an interface name: 1 to 15 bytes without '/', ':', whitespace or control characters, and not " \
              "'.' or '..'"


@pytest.mark.parametrize("name", ["eth0", "br0", "a" * 15, "veth-1_x.100", "é" * 7, "@x", "type"])
def test_good_interface_names(name):
    assert name_errors(name, "interface") == []


@pytest.mark.parametrize("name", ["", "a" * 16, "é" * 8, ".", "..", "a/b", "/etc/x", "eth0:1", "a b", "a\nb", "a\tb",
                                  "a\0b", 7, None])
def test_bad_interface_names_are_refused_as_the_modules_refuse_them(name):
    [message] = name_errors([name], "interface", what="lab_links ifname")
    assert message == "lab_links ifname %r %s" % (name, IFNAME_RULE)
    with pytest.raises(names.BadNameError) as refused:
        names.check_interface(name, "lab_links ifname")
    assert str(refused.value) == message


@pytest.mark.parametrize("name", ["sender", "tr1a2b3c-s", "a" * 255, "x:y", "ns.1"])
def test_good_netns_names(name):
    assert name_errors([name], "netns") == []


@pytest.mark.parametrize("name", ["a\nnetns del x", "..", "../../proc/1/ns/net", "a" * 256, ""])
def test_bad_netns_names_are_refused_as_the_modules_refuse_them(name):
    [message] = name_errors(name, "netns", what="lab_namespaces")
    with pytest.raises(names.BadNameError) as refused:
        names.check_netns(name, "lab_namespaces")
    assert message == str(refused.value)


@pytest.mark.parametrize("name", ["a b", "a\u00a0b", "x\u2003y"])
def test_a_namespace_name_with_whitespace_is_refused_for_commands(name):
    assert names.check_netns(name) == name
    assert name_errors(name, "netns", what="lab_namespaces") == [
        "lab_namespaces %r is not a network namespace name a role can use: it holds whitespace" % name]


def test_every_bad_name_is_told_in_order():
    found = name_errors(["ok", "a b", "fine", "c d"], "netns", what="lab_namespaces")
    assert [message.split(" ")[1] for message in found] == ["'a", "'c"]


@pytest.mark.parametrize("name", ['a"b', "a'b", "a#b", "a\\"])
def test_ip_batch_syntax_is_refused_only_when_asked(name):
    assert name_errors(name, "interface") == []
    assert name_errors(name, "interface", what="ifname", ip_batch=True) == [
        "ifname %r holds one of \" ' # \\, which ip -batch reads as syntax" % name]


@pytest.mark.parametrize("name", ["net.ipv4.ip_forward", "net.ipv6.conf.eth0/100.disable_ipv6", "net.core.a-b"])
def test_good_sysctl_names(name):
    assert name_errors(name, "sysctl") == []


@pytest.mark.parametrize("name,why", [
    ("net.//.kernel.core_pattern", "it has an empty part, or a part that sysctl would read as '.' or '..'"),
    ("net./.x", "it has an empty part, or a part that sysctl would read as '.' or '..'"),
    ("net..x", "it has an empty part, or a part that sysctl would read as '.' or '..'"),
    ("net.x.", "it has an empty part, or a part that sysctl would read as '.' or '..'"),
    ("net.a=1", "it is empty or holds whitespace, '=' or NUL"),
    ("net.a b", "it is empty or holds whitespace, '=' or NUL"),
    ("", "it is empty or holds whitespace, '=' or NUL"),
])
def test_bad_sysctl_names(name, why):
    assert name_errors(name, "sysctl", what="name") == ["name %r is not a sysctl name: %s" % (name, why)]


@pytest.mark.parametrize("path,under", [("/var/lib/x", None), ("/", None), ("/var/lib/x/metrics", "/var/lib/x"),
                                        ("/a/b", "/")])
def test_good_paths(path, under):
    assert name_errors(path, "path", under=under) == []


@pytest.mark.parametrize("path,why", [
    ("relative/dir", "is not an absolute path"),
    ("", "is not an absolute path"),
    ("/var/lib/../../etc", "has a '..' component"),
    ("/var/lib/x\n/etc", "is not a usable path: no control characters"),
])
def test_paths_are_refused_as_the_modules_refuse_roots(path, why):
    [message] = name_errors(path, "path", what="dir")
    assert message.startswith("dir %r %s" % (path, why)), message
    with pytest.raises(names.BadNameError) as refused:
        names.check_absolute(path, "dir")
    assert str(refused.value) == message


@pytest.mark.parametrize("path,under,said", [
    ("/var/lib/x/", None, "is not normalised (no '.', '//' or trailing '/'): give it as /var/lib/x"),
    ("//var", None, "is not normalised (no '.', '//' or trailing '/'): give it as /var"),
    ("/var/./x", None, "is not normalised (no '.', '//' or trailing '/'): give it as /var/x"),
    ("/var/lib/x", "/var/lib/x", "is not below /var/lib/x"),
    ("/var/lib/xy", "/var/lib/x", "is not below /var/lib/x"),
    ("/", "/", "is not below /"),
    ("/etc", "/var/lib/x", "is not below /var/lib/x"),
])
def test_a_role_s_paths_are_normalised_and_below_their_root(path, under, said):
    assert name_errors(path, "path", what="dir", under=under) == ["dir %r %s" % (path, said)]


@pytest.mark.parametrize("kind,value,said", [
    ("mac", "02:00:00:00:00:01", None),
    ("mac", "02:00:00:00:00:01\nnetns add x", "is not a MAC address: six pairs of hex digits joined by colons"),
    ("mac", "2:0:0:0:0:1", "is not a MAC address: six pairs of hex digits joined by colons"),
    ("ipv4", "10.11.0.1", None),
    ("ipv4", "10.11.0.1\n", "is not an IPv4 address"),
    ("ipv4", "10.11.0.1/24", "is not an IPv4 address"),
    ("ipv4", "300.1.1.1", "is not an IPv4 address (Octet 300 (> 255) not permitted in '300.1.1.1')"),
    ("ipv4_prefix", "10.11.0.1/24", None),
    ("ipv4_prefix", "10.11.0.1/24\n", "is not an IPv4 address and /PREFIXLEN"),
    ("ipv4_prefix", "10.11.0.1", "is not an IPv4 address and /PREFIXLEN"),
    ("ipv4_prefix", "10.11.0.1/33", "is not an IPv4 address and /PREFIXLEN ('33' is not a valid netmask)"),
    ("ipv4_prefix", 10, "is not an IPv4 address and /PREFIXLEN"),
])
def test_addresses(kind, value, said):
    assert name_errors([value], kind, what="a") == ([] if said is None else ["a %r %s" % (value, said)])


def test_a_bad_root_or_kind_is_the_caller_s_error():
    with pytest.raises(AnsibleFilterError, match="under 'relative' is not an absolute path"):
        name_errors("/a", "path", under="relative")
    with pytest.raises(AnsibleFilterError, match="kind must be one of"):
        name_errors("a", "file")


def test_a_generator_is_a_list_of_values():
    assert name_errors((n for n in ["eth0", "a b"]), "interface", what="x") == ["x 'a b' %s" % IFNAME_RULE]


def test_the_filter_is_registered():
    assert FilterModule().filters() == {"name_errors": name_errors}
