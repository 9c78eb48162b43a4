"""host/toolchain: dpkg's status file (or dpkg-query's answer) read into versions, this machine's own bpffs, kernel
and capabilities, and what makes a host ready (the decision of the toolchain role and of datapath's toolchain check)."""

import os
import subprocess

from ansible_collections.ebpf.xdp.plugins.module_utils.host import toolchain as _toolchain


class _Module:
    """What installed() is given of AnsibleModule: run_command and get_bin_path, with dpkg-query's output."""

    def __init__(self, out, dpkg="/usr/bin/dpkg-query"):
        self.out, self.dpkg, self.argv = out, dpkg, None

    def get_bin_path(self, name):
        return self.dpkg if name == "dpkg-query" else None

    def run_command(self, argv):
        self.argv = argv
        return 1, self.out, "dpkg-query: no packages found matching nosuch\n"


def test_installed_versions_from_one_query(tmp_path):
    module = _Module("clang\tinstalled\t1:14.0-55.7~deb12u1\nlibbpf1:amd64\tinstalled\t1:1.1.2-0+deb12u1\n"
                     "llvm\tconfig-files\t1:14.0-55.7\n")
    found, dpkg = _toolchain.installed(module.run_command, module.get_bin_path, ["clang", "libbpf1", "llvm", "nosuch"],
                                       admin_dir=str(tmp_path))  # no status file: dpkg-query answers
    assert dpkg and found == {"clang": "1:14.0-55.7~deb12u1", "libbpf1": "1:1.1.2-0+deb12u1", "llvm": None,
                              "nosuch": None}
    assert module.argv[-4:] == ["clang", "libbpf1", "llvm", "nosuch"]


def test_without_dpkg_nothing_is_installed(tmp_path):
    module = _Module("", dpkg=None)
    assert _toolchain.installed(module.run_command, module.get_bin_path, ["clang"], admin_dir=str(tmp_path)) == (
        {"clang": None}, False)


STATUS = """Package: clang
Status: install ok installed
Priority: optional
Architecture: amd64
Version: 1:14.0-55.7~deb12u1
Description: C, C++ and Objective-C compiler
 Package: llvm
 Status: install ok installed

Package: libbpf1
Status: install ok installed
Multi-Arch: same
Architecture: i386
Version: 1:1.1.2-0+deb12u1

Package: libbpf1
Status: deinstall ok config-files
Architecture: amd64
Version: 1:1.1.0

Package: llvm
Status: deinstall ok config-files
Version: 1:14.0-55.7

Package: iproute2
Status: install reinstreq half-installed
Version: 6.1.0-3
"""


def test_installed_versions_from_the_status_file(tmp_path):
    (tmp_path / "status").write_text(STATUS)
    (tmp_path / "updates").mkdir()
    (tmp_path / "updates" / "tmp.i").write_text("")  # dpkg's scratch file, not an update
    module = _Module("")
    found, dpkg = _toolchain.installed(module.run_command, module.get_bin_path,
                                       ["clang", "libbpf1", "llvm", "iproute2", "nosuch"], admin_dir=str(tmp_path))
    # The description's indented lines are not fields; one installed architecture of libbpf1 is enough.
    assert dpkg and found == {"clang": "1:14.0-55.7~deb12u1", "libbpf1": "1:1.1.2-0+deb12u1", "llvm": None,
                              "iproute2": None, "nosuch": None}
    assert module.argv is None


def test_pending_updates_are_dpkg_querys_to_read(tmp_path):
    (tmp_path / "status").write_text(STATUS)
    (tmp_path / "updates").mkdir()
    (tmp_path / "updates" / "0001").write_text("Package: llvm\nStatus: install ok installed\nVersion: 1:14\n")
    module = _Module("llvm\tinstalled\t1:14\n")
    found, dpkg = _toolchain.installed(module.run_command, module.get_bin_path, ["llvm"], admin_dir=str(tmp_path))
    assert dpkg and found == {"llvm": "1:14"} and module.argv[-1] == "llvm"


def test_this_machines_status_file_says_what_dpkg_query_says():
    packages = ["clang", "libbpf1", "iproute2", "python3", "nosuch-package"]
    query = _Module("")
    query.run_command = _run
    from_query, _dpkg = _toolchain.installed(query.run_command, query.get_bin_path, packages, admin_dir="/nonexistent")
    from_file, _dpkg = _toolchain.installed(query.run_command, query.get_bin_path, packages)
    assert from_file == from_query and from_file["python3"]


def _run(argv):
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    return proc.returncode, proc.stdout, proc.stderr


