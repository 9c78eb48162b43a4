#!/usr/bin/env bash
# The four-step rhythm on a scratch bpffs path (the host's /sys/fs/bpf is
# left alone): check mode, apply, check mode again, apply again. The last two
# must change nothing. The toolchain role is applied by ebpf.xdp.xdp_deploy,
# whose converge finds the host unprepared (converge.yml).
# Run with `ansible-test integration toolchain --local --allow-destructive
# --allow-root`, or directly with ANSIBLE_COLLECTIONS_PATH pointing at the
# collection (.build/collections in a checkout).
set -euo pipefail
shopt -s inherit_errexit
cd "$(dirname "$0")"

scratch=$(mktemp -d /tmp/ebpf-xdp-toolchain.XXXXXX)
rmdir "$scratch" # the role must create the mount point
tree=$(mktemp -d /tmp/ebpf-xdp-toolchain-tree.XXXXXX)
out=$(mktemp)
common=(-i inventory -e "toolchain_bpffs_path=$scratch" -e "toolchain_test_tree=$tree" "$@")

cleanup() {
	ansible-playbook cleanup.yml "${common[@]}" >/dev/null || true
	rm -rf "$out" "$tree"
}
trap cleanup EXIT

# Runs a playbook and prints the number of changed tasks from its recap.
changed() {
	ansible-playbook "$@" "${common[@]}" | tee "$out" >&2
	sed -n 's/^localhost .* changed=\([0-9]*\) .*/\1/p' "$out"
}

step() { # name, wanted ("0" or "some"), got
	if [[ $2 == 0 && $3 != 0 ]] || [[ $2 == some && $3 == 0 ]]; then
		echo "toolchain: FAILED $1: changed=$3, wanted $2" >&2
		exit 1
	fi
	echo "toolchain: ok $1 (changed=$3)"
}

# A failed playbook stops the script here (plain assignments keep set -e).
n=$(changed converge.yml --check)
step "check mode on a fresh path" some "$n"
n=$(changed converge.yml)
step "apply" some "$n"
ansible-playbook verify.yml "${common[@]}" >&2
n=$(changed converge.yml --check)
step "check mode again" 0 "$n"
n=$(changed converge.yml)
step "apply again" 0 "$n"
