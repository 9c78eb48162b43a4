# -*- coding: utf-8 -*-
# Copyright (c) ebpf.xdp contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The Ansible edge of the collection's modules: argument specs, the checks before any work (libraries, with
respawn under the system Python; privileges; the backend), and errors turned into fail_json.

Private to the ebpf.xdp collection: the interface may change without notice.
A module's main is run_module(): nothing below this file takes an
AnsibleModule; the work gets the options as a dict. The option sets come with
their documentation from one source, docs/options.yml (see _argspecs).
"""

from __future__ import annotations

import os
import traceback

from ansible.module_utils.basic import AnsibleModule, missing_required_lib
from ansible.module_utils.common.respawn import has_respawned, probe_interpreters_for_module, respawn_module

# First of the collection's own: the rest of them load from compiled bytecode kept on the host (see _bytecode).
from ansible_collections.ebpf.xdp.plugins.module_utils import _bytecode  # noqa: F401 pylint: disable=unused-import
from ansible_collections.ebpf.xdp.plugins.module_utils import _argspecs
from ansible_collections.ebpf.xdp.plugins.module_utils.bpf import bcc as _bcc, libbpf as _bpf
from ansible_collections.ebpf.xdp.plugins.module_utils.host import names as _names
from ansible_collections.ebpf.xdp.plugins.module_utils.host.privileges import BPF_CAPABILITIES, missing_capabilities
from ansible_collections.ebpf.xdp.plugins.module_utils.bpf.compile import CompileError
from ansible_collections.ebpf.xdp.plugins.module_utils._errors import EbpfXdpError

# The option sets, written with their documentation from one source (docs/options.yml, by scripts/options.py):
# the shared ones documented by the doc fragments of the same names, each module's own in its DOCUMENTATION.
INTERFACE_ARGS = _argspecs.INTERFACE_ARGS
PROGRAM_ARGS = _argspecs.PROGRAM_ARGS
PIN_ROOT_ARGS = _argspecs.PIN_ROOT_ARGS


def program_args(module: str) -> dict:
    """A program module's options: its own (generated as <MODULE>_OPTIONS from docs/options.yml) and the shared
    sets; ebpf.xdp.datapath's entries for its hook (the adapter's module) take the same."""
    return dict(**getattr(_argspecs, module.upper() + "_OPTIONS"), **INTERFACE_ARGS, **PROGRAM_ARGS, **PIN_ROOT_ARGS)


# The options of each item module; ebpf.xdp.datapath's config entries take the same.
XDP_PROGRAM_ARGS = program_args("xdp_program")
TC_PROGRAM_ARGS = program_args("tc_program")
DEVMAP_GROUP_ARGS = dict(**_argspecs.DEVMAP_GROUP_OPTIONS, **PIN_ROOT_ARGS)
DEVMAP_GROUP_RULES = dict(required_one_of=[("name", "id")])

# Options whose values become path components, or paths the collection writes at or builds paths under, and
# what each must be (host/names), by option name in every module: check_names runs them on every module's
# options (run_module) and every datapath entry before anything happens. A list option's check is its elements';
# a dict's applies to its suboptions.
NAMES = dict(
    interface=_names.check_interface, members=_names.check_interface, interfaces=_names.check_interface,
    netns=_names.optional(_names.check_netns), namespaces=_names.check_netns,
    shared_maps=_names.optional(_names.check_map_set),
    pin_root=_names.check_absolute, object_store=_names.check_absolute, cache_dir=_names.check_absolute,
    replay=_names.check_absolute,
    facts_before=dict(interfaces=_names.check_interface, netns=_names.optional(_names.check_netns)),
    sources=dict(dir=_names.check_absolute),
)
# Where `name` names an attachment (program modules, replay) or a multicast group.
PROGRAM_NAMES = dict(NAMES, name=_names.check_attachment)
DEVMAP_GROUP_NAMES = dict(NAMES, name=_names.check_group)


def check_names(params: dict, checks: dict = None, prefix: str = "") -> None:
    """Run the checks (default NAMES) on the options params has, putting back the values they return (roots
    normalised); BadNameError names the first option that fails (as prefix + option, a list's element by
    index)."""
    for option, check in (NAMES if checks is None else checks).items():
        value = params.get(option)
        if value is None:
            continue
        if isinstance(check, dict):
            if isinstance(value, dict):
                check_names(value, check, "%s%s." % (prefix, option))
        elif isinstance(value, list):
            params[option] = [check(item, "%s%s[%d]" % (prefix, option, index)) for index, item in enumerate(value)]
        else:
            params[option] = check(value, prefix + option)


# Where distributions install Python with their python3-pyroute2 package.
SYSTEM_INTERPRETERS = ["/usr/bin/python3", "/usr/libexec/platform-python", "/usr/bin/python"]


def require_libraries(module, libbpf: bool = True, pyroute2: bool = True, predicts: bool = True) -> None:
    """Fail with missing_required_lib when a needed binding is absent; in check mode, a module that changes
    things (predicts) predicts a change instead (see _missing_in_check_mode)."""
    if pyroute2:
        _require_pyroute2(module, predicts)
    if libbpf:
        try:
            _bpf.lib()
        except ImportError as exc:
            if predicts:
                _missing_in_check_mode(module, "libbpf")
            module.fail_json(msg=missing_required_lib("libbpf >= 1.0 (Debian: libbpf1)") + " " + str(exc),
                             exception=traceback.format_exc())


def _missing_in_check_mode(module, library: str) -> None:
    """Check mode on a fresh host: the toolchain role earlier in the play would have installed the library,
    had the play run for real, so predict a change (as for an object not compiled yet) rather than fail."""
    if module.check_mode:
        module.warn("%s is not installed yet; check mode assumes an earlier task (the ebpf.xdp.toolchain role) "
                    "installs it, and that this task would then change something" % library)
        module.exit_json(changed=True)


def _require_pyroute2(module, predicts: bool = True) -> None:
    """An interpreter without pyroute2 (a virtualenv, say) hands the module over
    to the system Python when that one has it, as ansible.posix does for selinux.
    """
    # Imported here: a module without netlink queries does not pay pyroute2's import time (~0.1 s).
    from ansible_collections.ebpf.xdp.plugins.module_utils.host import netlink as _netlink
    if not _netlink.HAS_PYROUTE2 and not has_respawned():
        interpreter = probe_interpreters_for_module(SYSTEM_INTERPRETERS, "pyroute2")
        if interpreter:
            respawn_module(interpreter)
    if not _netlink.HAS_PYROUTE2:
        if predicts:
            _missing_in_check_mode(module, "pyroute2")
        module.fail_json(msg=missing_required_lib("pyroute2 (Debian: python3-pyroute2)"),
                         exception=_netlink.PYROUTE2_IMPORT_ERROR)


def require_privileges(module, needed=BPF_CAPABILITIES) -> None:
    """BPF and netlink changes need capabilities a normal user lacks; say so before touching anything."""
    missing = missing_capabilities(needed)
    if missing:
        module.fail_json(msg="this task needs %s, which the module's process lacks (uid %d); run it as root "
                             "(become: true)" % (", ".join(missing), os.geteuid()))


# What a module turns into fail_json; anything else is a bug and keeps its traceback.
KNOWN_ERRORS = (EbpfXdpError, OSError)


def fail_from(module, exc: Exception, **result) -> None:
    """Turn a domain exception into fail_json with what a user can act on."""
    details = dict(result)
    if isinstance(exc, _bpf.BpfError):
        if exc.errno is not None:
            details["errno"] = exc.errno
        if exc.log:
            details["verifier_log_tail"] = exc.log_tail()
            msg = "%s; last lines of the log:\n%s" % (exc, "\n".join(exc.log_tail(15)))
            module.fail_json(msg=msg, **details)
    if isinstance(exc, CompileError) and exc.output:
        details["stderr_lines"] = exc.output.splitlines()
        module.fail_json(msg="%s:\n%s" % (exc, exc.output.strip()), **details)
    module.fail_json(msg=str(exc), **details)


def prepare_backend(module) -> None:
    """A program module's checks of its backend and the options that go with it; for bcc, an interpreter that
    has bcc's binding (the system Python's, respawned into, as for pyroute2), or fail_json naming the package."""
    p = module.params
    if p["backend"] != "bcc":
        wrong = [name for name in ("source", "kernel_headers") if p.get(name)] + (["cflags"] if p.get("cflags") else [])
        if wrong:
            module.fail_json(msg="%s only apply to backend: bcc (this task loads an object with libbpf)"
                                 % ", ".join(wrong))
        return
    if p["object"]:
        module.fail_json(msg="backend bcc compiles source:, it loads no object: (give source: instead)")
    if p["constants"] or p["shared_maps"]:
        module.fail_json(msg="constants and shared_maps are not available with backend bcc; give settings as "
                             "cflags (-DNAME=value)")
    if p.get("section"):
        module.fail_json(msg="section names a program of a compiled object by its SEC(); backend bcc compiles a "
                             "source and takes the function's name as program: instead")
    if p["state"] != "present" or _bcc.has_bcc():
        return
    if not has_respawned():
        interpreter = probe_interpreters_for_module(SYSTEM_INTERPRETERS, "bcc")
        if interpreter:
            respawn_module(interpreter)
    try:
        _bcc.import_bcc()
    except _bcc.BccError as exc:
        module.fail_json(msg="%s: %s" % (missing_required_lib("bcc (Debian/Ubuntu: python3-bpfcc)"), exc),
                         changed=False)


def command_runner(module):
    """module.run_command for a program found on PATH; a missing program is an OSError the work explains
    (run_command itself would fail the whole task)."""
    def run(argv):
        path = module.get_bin_path(argv[0])
        if not path:
            raise OSError(2, "%s: command not found" % argv[0])
        return module.run_command([path] + list(argv[1:]))
    return run


def run_module(argument_spec: dict, work, rules: dict | None = None, prepare=None, libraries: dict | None = None,
               privileges=BPF_CAPABILITIES, failure=None, names: dict | None = None) -> None:
    """A module's whole main, in this order: the argument spec (and its rules), the names and paths of its
    options (check_names with names, default NAMES), prepare(module) (a check of
    options the spec cannot say, or a respawn), the libraries (require_libraries' arguments) and privileges
    (names, or a function of the options) the work needs, then work(params, check_mode, module) -> (result,
    warnings). A known error becomes fail_json with failure(params)'s keys (default: changed false) and what
    the error carries in its `details`; anything else is a bug and keeps its traceback."""
    module = AnsibleModule(argument_spec=argument_spec, supports_check_mode=True, **(rules or {}))
    params = module.params
    try:
        check_names(params, names)
        if prepare:
            prepare(module)
        require_libraries(module, **(libraries or {}))
        if privileges:
            require_privileges(module, privileges(params) if callable(privileges) else privileges)
        result, warnings = work(params, module.check_mode, module)
    except KNOWN_ERRORS as exc:
        fail_from(module, exc, **dict((failure or (lambda _params: {"changed": False}))(params),
                                      **getattr(exc, "details", {})))
    for warning in warnings:
        module.warn(warning)
    module.exit_json(**result)
