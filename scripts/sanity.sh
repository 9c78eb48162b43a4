#!/usr/bin/env bash
# ansible-test needs the collection at ansible_collections/ebpf/xdp; copy the
# files git knows about (tracked or new, not ignored) into such a tree, outside
# this checkout (ansible-test would otherwise see the checkout's git instead).
set -euo pipefail
cd "$(dirname "$0")/.."
# ansible-test --venv fetches pip from a host that is not reachable here, so
# the sanity tools (versions pinned by ansible-test) live in a venv of their own.
venv=$PWD/.build/sanity-venv
core=$(.venv/bin/python -c 'import ansible; print(ansible.__version__)')
if [[ "$(cat "$venv/.core" 2>/dev/null)" != "$core" ]]; then
	rm -rf "$venv"
	/usr/bin/python3 -m venv "$venv"
	"$venv/bin/pip" install -q --disable-pip-version-check "ansible-core==$core"
	echo "$core" >"$venv/.core"
fi
# ansible-test bootstraps pip in each test venv with get-pip.py from
# ci-files.testing.ansible.com (not reachable): stand in with pip's own
# `pip install`, which fetches from PyPI.
pip_version=$("$venv/bin/python" - <<'PY'
import re, ansible_test, os
src = open(os.path.join(os.path.dirname(ansible_test.__file__), "_internal", "python_requirements.py")).read()
print(re.search(r"pip='([0-9.]+)'", src).group(1))
PY
)
bootstrap_pip=$PWD/.build/pip-bootstrap
if [[ ! -d $bootstrap_pip/pip ]]; then
	mkdir -p "$bootstrap_pip"
	cp -r "$("$venv/bin/python" -c 'import os, pip; print(os.path.dirname(pip.__file__))')" "$bootstrap_pip/"
fi
# ansible-test keeps its test venvs and caches under ~/.ansible/test: a home of the checkout's own, so that two
# checkouts' runs at once do not replace each other's venvs (CI's pep8 venv vanished under it so) and make test
# leaves nothing in the user's home.
sanity_home=$PWD/.build/sanity-home
get_pip=$sanity_home/.ansible/test/cache/get_pip_${pip_version//./_}.py
mkdir -p "$(dirname "$get_pip")"
cat >"$get_pip" <<PY
# Written by ebpf.xdp scripts/sanity.sh in place of get-pip.py.
import runpy, sys
sys.path.insert(0, "$bootstrap_pip")
# get-pip.py options that pip install does not know.
sys.argv = ["pip", "install"] + [a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel")]
runpy.run_module("pip", run_name="__main__", alter_sys=True)
PY
work=$(mktemp -d /tmp/ebpf_xdp_sanity.XXXXXX)
trap 'rm -rf "$work"' EXIT
dest=$work/ansible_collections/ebpf/xdp
mkdir -p "$dest"
git ls-files -z --cached --others --exclude-standard | xargs -0 cp --parents -t "$dest"
cd "$dest"
git init -q && git add -A
HOME=$sanity_home PATH=$venv/bin:$PATH ansible-test sanity --requirements --python 3.11 --color no "$@"
