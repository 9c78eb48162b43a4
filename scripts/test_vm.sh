#!/usr/bin/env bash
# make test-vm (part of make test): with the lab's VM host up (Debian 12's
# stock kernel, 6.1: no tcx, act_bpf and pktgen as modules), booted once,
#  1. the tests that reach it over SSH through Ansible (pytest --vm=only, here),
#     but test_ee.py (make test-ee: make ee's image builds minutes on a fresh
#     machine and its four runs took 236 s of make test's; --all includes it)
#     and those marked long (--long only)
#  2. the kernel-dependent integration tests (those marked kernel(feature),
#     see tests/integration/kernel_features.py) inside it. Extra arguments go
#     to that pytest (e.g. -k tcx, or test files: those instead of all of them).
# With --all first (make test-debian12), step 2 runs every integration test
# inside it instead (the lab, the roles, the bcc backend, the faults and the
# bad input included), but for the files about the controller machine alone
# (CONTROLLER_ONLY: no kernel in them, they ran in make integration), those
# marked long and the files of conftest's DEBIAN12_SECOND_PART; with --long
# (make test-debian12-long) only those (over SSH only those marked long).
# Together they take about two hours under emulation (the long ones are 150
# map migration tests, each its own kill point, and playbook chains; the two
# files are the exporter's and the rollout's playbook chains); each is to fit
# in one CI run of 90 minutes: --all took 71-92 min on the 2-core machine
# while those files were in it, which is why they are not now.
#
# Under software emulation each module run costs seconds, so nothing goes
# through Ansible there: pytest runs inside the VM with Debian's Python and
# starts the modules directly (conftest's ModuleRunner), on veth pairs in
# namespaces of the VM, each forked from an interpreter that imported
# ansible-core and pyroute2 once (--module-start=fork, module_starter.py: a
# new interpreter's start alone takes a minute there on a loaded host).
# --no-ssh leaves out step 1; --ee runs only test_ee.py over SSH (make test-ee),
# nothing inside. The VM has no network but the SSH port, so the Python
# packages the tests need beyond the image's (pytest, ansible-core, bcrypt, the same
# versions as the venv's) are installed here, for the VM's Python (3.11, as
# this machine's), and reach it as a read-only disk image attached at boot; the
# checkout's files (what git would commit: tracked and new ones, nothing it
# ignores) are copied in through SSH.
# The VM is booted if it is not up, and powered off again only then. The
# image has bcc and the headers of its own kernel (scripts/vm.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib.sh
source scripts/lib.sh
VM="bash scripts/vm.sh"
# Where the VM gets the checkout: at its path here, so that a path in a test's Ansible run means the same file on the
# controller here (tests/vm/host_controller.py) as in the VM. The VM's disk is a throw-away snapshot.
DEST=$PWD
# The tests' temporary files in the VM (TMPDIR), mounted here at the same path for that controller (one path per
# checkout: another's VM may be up).
VM_TMP=/var/tmp/ebpf-xdp-vm-$(printf %s "$PWD" | md5sum | cut -c1-8)
SITE=.build/vm-site # the packages for the VM's Python
SITE_IMG=$SITE.img   # the same as a disk image, attached to the VM read-only
VM_SITE=/mnt/ebpf-xdp-site # where the VM mounts it

say() { echo "test_vm.sh: $*"; }

all=
long_only=
ssh_tests=1
ee_only=
while [[ ${1:-} == --all || ${1:-} == --long || ${1:-} == --no-ssh || ${1:-} == --ee ]]; do
	case $1 in
	--all) all=1 ;;
	--long) all=1 long_only=1 ;;
	--no-ssh) ssh_tests= ;; # only step 2 (e.g. again for the files that failed in it)
	--ee) ee_only=1 ;;
	esac
	shift
done
# The integration tests about the controller machine, not the kernel (the docs site in Chromium, the built
# artifact through ansible-galaxy and ansible-builder, the benchmark report's plots with the venv's matplotlib,
# the execution environment's image under podman): make integration runs them here; --all leaves them out in
# the VM.
CONTROLLER_ONLY=(test_docs_site.py test_packaging.py test_benchmark_report.py test_ee.py)

