"""ebpf.xdp.devmap_group and shared map sets on real veth ports.

A switch namespace holds ports p0..pN-1 whose peers h0..hN-1 (the hosts'
ends) share a second namespace (test_multicast_programs.Ports).
xdp_program attaches xdp_multicast with shared_maps on every switch port,
one module run per port; every host end runs an xdp_drop_count of its own with
XDP_PASS, which counts what arrives there (and lets native redirects into
the veth in). Groups are declared with the module, the way a playbook does.
"""

import collections
import contextlib
import fcntl
import json
import os
import re
import socket
import struct
import subprocess
import tempfile
import threading

import pytest

from conftest import BPF_DIR, ROOT, SYSTEM_PYTHON, ansible_cli, assert_rhythm, compile_bpf
from kernel_features import features, needs
from test_multicast_programs import BROADCAST, Ports, arp_broadcast, counting_hosts, sniffer, sources, udp_to
from test_tc_redirect_programs import eventually

from ansible_collections.ebpf.xdp.plugins.module_utils import _facts
from ansible_collections.ebpf.xdp.plugins.module_utils.host import netns as _netns
from ansible_collections.ebpf.xdp.plugins.module_utils.bpf import libbpf as _bpf, pins as _pins
from ansible_collections.ebpf.xdp.plugins.module_utils.traffic import frames as _frames
from ansible_collections.ebpf.xdp.plugins.module_utils.maps import devmap as _devmap

SET = "multicast"
V4, V4_MAC = "239.1.1.1", "01:00:5e:01:01:01"


def egress_mode():
    """The ports' mode in the tests of egress programs that are not about the mode: generic where the kernel gives
    each broadcast copy its own egress program's writes, else native (generic is refused there, see
    test_generic_ports_and_egress_programs_where_copies_share_one_buffer)."""
    return "generic" if features()["generic_egress_copy"] else "native"


@pytest.fixture(scope="module")
def mcast_obj(tmp_path_factory):
    return compile_bpf(os.path.join(BPF_DIR, "xdp_multicast.bpf.c"),
                       tmp_path_factory.mktemp("mcast") / "xdp_multicast.o", [os.path.join(BPF_DIR, "include")])


@pytest.fixture(scope="module")
def legacy_egress_obj(tmp_path_factory):
    """xdp_multicast with its egress program in libbpf 0.x's SEC("xdp_devmap/..."), a section libbpf 1.0 no longer
    knows (the program is untyped): the devmap gives it its type and attach type."""
    directory = tmp_path_factory.mktemp("legacy_egress")
    with open(os.path.join(BPF_DIR, "xdp_multicast.bpf.c")) as handle:
        source = handle.read()
    assert 'SEC("xdp/devmap")' in source
    src = directory / "xdp_multicast_legacy.bpf.c"
    src.write_text(source.replace('SEC("xdp/devmap")', 'SEC("xdp_devmap/egress_mac")'))
    return compile_bpf(src, directory / "xdp_multicast_legacy.o", [os.path.join(BPF_DIR, "include")])


TWO_EGRESS = """// SPDX-License-Identifier: GPL-2.0
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

SEC("xdp/devmap")
int egress_pass(struct xdp_md *ctx) { return XDP_PASS; }

SEC("xdp/devmap")
int egress_drop(struct xdp_md *ctx) { return XDP_DROP; }

char _license[] SEC("license") = "GPL";
"""


@pytest.fixture(scope="module")
def two_egress_obj(tmp_path_factory):
    """Two devmap egress programs in one section: the section alone names neither."""
    directory = tmp_path_factory.mktemp("two_egress")
    src = directory / "two_egress.bpf.c"
    src.write_text(TWO_EGRESS)
    return compile_bpf(src, directory / "two_egress.o", [os.path.join(BPF_DIR, "include")])


def play(tasks, python=SYSTEM_PYTHON):
    """Run tasks in one playbook on localhost; the per-task results (a loop's under "results")."""
    with tempfile.NamedTemporaryFile("w", suffix=".yml", dir="/tmp", delete=False) as handle:
        json.dump([{"hosts": "localhost", "gather_facts": False, "tasks": tasks}], handle)
    env = dict(os.environ, ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json", ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
               ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"),
               ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, ".build", "collections"),
               ANSIBLE_INVENTORY_UNPARSED_WARNING="false", ANSIBLE_LOCALHOST_WARNING="false")
    try:
        argv = ansible_cli("ansible-playbook") + ["-i", "localhost,", "-c", "local",
                                                  "-e", "ansible_python_interpreter=%s" % python, handle.name]
        proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd="/tmp", check=False)
    finally:
        os.unlink(handle.name)
    out = json.loads(proc.stdout)
    return [task["hosts"]["localhost"] for task in out["plays"][0]["tasks"]]


class Switch:
    """Ports with xdp_multicast attached by xdp_program (shared_maps), counting host ends, and the group module."""

    def __init__(self, ports, hosts, run, pin_root):
        self.ports = ports
        self.hosts = hosts
        self.run = run
        self.pin_root = pin_root
        self.set_dir = os.path.join(pin_root, ports.sw, "shared_maps", SET)

    def group(self, check=False, diff=False, **args):
        args = dict(args, netns=self.ports.sw, pin_root=self.pin_root)
        return self.run("devmap_group", args, check=check, diff=diff)

    def ok(self, **args):
        res = self.group(**args)
        assert not res.get("failed"), res
        return res

    def received(self, port):
        if self.hosts[port] is None:
            return None
        with self.hosts[port].open_map("proto_count") as counters:
            return _facts.read_counters(counters)

    def all_received(self):
        return [self.received(port) for port in range(self.ports.count)]

    def send(self, port, frames, count):
        with _netns.netns(self.ports.hosts):
            sent, _seconds = _frames.send("h%d" % port, frames, count, rate=20000)
        assert set(sent.values()) == {count}, sent

    def udp(self, port=0, group_ip=V4, group_mac=V4_MAC):
        return udp_to(self.ports, port, group_ip, group_mac)

    def prog_ids(self):
        with _netns.netns(self.ports.sw):
            return [_bpf.xdp_query(index)["prog_id"] for index in self.ports.ifindex]

    def maps_state(self):
        """Everything a group manager writes, read back: to prove a failed task changed nothing."""
        with _devmap.MapSet(self.set_dir, SET) as mset:
            state = {name: sorted(mset[name].items()) for name in ("mcast_addrs", "mcast_config", "mcast_port_mac")}
            state["groups"] = {gid: (mset["mcast_groups"].lookup(_devmap.u32(gid)), mset.members(gid))
                               for gid in mset.group_ids()}
        state["pins"] = sorted(os.path.relpath(os.path.join(d, f), self.pin_root)
                               for d, _dirs, files in os.walk(self.pin_root) for f in files)
        return state


