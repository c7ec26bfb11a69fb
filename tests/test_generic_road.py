"""The generic road names no study and no model stage (issue 39): the runner, the evaluator, the writers and the
tracking reach the studies only through their registry (flows/studies/) and the stages only through their tables.

A grep over the code of those files (comments and docstrings left out): no import of a study entry or of a
study's own module, no identifier with a study's name as one of its ``_``-separated words, no string that is a
study's or a stage's name; in ``confgrid show`` and the report, no string that is a study's table either.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from confgrid.flows.stages.base import STAGES
from confgrid.flows.studies import load_studies

ROOT = Path(__file__).resolve().parent.parent

#: the generic road: plan, execute, collect, signals, evaluate, then the enabled studies' views
GENERIC = ["flows/runner.py", "flows/evaluate/run_evaluation.py", "flows/evaluate/outputs.py", "flows/tables/signals.py",
           "flows/tables/assemble.py",
           "flows/store/run_store.py", "flows/tracking.py", "cli/show/__init__.py", "cli/show/tables.py",
           "report/registry.py", "report/run_tables.py", "report/html.py"]
#: a study's own modules, below its registry entry
STUDY_MODULES = ("confgrid.flows.evaluate.ace", "confgrid.flows.evaluate.capability",
                 "confgrid.flows.evaluate.calibration_tables", "confgrid.flows.evaluate.study_tables")


#: show and the report print the studies' tables only through their registered sections
PAGES = ["cli/show/__init__.py", "cli/show/tables.py", "report/registry.py", "report/run_tables.py", "report/html.py"]


def _words(tables: bool = False) -> tuple[set[str], set[str]]:
    studies = load_studies()
    return set(studies), {*studies, *STAGES.names(), *(t for cls in studies.values() for t in cls.tables if tables)}


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def named(path: Path, tables: bool = False) -> list[str]:
    """What the code of ``path`` names of a study or a stage (``tables``: or a study's table): ``line: what``."""
    studies, strings = _words(tables)
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docs = _docstrings(tree)
    found = []

    def ident(name: str, line: int) -> None:
        words = name.lower().split("_")
        for s in studies:
            k = len(s.split("_"))
            if any("_".join(words[i:i + k]) == s for i in range(len(words) - k + 1)):
                found.append(f"{line}: identifier {name!r} names study {s!r}")

    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module.startswith("confgrid.flows.studies.") or node.module in STUDY_MODULES:
                found.append(f"{line}: imports {node.module}")
        if isinstance(node, ast.Name):
            ident(node.id, line)
        elif isinstance(node, ast.Attribute):
            ident(node.attr, line)
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            ident(node.name, line)
        elif isinstance(node, ast.alias):
            ident(node.asname or node.name.split(".")[-1], line)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            if node.value in strings:
                found.append(f"{line}: string {node.value!r}")
    return found


@pytest.mark.parametrize("rel", GENERIC)
def test_the_generic_road_names_no_study_and_no_stage(rel):
    assert named(ROOT / rel) == []


@pytest.mark.parametrize("rel", PAGES)
def test_show_and_the_report_name_no_study_table(rel):
    assert named(ROOT / rel, tables=True) == []


def test_the_grep_sees_a_study_and_a_stage(tmp_path):
    src = tmp_path / "x.py"
    src.write_text('"""ace in a docstring is fine."""\nfrom confgrid.flows.evaluate.ace import ace_rows\n'
                   'x = y.capability_rows\nz = "score"\n')
    got = named(src)
    assert any("imports confgrid.flows.evaluate.ace" in g for g in got)
    assert any("'ace_rows'" in g for g in got) and any("'capability_rows'" in g for g in got)
    assert any("string 'score'" in g for g in got) and not any(g.startswith("1:") for g in got)
    src.write_text('t = read("stopping")\n')
    assert named(src) == [] and named(src, tables=True) == ["1: string 'stopping'"]
