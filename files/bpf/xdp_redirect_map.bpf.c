// SPDX-License-Identifier: GPL-2.0-only
/*
 * xdp_redirect_map: 1 -> 1 forwarding with bpf_redirect_map() over a DEVMAP,
 * the kernel's xdp_redirect_map sample with its port set by a map write.
 *
 * tx_port says where frames go: the entry keyed by the ingress ifindex, else
 * the entry at key 0 (one default port for every interface the program is
 * on); the value is the target ifindex (4 bytes: no egress program). The
 * map is changed while the program runs (ebpf.xdp.bpf_map_entry); a frame
 * for which neither entry exists gets miss_action (XDP_PASS: to the stack).
 *
 * redirect_count: REDIRECT_DONE for frames handed to the map, and
 * REDIRECT_REFUSED for frames no entry took. A redirect into a veth in
 * native mode needs an XDP program on its peer, or the kernel drops the
 * frame after the program returned.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "redirect_count.h"

/* Keys are ifindexes: they stay below this in most namespaces. */
#define TX_PORT_MAX_ENTRIES 4096

const volatile __u32 miss_action = XDP_PASS;

struct {
	__uint(type, BPF_MAP_TYPE_DEVMAP);
	__type(key, __u32);
	__type(value, __u32);
	__uint(max_entries, TX_PORT_MAX_ENTRIES);
} tx_port SEC(".maps");

SEC("xdp")
int xdp_redirect_map(struct xdp_md *ctx)
{
	long verdict;

	/* The low bits of the flags are the verdict when the key is absent. */
	verdict = bpf_redirect_map(&tx_port, ctx->ingress_ifindex, XDP_ABORTED);
	if (verdict != XDP_REDIRECT)
		verdict = bpf_redirect_map(&tx_port, 0, XDP_ABORTED);
	if (verdict != XDP_REDIRECT) {
		count_redirect(REDIRECT_REFUSED);
		return miss_action;
	}
	count_redirect(REDIRECT_DONE);
	return XDP_REDIRECT;
}

char _license[] SEC("license") = "GPL";
