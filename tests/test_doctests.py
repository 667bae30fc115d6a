"""The Examples of every public name's docstring run and print what they show (issue 40):
each name in ``daskwp.__all__`` has a numpydoc Examples section, and its doctests pass.
(The API reference, docs/api.md, renders the same docstrings.)"""
import doctest
import inspect
import re

import pytest

import daskwp

NAMES = sorted(set(daskwp.__all__) - {"__version__"})
FLAGS = doctest.NORMALIZE_WHITESPACE | doctest.ELLIPSIS


def doctests_of(name):
    obj = getattr(daskwp, name)
    finder = doctest.DocTestFinder(recurse=inspect.isclass(obj))
    module = inspect.getmodule(obj)
    tests = finder.find(obj, f"daskwp.{name}", module=module, globs={})
    return [t for t in tests if t.examples]


def run(tests):
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    out = []
    for t in tests:
        runner.run(t, out=out.append)
    return runner.summarize(verbose=False), "".join(out)


@pytest.mark.parametrize("name", NAMES)
def test_examples_run(name):
    doc = inspect.getdoc(getattr(daskwp, name)) or ""
    assert re.search(r"^Examples\n-{8}$", doc, re.M), f"daskwp.{name} has no Examples section"
    tests = doctests_of(name)
    assert tests, f"daskwp.{name}'s Examples hold no doctest"
    result, report = run(tests)
    assert result.failed == 0, report
    assert result.attempted >= 2


def test_a_wrong_example_fails():
    test = doctest.DocTestParser().get_doctest(
        ">>> import daskwp\n>>> daskwp.WordPieceTokenizer().encode(['hello']).to_list()\n[[1]]\n",
        {}, "wrong", "wrong", 0)
    result, report = run([test])
    assert result.failed == 1 and "[[7592]]" in report
