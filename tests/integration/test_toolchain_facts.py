"""ebpf.xdp.toolchain_facts against the real kernel: what it says of the kernel is the kernel's own answer."""

import pytest

from kernel_features import REFUSED_WITH


def kernel_facts(res):
    assert not res.get("failed") and res["changed"] is False, res
    return res["ansible_facts"]["ebpf_xdp_toolchain"]["kernel"]


@pytest.mark.kernel_either("xdp_live_frames")
def test_the_kernel_s_answer_to_a_live_frames_run_is_reported(run_distro, features):
    """kernel.xdp_live_frames where the feature table's own probe (the bpf() syscall, not the collection's
    binding) finds live-frames test runs taken; false with the collection's refusal words where it finds them
    refused (this machine's 6.18 answers EPERM). The same in check mode: the run sends nothing."""
    for check in (True, False):
        kernel = kernel_facts(run_distro("toolchain_facts", {}, check=check))
        if features["xdp_live_frames"]:
            assert kernel["xdp_live_frames"] is True and kernel["xdp_live_frames_error"] is None, kernel
        else:
            assert kernel["xdp_live_frames"] is False, kernel
            assert REFUSED_WITH["xdp_live_frames"][0] in kernel["xdp_live_frames_error"], kernel


def test_a_process_that_cannot_load_programs_is_told_it_cannot_send_live_frames(run_distro):
    """Root without capabilities (a task without become): no program loads, so no live frames, on any kernel,
    and the reason says the load was refused."""
    kernel = kernel_facts(run_distro("toolchain_facts", {}, no_caps=True))
    assert kernel["xdp_live_frames"] is False, kernel
    assert kernel["xdp_live_frames_error"].startswith("cannot load a program to try a live-frames run: "), kernel
    assert "EPERM" in kernel["xdp_live_frames_error"], kernel
