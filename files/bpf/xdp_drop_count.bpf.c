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
#include "parsing_helpers.h"

/* Load-time setting: the loader writes it into .rodata before loading, so
 * one compiled object serves both the drop and the count-only use. */
const volatile __u32 xdp_action = XDP_DROP;

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, 256);
} proto_count SEC(".maps");

SEC("xdp")
int xdp_drop_count(struct xdp_md *ctx)
{
	void *data_end = (void *)(long)ctx->data_end;
	void *data = (void *)(long)ctx->data;
	struct hdr_cursor nh = { .pos = data };
	__u32 key = 0;
	__u64 *count;
	int proto;

	proto = parse_ip_proto(&nh, data_end);
	if (proto >= 0)
		key = proto & 0xff;

	count = bpf_map_lookup_elem(&proto_count, &key);
	if (count)
		*count += 1;

	return xdp_action;
}

char _license[] SEC("license") = "GPL";
