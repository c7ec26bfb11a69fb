"""Every ``>>>`` example in the installed packages' docstrings runs and prints what it says.

The docstrings' examples are the first numbers a reader checks a metric against (scikit-learn's habit, STYLE.md);
an example that went stale would teach a wrong number. One test per module that has examples.
"""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

PACKAGES = ("analysis", "protocols", "actors", "flows", "report", "cli", "cluster")


def _modules() -> list[str]:
    names = ["confgrid.registry", "confgrid.errors", "confgrid.yaml_load"]
    for pkg in PACKAGES:
        mod = importlib.import_module(f"confgrid.{pkg}")
        names += [m.name for m in pkgutil.walk_packages(mod.__path__, f"confgrid.{pkg}.")]
    return names


def _with_examples() -> list[str]:
    finder = doctest.DocTestFinder()
    return [name for name in _modules()
            if any(t.examples for t in finder.find(importlib.import_module(name)))]


WITH_EXAMPLES = _with_examples()


def test_the_packages_have_examples():
    assert len(WITH_EXAMPLES) >= 20 and "confgrid.analysis.metrics" in WITH_EXAMPLES


@pytest.mark.parametrize("name", WITH_EXAMPLES)
def test_docstring_examples(name):
    res = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE,
                          raise_on_error=False, report=True)
    assert res.failed == 0, f"{name}: {res.failed} of {res.attempted} examples failed (printed above)"
