"""host_ansible.py NAME ARGS...: inside the VM, runs Ansible's command NAME (ansible, ansible-playbook,
ansible-inventory) on the machine that runs the VM, through tests/vm/host_controller.py at the socket
EBPF_XDP_HOST_CONTROLLER; prints what it printed and exits with its status. conftest's ansible_cli starts this
instead of ansible-core's own command for the files it lists in HOST_CONTROLLED."""

import json
import os
import socket
import sys


def main(name, *args):
    request = {"name": name, "args": list(args), "env": dict(os.environ), "cwd": os.getcwd()}
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.connect(os.environ["EBPF_XDP_HOST_CONTROLLER"])
        sock.sendall(json.dumps(request).encode() + b"\n")
        with sock.makefile("rb") as replies:
            line = replies.readline()
    if not line:
        sys.exit("host_ansible.py: no reply from host_controller.py at %s (it stopped, or the forward to it did)"
                 % os.environ["EBPF_XDP_HOST_CONTROLLER"])
    reply = json.loads(line)
    sys.stdout.write(reply["stdout"])
    sys.stderr.write(reply["stderr"])
    return reply["rc"]


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