# The venv's versions of what the tests import, for the VM's Python, and the collections a test's ansible-playbook
# run needs there (a kernel-marked test may go through a role), from the venv's ansible: ansible.posix (the json
# callback the tests read results with) and community.general (the filetree lookup of the roles). Rebuilt when one
# of them changes.
COLLECTIONS=(ansible.posix community.general)
packages=$(.venv/bin/pip freeze --disable-pip-version-check | grep -iE '^(pytest|pytest-xdist|execnet|ansible-core|bcrypt)==' | sort)
want=$packages
for name in "${COLLECTIONS[@]}"; do
	want+=$'\n'"$name==$(.venv/bin/python -c "import ansible_collections.$name as p, json, os
print(json.load(open(os.path.join(list(p.__path__)[0], 'MANIFEST.json')))['collection_info']['version'])")"
done
if [[ "$(cat "$SITE/.versions" 2>/dev/null)" != "$want" ]]; then
	say "installing $(echo "$want" | tr '\n' ' ')into $SITE"
	rm -rf "$SITE" "$SITE_IMG"
	# shellcheck disable=SC2086 # one requirement per word
	.venv/bin/pip install -q --disable-pip-version-check --target "$SITE" $packages
	for name in "${COLLECTIONS[@]}"; do
		mkdir -p "$SITE/ansible_collections/${name%%.*}"
		cp -r "$(.venv/bin/python -c "import ansible_collections.$name as p; print(list(p.__path__)[0])")" \
			"$SITE/ansible_collections/${name/.//}"
	done
	# The VM mounts them read-only, where its Python cannot write the byte code of what it imports: compiled here
	# (Debian's Python, the VM's), checked by nothing but their presence (the files never change there). Without
	# them each interpreter there compiles ansible-core again, seconds under emulation.
	/usr/bin/python3 -m compileall -q -f -j 0 --invalidation-mode unchecked-hash "$SITE" >/dev/null
	echo "$want" >"$SITE/.versions"
fi
# They reach the VM as a read-only disk (a second virtio drive, /dev/disk/by-id/virtio-vm-site, mounted at $VM_SITE),
# made again only when they changed: copying their 85 MB through SSH took 161 s of each run at a load of 11.
# ext4 without a journal (nothing is written to it); e2fsprogs is one of scripts/vm.sh's packages.
if ! cmp -s "$SITE/.versions" "$SITE_IMG.versions"; then
	ensure_apt_packages test_vm.sh e2fsprogs
	say "making $SITE_IMG"
	rm -f "$SITE_IMG" "$SITE_IMG.versions"
	mke2fs -q -t ext4 -O ^has_journal -L vm-site -N $(($(find "$SITE" | wc -l) + 1000)) -d "$SITE" "$SITE_IMG.new" \
		$(($(du -sm "$SITE" | cut -f1) * 5 / 4 + 32))M
	mv "$SITE_IMG.new" "$SITE_IMG"
	cp "$SITE/.versions" "$SITE_IMG.versions"
fi

booted=
if ! $VM status >/dev/null 2>&1; then
	EBPF_XDP_VM_DISKS=$PWD/$SITE_IMG $VM up
	booted=1
fi
trap '[[ -z $booted ]] || $VM down' EXIT

# The tests that reach the VM over SSH, through Ansible (tests/integration/test_vm*.py), from here.
rc=0
if [[ -n $ssh_tests ]]; then
	say "pytest here: the tests of the VM as a remote host"
	start=$SECONDS
	# Two workers, a test at a time on each, the longest first (test_vm.py's order): each test is a chain of Ansible
	# tasks, each task one module run on one of the VM's two CPUs while the other waits for the next task (the
	# pktgen playbook's test took 166-216 s, the other three together about as long).
	if [[ -n $ee_only ]]; then
		ssh_select=(tests/integration/test_ee.py)
	elif [[ -n $long_only ]]; then
		ssh_select=(-m long tests/integration)
	elif [[ -n $all ]]; then
		ssh_select=(-m "not long" tests/integration)
	else
		# make test's: those marked long are make test-debian12-long's (--long) only.
		ssh_select=(-m "not long" --ignore tests/integration/test_ee.py tests/integration)
	fi
	# loadgroup: the tests of one xdist_group run one after the other on one worker (test_vm.py: pktgen, a kernel
	# module of the VM's, loaded by one and counted as left behind by the other).
	.venv/bin/python -m pytest -p no:cacheprovider -q -rxs --durations=10 --vm=only -n 2 --dist loadgroup \
		"${ssh_select[@]}" || rc=$?
	say "they took $((SECONDS - start)) s (exit $rc)"
fi
[[ -z $ee_only ]] || exit $rc

