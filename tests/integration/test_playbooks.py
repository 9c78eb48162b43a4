"""The main job end to end: lab up, deploy_xdp.yml four times, witnesses agree, lab down."""

import json
import os
import subprocess

import pytest

from conftest import ROOT, ansible_env, ansible_playbook, changed_by_host, sh, task_results, xdp_attached

PLAYBOOKS = os.path.join(ROOT, "playbooks")


def playbook(*names, check=False, extra_vars=None):
    return ansible_playbook(*[os.path.join(PLAYBOOKS, n) for n in names], check=check,
                            extra_vars=[extra_vars] if extra_vars else [])


def all_task_results(out, name):
    """Results per host of every run of the task called name (a role included in a loop runs it once per item)."""
    return [task["hosts"] for play in out["plays"] for task in play["tasks"]
            if name in (task["task"]["name"], task["task"]["name"].partition(" : ")[2])]


def adhoc(pattern, name, args):
    """{host: result} of one module run on the hosts of pattern."""
    argv = [os.path.join(ROOT, ".venv", "bin", "ansible"), pattern, "-m", name, "-a", json.dumps(args)]
    proc = subprocess.run(argv, capture_output=True, text=True, env=ansible_env(), cwd=ROOT, check=False)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    return json.loads(proc.stdout)["plays"][0]["tasks"][0]["hosts"]


@pytest.fixture
def lab(tmp_path):
    """The lab up, and the extra vars of a deploy that starts from an empty object directory, as a fresh host
    does (the default /var/lib/ebpf_xdp/objects keeps what earlier runs compiled: a first check-mode run would
    then find the objects it has to predict)."""
    playbook("lab_down.yml")
    playbook("lab_up.yml")
    yield {"xdp_deploy_object_dir": str(tmp_path / "objects")}
    playbook("lab_down.yml")
    assert not os.path.exists("/run/netns/receiver")
    assert not os.path.exists("/sys/fs/bpf/ebpf_xdp/receiver")


def test_deploy_rhythm_and_witnesses(lab):
    assert not os.path.exists(lab["xdp_deploy_object_dir"])
    first_check = playbook("deploy_xdp.yml", check=True, extra_vars=lab)
    assert not os.path.exists(lab["xdp_deploy_object_dir"]), "check mode compiled"
    assert changed_by_host(first_check)["receiver"] > 0
    assert "prog/xdp" not in sh("ip", "-n", "receiver", "link", "show", "eth0").stdout, "check mode attached"

    first = playbook("deploy_xdp.yml", extra_vars=lab)
    assert changed_by_host(first)["receiver"] > 0
    shown = task_results(first, "Show the receiver's counters per IP protocol")["sender"]["msg"]
    assert "proto 6: 50 packets" in shown and "proto 17: 50 packets" in shown, shown

    assert set(changed_by_host(playbook("deploy_xdp.yml", check=True, extra_vars=lab)).values()) == {0}
    second = playbook("deploy_xdp.yml", extra_vars=lab)
    assert set(changed_by_host(second).values()) == {0}

    # What the facts report is what the kernel shows.
    facts = task_results(second, "Read the receiver's counters after the burst")["sender"]["ansible_facts"]["xdp"]
    prog = facts["interfaces"]["eth0"]["xdp"]
    assert prog["protocols"] == {"tcp": 100, "udp": 100}
    assert list(xdp_attached("receiver").values()) == [prog["id"]]
    bpftool = json.loads(sh("ip", "netns", "exec", "receiver", "bpftool", "-j", "net", "show", "dev", "eth0").stdout)
    assert bpftool[0]["xdp"][0]["id"] == prog["id"] and bpftool[0]["xdp"][0]["mode"] == "driver"

    # The switch's two groups: each burst was counted on every member (the role asserts it per member) ...
    checked = [item["msg"] for hosts in all_task_results(second, "Check that every frame sent was counted")
               for item in hosts["sender"]["results"]]
    assert {"eth%d udp: sent 50, counted 50" % i for i in range(1, 10)} <= set(checked), checked
    # ... the facts show both groups with what two deploys sent (50 frames to each group per run) ...
    found = adhoc("switch:sender", "ebpf.xdp.xdp_facts", {"interfaces": ["eth3"]})
    groups = {g["name"]: g for g in found["switch"]["ansible_facts"]["xdp"]["devmap_groups"]["multicast"]}
    assert [(g["id"], len(g["members"]), g["addresses"], g["exclude_ingress"], g["frames"], g["copies"])
            for g in (groups["video"], groups["flood"])] == [
        (1, 4, ["239.1.1.1", "ff0e::1:1"], True, 100, 300), (2, 10, ["ff:ff:ff:ff:ff:ff"], False, 100, 1000)]
    assert groups["flood"]["egress_program"] == "xdp_egress_mac"
    # ... and the sender's port, a member of both, got back the flood copies only (video excludes the ingress).
    assert found["sender"]["ansible_facts"]["xdp"]["interfaces"]["eth3"]["xdp"]["protocols"] == {"udp": 100}
