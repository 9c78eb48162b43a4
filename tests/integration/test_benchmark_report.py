"""ebpf.xdp.benchmark_report through ansible on this machine, as the benchmark playbook runs it on its controller:
results.json, report.md and a PNG per family written into a directory, a failed case reported and not hidden,
check mode writing nothing, and bad input (a missing parent, a file in the way, records that contradict
themselves, no matplotlib in the module's Python) refused with nothing written.
"""

import json
import os
import struct
import subprocess

import pytest

from conftest import SYSTEM_PYTHON, VENV_PYTHON, ModuleRunner, ansible_playbook, task_results

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
IPTABLES = "iptables raw drop"
XDP_NATIVE = "XDP drop (xdp_drop_count), native"
XDP_GENERIC = "XDP drop (xdp_drop_count), generic"
BRIDGE = "Linux bridge"
ACT_BPF = "tc bpf_redirect, act_bpf"
NO_ACT_BPF = "act_bpf: this kernel has no CONFIG_NET_ACT_BPF"
CPUS = {"generator": [0], "datapath": [1]}


@pytest.fixture
def run():
    """The module through `ansible localhost -m`, with the venv's Python: ansible_playbook_python's, which
    has matplotlib."""
    return ModuleRunner(VENV_PYTHON, pin_root=None, via_ansible=True)


def measured(family, case, round_, value, baseline, offered, **extra):
    return dict(family=family, case=case, round=round_, metric="delivered_pps", value=value, baseline=baseline,
                offered_pps=offered, sent=int(offered * 2), delivered=int(value * 2), seconds=2.0, cpus=CPUS,
                host={"generator": "sender", "datapath": "receiver" if family == "drop" else "router"}, **extra)


def two_families():
    """Three alternating rounds of a drop and a forward comparison, as the playbook collects them; act_bpf
    could not run on this kernel in any round."""
    records = []
    for round_, noise in ((1, 0.98), (2, 1.0), (3, 1.03)):
        records += [
            measured("drop", IPTABLES, round_, 4.8e6 * noise, IPTABLES, 7.8e6),
            measured("drop", XDP_NATIVE, round_, 7.7e6 * noise, IPTABLES, 7.8e6),
            measured("drop", XDP_GENERIC, round_, 6.1e6 * noise, IPTABLES, 7.8e6, notes="skb mode"),
            measured("forward", BRIDGE, round_, 2.1e6 * noise, None, 7.8e6),
            measured("forward", "tc bpf_redirect, cls_bpf", round_, 2.5e6 * noise, BRIDGE, 7.8e6),
            dict(family="forward", case=ACT_BPF, round=round_, metric="delivered_pps", baseline=BRIDGE,
                 error=NO_ACT_BPF),
        ]
    return records


def report_args(dest, **extra):
    return dict(dest=str(dest), title="ebpf.xdp benchmark on the lab", results=two_families(),
                machine={"controller": {"kernel": os.uname().release, "cpus": os.cpu_count()},
                         "date": "2026-12-02", "collection": "0.1.0", "inventory": "inventories/lab"},
                published={"%s / %s" % (XDP_NATIVE, IPTABLES): "paper: 5x",
                           "tc redirect / bridge": "commit: 1.14-1.19x"},
                **extra)


def assert_png(path):
    with open(path, "rb") as f:
        data = f.read()
    assert data[:8] == PNG_MAGIC, path
    # The first chunk is IHDR: width and height; the last IEND.
    assert data[12:16] == b"IHDR" and data[-8:-4] == b"IEND", path
    width, height = struct.unpack(">II", data[16:24])
    assert width >= 600 and height >= 200 and len(data) > 10000, (path, width, height, len(data))


