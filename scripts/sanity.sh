#!/bin/bash
# ansible-test needs the collection at ansible_collections/ebpf/xdp; copy the
# files git knows about (tracked or new, not ignored) into such a tree.
set -euo pipefail
cd "$(dirname "$0")/.."
dest=.build/sanity/ansible_collections/ebpf/xdp
rm -rf .build/sanity
mkdir -p "$dest"
git ls-files -z --cached --others --exclude-standard | xargs -0 cp --parents -t "$dest"
cd "$dest"
# --venv: each test gets the tool versions ansible-test pins (downloaded from PyPI).
exec ansible-test sanity --venv --python 3.11 --color no "$@"
