#!/usr/bin/env bash
# `make docs`: the collection's docs site, built the way antsibull-docs documents it (sphinx-init, then the
# build.sh it writes: antsibull-docs collection, then sphinx-build -W) into .build/docs; the site is
# .build/docs/build/html (index.html). Every module, filter, connection plugin and role argument spec, and
# the README's guides (scripts/docs_guides.py writes them to docs/docsite/rst first).
# --fail-on-error: a plugin whose documentation does not parse fails the build instead of getting an error page.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=$PWD/.venv/bin:$PATH ANSIBLE_CONFIG=$PWD/ansible.cfg ANSIBLE_COLLECTIONS_PATH=$PWD/.build/collections
python scripts/docs_guides.py
dest=.build/docs
rm -rf "$dest"
# antsibull-docs writes only into a directory that no one else can write to.
mkdir -p .build && mkdir -m 0755 "$dest"
# Its logging: problems on stderr and no ~/antsibull.log (docs/docsite/antsibull-logging.cfg), here and in the
# configuration the build.sh it writes uses.
logging=docs/docsite/antsibull-logging.cfg
antsibull-docs --config-file "$logging" sphinx-init --use-current --fail-on-error --dest-dir "$dest" \
	--project ebpf.xdp --title "ebpf.xdp: XDP and tc eBPF programs" ebpf.xdp >/dev/null
cat docs/docsite/conf_offline.py >>"$dest/conf.py"
cat "$logging" >>"$dest/antsibull-docs.cfg"
bash "$dest/build.sh"
echo "docs.sh: $PWD/$dest/build/html/index.html"