def test_a_report_of_two_families_with_a_failed_case(run, tmp_path):
    dest = tmp_path / "results" / "20261202T120000"
    dest.parent.mkdir()
    res = run("benchmark_report", report_args(dest))
    assert res["changed"] is True and not res.get("failed"), res
    names = ["drop.png", "forward.png", "results.json", "report.md"]
    assert res["dest"] == str(dest) and res["files"] == [str(dest / n) for n in names]
    assert sorted(os.listdir(dest)) == sorted(names)
    assert_png(dest / "drop.png")
    assert_png(dest / "forward.png")
    assert res["failed_cases"] == [ACT_BPF]

    document = json.loads((dest / "results.json").read_text())
    assert set(document) == {"machine", "results", "summary"}
    assert document["summary"] == res["summary"]
    assert document["machine"]["controller"]["kernel"] == os.uname().release
    assert len(document["results"]) == len(two_families())
    assert all(None not in r.values() for r in document["results"])
    by_case = {e["case"]: e for e in document["summary"]}
    assert [e["family"] for e in document["summary"]] == ["drop"] * 3 + ["forward"] * 3
    assert by_case[XDP_NATIVE]["ratio"] == pytest.approx(7.7 / 4.8)
    assert by_case[XDP_NATIVE]["rounds"] == 3 and by_case[XDP_NATIVE]["median"] == pytest.approx(7.7e6)
    assert by_case[BRIDGE]["is_baseline"] and by_case[BRIDGE]["ratio"] == 1.0
    assert by_case[ACT_BPF]["error"] == NO_ACT_BPF and by_case[ACT_BPF]["failed_rounds"] == [1, 2, 3]

    report = (dest / "report.md").read_text()
    assert report.startswith("# ebpf.xdp benchmark on the lab\n\n## Machine\n")
    assert [line for line in report.splitlines() if line.startswith("## ")] == [
        "## Machine", "## Drop", "## Forward and redirect", "## Published numbers"]
    header = "| case | rounds | median | min–max | spread | ratio to baseline | offered → delivered | where | notes |"
    assert report.count(header) == 2
    assert "| %s | 3 | 7.700 Mpps | 7.546–7.931 Mpps |" % XDP_NATIVE in report
    assert "generator: sender, CPU 0; datapath: receiver, CPU 1" in report
    assert "| %s | 0 | failed |" % ACT_BPF in report
    assert "- **%s** (round 1, 2, 3): %s" % (ACT_BPF, NO_ACT_BPF) in report
    assert "![drop](drop.png)" in report and "![forward](forward.png)" in report
    assert "| %s / %s | paper: 5x | 1.60 |" % (XDP_NATIVE, IPTABLES) in report
    assert "| tc redirect / bridge | commit: 1.14-1.19x | — (no case or ratio of this run has this name) |" in report

    # An action: the next run writes the files again.
    before = (dest / "drop.png").stat().st_mtime_ns
    again = run("benchmark_report", report_args(dest))
    assert again["changed"] is True and again["summary"] == res["summary"]
    assert (dest / "drop.png").stat().st_mtime_ns > before


def test_check_mode_writes_nothing(run, tmp_path):
    dest = tmp_path / "report"
    res = run("benchmark_report", report_args(dest), check=True)
    assert res["changed"] is True and not res.get("failed"), res
    assert res["files"] == [str(dest / n) for n in ("drop.png", "forward.png", "results.json", "report.md")]
    assert res["failed_cases"] == [ACT_BPF] and len(res["summary"]) == 6
    assert not dest.exists()

    dest.mkdir()
    (dest / "report.md").write_text("an earlier report\n")
    res = run("benchmark_report", report_args(dest), check=True)
    assert res["changed"] is True and not res.get("failed"), res
    assert os.listdir(dest) == ["report.md"] and (dest / "report.md").read_text() == "an earlier report\n"


def test_through_a_playbook_delegated_to_the_controller(tmp_path):
    """The way the benchmark playbook runs it: delegate_to localhost with the playbook's Python, here from a
    play whose host has another interpreter (Debian's, without matplotlib)."""
    dest = tmp_path / "bench"
    (tmp_path / "results.json").write_text(json.dumps(report_args(dest)))
    playbook = tmp_path / "report.yml"
    playbook.write_text("""
- hosts: all
  gather_facts: false
  vars:
    ansible_python_interpreter: %s
    report: "{{ lookup('file', '%s') | from_json }}"
  tasks:
    - name: Write the report
      ebpf.xdp.benchmark_report:
        dest: "{{ report.dest }}"
        title: "{{ report.title }}"
        machine: "{{ report.machine }}"
        results: "{{ report.results }}"
        published: "{{ report.published }}"
      delegate_to: localhost
      run_once: true
      vars:
        ansible_python_interpreter: "{{ ansible_playbook_python }}"
""" % (SYSTEM_PYTHON, tmp_path / "results.json"))
    inventory = ["-i", "benchhost,", "-c", "local", str(playbook)]
    checked = task_results(ansible_playbook(*inventory, check=True), "Write the report")["benchhost"]
    assert checked["changed"] is True and not dest.exists()
    written = task_results(ansible_playbook(*inventory), "Write the report")["benchhost"]
    assert written["changed"] is True and written["failed_cases"] == [ACT_BPF]
    assert sorted(os.listdir(dest)) == ["drop.png", "forward.png", "report.md", "results.json"]