def attach_tasks(ports, mcast_obj, mode, pin_root, shared=SET, state="present", **extra):
    return [{"name": "multicast program on every port", "ebpf.xdp.xdp_program": dict(
        interface="{{ item }}", netns=ports.sw, object=mcast_obj, program="xdp_multicast", mode=mode,
        shared_maps=shared, pin_root=pin_root, state=state, **extra),
        "loop": ["p%d" % i for i in range(ports.count)]}]


@contextlib.contextmanager
def switch(count, mcast_obj, drop_obj, run, pin_root, mode="generic", bare=()):
    ports = Ports(count)
    try:
        ports.up()
        with contextlib.ExitStack() as stack:
            hosts = counting_hosts(ports, drop_obj, stack, bare)
            # One module run per port, not a playbook: in the VM (make test-debian12) an ansible-playbook start
            # costs about a minute under emulation; test_one_map_set_for_every_port_removed_with_the_last_attachment
            # attaches through a playbook's loop.
            for port in range(count):
                attached = run("xdp_program", dict(
                    interface="p%d" % port, netns=ports.sw, object=mcast_obj, program="xdp_multicast", mode=mode,
                    shared_maps=SET, pin_root=pin_root))
                assert attached.get("changed") and not attached.get("failed"), attached
            yield Switch(ports, hosts, run, pin_root)
    finally:
        ports.down()


# ---------------------------------------------------------------- shared map sets (xdp_program, tc_program)


def test_one_map_set_for_every_port_removed_with_the_last_attachment(run_distro, mcast_obj, pin_root):
    with contextlib.ExitStack() as stack:
        ports = Ports(3)
        stack.callback(ports.down)
        ports.up()
        set_dir = os.path.join(pin_root, ports.sw, "shared_maps", SET)
        [attached] = play(attach_tasks(ports, mcast_obj, "generic", pin_root))
        results = attached["results"]
        assert all(r["changed"] for r in results), results
        # Every attachment names the same pins, in the set's directory, and none has maps of its own.
        assert [r["maps"] for r in results] == [{m: os.path.join(set_dir, m) for m in _devmap.MAPS}] * 3
        assert not any(os.path.exists(os.path.join(pin_root, ports.sw, "p%d" % i, "xdp", "maps")) for i in range(3))
        prog_ids = [r["id"] for r in results]
        assert len(set(prog_ids)) == 3  # one program per attachment, all over the same maps
        map_ids = [shared_map_ids(prog_id) for prog_id in prog_ids]
        # All but mcast_port_mac, which only the egress program uses.
        assert map_ids[0] == map_ids[1] == map_ids[2] and len(map_ids[0]) == len(_devmap.MAPS) - 1
        # Idempotent, and the record carries the set.
        [again] = play(attach_tasks(ports, mcast_obj, "generic", pin_root))
        assert not any(r["changed"] for r in again["results"]), again
        one = dict(interface="p0", netns=ports.sw, object=mcast_obj, program="xdp_multicast", mode="generic",
                   shared_maps=SET)
        # Another set reloads p0 over the other set's maps; p1 and p2 keep the first.
        moved = run_distro("xdp_program", dict(one, shared_maps="other"))
        assert moved["changed"] and moved["id"] != prog_ids[0], moved
        assert moved["maps"]["mcast_groups"] == os.path.join(pin_root, ports.sw, "shared_maps", "other",
                                                             "mcast_groups")
        assert os.path.isdir(set_dir)
        # Leaving it: the set "other" has no attachment left and goes; back to SET.
        back = run_distro("xdp_program", one)
        assert back["changed"] and back["maps"]["mcast_groups"] == os.path.join(set_dir, "mcast_groups")
        assert not os.path.exists(os.path.join(pin_root, ports.sw, "shared_maps", "other"))
        # absent: the set stays while an attachment names it, goes with the last (unless keep_maps).
        for port in (0, 1):
            res = run_distro("xdp_program", dict(interface="p%d" % port, netns=ports.sw, state="absent"))
            assert res["changed"] and os.path.exists(os.path.join(set_dir, "mcast_groups")), res
        kept = run_distro("xdp_program", dict(interface="p2", netns=ports.sw, state="absent", keep_maps=True))
        assert kept["changed"] and os.path.exists(os.path.join(set_dir, "mcast_groups"))
        # The kept maps are taken up again; then removed with the last attachment.
        res = run_distro("xdp_program", dict(one, interface="p2"))
        assert res["maps"]["mcast_groups"] == os.path.join(set_dir, "mcast_groups")
        res = run_distro("xdp_program", dict(interface="p2", netns=ports.sw, state="absent"))
        assert res["changed"] and not os.path.exists(set_dir), res
        assert not os.path.exists(os.path.join(pin_root, ports.sw)), os.listdir(os.path.join(pin_root, ports.sw))


