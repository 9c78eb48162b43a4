"""Programs written the way the kernel's samples and older tc programs are: in sections that name no program type
libbpf knows (the bpf_redirect() commit's tcbpf1_kern.c, samples/bpf/xdp1_kern.c), two programs in one section,
and programs of other types beside them. Their hook gives them their type, as iproute2 and xdp-loader do.
"""

import os
import pathlib

from conftest import BPF_DIR, compile_bpf

INCLUDE = os.path.join(BPF_DIR, "include")

# tcbpf1_kern.c's redirect_xmit with its target set at load time (redirect_count says what the helper answered),
# and a classifier in the section name iproute2 takes by default (libbpf knows it as sched_cls).
LEGACY_TC = r"""
// SPDX-License-Identifier: GPL-2.0-only
#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include "proto_count.h"
#include "redirect_count.h"

const volatile __u32 redirect_ifindex = 0;

SEC("redirect_xmit")
int _redirect_xmit(struct __sk_buff *skb)
{
    long verdict = bpf_redirect(redirect_ifindex, 0);

    count_redirect(verdict == TC_ACT_REDIRECT ? REDIRECT_DONE : REDIRECT_REFUSED);
    return verdict;
}

SEC("classifier")
int cls_count(struct __sk_buff *skb)
{
    count_ip_proto((void *)(long)skb->data, (void *)(long)skb->data_end);
    return TC_ACT_OK;
}

char _license[] SEC("license") = "GPL";
"""

# samples/bpf/xdp1_kern.c's shape (count per IP protocol, drop), and the same counter passing in SEC("prog"),
# iproute2's default XDP section.
LEGACY_XDP = r"""
// SPDX-License-Identifier: GPL-2.0-only
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "proto_count.h"

SEC("xdp1")
int xdp_prog1(struct xdp_md *ctx)
{
    count_ip_proto((void *)(long)ctx->data, (void *)(long)ctx->data_end);
    return XDP_DROP;
}

SEC("prog")
int xdp_pass_count(struct xdp_md *ctx)
{
    count_ip_proto((void *)(long)ctx->data, (void *)(long)ctx->data_end);
    return XDP_PASS;
}

char _license[] SEC("license") = "GPL";
"""

# Two programs in one section, and programs of other types: what a section alone cannot choose, and what no
# hook of the collection runs.
MIXED = r"""
// SPDX-License-Identifier: GPL-2.0-only
#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include "proto_count.h"

SEC("classifier")
int first_count(struct __sk_buff *skb)
{
    count_ip_proto((void *)(long)skb->data, (void *)(long)skb->data_end);
    return TC_ACT_OK;
}

SEC("classifier")
int second_drop(struct __sk_buff *skb)
{
    return TC_ACT_SHOT;
}

SEC("kprobe/do_sys_openat2")
int open_probe(void *ctx)
{
    return 0;
}

SEC("socket")
int socket_all(struct __sk_buff *skb)
{
    return skb->len;
}

char _license[] SEC("license") = "GPL";
"""

# Untyped XDP programs, one whose section says it takes multi-buffer frames (as SEC("xdp.frags") does).
FRAGS = r"""
// SPDX-License-Identifier: GPL-2.0-only
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

SEC("xdp_frags")
int pass_frags(struct xdp_md *ctx)
{
    return XDP_PASS;
}

SEC("xdp_pass")
int pass_linear(struct xdp_md *ctx)
{
    return XDP_PASS;
}

char _license[] SEC("license") = "GPL";
"""

SOURCES = {"legacy_tc": LEGACY_TC, "legacy_xdp": LEGACY_XDP, "mixed": MIXED, "frags": FRAGS}


def compile_legacy(directory, name):
    """SOURCES[name] compiled in directory, as NAME.o."""
    directory = pathlib.Path(directory)
    src = directory / (name + ".bpf.c")
    src.write_text(SOURCES[name])
    return compile_bpf(src, directory / (name + ".o"), [INCLUDE])
