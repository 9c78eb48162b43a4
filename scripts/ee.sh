#!/usr/bin/env bash
# make ee: the execution environment image (ee/Containerfile) with podman, from the project's Debian 12 base
# image (scripts/molecule.sh image: debootstrap, no registry), with the venv's ansible-core, ansible-runner,
# community.general and the collection installed from its built artifact. EBPF_XDP_EE_IMAGE names the image (default
# localhost/ebpf-xdp-ee:latest).
#
# The image carries the digest of its inputs as a label (the base image's id, the Containerfile, this
# script, the versions, every file the collection's artifact takes): with nothing changed, nothing is
# built. The build context is .build/ee: the wheels (pip download, kept while the versions stay), the
# artifact and the requirement files.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
IMAGE=${EBPF_XDP_EE_IMAGE:-localhost/ebpf-xdp-ee:latest}
BASE=localhost/ebpf-xdp-debian:12
CONTEXT=.build/ee
DIGEST_LABEL=io.github.ebpf-xdp.ee-inputs
PY=.venv/bin/python

say() { echo "ee.sh: $*"; }

# podman, the project's podman configuration (runc, cgroupfs, no ulimits) and the base image.
bash scripts/molecule.sh image
export CONTAINERS_CONF=${CONTAINERS_CONF:-$ROOT/molecule/containers.conf}

# ansible-navigator refuses podman without /dev/mqueue (ansible-runner runs the container with --ipc=host);
# systemd mounts it (dev-mqueue.mount), this machine has no systemd.
if [[ ! -d /dev/mqueue ]]; then
	mkdir -p /dev/mqueue
	mount -t mqueue mqueue /dev/mqueue
fi

version() { $PY -c "import importlib.metadata as m; print(m.version('$1'))"; }
core=$(version ansible-core)
runner=$(version ansible-runner)
# community.general, from the venv's `ansible` bundle (Galaxy is not reachable): the roles' directory walks,
# query('ansible.builtin.filetree'), reach it through ansible-core's routing of plugins moved out of core.
general=$($PY -c "import ansible_collections.community.general as c; print(list(c.__path__)[0])")
general_version=$($PY -c "import json, sys; print(json.load(open(sys.argv[1]))['collection_info']['version'])" \
	"$general/MANIFEST.json")

# The files `ansible-galaxy collection build` takes: those git would commit, less galaxy.yml's build_ignore.
collection_digest() {
	git ls-files -z --cached --others --exclude-standard | $PY -c '
import fnmatch, hashlib, os, sys, yaml
ignore = yaml.safe_load(open("galaxy.yml"))["build_ignore"]
digest = hashlib.sha256()
for path in sorted(p for p in sys.stdin.read().split("\0") if p):
    parts = path.split("/")
    if not os.path.isfile(path) or any(fnmatch.fnmatch(path, pat) or fnmatch.fnmatch(parts[0], pat)
                                       or pat in parts for pat in ignore):
        continue
    digest.update(path.encode() + b"\0")
    with open(path, "rb") as f:
        digest.update(hashlib.sha256(f.read()).digest())
print(digest.hexdigest())'
}

inputs=$(printf '%s\n' "$(podman image inspect --format '{{ .Id }}' "$BASE")" "$core" "$runner" "$general_version" \
	"$(sha256sum ee/Containerfile scripts/ee.sh)" "$(collection_digest)" | sha256sum | cut -d' ' -f1)
have=$(podman image inspect --format "{{ index .Labels \"$DIGEST_LABEL\" }}" "$IMAGE" 2>/dev/null || true)
if [[ $have == "$inputs" ]]; then
	say "$IMAGE is up to date"
	exit 0
fi

start=$SECONDS
mkdir -p "$CONTEXT"
# The wheels for the image's Python (Debian 12's 3.11, as this venv's), downloaded once per version set.
if [[ "$(cat "$CONTEXT/wheels/.versions" 2>/dev/null)" != "$core $runner" ]]; then
	rm -rf "$CONTEXT/wheels"
	if ! .venv/bin/pip download -q --disable-pip-version-check -d "$CONTEXT/wheels" \
		"ansible-core==$core" "ansible-runner==$runner" bindep -r requirements.txt >"$CONTEXT/pip.log" 2>&1; then
		cat "$CONTEXT/pip.log" >&2
		exit 1
	fi
	echo "$core $runner" >"$CONTEXT/wheels/.versions"
fi
rm -rf "$CONTEXT/collection" "$CONTEXT/deps"
mkdir -p "$CONTEXT/collection" "$CONTEXT/deps" "$CONTEXT/dependencies/ansible_collections/community"
rsync -a --delete --exclude __pycache__ "$general/" "$CONTEXT/dependencies/ansible_collections/community/general/"
cp bindep.txt requirements.txt "$CONTEXT/deps/"
# Outside the checkout's configuration, as a user builds it.
env -u ANSIBLE_CONFIG .venv/bin/ansible-galaxy collection build --output-path "$CONTEXT/collection" . >/dev/null
mv "$CONTEXT"/collection/ebpf-xdp-*.tar.gz "$CONTEXT/collection/ebpf-xdp.tar.gz"

say "building $IMAGE (ansible-core $core, ansible-runner $runner, community.general $general_version) from $BASE"
old=$(podman image inspect --format '{{ .Id }}' "$IMAGE" 2>/dev/null || true)
# The host's network: apt reaches the mirror the base image was built from as this machine does.
podman build --quiet --network=host --pull=never -f ee/Containerfile \
	--build-arg "BASE_IMAGE=$BASE" --build-arg "ANSIBLE_CORE_VERSION=$core" \
	--build-arg "ANSIBLE_RUNNER_VERSION=$runner" --label "$DIGEST_LABEL=$inputs" \
	-t "$IMAGE" "$CONTEXT" >/dev/null
# The previous build, now untagged; kept if a container still uses it.
new=$(podman image inspect --format '{{ .Id }}' "$IMAGE")
[[ -z $old || $old == "$new" ]] || podman rmi "$old" >/dev/null 2>&1 || true
say "built $IMAGE in $((SECONDS - start)) s ($(podman image inspect --format '{{ .Size }}' "$IMAGE" |
	awk '{ printf "%d MB", $1 / 1e6 }'))"
