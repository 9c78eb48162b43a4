"""The modules' options have one source, docs/options.yml: the argument specs (module_utils/_argspecs), the doc
fragments, the program modules' own DOCUMENTATION options and xdp_deploy's argument spec of its program and group
entries are written from it by scripts/options.py (issue 39 item 3). A file edited by hand, or a source changed
without writing them again, fails here."""

import copy
import importlib.util
import os
import subprocess
import sys

import yaml

from ansible_collections.ebpf.xdp.plugins.module_utils import _argspecs, _common
from ansible_collections.ebpf.xdp.plugins.module_utils.bpf import pins as _pins
from ansible_collections.ebpf.xdp.plugins.module_utils.maps import devmap as _devmap

ROOT = os.path.join(os.path.dirname(__file__), "..", "..", "..")
SCRIPT = os.path.join(ROOT, "scripts", "options.py")


def generator():
    spec = importlib.util.spec_from_file_location("options_script", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_written_file_is_what_the_source_gives():
    done = subprocess.run([sys.executable, SCRIPT, "--check"], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


def stale_after(change):
    """The files that differ from the committed ones when the source is changed by change(source)."""
    options = generator()
    source = options.load()
    change(source)
    return sorted(os.path.relpath(path, options.ROOT) for path, text in options.outputs(source).items()
                  if options.read(path) != text)


def test_a_changed_description_or_default_is_found_stale_where_it_is_written():
    def describe(source):
        source["sets"]["interface"]["options"]["netns"]["description"].append("One more sentence.")
    assert stale_after(describe) == ["plugins/doc_fragments/interface.py"]

    def default(source):
        source["sets"]["xdp_program"]["options"]["mode"]["default"] = "generic"
    # The role's entries take the module's default unless the role says otherwise.
    assert stale_after(default) == ["plugins/module_utils/_argspecs.py", "plugins/modules/xdp_program.py",
                                    "roles/xdp_deploy/meta/argument_specs.yml"]

    def role_words(source):
        source["roles"]["xdp_deploy_tc_programs"]["options"]["interface"]["description"] = "The interface."
    assert stale_after(role_words) == ["roles/xdp_deploy/meta/argument_specs.yml"]


def test_the_source_documents_what_the_argument_specs_take():
    with open(os.path.join(ROOT, "docs", "options.yml"), encoding="utf-8") as source:
        sets = yaml.safe_load(source)["sets"]
    for option_set in sets.values():
        for name, option in option_set["options"].items():
            assert option.get("description"), "%s has no description" % name
            assert option.get("type"), "%s has no type" % name
    assert _common.XDP_PROGRAM_ARGS == dict(_argspecs.XDP_PROGRAM_OPTIONS, **_argspecs.INTERFACE_ARGS,
                                            **_argspecs.PROGRAM_ARGS, **_argspecs.PIN_ROOT_ARGS)
    # Defaults the code also names: the copies in the source must say the same.
    assert _argspecs.PIN_ROOT_ARGS["pin_root"]["default"] == _pins.DEFAULT_PIN_ROOT
    assert _argspecs.DEVMAP_GROUP_OPTIONS["shared_maps"]["default"] == _devmap.DEFAULT_SHARED_MAPS


def test_a_region_without_its_markers_is_a_clear_error():
    options = generator()
    try:
        options.replace_region("options:\n  mode: {}\n", "(xdp_program)", "", 2)
    except SystemExit as exc:
        assert str(exc) == "options.py: no '# BEGIN options (xdp_program)' ... '# END options (xdp_program)' lines " \
                           "to write into"
    else:
        raise AssertionError("no error")


def test_the_role_takes_the_modules_choices_and_types_unless_the_source_says_otherwise():
    options = generator()
    source = options.load()
    with open(os.path.join(ROOT, "roles", "xdp_deploy", "meta", "argument_specs.yml"), encoding="utf-8") as role:
        main = yaml.safe_load(role)["argument_specs"]["main"]["options"]
    for role_option, how in source["roles"].items():
        assert main[role_option]["options"] == options.role_options(copy.deepcopy(source), how), role_option
    programs = main["xdp_deploy_programs"]["options"]
    assert programs["mode"]["choices"] == _argspecs.XDP_PROGRAM_OPTIONS["mode"]["choices"]
    assert programs["object"]["type"] == "str"  # the role names an object of xdp_deploy_objects, not a path


# ---------------------------------------------------------------- copies Ansible requires: they must agree


def role_specs():
    """(role, entry point, its options) of every role's meta/argument_specs.yml."""
    roles = os.path.join(ROOT, "roles")
    for role in sorted(os.listdir(roles)):
        path = os.path.join(roles, role, "meta", "argument_specs.yml")
        if os.path.exists(path):
            with open(path, encoding="utf-8") as handle:
                for entry, spec in yaml.safe_load(handle)["argument_specs"].items():
                    yield role, entry, spec.get("options") or {}


def test_every_role_s_pin_root_is_the_modules_default():
    """A role's pin root option (in every entry point that takes it) and its default value say the modules'
    O(pin_root) default, which docs/options.yml and bpf/pins both name (checked above)."""
    found = []
    for role, entry, options in role_specs():
        for name, option in options.items():
            if name.endswith("_pin_root"):
                found.append((role, entry, name, option.get("default")))
    assert found and {default for *_where, default in found} == {_pins.DEFAULT_PIN_ROOT}, found
    defaults = []
    for role in sorted(os.listdir(os.path.join(ROOT, "roles"))):
        path = os.path.join(ROOT, "roles", role, "defaults", "main.yml")
        if os.path.exists(path):
            with open(path, encoding="utf-8") as handle:
                values = yaml.safe_load(handle) or {}
            defaults += [(name, value) for name, value in values.items() if name.endswith("_pin_root")]
    # A role that takes another role's pin root falls back to the same default: "{{ x | default('...') }}".
    assert defaults and all(value == _pins.DEFAULT_PIN_ROOT or "default('%s')" % _pins.DEFAULT_PIN_ROOT in value
                            for _name, value in defaults), defaults


def test_xdp_deploy_s_objects_take_bpf_object_s_compile_options_as_it_types_them():
    """xdp_deploy's objects become datapath's objects entries, which take ebpf.xdp.bpf_object's options
    (plugins/filter/deploy_config passes include_dirs, defines and cflags on): the role types them as the module
    does (its DOCUMENTATION, which validate-modules holds to its argument spec)."""
    spec = importlib.util.spec_from_file_location("bpf_object_module",
                                                  os.path.join(ROOT, "plugins", "modules", "bpf_object.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    documented = yaml.safe_load(module.DOCUMENTATION)["options"]
    [objects] = [options["xdp_deploy_objects"]["options"] for role, entry, options in role_specs()
                 if role == "xdp_deploy" and entry == "main"]
    passed_on = ("include_dirs", "defines", "cflags")
    assert set(passed_on) <= set(objects), sorted(objects)
    for name in passed_on:
        assert {key: objects[name].get(key) for key in ("type", "elements")} == \
            {key: documented[name].get(key) for key in ("type", "elements")}, name
