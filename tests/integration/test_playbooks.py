"""The main job end to end: lab up, deploy_xdp.yml four times, witnesses agree, lab down."""

import json
import os
import subprocess

import pytest

from conftest import ROOT, sh

PLAYBOOKS = os.path.join(ROOT, "playbooks")


def playbook(*names, check=False):
    env = dict(os.environ, ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json", ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"),
               ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, ".build", "collections"))
    argv = [os.path.join(ROOT, ".venv", "bin", "ansible-playbook")] + [os.path.join(PLAYBOOKS, n) for n in names]
    if check:
        argv.append("--check")
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=ROOT, check=False)
    out = json.loads(proc.stdout)
    failed = dict((h, s) for h, s in out["stats"].items() if s["failures"] or s["unreachable"])
    assert proc.returncode == 0 and not failed, proc.stdout[-4000:] + proc.stderr[-2000:]
    return out


def changed(out):
    return dict((host, stats["changed"]) for host, stats in out["stats"].items())


def task_results(out, name):
    """Results per host of the task called name; the json callback shows a role's tasks as "ROLE : name"."""
    for play in out["plays"]:
        for task in play["tasks"]:
            if name in (task["task"]["name"], task["task"]["name"].partition(" : ")[2]):
                return task["hosts"]
    raise KeyError(name)


@pytest.fixture
def lab():
    playbook("lab_down.yml")
    playbook("lab_up.yml")
    yield
    playbook("lab_down.yml")
    assert not os.path.exists("/run/netns/receiver")
    assert not os.path.exists("/sys/fs/bpf/ebpf_xdp/receiver")


def test_deploy_rhythm_and_witnesses(lab):
    first_check = playbook("deploy_xdp.yml", check=True)
    assert changed(first_check)["receiver"] > 0
    assert "prog/xdp" not in sh("ip", "-n", "receiver", "link", "show", "eth0").stdout, "check mode attached"

    first = playbook("deploy_xdp.yml")
    assert changed(first)["receiver"] > 0
    shown = task_results(first, "Show the receiver's counters per IP protocol")["sender"]["msg"]
    assert "proto 6: 50 packets" in shown and "proto 17: 50 packets" in shown, shown

    assert set(changed(playbook("deploy_xdp.yml", check=True)).values()) == {0}
    second = playbook("deploy_xdp.yml")
    assert set(changed(second).values()) == {0}

    # What the facts report is what the kernel shows.
    facts = task_results(second, "Read the receiver's counters after the burst")["sender"]["ansible_facts"]["xdp"]
    prog = facts["interfaces"]["eth0"]["xdp"]
    assert prog["protocols"] == {"tcp": 100, "udp": 100}
    ip_link = sh("ip", "-n", "receiver", "link", "show", "eth0").stdout
    assert "prog/xdp id %d" % prog["id"] in ip_link
    bpftool = json.loads(sh("ip", "netns", "exec", "receiver", "bpftool", "-j", "net", "show", "dev", "eth0").stdout)
    assert bpftool[0]["xdp"][0]["id"] == prog["id"] and bpftool[0]["xdp"][0]["mode"] == "driver"


def test_lab_up_and_down_rhythm():
    playbook("lab_down.yml")
    try:
        for name in ("lab_up.yml", "lab_down.yml"):
            assert changed(playbook(name, check=True))["localhost"] > 0
            assert changed(playbook(name))["localhost"] > 0
            assert changed(playbook(name, check=True))["localhost"] == 0
            assert changed(playbook(name))["localhost"] == 0
            if name == "lab_up.yml":
                links = sh("ip", "-n", "sender", "-o", "link", "show").stdout
                assert "eth0" in links and "02:00:00:00:01:01" in links
                sh("ip", "netns", "exec", "sender", "ping", "-c1", "-W2", "10.11.0.2")
        assert not os.path.exists("/run/netns/sender")
    finally:
        playbook("lab_down.yml")