def lock_is_free(netns_key, name):
    """Whether nobody holds the _pins.lock(netns_key, name) now."""
    path = os.path.join(_pins.LOCK_DIR, netns_key, name + ".lock")
    with open(path, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        fcntl.flock(handle, fcntl.LOCK_UN)
        return True


def test_moving_to_another_set_releases_the_old_one_holding_no_other_lock(run_distro, mcast_obj, pin_root):
    """p0 moves from set x to set y. The old set is released only after the run dropped the locks of p0 and y:
    a run moving p1 from y to x at the same time would otherwise wait for x while holding y, and deadlock."""
    with contextlib.ExitStack() as stack:
        ports = Ports(2)
        stack.callback(ports.down)
        ports.up()
        sets = os.path.join(pin_root, ports.sw, "shared_maps")
        args = dict(interface="p0", netns=ports.sw, object=mcast_obj, program="xdp_multicast", mode="generic")
        for port, name in ((0, "x"), (1, "y")):
            res = run_distro("xdp_program", dict(args, interface="p%d" % port, shared_maps=name))
            assert res["changed"] and not res.get("failed"), res
        owner = _pins.Record(os.path.join(pin_root, ports.sw, "p0", "xdp", "owner"))
        results = []
        with _pins.lock(ports.sw, _pins.shared_maps_lock("x")):
            mover = threading.Thread(target=lambda: results.append(run_distro("xdp_program",
                                                                              dict(args, shared_maps="y"))))
            mover.start()
            stack.callback(mover.join, 60)  # before the ports go, after x's lock is dropped
            # The move is done (the record names y); the run now waits for x's lock alone.
            assert eventually(lambda: (owner.read() or {}).get("shared_maps"), "y", timeout=60) == "y"
            mover.join(1)
            assert mover.is_alive(), results  # it does wait for x
            assert lock_is_free(ports.sw, _pins.shared_maps_lock("y"))
            assert lock_is_free(ports.sw, "p0")
        mover.join(60)
        [moved] = results
        assert moved["changed"] and not moved.get("failed") and not moved.get("warnings"), moved
        assert moved["maps"]["mcast_groups"] == os.path.join(sets, "y", "mcast_groups")
        assert sorted(os.listdir(sets)) == ["y"]  # x had no attachment left


@pytest.mark.debian12("devmap_group")
def test_shared_maps_rhythm_and_a_bad_set_name(run_distro, mcast_obj, pin_root):
    with contextlib.ExitStack() as stack:
        ports = Ports(1)
        stack.callback(ports.down)
        ports.up()
        # No program named: the object's devmap egress program is no candidate, xdp_multicast is the one.
        args = dict(interface="p0", netns=ports.sw, object=mcast_obj, mode="generic", shared_maps=SET)
        bad = run_distro("xdp_program", dict(args, shared_maps="a/b"))
        assert bad.get("failed") and "shared_maps 'a/b' is not a usable map set name" in bad["msg"], bad
        assert not os.path.exists(os.path.join(pin_root, ports.sw))
        first, _second = assert_rhythm(run_distro, "xdp_program", args)
        assert first["name"] == "xdp_multicast"


@pytest.mark.kernel("tcx")
def test_tc_programs_share_a_map_set(run_distro, tc_obj, pair):
    """tc_program takes the option too: tc_drop_count on both ends of a pair counts into one map."""
    results = []
    for ns in (pair.tx, pair.rx):
        res = run_distro("tc_program", dict(interface="eth0", netns=ns, object=tc_obj, program="tc_drop_count",
                                            shared_maps="counts", method="tcx"))
        assert res["changed"] and not res.get("failed"), res
        results.append(res)
    # Two namespaces, two sets; in one namespace, one set.
    assert results[0]["maps"]["redirect_count"].endswith("/%s/shared_maps/counts/redirect_count" % pair.tx)
    both = run_distro("tc_program", dict(interface="eth0", netns=pair.tx, object=tc_obj, program="tc_drop_count",
                                         shared_maps="counts", method="tcx", direction="egress"))
    assert both["maps"] == results[0]["maps"], both
    assert shared_map_ids(both["id"]) == shared_map_ids(results[0]["id"])


def shared_map_ids(prog_id):
    """The ids of a program's maps, without its own .rodata (each load has one)."""
    with _bpf.Program.from_id(prog_id) as prog:
        ids = prog.info()["map_ids"]
    out = []
    for map_id in ids:
        with _bpf.Map.from_id(map_id) as found:
            if "." not in found.info["name"]:
                out.append(map_id)
    return sorted(out)


# ---------------------------------------------------------------- delivery


@pytest.mark.parametrize("mode", ["native", "generic"])
def test_a_frame_reaches_every_other_member_and_the_sender_only_without_exclude_ingress(
        run_distro, mcast_obj, drop_obj, pin_root, mode):
    """video (239.1.1.1) excludes the ingress, arp (the broadcast MAC) does not; p0..p2 are members of both,
    p3 of none."""
    n = 20
    with switch(4, mcast_obj, drop_obj, run_distro, pin_root, mode) as sw:
        video = sw.ok(name="video", members=["p0", "p1", "p2"], addresses=[V4])
        arp = sw.ok(name="arp", members=["p0", "p1", "p2"], addresses=[BROADCAST], exclude_ingress=False)
        assert (video["id"], arp["id"]) == (1, 2)
        assert video["members"] == [{"name": "p%d" % i, "ifindex": sw.ports.ifindex[i]} for i in range(3)]
        assert not video["no_native_redirect"], video
        sw.send(0, [("udp", sw.udp()), ("arp", arp_broadcast(sw.ports.host_macs[0]))], n)
        expected = [{0: n}, {17: n, 0: n}, {17: n, 0: n}, {}]
        assert eventually(sw.all_received, expected) == expected
        # From a member of video alone (p3 joins arp only): no copy back to p3 from video, one from arp.
        sw.ok(name="arp", members=["p3"])
        sw.send(1, [("arp", arp_broadcast(sw.ports.host_macs[1]))], n)
        expected = [{0: 2 * n}, {17: n, 0: 2 * n}, {17: n, 0: 2 * n}, {0: n}]
        assert eventually(sw.all_received, expected) == expected


@pytest.mark.parametrize("mode", ["native", "generic"])
def test_two_groups_deliver_only_to_their_own_members(run_distro, mcast_obj, drop_obj, pin_root, mode):
    """p0 is in no group and feeds both."""
    n = 20
    with switch(5, mcast_obj, drop_obj, run_distro, pin_root, mode) as sw:
        sw.ok(name="v4", members=["p1", "p2"], addresses=[V4])
        sw.ok(name="v6", members=["p3", "p4"], addresses=["FF0E:0::1:3"])
        v6 = _frames.build_frame("tcp", sw.ports.host_macs[0], "33:33:00:01:00:03", "fd00::1", "ff0e::1:3")
        other = sw.udp(group_ip="239.9.9.9", group_mac="01:00:5e:09:09:09")
        sw.send(0, [("v4", sw.udp()), ("v6", v6), ("other", other)], n)
        expected = [{}, {17: n}, {17: n}, {6: n}, {6: n}]
        assert eventually(sw.all_received, expected) == expected


@pytest.mark.parametrize("mode", ["native", "generic"])
def test_removing_a_member_stops_delivery_to_it_at_once_and_the_others_miss_nothing(
        run_distro, mcast_obj, drop_obj, pin_root, mode):
    with switch(4, mcast_obj, drop_obj, run_distro, pin_root, mode) as sw:
        sw.ok(name="video", members=["p1", "p2", "p3"], addresses=[V4])
        prog_ids = sw.prog_ids()
        with _devmap.MapSet(sw.set_dir, SET) as mset:
            devmap_id = mset["mcast_groups"].lookup(_devmap.u32(1))
        with Stream(sw, 0, sw.udp()) as stream:
            # Frames at 10 kpps while p2 leaves the group in the middle of them, and for a while after.
            assert eventually(lambda: sw.received(2).get(17, 0) > 500, True)
            res = sw.group(name="video", members=["p1", "p3"], addresses=[V4], exclusive=True)
            during = stream.sent()
            assert eventually(lambda: stream.sent() > during + 1000, True, timeout=5)
        assert res["changed"] and not res.get("failed"), res
        total = stream.sent()
        # The others missed nothing; p2 got a part and nothing after its removal.
        expected = [{17: total}] * 2
        assert eventually(lambda: [sw.received(1), sw.received(3)], expected) == expected
        left_at = sw.received(2)[17]
        assert 500 < left_at < total
        sw.send(0, {"udp": sw.udp()}, 20)
        expected = [{}, {17: total + 20}, {17: left_at}, {17: total + 20}]
        assert eventually(sw.all_received, expected) == expected
        # Map writes only: the same programs on every port, the group's devmap edited in place.
        assert sw.prog_ids() == prog_ids
        with _devmap.MapSet(sw.set_dir, SET) as mset:
            assert mset["mcast_groups"].lookup(_devmap.u32(1)) == devmap_id
            assert mset.members(1) == {sw.ports.ifindex[1]: 0, sw.ports.ifindex[3]: 0}
            assert mset.config(1) == (_devmap.EXCLUDE_INGRESS, 2)


class Stream:
    """Sends a frame from host end `port` in a thread, in rounds of 500 at 10 kpps, until the `with` ends."""

    def __init__(self, sw, port, frame):
        with _netns.netns(sw.ports.hosts):
            self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
            self.sock.bind(("h%d" % port, 0))
        self.frame = frame
        self.counts = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._send)

    def _send(self):
        while not self.stop.is_set():
            self.counts.append(_frames.send_on(self.sock, {"udp": self.frame}, 500, 10000)[0]["udp"])

    def sent(self):
        return sum(self.counts)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()
        self.sock.close()


