"""deploy_xdp.yml under AWX job slicing on a generated lab of four receivers, with real traffic: the workflow of
tests/benchmarks/slices.py (a canary job, then two slices as two ansible-runner processes at once, AWX's
assignment: hosts by name, slice k gets hosts[k-1::2]), the slices speaking through markers on localhost
(xdp_rollout_signal_host), each slice in batches of 1 then the rest.

Hosts h1..h4: the canary job rolls out to h1; slice 1 is h1 (its batch 1, already there) and h3, slice 2 is h2
then h4. The releases are read back from each host's XDP facts (the program's `release` constant), not from
the rollout's own record. Each test brings the lab to release 1 first, so none depends on another.

make test runs the fault in slice 2 (the slices' shared stop, the faulty batch rolled back) and the refusals; the
four-step workflow, the rollback scope all and the slice that never comes are marked long (make test-long): each is
three to eight sliced jobs.
"""

import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT

sys.path.insert(0, os.path.join(ROOT, "tests", "benchmarks"))
import slices  # noqa: E402  pylint: disable=wrong-import-position

SERIAL = [1, "100%"]


def releases(lab):
    """Each host's release, from the facts of its eth0 XDP program (None without one)."""
    argv = [os.path.join(slices.BIN, "ansible"), "-i", lab.inventory, ",".join(lab.hosts), "-m",
            "ebpf.xdp.xdp_facts", "-a", json.dumps({"interfaces": ["eth0"]})]
    proc = subprocess.run(argv, capture_output=True, text=True, env=slices.ENV, cwd=ROOT, check=True)
    found = json.loads(proc.stdout)["plays"][0]["tasks"][0]["hosts"]
    return [((found[host]["ansible_facts"]["xdp"]["interfaces"]["eth0"]["xdp"] or {}).get("constants") or {})
            .get("release") for host in lab.hosts]


def changed(job):
    return {host: count for host, count in slices.stats(job)["changed"].items() if count}


@pytest.fixture(scope="module")
def lab():
    fleet = slices.Lab(4, 4)
    try:
        fleet.up()
        yield fleet
    finally:
        fleet.down()


@pytest.fixture
def at_release_1(lab):  # pylint: disable=redefined-outer-name
    """Every receiver on release 1 (one plain deploy_xdp.yml when not so already)."""
    if releases(lab) != [1] * 4:
        job = lab.finish_job(lab.start_job("release1", lab.hosts, {"fleet_release": 1}))
        assert job["rc"] == 0, slices.failures(job)
        assert releases(lab) == [1] * 4
    return lab


@pytest.mark.long
def test_sliced_workflow_in_the_four_steps(at_release_1):  # pylint: disable=redefined-outer-name
    lab = at_release_1
    h1 = lab.hosts[0]
    # Check mode: the slices still wait for each other (their markers are written), and nothing changes.
    canary, jobs = slices.workflow(lab, 2, 2, SERIAL, check=True)[:2]
    assert [job["rc"] for job in jobs] == [0, 0], [slices.failures(job) for job in jobs]
    assert slices.summary(canary)["would_change"] == [h1]
    # The canary's check changed nothing either: slice 1's batch 1 (h1) would change too.
    assert [sorted(slices.summary(job)["would_change"]) for job in jobs] == [lab.hosts[0::2], lab.hosts[1::2]]
    assert releases(lab) == [1] * 4
    # The run: every host on release 2.
    canary, jobs = slices.workflow(lab, 2, 2, SERIAL)[:2]
    slices.check_healthy(canary, jobs, rerun=False)
    assert [sorted(slices.summary(job)["updated"]) for job in jobs] == [lab.hosts[2:3], lab.hosts[1::2]]
    assert releases(lab) == [2] * 4
    # Check mode again, and the run again: nothing to change.
    for check in (True, False):
        canary, jobs = slices.workflow(lab, 2, 2, SERIAL, check=check)[:2]
        slices.check_healthy(canary, jobs, rerun=True)
        assert not changed(canary) and not any(changed(job) for job in jobs)
    assert releases(lab) == [2] * 4


