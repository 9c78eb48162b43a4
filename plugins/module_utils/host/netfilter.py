# -*- coding: utf-8 -*-
# Copyright (c) ebpf.xdp contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""ebpf.xdp.netfilter_drop: the netfilter drop rules XDP is measured against, with their counters.

Private to the ebpf.xdp collection: the interface may change without notice.

Two baselines, each one rule that drops everything an interface receives
and counts it:

- iptables: `-i IFACE -m comment --comment "ebpf.xdp netfilter_drop" -j DROP`
  at the head of table raw, chain PREROUTING (IPv4 only, before conntrack).
  The comment is the ownership mark: a rule without it is never touched, and
  a rule with it belongs to the interface its `-i` names.
- nftables: one table per interface, `netdev ebpf_xdp_drop_IFACE`, whose one
  base chain hooks the device's ingress (every frame, any protocol) with one
  rule `counter drop`. A table per interface makes removal one `delete table`
  and lets a table that is not as written here be replaced in one
  transaction (the add/delete/add idiom); the name is the ownership mark.

Both are driven through their own command-line tools, run in the namespace
the caller entered (a child process inherits the network namespace), not
through pyroute2: its NFTables of Debian's 0.7.2 has no ingress hook, and
the rule iptables-nft writes carries an xtables match that only iptables
reads back. What the tools print is read in their machine formats: the
restore format of `iptables-save -c` (counters included) and nft's JSON;
nft's commands are JSON too, so an interface name never meets its grammar.
A reading is one process when the rule is there.
"""

from __future__ import annotations

import errno
import json
import shlex
from dataclasses import dataclass

from ansible_collections.ebpf.xdp.plugins.module_utils.host import netns as _netns
from ansible_collections.ebpf.xdp.plugins.module_utils._errors import EbpfXdpError

COMMENT = "ebpf.xdp netfilter_drop"
NFT_TABLE_PREFIX = "ebpf_xdp_drop_"
NFT_CHAIN = "ingress"
# Ahead of netdev ingress chains at the usual priority (filter, 0), so that the drop counts every frame.
NFT_PRIORITY = -500


class NetfilterError(EbpfXdpError):
    """A backend command that is missing or failed."""


@dataclass
class Rule:
    """One drop rule of ours as read: its text, what it counted, and whether it is exactly as written here."""

    text: str
    packets: int = 0
    bytes: int = 0
    exact: bool = True
    words: tuple = ()  # iptables: the rule's arguments after the chain, as iptables-save wrote them


class Backend:
    """One way to drop an interface's frames. run(argv) -> (rc, out, err) runs a command in the namespace the
    caller entered; a command not found is an OSError (ENOENT)."""

    name = ""
    package = ""  # Debian's, with the backend's commands: what the error for a missing command names

    def __init__(self, interface: str, run):
        self.interface = interface
        self._run = run

    def command(self, argv: list[str], tolerate_rc: bool = False) -> tuple[int, str, str]:
        try:
            rc, out, err = self._run(argv)
        except OSError as exc:
            if exc.errno != errno.ENOENT:
                raise
            raise NetfilterError("backend %s needs the command %s, which is not installed: install the package %s "
                                 "(Debian/Ubuntu: apt-get install %s)"
                                 % (self.name, argv[0], self.package, self.package)) from None
        if rc != 0 and not tolerate_rc:
            raise NetfilterError("`%s` failed (exit status %d): %s"
                                 % (shlex.join(argv), rc, (err or out).strip() or "no message"))
        return rc, out, err

    def wanted(self) -> str:
        """The rule's text as this module writes it (and read() reports an exact rule)."""
        raise NotImplementedError

    def read(self) -> list[Rule]:
        """Our rules for the interface, in the order they run."""
        raise NotImplementedError

    def write(self, rules: list[Rule]) -> None:
        """From the rules read, exactly one exact rule."""
        raise NotImplementedError

    def delete(self, rules: list[Rule]) -> None:
        """None of ours for the interface."""
        raise NotImplementedError


