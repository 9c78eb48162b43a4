// SPDX-License-Identifier: GPL-2.0-only
/*
 * tc_redirect: the tc programs of the kernel's tcbpf1 sample (the commit that
 * introduced bpf_redirect()), with the target set at load time, plus the tc
 * twin of xdp_drop_count.
 *
 * Every program is in SEC("tc"): it runs as a cls_bpf classifier in
 * direct-action mode, on a tcx hook, or (loaded as a tc action) in act_bpf.
 *
 *   redirect_xmit        bpf_redirect() to the egress of redirect_ifindex
 *   redirect_ingress     bpf_redirect() to the ingress of redirect_ifindex
 *   clone_redirect_xmit  a clone to the egress of redirect_ifindex, then the
 *                        verdict in after_clone for the original
 *   tc_drop_count        counts per IP protocol, like xdp_drop_count, then
 *                        the verdict in tc_action
 *
 * redirect_ifindex is an index in the namespace the program runs in; left at
 * 0, bpf_redirect() still answers TC_ACT_REDIRECT and the kernel drops the
 * packet when it finds no such device, while bpf_clone_redirect() refuses.
 *
 * VLAN tags: in tc, skb->data starts at the Ethernet header on ingress and
 * egress alike. A tag the kernel keeps in skb metadata (skb->vlan_tci) is
 * not in the packet bytes, and the Ethernet header then carries the
 * encapsulated type: on ingress the stack moves the outer tag there before
 * tc runs (a QinQ frame keeps its inner tag in the packet); on egress a VLAN
 * device hands its tag down there, and it reaches the packet only after tc.
 * Parsing the packet therefore counts by the inner protocol wherever the
 * tag is; the tags still in the packet are the ones the parser skips.
 */
#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include "proto_count.h"
#include "redirect_count.h"

/* Load-time settings: the loader writes them into .rodata before loading. */
const volatile __u32 redirect_ifindex = 0;
const volatile int after_clone = TC_ACT_SHOT;
const volatile int tc_action = TC_ACT_SHOT;

/* bpf_redirect() answers TC_ACT_REDIRECT, or TC_ACT_SHOT for flags it does
 * not know; the redirect itself happens after the program returns. */
static __always_inline int redirect(__u64 flags)
{
	long verdict;

	verdict = bpf_redirect(redirect_ifindex, flags);
	count_redirect(verdict == TC_ACT_REDIRECT ? REDIRECT_DONE :
						    REDIRECT_REFUSED);
	return verdict;
}

SEC("tc")
int redirect_xmit(struct __sk_buff *skb)
{
	return redirect(0);
}

SEC("tc")
int redirect_ingress(struct __sk_buff *skb)
{
	return redirect(BPF_F_INGRESS);
}

SEC("tc")
int clone_redirect_xmit(struct __sk_buff *skb)
{
	long ret;

	/* The clone leaves before the helper returns, which answers 0 when
	 * the target took it, a negative errno when there is no such device
	 * or no clone could be made, NET_XMIT_DROP or NET_XMIT_CN (positive)
	 * when the target's queue dropped it (a device that is down or has
	 * no carrier answers NET_XMIT_CN). */
	ret = bpf_clone_redirect(skb, redirect_ifindex, 0);
	count_redirect(ret == 0 ? REDIRECT_DONE : REDIRECT_REFUSED);
	return after_clone;
}

SEC("tc")
int tc_drop_count(struct __sk_buff *skb)
{
	count_ip_proto((void *)(long)skb->data, (void *)(long)skb->data_end);
	return tc_action;
}

char _license[] SEC("license") = "GPL";