@pytest.mark.parametrize("section", ["xdp/devmap", "xdp_devmap/egress_mac"])
@pytest.mark.parametrize("mode", ["native", needs("generic_egress_copy", "generic")])
def test_the_egress_program_writes_each_ports_own_mac_on_every_copy(run_distro, mcast_obj, legacy_egress_obj, drop_obj,
                                                                    pin_root, mode, section):
    n = 10
    egress = {"object": mcast_obj if section == "xdp/devmap" else legacy_egress_obj, "program": "xdp_egress_mac"}
    with switch(4, mcast_obj, drop_obj, run_distro, pin_root, mode) as sw:
        res = sw.ok(name="video", members=["p1", "p2", "p3"], addresses=[V4], egress_program=egress)
        assert res["egress_program"] == egress
        again = sw.ok(name="video", members=["p1", "p2", "p3"], addresses=[V4], egress_program=egress)
        assert not again["changed"], again
        with _bpf.Program.from_pin(os.path.join(res["pin_dir"], "prog")) as prog:
            egress_id = prog.info()["id"]
        with _devmap.MapSet(sw.set_dir, SET) as mset:
            assert set(mset.members(1).values()) == {egress_id}
            assert dict(mset["mcast_port_mac"].items()) == {
                _devmap.u32(sw.ports.ifindex[p]): _frames.mac_bytes(sw.ports.port_macs[p]) for p in (1, 2, 3)}

        def seen():
            with _netns.netns(sw.ports.hosts):
                sniffers = {port: sniffer("h%d" % port) for port in (1, 2, 3)}
            sw.send(0, {"udp": sw.udp()}, n)
            return {port: sources(sock, sw.udp()[12:]) for port, sock in sniffers.items()}

        assert seen() == {p: {sw.ports.port_macs[p]: n} for p in (1, 2, 3)}
        # Without an egress program ({} removes it) the copies leave as they came, and the program is unpinned.
        plain = sw.ok(name="video", members=["p1", "p2", "p3"], addresses=[V4], egress_program={})
        assert plain["changed"] and plain["egress_program"] is None
        assert not os.path.exists(os.path.join(res["pin_dir"], "prog"))
        with _devmap.MapSet(sw.set_dir, SET) as mset:
            assert set(mset.members(1).values()) == {0}
        assert seen() == {p: {sw.ports.host_macs[0]: n} for p in (1, 2, 3)}


@pytest.mark.parametrize("section", ["xdp/devmap", "xdp_devmap/egress_mac"])
def test_the_egress_program_chosen_by_its_section(run_distro, mcast_obj, legacy_egress_obj, drop_obj, pin_root,
                                                  section):
    """egress_program by section (iproute2's sec): the four-step rhythm, every copy leaves each member with its
    port's own MAC, facts and gathered say the section, and the same program named by its function (and back)
    is no change."""
    n = 10
    obj = mcast_obj if section == "xdp/devmap" else legacy_egress_obj
    by_section, by_name = {"object": obj, "section": section}, {"object": obj, "program": "xdp_egress_mac"}
    with switch(4, mcast_obj, drop_obj, run_distro, pin_root, egress_mode()) as sw:
        args = dict(name="video", members=["p1", "p2", "p3"], addresses=[V4], netns=sw.ports.sw, pin_root=pin_root)
        first, _second = assert_rhythm(sw.run, "devmap_group", dict(args, egress_program=by_section))
        assert first["egress_program"] == by_section, first
        assert first["diff"]["after"]["egress_program"] == by_section, first
        with _bpf.Program.from_pin(os.path.join(first["pin_dir"], "prog")) as prog:
            egress_id = prog.info()["id"]
        with _devmap.MapSet(sw.set_dir, SET) as mset:
            assert set(mset.members(1).values()) == {egress_id}
        with _netns.netns(sw.ports.hosts):
            sniffers = {port: sniffer("h%d" % port) for port in (1, 2, 3)}
        sw.send(0, {"udp": sw.udp()}, n)
        assert {port: sources(sock, sw.udp()[12:]) for port, sock in sniffers.items()} == {
            p: {sw.ports.port_macs[p]: n} for p in (1, 2, 3)}
        assert eventually(lambda: sw.all_received()[1:], [{17: n}] * 3) == [{17: n}] * 3

        def group_facts():
            facts = run_distro("xdp_facts", dict(netns=sw.ports.sw, pin_root=pin_root))["ansible_facts"]["xdp"]
            [group] = facts["devmap_groups"][SET]
            return group

        group = group_facts()
        assert (group["egress_program"], group.get("egress_section")) == ("xdp_egress_mac", section), group
        assert (group["frames"], group["copies"]) == (n, 3 * n), group
        gathered = run_distro("datapath", dict(state="gathered", namespaces=[sw.ports.sw],
                                               pin_root=pin_root))["gathered"]
        assert [g["egress_program"] for g in gathered["devmap_groups"]] == [by_section], gathered
        back = run_distro("datapath", dict(state="merged", config={"devmap_groups": gathered["devmap_groups"]},
                                           pin_root=pin_root))
        assert back["changed"] is False and not back.get("failed"), back
        # The same program by its function name, and back by its section: no change, the very same program;
        # the record (facts, gathered) says how the last task named it.
        for named, shown in ((by_name, None), (by_section, section)):
            for check in (True, False, True):
                res = run_distro("devmap_group", dict(args, egress_program=named), check=check)
                assert res["changed"] is False and not res.get("failed"), res
            with _devmap.MapSet(sw.set_dir, SET) as mset:
                assert set(mset.members(1).values()) == {egress_id}
            group = group_facts()
            assert (group["egress_program"], group.get("egress_section")) == ("xdp_egress_mac", shown), group


