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
 * The kernel copies the template into a page once, when the page pool
 * first hands the page out, and recycles the page without copying again.
 * Whoever takes the frame may have changed it in that page meanwhile: a
 * router's stack forwarding it decrements the TTL and rewrites the MAC
 * addresses in place; its neighbour output writes 16 bytes ending at the
 * IP header, the first 2 of them in front of the frame, where metadata
 * would be. So the program trusts nothing in the page, not even metadata:
 * before every frame it writes the template's headers back from the
 * tg_template map, which the module fills before each kind's test runs
 * (the kinds go one after another), and takes the frame's kind and the
 * place of its UDP/TCP header from there too. It never parses the frame,
 * so one program serves IPv4 and IPv6, VLAN-tagged or not. Only the
 * headers are restored: a forwarding path leaves the payload alone.
 *
 * Per frame it then picks the source and destination ports from the ranges
 * set at load time, using its per-CPU count of frames of that kind (so
 * every CPU walks the ranges in order, without atomics), writes them into
 * the frame and fixes the L4 checksum incrementally from the template's.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define MAX_KINDS 8
/* Template frames are small: a UDP/TCP header starts in the first bytes. */
#define MAX_L4_OFFSET 128
/* Header bytes restored at most: up to the end of a TCP header there. */
#define TG_HEADER_WORDS ((MAX_L4_OFFSET + 20 + 7) / 8)
#define TG_HEADER_MAX (TG_HEADER_WORDS * 8)

#define TG_L4_UDP 1
#define TG_L4_TCP 2

/* The frames of the kind being sent, written by the module (key 0). */
struct tg_template {
	__u32 kind; /* index into tx_count */
	__u8 l4; /* TG_L4_UDP, TG_L4_TCP or 0 (no ports: ICMP) */
	__u8 len; /* header bytes to restore: 8 to TG_HEADER_MAX */
	__u16 l4_offset; /* where the UDP/TCP header starts in the frame */
	__u64 header[TG_HEADER_WORDS]; /* the template's first len bytes */
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct tg_template);
	__uint(max_entries, 1);
} tg_template SEC(".maps");

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

/* Write the template's first t->len bytes over the frame: whole words, then
 * the last word again ending at t->len when len is not a multiple of 8
 * (len is at least 8, and the frame at least len long). */
static __always_inline int restore_header(void *data, void *data_end,
					  const struct tg_template *t)
{
	__u32 len = t->len, off;
	__u64 *word = data;
	void *tail;
	int i;

	if (len < 8 || len > TG_HEADER_MAX)
		return -1;
#pragma unroll
	for (i = 0; i < TG_HEADER_WORDS; i++) {
		if ((i + 1) * 8 > len)
			break;
		if ((void *)(word + i + 1) > data_end)
			return -1;
		word[i] = t->header[i];
	}
	if (len % 8) {
		off = len - 8;
		/* Keeps clang from checking data + len and writing 8 bytes
		 * before it, which the verifier cannot follow. */
		barrier_var(off);
		/* Bounds it again where the verifier sees them: older ones
		 * (6.1) lose len's across the barrier. */
		if (off > TG_HEADER_MAX - 8)
			return -1;
		tail = data + off;
		if (tail + 8 > data_end)
			return -1;
		*(__u64 *)tail = *(__u64 *)((void *)t->header + off);
	}
	return 0;
}

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
				     const struct tg_template *t, __u64 n)
{
	__u32 offset = t->l4_offset;
	__u16 *ports, *check, src, dst;
	__u32 sum;

	if (offset > MAX_L4_OFFSET)
		return -1;
	ports = data + offset;
	/* UDP's checksum is at byte 6 of its header, TCP's at byte 16. */
	check = data + offset + (t->l4 == TG_L4_UDP ? 6 : 16);
	if ((void *)(ports + 2) > data_end || (void *)(check + 1) > data_end)
		return -1;

	src = ports[0];
	dst = ports[1];
	if (src_port_span > 1)
		src = bpf_htons(src_port_min + (__u16)(n % src_port_span));
	if (dst_port_span > 1)
		dst = bpf_htons(dst_port_min + (__u16)(n % dst_port_span));

	/* A UDP checksum of 0 means "none" (IPv4): leave such frames so. */
	if (t->l4 == TG_L4_UDP && *check == 0) {
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
	if (t->l4 == TG_L4_UDP && *check == 0)
		*check = 0xffff;
	return 0;
}

SEC("xdp")
int xdp_trafficgen(struct xdp_md *ctx)
{
	void *data_end = (void *)(long)ctx->data_end;
	void *data = (void *)(long)ctx->data;
	const struct tg_template *t;
	__u32 key = 0;
	__u64 *count;

	t = bpf_map_lookup_elem(&tg_template, &key);
	if (!t)
		return XDP_ABORTED;
	key = t->kind;
	count = bpf_map_lookup_elem(&tx_count, &key);
	if (!count)
		return XDP_ABORTED;

	if (restore_header(data, data_end, t) < 0)
		return XDP_ABORTED;
	if ((t->l4 == TG_L4_UDP || t->l4 == TG_L4_TCP) &&
	    (src_port_span > 1 || dst_port_span > 1) &&
	    set_ports(data, data_end, t, *count) < 0)
		return XDP_ABORTED;

	*count += 1;
	/* In a live-frames test run XDP_TX means "out of the ingress
	 * interface" (the kernel redirects it there). */
	return XDP_TX;
}

char _license[] SEC("license") = "GPL";
