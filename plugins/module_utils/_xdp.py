# -*- coding: utf-8 -*-
# Copyright (c) ebpf.xdp contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Converging one interface's XDP hook: read, compare, act.

Private to the ebpf.xdp collection: the interface may change without notice.

Attachment prefers a bpf_link (pinned, so it outlives the module and is
swapped atomically with bpf_link_update); a program someone attached over
netlink is replaced with XDP_FLAGS_REPLACE so the interface is never left
without a program.
"""

from __future__ import annotations

import errno
import os

from ansible_collections.ebpf.xdp.plugins.module_utils import _bpf, _netlink, _pins
from ansible_collections.ebpf.xdp.plugins.module_utils._compile import sha256_file

MODE_FLAGS = {"native": _bpf.XDP_FLAGS_DRV_MODE, "generic": _bpf.XDP_FLAGS_SKB_MODE}
HOOK = "xdp"


class XdpError(Exception):
    pass


def live_program(iface):
    """(prog_id, mode) of what is attached now; (0, None) when nothing is."""
    xdp = iface["xdp"]
    prog_id = xdp["prog_id"] or xdp["native_prog_id"] or xdp["generic_prog_id"]
    mode = xdp["mode"]
    if mode == "multi":
        mode = "native" if xdp["native_prog_id"] else "generic"
    return prog_id, mode


def describe_program(prog_id):
    fd = _bpf.prog_fd_by_id(prog_id)
    try:
        return _bpf.prog_info(fd)
    finally:
        _bpf.close(fd)


def find_xdp_link(ifindex, prog_id):
    """The id of the bpf_link that holds prog_id on ifindex, or None (netlink attach)."""
    for link_id in _bpf.link_ids():
        try:
            fd = _bpf.link_fd_by_id(link_id)
        except _bpf.BpfError:
            continue  # the link went away while we looked
        try:
            info = _bpf.link_info(fd)
        finally:
            _bpf.close(fd)
        if info["type"] == "xdp" and info["ifindex"] == ifindex and info["prog_id"] == prog_id:
            return link_id
    return None


def pin_link(att, link_fd):
    """Pin a new XDP link at the attachment's link path and close it; returns the link id."""
    try:
        att.replace_pin(link_fd, att.link_path)
        return _bpf.link_info(link_fd)["id"]
    finally:
        _bpf.close(link_fd)


def ownership(attachment, prog_id):
    """Our record when it describes the live program, else None.

    A run interrupted between swapping the program and rewriting the record
    leaves an older prog_id in it; the pinned link still proves ownership then.
    """
    record = attachment.read_record()
    if not record or not prog_id:
        return None
    if record.get("prog_id") == prog_id:
        return record
    if record.get("attach") == "link" and os.path.exists(attachment.link_path):
        fd = _bpf.obj_get(attachment.link_path)
        try:
            if _bpf.link_info(fd)["prog_id"] == prog_id:
                return dict(record, prog_id=prog_id)
        finally:
            _bpf.close(fd)
    return None


