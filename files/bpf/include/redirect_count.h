/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * redirect_count: what a forwarding program did with each frame, per CPU.
 * Shared by the XDP and tc redirect programs.
 */
#ifndef EBPF_XDP_REDIRECT_COUNT_H
#define EBPF_XDP_REDIRECT_COUNT_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#define REDIRECT_DONE 0 /* redirected, or a clone handed to the device */
#define REDIRECT_REFUSED 1 /* the helper (or the target's queue) refused */

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, 2);
} redirect_count SEC(".maps");

static __always_inline void count_redirect(__u32 key)
{
	__u64 *count;

	count = bpf_map_lookup_elem(&redirect_count, &key);
	if (count)
		*count += 1;
}

#endif /* EBPF_XDP_REDIRECT_COUNT_H */
