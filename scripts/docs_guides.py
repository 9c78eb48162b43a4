"""The docs site's guides, from README.md: its user-facing sections, each an RST page (antsibull-docs' extra
docs take RST only) under docs/docsite/rst/, listed in docs/docsite/extra-docs.yml.

README.md stays the one source; `make docs` rewrites the pages, and tests/integration/test_docs_site.py fails
when a committed page differs from what the README gives (`--check`).
    python scripts/docs_guides.py [--check]
"""

import os
import re
import sys

import m2r2
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RST = os.path.join(ROOT, "docs", "docsite", "rst")
# README section (its "## " heading) -> page name; Content (the plugin list: the site has its own index) and
# Development (this repository's tree, not the collection's) are not guides.
GUIDES = {
    "What the collection does": "guide_overview",
    "On a real fleet": "guide_fleet",
    "Traffic": "guide_traffic",
    "Benchmark": "guide_benchmark",
    "Metrics": "guide_metrics",
}
HEADER = ".. Written by scripts/docs_guides.py from README.md's section \"{section}\"; edit the README, not this file.\n\n"


def sections(text):
    found, title, lines, fence = {}, None, [], False
    for line in text.splitlines():
        if line.startswith("```"):
            fence = not fence
        if not fence and line.startswith("## "):
            if title:
                found[title] = "\n".join(lines).strip() + "\n"
            title, lines = line[3:].strip(), []
        elif title:
            lines.append(line)
    if title:
        found[title] = "\n".join(lines).strip() + "\n"
    return found


def page(section, name, markdown):
    # Links into the repository's tree (docs/scale.md) or to other README sections lead nowhere on the site:
    # keep their text and name the file.
    markdown = re.sub(r"\[([^\]]+)\]\((#[^)]+)\)", r"\1", markdown)
    markdown = re.sub(r"\[([^\]]+)\]\((?!https?:)([^)]+)\)", r"\1 (`\2` in the collection's source)", markdown)
    # The section's own subsections become the page's sections (### -> ##, #### -> ###) under its title.
    markdown = re.sub(r"^#(#+) ", r"\1 ", markdown, flags=re.M)
    body = m2r2.convert("# %s\n\n%s" % (section, markdown))
    # m2r2 leaves some code spans in single backticks (after "...)" or before ":"), which RST reads as
    # references: make every one left literal (a link, `text <url>`_, keeps its underscore).
    body = re.sub(r"(?<![`\w])`([^`\n]+)`(?![`_])", r"``\1``", body)
    # A fence with no language: plain text (rstcheck, run by lint-collection-docs, wants a language).
    body = re.sub(r"^(\s*\.\. code-block::)$", r"\1 text", body, flags=re.M)
    return HEADER.format(section=section) + ".. _ansible_collections.ebpf.xdp.docsite.%s:\n\n%s" % (
        name, body.lstrip("\n"))


def pages():
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as readme:
        found = sections(readme.read())
    missing = sorted(set(GUIDES) - set(found))
    if missing:
        sys.exit("docs_guides.py: README.md has no section %s" % ", ".join(missing))
    return {name + ".rst": page(section, name, found[section]) for section, name in GUIDES.items()}


def extra_docs():
    return yaml.safe_dump({"sections": [{"title": "Guides", "toctree": list(GUIDES.values())}]},
                          sort_keys=False)


def main(check):
    wanted = {os.path.join(RST, name): text for name, text in pages().items()}
    wanted[os.path.join(ROOT, "docs", "docsite", "extra-docs.yml")] = "---\n" + extra_docs()
    stale = []
    for path, text in wanted.items():
        have = open(path, encoding="utf-8").read() if os.path.exists(path) else None
        if have == text:
            continue
        stale.append(os.path.relpath(path, ROOT))
        if not check:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as out:
                out.write(text)
    if check and stale:
        sys.exit("docs_guides.py: not what README.md gives (run make docs): %s" % ", ".join(stale))


if __name__ == "__main__":
    main("--check" in sys.argv[1:])
