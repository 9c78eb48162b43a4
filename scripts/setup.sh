#!/usr/bin/env bash
# Set-up for `make deploy` and `make test` on Debian 12 as root.
# Every step checks before it acts, so a second run is fast and changes nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib.sh
source scripts/lib.sh
ROOT=$PWD

APT_PACKAGES=(
	clang llvm libbpf1 libbpf-dev bpftool iproute2 python3-pyroute2
	libxdp1 xdp-tools # libxdp's XDP dispatcher (several programs on one interface), xdp-loader as its witness
	python3-venv netbase rsync git make iputils-ping util-linux
	shellcheck # ansible-test sanity skips its shellcheck test (with a warning) when shellcheck is missing
	netsniff-ng # trafgen, a generator of playbooks/benchmark.yml
	iptables nftables ethtool # netfilter_drop's backends, GRO for generic XDP on veth (playbooks/benchmark.yml)
	python3-prometheus-client prometheus # ebpf.xdp.xdp_metrics and its tests (promtool, a real scrape)
	python3-bcrypt python3-yaml # the exporter's web configuration (basic auth hashes, its YAML)
	# backend: bcc (tests/integration/test_bcc_backend.py): bcc's Python binding, and headers to compile
	# against; this kernel has no headers package, so the tests point kernel_headers at Debian's cloud flavour.
	python3-bpfcc linux-headers-cloud-amd64
	chromium # tests/integration/test_docs_site.py renders the docs site headless (--dump-dom, --screenshot)
)

ensure_apt_packages setup "${APT_PACKAGES[@]}"

# The venv is rebuilt only when requirements-dev.txt changes.
stamp=.venv/.requirements.sha256
want=$(sha256sum requirements-dev.txt | cut -d' ' -f1)
if [[ ! -x .venv/bin/python || "$(cat "$stamp" 2>/dev/null)" != "$want" ]]; then
	echo "setup: building .venv"
	/usr/bin/python3 -m venv .venv
	.venv/bin/pip install -q --disable-pip-version-check --upgrade pip
	.venv/bin/pip install -q --disable-pip-version-check -r requirements-dev.txt
	echo "$want" >"$stamp"
fi

# Ansible finds the collection in this checkout through a symlink.
mkdir -p .build/collections/ansible_collections/ebpf
ln -sfn "$ROOT" .build/collections/ansible_collections/ebpf/xdp

# bpffs: the collection keeps its state there.
if ! mountpoint -q /sys/fs/bpf; then
	mount -t bpf bpf /sys/fs/bpf
fi