class Iptables(Backend):
    """The rule at the head of table raw, chain PREROUTING: read with iptables-save, changed with iptables."""

    name = package = "iptables"
    TABLE, CHAIN = "raw", "PREROUTING"

    def words(self) -> list[str]:
        return ["-i", self.interface, "-m", "comment", "--comment", COMMENT, "-j", "DROP"]

    def text(self, words) -> str:
        # Quoted as iptables-save quotes, so that a rule reads back as it was written.
        return "-t %s -A %s %s" % (self.TABLE, self.CHAIN,
                                   " ".join('"%s"' % word if " " in word else word for word in words))

    def wanted(self) -> str:
        return self.text(self.words())

    def ours(self, words: list[str]) -> bool:
        """Marked as ours (the comment) and for this interface."""
        pairs = list(zip(words, words[1:]))
        return ("--comment", COMMENT) in pairs and ("-i", self.interface) in pairs

    def read(self) -> list[Rule]:
        _rc, out, _err = self.command(["iptables-save", "-c", "-t", self.TABLE])
        rules = []
        for line in out.splitlines():
            counters, _sep, spec = line.partition(" ")
            if not (counters.startswith("[") and counters.endswith("]")):
                continue  # comments, the table, chain policies
            words = shlex.split(spec)
            if words[:2] != ["-A", self.CHAIN] or not self.ours(words[2:]):
                continue
            packets, _colon, octets = counters[1:-1].partition(":")
            rules.append(Rule(text=self.text(words[2:]), packets=int(packets), bytes=int(octets),
                              exact=words[2:] == self.words(), words=tuple(words[2:])))
        return rules

    def write(self, rules: list[Rule]) -> None:
        keep = kept(rules)
        if keep is None:
            # At the head: the drop sees every frame, whatever rules others keep in the chain.
            self.command(["iptables", "-w", "-t", self.TABLE, "-I", self.CHAIN, "1"] + self.words())
        self.delete([rule for rule in rules if rule is not keep])

    def delete(self, rules: list[Rule]) -> None:
        for rule in rules:
            # By its words, never by its number: a rule inserted by someone else meanwhile cannot be hit.
            self.command(["iptables", "-w", "-t", self.TABLE, "-D", self.CHAIN] + list(rule.words))