say "copying the checkout to the VM's $DEST"
start=$SECONDS
$VM ssh "rm -rf $DEST && mkdir -p $DEST/.build"
git ls-files -z --cached --others --exclude-standard | tar --null -T - -cf - | $VM ssh "tar -xf - -C $DEST"
say "copied in $((SECONDS - start)) s"
# The packages' disk, mounted once per boot. A VM that was up already (make vm-up) may have none, or an older one:
# then they are copied as before.
start=$SECONDS
if [[ "$($VM ssh "mountpoint -q $VM_SITE || { [ -e /dev/disk/by-id/virtio-vm-site ] && mkdir -p $VM_SITE &&
	mount -o ro /dev/disk/by-id/virtio-vm-site $VM_SITE; } && cat $VM_SITE/.versions")" == "$(cat "$SITE/.versions")" ]]; then
	say "$SITE: on its disk, mounted at $VM_SITE in $((SECONDS - start)) s"
else
	say "the VM was up without $SITE_IMG (or an older one): copying $SITE to its $DEST/$SITE"
	VM_SITE=$DEST/$SITE
	tar -C .build -cf - vm-site | $VM ssh "tar -xf - -C $DEST/.build"
	say "copied in $((SECONDS - start)) s"
fi

# As scripts/setup.sh does here: the collection found through a symlink, bpffs mounted.
$VM ssh "set -e
mkdir -p $DEST/.build/collections/ansible_collections/ebpf
ln -sfn $DEST $DEST/.build/collections/ansible_collections/ebpf/xdp
mountpoint -q /sys/fs/bpf || mount -t bpf bpf /sys/fs/bpf"

WARM_SOCKET=/run/ebpf-xdp-warm-python.sock  # tests/vm/warm_python.py's SOCKET
# The controller here for the files of conftest's HOST_CONTROLLED (tests/vm/host_controller.py says why). In the
# VM: the interpreter its SSH connections run, which enters the namespace a connection names (as the ebpf.xdp.netns
# connection does; with tests/vm on PYTHONPATH, as the VM's tests have). Here: the tests' temporary files at their
# path, and the server, on a socket that each pytest run in the VM gets forwarded.
$VM ssh "set -e
mkdir -p /usr/local/libexec/ebpf-xdp-tests
printf '%s\n' '#!/bin/sh' 'export PYTHONPATH=$DEST/tests/vm' \
	'[ \$# -ne 0 ] || [ ! -S $WARM_SOCKET ] || set -- -S -E $DEST/tests/vm/warm_python.py' \
	'[ -n \"\${EBPF_XDP_NETNS:-}\" ] || exec /usr/bin/python3 \"\$@\"' \
	'exec nsenter --net=/run/netns/\"\$EBPF_XDP_NETNS\" -- /usr/bin/python3 \"\$@\"' \
	>/usr/local/libexec/ebpf-xdp-tests/python
chmod 0755 /usr/local/libexec/ebpf-xdp-tests/python
mkdir -p /usr/local/libexec/ebpf-xdp-tests/bin
for name in ansible ansible-playbook ansible-inventory ansible-runner; do
	printf '%s\n' '#!/bin/sh' \"exec python3 $DEST/tests/vm/host_ansible.py \$name \\\"\\\$@\\\"\" \
		>/usr/local/libexec/ebpf-xdp-tests/bin/\$name
	chmod 0755 /usr/local/libexec/ebpf-xdp-tests/bin/\$name
