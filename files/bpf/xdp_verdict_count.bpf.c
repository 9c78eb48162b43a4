// SPDX-License-Identifier: GPL-2.0-only
/*
 * xdp_verdict_count: count every frame per IP protocol and per verdict, and
 * return the verdict set in `xdp_action` before load (XDP_PASS by default).
 *
 * A program whose health can be read from its own counters: `verdict_count`
 * holds how many frames got each XDP action (key: XDP_ABORTED 0, XDP_DROP 1,
 * XDP_PASS 2, XDP_TX 3, XDP_REDIRECT 4), so a rollout gate can compute the
 * share of dropped frames. `release` is not used by the code; a deploy sets
 * it to tell two releases of the same program apart (in the lab, the
 * rollouts' "new version"), and `xdp_action: 1` makes the faulty release
 * that drops what it should pass. `drop_ip_proto` (0: none) makes a subtler
 * one: frames of that IP protocol (6: TCP) are dropped, the rest get
 * `xdp_action`. VERDICT_SLOTS (a define, 5 by default) sizes `verdict_count`:
 * a release built with more slots lays its map out otherwise, and its upgrade
 * (and rollback) carries the counts over (map_migration).
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "proto_count.h"

#ifndef VERDICT_SLOTS
#define VERDICT_SLOTS 5
#endif

const volatile __u32 xdp_action = XDP_PASS;
const volatile __u32 release = 0;
const volatile __u32 drop_ip_proto = 0;

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, VERDICT_SLOTS);
} verdict_count SEC(".maps");

SEC("xdp")
int xdp_verdict_count(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct hdr_cursor nh = { .pos = data };
	__u32 key = xdp_action;
	__u64 *count;

	count_ip_proto(data, data_end);
	if (drop_ip_proto && parse_ip_proto(&nh, data_end) == (int)drop_ip_proto)
		key = XDP_DROP;
	count = bpf_map_lookup_elem(&verdict_count, &key);
	if (count)
		*count += 1;
	return key;
}

char _license[] SEC("license") = "GPL";
