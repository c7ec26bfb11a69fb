"""The stage registry (flows/stages), the actor's engine calls and the prompt output formats: one entry each,
and nothing outside them compares stage or format names (issue 39 §2)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from confgrid.actors.model_actor import ENGINE_CALLS
from confgrid.flows.stages.base import STAGES, Stage, get_stage, register_stage
from confgrid.flows.stages.method_base import get_reader, register_reader
from confgrid.protocols.method_kinds import METHOD_KINDS
from confgrid.protocols.output_formats import OUTPUT_FORMATS
from confgrid.registry import UnknownNameError

ROOT = Path(__file__).resolve().parents[3]
PACKAGES = ("confgrid", "flows", "actors", "protocols", "analysis", "report", "cli", "cluster")


def test_every_stage_names_an_engine_call_and_every_method_kind_a_method_stage():
    for name, st in STAGES.items():
        assert st.engine is None or st.engine in ENGINE_CALLS, name
        assert (st.engine is None) == (st.table is None) == (st.request is None), name
    for name, k in METHOD_KINDS.items():  # a method stage, and a reader of that stage's rows
        assert get_stage(k.stage).method_call is not None and get_reader(k.reader).stage == k.stage, name
    assert [n for n, st in STAGES.items() if st.answers] == ["generate"]


def test_duplicate_and_unknown_stage_names():
    with pytest.raises(ValueError, match="model stage 'score' is already registered"):
        register_stage(Stage("score", "score"))
    with pytest.raises(UnknownNameError, match="unknown model stage 'scores'; allowed: generate, grade, hidden"):
        get_stage("scores")
    with pytest.raises(UnknownNameError, match="unknown engine call 'gen'; allowed: generate, hidden_states"):
        ENGINE_CALLS.get("gen")
    with pytest.raises(ValueError, match="method reader 'p_true' is already registered"):
        register_reader(get_reader("p_true"))
    with pytest.raises(UnknownNameError, match="unknown method reader 'rating'; allowed: agreement, boxed_rating"):
        get_reader("rating")


def _hits(pattern: str, allowed: tuple[str, ...]) -> list[str]:
    rx = re.compile(pattern)
    out = []
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            rel = str(path.relative_to(ROOT))
            if rel.startswith(allowed):
                continue
            out += [f"{rel}:{i}" for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
                    if rx.search(line)]
    return out


def test_no_stage_or_output_format_is_named_outside_its_entry():
    stages = "|".join(n for n in STAGES.names())
    assert _hits(rf'\bstage\s*(==|!=)\s*"({stages})"|\bstage in \(|\.kind\s*(==|!=)\s*"(generate|score|next_token|'
                 r'hidden_states)"', ("flows/stages/", "protocols/method_kinds.py")) == []
    formats = "|".join(OUTPUT_FORMATS.names())
    assert _hits(rf'output\s*(==|!=)\s*"({formats})"', ("protocols/output_formats.py",)) == []