def test_bad_egress_sections_are_refused_and_change_nothing(run_distro, mcast_obj, two_egress_obj, drop_obj,
                                                            pin_root):
    """Both program and section, a section of two programs, a section the object does not have: a clear error in
    check mode and in a run, and the group keeps its egress program (maps and pins as they were)."""
    with switch(3, mcast_obj, drop_obj, run_distro, pin_root, egress_mode()) as sw:
        args = dict(name="video", members=["p1", "p2"], addresses=[V4])
        sw.ok(**args, egress_program={"object": mcast_obj, "program": "xdp_egress_mac"})
        before = sw.maps_state()
        cases = [
            ({"object": mcast_obj, "program": "xdp_egress_mac", "section": "xdp/devmap"},
             "parameters are mutually exclusive: program|section found in egress_program"),
            ({"object": two_egress_obj, "section": "xdp/devmap"},
             "section 'xdp/devmap' of %s holds 2 programs (egress_pass, egress_drop); name one with program: "
             "instead" % two_egress_obj),
            ({"object": mcast_obj, "section": "xdp/nosuch"},
             "%s has no program in section 'xdp/nosuch'; its programs: xdp_multicast (SEC(\"xdp\")), xdp_egress_mac "
             "(SEC(\"xdp/devmap\"))" % mcast_obj),
        ]
        for egress, message in cases:
            for check in (True, False):
                res = sw.group(check=check, **args, egress_program=egress)
                assert res.get("failed") and res["msg"] == message, res
                assert "Traceback" not in res.get("module_stderr", ""), res
                assert sw.maps_state() == before


def test_an_omitted_egress_program_is_kept_and_removed_by_exclusive_or_an_empty_dict(
        run_distro, mcast_obj, drop_obj, pin_root):
    with switch(3, mcast_obj, drop_obj, run_distro, pin_root, egress_mode()) as sw:
        egress = {"object": mcast_obj, "program": "xdp_egress_mac"}
        pinned = os.path.join(sw.set_dir, "groups", "1", "prog")

        def egress_ids():
            with _devmap.MapSet(sw.set_dir, SET) as mset:
                return set(mset.members(1).values())

        first = sw.ok(name="video", members=["p1"], addresses=[V4], egress_program=egress)
        prog_ids = egress_ids()
        assert first["egress_program"] == egress and len(prog_ids) == 1 and 0 not in prog_ids, first
        # Omitted, like members and addresses not listed: kept, with the same program on a new member too.
        kept = sw.ok(name="video", members=["p2"])
        assert kept["changed"] and kept["egress_program"] == egress and egress_ids() == prog_ids, kept
        again = sw.ok(name="video", members=["p1"], check=True)
        assert not again["changed"] and again["egress_program"] == egress, again
        # exclusive: exactly as listed, so no egress program.
        args = dict(name="video", members=["p1", "p2"], addresses=[V4], exclusive=True)
        gone = sw.ok(**args)
        assert gone["changed"] and gone["egress_program"] is None and egress_ids() == {0}, gone
        assert not os.path.exists(pinned) and not sw.ok(**args)["changed"]
        # {} removes it without exclusive; the four-step rhythm.
        sw.ok(name="video", egress_program=egress)
        assert os.path.exists(pinned) and egress_ids() != {0}
        assert_rhythm(sw.run, "devmap_group", dict(name="video", egress_program={}, netns=sw.ports.sw,
                                                   pin_root=pin_root))
        assert not os.path.exists(pinned) and egress_ids() == {0}
        assert sw.ok(name="video")["egress_program"] is None


@pytest.mark.kernel_either("generic_egress_copy")
def test_generic_ports_and_egress_programs_where_copies_share_one_buffer(run_distro, mcast_obj, drop_obj, pin_root):
    """Where the kernel's generic-mode broadcast gives every copy one buffer (6.1), a group's egress program and a
    generic-mode port of its map set are refused either way round, in check mode and in a run, changing nothing;
    where each copy is its own (6.18), both are taken (test_the_egress_program_writes_each_ports_own_mac_on_every_copy
    shows the copies right)."""
    shares = not features()["generic_egress_copy"]
    egress = {"object": mcast_obj, "program": "xdp_egress_mac"}
    group = dict(name="video", members=["p1", "p2"], addresses=[V4], egress_program=egress)
    words = "a devmap egress program cannot give each copy of a frame that a generic-mode XDP program broadcasts"
    # A group given an egress program in a map set with generic-mode ports.
    with switch(3, mcast_obj, drop_obj, run_distro, pin_root, "generic") as sw:
        if shares:
            before, prog_ids = sw.maps_state(), sw.prog_ids()
            for check in (True, False):
                res = sw.group(check=check, **group)
                assert res.get("failed") and words in res["msg"], res
                assert "mode: native" in res["msg"] and "p0, p1, p2" in res["msg"], res
                assert "Traceback" not in res.get("module_stderr", ""), res
                assert sw.maps_state() == before and sw.prog_ids() == prog_ids
        else:
            assert_rhythm(sw.run, "devmap_group", dict(group, netns=sw.ports.sw, pin_root=pin_root))
    # A port switched to generic mode in a map set whose group has an egress program.
    with switch(3, mcast_obj, drop_obj, run_distro, pin_root, "native") as sw:
        sw.ok(**group)
        port = dict(interface="p2", netns=sw.ports.sw, object=mcast_obj, program="xdp_multicast", mode="generic",
                    shared_maps=SET, pin_root=pin_root)
        if shares:
            before, prog_ids = sw.maps_state(), sw.prog_ids()
            for check in (True, False):
                res = run_distro("xdp_program", port, check=check)
                assert res.get("failed") and words in res["msg"] and "group(s) video" in res["msg"], res
                assert "Traceback" not in res.get("module_stderr", ""), res
                assert sw.maps_state() == before and sw.prog_ids() == prog_ids
        else:
            first, _second = assert_rhythm(run_distro, "xdp_program", port)
            assert first["mode"] == "generic", first


