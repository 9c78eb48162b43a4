"""_tc_netlink against the real kernel, under both pyroute2 versions.

Each scenario (tc_netlink_driver.py) runs twice: in this process with the
venv's pyroute2 0.9, and under Debian's /usr/bin/python3 with its pyroute2
0.7.2, printing JSON. The assertions below hold both to the same answers;
`tc` output is only the witness.
"""

import json
import os
import re
import subprocess

import pytest

import kernel_features
import tc_netlink_driver as driver
from conftest import IN_VENV, SYSTEM_PYTHON, compile_bpf

DRIVER = os.path.abspath(driver.__file__)

PROGRAMS = r"""
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
SEC("tc")
int tc_ok(struct __sk_buff *skb) { return 0; /* TC_ACT_OK */ }
SEC("tc")
int tc_unspec(struct __sk_buff *skb) { return -1; /* TC_ACT_UNSPEC */ }
SEC("action")
int act_unspec(struct __sk_buff *skb) { return -1; /* the action's own verdict applies */ }
SEC("action")
int act_ok(struct __sk_buff *skb) { return 0; }
char _license[] SEC("license") = "GPL";
"""


@pytest.fixture(scope="module")
def tc_obj(tmp_path_factory):
    src = tmp_path_factory.mktemp("tc_netlink") / "tc_netlink.bpf.c"
    src.write_text(PROGRAMS)
    return compile_bpf(src, src.with_suffix(".o"))


@pytest.fixture(params=[pytest.param("0.9", id="pyroute2-pypi")] * IN_VENV + [pytest.param("0.7", id="pyroute2-distro")])
def scenario(request):
    """Run a driver scenario with one pyroute2 version; the result says which version ran it."""
    def run(name, *args):
        if request.param == "0.9":
            result = json.loads(json.dumps(driver.SCENARIOS[name](*args)))
        else:
            proc = subprocess.run([SYSTEM_PYTHON, DRIVER, name] + [str(a) for a in args],
                                  capture_output=True, text=True, check=False)
            assert proc.returncode == 0, proc.stderr
            result = json.loads(proc.stdout)
        assert result["pyroute2"].startswith(request.param + "."), result["pyroute2"]
        return result
    return run


def has_id(witness, prog_id):
    """`tc filter show` text names program prog_id: the number whole (id 12 is a substring of "id 123")."""
    return prog_id in [int(m) for m in re.findall(r"\bid (\d+)\b", witness)]


def assert_error(found, kind, *parts, err=None):
    assert found is not None, "expected a %s" % kind
    assert found["type"] == kind, found
    assert err is None or found["errno"] == err, found
    for part in parts:
        assert part in found["message"], (part, found["message"])


def test_clsact_created_once_and_plain_ingress_refused(scenario, pair, tc_obj):
    out = scenario("clsact", pair.rx, tc_obj)
    assert out["kind_before"] is None
    assert (out["created"], out["created_again"], out["kind_after"]) == (True, False, "clsact")
    assert "qdisc clsact ffff: parent ffff:fff1" in out["qdisc_witness"]
    assert (out["deleted"], out["deleted_again"], out["kind_deleted"]) == (True, False, None)
    assert_error(out["attach_without_clsact"], "TcError", "add cls_bpf filter prio 1 handle 0x1 to ingress",
                 "has no clsact qdisc")

    # The plain ingress qdisc: seen, refused, left alone, and no "egress" filter lands on its ingress.
    assert out["kind_plain"] == "ingress"
    assert "qdisc ingress ffff:" in out["plain_witness"]
    assert_error(out["ensure_on_plain"], "TcError", "add clsact qdisc to ifindex", "the ingress qdisc is there")
    assert_error(out["delete_on_plain"], "TcError", "delete clsact qdisc", "plain ingress qdisc, not clsact")
    assert out["egress_on_plain"] == []
    assert_error(out["attach_on_plain"], "TcError", "to egress of ifindex", "plain ingress qdisc, not clsact")
    assert out["filters_on_plain"] == ""
    assert out["kind_end"] is None


