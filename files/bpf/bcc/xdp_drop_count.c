// SPDX-License-Identifier: GPL-2.0-only
/*
 * xdp_drop_count in bcc's dialect, for backend: bcc (ebpf.xdp.xdp_program).
 *
 * The same job as files/bpf/xdp_drop_count.bpf.c (the kernel's xdp1):
 * count every frame per IP protocol number (Ethernet with up to two VLAN
 * tags, IPv4, IPv6; anything else under 0) and return XDP_ACTION. bcc
 * compiles it on the host at load time, so the setting is a compiler flag
 * (cflags: ['-DXDP_ACTION=2'] only counts) rather than a load-time global.
 * The table has the libbpf program's name, so xdp_facts reports both the
 * same way (protocols by name).
 */
#include <uapi/linux/bpf.h>
#include <uapi/linux/if_ether.h>
#include <uapi/linux/ip.h>
#include <uapi/linux/ipv6.h>

#ifndef XDP_ACTION
#define XDP_ACTION XDP_DROP
#endif

#define VLAN_HLEN 4

BPF_PERCPU_ARRAY(proto_count, u64, 256);

/* The EtherType after up to two 802.1Q/802.1ad tags; *offset moves past them. */
static __always_inline u16 skip_vlans(void *data, void *data_end, u64 *offset, u16 proto)
{
	#pragma unroll
	for (int i = 0; i < 2; i++) {
		if (proto != htons(ETH_P_8021Q) && proto != htons(ETH_P_8021AD))
			break;
		if (data + *offset + VLAN_HLEN > data_end)
			return 0;
		/* The tag's second half is the EtherType of what follows it. */
		proto = *(u16 *)(data + *offset + 2);
		*offset += VLAN_HLEN;
	}
	return proto;
}

int xdp_drop_count(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	u64 offset = sizeof(*eth);
	u32 key = 0;
	u16 proto;

	if (data + offset > data_end)
		goto count;
	proto = skip_vlans(data, data_end, &offset, eth->h_proto);
	if (proto == htons(ETH_P_IP)) {
		struct iphdr *ip = data + offset;

		if ((void *)(ip + 1) <= data_end)
			key = ip->protocol;
	} else if (proto == htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = data + offset;

		if ((void *)(ip6 + 1) <= data_end)
			key = ip6->nexthdr;
	}
count:
	proto_count.increment(key);
	return XDP_ACTION;
}
