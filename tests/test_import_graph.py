"""The packages import one way (protocols/analysis <- actors <- flows <- report/cluster <- cli; no package imports
the development tools); inside analysis/, the modules import one way (no cycles) and never import protocols/.

Each module is imported alone in a fresh interpreter and the ``confgrid``
modules it pulled in are read from ``sys.modules``, so an import done at the
bottom of a module, or one hidden in a package ``__init__``, is seen too.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ANALYSIS = ["metrics", "estimators", "binning", "conventions", "registry", "kernels", "clusters", "resampling", "reweighting", "fused", "bootstrap", "intervals", "reliability", "transfer",
            "compare", "means", "tables", "calibration_summary", "hard_easy", "figure_data", "signals", "closure",
            "verdicts", "evaluation", "stopping"]

#: the intended layering: what each module may load (directly or not), nothing above it
ALLOWED = {
    "metrics": set(),
    "estimators": {"metrics"},
    "binning": {"metrics", "estimators"},
    "conventions": {"metrics", "estimators", "binning"},
    "registry": {"metrics", "estimators", "binning", "conventions"},
    "kernels": {"metrics", "estimators", "binning", "conventions", "registry"},
    "clusters": set(),
    "resampling": set(),
    "reweighting": set(),
    "fused": {"metrics", "estimators", "binning", "conventions", "registry", "kernels", "clusters", "reweighting"},
    "bootstrap": {"metrics", "estimators", "binning", "conventions", "registry", "kernels", "clusters", "reweighting", "resampling", "fused"},
    "intervals": {"metrics", "estimators", "binning", "conventions", "registry", "kernels", "clusters", "reweighting", "resampling",
                  "fused", "bootstrap"},
    "reliability": {"metrics", "estimators", "binning"},
    "transfer": {"metrics"},
    "compare": {"metrics", "estimators", "binning", "conventions", "registry", "kernels", "clusters", "reweighting", "resampling", "fused", "bootstrap"},
    "means": {"metrics", "estimators", "binning", "conventions", "registry", "kernels", "clusters", "reweighting", "resampling", "fused", "bootstrap", "compare",
              "signals"},
    "tables": {"metrics", "estimators", "binning", "conventions", "registry", "kernels", "clusters", "reweighting", "resampling", "fused", "bootstrap", "compare", "means",
               "signals", "transfer"},
    "calibration_summary": {"metrics", "estimators"},
    "hard_easy": {"metrics", "estimators", "binning", "conventions", "registry", "kernels", "clusters", "reweighting", "resampling", "fused", "bootstrap"},
    "figure_data": {"metrics", "estimators", "binning", "reliability"},
    "signals": set(),
    "closure": {"metrics", "estimators", "binning", "conventions", "registry", "signals"},
    "verdicts": {"metrics", "estimators", "binning", "conventions", "registry", "kernels", "clusters", "reweighting", "resampling", "fused", "bootstrap"},
    "evaluation": {"metrics", "estimators", "binning", "conventions", "registry", "kernels", "clusters", "reweighting", "resampling", "fused", "bootstrap",
                   "compare", "signals", "closure", "verdicts", "intervals"},
    "stopping": {"metrics", "estimators", "binning", "conventions", "registry", "kernels", "clusters", "reweighting", "resampling", "fused", "bootstrap",
                 "compare", "signals", "closure", "verdicts", "evaluation", "planner", "intervals"},
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


# --- every package: the layers, read statically from the source (lazy imports inside functions included) ---

#: package -> its folder in the repository (pyproject's package-dir) and the packages it may import
ROOT = Path(__file__).resolve().parent.parent
LAYERS = {
    "confgrid": ("confgrid", set()),
    "analysis": ("analysis", {"confgrid"}),
    "protocols": ("protocols", {"confgrid"}),
    "actors": ("actors", {"confgrid", "protocols"}),
    "flows": ("flows", {"confgrid", "analysis", "protocols", "actors"}),
    "report": ("report", {"confgrid", "analysis", "protocols", "flows"}),
    "cluster": ("cluster", {"confgrid", "flows"}),
    "cli": ("cli", {"confgrid", "analysis", "protocols", "actors", "flows", "report", "cluster"}),
}
#: modules of the root package (confgrid/): they belong to the "confgrid" layer
ROOT_MODULES = {"registry", "yaml_load", "errors"}


def _imported_packages(path: Path, root: Path = ROOT) -> set[str]:
    """The confgrid packages (and ``tools``) a source file imports anywhere in it, relative imports resolved."""
    import ast

    folder = path.parent.relative_to(root).parts  # e.g. ("analysis", "ace")
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level:
            base = [p for p in folder[: len(folder) - (node.level - 1)] if p != "confgrid"]
            names = [".".join(["confgrid", *base, *([node.module] if node.module else [])])]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""]
        for name in names:
            parts = name.split(".")
            if parts[0] == "tools":
                out.add("tools")
            elif parts[0] == "confgrid":
                sub = parts[1] if len(parts) > 1 else ""
                out.add("confgrid" if sub in ROOT_MODULES or sub == "" else sub)
    return out


@pytest.mark.parametrize("package", sorted(LAYERS))
def test_each_package_imports_only_the_layers_below_it(package):
    folder, allowed = LAYERS[package]
    bad = {}
    for path in sorted((ROOT / folder).rglob("*.py")):
        extra = _imported_packages(path) - allowed - {package}
        if extra:
            bad[str(path.relative_to(ROOT))] = sorted(extra)
    assert bad == {}, f"{package} may import {sorted(allowed)} only"


def test_the_layers_have_no_cycle_and_cover_every_package():
    import tomllib

    dirs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    tops = {name.split(".")[1] if "." in name else name for name in dirs}
    assert tops == set(LAYERS)
    order = ["confgrid", "analysis", "protocols", "actors", "flows", "report", "cluster", "cli"]
    for i, pkg in enumerate(order):
        assert LAYERS[pkg][1] <= set(order[:i]), pkg


def test_the_static_reader_sees_lazy_and_relative_imports(tmp_path):
    # the checker itself: a lazy import inside a function and a relative import are both found
    src = tmp_path / "flows" / "probe.py"
    src.parent.mkdir()
    src.write_text("from .store import x\nfrom ..analysis import metrics\n\ndef f():\n    from confgrid.report import y\n"
                   "    import tools.fixture\n    from confgrid import registry\n")
    assert _imported_packages(src, tmp_path) == {"flows", "analysis", "report", "tools", "confgrid"}


# --- flows/ by concept: its subpackages import one way, and the pure ones never load Ray ---

#: flows' subpackage (or top module) -> the ones it may import; a plan (what to compute) is pure and testable
#: without Ray, the executor only runs it (DESIGN.md); ``runner`` ties them together
FLOWS_LAYERS = {
    "stages": set(),
    "store": set(),
    "tracking": set(),
    "spec": {"stages"},
    "plan": {"spec", "stages", "store"},
    "tables": {"plan", "spec", "stages", "store"},
    "execute": {"plan", "spec", "stages", "store", "tables"},
    "evaluate": {"execute", "plan", "spec", "stages", "store", "tables", "tracking"},
    "analyze": {"evaluate", "execute", "plan", "spec", "stages", "store", "tables", "tracking"},
    "studies": {"evaluate", "execute", "plan", "spec", "stages", "store", "tables", "tracking"},
    "runner": {"analyze", "evaluate", "execute", "plan", "spec", "stages", "store", "studies", "tables", "tracking"},
}
#: the pure parts of flows/: no Ray, statically or at import
PURE = ("stages", "store", "spec", "plan", "tables")


def _flows_part(path: Path) -> str:
    rel = path.relative_to(ROOT / "flows").parts
    return rel[0] if len(rel) > 1 else rel[0][: -len(".py")]


def _flows_imports(path: Path) -> tuple[set[str], bool]:
    """The flows parts a file of flows/ imports (lazy imports included), and whether it imports ray."""
    import ast

    parts, ray = set(), False
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
            [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
        for name in names:
            if name.startswith("confgrid.flows."):
                parts.add(name.split(".")[2])
            ray = ray or name.split(".")[0] == "ray"
    return parts, ray


def test_every_flows_file_belongs_to_a_declared_part():
    found = {_flows_part(p) for p in (ROOT / "flows").rglob("*.py") if p.name != "__init__.py" or
             p.parent != ROOT / "flows"}
    assert found <= set(FLOWS_LAYERS), sorted(found - set(FLOWS_LAYERS))


def test_flows_parts_import_one_way_and_the_pure_ones_never_ray():
    bad, ray = {}, []
    for path in sorted((ROOT / "flows").rglob("*.py")):
        if path.parent == ROOT / "flows" and path.name == "__init__.py":
            continue
        me = _flows_part(path)
        parts, uses_ray = _flows_imports(path)
        extra = parts - FLOWS_LAYERS[me] - {me}
        if extra:
            bad[str(path.relative_to(ROOT))] = sorted(extra)
        if uses_ray and me in PURE:
            ray.append(str(path.relative_to(ROOT)))
    assert bad == {}, "flows/ parts import only the parts below them (FLOWS_LAYERS)"
    assert ray == [], "spec, plan, tables, stages and store are pure: no Ray"


@pytest.mark.parametrize("module", ["confgrid.flows.spec.grid", "confgrid.flows.plan.grid_plan",
                                    "confgrid.flows.tables.assemble", "confgrid.flows.tables.signals"])
def test_a_plan_is_built_without_ray_or_the_executor(module):
    """Importing the spec, the plan or the stage tables loads neither Ray nor flows.execute (a fresh interpreter)."""
    probe = ("import importlib, json, sys; importlib.import_module(sys.argv[1]); "
             "print(json.dumps(sorted(m for m in sys.modules if m == 'ray' or m.startswith(('ray.', 'confgrid.flows.execute')))))")
    out = subprocess.run([sys.executable, "-c", probe, module], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


def test_every_package_folder_is_installed():
    """Each folder with an ``__init__.py`` under a package folder is in pyproject's ``packages`` and
    ``package-dir`` (a folder left out would be missing from a non-editable install)."""
    import tomllib

    setup = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    dirs = {d: name for name, d in setup["package-dir"].items()}
    missing = []
    for folder, _ in LAYERS.values():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = str(init.parent.relative_to(ROOT))
            if "__pycache__" in rel:
                continue
            if rel not in dirs or dirs[rel] not in setup["packages"]:
                missing.append(rel)
    assert missing == []