@pytest.mark.parametrize("direction", ["ingress", "egress"])
def test_cls_bpf_attach_list_replace_delete(scenario, pair, tc_obj, direction):
    out = scenario("cls_bpf", pair.rx, tc_obj, direction)
    first, second, index = out["first_id"], out["second_id"], out["ifindex"]

    [attached] = out["attached"]
    assert attached["kind"] == "bpf" and attached["prog_id"] == first and attached["name"] == "first"
    assert attached["direct_action"] is True
    assert (attached["prio"], attached["handle"], attached["protocol"]) == (1, 1, "all")
    assert out["other_direction"] == []
    assert "handle 0x1 first direct-action" in out["witness_attached"]
    assert has_id(out["witness_attached"], first)

    assert_error(out["duplicate"], "TcError", "add cls_bpf filter prio 1 handle 0x1 to %s of ifindex %d: "
                 "File exists (errno 17)" % (direction, index), err=17)

    # Replaced in place: one filter, the new program, and the kernel announced
    # only a new filter (no RTM_DELTFILTER: never a moment without one).
    [replaced] = out["replaced"]
    assert replaced["prog_id"] == second and replaced["prog_id"] != first
    assert (replaced["prio"], replaced["handle"], replaced["name"]) == (1, 1, "second")
    assert out["replace_events"] == ["RTM_NEWTFILTER"]
    assert has_id(out["witness_replaced"], second) and not has_id(out["witness_replaced"], first)

    assert_error(out["wrong_kind"], "TcError", "delete u32 filter prio 1 handle 0x1",
                 "Invalid argument (errno 22)", "not a u32 filter", err=22)
    assert_error(out["wrong_type"], "TcError", "Invalid argument (errno 22)", "sched_cls", err=22)
    assert_error(out["bad_fd"], "TcError", "Bad file descriptor (errno 9)", err=9)
    assert_error(out["prio_zero"], "TcError", "prio must be 1..65535")

    assert out["deleted"] == [] and out["witness_deleted"] == ""
    assert_error(out["missing"], "TcError", "delete bpf filter prio 1 handle 0x1 on %s of ifindex %d: "
                 "No such file or directory (errno 2)" % (direction, index), "no such filter", err=2)


def _act_bpf(scenario, pair, tc_obj, direction):
    out = scenario("act_bpf", pair.rx, tc_obj, direction)
    if not out["supported"]:
        assert_error(out["first_attach"], "TcError", "add act_bpf u32 filter prio 2 handle 0x1 to %s" % direction,
                     "No such file or directory (errno 2)", "CONFIG_NET_ACT_BPF", err=2)
        kernel_features.asserted("act_bpf", "the driver's first act_bpf attach refused: %r" % "CONFIG_NET_ACT_BPF")
    return out


@pytest.mark.kernel("act_bpf")
@pytest.mark.parametrize("direction", ["ingress", "egress"])
def test_act_bpf_u32_attach_list_replace_delete(scenario, pair, tc_obj, direction):
    out = _act_bpf(scenario, pair, tc_obj, direction)
    assert out["supported"], out
    first, second, index = out["first_id"], out["second_id"], out["ifindex"]

    [attached] = out["attached"]
    assert attached["kind"] == "u32" and attached["prio"] == 2 and attached["protocol"] == "all"
    assert attached["handle"] & 0xFFF == 1 and attached["handle"] >> 20 >= 0x800, hex(attached["handle"])
    assert (attached["prog_id"], attached["name"], attached["verdict"]) == (first, "first", "drop")
    assert [a["kind"] for a in attached["actions"]] == ["bpf"] and attached["actions"][0]["index"] >= 1
    assert out["other_direction"] == []
    assert has_id(out["witness_attached"], first) and "default-action drop" in out["witness_attached"]

    assert_error(out["duplicate"], "TcError", "add act_bpf u32 filter prio 2 handle 0x1 to %s of ifindex %d"
                 % (direction, index), "File exists (errno 17)", err=17)

    [replaced] = out["replaced"]
    assert (replaced["prog_id"], replaced["name"], replaced["verdict"]) == (second, "second", "pass")
    assert replaced["handle"] == attached["handle"]
    assert "RTM_DELTFILTER" not in out["replace_events"] and "RTM_NEWTFILTER" in out["replace_events"]
    assert has_id(out["witness_replaced"], second) and not has_id(out["witness_replaced"], first)
    [again] = out["replaced_by_full_handle"]
    assert (again["prog_id"], again["verdict"], again["handle"]) == (first, "pipe", attached["handle"])

    assert_error(out["wrong_kind"], "TcError", "not a bpf filter", err=22)
    assert_error(out["bad_verdict"], "TcError", "unknown act_bpf verdict 'maybe'")
    assert out["deleted"] == []
    assert out["witness_deleted"] == "", "the prio's empty u32 hash table is removed too"
    assert_error(out["missing"], "TcError", "delete u32 filter prio 2 handle 0x1", "errno 2", err=2)


@pytest.mark.kernel_either("act_bpf")
def test_act_bpf_support_as_the_kernel_feature_table_says(scenario, pair, tc_obj, features):
    """The driver's first attach succeeds exactly where tc itself could add an act_bpf action, and fails
    with the named missing config option elsewhere (asserted in _act_bpf)."""
    out = _act_bpf(scenario, pair, tc_obj, "ingress")
    assert out["supported"] == features["act_bpf"], out


def test_errors_name_the_operation_and_target(scenario, pair, tc_obj):
    out = scenario("errors", pair.rx, tc_obj)
    assert_error(out["filters_missing_if"], "NotFoundError", "read the ingress filters of ifindex 99999",
                 "does not exist in this network namespace")
    assert_error(out["ensure_missing_if"], "NotFoundError", "add clsact qdisc to ifindex 99999")
    assert_error(out["attach_missing_if"], "NotFoundError", "add cls_bpf filter prio 1 handle 0x1 to ingress "
                 "of ifindex 99999")
    assert_error(out["bad_direction"], "TcError", "unknown tc direction 'sideways'")
