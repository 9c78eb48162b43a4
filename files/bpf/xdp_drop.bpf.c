// SPDX-License-Identifier: GPL-2.0-only
/*
 * xdp_drop: drops every frame and does nothing else, the floor of what an
 * XDP program costs (the benchmark's "empty XDP_DROP" next to xdp_drop_count,
 * which parses and counts first).
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

SEC("xdp")
int xdp_drop(struct xdp_md *ctx)
{
	return XDP_DROP;
}

char _license[] SEC("license") = "GPL";
