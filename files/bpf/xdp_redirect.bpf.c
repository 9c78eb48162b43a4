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

/* Keys of redirect_count. */
#define REDIRECT_DONE 0 /* the helper accepted the redirect */
#define REDIRECT_REFUSED 1 /* the helper refused (answered XDP_ABORTED) */

const volatile __u32 redirect_ifindex = 0;

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, 2);
} redirect_count SEC(".maps");

SEC("xdp")
int xdp_redirect(struct xdp_md *ctx)
{
	long verdict = bpf_redirect(redirect_ifindex, 0);
	__u32 key = verdict == XDP_REDIRECT ? REDIRECT_DONE : REDIRECT_REFUSED;
	__u64 *count;

	count = bpf_map_lookup_elem(&redirect_count, &key);
	if (count)
		*count += 1;
	return verdict;
}

char _license[] SEC("license") = "GPL";
