#!/usr/bin/env bash
# make test, after set-up: every test, step by step, and each step's time.
#  1. the unit tests
#  2. the integration tests that can share the machine (make
#     integration-shared), with the VM's and molecule's images built beside
#     them
#  3. make test-vm (the VM's tests over SSH, then the kernel-dependent tests
#     inside it), and beside it molecule, then sanity, lint and the docs' lint
#  4. the integration tests marked quiet (rates, timing, snapshots of the
#     whole host), the toolchain target, the benchmarks' smoke runs
#  5. nothing left in the user's home by any step (no copy of the collection
#     in ~/.ansible, no file or directory of any tool)
# Not here: make test-long, make test-ee, make test-debian12 (README, "Tests").
# Side by side pays only where a step leaves a CPU idle: test-vm beside the
# integration tests made both slower (the emulated VM and the tests each
# want a CPU: 2704 s and 1630 s side by side; alone, in the run before,
# 2032 s for all the integration tests and ~810 s for test-vm). Molecule,
# sanity and lint measure nothing and wait on podman and subprocesses much of
# their time, and nothing the VM's tests assert is a rate or a deadline of
# this machine's, so they share test-vm's minutes (they took 202 s and 90 s
# after it, one beside the other, in the last run that had them apart).
# A step beside another writes its output to .build/test-logs/NAME.log,
# printed here when it ends. Every step runs even when an earlier one failed;
# the summary lists each with its time, and the exit status says whether all
# passed.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
LOGS=.build/test-logs
mkdir -p "$LOGS"
MAKE_STEP=(make --no-print-directory)
results=()
declare -A beside_pids

record() { # name, exit status, seconds
	local verdict=passed
	(($2 == 0)) || verdict="FAILED (exit $2)"
	results+=("$(printf '%-22s %-16s %5d s' "$1" "$verdict" "$3")")
	echo "test.sh: $1 $verdict in $3 s"
}

step() { # name, command...: run here
	local name=$1 start=$SECONDS rc=0
	shift
	echo
	echo "== test.sh: $name"
	"$@" || rc=$?
	record "$name" "$rc" $((SECONDS - start))
}

beside() { # name, command...: run in the background
	local name=$1
	shift
	echo "== test.sh: $name, beside the next steps (output: $LOGS/$name.log)"
	(
		start=$SECONDS rc=0
		"$@" >"$LOGS/$name.log" 2>&1 || rc=$?
		echo "$rc $((SECONDS - start))" >"$LOGS/$name.status"
	) &
	beside_pids[$name]=$!
}

collect() { # name: wait for a step run beside, show its output and record it
	local name=$1 rc secs
	wait "${beside_pids[$name]}"
	echo
	echo "== test.sh: $name (ran beside the steps above)"
	cat "$LOGS/$name.log"
	read -r rc secs <"$LOGS/$name.status" || { rc=1 secs=0; }
	record "$name" "$rc" "$secs"
}

start=$SECONDS
# No step may install a copy of the collection into the user's home: one there
# shadows every other install for later runs without a collections path
# (ansible-lint's did until .ansible-lint said offline). A copy left by an
# earlier run is reported, not removed (it is the user's home).
home_copy=${ANSIBLE_HOME:-$HOME/.ansible}/collections/ansible_collections/ebpf/xdp
home_copy_before=$(stat -c %Y "$home_copy/MANIFEST.json" 2>/dev/null || echo absent)
[[ $home_copy_before == absent ]] ||
	echo "test.sh: $home_copy holds a copy of the collection from an earlier run; remove it"
# Nor anything else: what the user's home holds at its top and in the
# directories tools keep per user, before and after.
home_entries() {
	local dir
	for dir in "$HOME" "$HOME"/{.ansible,.ansible_async,.cache,.config,.local,.local/share}; do
		[[ ! -d $dir ]] || find "$dir" -mindepth 1 -maxdepth 1 -printf '%p\n'
	done | sort
}
home_before=$(home_entries)
# So the tools' per-user state goes under .build/test-home: Ansible's directory
# (its temporary files and galaxy cache, and molecule's scenario state, which
# follows ANSIBLE_HOME), the hosts' side of the local and
# netns connections (remote_tmp and async job files: the lab's hosts are this
# machine) and matplotlib's caches (the benchmark's plots); the SSH control
# sockets (~/.ansible/cp, whatever ANSIBLE_HOME says) in a private directory
# short enough for a socket's path. antsibull-docs logs no ~/antsibull.log
# (scripts/docs.sh, docs_lint.sh), Chromium gets a profile of its own
# (test_docs_site.py), and molecule, whose podman driver keeps its async jobs
# under $HOME whatever Ansible is told, a home of its own (below).
test_home=$PWD/.build/test-home
mkdir -p "$test_home"
ssh_control_dir=$(mktemp -d "${TMPDIR:-/tmp}/ebpf-xdp-cp.XXXXXX")
trap 'rm -rf "$ssh_control_dir"' EXIT
export ANSIBLE_HOME=$test_home/ansible ANSIBLE_REMOTE_TMP=$test_home/ansible-remote/tmp \
	ANSIBLE_ASYNC_DIR=$test_home/ansible-remote/async MPLCONFIGDIR=$test_home/matplotlib \
	ANSIBLE_SSH_CONTROL_PATH_DIR=$ssh_control_dir

# The VM's disk image and molecule's container image (debootstrap: mostly
# downloads and unpacking, ~150 s and ~100 s on a fresh machine), one after the
# other (each installs its apt packages first), while the first steps run: they
# end long before the integration tests do. The execution environment's image
# and its test are make test-ee's.
beside images bash -c "bash scripts/vm.sh build && bash scripts/molecule.sh image"
step unit "${MAKE_STEP[@]}" unit

step integration "${MAKE_STEP[@]}" integration-shared
collect images

beside test-vm bash scripts/test_vm.sh
step molecule env HOME="$test_home/molecule" bash scripts/molecule.sh
step sanity-and-lint bash -c "${MAKE_STEP[*]} sanity && ${MAKE_STEP[*]} lint && ${MAKE_STEP[*]} docs-lint"
collect test-vm

step integration-quiet "${MAKE_STEP[@]}" integration-quiet
step benchmark-smoke bash scripts/benchmark.sh --smoke

home_start=$SECONDS
home_rc=0
if [[ "$(stat -c %Y "$home_copy/MANIFEST.json" 2>/dev/null || echo absent)" != "$home_copy_before" ]]; then
	echo "test.sh: a step installed a copy of the collection into $home_copy"
	home_rc=1
fi
home_new=$(comm -13 <(echo "$home_before") <(home_entries))
if [[ -n $home_new ]]; then
	echo "test.sh: the steps left these in the user's home:"
	echo "$home_new"
	home_rc=1
fi
record home-untouched "$home_rc" $((SECONDS - home_start))

echo
echo "== test.sh: summary ($((SECONDS - start)) s in all)"
printf '%s\n' "${results[@]}"
! printf '%s\n' "${results[@]}" | grep -q FAILED