done
rm -rf $VM_TMP $VM_TMP.controller.* && mkdir -m 0700 $VM_TMP"
# Modules run through Ansible there start warm (tests/vm/warm_python.py says why): a pipelined run (the payload on
# stdin, no arguments) is handed to a server that has ansible-core's module_utils imported.
$VM ssh "PYTHONPATH=$DEST/tests/vm python3 $DEST/tests/vm/warm_python.py serve $WARM_SOCKET $VM_SITE" || exit 1
# The kernel's networking static keys held on for the whole run (tests/vm/hold_static_keys.py says why: under
# emulation a key patched while the other CPU ran its site left that CPU trapping there for good, three times).
KEYS_PID=/run/ebpf-xdp-hold-keys.pid
held=$($VM ssh "python3 $DEST/tests/vm/hold_static_keys.py $KEYS_PID") || exit 1
say "$held"
controller_dir=$(mktemp -d "${TMPDIR:-/tmp}/ebpf-xdp-controller.XXXXXX")
# The VM's end of the socket, new for each run: SSH's master connection keeps a forward it was asked for.
controller_vm=$VM_TMP.controller.${controller_dir##*.}
mkdir -p "$VM_TMP"
$VM sshfs "$VM_TMP"
.venv/bin/python tests/vm/host_controller.py "$controller_dir/socket" "$PWD/.build/vm" &
controller_pid=$!
# shellcheck disable=SC2317 # called by the EXIT trap
stop_controller() {
	kill "$controller_pid" 2>/dev/null || true
	$VM ssh "[ ! -e $KEYS_PID ] || { kill \$(cat $KEYS_PID); rm -f $KEYS_PID; }" 2>/dev/null || true
	$VM ssh "[ ! -e $WARM_SOCKET.pid ] || { kill \$(cat $WARM_SOCKET.pid); rm -f $WARM_SOCKET $WARM_SOCKET.pid; }" 2>/dev/null ||
		true
	fusermount3 -u "$VM_TMP" 2>/dev/null || true
	rmdir "$VM_TMP" 2>/dev/null || true
	rm -rf "$controller_dir"
}
trap 'stop_controller; [[ -z $booted ]] || $VM down' EXIT

# Test files or node ids among the extra arguments run instead of tests/integration (e.g. the files that failed).
args=""
paths=tests/integration
for arg in "$@"; do
	args+=" $(printf '%q' "$arg")"
	[[ $arg != tests/* ]] || paths=
done
# The VM has two CPUs (qemu runs a thread for each): the tests that can
# share it run on two workers, a file's tests on one (as make
# integration-shared does here); those marked quiet (rates, timing,
# snapshots of the whole host) after them, alone.
# make test-vm leaves the tests marked long to make test-long (here) and make test-debian12-long.
if [[ -n $all ]]; then
	which="the first part of the integration tests (but the controller's: ${CONTROLLER_ONLY[*]})"
	select="--durations=25"
	# A line per test as it ends: should the VM's kernel stop answering, the log says how far each worker got.
	progress=-v
	# The part of the suite (conftest's DEBIAN12_SECOND_PART says how the two were chosen): with --long the tests
	# marked long and the files that take longest under emulation, with --all the others.
	not_long=
	select+=" --debian12-part=first"
	if [[ -n $long_only ]]; then
		which="the second part of the integration tests (marked long, and the files of DEBIAN12_SECOND_PART)"
		select="--durations=25 --debian12-part=second"
	fi
	for name in "${CONTROLLER_ONLY[@]}"; do select+=" --ignore tests/integration/$name"; done
else
	which="the kernel-dependent tests"
	select="--durations=15 --kernel-dependent --ignore tests/integration/test_bcc_backend.py"
	not_long=" and not long"
	progress=-q
fi
# PYTHONUNBUFFERED: the progress shows as it comes (through SSH's pipe it would come in blocks). tests/vm first on
# PYTHONPATH: its sitecustomize keeps the byte code of what a module run through Ansible imports from its zip.
in_vm() { # what, pytest arguments...
	local what=$1
	shift
	say "pytest in the VM: $which $what${args}"
	start=$SECONDS
	$VM ssh -R "$controller_vm:$controller_dir/socket" "cd $DEST && TMPDIR=$VM_TMP \
	EBPF_XDP_HOST_CONTROLLER=$controller_vm EBPF_XDP_ANSIBLE_BIN=/usr/local/libexec/ebpf-xdp-tests/bin PYTHONUNBUFFERED=1 PYTHONPATH=$DEST/tests/vm:$VM_SITE:$DEST/.build/collections ANSIBLE_COLLECTIONS_PATH=$DEST/.build/collections \
	python3 -m pytest -p no:cacheprovider $progress -rxs --vm=without --module-start=fork $select $* $paths$args" || {
		local status=$?
		# 5: pytest selected no test. Files given as arguments may have no quiet test (or only quiet ones), nor the
		# tests marked long.
		[[ $status == 5 && (-z $paths || -n $long_only) ]] || rc=$status
	}
	say "they took $((SECONDS - start)) s (exit status so far $rc)"
}
all_start=$SECONDS
in_vm "that can share the VM, on two workers" -m "'not quiet$not_long'" -n 2 --dist loadfile --no-loadscope-reorder
in_vm "marked quiet, alone" -m "'quiet$not_long'"
say "in the VM in all: $((SECONDS - all_start)) s"
exit $rc
