"""The modules' options from their one source, docs/options.yml (issue 39 item 3).

Each option set there is written out as what Ansible reads in its place:
  - the argument specs, plugins/module_utils/_argspecs.py (what _common composes the modules' specs from);
  - a doc fragment, plugins/doc_fragments/<fragment>.py, for a set shared by several modules;
  - the module's DOCUMENTATION, between its "# BEGIN options" and "# END options" lines, for a module's own set
    (Ansible takes DOCUMENTATION as a literal string in the module, so the copy is written into it);
  - a role's argument spec, between the same lines in its meta/argument_specs.yml, for a role option that takes
    a module's options (the role's own words and differences are in the source too).
tests/unit/plugins/test_options.py fails when a written file differs from what the source gives (--check).

    python scripts/options.py [--check]
"""

from __future__ import annotations

import json
import os
import re
import sys

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCE = os.path.join(ROOT, "docs", "options.yml")
ARGSPECS = os.path.join(ROOT, "plugins", "module_utils", "_argspecs.py")
# What an argument spec takes of an option's documentation (suboptions become options); the rest is for readers.
SPEC_KEYS = ("type", "required", "default", "choices", "elements", "aliases", "no_log")
WIDTH = 116
BEGIN, END = "# BEGIN options", "# END options"
WRITTEN_BY = "Written by scripts/options.py from docs/options.yml (%s):\nedit it there, not here."

LICENSE = """# -*- coding: utf-8 -*-
# Copyright (c) ebpf.xdp contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""


class Dumper(yaml.SafeDumper):
    """Block style, lists indented under their key, as the hand-written files were."""

    def increase_indent(self, flow=False, indentless=False):
        return super().increase_indent(flow, False)


def dump(data, indent: int) -> str:
    text = yaml.dump(data, Dumper=Dumper, sort_keys=False, width=WIDTH - indent, allow_unicode=True,
                     default_flow_style=False)
    return "".join(" " * indent + line if line.strip() else line for line in text.splitlines(True))


def load():
    with open(SOURCE, encoding="utf-8") as source:
        return yaml.safe_load(source)


# ---------------------------------------------------------------- argument specs


def spec_of(option: dict) -> dict:
    out = {key: option[key] for key in SPEC_KEYS if key in option}
    if "suboptions" in option:
        out["options"] = {name: spec_of(sub) for name, sub in option["suboptions"].items()}
    out.update(option.get("spec", {}))
    return out


def literal(value, indent: int) -> str:
    """value as a Python literal in the collection's style (dict(...) for specs, double quotes), its lines
    continued at indent + 4 where it does not fit on one."""
    if isinstance(value, dict) and value and all(re.fullmatch(r"[a-z_]+", k) for k in value):
        items = ["%s=%s" % (k, literal(v, indent + 4)) for k, v in value.items()]
        one = "dict(%s)" % ", ".join(items)
        if len(one) + indent <= WIDTH and "\n" not in one:
            return one
        return "dict(\n%s)" % ",\n".join(" " * (indent + 4) + item for item in items)
    if isinstance(value, dict):
        return "{%s}" % ", ".join("%s: %s" % (literal(k, indent), literal(v, indent)) for k, v in value.items())
    if isinstance(value, list):
        return "[%s]" % ", ".join(literal(v, indent) for v in value)
    if isinstance(value, str):
        return json.dumps(value)
    return repr(value)


def argspecs(source: dict) -> str:
    lines = [LICENSE, '"""The option sets of the modules\' argument specs, without their documentation.\n\n%s\n'
             'Private to the ebpf.xdp collection: the interface may change without notice.\n"""\n'
             % (WRITTEN_BY % "every set"), "from __future__ import annotations\n"]
    for name, option_set in source["sets"].items():
        lines.append("\n# %s: %s" % (name, option_set["about"]))
        lines.append("%s = dict(" % option_set["argspec"])
        for option, doc in option_set["options"].items():
            lines.append("    %s=%s," % (option, literal(spec_of(doc), 4)))
        lines.append(")")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- documentation