def test_this_machine():
    assert _toolchain.mount_type("/sys/fs/bpf") == "bpf"
    assert _toolchain.mount_type("/nonexistent") is None
    facts = _toolchain.read(lambda argv: (0, "", ""), lambda name: None)
    assert facts["capabilities"]["net_admin"] == (os.geteuid() == 0)
    assert _toolchain.sha1("/nonexistent") is None
    assert len(_toolchain.sha1("/etc/hostname")) == 40


def test_os_release_names_the_distribution_as_setup_does(tmp_path):
    def read(text):
        path = tmp_path / "os-release"
        path.write_text(text)
        return _toolchain.os_release(str(path))

    assert read('PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nID=debian\nVERSION_ID="12"\n') == {
        "distribution": "Debian", "os_family": "Debian", "version_id": "12"}
    assert read('ID=ubuntu\nID_LIKE=debian\nVERSION_ID="24.04"\n')["distribution"] == "Ubuntu"
    assert read("ID=linuxmint\nID_LIKE='ubuntu debian'\n") == {
        "distribution": "linuxmint", "os_family": "Debian", "version_id": None}
    assert read('ID="fedora"\nVERSION_ID=40\n') == {"distribution": "fedora", "os_family": None, "version_id": "40"}
    assert _toolchain.os_release(str(tmp_path / "missing")) == {
        "distribution": None, "os_family": None, "version_id": None}


def _facts(**changes):
    """A ready Debian host's facts, with `changes` (dotted keys) applied."""
    facts = {"os": {"distribution": "Debian", "os_family": "Debian", "version_id": "12"},
             "packages": {"clang": "1:14", "bpftool": "7.1", "linux-tools-common": None},
             "bpffs": {"path": "/sys/fs/bpf", "mounted": True, "fstype": "bpf"},
             "kernel": {"release": "6.1.0-28-amd64", "bpf_syscall": True, "btf": True},
             "uid": 0, "capabilities": {"net_admin": True, "bpf": False, "sys_admin": True},
             "files": {"/etc/unit.service": None}}
    for dotted, value in changes.items():
        *path, last = dotted.split(".")
        node = facts
        for key in path:
            node = node[key]
        node[last] = value
    return facts


REQUIRE = {"os_family": "Debian", "packages": ["clang"],
           "distribution_packages": {"Debian": ["bpftool"], "Ubuntu": ["linux-tools-common"]},
           "absent_files": ["/etc/unit.service"], "min_kernel": "5.9", "btf": True}


def test_a_host_with_everything_is_ready():
    assert _toolchain.unready(_facts(), REQUIRE) == []
    # Another distribution's packages are not asked for; CAP_SYS_ADMIN stands in for CAP_BPF.
    assert _toolchain.unready(_facts(**{"kernel.release": "5.9"}), REQUIRE) == []


def test_each_lack_is_said_in_words():
    cases = {
        "os.os_family": (None, "the distribution is Debian, not of the Debian family"),
        "packages.bpftool": (None, "packages not installed: bpftool"),
        "bpffs.fstype": (None, "no bpffs at /sys/fs/bpf"),
        "kernel.bpf_syscall": (False, "the kernel has no bpf() syscall"),
        "kernel.btf": (False, "the kernel has no BTF (/sys/kernel/btf/vmlinux)"),
        "kernel.release": ("5.4.0-1-amd64", "kernel 5.4.0-1-amd64 is older than 5.9"),
        "capabilities.sys_admin": (False, "the process lacks CAP_NET_ADMIN, or both CAP_BPF and CAP_SYS_ADMIN (uid 0)"),
    }
    for dotted, (value, reason) in cases.items():
        assert _toolchain.unready(_facts(**{dotted: value}), REQUIRE) == [reason], dotted
    unit_written = _facts(files={"/etc/unit.service": "a" * 40})
    assert _toolchain.unready(unit_written, REQUIRE) == ["present: /etc/unit.service"]
    ubuntu = _facts(**{"os.distribution": "Ubuntu"})
    assert _toolchain.unready(ubuntu, REQUIRE) == ["packages not installed: linux-tools-common"]
    assert _toolchain.unready(_facts(**{"kernel.btf": False}), dict(REQUIRE, btf=False)) == []


def test_every_distribution_s_packages_are_asked_about():
    assert _toolchain.asked_packages(["llvm"], REQUIRE) == ["llvm", "clang", "bpftool", "linux-tools-common"]
    assert _toolchain.asked_packages(["llvm"], None) == ["llvm"]


def test_read_decides_with_require():
    module = _Module("")
    facts = _toolchain.read(module.run_command, module.get_bin_path, require={"packages": ["clang", "nosuch"]})
    # This machine's dpkg status (make setup installs clang).
    assert facts["packages"]["clang"] and facts["packages"]["nosuch"] is None
    assert "packages not installed: nosuch" in facts["unready"] and facts["ready"] is False
    assert "ready" not in _toolchain.read(module.run_command, module.get_bin_path, packages=["clang"])
