"""The main job end to end: lab up, deploy_xdp.yml four times, witnesses agree, an entry taken out of the
inventory goes (the lab's xdp_deploy_state is overridden), lab down. One lab for the file."""

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


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """The lab up, and the extra vars of a deploy that starts from an empty object directory, as a fresh host
    does (the default /var/lib/ebpf_xdp/objects keeps what earlier runs compiled: a first check-mode run would
    then find the objects it has to predict)."""
    playbook("lab_down.yml")
    playbook("lab_up.yml")
    yield {"xdp_deploy_object_dir": str(tmp_path_factory.mktemp("deploy") / "objects")}
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
    # What the role records for the rollout's gate and rollback: each attachment it changed, and its program.
    recorded = task_results(first, "Record what this run changed")["receiver"]["ansible_facts"]
    assert [(c["hook"], c["interface"], c["previous"]) for c in recorded["xdp_deploy_changed"]] == [
        ("xdp", "eth0", False), ("xdp", "eth1", False)], recorded
    assert {a["interface"]: a["id"] for a in recorded["xdp_deploy_attached"]} == {
        dev: xdp_attached("receiver", dev)["native"] for dev in ("eth0", "eth1")}, recorded
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


RECEIVER_ONLY = """
- name: Converge the receiver as the inventory says
  hosts: receiver
  gather_facts: false
  roles:
    - role: ebpf.xdp.xdp_deploy
"""


def test_an_entry_taken_out_of_the_inventory_goes(lab, tmp_path):
    """xdp_deploy_state overridden (the lab's): the receiver's eth1 entry taken out, its program is removed on
    the next run; eth0's stays, the same program; check mode first, then the four-step rhythm."""
    play = tmp_path / "receiver.yml"
    play.write_text(RECEIVER_ONLY)
    out = ansible_playbook(str(play), extra_vars=[lab])
    kept = xdp_attached("receiver", "eth0")
    assert kept and xdp_attached("receiver", "eth1"), out["stats"]
    only_eth0 = dict(lab, xdp_deploy_programs=[{"interface": "eth0", "object": "xdp_drop_count",
                                                "program": "xdp_drop_count", "mode": "native"}])
    steps, results = [], []
    for check in (True, False, True, False):
        out = ansible_playbook(str(play), check=check, extra_vars=[only_eth0])
        steps.append((changed_by_host(out)["receiver"], bool(xdp_attached("receiver", "eth1"))))
        results.append(task_results(out, "Converge objects, programs and groups")["receiver"])
    assert steps == [(1, True), (1, False), (0, False), (0, False)], steps
    assert [c["entry"] for c in results[1]["changes"]] == ["the XDP hook of eth1 (not declared)"], results[1]
    assert results[0]["changes"] == results[1]["changes"], "check mode predicted another change"
    assert [e["interface"] for e in results[3]["before"]["xdp"]] == ["eth0"], results[3]
    assert xdp_attached("receiver", "eth0") == kept
    assert not os.path.exists("/sys/fs/bpf/ebpf_xdp/receiver/eth1/xdp"), "its pins stayed"
    # Declared again: attached again.
    out = ansible_playbook(str(play), extra_vars=[lab])
    assert changed_by_host(out)["receiver"] == 1 and xdp_attached("receiver", "eth1")