def test_a_fault_in_slice_2_stops_slice_1_before_its_next_batch(at_release_1):  # pylint: disable=redefined-outer-name
    lab = at_release_1
    h1, h2, h3, h4 = lab.hosts
    canary, jobs = slices.workflow(lab, 2, 2, SERIAL, fault_hosts=[h2])[:2]
    assert canary["rc"] == 0 and slices.summary(canary)["updated"] == [h1]
    # Slice 2 rolled back its faulty batch and stopped; slice 1 stopped before its batch 2 (h3 untouched).
    slices.check_fault(jobs, SERIAL, [h2], h1)
    assert "The rollout stopped before batch 2 of 2: slice %s stopped;" % h2 in slices.failures(jobs[0])
    with open(os.path.join(lab.signals, jobs[1]["rollout_id"], "stop." + h2), encoding="utf-8") as marker:
        assert marker.read() == "batch 1: %s failed the gate\n" % h2
    assert releases(lab) == [2, 1, 1, 1]
    assert h4 in slices.summary(jobs[1])["untouched"]


@pytest.mark.long
def test_rollback_scope_all_rolls_back_the_other_slices_too(at_release_1):  # pylint: disable=redefined-outer-name
    lab = at_release_1
    h1, h2, h3, h4 = lab.hosts
    # h4, slice 2's batch 2, is faulty: both slices passed batch 1 (h1 already there, h2), then slice 1 took h3
    # to release 2 while slice 2's h4 failed. As one play with the scope all, every host the sliced job changed
    # goes back: h4 and h2 by slice 2, h3 by slice 1, which waits for the others after its last batch.
    canary, jobs = slices.workflow(lab, 2, 2, SERIAL, fault_hosts=[h4], extra={"xdp_rollout_rollback_scope": "all"})[:2]
    assert slices.summary(canary)["updated"] == [h1]
    first, second = (slices.summary(job) for job in jobs)
    assert jobs[0]["rc"] != 0 and jobs[1]["rc"] != 0
    assert sorted(second["rolled_back"]) == [h2, h4] and second["stopped_at_batch"] in (2, "2")
    assert first["rolled_back"] == [h3] and first["stopped_by"] == "slice %s stopped" % h2
    assert "The rollout stopped after its last batch: slice %s stopped;" % h2 in slices.failures(jobs[0])
    # The canary's release stays: it passed its gate in a job of its own, before the sliced one.
    assert releases(lab) == [2, 1, 1, 1]


@pytest.mark.long
def test_a_slice_that_never_comes_stops_the_others(at_release_1):  # pylint: disable=redefined-outer-name
    lab = at_release_1
    h3 = lab.hosts[2]
    # Slice 1 of 2 alone: after its batch 1 it waits xdp_rollout_slice_wait for slice 2's, then stops.
    jobs = slices.workflow(lab, 2, 2, SERIAL, only=[1], extra={"xdp_rollout_slice_wait": 3})[1]
    result = slices.summary(jobs[0])
    assert jobs[0]["rc"] != 0
    assert result["stopped_by"].startswith("after 3 s, 1 of 2 slices had passed batch 1"), result
    assert result["untouched"] == [h3]
    assert releases(lab) == [2, 1, 1, 1]


def test_a_sliced_rollout_without_a_name_is_refused(at_release_1):  # pylint: disable=redefined-outer-name
    lab = at_release_1
    job = lab.finish_job(lab.start_job("unnamed", lab.hosts[0::2], {
        "fleet_release": 2, "xdp_serial": SERIAL, "xdp_rollout_signal_host": "localhost",
        "xdp_rollout_signal_dir": lab.signals, "xdp_rollout_id": ""}))
    assert job["rc"] != 0
    assert "xdp_rollout_id is empty: give the rollout a name" in slices.failures(job)
    assert "Traceback" not in slices.failures(job)
    assert releases(lab) == [1] * 4


def test_a_rollout_name_that_leads_out_of_the_markers_directory_is_refused(at_release_1):  # pylint: disable=redefined-outer-name
    lab = at_release_1
    outside = os.path.join(os.path.dirname(lab.signals), "escaped")
    job = lab.finish_job(lab.start_job("escape", lab.hosts[0::2], {
        "fleet_release": 2, "xdp_serial": SERIAL, "xdp_rollout_signal_host": "localhost",
        "xdp_rollout_signal_dir": lab.signals, "xdp_rollout_id": "../escaped"}))
    assert job["rc"] != 0
    assert "has a '..' component" in slices.failures(job), slices.failures(job)
    assert "Traceback" not in slices.failures(job)
    assert not os.path.exists(outside)
    assert releases(lab) == [1] * 4
