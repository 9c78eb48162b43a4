// SPDX-License-Identifier: GPL-2.0-only
/*
 * xdp_drop_count: the kernel's xdp1 sample, made configurable at load time.
 *
 * Parses Ethernet (with up to two VLAN tags), IPv4 and IPv6, counts every
 * frame per IP protocol number in a per-CPU array and returns the action set
 * in `xdp_action` before load (XDP_DROP by default, XDP_PASS to only count).
 * Frames that are not IP are counted under key 0 ("other").
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "proto_count.h"

/* Load-time setting: the loader writes it into .rodata before loading, so
 * one compiled object serves both the drop and the count-only use. */
const volatile __u32 xdp_action = XDP_DROP;

SEC("xdp")
int xdp_drop_count(struct xdp_md *ctx)
{
	count_ip_proto((void *)(long)ctx->data, (void *)(long)ctx->data_end);
	return xdp_action;
}

char _license[] SEC("license") = "GPL";
