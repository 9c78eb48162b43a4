/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Bounds-checked header parsing for XDP and tc programs.
 *
 * Every helper takes a cursor, checks that the header fits before data_end,
 * advances the cursor past it and returns the next protocol (or -1 when the
 * packet is too short).  The verifier accepts these because each access is
 * preceded by an explicit comparison against data_end.
 */
#ifndef EBPF_XDP_PARSING_HELPERS_H
#define EBPF_XDP_PARSING_HELPERS_H

#include <linux/types.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

/* Two tags cover 802.1Q and QinQ (802.1ad outer + 802.1Q inner). */
#define VLAN_MAX_DEPTH 2

struct hdr_cursor {
	void *pos;
};

struct vlan_hdr {
	__be16 h_vlan_TCI;
	__be16 h_vlan_encapsulated_proto;
};

static __always_inline int proto_is_vlan(__u16 h_proto)
{
	return h_proto == bpf_htons(ETH_P_8021Q) ||
	       h_proto == bpf_htons(ETH_P_8021AD);
}

/* Returns the EtherType in network byte order, after any VLAN tags. */
static __always_inline int parse_ethhdr(struct hdr_cursor *nh, void *data_end,
					struct ethhdr **ethhdr)
{
	struct ethhdr *eth = nh->pos;
	struct vlan_hdr *vlh;
	__u16 h_proto;
	int i;

	if ((void *)(eth + 1) > data_end)
		return -1;

	nh->pos = eth + 1;
	*ethhdr = eth;
	vlh = nh->pos;
	h_proto = eth->h_proto;

#pragma unroll
	for (i = 0; i < VLAN_MAX_DEPTH; i++) {
		if (!proto_is_vlan(h_proto))
			break;
		if ((void *)(vlh + 1) > data_end)
			return -1;
		h_proto = vlh->h_vlan_encapsulated_proto;
		vlh++;
	}

	nh->pos = vlh;
	return h_proto;
}

/* Returns the IP protocol number of the IPv4 payload. */
static __always_inline int parse_iphdr(struct hdr_cursor *nh, void *data_end,
				       struct iphdr **iphdr)
{
	struct iphdr *iph = nh->pos;
	int hdrsize;

	if ((void *)(iph + 1) > data_end)
		return -1;

	hdrsize = iph->ihl * 4;
	/* A header shorter than its fixed part is malformed. */
	if (hdrsize < (int)sizeof(*iph))
		return -1;
	if (nh->pos + hdrsize > data_end)
		return -1;

	nh->pos += hdrsize;
	*iphdr = iph;
	return iph->protocol;
}

/* Returns the next-header value of the IPv6 fixed header. */
static __always_inline int parse_ip6hdr(struct hdr_cursor *nh, void *data_end,
					struct ipv6hdr **ip6hdr)
{
	struct ipv6hdr *ip6h = nh->pos;

	if ((void *)(ip6h + 1) > data_end)
		return -1;

	nh->pos = ip6h + 1;
	*ip6hdr = ip6h;
	return ip6h->nexthdr;
}

/*
 * Returns the IP protocol number (IPv4 protocol, IPv6 next header) of an
 * Ethernet frame after up to VLAN_MAX_DEPTH tags, or -1 when the frame is
 * not IP or too short to tell: the classification xdp_drop_count counts by.
 */
static __always_inline int parse_ip_proto(struct hdr_cursor *nh, void *data_end)
{
	struct ethhdr *eth;
	struct iphdr *iph;
	struct ipv6hdr *ip6h;
	int eth_type;

	eth_type = parse_ethhdr(nh, data_end, &eth);
	if (eth_type == bpf_htons(ETH_P_IP))
		return parse_iphdr(nh, data_end, &iph);
	if (eth_type == bpf_htons(ETH_P_IPV6))
		return parse_ip6hdr(nh, data_end, &ip6h);
	return -1;
}

#endif /* EBPF_XDP_PARSING_HELPERS_H */
