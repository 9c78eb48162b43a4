"""Scenarios for _tc_netlink, run in-process (the venv's pyroute2 0.9) or as a script (Debian's 0.7.2).

    /usr/bin/python3 tc_netlink_driver.py SCENARIO NETNS OBJECT [DIRECTION]

prints one JSON object: what the scenario observed through _tc_netlink, the
kernel's tc notifications, and `tc` output as the witness. The assertions
live in test_tc_netlink.py, so both pyroute2 versions are held to the same
ones.
"""

import json
import os
import socket
import struct
import subprocess
import sys

if __name__ == "__main__":
    ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    sys.path.insert(0, os.path.join(ROOT, ".build", "collections"))

from importlib.metadata import version  # noqa: E402

from pyroute2 import IPRoute  # noqa: E402

from ansible_collections.ebpf.xdp.plugins.module_utils.bpf import loader as _loader  # noqa: E402
from ansible_collections.ebpf.xdp.plugins.module_utils.host import netns as _netns  # noqa: E402
from ansible_collections.ebpf.xdp.plugins.module_utils.hooks import tc_netlink as tc  # noqa: E402
from ansible_collections.ebpf.xdp.plugins.module_utils._errors import EbpfXdpError  # noqa: E402

RTNLGRP_TC = 4
EVENT_NAMES = {44: "RTM_NEWTFILTER", 45: "RTM_DELTFILTER", 36: "RTM_NEWQDISC", 37: "RTM_DELQDISC",
               48: "RTM_NEWACTION", 49: "RTM_DELACTION"}
OTHER = {"ingress": "egress", "egress": "ingress"}


def witness(*argv):
    """What `tc` says (run in the current namespace: the child inherits this thread's setns)."""
    return subprocess.run(("tc",) + argv, capture_output=True, text=True, check=False).stdout


def error(call, *args, **kwargs):
    """The error a call raised, as the caller sees it (class, errno, message)."""
    try:
        call(*args, **kwargs)
    except EbpfXdpError as exc:
        return {"type": type(exc).__name__, "errno": getattr(exc, "errno", None), "message": str(exc)}
    return None


class TcEvents:
    """The kernel's tc notifications (RTNLGRP_TC) while the block runs: a replace that
    deleted and re-added would show an RTM_DELTFILTER."""

    def __enter__(self):
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_NONBLOCK, 0)
        self.sock.bind((0, 1 << (RTNLGRP_TC - 1)))
        self.types = []
        return self

    def __exit__(self, *exc):
        try:
            while True:
                data = self.sock.recv(65536)
                offset = 0
                while offset + 16 <= len(data):
                    length, kind = struct.unpack_from("=IH", data, offset)
                    self.types.append(EVENT_NAMES.get(kind, str(kind)))
                    offset += (length + 3) & ~3
        except BlockingIOError:
            pass
        finally:
            self.sock.close()


def _ifindex():
    return _netns.ifindex("eth0")


def scenario_clsact(netns, obj):
    out = {"pyroute2": version("pyroute2")}
    with _netns.netns(netns):
        index = _ifindex()
        out["kind_before"] = tc.qdisc_kind(index)
        out["created"] = tc.ensure_clsact(index)
        out["created_again"] = tc.ensure_clsact(index)
        out["kind_after"] = tc.qdisc_kind(index)
        out["qdisc_witness"] = witness("qdisc", "show", "dev", "eth0")
        out["deleted"] = tc.delete_clsact(index)
        out["deleted_again"] = tc.delete_clsact(index)
        out["kind_deleted"] = tc.qdisc_kind(index)
        out["attach_without_clsact"] = error(tc.attach_cls_bpf, index, "ingress", 0, "x", 1, 1)

        # Someone else's plain ingress qdisc: reported, never taken over.
        with IPRoute() as ipr:
            ipr.tc("add", "ingress", index)
        try:
            out["kind_plain"] = tc.qdisc_kind(index)
            out["plain_witness"] = witness("qdisc", "show", "dev", "eth0")
            out["ensure_on_plain"] = error(tc.ensure_clsact, index)
            out["delete_on_plain"] = error(tc.delete_clsact, index)
            out["egress_on_plain"] = tc.filters(index, "egress")
            with _loader.load(obj, "tc_ok", "sched_cls") as prog:
                out["attach_on_plain"] = error(tc.attach_cls_bpf, index, "egress", prog.program.fd, "x", 1, 1)
            out["filters_on_plain"] = witness("filter", "show", "dev", "eth0", "ingress")
        finally:
            with IPRoute() as ipr:
                ipr.tc("del", "ingress", index)
        out["kind_end"] = tc.qdisc_kind(index)
    return out


