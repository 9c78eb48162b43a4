"""playbooks/deploy_xdp.yml in the execution environment image (make ee), run the way AWX's execution nodes run
a job and a person at a terminal runs one, against the lab's VM host over SSH (make test-ee, make test-debian12;
not part of make test).

ansible-runner gets a private data directory as an execution node does (project/ with the playbook, inventory/,
env/ssh_key, env/settings) and runs it in the image with podman (the project's CONTAINERS_CONF); the container
shares the host's network to reach the VM's loopback SSH port. Inside it there is only the image: its
ansible-core, and the collection installed from the built artifact (the roles compile the BPF sources it ships).
The rollout converges a veth end in the VM's own namespace, so its gate reads the facts back. Each Ansible task
costs seconds under emulation: one release through ansible-runner, a second through ansible-navigator, the
rollback entry point (back on the first release) and the first release's re-run through ansible-runner, each one
run.
"""

import glob
import json
import os
import re
import shutil
import subprocess

import pytest
import yaml

from conftest import ROOT
from test_vm import deploy_vars, root_veth

BIN = os.path.join(ROOT, ".venv", "bin")
IMAGE = os.environ.get("EBPF_XDP_EE_IMAGE", "localhost/ebpf-xdp-ee:latest")
# podman with the project's configuration (molecule/README.md), unless the caller chose one; none of the
# checkout's Ansible settings (make exports its collections path and ansible.cfg; ansible-navigator would pass
# them into the container, where those paths do not exist).
ENV = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
ENV.setdefault("CONTAINERS_CONF", os.path.join(ROOT, "molecule", "containers.conf"))
XDP_PASS, XDP_DROP = 2, 1

# The rollback entry point as a job of its own: xdp_deploy's `rollback` puts the declared programs back on their
# previous revision; the facts read after it show which one is attached.
ROLLBACK = [{
    "name": "Put the previous release back", "hosts": "xdp_hosts", "gather_facts": False,
    "tasks": [
        {"name": "Roll back the declared programs",
         "ansible.builtin.import_role": {"name": "ebpf.xdp.xdp_deploy", "tasks_from": "rollback"}},
        {"name": "Read the facts after the rollback",
         "ebpf.xdp.xdp_facts": {"interfaces": ["{{ xdp_deploy_programs[0].interface }}"],
                                "pin_root": "{{ xdp_deploy_pin_root }}"}},
    ]}]


