// SPDX-License-Identifier: GPL-2.0-only
/*
 * xdp_multicast: multicast groups over devmaps, in the manner of the kernel's
 * xdp_redirect_multi selftest, with many groups in one program.
 *
 *   xdp_multicast   (SEC("xdp"), on every port that takes frames in) finds
 *                   the frame's group (mcast_groups.h: a multicast IPv4 or
 *                   IPv6 destination, else a group destination MAC, else
 *                   default_group) and hands it to bpf_redirect_map() on the
 *                   group's DEVMAP_HASH with BPF_F_BROADCAST, adding
 *                   BPF_F_EXCLUDE_INGRESS when the group says so. The kernel
 *                   makes the copies, one per member, after the program
 *                   returned. No group: XDP_PASS, to the stack.
 *   xdp_egress_mac  (SEC("xdp/devmap"), optional, set per member in the
 *                   group's devmap value) runs on each copy before it leaves
 *                   and writes the egress port's own MAC (mcast_port_mac,
 *                   by ctx->egress_ifindex) as the source address.
 *
 * A frame from a port that is not a member still goes to the members: one
 * ingress port can feed a group. Counters per group: frames classified to it
 * (mcast_frames) and copies asked for (mcast_copies): its members, less the
 * ingress port when it is a member and the group excludes it. The member
 * count is what the manager wrote in mcast_config; the kernel may still
 * refuse a copy (a veth whose peer has no XDP program, a full ring), which
 * only the interfaces' counters show.
 *
 * A redirect into a veth in native mode needs an XDP program on its peer.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "mcast_groups.h"

/* Load-time setting: the group of frames no address names (flooding), or
 * MCAST_GROUP_NONE (0) to pass them to the stack. */
const volatile __u32 default_group = MCAST_GROUP_NONE;

SEC("xdp")
int xdp_multicast(struct xdp_md *ctx)
{
	void *data_end = (void *)(long)ctx->data_end;
	void *data = (void *)(long)ctx->data;
	__u32 ingress = ctx->ingress_ifindex;
	__u64 flags = BPF_F_BROADCAST;
	struct mcast_group *config;
	__u32 group, copies;
	void *members;

	group = mcast_classify(data, data_end, default_group);
	if (group == MCAST_GROUP_NONE || group >= MCAST_MAX_GROUPS)
		goto pass;
	members = bpf_map_lookup_elem(&mcast_groups, &group);
	config = bpf_map_lookup_elem(&mcast_config, &group);
	/* A group without its devmap (being added or removed) is no group. */
	if (!members || !config)
		goto pass;

	copies = config->members;
	if (config->flags & MCAST_GROUP_EXCLUDE_INGRESS) {
		flags |= BPF_F_EXCLUDE_INGRESS;
		if (copies && bpf_map_lookup_elem(members, &ingress))
			copies--;
	}
	mcast_count(&mcast_frames, group, 1);
	mcast_count(&mcast_copies, group, copies);
	/* With BPF_F_BROADCAST the key is not looked up and the helper always
	 * answers XDP_REDIRECT; an empty group drops the frame. */
	return bpf_redirect_map(members, 0, flags);

pass:
	mcast_count(&mcast_frames, MCAST_GROUP_NONE, 1);
	return XDP_PASS;
}

SEC("xdp/devmap")
int xdp_egress_mac(struct xdp_md *ctx)
{
	void *data_end = (void *)(long)ctx->data_end;
	void *data = (void *)(long)ctx->data;
	__u32 port = ctx->egress_ifindex;
	struct ethhdr *eth = data;
	struct mcast_mac *mac;

	if ((void *)(eth + 1) > data_end)
		return XDP_PASS;
	mac = bpf_map_lookup_elem(&mcast_port_mac, &port);
	/* A port the manager gave no address leaves the frame as it is. */
	if (mac)
		__builtin_memcpy(eth->h_source, mac->addr, ETH_ALEN);
	return XDP_PASS;
}

char _license[] SEC("license") = "GPL";
