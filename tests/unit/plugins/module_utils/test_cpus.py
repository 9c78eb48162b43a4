"""host/cpus: CPU lists as the kernel writes them (/sys/devices/system/cpu/online), parsed and printed, and what
is wrong with a list of thread CPUs (pktgen's and xdp_trafficgen's threads, one per CPU)."""

import pytest

from ansible_collections.ebpf.xdp.plugins.module_utils.host import cpus as _cpus


@pytest.mark.parametrize("text, cpus", [
    ("0-3,6\n", {0, 1, 2, 3, 6}),
    ("0\n", {0}),
    ("0-1,4-5,8\n", {0, 1, 4, 5, 8}),
    ("\n", set()),  # no CPU online in a list (a cgroup's empty cpuset.cpus reads so)
])
def test_a_kernel_cpu_list_is_parsed(text, cpus):
    assert _cpus.parse_cpu_list(text) == cpus


@pytest.mark.parametrize("cpus, text", [
    ({0, 1, 2, 3, 6, 8, 9}, "0-3,6,8-9"),
    ({5}, "5"),
    ([3, 1, 2], "1-3"),  # in any order
    (set(), ""),
])
def test_a_cpu_set_is_printed_as_the_kernel_writes_it(cpus, text):
    assert _cpus.cpu_list(cpus) == text
    assert _cpus.parse_cpu_list(text) == set(cpus)  # and read back


@pytest.mark.parametrize("cpus, problem", [
    ([0, 2], None),
    ([], "cpus must list at least one CPU"),
    ([1, 0, 1], "cpus lists CPU 1 more than once; each thread needs a CPU of its own"),
    ([2, 2, 3, 3], "cpus lists CPU 2, 3 more than once"),
    ([-1, 0], "CPU -1 is not a CPU number"),
])
def test_what_is_wrong_with_a_list_of_thread_cpus(cpus, problem):
    found = _cpus.list_problem(cpus)
    assert found == problem if problem is None else found.startswith(problem), found


def test_the_online_cpus_are_this_machines():
    online = _cpus.online_cpus()
    assert online and all(isinstance(cpu, int) and cpu >= 0 for cpu in online)
