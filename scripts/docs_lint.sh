#!/usr/bin/env bash
# `make docs-lint` (make test runs it beside molecule, with sanity and lint): what docs builds and Galaxy read
# of the collection's documentation.
#  - antsibull-docs lint-collection-docs --plugin-docs: every plugin's and role argument spec's documentation
#    (markup, references, schema), docs/docsite/*.yml and the extra docs' RST;
#  - ansible-doc --metadata-dump: the documentation Ansible itself loads, which must hold no `error` entry;
#  - the guides under docs/docsite/rst are what README.md gives (scripts/docs_guides.py --check).
# Both tools want the collection at ansible_collections/ebpf/xdp: .build/collections links there.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
export PATH=$ROOT/.venv/bin:$PATH ANSIBLE_CONFIG=$ROOT/ansible.cfg ANSIBLE_COLLECTIONS_PATH=$ROOT/.build/collections
python scripts/docs_guides.py --check
cd .build/collections/ansible_collections/ebpf/xdp
antsibull-docs --config-file "$ROOT/docs/docsite/antsibull-logging.cfg" lint-collection-docs --plugin-docs .
dump=$(mktemp)
trap 'rm -f "$dump"' EXIT
ansible-doc --metadata-dump --no-fail-on-errors ebpf.xdp >"$dump"
python - "$dump" <<'PY'
import json, sys
dump = json.load(open(sys.argv[1]))
# With --no-fail-on-errors, a plugin or role whose documentation does not load is the entry {"error": ...}
# (an option named error is no such entry).
errors = ["%s %s: %s" % (kind, name, entry["error"]) for kind, plugins in dump.get("all", {}).items()
          for name, entry in plugins.items() if isinstance(entry, dict) and "error" in entry]
plugins = sum(len(v) for v in dump.get("all", {}).values())
if errors:
    sys.exit("docs_lint.sh: ansible-doc --metadata-dump has errors:\n" + "\n".join(errors))
print("docs_lint.sh: ansible-doc --metadata-dump: %d plugins and roles, no error" % plugins)
PY