@pytest.fixture(scope="module")
def image():
    """make ee's image: scripts/ee.sh builds it when its inputs changed and does nothing otherwise."""
    proc = subprocess.run(["bash", os.path.join(ROOT, "scripts", "ee.sh")], capture_output=True, text=True,
                          env=ENV, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return IMAGE


@pytest.fixture(scope="module")
def job(vm, tmp_path_factory):  # pylint: disable=redefined-outer-name,unused-argument
    """A veth pair in the VM's own namespace and the private data directory of a job that deploys xdp_drop_count
    on one end of it (the rollout's gate reads the facts of the host's namespace); removed afterwards."""
    data = tmp_path_factory.mktemp("runner")
    with root_veth(str(tmp_path_factory.mktemp("vm-setup")), "ee") as (iface, pin_root):
        vm_run = os.path.join(ROOT, ".build", "vm")
        for sub in ("project", "inventory", "env", "ssh"):
            (data / sub).mkdir()
        shutil.copy(os.path.join(ROOT, "playbooks", "deploy_xdp.yml"), str(data / "project"))
        (data / "project" / "rollback.yml").write_text(yaml.safe_dump(ROLLBACK, sort_keys=False))
        shutil.copy(os.path.join(vm_run, "id_ed25519"), str(data / "env" / "ssh_key"))
        shutil.copy(os.path.join(vm_run, "id_ed25519"), str(data / "ssh" / "id_ed25519"))
        shutil.copy(os.path.join(vm_run, "known_hosts"), str(data / "ssh" / "known_hosts"))
        with open(os.path.join(vm_run, "port")) as f:
            port = int(f.read())
        program = {"object": "xdp_drop_count", "mode": "native",
                   "constants": {"xdp_action": "{{ ee_release_action | default(%d) }}" % XDP_PASS}}
        vm_vars = dict(deploy_vars(iface, pin_root, program), **{
            "ansible_connection": "ansible.builtin.ssh", "ansible_host": "127.0.0.1", "ansible_port": port,
            "ansible_user": "root", "ansible_python_interpreter": "/usr/bin/python3",
            # /runner/ssh for ansible-runner (the private data directory is mounted there); ansible-navigator
            # mounts its working directory at the same path.
            "ee_ssh_dir": "/runner/ssh",
            "ansible_ssh_common_args": "-o StrictHostKeyChecking=yes -o HostKeyAlias=ebpf-xdp-vm "
                                       "-o UserKnownHostsFile={{ ee_ssh_dir }}/known_hosts"})
        inventory = {"all": {"children": {"xdp_hosts": {"hosts": {"vm": vm_vars}}, "xdp_senders": {"hosts": {}}}}}
        (data / "inventory" / "hosts.yml").write_text(yaml.safe_dump(inventory, sort_keys=False))
        # An execution node's settings: the container shares the host's network (the VM's SSH port is on loopback).
        (data / "env" / "settings").write_text(yaml.safe_dump({"container_options": ["--network=host"]}))
        yield {"dir": str(data), "interface": iface, "pin_root": pin_root}


def runner(image, job, play, ident, extra_vars=None):  # pylint: disable=redefined-outer-name
    """ansible-runner run in the image, as an execution node: the job's events, and its stats per host."""
    argv = [os.path.join(BIN, "ansible-runner"), "run", job["dir"], "-p", play, "--limit", "vm", "--ident", ident,
            "--process-isolation", "--process-isolation-executable", "podman", "--container-image", image]
    if extra_vars:
        argv += ["--cmdline", "-e '%s'" % json.dumps(extra_vars)]
    proc = subprocess.run(argv, capture_output=True, text=True, env=ENV, check=False)
    events = []
    for path in glob.glob(os.path.join(job["dir"], "artifacts", ident, "job_events", "*.json")):
        with open(path) as f:
            events.append(json.load(f))
    events.sort(key=lambda e: e["counter"])
    stats = [e["event_data"] for e in events if e["event"] == "playbook_on_stats"]
    assert proc.returncode == 0 and stats, "ansible-runner exited %d:\n%s\n%s" % (
        proc.returncode, proc.stdout[-6000:], proc.stderr[-2000:])
    return events, {key: stats[0][key].get("vm", 0) for key in ("ok", "changed", "failures", "dark")}


def task_result(events, name):
    """vm's result of the task called name (a role's task by its own name)."""
    for event in events:
        data = event.get("event_data", {})
        if event["event"] == "runner_on_ok" and data.get("task") == name and data.get("host") == "vm":
            return data["res"]
    raise KeyError(name)


def navigator(image, job, extra_vars):  # pylint: disable=redefined-outer-name
    """ansible-navigator run of deploy_xdp.yml in the image, as a person at a terminal starts it (its working
    directory, the data directory, is mounted at the same path: the key is read there): vm's recap counts."""
    ssh = os.path.join(job["dir"], "ssh")
    argv = [os.path.join(BIN, "ansible-navigator"), "run", "project/deploy_xdp.yml", "--mode", "stdout",
            "--execution-environment-image", image, "--pull-policy", "never", "--container-engine", "podman",
            "--container-options=--network=host", "-i", "inventory/hosts.yml", "--limit", "vm",
            "--playbook-artifact-enable", "false", "--log-file", os.path.join(job["dir"], "navigator.log"),
            "-e", "ee_ssh_dir=" + ssh, "-e", "ansible_ssh_private_key_file=" + os.path.join(ssh, "id_ed25519"),
            "-e", json.dumps(extra_vars)]
    proc = subprocess.run(argv, capture_output=True, text=True, env=ENV, cwd=job["dir"], check=False)
    # Its stdout carries ansible-runner's event markers between terminal escapes.
    out = re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", proc.stdout)
    recap = re.search(r"^vm\s*: ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", out, re.M)
    assert proc.returncode == 0 and recap, "ansible-navigator exited %d:\n%s\n%s" % (
        proc.returncode, out[-6000:], proc.stderr[-2000:])
    return dict(zip(("ok", "changed", "dark", "failures"), (int(n) for n in recap.groups())))


@pytest.mark.debian12("toolchain", "toolchain_facts", "xdp_rollout", "xdp_deploy")
# pylint: disable-next=redefined-outer-name
def test_deploy_xdp_through_ansible_runner_and_navigator_in_the_image(image, job):
    """Release 1 through ansible-runner, release 2 through ansible-navigator, the rollback entry point (back on
    release 1) and release 1's re-run, which changes nothing, through ansible-runner."""
    events, stats = runner(image, job, "deploy_xdp.yml", "release-1")
    assert stats["changed"] > 0 and stats["failures"] == stats["dark"] == 0, stats
    # The gate's reading of the facts, in the container: the very program the converge attached, on release 1.
    facts = task_result(events, "Read the counters after the change")["ansible_facts"]["xdp"]
    attached = facts["interfaces"][job["interface"]]["xdp"]
    assert attached["owner"] == "ebpf.xdp" and attached["mode"] == "native", attached
    assert attached["revision"]["constants"] == {"xdp_action": XDP_PASS}, attached
    assert attached["revision"]["number"] == 1, attached

    stats = navigator(image, job, {"ee_release_action": XDP_DROP})
    assert stats["ok"] > 0 and stats["changed"] > 0 and stats["failures"] == stats["dark"] == 0, stats

    # The rollback entry point finds release 2 attached (the one navigator deployed) and puts release 1 back.
    events, stats = runner(image, job, "rollback.yml", "rollback")
    assert stats["changed"] > 0 and stats["failures"] == 0, stats
    back = task_result(events, "Read the facts after the rollback")["ansible_facts"]["xdp"]
    revision = back["interfaces"][job["interface"]]["xdp"]["revision"]
    assert revision["constants"] == {"xdp_action": XDP_PASS} and revision["rolled_back"] is True, revision
    assert revision["number"] == 1, revision

    _events, stats = runner(image, job, "deploy_xdp.yml", "release-1-again")
    assert stats["changed"] == 0 and stats["failures"] == stats["dark"] == 0, stats