class Nftables(Backend):
    """A netdev table per interface, read and written as nft's JSON."""

    name = package = "nftables"

    @property
    def table(self) -> str:
        return NFT_TABLE_PREFIX + self.interface

    def table_ref(self) -> dict:
        return {"family": "netdev", "name": self.table}

    def wanted(self) -> str:
        return ('table netdev %s { chain %s { type filter hook ingress device "%s" priority %d; policy accept; '
                'counter drop comment "%s" } }' % (self.table, NFT_CHAIN, self.interface, NFT_PRIORITY, COMMENT))

    def nft(self, *commands: dict, tolerate_rc: bool = False) -> tuple[int, str, str]:
        # JSON on the command line (nft -j parses it as JSON): an interface name never meets nft's grammar.
        return self.command(["nft", "-j", json.dumps({"nftables": list(commands)})], tolerate_rc=tolerate_rc)

    @staticmethod
    def objects(out: str) -> list[dict]:
        try:
            return json.loads(out)["nftables"]
        except (ValueError, KeyError, TypeError):
            raise NetfilterError("nft printed no JSON listing: %r" % out[:200]) from None

    def read(self) -> list[Rule]:
        rc, out, _err = self.nft({"list": {"table": self.table_ref()}}, tolerate_rc=True)
        if rc != 0:
            # The usual reason is no such table; nft says so only in words (translated by the locale).
            _rc, tables, _err = self.nft({"list": {"tables": {"family": "netdev"}}})
            if not any(item.get("table", {}).get("name") == self.table for item in self.objects(tables)):
                return []
            _rc, out, _err = self.nft({"list": {"table": self.table_ref()}})  # there after all: nft's error
        return [self.as_rule(self.objects(out))]

    def as_rule(self, objects: list[dict]) -> Rule:
        """The table as one Rule: exact when it holds exactly the chain and the rule written here."""
        kinds = sorted(kind for item in objects for kind in item if kind != "metainfo")
        table = next((item["table"] for item in objects if "table" in item), {})
        chains = [item["chain"] for item in objects if "chain" in item]
        rules = [item["rule"] for item in objects if "rule" in item]
        exprs = rules[0].get("expr", []) if len(rules) == 1 else []
        counter = next((expr["counter"] for expr in exprs if isinstance(expr.get("counter"), dict)), {})
        exact = (kinds == ["chain", "rule", "table"] and not table.get("flags") and self.chain_exact(chains[0])
                 and rules[0].get("comment") == COMMENT and [list(expr) for expr in exprs] == [["counter"], ["drop"]])
        return Rule(text=self.wanted() if exact else "table netdev %s (not as this module writes it)" % self.table,
                    packets=counter.get("packets", 0), bytes=counter.get("bytes", 0), exact=exact)

    def chain_exact(self, chain: dict) -> bool:
        # nft 1.0.6 (Debian 12) leaves the device out of its JSON; where a later one prints it, it must be ours.
        return (chain.get("name") == NFT_CHAIN and chain.get("type") == "filter" and chain.get("hook") == "ingress"
                and chain.get("prio") == NFT_PRIORITY and chain.get("policy") == "accept"
                and chain.get("dev", self.interface) in (self.interface, [self.interface]))

    def write(self, rules: list[Rule]) -> None:
        table = self.table_ref()
        # A table not as written here is replaced in the same transaction (add, delete, add: the add makes the
        # delete safe), so the interface is never left without the drop once it had one.
        replace = [{"add": {"table": table}}, {"delete": {"table": table}}] if rules else []
        self.nft(*replace,
                 {"add": {"table": table}},
                 {"add": {"chain": dict(family="netdev", table=self.table, name=NFT_CHAIN, type="filter",
                                        hook="ingress", dev=self.interface, prio=NFT_PRIORITY, policy="accept")}},
                 {"add": {"rule": dict(family="netdev", table=self.table, chain=NFT_CHAIN, comment=COMMENT,
                                       expr=[{"counter": None}, {"drop": None}])}})

    def delete(self, rules: list[Rule]) -> None:
        if rules:
            self.nft({"delete": {"table": self.table_ref()}})


BACKEND_CLASSES = {"iptables": Iptables, "nftables": Nftables}


def kept(rules: list[Rule]) -> Rule | None:
    """The rule that stays when the rules read become the one wanted: the first exact one (its counters go on)."""
    return next((rule for rule in rules if rule.exact), None)


def converge(params: dict, check_mode: bool, run) -> dict:
    """netfilter_drop's work: the drop rule of params["backend"] on params["interface"] present or absent, and
    what it counted after the run (0 when absent); run(argv) -> (rc, out, err)."""
    interface, present = params["interface"], params["state"] == "present"
    backend = BACKEND_CLASSES[params["backend"]](interface, run)
    with _netns.netns(params["netns"]):
        if present:
            # Neither backend would say: iptables matches names, and recent kernels hook nft to a device to come.
            _netns.ifindex(interface)
        before = backend.read()
        changed = not (len(before) == 1 and before[0].exact) if present else bool(before)
        after = before
        if changed:
            if check_mode:
                keep = kept(before)
                after = [keep or Rule(text=backend.wanted())] if present else []
            else:
                (backend.write if present else backend.delete)(before)
                after = backend.read()
    counted = after[0] if after else Rule(text="")
    return {"changed": changed, "backend": backend.name, "interface": interface, "state": params["state"],
            "rule": backend.wanted() if present else None, "packets": counted.packets, "bytes": counted.bytes,
            "diff": {"before": {"rules": [rule.text for rule in before]},
                     "after": {"rules": [rule.text for rule in after]}}}
