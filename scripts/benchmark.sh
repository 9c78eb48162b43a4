#!/usr/bin/env bash
# `make benchmark` / `make benchmark-smoke`: run every tests/benchmarks/*.py,
# passing on the arguments, then remove the lab (even after a failure).
#   bash scripts/benchmark.sh            full runs
#   bash scripts/benchmark.sh --smoke    one short round each: do they still work?
# Each benchmark brings up what it needs (the lab, a deployment) itself and
# must accept --smoke. It passes when it exits 0 and prints its figures.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

out=$(mktemp)
cleanup() {
	local rc=$?
	"$ROOT/.venv/bin/ansible-playbook" "$ROOT/playbooks/lab_down.yml" >"$out" 2>&1 || {
		cat "$out"
		echo "benchmark.sh: lab_down.yml failed" >&2
		rc=1
	}
	rm -f "$out"
	exit "$rc"
}
trap cleanup EXIT

# Left out of the smoke (make test): slices.py --smoke takes ~4 min (a lab and
# seven ansible-runner jobs); tests/integration/test_rollout_slices.py asserts
# the same on four hosts.
smoke_skip=" tests/benchmarks/slices.py "

failed=()
for bench in tests/benchmarks/*.py; do
	if [[ " $* " == *" --smoke "* && $smoke_skip == *" $bench "* ]]; then
		echo "== $bench: not in the smoke (tests/integration/test_rollout_slices.py)"
		continue
	fi
	echo "== $bench $*"
	if ! "$ROOT/.venv/bin/python" "$bench" "$@" | tee "$out"; then
		failed+=("$bench")
	elif [[ ! -s $out ]]; then
		echo "$bench printed no figures" >&2
		failed+=("$bench")
	fi
done
if ((${#failed[@]})); then
	echo "benchmark.sh: failed: ${failed[*]}" >&2
	exit 1
fi