def test_a_member_whose_peer_cannot_take_native_redirects_is_named(run_distro, mcast_obj, drop_obj, pin_root):
    with switch(3, mcast_obj, drop_obj, run_distro, pin_root, "native", bare=(2,)) as sw:
        res = sw.ok(name="video", members=["p1", "p2"], addresses=[V4])
        assert res["no_native_redirect"] == ["p2"], res
        assert any("member p2 cannot take natively redirected XDP frames" in w for w in res.get("warnings", [])), res


# ---------------------------------------------------------------- the module's contract


def test_group_rhythm_create_change_members_absent(run, mcast_obj, drop_obj, pin_root):
    with switch(4, mcast_obj, drop_obj, run, pin_root) as sw:
        args = dict(name="video", members=["p0", "p1"], addresses=[V4, "ff0e::1"], netns=sw.ports.sw,
                    pin_root=pin_root)
        preview = sw.group(check=True, diff=True, **args)
        assert preview["diff"] == {"before": {"present": False}, "after": {
            "present": True, "id": 1, "name": "video", "members": ["p0", "p1"], "addresses": [V4, "ff0e::1"],
            "exclude_ingress": True, "egress_program": None}}, preview
        assert not os.path.exists(os.path.join(sw.set_dir, "groups"))
        assert_rhythm(run, "devmap_group", args)
        changed = dict(args, members=["p1", "p2", "p3"], addresses=[V4], exclusive=True)
        diff = run("devmap_group", changed, check=True, diff=True)["diff"]
        assert (diff["before"]["members"], diff["after"]["members"]) == (["p0", "p1"], ["p1", "p2", "p3"])
        assert (diff["before"]["addresses"], diff["after"]["addresses"]) == ([V4, "ff0e::1"], [V4])
        first, _second = assert_rhythm(run, "devmap_group", changed)
        assert [m["name"] for m in first["members"]] == ["p1", "p2", "p3"]
        with _devmap.MapSet(sw.set_dir, SET) as mset:
            assert sorted(mset.members(1)) == sorted(sw.ports.ifindex[1:])
            assert mset.addresses() == {V4: 1}
        # Without exclusive, listed members are added and the others stay.
        added = sw.ok(name="video", members=["p0"])
        assert [m["name"] for m in added["members"]] == ["p0", "p1", "p2", "p3"]
        assert added["addresses"] == [V4]
        assert_rhythm(run, "devmap_group", dict(args, members=[], state="absent"))
        with _devmap.MapSet(sw.set_dir, SET) as mset:
            assert mset.group_ids() == [] and mset.addresses() == {} and mset.config(1) == (0, 0)
        assert not os.path.exists(os.path.join(sw.set_dir, "groups"))


def test_names_get_the_lowest_free_id_and_must_agree_with_ids(run_distro, mcast_obj, drop_obj, pin_root):
    with switch(2, mcast_obj, drop_obj, run_distro, pin_root) as sw:
        assert [sw.ok(name=n, members=["p0"])["id"] for n in ("a", "b")] == [1, 2]
        assert sw.ok(name="c", id=10, members=["p1"])["id"] == 10
        assert sw.ok(name="a", state="absent")["changed"]
        assert sw.ok(name="d")["id"] == 1
        assert sw.ok(id=2, members=["p1"])["name"] == "b"  # by id alone
        mismatch = sw.group(name="b", id=3)
        assert mismatch.get("failed") and "group b has id 2" in mismatch["msg"], mismatch
        taken = sw.group(name="e", id=10)
        assert taken.get("failed") and "group id 10 of map set multicast is group c, not e" in taken["msg"], taken
        assert not sw.ok(name="nothing", state="absent")["changed"]


@pytest.mark.quiet
def test_facts_show_groups_members_and_counters(run_distro, mcast_obj, drop_obj, pin_root):
    n = 30
    with switch(3, mcast_obj, drop_obj, run_distro, pin_root) as sw:
        sw.ok(name="video", members=["p1", "p2"], addresses=[V4, "ff:ff:ff:ff:ff:ff"])
        sw.send(0, {"udp": sw.udp()}, n)
        assert eventually(lambda: sw.received(2), {17: n}) == {17: n}
        facts = run_distro("xdp_facts", dict(netns=sw.ports.sw, pin_root=pin_root))["ansible_facts"]["xdp"]
        assert facts["devmap_groups"] == {SET: [{
            "id": 1, "name": "video", "owner": "ebpf.xdp", "exclude_ingress": True, "egress_program": None,
            "members": [{"name": "p1", "ifindex": sw.ports.ifindex[1]}, {"name": "p2", "ifindex": sw.ports.ifindex[2]}],
            "addresses": [V4, "ff:ff:ff:ff:ff:ff"], "frames": n, "copies": 2 * n}]}, facts["devmap_groups"]
        # Rates: frames sent while the facts sample.
        with Stream(sw, 0, sw.udp()):
            facts = run_distro("xdp_facts", dict(netns=sw.ports.sw, pin_root=pin_root, rate_interval=1))
        group = facts["ansible_facts"]["xdp"]["devmap_groups"][SET][0]
        assert 500 < group["rates"]["frames"] < 20000, group
        assert group["rates"]["copies"] == pytest.approx(2 * group["rates"]["frames"], rel=0.05), group


