"""toolchain_facts: dpkg-query's answer read into versions, and this machine's own bpffs, kernel and capabilities."""

import os

from ansible_collections.ebpf.xdp.plugins.modules import toolchain_facts


class _Module:
    """What installed() uses of AnsibleModule: the dpkg-query path and its output."""

    def __init__(self, out, dpkg="/usr/bin/dpkg-query"):
        self.out, self.dpkg, self.argv = out, dpkg, None

    def get_bin_path(self, name):
        return self.dpkg if name == "dpkg-query" else None

    def run_command(self, argv):
        self.argv = argv
        return 1, self.out, "dpkg-query: no packages found matching nosuch\n"


def test_installed_versions_from_one_query():
    module = _Module("clang\tinstalled\t1:14.0-55.7~deb12u1\nlibbpf1:amd64\tinstalled\t1:1.1.2-0+deb12u1\n"
                     "llvm\tconfig-files\t1:14.0-55.7\n")
    found, dpkg = toolchain_facts.installed(module, ["clang", "libbpf1", "llvm", "nosuch"])
    assert dpkg and found == {"clang": "1:14.0-55.7~deb12u1", "libbpf1": "1:1.1.2-0+deb12u1", "llvm": None,
                              "nosuch": None}
    assert module.argv[-4:] == ["clang", "libbpf1", "llvm", "nosuch"]


def test_without_dpkg_nothing_is_installed():
    assert toolchain_facts.installed(_Module("", dpkg=None), ["clang"]) == ({"clang": None}, False)


def test_this_machine():
    assert toolchain_facts.mount_type("/sys/fs/bpf") == "bpf"
    assert toolchain_facts.mount_type("/nonexistent") is None
    assert toolchain_facts.effective_capabilities() >> toolchain_facts.CAP_NET_ADMIN & 1 == (os.geteuid() == 0)
    assert toolchain_facts.sha1("/nonexistent") is None
    assert len(toolchain_facts.sha1("/etc/hostname")) == 40


def test_os_release_names_the_distribution_as_setup_does(tmp_path):
    def read(text):
        path = tmp_path / "os-release"
        path.write_text(text)
        return toolchain_facts.os_release(str(path))

    assert read('PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nID=debian\nVERSION_ID="12"\n') == {
        "distribution": "Debian", "os_family": "Debian", "version_id": "12"}
    assert read('ID=ubuntu\nID_LIKE=debian\nVERSION_ID="24.04"\n')["distribution"] == "Ubuntu"
    assert read("ID=linuxmint\nID_LIKE='ubuntu debian'\n") == {
        "distribution": "linuxmint", "os_family": "Debian", "version_id": None}
    assert read('ID="fedora"\nVERSION_ID=40\n') == {"distribution": "fedora", "os_family": None, "version_id": "40"}
    assert toolchain_facts.os_release(str(tmp_path / "missing")) == {
        "distribution": None, "os_family": None, "version_id": None}
