# -*- coding: utf-8 -*-
# Copyright (c) ebpf.xdp contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations


class ModuleDocFragment:
    # Written by scripts/options.py from docs/options.yml (set program):
    # edit it there, not here.
    DOCUMENTATION = r"""
options:
  object:
    description:
      - Path of the compiled BPF object on the managed host (see M(ebpf.xdp.bpf_object)). Required when O(state=present),
        unless O(backend=bcc) (which takes O(source) instead).
    type: path
  program:
    description:
      - Function name of the program in O(object).
      - May be omitted when the object holds exactly one program of the hook's type (or, failing that, exactly one program
        whose section names no program type).
      - 'The program is loaded as the hook runs it: a program whose C(SEC()) names no type libbpf knows (C(SEC("xdp1")),
        C(SEC("prog")), C(SEC("redirect_xmit")), as the kernel''s samples and older programs are written) gets its type
        from the hook, as iproute2 and xdp-loader give it: C(xdp) (with multi-buffer frames where its section says C(frags);
        a devmap egress program for a devmap), C(sched_cls) for tcx and cls_bpf, C(sched_act) for act_bpf. A tc program
        in C(SEC("action")) runs as a classifier and one in C(SEC("tc")) as an action. A program whose section names another
        type (C(SEC("kprobe/...")), C(SEC("socket")), ...) is refused, naming both types.'
      - Mutually exclusive with O(section).
    type: str
  section:
    description:
      - The program by its section name in O(object), its C(SEC()) (as iproute2's C(sec) and xdp-loader's C(--section)
        take it), instead of O(program), for example C(redirect_xmit) or C(xdp1).
      - A section that holds several programs is an error listing them by function name; name one with O(program) then.
        A section the object does not have is an error listing its programs and sections.
      - Part of the program's identity as given; the result and the facts show the function loaded as C(program) and the
        section as C(section).
      - Mutually exclusive with O(program). Not available with O(backend=bcc).
    type: str
  constants:
    description:
      - 'Load-time settings written into the program''s C(const volatile) globals before loading, for example C({xdp_action:
        2}) to make C(xdp_drop_count) pass instead of drop.'
      - 'Values are integers or booleans, or C({ifindex: INTERFACE}) for an interface index: the name is resolved in the
        task''s network namespace when the program is loaded, for example C({redirect_ifindex: {ifindex: eth1}}). The
        resolved index is part of the program''s identity, so a target interface deleted and created again (with a new
        index) makes the next run reload.'
      - Unknown names are an error listing the known ones.
    type: dict
    default: {}
  state:
    description:
      - V(present) attaches (or upgrades) the program; V(absent) detaches it and removes its pins.
      - V(absent) for an interface that no longer exists removes the pins left for it (its program went with it) and reports
        a change once; V(present) fails on a missing interface.
    type: str
    choices:
      - present
      - absent
    default: present
  force:
    description:
      - Replace (V(present)) or remove (V(absent)) a program that this collection did not attach.
    type: bool
    default: false
  keep_maps:
    description:
      - With O(state=absent), keep the pinned maps so a later attach continues with their contents.
      - With O(shared_maps), keep the map set even when no other attachment names it; also when a program moves to another
        set (or from its own maps to a set), keep what it leaves.
    type: bool
    default: false
  map_migration:
    description:
      - What an upgrade does with a pinned map that the new object declares differently. Before loading, each map the
        new program would reuse from its pin is compared with the pinned map, key and value field by field through their
        BTF (name, offset, size, kind, signedness), and its type, max_entries and flags. An unchanged map is kept with
        its contents, as always.
      - V(fields) creates the new map beside the old one and copies every entry into it field by field by name before
        the new program goes on the hook. Integers are widened or narrowed where the value fits (else the upgrade fails
        naming the entry), fields only the new layout has are zero, value fields it no longer has are dropped, fields
        renamed by O(map_rename) carried under their new name, more entries (or fewer, where every entry fits), per-CPU
        values CPU by CPU. The new program is swapped in atomically as always, and then what the old map's counters gained
        between the copy and the swap (fields that are integers that count, not enums, booleans or bitfields) is added
        to the new map, and the old map is dropped. A change no copy carries (another map type, a key field removed without
        O(map_rename), a map without BTF whose sizes change, a map of maps, programs, devices or sockets such as a multicast
        set's groups) fails naming the map and the field, and changes nothing.
      - V(reset) starts each changed map empty; its old contents are dropped once the new program is on the hook, its
        pins and record written (and kept when the upgrade fails before).
      - V(refuse) fails on any difference, naming each map and each difference, and changes nothing (libbpf alone would
        reuse a map whose fields moved and read its bytes through the new layout, or fail with a bare C(Invalid argument)
        for a grown value or more entries).
      - The maps of a O(shared_maps) set are used by the set's other attachments too, so they move with it; the upgrade
        makes the new maps and copies the entries once, loads each other attachment's own program (its program, section
        and constants, on its own hook) from the same object over the new maps, and swaps this attachment's program and
        then each of theirs in turn, atomically on each hook. Until the last swap, frames on the hooks already swapped
        are counted in the new maps and the others in the old ones; what the old maps gained since the copy is added after
        the last swap, so every frame of every hook is counted once. The old maps are dropped only once every attachment
        is on the new ones; a failure before puts every attachment's old program back. RV(shared_maps_moved) lists the
        attachments moved, and their own tasks with the new object then have nothing to do. It is refused, naming the
        attachment, when one of them ran another object than this attachment (or, with O(revision=previous), has another
        previous revision), or is not on its hook as its record says; every run with a map set takes the set's lock and
        then the interfaces of the set's attachments, by name, so a run on another attachment of the set waits for the
        upgrade to end (an interface held for 30 s by a stuck run fails it, naming the lock and the process that holds
        it, and changes nothing).
      - Results and check mode list each map of the program with what becomes of it (RV(map_migration)).
      - O(revision=previous) after a migrating upgrade migrates back the same way, into the previous object's layout (the
        object store keeps it). The counters carried forward are carried back by field name, fields the upgrade added
        are dropped, and fields it removed come back zero (the old map was dropped once the upgrade's program was on the
        hook). Its O(map_migration) applies as to any upgrade.
      - The counters gained between the copy and the swap are added to the new map after the swap with the kernel's atomic
        adds, while the new program counts into the same values, so no frame is lost or counted twice.
      - A migrating upgrade that fails at any step, after the swap too, leaves the old program on the hook with its maps
        untouched. Its last step, the point of no return, drops the old maps; until then a failure swaps the old program
        back in the new one's place (atomically where the swap was, the same link, the netlink program or the tc filter
        replaced in place), puts back its pins and record, adds to the old maps what the new program counted in its moments
        on the hook (its counters, field by field back to the old layout, with the kernel's atomic adds, so that no frame
        is lost or counted twice; entries only the new program made are not carried) and drops the new maps. A run killed
        at any step leaves what the next run converges, whichever attachment of a map set it is for, since it reads the
        programs of every attachment of the maps; attachments moved to the new maps but not yet pinned and recorded there
        go back to their old programs, with what their new programs counted (the copy's snapshot, pinned beside the new
        map until the old map's gains are added, says what the new map holds of the old one; the same kernel run that
        adds the gains advances it by them, so a run killed right after adding them does not add them twice), and the
        run migrates the whole set again; once every attachment is pinned on the new maps, the old maps are dropped.
    type: str
    choices:
      - fields
      - reset
      - refuse
    default: fields
  map_rename:
    description:
      - 'With O(map_migration=fields), value fields renamed in the new object, by map: C({stats: {packets: pkts}}) carries
        the old field C(packets) of map C(stats) into the new field C(pkts).'
      - A map, old field or new field that does not exist fails the upgrade, naming it, and changes nothing.
      - The copy keeps the O(map_rename) it converted with beside its snapshot, so the run that recovers a killed migration
        converts by it too, whatever that run's own O(map_rename) says (or another task's).
    type: dict
    default: {}
  shared_maps:
    description:
      - Name of a map set shared with other attachments in the same network namespace. The program's maps are pinned in
        C(<pin_root>/<netns>/shared_maps/<name>/) instead of the attachment's own directory, and every attachment naming
        the same set uses the same maps, for example one multicast program on every port of a switch, whose groups M(ebpf.xdp.devmap_group)
        manages in that set.
      - The set is part of the program's identity; changing it reloads the program over the other set's maps.
      - O(state=absent) removes the set only when no other attachment names it and O(keep_maps) is false.
      - The maps of programs sharing a set have the same layout; an upgrade that changes it moves every attachment of
        the set (see O(map_migration)).
      - Without it, each attachment has maps of its own.
      - 1 to 64 of letters, digits, C(_) and C(-), starting with a letter or digit (the set is a directory of bpffs, which
        refuses C(.) in a name).
    type: str
  checksum:
    description:
      - The digest O(object) must have, as C(sha256:<64 hex digits>) (the notation of M(ansible.builtin.get_url)); M(ebpf.xdp.bpf_object)
        returns it as RV(ebpf.xdp.bpf_object#module:checksum).
      - An object with another digest is refused before anything of it is loaded into the kernel, in check mode too, and
        the message gives the expected and the actual digest.
      - Only sha256 is accepted.
      - With O(backend=bcc), the digest of O(source).
    type: str
  revision:
    description:
      - V(current) (the default when omitted) attaches the program the task names, as it always did. Each new program
        put on the hook is a new revision (numbered 1, 2, 3, ...); the one it replaced is kept as the hook's previous
        revision (object by digest, program, constants, map set, mode or method).
      - V(previous) puts the previous revision back in one step, atomically (a C(bpf_link_update) on the collection's
        link, a filter replaced in place), over the same pinned maps, so counters and tables continue. Its object is read
        from O(object_store), so it works even when the file at the old path has been overwritten or deleted since. The
        revision it replaced becomes the previous one.
      - With V(previous), O(object), O(program), O(section), O(constants), O(shared_maps) and O(checksum) must not be
        given (the revision brings its own, a program chosen by its section chosen so again and given its type by the
        hook again), and the revision's own mode or method, priority, handle and verdict are used, whatever the task says
        (give O(interface), O(netns), O(pin_root) and, for tc, the direction).
      - Rolling back is idempotent, it does not toggle; after a rollback, V(previous) again is no change (the revision
        put back says C(rolled_back) in RV(revision)). To go forward again, run the task with the new object; that is
        a new revision, and the rolled-back one becomes the previous.
      - With V(previous) and no previous revision (or no program of the collection) on the hook, or its object missing
        from O(object_store), the task fails and nothing is changed. Only objects are kept; a program compiled by bcc
        (O(backend=bcc)) cannot be put back this way.
    type: str
    choices:
      - current
      - previous
  object_store:
    description:
      - Directory on the managed host where the object of every attached revision is kept by its SHA-256 (C(<sha256>.o),
        mode 0600, the directory 0700), for O(revision=previous).
      - An object is removed once no ownership record on the host names it as its current or previous revision (a record
        whose pins are gone, after a reboot or a removed O(pin_root), stops counting when the store is next changed).
        Every pin root and network namespace of a host may share one store.
      - An absolute path without C(..) components.
      - The store must belong to the user the module runs as and be writable by no one else (and not be a symbolic link),
        and a kept object is loaded only when its bytes hash to the digest it is named by; a tampered entry or an untrusted
        store fails the task and changes nothing.
    type: path
    default: /var/lib/ebpf_xdp/revisions
  backend:
    description:
      - What turns the program into kernel instructions.
      - V(libbpf) loads a compiled BPF object (O(object), see M(ebpf.xdp.bpf_object)); compile once, load on many kernels
        (CO-RE), no kernel headers on the host.
      - V(bcc) compiles a bcc-dialect C source (O(source), with C(BPF_ARRAY), C(BPF_TABLE), C(map.increment()), ...) with
        bcc on the managed host at load time, against kernel headers (see O(kernel_headers)), and loads it; the program
        then goes through the same attach, ownership record, atomic upgrade and facts as any other. Needs bcc's Python
        binding (Debian C(python3-bpfcc)); a module running under a Python without it re-runs itself under the system
        Python that has it.
      - 'With V(bcc), the program''s identity is the source''s SHA-256, O(cflags), O(kernel_headers) and the running kernel''s
        release: an unchanged source on an unchanged kernel is no change; a host booted into another kernel compiles and
        reloads on the next run.'
      - 'With V(bcc), the tables are pinned by their bcc names in the attachment''s C(maps/) directory. bcc creates new
        tables on every load, so an upgrade copies each table''s contents (same name, type and sizes; hash and array tables)
        into the new program''s just before the swap: counters survive, except what the old program counts between the
        copy and the swap (microseconds). A table declared with bcc''s C(BPF_TABLE_PINNED) at a path of its own is reused
        by bcc itself and keeps everything.'
      - O(constants) and O(shared_maps) are not available with V(bcc); give settings as O(cflags) (C(-DNAME=value)).
    type: str
    choices:
      - libbpf
      - bcc
    default: libbpf
  source:
    description:
      - Path of the bcc-dialect C source on the managed host, with O(backend=bcc) (instead of O(object)). Required then
        when O(state=present).
    type: path
  cflags:
    description:
      - Extra compiler flags for bcc (O(backend=bcc)), for example C(-DXDP_ACTION=2). Part of the identity.
    type: list
    elements: str
    default: []
  kernel_headers:
    description:
      - 'With O(backend=bcc): a kernel headers tree to compile against (bcc''s C(BCC_KERNEL_SOURCE)) where the running
        kernel has no headers package, for example Debian''s C(/usr/src/linux-headers-6.1.0-NN-cloud-amd64). A Debian
        build directory (whose Makefile includes the C(-common) tree) is taken with its common tree.'
      - When omitted, bcc looks for C(/lib/modules/<release>/build) (the headers package of the running kernel) or the
        kernel's C(/sys/kernel/kheaders.tar.xz); without either the task fails, naming both ways out.
      - Headers of another kernel version are fine for XDP and tc programs (their context structures are UAPI); they would
        not be for kprobes.
    type: path
"""
