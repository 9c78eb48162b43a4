"""make test's VM step (make test-vm) keeps a subset of the integration tests on Debian 12's 6.1 kernel: every
module and every role must have at least one positive test there, named by a `pytest.mark.debian12(...)` marker
(tests/integration/conftest.py). The markers are read from the test files' source, so a module or role added
without one fails here, before any VM boots."""

import ast
import glob
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
INTEGRATION = os.path.join(ROOT, "tests", "integration")

# Run on the controller only, never on a managed host's kernel: the report's plots need the controller's
# matplotlib (the benchmark role delegates the module to localhost); make integration runs its tests here.
CONTROLLER_ONLY = {"benchmark_report"}
# Test files make test-vm leaves out (make test-ee, make test-debian12 run them): their markers count for nothing
# here.
NOT_IN_MAKE_TEST = {"test_ee.py"}


def _marker_names(node):
    """The names of a `pytest.mark.debian12("a", "b")` call, or None for any other expression."""
    if not isinstance(node, ast.Call):
        return None
    func = node.func
    if not (isinstance(func, ast.Attribute) and func.attr == "debian12"):
        return None
    return [arg.value for arg in node.args if isinstance(arg, ast.Constant) and isinstance(arg.value, str)]


def marked():
    """{name: [test file::function]} of every debian12 marker on a test function."""
    found = {}
    for path in sorted(glob.glob(os.path.join(INTEGRATION, "test_*.py"))):
        if os.path.basename(path) in NOT_IN_MAKE_TEST:
            continue
        with open(path) as handle:
            tree = ast.parse(handle.read(), path)
        for node in ast.walk(tree):
            if not isinstance(node, ast.FunctionDef):
                continue
            for decorator in node.decorator_list:
                for name in _marker_names(decorator) or ():
                    found.setdefault(name, []).append("%s::%s" % (os.path.basename(path), node.name))
    return found


def modules_and_roles():
    modules = {os.path.basename(p)[:-3] for p in glob.glob(os.path.join(ROOT, "plugins", "modules", "*.py"))}
    modules.discard("__init__")
    roles = {os.path.basename(p) for p in glob.glob(os.path.join(ROOT, "roles", "*")) if os.path.isdir(p)}
    return modules, roles


def test_every_module_and_role_has_a_positive_test_on_debian12():
    modules, roles = modules_and_roles()
    names = marked()
    missing = sorted((modules - CONTROLLER_ONLY | roles) - set(names))
    assert not missing, "no test marked pytest.mark.debian12(...) for %s: make test-vm would not run them on 6.1" % (
        ", ".join(missing))


def test_markers_name_only_modules_and_roles():
    modules, roles = modules_and_roles()
    unknown = {name: where for name, where in marked().items() if name not in modules | roles}
    assert not unknown, "debian12 markers name no module or role: %s" % unknown


def test_no_positive_test_on_debian12_is_marked_long():
    """make test-vm leaves the tests marked long out (scripts/test_vm.sh): a debian12 marker on one would name a
    test that never runs on 6.1 in make test."""
    both = []
    for path in sorted(glob.glob(os.path.join(INTEGRATION, "test_*.py"))):
        if os.path.basename(path) in NOT_IN_MAKE_TEST:
            continue
        with open(path) as handle:
            tree = ast.parse(handle.read(), path)
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and any(_marker_names(d) for d in node.decorator_list) and any(
                    isinstance(d, ast.Attribute) and d.attr == "long" for d in node.decorator_list):
                both.append("%s::%s" % (os.path.basename(path), node.name))
    assert not both, "marked both debian12 and long: %s" % both
