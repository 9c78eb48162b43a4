#!/usr/bin/env bash
# `make molecule`: run the molecule scenarios in podman containers.
#   bash scripts/molecule.sh             molecule test (scenario default)
#   bash scripts/molecule.sh converge    any molecule command and its arguments
#   bash scripts/molecule.sh image       only the set-up and the base image
#
# Installs podman and debootstrap if missing, selects the project's podman
# configuration, builds the base image once (rebuilt only when its recipe
# below changes), then runs molecule from the repository root.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib.sh
source scripts/lib.sh
ROOT=$PWD

APT_PACKAGES=(
	podman runc debootstrap uidmap containernetworking-plugins netavark
	aardvark-dns iptables iproute2 util-linux
)

ensure_apt_packages molecule.sh "${APT_PACKAGES[@]}"

# runc, cgroupfs and no default ulimits: see molecule/README.md. A
# CONTAINERS_CONF set by the caller wins.
export CONTAINERS_CONF=${CONTAINERS_CONF:-$ROOT/molecule/containers.conf}

# The base image: what a fresh Debian 12 fleet host has (python3), nothing
# more; the toolchain role installs the rest. Its recipe is the variables and
# the function below; their hash is stored as an image label, and the image
# is rebuilt only when the hash differs.
IMAGE=localhost/ebpf-xdp-debian:12
IMAGE_SUITE=bookworm
# The archive this machine's apt uses (a site mirror or proxy works here too); MOLECULE_DEBIAN_MIRROR overrides.
IMAGE_MIRROR=${MOLECULE_DEBIAN_MIRROR:-$(debian_mirror)}
IMAGE_INCLUDE=python3
HASH_LABEL=io.github.ebpf-xdp.recipe

build_image() {
	local dir
	dir=$(mktemp -d "${TMPDIR:-/tmp}/ebpf-xdp-rootfs.XXXXXX")
	if ! debootstrap --variant=minbase --include="$IMAGE_INCLUDE" \
		"$IMAGE_SUITE" "$dir" "$IMAGE_MIRROR" >"$dir.log" 2>&1; then
		tail -20 "$dir.log"
		rm -rf "$dir" "$dir.log"
		return 1
	fi
	# As in Docker's official Debian images: no fsync per unpacked file (a
	# container's disk is throw-away), which makes the toolchain role's apt
	# run in four containers at once noticeably faster.
	echo force-unsafe-io >"$dir"/etc/dpkg/dpkg.cfg.d/ebpf-xdp-unsafe-io
	# Package lists and downloaded packages are stale once the image is
	# built; the toolchain role updates the lists itself.
	rm -rf "$dir"/var/cache/apt/archives/*.deb "$dir"/var/lib/apt/lists/*_* \
		"$dir"/var/log/*.log "$dir".log
	tar -C "$dir" -c . | podman import --quiet \
		--change "LABEL $HASH_LABEL=$1" \
		--change 'CMD ["sleep", "infinity"]' \
		- "$IMAGE" >/dev/null
	rm -rf "$dir"
}

recipe=$(printf '%s\n' "$IMAGE_SUITE" "$IMAGE_MIRROR" "$IMAGE_INCLUDE" "$(declare -f build_image)" |
	sha256sum | cut -d' ' -f1)
have=$(podman image inspect --format "{{ index .Labels \"$HASH_LABEL\" }}" "$IMAGE" 2>/dev/null || true)
if [[ "$have" != "$recipe" ]]; then
	echo "molecule.sh: building $IMAGE (debootstrap $IMAGE_SUITE from $IMAGE_MIRROR)"
	start=$SECONDS
	old=$(podman image inspect --format '{{ .Id }}' "$IMAGE" 2>/dev/null || true)
	build_image "$recipe"
	# The previous build, now untagged; kept if a container still uses it.
	[[ -z "$old" ]] || podman rmi "$old" >/dev/null 2>&1 || true
	echo "molecule.sh: built $IMAGE in $((SECONDS - start)) s"
fi

[[ ${1:-} != image ]] || exit 0

export PATH=$ROOT/.venv/bin:$PATH
export ANSIBLE_CONFIG=$ROOT/ansible.cfg
# The collection under test; containers.podman comes from the `ansible`
# bundle in the venv's site-packages, which Ansible always scans as well.
export ANSIBLE_COLLECTIONS_PATH=$ROOT/.build/collections

if (($#)); then
	exec molecule "$@"
fi
exec molecule test
