// SPDX-License-Identifier: GPL-2.0-only
/*
 * xdp_trafficgen: the in-kernel side of the ebpf.xdp.xdp_trafficgen module.
 *
 * Never attached: the module runs it with BPF_PROG_TEST_RUN and
 * BPF_F_TEST_XDP_LIVE_FRAMES, which hands it a page-pool copy of a
 * template frame again and again; every XDP_TX it returns is turned by the
 * kernel into a redirect out of the interface named by the test run's
 * ingress_ifindex, so frames leave at the rate the kernel can build them.
 *
 * The sender puts a struct tg_meta in the metadata area in front of each
 * template: which counter the frame counts under and where its UDP/TCP
 * header is. The program never parses the frame itself, so one program
 * serves IPv4 and IPv6, VLAN-tagged or not.
 *
 * Per frame it picks the source and destination ports from the ranges set
 * at load time, using its per-CPU count of frames of that kind (so every
 * CPU walks the ranges in order, without atomics), writes them into the
 * frame and fixes the L4 checksum incrementally from the values the frame
 * holds now: the kernel does not re-initialise recycled pages, so a frame
 * may carry the ports of an earlier round, and the update is right either
 * way.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define MAX_KINDS 8
/* Template frames are small: a UDP/TCP header starts in the first bytes. */
#define MAX_L4_OFFSET 128

#define TG_L4_UDP 1
#define TG_L4_TCP 2

/* Written by the module in front of every template frame (4 bytes: the
 * kernel wants metadata in multiples of 4). */
struct tg_meta {
	__u8 kind; /* index into tx_count */
	__u8 l4; /* TG_L4_UDP, TG_L4_TCP or 0 (no ports: ICMP) */
	__u16 l4_offset; /* from the start of the frame, host order */
};

/* Load-time settings: ranges of ports, the first and how many. A span of
 * 0 or 1 leaves the template's port as it is. */
const volatile __u16 src_port_min = 9;
const volatile __u32 src_port_span = 1;
const volatile __u16 dst_port_min = 9;
const volatile __u32 dst_port_span = 1;

/* Frames handed back for transmission, per kind and per CPU: what `sent`
 * reports, measured rather than assumed from the repeat count. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, MAX_KINDS);
} tx_count SEC(".maps");

/* RFC 1624: HC' = ~(~HC + ~m + m'), for one 16-bit word. */
static __always_inline __u32 csum_add_replace(__u32 sum, __u16 old, __u16 new)
{
	return sum + (__u16)~old + new;
}

static __always_inline __u16 csum_fold(__u32 sum)
{
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return (__u16)~sum;
}

static __always_inline int set_ports(void *data, void *data_end,
				     struct tg_meta *meta, __u64 n)
{
	__u32 offset = meta->l4_offset;
	__u16 *ports, *check, src, dst;
	__u32 sum;

	if (offset > MAX_L4_OFFSET)
		return -1;
	ports = data + offset;
	/* UDP's checksum is at byte 6 of its header, TCP's at byte 16. */
	check = data + offset + (meta->l4 == TG_L4_UDP ? 6 : 16);
	if ((void *)(ports + 2) > data_end || (void *)(check + 1) > data_end)
		return -1;

	src = ports[0];
	dst = ports[1];
	if (src_port_span > 1)
		src = bpf_htons(src_port_min + (__u16)(n % src_port_span));
	if (dst_port_span > 1)
		dst = bpf_htons(dst_port_min + (__u16)(n % dst_port_span));

	/* A UDP checksum of 0 means "none" (IPv4): leave such frames so. */
	if (meta->l4 == TG_L4_UDP && *check == 0) {
		ports[0] = src;
		ports[1] = dst;
		return 0;
	}
	sum = (__u16)~*check;
	sum = csum_add_replace(sum, ports[0], src);
	sum = csum_add_replace(sum, ports[1], dst);
	ports[0] = src;
	ports[1] = dst;
	*check = csum_fold(sum);
	/* UDP sends a computed 0 as 0xffff: 0 would mean "no checksum". */
	if (meta->l4 == TG_L4_UDP && *check == 0)
		*check = 0xffff;
	return 0;
}

SEC("xdp")
int xdp_trafficgen(struct xdp_md *ctx)
{
	void *data_end = (void *)(long)ctx->data_end;
	void *data = (void *)(long)ctx->data;
	struct tg_meta *meta = (void *)(long)ctx->data_meta;
	__u32 kind;
	__u64 *count;

	if ((void *)(meta + 1) > data)
		return XDP_ABORTED;
	kind = meta->kind;
	count = bpf_map_lookup_elem(&tx_count, &kind);
	if (!count)
		return XDP_ABORTED;

	if ((meta->l4 == TG_L4_UDP || meta->l4 == TG_L4_TCP) &&
	    (src_port_span > 1 || dst_port_span > 1) &&
	    set_ports(data, data_end, meta, *count) < 0)
		return XDP_ABORTED;

	*count += 1;
	/* In a live-frames test run XDP_TX means "out of the ingress
	 * interface" (the kernel redirects it there). */
	return XDP_TX;
}

char _license[] SEC("license") = "GPL";