def documentation(option_set: dict) -> dict:
    """The options as DOCUMENTATION has them (without what only the argument spec takes)."""
    def doc(option):
        out = {k: v for k, v in option.items() if k not in ("spec",)}
        if "suboptions" in out:
            out["suboptions"] = {name: doc(sub) for name, sub in out["suboptions"].items()}
        return out
    return {name: doc(option) for name, option in option_set["options"].items()}


def fragment(name: str, option_set: dict) -> str:
    body = dump({"options": documentation(option_set)}, 0)
    return (LICENSE + "\nfrom __future__ import annotations\n\n\nclass ModuleDocFragment:\n    # %s\n"
            '    DOCUMENTATION = r"""\n%s"""\n' % ((WRITTEN_BY % ("set " + name)).replace("\n", "\n    # "), body))


def role_options(source: dict, role_option: dict) -> dict:
    """A role option's sub-options: each taken from the module's option set, then changed as the role says (a
    null removes the key); `only` ones are the role's alone."""
    merged = {}
    for set_name in role_option["from"]:
        merged.update(source["sets"][set_name]["options"])
    out = {}
    for name, change in role_option["options"].items():
        option = {k: v for k, v in merged.get(name, {}).items() if k in SPEC_KEYS}
        if "suboptions" in merged.get(name, {}):
            option["options"] = merged[name]["suboptions"]
        option.update(change)
        ordered = {k: option[k] for k in ("description",) if k in option}
        ordered.update((k, v) for k, v in option.items() if k != "description" and v is not None)
        out[name] = ordered
    return out


def replace_region(text: str, what: str, region: str, indent: int) -> str:
    """text with the lines between the BEGIN and END marker of `what` replaced by region."""
    marks = (re.escape(BEGIN), re.escape(what), re.escape(END), re.escape(what))
    pattern = re.compile(r"(?m)^( *)%s %s\n.*?^ *%s %s\n" % marks, re.S)
    found = pattern.search(text)
    if not found:
        raise SystemExit("options.py: no '%s %s' ... '%s %s' lines to write into" % (BEGIN, what, END, what))
    pad = found.group(1)
    block = "%s%s %s\n%s%s%s %s\n" % (pad, BEGIN, what, region, pad, END, what)
    assert len(pad) == indent, (what, len(pad), indent)
    return text[:found.start()] + block + text[found.end():]


# ---------------------------------------------------------------- files


def outputs(source: dict) -> dict[str, str]:
    """Every written file's path -> the text it must have."""
    out = {ARGSPECS: argspecs(source)}
    for name, option_set in source["sets"].items():
        if "fragment" in option_set:
            out[os.path.join(ROOT, "plugins", "doc_fragments", option_set["fragment"] + ".py")] = \
                fragment(name, option_set)
        if "module" in option_set:
            path = os.path.join(ROOT, "plugins", "modules", option_set["module"] + ".py")
            text = out.get(path) or read(path)
            out[path] = replace_region(text, "(%s)" % name, dump(documentation(option_set), 2), 2)
    for name, role_option in source["roles"].items():
        path = os.path.join(ROOT, role_option["file"])
        text = out.get(path) or read(path)
        out[path] = replace_region(text, "(%s)" % name, dump(role_options(source, role_option), 10), 10)
    return out


def read(path: str) -> str:
    with open(path, encoding="utf-8") as existing:
        return existing.read()


def main(argv: list[str]) -> None:
    check = "--check" in argv
    stale = []
    for path, text in outputs(load()).items():
        if os.path.exists(path) and read(path) == text:
            continue
        stale.append(os.path.relpath(path, ROOT))
        if not check:
            with open(path, "w", encoding="utf-8") as out:
                out.write(text)
    if check and stale:
        sys.exit("options.py: not what docs/options.yml gives (run python scripts/options.py): %s" % ", ".join(stale))


if __name__ == "__main__":
    main(sys.argv[1:])
