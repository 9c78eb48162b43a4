/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * mcast_groups: the maps through which a manager (ebpf.xdp.devmap_group)
 * runs multicast groups, and the classification of a frame to its group.
 *
 * Everything a manager changes lives in these maps, so groups, members and
 * addresses change by map writes only, while the program keeps running:
 *
 *   mcast_groups    HASH_OF_MAPS  group id (u32) -> a DEVMAP_HASH of members
 *                   (key: ifindex (u32), value: struct bpf_devmap_val, that
 *                   is the egress ifindex and an optional egress program)
 *   mcast_addrs     HASH  struct mcast_key -> group id (u32): a multicast IPv4
 *                   or IPv6 destination, or a destination MAC
 *   mcast_config    ARRAY group id -> struct mcast_group: flags and the
 *                   number of members (the manager writes both)
 *   mcast_frames    PERCPU_ARRAY group id -> frames classified to the group
 *                   (group 0: frames passed to the stack)
 *   mcast_copies    PERCPU_ARRAY group id -> copies the program asked for
 *   mcast_port_mac  HASH ifindex -> struct mcast_mac, for the egress program
 *
 * Group ids run from 1 to MCAST_MAX_GROUPS - 1; 0 is "no group" (the frame
 * goes to the stack). A new group is a new DEVMAP_HASH with the inner map's
 * layout below (same type, key, value and flags; its size may differ),
 * inserted into mcast_groups by its fd; lookups from user space answer its
 * map id. One group's devmap may sit in several outer maps. Add a group in
 * this order: members, mcast_config, mcast_groups, then its addresses; take
 * it away in the reverse order. Key a member by its own ifindex (the
 * program looks the ingress up by key) and write it from inside the
 * member's network namespace: the kernel resolves the value's ifindex in
 * the writer's namespace.
 */
#ifndef EBPF_XDP_MCAST_GROUPS_H
#define EBPF_XDP_MCAST_GROUPS_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>
#include "parsing_helpers.h"

#define MCAST_MAX_GROUPS 256
#define MCAST_MAX_MEMBERS 64
#define MCAST_MAX_ADDRS 1024
#define MCAST_MAX_PORTS 256

#define MCAST_GROUP_NONE 0

/* struct mcast_key.kind */
#define MCAST_KEY_IPV4 4
#define MCAST_KEY_IPV6 6
#define MCAST_KEY_MAC 1

/* struct mcast_group.flags */
#define MCAST_GROUP_EXCLUDE_INGRESS (1U << 0)

struct mcast_key {
	__u32 kind; /* MCAST_KEY_* */
	__u8 addr[16]; /* network order from the first byte, the rest zero */
};

/* 4 bytes: xdp_facts takes 8-byte array values for counters. */
struct mcast_group {
	__u16 flags; /* MCAST_GROUP_* */
	__u16 members; /* entries in the group's devmap */
};

struct mcast_mac {
	__u8 addr[ETH_ALEN];
};

/*
 * The inner map: one per group, created by the manager. Sizes, not types:
 * clang 14 leaves struct bpf_devmap_val a forward declaration in BTF when
 * nothing dereferences it, and libbpf keeps BTF off devmaps anyway.
 */
struct mcast_members {
	__uint(type, BPF_MAP_TYPE_DEVMAP_HASH);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(struct bpf_devmap_val));
	__uint(max_entries, MCAST_MAX_MEMBERS);
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH_OF_MAPS);
	__type(key, __u32);
	__uint(max_entries, MCAST_MAX_GROUPS);
	__array(values, struct mcast_members);
} mcast_groups SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct mcast_key);
	__type(value, __u32);
	__uint(max_entries, MCAST_MAX_ADDRS);
} mcast_addrs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct mcast_group);
	__uint(max_entries, MCAST_MAX_GROUPS);
} mcast_config SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, MCAST_MAX_GROUPS);
} mcast_frames SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, MCAST_MAX_GROUPS);
} mcast_copies SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u32);
	__type(value, struct mcast_mac);
	__uint(max_entries, MCAST_MAX_PORTS);
} mcast_port_mac SEC(".maps");

static __always_inline int mcast_lookup(struct mcast_key *key, __u32 *group)
{
	__u32 *found = bpf_map_lookup_elem(&mcast_addrs, key);

	if (!found)
		return 0;
	*group = *found;
	return 1;
}

/*
 * The group of the frame in [data, data_end): its multicast IPv4 or IPv6
 * destination, else its destination MAC when that is a group address
 * (multicast or broadcast), else `fallback`. VLAN tags are skipped: the
 * group does not depend on them.
 */
static __always_inline __u32 mcast_classify(void *data, void *data_end,
					    __u32 fallback)
{
	struct hdr_cursor nh = { .pos = data };
	struct mcast_key key;
	struct ipv6hdr *ip6h;
	struct ethhdr *eth;
	struct iphdr *iph;
	__u32 group;
	int eth_type;

	__builtin_memset(&key, 0, sizeof(key));
	eth_type = parse_ethhdr(&nh, data_end, &eth);
	if (eth_type < 0)
		return fallback;

	if (eth_type == bpf_htons(ETH_P_IP)) {
		if (parse_iphdr(&nh, data_end, &iph) >= 0 &&
		    (iph->daddr & bpf_htonl(0xf0000000)) ==
			    bpf_htonl(0xe0000000)) {
			key.kind = MCAST_KEY_IPV4;
			__builtin_memcpy(key.addr, &iph->daddr, 4);
			if (mcast_lookup(&key, &group))
				return group;
		}
	} else if (eth_type == bpf_htons(ETH_P_IPV6)) {
		if (parse_ip6hdr(&nh, data_end, &ip6h) >= 0 &&
		    ip6h->daddr.in6_u.u6_addr8[0] == 0xff) {
			key.kind = MCAST_KEY_IPV6;
			__builtin_memcpy(key.addr, &ip6h->daddr, 16);
			if (mcast_lookup(&key, &group))
				return group;
		}
	}

	if (eth->h_dest[0] & 1) {
		__builtin_memset(&key, 0, sizeof(key));
		key.kind = MCAST_KEY_MAC;
		__builtin_memcpy(key.addr, eth->h_dest, ETH_ALEN);
		if (mcast_lookup(&key, &group))
			return group;
	}
	return fallback;
}

static __always_inline void mcast_count(void *counters, __u32 group, __u64 n)
{
	__u64 *count = bpf_map_lookup_elem(counters, &group);

	if (count)
		*count += n;
}

#endif /* EBPF_XDP_MCAST_GROUPS_H */
