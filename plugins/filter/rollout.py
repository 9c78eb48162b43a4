# -*- coding: utf-8 -*-
# Copyright (c) ebpf.xdp contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Pure logic of the ebpf.xdp.xdp_rollout role: the batches of a rollout and its health gate."""

from __future__ import annotations

from collections.abc import Mapping

from ansible.errors import AnsibleFilterError

RULE_KEYS = {"name", "interface", "metric", "per", "min", "max", "min_vs_before", "max_vs_before"}


def _batch_size(value, total):
    """Ansible's serial semantics (pct_to_int): N, or N% of every host of the play, at least 1."""
    text = str(value).strip()
    try:
        if text.endswith("%"):
            return int(float(text[:-1]) / 100.0 * total) or 1
        return int(text)
    except ValueError:
        raise AnsibleFilterError("rollout_batches: %r is neither a number of hosts nor a percentage" % (value,)) from None


def rollout_batches(hosts, serial):
    """The hosts of each batch, as ansible-playbook cuts them for `serial: serial` (the last size repeats)."""
    if not isinstance(serial, (list, tuple)):
        serial = [serial]
    hosts = list(hosts)
    total = len(hosts)
    sizes = [_batch_size(value, total) for value in serial] or [0]
    batches = []
    index = 0
    while hosts:
        size = sizes[min(index, len(sizes) - 1)]
        if size <= 0:
            batches.append(hosts)
            break
        batches.append(hosts[:size])
        hosts = hosts[size:]
        index += 1
    return batches


def _value(entry, path, rule):
    """The number at `path` (dotted) in one interface's facts; a dict is the sum of its numbers. A key missing
    from a map of counters is 0 (facts leave zero entries out); any other missing key is a mistake in the rule."""
    node = entry
    for depth, part in enumerate(path.split(".")):
        if node is None:
            raise _Unreadable("%s has no %s" % (".".join(path.split(".")[:depth]) or "the interface", part))
        if not isinstance(node, dict):
            raise AnsibleFilterError("rule %r: %s is not a dict at %r" % (rule, path, part))
        if part not in node:
            if node and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in node.values()):
                return 0
            raise _Unreadable("%s not found (rates need xdp_rollout_rate_interval > 0)" % path)
        node = node[part]
    return _total(node)


def _total(node):
    if isinstance(node, dict):
        return sum(_total(v) for v in node.values())
    if isinstance(node, (int, float)) and not isinstance(node, bool):
        return node
    return 0


class _Unreadable(Exception):
    pass


def _check_rule(rule):
    if not isinstance(rule, dict) or "interface" not in rule or "metric" not in rule:
        raise AnsibleFilterError("rollout_health: a rule needs interface and metric: %r" % (rule,))
    unknown = sorted(set(rule) - RULE_KEYS)
    if unknown:
        raise AnsibleFilterError("rollout_health: rule %r has unknown keys %s (known: %s)"
                                 % (rule.get("name", rule["metric"]), ", ".join(unknown), ", ".join(sorted(RULE_KEYS))))


def _measure(facts, rule):
    entry = (facts or {}).get("interfaces", {}).get(rule["interface"])
    if entry is None:
        raise _Unreadable("interface %s is not in the facts" % rule["interface"])
    value = _value(entry, rule["metric"], rule)
    if "per" in rule:
        whole = _value(entry, rule["per"], rule)
        value = value / whole if whole else 0.0
    return value


def _attached_problems(facts, expected):
    problems = []
    interfaces = (facts or {}).get("interfaces", {})
    for want in expected or []:
        entry = interfaces.get(want["interface"]) or {}
        label = "%s %s%s" % (want["interface"], want.get("direction", "") if want["hook"] == "tc" else "XDP",
                             " " + want["name"] if want.get("name") else "")
        if want["hook"] == "xdp":
            found = [entry["xdp"]] if entry.get("xdp") else []
        else:
            found = (entry.get("tc") or {}).get(want.get("direction", "ingress"), [])
        if not any(prog.get("id") == want["id"] for prog in found):
            seen = ", ".join("id %s (%s)" % (p.get("id"), p.get("name")) for p in found) or "no program"
            problems.append("%s: program id %s (%s, tag %s) expected, found %s"
                            % (label.strip(), want["id"], want.get("program_name"), want.get("tag"), seen))
    return problems


def rollout_health(facts, rules, before=None, expected=None):
    """Why the host is not healthy (an empty list when it is): `facts` (ansible_facts.xdp after the change, read
    with rates) against the expected attachments (id on each interface) and each rule's bounds."""
    problems = _attached_problems(facts, expected)
    for rule in rules or []:
        _check_rule(rule)
        label = "%s (%s %s)" % (rule.get("name", rule["metric"]), rule["interface"], rule["metric"])
        try:
            value = _measure(facts, rule)
        except _Unreadable as exc:
            problems.append("%s: %s" % (label, exc))
            continue
        if "min" in rule and value < float(rule["min"]):
            problems.append("%s: %g < min %g" % (label, value, float(rule["min"])))
        if "max" in rule and value > float(rule["max"]):
            problems.append("%s: %g > max %g" % (label, value, float(rule["max"])))
        if "min_vs_before" in rule or "max_vs_before" in rule:
            try:
                earlier = _measure(before, rule) if before else 0
            except _Unreadable:
                earlier = 0
            # Without a reading before the change (no traffic, no program) there is nothing to compare with.
            if earlier:
                ratio = value / earlier
                if "min_vs_before" in rule and ratio < float(rule["min_vs_before"]):
                    problems.append("%s: %g is %.2f of %g before the change, < min_vs_before %g"
                                    % (label, value, ratio, earlier, float(rule["min_vs_before"])))
                if "max_vs_before" in rule and ratio > float(rule["max_vs_before"]):
                    problems.append("%s: %g is %.2f of %g before the change, > max_vs_before %g"
                                    % (label, value, ratio, earlier, float(rule["max_vs_before"])))
    return problems


