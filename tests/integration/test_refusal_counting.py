"""How a test of a feature the kernel lacks is counted (conftest's watch, kernel_features.Watch), the same on
every kernel: an inner pytest run with this directory's conftest and one feature no kernel has ("never"),
whose stand-in refusal is xdp_program's real answer for an interface that does not exist. Real module runs on
a real veth; what is asserted is the inner run's summary line and what each test reported.
"""

import os

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
pytest_plugins = ["pytester"]

# This directory's conftest, imported under another name (the inner run has a conftest of its own), with the
# collection importable as tests/conftest.py makes it, and the feature no kernel has.
INNER_CONFTEST = r'''
import importlib.util
import os
import sys

HERE = %(here)r
sys.path[:0] = [HERE]
from ansible.utils.collection_loader._collection_finder import _AnsibleCollectionFinder
_AnsibleCollectionFinder(paths=[os.path.join(os.path.dirname(os.path.dirname(HERE)), ".build", "collections")])._install()
spec = importlib.util.spec_from_file_location("integration_conftest", os.path.join(HERE, "conftest.py"))
integration = importlib.util.module_from_spec(spec)
sys.modules["integration_conftest"] = integration
spec.loader.exec_module(integration)
from integration_conftest import *  # noqa: F401,F403 (its hooks and fixtures)

import kernel_features
kernel_features.PROBES["never"] = ("a feature no kernel has (test_refusal_counting's)", lambda: False)
kernel_features.REFUSED_WITH["never"] = ("does not exist in this network namespace",)
kernel_features.NEEDED_BY["never"] = lambda module, args: module == "xdp_program"
'''

INNER_TESTS = r'''
import pytest


def args(pair, drop_obj, interface):
    return dict(interface=interface, netns=pair.rx, object=drop_obj, mode="generic")


@pytest.mark.kernel("never")
def test_refused_at_its_own_first_call(run_distro, pair, drop_obj):
    facts = run_distro("xdp_facts", dict(netns=pair.rx))  # needs nothing: runs as always
    assert not facts.get("failed"), facts
    run_distro("xdp_program", args(pair, drop_obj, "nosuch0"), check=True)
    raise AssertionError("not reached: the refusal ends the test")


@pytest.mark.kernel("never")
def test_a_call_that_needed_it_and_went_through(run_distro, pair, drop_obj):
    run_distro("xdp_program", args(pair, drop_obj, "eth0"))


@pytest.mark.kernel("never")
def test_never_asks_for_it(run_distro, pair):
    assert not run_distro("xdp_facts", dict(netns=pair.rx)).get("failed")


def test_needs_nothing(run_distro, pair, drop_obj):
    res = run_distro("xdp_program", args(pair, drop_obj, "eth0"))
    assert res["changed"] and not res.get("failed"), res
'''


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["one-process", "pytest-xdist"])
def test_refusals_are_counted_apart_and_asserted_by_each_test(pytester, workers):
    pytester.makeconftest(INNER_CONFTEST % {"here": HERE})
    pytester.makepyfile(test_inner=INNER_TESTS)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rf", "--vm=without", *workers)
    out = result.stdout.str()
    assert result.ret == 1, out
    result.stdout.re_match_lines([r".* 2 failed, 1 passed, 1 refusals asserted in .*"])
    result.stdout.fnmatch_lines([
        "*kernel features absent: refusals asserted instead (1 tests)*",
        "test_inner.py::test_refused_at_its_own_first_call  [[]no never[]] xdp_program (check mode) refused: "
        "'does not exist in this network namespace', nothing changed",
    ])
    result.stdout.fnmatch_lines([
        "*this kernel has no never, so xdp_program with {'interface': 'eth0'*} should have been refused with "
        "'does not exist in this network namespace'; it returned {*'changed': True*",
    ])
    result.stdout.fnmatch_lines(["*this kernel has no never, and the test ran to its end without a call of its "
                                 "own refused*"])
