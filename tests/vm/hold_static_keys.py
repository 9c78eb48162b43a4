"""hold_static_keys.py PID_FILE: inside the lab's VM, before its tests (scripts/test_vm.sh), holds the kernel's
networking static keys on for as long as the tests run, so that no test's attach or detach patches the kernel's
code while the other CPU runs it. Returns once they are held (exit 0, what it holds on stdout), leaving a process
behind (its pid in PID_FILE) that holds them until it is sent SIGTERM. A holder already running is kept.

Why: under the VM's software emulation (qemu's TCG, two vCPUs) make test-debian12 stopped three times in a soft
lockup at one address: a CPU trapping again and again on an int3 at a static-key site of __netif_receive_skb_core
(under veth_poll, or process_backlog), for minutes, while the console's dump of that address showed the patched
instruction already in memory (the 5-byte NOP one time, the enabled key's jmp another). The kernel patches a
static key through an int3 (text_poke_bp), and its int3 handler, finding the int3 gone, backs up to run the
instruction again (kprobe_int3_handler): a CPU runs what memory holds after text_poke's serializing IPI; the
emulated CPU kept running its translation of the int3. A key is patched only when its count goes from 0 to 1 or
back to 0: held at one here, the tests' clsact qdiscs, generic-mode XDP programs, netfilter base chains and
timestamping sockets only move its count.

What it holds, from a network namespace of its own that no test sees (no name under /run/netns): a veth
device (as the tests use: a kernel may lack dummy) with a clsact qdisc (the ingress and egress keys) and a
generic-mode XDP program that passes everything (the generic XDP key), an nftables inet table with a base chain
on each of its hooks (each hook's key, IPv4 and IPv6), and a socket that asks for receive timestamps (the
timestamp key).
"""

import ctypes
import os
import signal
import socket
import subprocess
import sys
import tempfile

CLONE_NEWNET = 0x40000000
DEVICE = "keys0"
SO_TIMESTAMP = 29  # asm-generic/socket.h (Python's socket module does not name it)
PASS_PROGRAM = """
__attribute__((section("xdp"), used)) int hold_keys(void *ctx) { return 2; /* XDP_PASS */ }
char _license[] __attribute__((section("license"), used)) = "GPL";
"""
NFT_RULESET = "table inet hold_keys {\n%s}\n" % "".join(
    "  chain %s { type filter hook %s priority 0; policy accept; }\n" % (hook, hook)
    for hook in ("prerouting", "input", "forward", "output", "postrouting"))


def run(*argv, **kwargs):
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, **kwargs)
    if proc.returncode:
        sys.exit("hold_static_keys.py: %s failed: %s" % (" ".join(argv), proc.stderr.strip()))


def running(pid_file):
    try:
        with open(pid_file, encoding="ascii") as src:
            pid = int(src.read())
        os.kill(pid, 0)
    except (OSError, ValueError):
        return None
    return pid


def hold(pid_file):
    pid = running(pid_file)
    if pid:
        print("hold_static_keys.py: already held by process %d" % pid)
        return
    # Opened before anything is held; root never writes through a link someone left at that path.
    try:
        pid_fd = os.open(pid_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
    except OSError as exc:
        sys.exit("hold_static_keys.py: cannot write the pid file %s: %s (nothing held)" % (pid_file, exc.strerror))
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWNET) != 0:
        sys.exit("hold_static_keys.py: unshare(CLONE_NEWNET): %s" % os.strerror(ctypes.get_errno()))
    run("ip", "link", "add", DEVICE, "type", "veth", "peer", "name", DEVICE + "p")
    run("ip", "link", "set", DEVICE, "up")
    run("tc", "qdisc", "add", "dev", DEVICE, "clsact")
    with tempfile.TemporaryDirectory() as tmp:
        source, obj = os.path.join(tmp, "hold_keys.c"), os.path.join(tmp, "hold_keys.o")
        with open(source, "w", encoding="ascii") as out:
            out.write(PASS_PROGRAM)
        run("clang", "-O2", "-target", "bpf", "-c", source, "-o", obj)
        run("ip", "link", "set", "dev", DEVICE, "xdpgeneric", "object", obj, "section", "xdp")
    run("nft", "-f", "-", input=NFT_RULESET)
    stamped = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    stamped.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMP, 1)

    # The holder: the namespace (and with it the device, its qdisc and program, the table) lives as long as it.
    child = os.fork()
    if child:
        with os.fdopen(pid_fd, "w", encoding="ascii") as out:
            out.write("%d\n" % child)
        print("hold_static_keys.py: process %d holds the ingress, egress, generic XDP, netfilter (inet) and "
              "timestamp static keys" % child)
        return
    os.close(pid_fd)
    os.setsid()
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))  # pylint: disable=protected-access
    while True:
        signal.pause()


if __name__ == "__main__":
    hold(sys.argv[1])