IDENTITY = ("interface", "netns", "direction", "name", "method", "priority", "handle")


def _results(registered):
    return (registered or {}).get("results") or []


def _declared(result, hook):
    item = result.get("item") or {}
    entry = {"hook": hook}
    entry.update((key, item[key]) for key in IDENTITY if item.get(key) is not None)
    return entry


def rollout_changes(xdp_results, tc_results=None):
    """What a converge changed, from the registered results of its xdp_program and tc_program loops: each
    attachment it put in place (not a removal, not a failed item) with `previous`, whether a revision was
    attached before it (else a rollback removes it)."""
    changes = []
    for hook, registered in (("xdp", xdp_results), ("tc", tc_results)):
        for result in _results(registered):
            item = result.get("item") or {}
            if not result.get("changed") or result.get("failed") or item.get("state", "present") != "present":
                continue
            entry = _declared(result, hook)
            entry["previous"] = result.get("previous_revision") is not None
            changes.append(entry)
    return changes


def rollout_attached(xdp_results, tc_results=None):
    """What a converge left attached: each attachment (its identity: a named attachment keeps its `name`) with
    the kernel id, tag and name (`program_name`) of its program."""
    attached = []
    for hook, registered in (("xdp", xdp_results), ("tc", tc_results)):
        for result in _results(registered):
            if result.get("failed") or not result.get("attached") or result.get("id") is None:
                continue
            entry = _declared(result, hook)
            if hook == "tc":
                entry["direction"] = result.get("direction") or entry.get("direction", "ingress")
            entry.update(id=result["id"], tag=result.get("tag"), program_name=result.get("name"))
            if result.get("revision") is not None:
                entry["revision"] = result["revision"].get("number")
            attached.append(entry)
    return attached


def replay_findings(results, max_changed=0, allowed=None):
    """The replay gate's findings, from the registered results of its ebpf.xdp.replay loop: per attachment,
    the frames whose verdict would change (less those of the allowed transitions) and, when they are more than
    max_changed, a problem that names the attachment and the transitions; an empty problem otherwise."""
    allowed = set(allowed or [])
    findings = []
    for result in results or []:
        item = result.get("item", {})
        where = "%s %s%s%s" % (item.get("interface"), item.get("hook"),
                               " " + item["direction"] if item.get("hook") == "tc" and item.get("direction") else "",
                               " " + item["name"] if item.get("name") else "")
        finding = {"hook": item.get("hook"), "interface": item.get("interface"), "netns": item.get("netns"),
                   "compared": bool(result.get("compared")), "frames": result.get("frames", 0), "problem": ""}
        if result.get("failed"):
            finding["problem"] = "replay of %s failed: %s" % (where, result.get("msg", "see the task above"))
        elif finding["compared"]:
            steps = {name: step["frames"] for name, step in result.get("transitions", {}).items()}
            counted = sum(frames for name, frames in steps.items() if name not in allowed)
            finding.update(transitions=steps, changed_verdicts=counted)
            if counted > max_changed:
                finding["problem"] = "replay of %s: %d of %d frames would change verdict (%s), more than %d" % (
                    where, counted, finding["frames"],
                    ", ".join("%s: %d" % (name, frames) for name, frames in sorted(steps.items())
                              if name not in allowed), max_changed)
        findings.append(finding)
    return findings


def rollout_batch_unchanged(hosts, hostvars, registered="__xdp_deploy_datapath"):
    """Whether the converge of ebpf.xdp.xdp_deploy (its registered __xdp_deploy_datapath, or another
    registered result of the same task, such as its check-mode probe xdp_deploy_probe) ran on every host and
    left each as it was (would leave, for a probe), with nothing more to do: no toolchain to install, no bcc
    entry to attach."""
    for host in hosts:
        variables = hostvars[host]
        result = variables.get(registered)
        # changes: what the run made (would make, in check mode), also where changed_when hid it (a probe's).
        if not isinstance(result, Mapping) or any(
                result.get(key) for key in ("failed", "skipped", "unreachable", "changed", "changes")):
            return False
        if result.get("toolchain") is not None:
            return False
        entries = list(variables.get("xdp_deploy_programs") or []) + list(variables.get("xdp_deploy_tc_programs") or [])
        if any(isinstance(entry, Mapping) and entry.get("backend") == "bcc" for entry in entries):
            return False
    return True


STATUSES = ("updated", "unchanged", "would_change", "rolled_back", "rollback_failed")


def rollout_statuses(hosts, hostvars):
    """Where each host of a rollout stands, from its xdp_rollout_status and xdp_rollout_problems: the hosts of
    each status, those never reached (untouched), and the problems of each host that had some. One pass over
    the hosts' variables (each reference of hostvars in a template reads a host's variables anew)."""
    found = {status: [] for status in STATUSES}
    found.update(untouched=[], problems={})
    for host in hosts:
        variables = hostvars[host]
        status = variables.get("xdp_rollout_status")
        if status is None:
            found["untouched"].append(host)
        elif status in found and status not in ("untouched", "problems"):
            found[status].append(host)
        problems = variables.get("xdp_rollout_problems")
        if problems:
            found["problems"][host] = list(problems)
    return found


class FilterModule:
    def filters(self):
        return {"rollout_batches": rollout_batches, "rollout_health": rollout_health,
                "rollout_changes": rollout_changes, "rollout_attached": rollout_attached,
                "replay_findings": replay_findings, "rollout_batch_unchanged": rollout_batch_unchanged,
                "rollout_statuses": rollout_statuses}
