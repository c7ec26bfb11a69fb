"""The analysis modules import one way (no cycles); analysis/ never imports protocols/.

Each module is imported alone in a fresh interpreter and the ``confgrid``
modules it pulled in are read from ``sys.modules``, so an import done at the
bottom of a module, or one hidden in a package ``__init__``, is seen too.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

ANALYSIS = ["metrics", "estimators", "registry", "kernels", "clusters", "resampling", "fused", "bootstrap", "reliability", "transfer",
            "compare", "summary", "tables", "calibration_summary", "hard_easy", "figure_data", "signals", "closure",
            "evaluation"]

#: the intended layering: what each module may load (directly or not), nothing above it
ALLOWED = {
    "metrics": set(),
    "estimators": {"metrics"},
    "registry": {"metrics", "estimators"},
    "kernels": {"metrics", "estimators"},
    "clusters": set(),
    "resampling": set(),
    "fused": {"metrics", "estimators", "registry", "kernels", "clusters"},
    "bootstrap": {"metrics", "estimators", "registry", "kernels", "clusters", "resampling", "fused"},
    "reliability": {"metrics", "estimators"},
    "transfer": {"metrics"},
    "compare": {"metrics", "estimators", "registry", "kernels", "clusters", "resampling", "fused", "bootstrap"},
    "summary": {"metrics", "estimators", "registry", "kernels", "clusters", "resampling", "fused", "bootstrap", "compare"},
    "tables": {"metrics", "estimators", "registry", "kernels", "clusters", "resampling", "fused", "bootstrap", "compare", "summary"},
    "calibration_summary": {"metrics", "estimators"},
    "hard_easy": {"metrics", "estimators", "registry", "kernels", "clusters", "resampling", "fused", "bootstrap"},
    "figure_data": {"metrics", "estimators", "reliability"},
    "signals": set(),
    "closure": {"metrics", "estimators", "registry", "signals"},
    "evaluation": {"metrics", "estimators", "registry", "kernels", "clusters", "resampling", "fused", "bootstrap",
                   "compare", "signals", "closure"},
}

_PROBE = """
import importlib, json, sys
importlib.import_module(sys.argv[1])
print(json.dumps(sorted(m for m in sys.modules if m == "confgrid" or m.startswith("confgrid."))))
"""


def loaded_by(module: str) -> set[str]:
    """The ``confgrid`` modules in ``sys.modules`` after importing ``module`` in a fresh interpreter."""
    out = subprocess.run([sys.executable, "-c", _PROBE, module], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    """``{module: analysis modules it loads}`` for every analysis module, plus the protocol modules it loads."""
    g = {}
    for name in ANALYSIS:
        mods = loaded_by(f"confgrid.analysis.{name}")
        g[name] = {m.rsplit(".", 1)[-1] for m in mods if m.startswith("confgrid.analysis.")} - {name}
        g[name + ":protocols"] = {m for m in mods if m.startswith("confgrid.protocols")}
    return g


def test_metrics_imports_no_other_analysis_module(graph):
    assert graph["metrics"] == set()
    assert graph["estimators"] == {"metrics"}  # estimators -> metrics, never back


@pytest.mark.parametrize("name", ANALYSIS)
def test_each_module_loads_only_what_lies_below_it(graph, name):
    assert graph[name] <= ALLOWED[name], f"{name} loads {sorted(graph[name] - ALLOWED[name])}"


def test_no_two_modules_load_each_other(graph):
    cycles = [(a, b) for a in ANALYSIS for b in graph[a] if b in ANALYSIS and a in graph[b]]
    assert cycles == []


@pytest.mark.parametrize("name", ANALYSIS)
def test_analysis_does_not_import_protocols(graph, name):
    assert graph[name + ":protocols"] == set()


def test_root_registry_imports_nothing_of_the_package():
    assert loaded_by("confgrid.registry") == {"confgrid", "confgrid.registry"}
