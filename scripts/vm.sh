#!/usr/bin/env bash
# The lab's VM host: Debian 12 with its stock kernel (linux-image-amd64, 6.1)
# under qemu, reached by Ansible over SSH on a loopback-forwarded port.
#   bash scripts/vm.sh up       build the disk image if needed, boot, wait for SSH
#   bash scripts/vm.sh down     power the VM off and remove its runtime files
#   bash scripts/vm.sh status   say whether it is up (exit 0) or not (exit 3)
#   bash scripts/vm.sh ssh [-R VM_SOCKET:SOCKET] [CMD...]   a root shell (or one
#                               command) in the VM; -R forwards a socket of the VM to one here
#   bash scripts/vm.sh sshfs DIR   the VM's directory DIR mounted at the same path
#                               here (fusermount3 -u DIR unmounts it)
#   bash scripts/vm.sh build    only build the image (when its recipe changed)
# `up` and `down` are idempotent: `up` on a running VM only checks that SSH
# answers, `down` on a stopped one does nothing.
# EBPF_XDP_VM_DISKS (for `up`): disk images (raw, space-separated) attached
# read-only to a VM it boots, each as a virtio drive whose serial is its
# name without .img (/dev/disk/by-id/virtio-NAME in the VM): scripts/test_vm.sh
# hands the tests' Python packages over so instead of copying them on every run.
#
# The image is a debootstrap root file system that already holds what the
# toolchain role installs, so the role and every module run there without a
# package mirror. Its recipe is the variables and functions below; their hash
# names the image, which is rebuilt only when the hash changes (kept in
# $EBPF_XDP_VM_CACHE, default /var/cache/ebpf_xdp/vm, so `make clean` keeps
# it). Runtime files (SSH key, known_hosts, pid, serial console log) are under
# .build/vm.
#
# qemu boots the kernel and initramfs directly (no boot loader) with the image
# as a read-only base: every boot starts from the same pristine disk and
# `down` has nothing to save. User-mode networking is restricted (restrict=on):
# the only way in is the SSH port forwarded from 127.0.0.1, and nothing the VM
# sends leaves it; test traffic runs over veth pairs inside the VM.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib.sh
source scripts/lib.sh
ROOT=$PWD

VM_CACHE=${EBPF_XDP_VM_CACHE:-/var/cache/ebpf_xdp/vm}
RUN=$ROOT/.build/vm
# The SSH port on 127.0.0.1: $EBPF_XDP_VM_PORT, or the first free one from
# 2522 (another checkout's VM may hold 2522). The running VM's port is in
# .build/vm/port, where the inventory (host_vars/vm.yml) reads it.
PORT=$(cat "$RUN/port" 2>/dev/null || echo "${EBPF_XDP_VM_PORT:-2522}")
# Two pytest workers each compiling with clang (bcc's in-process one included) want more than 1 GB.
MEMORY=${EBPF_XDP_VM_MEMORY:-2048}
CPUS=${EBPF_XDP_VM_CPUS:-2}
BOOT_TIMEOUT=${EBPF_XDP_VM_BOOT_TIMEOUT:-600}
NAME=ebpf-xdp-vm # qemu's process name, and the SSH host key alias
MAC=52:54:00:eb:0f:01
READY="ebpf-xdp-vm: ssh is ready" # the guest's line on the serial console

# The recipe.
SUITE=bookworm
# The archive this machine's apt uses (a site mirror or proxy works here too); EBPF_XDP_VM_MIRROR overrides.
MIRROR=${EBPF_XDP_VM_MIRROR:-$(debian_mirror)}
# The system: systemd, udev, the stock kernel, sshd, Python (and python3-apt
# for ansible.builtin.apt).
INCLUDE=systemd-sysv,udev,kmod,initramfs-tools,linux-image-amd64,openssh-server,python3,python3-apt
# What roles/toolchain installs on Debian (defaults/main.yml toolchain_packages,
# vars/Debian.yml witnesses); tests/integration/test_vm.py checks they agree.
INCLUDE+=,clang,llvm,libbpf1,libbpf-dev,linux-libc-dev,iproute2,python3-pyroute2,libxdp1,bpftool,xdp-tools
# What playbooks/benchmark.yml uses besides (roles/benchmark, __benchmark_packages).
INCLUDE+=,ethtool,iptables,nftables,netsniff-ng
# The bcc backend (toolchain_bcc: true): bcc's Python binding and the headers of the image's own kernel
# (linux-headers-amd64 follows linux-image-amd64), for make test-debian12's test_bcc_backend.py.
INCLUDE+=,python3-bpfcc,linux-headers-amd64
# What the rest of make test-debian12's suite uses there, as scripts/setup.sh installs it here: the exporter's
# Python (xdp_metrics) with promtool and a Prometheus server to judge and scrape it, ping, openssl for its TLS
# (python3-bcrypt needs its cffi named: debootstrap does not resolve the virtual package it depends on).
INCLUDE+=,python3-prometheus-client,prometheus,python3-bcrypt,python3-cffi-backend,python3-yaml,iputils-ping,netbase,openssl
# The benchmark role's report, drawn by the controller where it runs: in the VM for test_benchmark_runs.py (the
# role's scripts run where the controller is, so its tests keep their controller in the VM; make
# test-debian12-long). numpy named for the ABI it provides, which matplotlib depends on.
INCLUDE+=,python3-matplotlib,python3-numpy
IMAGE_SIZE=3G

