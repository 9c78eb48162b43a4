// SPDX-License-Identifier: GPL-2.0-only
/*
 * xdp_redirect: every frame to the egress of redirect_ifindex with
 * bpf_redirect(), the XDP counterpart of tc_redirect's redirect_xmit.
 *
 * redirect_ifindex is set at load time (the collection resolves an interface
 * name to it). A redirect into a veth needs an XDP program on its peer (or
 * GRO enabled there): otherwise the kernel drops the frame after the program
 * returned XDP_REDIRECT.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "redirect_count.h"

const volatile __u32 redirect_ifindex = 0;

SEC("xdp")
int xdp_redirect(struct xdp_md *ctx)
{
	long verdict = bpf_redirect(redirect_ifindex, 0);

	/* It answers XDP_ABORTED for flags it does not know. */
	count_redirect(verdict == XDP_REDIRECT ? REDIRECT_DONE : REDIRECT_REFUSED);
	return verdict;
}

char _license[] SEC("license") = "GPL";
