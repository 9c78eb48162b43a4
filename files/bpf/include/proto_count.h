/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * proto_count: frames per IP protocol number (key 0: not IP), per CPU.
 *
 * The collection's facts know this map by its name and label its keys as
 * protocols; xdp_drop_count and tc_drop_count share it through this header.
 */
#ifndef EBPF_XDP_PROTO_COUNT_H
#define EBPF_XDP_PROTO_COUNT_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "parsing_helpers.h"

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, 256);
} proto_count SEC(".maps");

/* Count the frame in [data, data_end) under its IP protocol number. */
static __always_inline void count_ip_proto(void *data, void *data_end)
{
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
}

#endif /* EBPF_XDP_PROTO_COUNT_H */