APT_PACKAGES=(qemu-system-x86 debootstrap e2fsprogs openssh-client procps iproute2)

say() { echo "vm.sh: $*"; }

# prepare_rootfs DIR: between debootstrap's two stages, before any package
# is configured.
prepare_rootfs() {
	local dir=$1
	# Direct kernel boot: the initramfs needs only the root disk's drivers.
	# Set before the kernel's package builds it, so it is built once, small
	# (MODULES=most makes it ~36 MB to build, and to unpack under emulation).
	mkdir -p "$dir"/etc/initramfs-tools/conf.d "$dir"/usr/share/initramfs-tools/modules.d
	echo MODULES=list >"$dir"/etc/initramfs-tools/conf.d/ebpf-xdp.conf
	printf '%s\n' virtio_pci virtio_blk ext4 >"$dir"/usr/share/initramfs-tools/modules.d/ebpf-xdp
	# As in the molecule image: no fsync per unpacked file (the disk is a
	# throw-away snapshot at run time), which also makes the build faster.
	echo force-unsafe-io >"$dir"/etc/dpkg/dpkg.cfg.d/ebpf-xdp-unsafe-io
}

# configure_rootfs DIR: turn the installed tree into the VM's disk.
configure_rootfs() {
	local dir=$1
	echo "/dev/vda / ext4 rw,noatime 0 0" >"$dir"/etc/fstab
	echo vm >"$dir"/etc/hostname
	printf '127.0.0.1\tlocalhost\n127.0.1.1\tvm\n' >"$dir"/etc/hosts

	# The one uplink (qemu's user-mode network, found by its MAC address) is
	# named uplink0 and gets a static address and no route: nothing is
	# reachable through it anyway. A oneshot unit instead of a network
	# manager: systemd-networkd alone takes ~7 s to start under emulation.
	# Other interfaces (the tests' veth pairs) are left alone.
	cat >"$dir"/etc/systemd/network/10-ebpf-xdp-uplink.link <<-EOF
		[Match]
		MACAddress=$MAC

		[Link]
		Name=uplink0
	EOF
	# Its last step tells the serial console that SSH can be reached: until
	# then a connection to the forwarded port hangs in qemu rather than fail.
	cat >"$dir"/etc/systemd/system/ebpf-xdp-uplink.service <<-EOF
		[Unit]
		Description=Address of the uplink (qemu user-mode network, SSH only)
		BindsTo=sys-subsystem-net-devices-uplink0.device
		After=sys-subsystem-net-devices-uplink0.device ssh.socket
		Before=network.target
		Wants=network.target

		[Service]
		Type=oneshot
		RemainAfterExit=yes
		ExecStart=/usr/sbin/ip address replace 10.0.2.15/24 dev uplink0
		ExecStart=/usr/sbin/ip link set dev uplink0 up
		ExecStart=/bin/sh -c 'echo "$READY" >/dev/ttyS0'

		[Install]
		WantedBy=sys-subsystem-net-devices-uplink0.device
	EOF

	# sshd: started by its socket on the first connection, root by key only.
	# Root's key comes from the kernel command line (ebpf_xdp.authorized_key=
	# base64 of the public key line), so the image holds no key of this
	# checkout and need not be rebuilt when the key changes.
	cat >"$dir"/usr/local/sbin/ebpf-xdp-authorized-key <<-'EOF'
		#!/bin/sh
		# Root's authorized_keys from ebpf_xdp.authorized_key= on the kernel command line.
		set -e
		key=
		for arg in $(cat /proc/cmdline); do
			case $arg in ebpf_xdp.authorized_key=*) key=${arg#*=} ;; esac
		done
		[ -n "$key" ] || exit 0
		install -d -m 0700 /root/.ssh
		printf '%s' "$key" | base64 -d >/root/.ssh/authorized_keys.new
		chmod 0600 /root/.ssh/authorized_keys.new
		mv /root/.ssh/authorized_keys.new /root/.ssh/authorized_keys
	EOF
	chmod 0755 "$dir"/usr/local/sbin/ebpf-xdp-authorized-key
	mkdir -p "$dir"/etc/systemd/system/ssh.service.d
	cat >"$dir"/etc/systemd/system/ssh.service.d/ebpf-xdp.conf <<-'EOF'
		[Service]
		ExecStartPre=
		ExecStartPre=/usr/local/sbin/ebpf-xdp-authorized-key
	EOF
	cat >"$dir"/etc/ssh/sshd_config.d/ebpf-xdp.conf <<-'EOF'
		HostKey /etc/ssh/ssh_host_ed25519_key
		PermitRootLogin prohibit-password
		PasswordAuthentication no
		KbdInteractiveAuthentication no
		UseDNS no
		# make test-debian12's controller on the host (tests/vm/host_controller.py): each
		# lab namespace has its own master connection, which names it.
		AcceptEnv EBPF_XDP_NETNS
		MaxSessions 100
	EOF
	rm -f "$dir"/etc/ssh/ssh_host_{rsa,ecdsa}_key{,.pub}

	chroot "$dir" systemctl -q enable ebpf-xdp-uplink.service ssh.socket
	chroot "$dir" systemctl -q disable ssh.service
	# Nothing that only costs boot time on a throw-away lab host: timers,
	# gettys, file systems and helpers nobody here uses.
	chroot "$dir" systemctl -q mask apt-daily.timer apt-daily-upgrade.timer \
		dpkg-db-backup.timer e2scrub_all.timer e2scrub_reap.service fstrim.timer \
		getty.target getty-static.service serial-getty@ttyS0.service \
		systemd-pstore.service systemd-binfmt.service proc-sys-fs-binfmt_misc.automount \
		systemd-rfkill.socket systemd-update-utmp.service systemd-update-utmp-runlevel.service \
		dev-hugepages.mount dev-mqueue.mount sys-fs-fuse-connections.mount \
		modprobe@fuse.service modprobe@dm_mod.service modprobe@loop.service \
		modprobe@drm.service systemd-network-generator.service
	# Debian's prometheus package starts its server at boot (a fifth of a CPU under emulation); the tests that
	# want one start their own.
	chroot "$dir" systemctl -q mask prometheus.service

	rm -rf "$dir"/var/cache/apt/archives/*.deb "$dir"/var/log/*.log
}

# build_image OUT_PREFIX: debootstrap, configure, and write OUT_PREFIX.img
# (ext4, no partition table), .vmlinuz, .initrd and .hostkey.pub.
build_image() {
	local out=$1
	BUILD_DIR=$(mktemp -d "${TMPDIR:-/tmp}/ebpf-xdp-vm-rootfs.XXXXXX")
	trap remove_build_dir EXIT
	# Downloaded packages are kept for the next build (after a recipe change).
	mkdir -p "$VM_CACHE/debs"
	# Two stages, to set things up before packages are configured.
	if ! debootstrap --foreign --variant=minbase --include="$INCLUDE" --cache-dir="$VM_CACHE/debs" \
		"$SUITE" "$BUILD_DIR" "$MIRROR" >"$BUILD_DIR.log" 2>&1; then
		tail -20 "$BUILD_DIR.log"
		return 1
	fi
	prepare_rootfs "$BUILD_DIR"
	if ! chroot "$BUILD_DIR" /debootstrap/debootstrap --second-stage >>"$BUILD_DIR.log" 2>&1; then
		tail -20 "$BUILD_DIR.log"
		return 1
	fi
	configure_rootfs "$BUILD_DIR"
	cp "$BUILD_DIR"/boot/vmlinuz-* "$out.vmlinuz.new"
	cp "$BUILD_DIR"/boot/initrd.img-* "$out.initrd.new"
	cp "$BUILD_DIR"/etc/ssh/ssh_host_ed25519_key.pub "$out.hostkey.pub.new"
	rm -f "$out.img.new"
	mke2fs -q -t ext4 -L vm-root -d "$BUILD_DIR" "$out.img.new" "$IMAGE_SIZE" >/dev/null
	for f in vmlinuz initrd hostkey.pub img; do
		mv "$out.$f.new" "$out.$f"
	done
}

# After a build, or a failed one: nothing mounted below the tree may go with it.
remove_build_dir() {
	local m
	for m in $(findmnt -rn -o TARGET | grep -F "$BUILD_DIR/" | sort -r); do
		umount -l "$m"
	done
	rm -rf --one-file-system "$BUILD_DIR" "$BUILD_DIR.log"
	rm -f "$IMAGE".*.new
}

recipe=$(printf '%s\n' "$SUITE" "$MIRROR" "$INCLUDE" "$IMAGE_SIZE" "$MAC" \
	"$(declare -f prepare_rootfs configure_rootfs build_image)" | sha256sum | cut -c1-16)
IMAGE=$VM_CACHE/debian12-$recipe

ensure_image() {
	[[ -f $IMAGE.img ]] && return 0
	ensure_apt_packages vm.sh "${APT_PACKAGES[@]}"
	mkdir -p "$VM_CACHE"
	chmod 0700 "$VM_CACHE" # the image holds the VM's SSH host key
	exec 8>"$VM_CACHE/.lock"
	flock 8 # another `vm.sh up` may be building the same image
	if [[ ! -f $IMAGE.img ]]; then
		say "building $IMAGE.img (debootstrap $SUITE from $MIRROR)"
		local start=$SECONDS
		build_image "$IMAGE"
		# Images of earlier recipes: a running VM keeps its open files.
		find "$VM_CACHE" -maxdepth 1 -name 'debian12-*' ! -name "debian12-$recipe.*" -delete
		say "built $IMAGE.img in $((SECONDS - start)) s"
	fi
	flock -u 8
}

ensure_key() {
	mkdir -p "$RUN"
	[[ -f $RUN/id_ed25519 ]] || ssh-keygen -q -t ed25519 -N '' -C "ebpf-xdp lab VM" -f "$RUN/id_ed25519"
}

# The pid of this checkout's qemu, if it runs: found by its process name and
# its console file (so even after `make clean` removed .build/vm).
vm_pid() {
	local pid
	for pid in $(pgrep -x "$NAME"); do
		if tr '\0' '\n' <"/proc/$pid/cmdline" 2>/dev/null | grep -qxF "file:$RUN/console.log"; then
			echo "$pid"
			return 0
		fi
	done
	return 1
}

# ssh_options: the options of every SSH connection into the VM (ssh_vm's, sshfs's) after the caller's. One
# connection, kept 5 min after its last use, carries every session: a new one costs 12-14 s of key exchange under
# emulation on a loaded host, a session over it under a second.
ssh_options() {
	echo -i "$RUN/id_ed25519" -p "$PORT" -o BatchMode=yes -o ControlMaster=auto -o ControlPath="$RUN/ssh-mux" \
		-o ControlPersist=300 -o HostKeyAlias="$NAME" -o UserKnownHostsFile="$RUN/known_hosts" \
		-o StrictHostKeyChecking=yes -o LogLevel=ERROR
}

# ssh_vm [SSH_OPTION...] -- [CMD...]: ssh into the VM as root (with its key,
# and its host key checked).
ssh_vm() {
	local opts=()
	while (($#)) && [[ $1 != -- ]]; do opts+=("$1") && shift; done
	shift
	# ConnectTimeout bounds the banner exchange too: under emulation on a loaded host sshd takes more than 5 s
	# to answer (make test-debian12's copy step failed so), so 5 s only while waiting for the boot (wait_for
	# tries again). ssh takes the first value given for an option: the caller's come first.
	# shellcheck disable=SC2046 # one option per word: the checkout's path has no space (sshfs splits it so too)
	ssh "${opts[@]}" -o ConnectTimeout=120 $(ssh_options) root@127.0.0.1 "$@"
}

port_busy() { ss -Htln "sport = :$1" | grep -q .; }

# wait_for WHAT CMD...: run CMD until it succeeds, while qemu runs and the
# boot timeout has not passed.
wait_for() {
	local what=$1
	shift
	until "$@"; do
		if ! vm_pid >/dev/null; then
			say "qemu exited before $what; the end of its console:" >&2
			tail -20 "$RUN/console.log" >&2
			return 1
		fi
		if ((SECONDS - start > BOOT_TIMEOUT)); then
			say "no $what after $BOOT_TIMEOUT s; the end of the console ($RUN/console.log):" >&2
			tail -20 "$RUN/console.log" >&2
			return 1
		fi
		sleep 0.5
	done
}

up() {
	ensure_image
	ensure_key
	local start=$SECONDS
	if vm_pid >/dev/null && [[ ! -f $RUN/port || ! -f $RUN/known_hosts ]]; then
		say "running, but its files in .build/vm are gone (make clean?): starting it again"
		down
	fi
	if ! vm_pid >/dev/null; then
		ensure_apt_packages vm.sh "${APT_PACKAGES[@]}"
		PORT=${EBPF_XDP_VM_PORT:-2522}
		while port_busy "$PORT"; do
			if [[ -n ${EBPF_XDP_VM_PORT:-} ]] || ((PORT >= 2621)); then
				say "port $PORT is in use by another program; choose another with EBPF_XDP_VM_PORT" >&2
				return 1
			fi
			PORT=$((PORT + 1))
		done
		echo "$PORT" >"$RUN/port"
		echo "$NAME $(cat "$IMAGE.hostkey.pub")" >"$RUN/known_hosts"
		local key
		key=$(base64 -w0 "$RUN/id_ed25519.pub")
		rm -f "$RUN/console.log"
		# On PCI slots from 0x10 up, after the root disk's (virtio probes by slot): the root disk stays /dev/vda.
		local disks=() disk slot=16
		for disk in ${EBPF_XDP_VM_DISKS:-}; do
			disks+=(-drive "file=$disk,format=raw,if=none,id=$(basename "$disk" .img),readonly=on"
				-device "virtio-blk-pci,drive=$(basename "$disk" .img),serial=$(basename "$disk" .img),addr=$(printf 0x%x $slot)")
			slot=$((slot + 1))
		done
		# loglevel=5 after quiet: the stack of a kernel warning, lockup or oops reaches the console log (a soft
		# lockup on 6.1 in make test-debian12 left only its one-line reports there).
		qemu-system-x86_64 -name "$NAME,process=$NAME" \
			-machine q35 -accel tcg -cpu max -smp "$CPUS" -m "$MEMORY" \
			-nodefaults -no-user-config -display none \
			-kernel "$IMAGE.vmlinuz" -initrd "$IMAGE.initrd" \
			-append "root=/dev/vda rw console=ttyS0 fsck.mode=skip quiet loglevel=5 ebpf_xdp.authorized_key=$key" \
			-drive "file=$IMAGE.img,format=raw,if=virtio,snapshot=on,cache=unsafe" "${disks[@]}" \
			-netdev "user,id=net0,restrict=on,hostfwd=tcp:127.0.0.1:$PORT-:22" \
			-device "virtio-net-pci,netdev=net0,mac=$MAC,romfile=" \
			-object rng-random,id=rng0,filename=/dev/urandom -device virtio-rng-pci,rng=rng0 \
			-serial "file:$RUN/console.log" -daemonize 8>&- 9>&-
		say "booting $(basename "$IMAGE") (serial console: ${RUN#"$ROOT"/}/console.log)"
		wait_for "boot" grep -qF "$READY" "$RUN/console.log"
	fi
	wait_for "SSH" ssh_vm -o ConnectTimeout=5 -- true
	say "up after $((SECONDS - start)) s: $(ssh_vm -- uname -r) on ssh://root@127.0.0.1:$PORT"
}

down() {
	local pid
	ssh -o ControlPath="$RUN/ssh-mux" -O exit vm 2>/dev/null || true
	if pid=$(vm_pid); then
		# Pulling the plug loses nothing: the disk is a throw-away snapshot.
		kill -TERM "$pid"
		while kill -0 "$pid" 2>/dev/null; do sleep 0.2; done
		say "powered off"
	fi
	rm -f "$RUN/known_hosts" "$RUN/port"
}

# One `up` or `down` at a time per checkout.
lock() {
	mkdir -p "$RUN"
	exec 9>"$RUN/lock"
	flock 9
}

case ${1:-} in
up) lock && up ;;
down) lock && down ;;
build) ensure_image ;;
status)
	if vm_pid >/dev/null; then
		say "up (pid $(vm_pid), ssh port $PORT)"
	else
		say "down"
		exit 3
	fi
	;;
ssh)
	shift
	vm_pid >/dev/null || { say "down (bring it up with make vm-up)" >&2 && exit 3; }
	opts=()
	[[ ${1:-} != -R ]] || { opts+=(-R "$2") && shift 2; }
	if [[ -t 0 ]]; then ssh_vm -t "${opts[@]}" -- "$@"; else ssh_vm "${opts[@]}" -- "$@"; fi
	;;
sshfs)
	vm_pid >/dev/null || { say "down (bring it up with make vm-up)" >&2 && exit 3; }
	ensure_apt_packages vm.sh sshfs
	# Over the one SSH connection (ssh_vm's); without caches, as the other side changes the files: each
	# operation asks the VM.
	sshfs -o ssh_command="ssh $(ssh_options)" -o dir_cache=no -o attr_timeout=0 -o entry_timeout=0 \
		-o negative_timeout=0 "root@127.0.0.1:$2" "$2"
	;;
*)
	sed -n '2,13s/^# \{0,1\}//p' "$0" >&2
	exit 2
	;;
esac