def bad_records():
    records = two_families()
    records[1] = dict(records[1], error="generator failed")  # a value and an error
    return records


@pytest.mark.parametrize("change, said", [
    (lambda args, tmp: dict(args, dest=str(tmp / "missing" / "report")),
     "its parent directory %s/missing does not exist (only the last directory is created)"),
    (lambda args, tmp: dict(args, dest=str(tmp / "a-file")), "%s/a-file: it exists and is not a directory"),
    (lambda args, tmp: dict(args, results=bad_records()),
     "results[1] (drop, '%s', round 1): a case that could not run (error: generator failed) has no value" % XDP_NATIVE),
    (lambda args, tmp: dict(args, results=[dict(r, baseline="bridge") if r["family"] == "forward" else r
                                           for r in args["results"]]),
     "forward, case %r: its baseline 'bridge' is not a case of family forward" % BRIDGE),
    (lambda args, tmp: dict(args, results=[dict(args["results"][0], family="dropping")]), "family"),
], ids=["missing-parent", "file-in-the-way", "value-and-error", "unknown-baseline", "unknown-family"])
def test_bad_input_is_a_clear_error_and_writes_nothing(tmp_path, change, said):
    (tmp_path / "a-file").write_text("not a directory\n")
    args = change(report_args(tmp_path / "report"), tmp_path)
    for check in (True, False):
        # Started directly: the same module and argument spec, without a controller's second per run.
        res = ModuleRunner(VENV_PYTHON, pin_root=None)("benchmark_report", args, check=check)
        assert res.get("failed") and not res.get("changed"), res
        assert (said % tmp_path if "%s" in said else said) in res["msg"], res["msg"]
    assert sorted(os.listdir(tmp_path)) == ["a-file"]
    assert (tmp_path / "a-file").read_text() == "not a directory\n"


def test_without_matplotlib_the_module_names_the_package(tmp_path):
    """The system Python writes the report where it has matplotlib, and names the package where it has not."""
    has = subprocess.run([SYSTEM_PYTHON, "-c", "import matplotlib"], capture_output=True, check=False).returncode == 0
    dest = tmp_path / "report"
    res = ModuleRunner(SYSTEM_PYTHON, pin_root=None, via_ansible=True)("benchmark_report", report_args(dest))
    if has:
        assert res.get("changed") and not res.get("failed"), res
        assert (dest / "report.md").is_file() and (dest / "results.json").is_file()
        return
    assert res.get("failed") and "Failed to import the required Python library (matplotlib)" in res["msg"], res
    assert "pip install matplotlib" in res["msg"] and "ansible_playbook_python" in res["msg"]
    assert not dest.exists()


def test_never_written_through_a_link_nor_into_a_directory_others_can_change(tmp_path):
    """Root writes the report (the controller's playbook): a report.md planted as a link to another file, or a
    destination others can write into (where such a link could be planted between two runs), is refused."""
    dest = tmp_path / "report"
    dest.mkdir(mode=0o755)
    victim = tmp_path / "victim"
    victim.write_text("root's file\n")
    (dest / "report.md").symlink_to(victim)
    res = ModuleRunner(VENV_PYTHON, pin_root=None)("benchmark_report", report_args(dest))
    assert res.get("failed") and res["msg"] == (
        "refusing to write %s: it is a symbolic link (to %s); remove it or give the real path"
        % (dest / "report.md", victim)), res
    assert victim.read_text() == "root's file\n" and os.path.islink(dest / "report.md")

    (dest / "report.md").unlink()
    for name in os.listdir(dest):
        os.unlink(dest / name)
    os.chmod(dest, 0o777)
    res = ModuleRunner(VENV_PYTHON, pin_root=None)("benchmark_report", report_args(dest))
    assert res.get("failed") and res["msg"] == (
        "refusing to write in %s: %s is writable by its group or by others (mode 0777); another user could replace "
        "what is written there (make it uid 0's and writable by it alone, or use another directory)"
        % (dest, dest)), res
    assert os.listdir(dest) == []