class XdpProgram(object):
    """Desired state of the XDP hook of one interface, from module parameters."""

    def __init__(self, params, check_mode):
        self.p = params
        self.check_mode = check_mode
        self.warnings = []
        self.program_name = params["program"]
        self.data_sha256 = None

    def run(self):
        with _netlink.netns(self.p["netns"]):
            key = _netlink.netns_key(self.p["netns"])
            att = _pins.Attachment(self.p["pin_root"], key, self.p["interface"], HOOK)
            if self.check_mode:
                return self._converge(_netlink.interface(self.p["interface"]), att)
            _netlink.interface(self.p["interface"])  # a missing interface fails before any lock or bpffs check
            _pins.check_bpffs(self.p["pin_root"])
            with _pins.interface_lock(key, self.p["interface"]):
                # Read under the lock: a concurrent run may have just changed the hook.
                return self._converge(_netlink.interface(self.p["interface"]), att)

    def _converge(self, iface, att):
        prog_id, mode = live_program(iface)
        if mode == "offload":
            raise XdpError("%s has an offloaded (hardware) XDP program, which ebpf.xdp does not manage"
                           % iface["ifname"])
        record = ownership(att, prog_id)
        before = self._state(prog_id, mode, record)
        if self.p["state"] == "absent":
            changed = self._remove(iface, att, prog_id, record)
            after = {"attached": False} if changed else before
            return self._result(changed, before, after, att, iface)
        changed, after = self._present(iface, att, prog_id, mode, record, before)
        return self._result(changed, before, after, att, iface)

    @staticmethod
    def _state(prog_id, mode, record):
        if not prog_id:
            return {"attached": False}
        info = describe_program(prog_id)
        state = {"attached": True, "id": prog_id, "name": info["name"], "tag": info["tag"],
                 "mode": mode, "owner": "ebpf.xdp" if record else "unmanaged"}
        if record:
            state.update(object_sha256=record.get("object_sha256"),
                         constants=record.get("constants", {}),
                         attach=record.get("attach"), link_id=record.get("link_id"),
                         maps=record.get("maps", {}))
        return state

    def _result(self, changed, before, after, att, iface):
        result = {"changed": changed, "interface": iface["ifname"], "ifindex": iface["ifindex"],
                  "netns": self.p["netns"], "pin_dir": att.directory,
                  "diff": {"before": before, "after": after}}
        result.update(dict((k, after.get(k)) for k in ("id", "name", "tag", "mode", "attach", "link_id")))
        result["attached"] = after.get("attached", False)
        result["maps"] = after.get("maps", {})
        return result

    # ------------------------------------------------------------ absent

    def _remove(self, iface, att, prog_id, record):
        if prog_id and not record:
            if not self.p["force"]:
                self.warnings.append(
                    "XDP program id %d on %s is not managed by ebpf.xdp; left in place "
                    "(force: true removes it)" % (prog_id, iface["ifname"]))
                return self._clear_stale(att)
            if not self.check_mode:
                self._detach_foreign(iface, prog_id)
                if att.exists():
                    att.remove(keep_maps=self.p["keep_maps"])
            return True
        if not prog_id:
            return self._clear_stale(att)
        if not self.check_mode:
            if record.get("attach") == "netlink":
                self._netlink_detach(iface, record)
            att.remove(keep_maps=self.p["keep_maps"])  # unpinning the link detaches it
        return True

    def _clear_stale(self, att):
        """Pins of ours with no live program behind them (detached by someone else)."""
        if not att.exists() or (self.p["keep_maps"] and not os.path.exists(att.record_path)):
            return False
        if not self.check_mode:
            att.remove(keep_maps=self.p["keep_maps"])
        return True

    def _netlink_detach(self, iface, record):
        fd = _bpf.obj_get(record["prog_pin"])
        try:
            _bpf.xdp_detach_netlink(iface["ifindex"], MODE_FLAGS[record["mode"]], old_prog_fd=fd)
        finally:
            _bpf.close(fd)

    def _detach_foreign(self, iface, prog_id):
        link_id = find_xdp_link(iface["ifindex"], prog_id)
        if link_id is not None:
            fd = _bpf.link_fd_by_id(link_id)
            try:
                _bpf.link_detach(fd)
            finally:
                _bpf.close(fd)
            return
        _prog, mode = live_program(iface)
        _bpf.xdp_detach_netlink(iface["ifindex"], MODE_FLAGS.get(mode, 0))

    # ------------------------------------------------------------ present

    def _desired_record(self, object_sha):
        return {"object": self.p["object"], "object_sha256": object_sha, "program": self.p["program"],
                "constants": self.p["constants"] or {}, "requested_mode": self.p["mode"]}

    def _matches(self, record, mode, desired):
        if record is None:
            return False
        same = all(record.get(k) == v for k, v in desired.items())
        return same and (self.p["mode"] == "auto" or mode == self.p["mode"])

    def _present(self, iface, att, prog_id, mode, record, before):
        if not os.path.isfile(self.p["object"]) and self.check_mode:
            self.warnings.append("object %s does not exist yet; it would be attached once it does" % self.p["object"])
            return True, {"attached": True, "object": self.p["object"], "mode": self.p["mode"]}
        if not os.path.isfile(self.p["object"]):
            raise XdpError("object file %s does not exist; compile it with ebpf.xdp.bpf_object" % self.p["object"])
        desired = self._desired_record(sha256_file(self.p["object"]))
        if self._matches(record, mode, desired):
            return False, before
        if prog_id and not record and not self.p["force"]:
            info = describe_program(prog_id)
            raise XdpError(
                "%s already has XDP program %r (id %d, tag %s, %s mode) that ebpf.xdp did not attach; "
                "it is left in place. Set force: true to replace it"
                % (iface["ifname"], info["name"], prog_id, info["tag"], mode))
        if self.check_mode:
            return self._check_load(iface, att, mode, record, desired, before)
        return self._attach(iface, att, prog_id, mode, record, desired, before)

    def _open(self, pin_maps_dir=None):
        """Open, check and load the program; sets program_name and data_sha256."""
        obj = _bpf.BpfObject(self.p["object"])
        try:
            program = self.p["program"]
            names = [p["name"] for p in obj.programs()]
            if program is None:
                xdp_names = [p["name"] for p in obj.programs() if p["type"] == "xdp"]
                if len(xdp_names) != 1:
                    raise XdpError("%s has %d XDP programs (%s); name one with program:" % (
                        self.p["object"], len(xdp_names), ", ".join(xdp_names) or "none"))
                program = xdp_names[0]
            elif program not in names:
                raise XdpError("program %r is not in %s; it has: %s" % (program, self.p["object"], ", ".join(names)))
            ptype = [p["type"] for p in obj.programs() if p["name"] == program][0]
            if ptype != "xdp":
                raise XdpError("program %r in %s is a %s program, not xdp; XDP programs are in SEC(\"xdp\")"
                               % (program, self.p["object"], ptype))
            self.program_name = program
            obj.only_load(program)
            obj.set_constants(self.p["constants"])
            self.data_sha256 = obj.data_digest()
            if pin_maps_dir:
                obj.pin_maps(pin_maps_dir)
            else:
                obj.clear_pin_paths()
            obj.load()
            return obj
        except Exception:
            obj.close()
            raise

    def _same_program(self, record, info, mode):
        """The kernel would run the same thing: same instructions, same data, same mode."""
        return bool(record) and record.get("tag") == info["tag"] \
            and record.get("data_sha256") == self.data_sha256 \
            and self.p["mode"] in ("auto", mode)

    def _check_load(self, iface, att, mode, record, desired, before):
        """Check mode: load without pins to learn the tag and surface verifier errors."""
        with self._open() as obj:
            info = _bpf.prog_info(obj.program_fd(self.program_name))
        if self._same_program(record, info, mode):
            return False, before
        new_mode = self.p["mode"] if self.p["mode"] != "auto" else (mode or "native")
        return True, {"attached": True, "name": info["name"], "tag": info["tag"], "mode": new_mode,
                      "owner": "ebpf.xdp", "object_sha256": desired["object_sha256"],
                      "constants": desired["constants"]}

    def _attach(self, iface, att, prog_id, mode, record, desired, before):
        created = att.make()
        try:
            with self._open(att.maps_dir) as obj:
                new_fd = obj.program_fd(self.program_name)
                info = _bpf.prog_info(new_fd)
                maps = dict((name, os.path.join(att.maps_dir, name)) for name in obj.map_fds())
                # "program" stays as asked (possibly None: the only XDP program), so the next run matches.
                new_record = dict(desired, program_name=self.program_name, tag=info["tag"], prog_id=info["id"],
                                  data_sha256=self.data_sha256, prog_pin=att.prog_path, maps=maps)
                if self._same_program(record, info, mode):
                    # A rebuilt object with the same program: nothing changes in the kernel;
                    # the record learns the new object so the next run matches it directly.
                    att.write_record(dict(record, **desired))
                    return False, before
                # Fail here, before the swap, if the record would not fit.
                att.encode_record(dict(new_record, mode="generic", attach="netlink", link_id=2 ** 32))
                attach, new_mode, link_id = self._swap(iface, att, prog_id, mode, record, new_fd)
                att.replace_pin(new_fd, att.prog_path)
        except Exception:
            self._undo(created)
            raise
        new_record.update(mode=new_mode, attach=attach, link_id=link_id)
        att.write_record(new_record)
        state = {"attached": True, "id": info["id"], "name": info["name"], "tag": info["tag"],
                 "mode": new_mode, "owner": "ebpf.xdp", "object_sha256": desired["object_sha256"],
                 "constants": desired["constants"], "attach": attach, "link_id": link_id, "maps": maps}
        return True, state

    @staticmethod
    def _undo(created):
        """Remove what a failed first attach made (created lists the deepest first)."""
        for path in created:
            if os.path.basename(path) == "maps" and os.path.isdir(path):
                for name in os.listdir(path):
                    os.unlink(os.path.join(path, name))
            if os.path.isdir(path) and not os.listdir(path):
                os.rmdir(path)

    def _swap(self, iface, att, prog_id, mode, record, new_fd):
        """Put new_fd on the interface; returns (attach method, mode, link id)."""
        wanted = self.p["mode"]
        ifindex = iface["ifindex"]
        same_mode = wanted in ("auto", mode)
        if record and same_mode and record.get("attach") == "link" and os.path.exists(att.link_path):
            link_fd = _bpf.obj_get(att.link_path)
            try:
                _bpf.link_update(link_fd, new_fd)
                return "link", mode, record.get("link_id")
            finally:
                _bpf.close(link_fd)
        if prog_id and same_mode and (record is None or record.get("attach") == "netlink") \
                and find_xdp_link(ifindex, prog_id) is None:
            # Netlink-attached (ours from a takeover, or someone else's with force):
            # the kernel swaps it only if the old program is still the one we saw.
            old_fd = _bpf.prog_fd_by_id(prog_id)
            try:
                _bpf.xdp_attach_netlink(ifindex, new_fd, MODE_FLAGS[mode], old_prog_fd=old_fd)
            finally:
                _bpf.close(old_fd)
            return "netlink", mode, None
        if not prog_id:
            return self._link_attach(iface, att, new_fd)
        # A mode change, or a foreign link we cannot update: detach, then attach,
        # and put the old program back if the new one cannot go on.
        self.warnings.append("%s was briefly without an XDP program while switching %s" % (
            iface["ifname"], "mode" if not same_mode else "from a foreign link"))
        old_fd = _bpf.prog_fd_by_id(prog_id)
        try:
            if record and record.get("attach") == "netlink":
                self._netlink_detach(iface, record)
            elif record:
                att.detach_link()
            else:
                self._detach_foreign(iface, prog_id)
            try:
                return self._link_attach(iface, att, new_fd)
            except Exception:
                self._restore(iface, att, old_fd, mode, by_link=bool(record) and record.get("attach") == "link")
                raise
        finally:
            _bpf.close(old_fd)

    @staticmethod
    def _restore(iface, att, old_fd, mode, by_link):
        """Re-attach the program that was there before a failed switch, held as it was."""
        if by_link:
            pin_link(att, _bpf.link_create(old_fd, iface["ifindex"], _bpf.BPF_XDP, MODE_FLAGS[mode]))
        else:
            _bpf.xdp_attach_netlink(iface["ifindex"], old_fd, MODE_FLAGS[mode])

    def _link_attach(self, iface, att, new_fd):
        modes = ["native", "generic"] if self.p["mode"] == "auto" else [self.p["mode"]]
        for mode in modes:
            try:
                link_fd = _bpf.link_create(new_fd, iface["ifindex"], _bpf.BPF_XDP, MODE_FLAGS[mode])
            except _bpf.BpfError as exc:
                if exc.errno in (errno.EOPNOTSUPP, errno.EINVAL) and mode == "native":
                    if self.p["mode"] == "auto":
                        continue
                    raise XdpError("the driver of %s has no native XDP support (%s); use mode: generic or auto"
                                   % (iface["ifname"], exc))
                raise
            return "link", mode, pin_link(att, link_fd)
        raise XdpError("could not attach to %s in any mode" % iface["ifname"])
