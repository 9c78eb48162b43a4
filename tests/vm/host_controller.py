"""make test-debian12's Ansible controller on the machine that runs the VM.

Inside the emulated VM, half of every Ansible task is the controller's own work (templating, the payload, the
result: ~1.5-2 s a task there). The tests of the files in conftest's HOST_CONTROLLED run inside the VM as the rest
do, and check the VM's kernel and files themselves, but their ansible, ansible-playbook and ansible-inventory runs
are made here, by this server, on the venv's ansible-core, against the VM over SSH (tests/vm/host_ansible.py is
their client there, through a Unix socket that scripts/test_vm.sh forwards into the VM), and so are the
ansible-runner jobs of tests/benchmarks/slices.py (test_rollout_slices.py).

What makes a run here the same run as inside the VM:
- the same paths: the VM's checkout is at this checkout's path, and the tests' temporary files (TMPDIR in the
  VM) are mounted here at the same path (scripts/vm.sh sshfs);
- every host reached in the VM, with the connection variables of connection_vars() (given last as -e, so they win
  over the inventory's and the command line's): localhost (and 127.0.0.1) is the VM's root namespace, any other
  host the VM's namespace named by its ansible_netns_name or its name, as the ebpf.xdp.netns connection would
  enter. Its SSH master connection sends EBPF_XDP_NETNS (one master per namespace: a session multiplexed over
  another host's master would carry that host's), and the VM's interpreter wrapper (scripts/test_vm.sh) enters it.
  So every module runs where it would; a command run without a module (raw, script) would run in the root
  namespace, which the files of HOST_CONTROLLED never do (the benchmark role's scripts do: its tests keep their
  controller in the VM).

Usage: host_controller.py SOCKET VM_RUN_DIR: the socket in a directory of its own (connection_vars()'s file goes beside
it), VM_RUN_DIR scripts/vm.sh's .build/vm (the key, port and known_hosts).
"""

import json
import os
import socketserver
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.dirname(sys.executable)
COMMANDS = ("ansible", "ansible-playbook", "ansible-inventory", "ansible-runner")
# In the VM (scripts/test_vm.sh writes it).
INTERPRETER = "/usr/local/libexec/ebpf-xdp-tests/python"
# The namespace a host is (a Jinja expression): none for localhost. inventory_hostname_short, not inventory_hostname:
# a delegated task's connection variables are templated with the delegating host's inventory_hostname (ansible-core
# sets it so) but the delegated host's other magic variables. A namespace's name has no dot.
NETNS = ("('' if inventory_hostname_short in ['localhost', '127'] else"
         " ansible_netns_name | default(inventory_hostname_short))")


def connection_vars(run_dir):
    with open(os.path.join(run_dir, "port")) as f:
        port = int(f.read())
    return {
        "ansible_connection": "ansible.builtin.ssh",
        "ansible_host": "127.0.0.1",
        "ansible_port": port,
        "ansible_user": "root",
        "ansible_ssh_private_key_file": os.path.join(run_dir, "id_ed25519"),
        "ansible_ssh_pipelining": True,
        # Kept for the whole session: a new master costs a key exchange, seconds under emulation.
        "ansible_ssh_args": "-o ControlMaster=auto -o ControlPersist=30m -o ControlPath=%s/cp.{{ %s }}"
                            % (run_dir, NETNS),
        "ansible_ssh_common_args": "-o StrictHostKeyChecking=yes -o HostKeyAlias=ebpf-xdp-vm -o UserKnownHostsFile=%s"
                                   " -o SetEnv=EBPF_XDP_NETNS={{ %s }}" % (os.path.join(run_dir, "known_hosts"), NETNS),
        "ansible_python_interpreter": INTERPRETER,
    }


def with_connection_vars(name, args, vars_file):
    """args with the connection variables' file as the last extra vars: ansible-runner passes them on to
    ansible-playbook in --cmdline; ansible-inventory shows the inventory as it is."""
    extra = "-e @" + vars_file
    if name == "ansible-inventory":
        return args
    if name != "ansible-runner":
        return args + extra.split(" ", 1)
    if "--cmdline" not in args:
        return args + ["--cmdline", extra]
    at = args.index("--cmdline") + 1
    return args[:at] + [args[at] + " " + extra] + args[at + 1:]


class Handler(socketserver.StreamRequestHandler):
    def handle(self):
        request = json.loads(self.rfile.readline())
        name = request["name"]
        if name not in COMMANDS:
            reply = {"rc": 2, "stdout": "", "stderr": "host_controller.py: %r is not one of %s\n" % (name, COMMANDS)}
        else:
            argv = [os.path.join(BIN, name)] + with_connection_vars(name, request["args"], self.server.vars_file)
            # The test's Ansible settings (paths are the same here), this machine's environment for the rest.
            # BIN first on PATH: ansible-runner starts ansible-playbook by its name (scripts/test_vm.sh run by hand,
            # not by make, has no venv on PATH).
            env = dict(os.environ, ANSIBLE_HOME=os.environ.get("ANSIBLE_HOME", self.server.ansible_home),
                       PATH=os.pathsep.join(filter(None, (BIN, os.environ.get("PATH")))))
            env.update((k, v) for k, v in request["env"].items() if k.startswith("ANSIBLE_"))
            proc = subprocess.run(argv, env=env, cwd=request["cwd"], capture_output=True, text=True, check=False)
            reply = {"rc": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr}
        self.wfile.write(json.dumps(reply).encode() + b"\n")


class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


def main(socket_path, run_dir):
    vars_file = os.path.join(os.path.dirname(socket_path), "connection.json")
    with open(vars_file, "w") as f:
        json.dump(connection_vars(run_dir), f)
    with Server(socket_path, Handler) as server:
        server.vars_file = vars_file
        # Not the user's ~/.ansible (make test-debian12 runs without scripts/test.sh's settings).
        server.ansible_home = os.path.join(ROOT, ".build", "test-home", "ansible")
        print("host_controller.py: serving on %s" % socket_path, flush=True)
        server.serve_forever()


if __name__ == "__main__":
    main(*sys.argv[1:])