def test_facts_leave_out_a_set_that_cannot_be_read_and_a_group_removed_while_read(
        run_distro, mcast_obj, drop_obj, pin_root):
    with switch(2, mcast_obj, drop_obj, run_distro, pin_root) as sw:
        sw.ok(name="video", members=["p1"], addresses=[V4])
        # A set with an mcast_groups map but none of the others (half removed, or pinned by hand).
        broken = os.path.join(pin_root, sw.ports.sw, "shared_maps", "broken")
        os.makedirs(broken)
        with _bpf.Map.create(_bpf.BPF_MAP_TYPE_ARRAY, "mcast_groups", 4, 4, 1) as lone:
            lone.pin(os.path.join(broken, "mcast_groups"))
        res = run_distro("xdp_facts", dict(netns=sw.ports.sw, pin_root=pin_root))
        assert not res.get("failed"), res
        assert [g["name"] for g in res["ansible_facts"]["xdp"]["devmap_groups"][SET]] == ["video"]
        assert "broken" not in res["ansible_facts"]["xdp"]["devmap_groups"]
        assert any("map set broken left out, it cannot be read: map set 'broken' has no pinned mcast_addrs" in w
                   for w in res.get("warnings", [])), res
        # A group whose devmap goes between the lookup of its id and the open by id is no group.
        with _devmap.MapSet(sw.set_dir, SET) as mset:
            real = mset.maps["mcast_groups"]

            class Gone:
                @staticmethod
                def inner(_key):
                    raise _bpf.BpfError("open map by id", 2)

            mset.maps["mcast_groups"] = Gone()
            try:
                assert mset.members(1) is None
            finally:
                mset.maps["mcast_groups"] = real


BAD_INPUT = [
    (dict(name="x", members=["p1", "nope0"]), r"member nope0: no such interface in network namespace mc\w+-sw"),
    (dict(id=0, members=["p1"]), r"group id 0 is out of range: ids run from 1 to 255"),
    (dict(id=256, members=["p1"]), r"group id 256 is out of range"),
    (dict(name="x", members=["p1"], addresses=["10.1.1.1"]), r"address 10.1.1.1 is not a multicast address"),
    (dict(name="x", members=["p1"], addresses=["02:00:00:00:00:01"]), r"address 02:00:00:00:00:01 is a unicast MAC"),
    (dict(name="x", members=["p1"], addresses=["239.1.1"]), r"address '239.1.1' is not an IP or MAC address"),
    (dict(name="x", members=["p1"], shared_maps="nothere"),
     r"map set 'nothere' has no pinned mcast_groups, .* attach the multicast program with shared_maps: nothere first"),
    (dict(name="x", members=["p1", "h1"]), r"member h1 is not in network namespace mc\w+-sw but in mc\w+-hosts"),
    (dict(name="x", members=["p1"], addresses=["239.1.1.1"]), r"address 239.1.1.1 already belongs to group 1"),
    (dict(name="x", members=["p1"], egress_program={"object": "/nonexistent.o"}),
     r"object file /nonexistent.o does not exist"),
]


def test_bad_input_is_a_clear_error_and_changes_nothing(run_distro, mcast_obj, drop_obj, pin_root):
    with switch(3, mcast_obj, drop_obj, run_distro, pin_root) as sw:
        sw.ok(name="video", members=["p0", "p2"], addresses=[V4])
        before = sw.maps_state()
        generation = set_generation(sw)
        for args, message in BAD_INPUT:
            res = sw.group(**args)
            assert res.get("failed") and re.search(message, res["msg"]), (args, res)
            assert sw.maps_state() == before, args
        # And an existing group is left as it was by a failing change of it.
        res = sw.group(name="video", members=["p1", "nope0"], exclusive=True)
        assert res.get("failed") and sw.maps_state() == before
        # Nor did any of them tell another run that the set changed (its lock's generation).
        assert set_generation(sw) == generation == 1


def set_generation(sw):
    """The generation of the map set's lock: how many runs have written the set (see _pins.HeldLock)."""
    return _pins.lock_generation(sw.ports.sw, _pins.shared_maps_lock(SET))


def test_a_failure_after_the_map_writes_puts_them_back(mcast_obj, drop_obj, run_distro, pin_root, monkeypatch):
    """The record's write is the last step, inside the journal: when it fails (here: injected in-process),
    the maps, the egress program's pin and the group directory are as before, and a new group can still be
    created."""
    with switch(3, mcast_obj, drop_obj, run_distro, pin_root, egress_mode()) as sw:
        sw.ok(name="video", members=["p0", "p2"], addresses=[V4])
        before = sw.maps_state()

        def refuse(*_args):
            raise OSError(28, "injected: no space left for the record")

        monkeypatch.setattr(_devmap, "write_record", refuse)
        task = dict(netns=sw.ports.sw, pin_root=pin_root, shared_maps=SET, state="present")
        egress = {"object": mcast_obj, "program": "xdp_egress_mac"}
        for args in (dict(name="audio", members=["p1"], addresses=["239.2.2.2"]),
                     dict(name="video", members=["p1", "p2"], addresses=["ff0e::1"], exclusive=True),
                     dict(name="video", members=["p1"], egress_program=egress),
                     dict(name="audio", members=["p0", "p1"], egress_program=egress)):
            with pytest.raises(OSError, match="injected"):
                _devmap.converge(dict(task, **args), False)
            assert sw.maps_state() == before, args
        assert set_generation(sw) == 1  # each failure wholly undone: no other run need read the set again
        monkeypatch.undo()
        assert sw.ok(name="audio", members=["p1"], addresses=["239.2.2.2"])["id"] == 2
        assert set_generation(sw) == 2