def scenario_cls_bpf(netns, obj, direction):
    out = {"pyroute2": version("pyroute2")}
    with _netns.netns(netns), _loader.load(obj, "tc_ok", "sched_cls") as first, \
            _loader.load(obj, "tc_unspec", "sched_cls") as second, \
            _loader.load(obj, "act_unspec", "sched_act") as action:
        index = _ifindex()
        out.update(ifindex=index, first_id=first.info["id"], second_id=second.info["id"])
        tc.ensure_clsact(index)
        tc.attach_cls_bpf(index, direction, first.program.fd, "first", 1, 1)
        out["attached"] = tc.filters(index, direction)
        out["other_direction"] = tc.filters(index, OTHER[direction])
        out["witness_attached"] = witness("-s", "filter", "show", "dev", "eth0", direction)
        out["duplicate"] = error(tc.attach_cls_bpf, index, direction, second.program.fd, "second", 1, 1)

        with TcEvents() as events:
            tc.attach_cls_bpf(index, direction, second.program.fd, "second", 1, 1, replace=True)
        out["replace_events"] = events.types
        out["replaced"] = tc.filters(index, direction)
        out["witness_replaced"] = witness("-s", "filter", "show", "dev", "eth0", direction)

        out["wrong_kind"] = error(tc.delete_filter, index, direction, 1, 1, "u32")
        out["wrong_type"] = error(tc.attach_cls_bpf, index, direction, action.program.fd, "action", 2, 1)
        out["bad_fd"] = error(tc.attach_cls_bpf, index, direction, 2 ** 31 - 1, "bad", 2, 1)
        out["prio_zero"] = error(tc.attach_cls_bpf, index, direction, second.program.fd, "x", 0, 1, replace=True)
        tc.delete_filter(index, direction, 1, 1, "bpf")
        out["deleted"] = tc.filters(index, direction)
        out["witness_deleted"] = witness("filter", "show", "dev", "eth0", direction)
        out["missing"] = error(tc.delete_filter, index, direction, 1, 1, "bpf")
        tc.delete_clsact(index)
    return out


def scenario_act_bpf(netns, obj, direction):
    out = {"pyroute2": version("pyroute2")}
    with _netns.netns(netns), _loader.load(obj, "act_unspec", "sched_act") as first, \
            _loader.load(obj, "act_ok", "sched_act") as second:
        index = _ifindex()
        out.update(ifindex=index, first_id=first.info["id"], second_id=second.info["id"])
        tc.ensure_clsact(index)
        try:
            out["first_attach"] = error(tc.attach_act_bpf, index, direction, first.program.fd, "first", 2, 1,
                                        verdict="drop")
            out["supported"] = out["first_attach"] is None
            if not out["supported"]:
                return out
            out["attached"] = tc.filters(index, direction)
            out["other_direction"] = tc.filters(index, OTHER[direction])
            out["witness_attached"] = witness("-s", "filter", "show", "dev", "eth0", direction)
            out["duplicate"] = error(tc.attach_act_bpf, index, direction, second.program.fd, "second", 2, 1)

            with TcEvents() as events:
                tc.attach_act_bpf(index, direction, second.program.fd, "second", 2, 1, verdict="pass",
                                  replace=True)
            out["replace_events"] = events.types
            out["replaced"] = tc.filters(index, direction)
            out["witness_replaced"] = witness("-s", "filter", "show", "dev", "eth0", direction)

            # Replacing by the full handle filters() reports works as well as by the node.
            full = out["replaced"][0]["handle"]
            tc.attach_act_bpf(index, direction, first.program.fd, "first", 2, full, verdict="pipe", replace=True)
            out["replaced_by_full_handle"] = tc.filters(index, direction)

            out["wrong_kind"] = error(tc.delete_filter, index, direction, 2, 1, "bpf")
            out["bad_verdict"] = error(tc.attach_act_bpf, index, direction, first.program.fd, "x", 3, 1,
                                       verdict="maybe")
            tc.delete_filter(index, direction, 2, 1, "u32")
            out["deleted"] = tc.filters(index, direction)
            out["witness_deleted"] = witness("filter", "show", "dev", "eth0", direction)
            out["missing"] = error(tc.delete_filter, index, direction, 2, 1, "u32")
        finally:
            tc.delete_clsact(index)
    return out


def scenario_errors(netns, obj):
    out = {"pyroute2": version("pyroute2")}
    with _netns.netns(netns):
        index = _ifindex()
        out["filters_missing_if"] = error(tc.filters, 99999, "ingress")
        out["ensure_missing_if"] = error(tc.ensure_clsact, 99999)
        out["attach_missing_if"] = error(tc.attach_cls_bpf, 99999, "ingress", 0, "x", 1, 1)
        out["bad_direction"] = error(tc.filters, index, "sideways")
    return out


SCENARIOS = {"clsact": scenario_clsact, "cls_bpf": scenario_cls_bpf, "act_bpf": scenario_act_bpf,
             "errors": scenario_errors}


if __name__ == "__main__":
    print(json.dumps(SCENARIOS[sys.argv[1]](*sys.argv[2:])))
