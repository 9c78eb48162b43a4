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