def test_a_member_add_opens_each_pinned_map_once_and_writes_the_config_once(
        mcast_obj, drop_obj, run_distro, pin_root, monkeypatch):
    """Round trips of a group change, counted on the real kernel (the module's code, in this process): adding
    a member opens each pinned map of the set it reads or writes once (the groups, addresses and settings; not
    the counters or the egress MACs, which it does not touch: the set's maps open on first use), reads the
    group's record once and leaves it (it does not change), and writes the member into the group's devmap and the group's config, once each; removing one
    writes the config twice (its count covers the member until the member is out of the devmap)."""
    with switch(3, mcast_obj, drop_obj, run_distro, pin_root) as sw:
        sw.ok(name="video", members=["p0"], addresses=[V4])
        opened, written = collections.Counter(), collections.Counter()
        from_pin, pinned_value, put = _bpf.Map.from_pin.__func__, _bpf.pinned_value, _devmap.put

        def counting_open(cls, path):
            opened[os.path.relpath(path, sw.set_dir)] += 1
            return from_pin(cls, path)

        def counting_read(path, key, value_size):  # a record is read without a Map
            opened[os.path.relpath(path, sw.set_dir)] += 1
            return pinned_value(path, key, value_size)

        def counting_put(journal, target, key, value, flags=_bpf.BPF_ANY):
            written[target.info["name"]] += 1
            return put(journal, target, key, value, flags)

        monkeypatch.setattr(_bpf.Map, "from_pin", classmethod(counting_open))
        monkeypatch.setattr(_bpf, "pinned_value", counting_read)
        monkeypatch.setattr(_devmap, "put", counting_put)
        task = dict(netns=sw.ports.sw, pin_root=pin_root, shared_maps=SET, state="present", name="video")
        added, _warnings = _devmap.converge(dict(task, members=["p1"]), False)
        assert added["changed"] and [m["name"] for m in added["members"]] == ["p0", "p1"], added
        assert dict(opened) == {"mcast_groups": 1, "mcast_addrs": 1, "mcast_config": 1, "groups/1/owner": 1}, opened
        assert dict(written) == {"mcast_g1": 1, "mcast_config": 1}, written  # the member, the count
        written.clear()
        removed, _warnings = _devmap.converge(dict(task, members=["p1"], exclusive=True), False)
        assert [m["name"] for m in removed["members"]] == ["p1"], removed
        assert written["mcast_config"] == 2, written
        monkeypatch.undo()
        assert not sw.ok(name="video", members=["p1"], exclusive=True)["changed"]


def test_a_group_written_by_hand_is_not_taken_over(run_distro, mcast_obj, drop_obj, pin_root):
    with switch(2, mcast_obj, drop_obj, run_distro, pin_root) as sw:
        with _devmap.MapSet(sw.set_dir, SET) as mset, \
                _bpf.Map.create(_bpf.BPF_MAP_TYPE_DEVMAP_HASH, "by_hand", 4, 8, 8) as inner:
            mset["mcast_groups"].update(_devmap.u32(1), struct.pack("<i", inner.fd))
        res = sw.group(id=1, members=["p0"])
        assert res.get("failed") and "devmap_group did not create it" in res["msg"], res
        assert sw.ok(name="auto", members=["p0"])["id"] == 2  # a free id is one nobody uses


# ---------------------------------------------------------------- a map set migrated (issue 40)


@pytest.fixture(scope="module")
def mcast_obj_more_groups(tmp_path_factory):
    """xdp_multicast with room for 512 groups: mcast_groups, mcast_config and the group counters grow (another
    layout of the set's maps, the same programs)."""
    directory = tmp_path_factory.mktemp("mcast_512")
    with open(os.path.join(BPF_DIR, "include", "mcast_groups.h")) as handle:
        header = handle.read()
    assert "#define MCAST_MAX_GROUPS 256" in header
    (directory / "mcast_groups.h").write_text(header.replace("#define MCAST_MAX_GROUPS 256",
                                                             "#define MCAST_MAX_GROUPS 512"))
    with open(os.path.join(BPF_DIR, "xdp_multicast.bpf.c")) as handle:
        (directory / "xdp_multicast.bpf.c").write_text(handle.read())
    # The source's own directory first: its "mcast_groups.h" is this one.
    return compile_bpf(directory / "xdp_multicast.bpf.c", directory / "xdp_multicast.o",
                       [os.path.join(BPF_DIR, "include")])


def test_a_group_written_again_after_its_map_set_is_reset_delivers_again(run, mcast_obj, mcast_obj_more_groups,
                                                                         drop_obj, pin_root):
    """p0's upgrade to an object with room for more groups resets the set's maps (mcast_groups holds devmaps,
    which no copy carries: map_migration: fields refuses it by name) and moves p1 and p2 with it; the group is
    gone from the new maps, so nothing is delivered until devmap_group writes it again, in the four-step rhythm;
    then every member gets every frame again."""
    n = 20
    with switch(3, mcast_obj, drop_obj, run, pin_root) as sw:
        group = dict(name="video", members=["p0", "p1", "p2"], addresses=[V4], netns=sw.ports.sw,
                     pin_root=pin_root)
        assert sw.ok(**group)["changed"]
        sw.send(0, [("udp", sw.udp())], n)
        expected = [{}, {17: n}, {17: n}]
        assert eventually(sw.all_received, expected) == expected
        upgrade = dict(interface="p0", netns=sw.ports.sw, object=mcast_obj_more_groups, program="xdp_multicast",
                       mode="generic", shared_maps=SET, pin_root=pin_root)
        refused = run("xdp_program", upgrade)
        assert refused.get("failed") and "map mcast_groups: a hash_of_maps holds maps, which a copy by value " \
            "cannot carry; map_migration: reset starts it empty" in refused["msg"], refused
        before = sw.prog_ids()
        reset, _again = assert_rhythm(run, "xdp_program", dict(upgrade, map_migration="reset"))
        outcomes = {m["map"]: m["outcome"] for m in reset["map_migration"]}
        assert outcomes["mcast_groups"] == outcomes["mcast_config"] == "reset", reset
        assert [m["interface"] for m in reset["shared_maps_moved"]] == ["p1", "p2"], reset
        now = sw.prog_ids()
        assert all(old != new for old, new in zip(before, now)), (before, now)
        with _devmap.MapSet(sw.set_dir, SET) as mset:
            assert mset.group_ids() == [], "the reset maps start empty"
        sw.send(0, [("udp", sw.udp())], n)
        assert eventually(sw.all_received, expected) == expected, "no group, no copies"
        rebuilt, _second = assert_rhythm(run, "devmap_group", group)
        assert rebuilt["id"] == 1 and [m["name"] for m in rebuilt["members"]] == ["p0", "p1", "p2"], rebuilt
        with _devmap.MapSet(sw.set_dir, SET) as mset:
            assert mset.group_ids() == [1] and sorted(mset.members(1)) == sorted(sw.ports.ifindex)
        sw.send(0, [("udp", sw.udp())], n)
        expected = [{}, {17: 2 * n}, {17: 2 * n}]
        assert eventually(sw.all_received, expected) == expected
        sw.send(2, [("udp", sw.udp(port=2))], n)
        expected = [{17: n}, {17: 3 * n}, {17: 2 * n}]
        assert eventually(sw.all_received, expected) == expected
