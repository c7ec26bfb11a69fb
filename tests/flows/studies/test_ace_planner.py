"""Study 001's planner of its signal rows (flows/studies/ace.py): it says in the log why no ACE table comes."""

from __future__ import annotations

import logging
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import yaml

from confgrid.analysis.ace.units import signal_rows
from confgrid.flows.spec.grid import parse_grid
from confgrid.flows.studies.ace import AccuracyControlled, plan_comparison

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def _spec():
    return parse_grid(yaml.safe_load((EXAMPLES / "ace.yaml").read_text()), base_dir=EXAMPLES)


def test_one_model_with_rows_plans_nothing_and_says_so(caplog):
    rows = pd.DataFrame({"model": "m1", "dataset": "d", "method": "verbalized", "item_id": ["a", "b"],
                         "signal": [0.2, 0.9], "correct": [0.0, 1.0], "answer": ["x", "y"]})
    with caplog.at_level(logging.WARNING, logger="confgrid"):
        assert plan_comparison(_spec(), signal_rows(rows)) is None
    assert "fewer than two models have rows to compare; no ACE tables" in caplog.text


def test_no_rows_at_all_is_said_by_the_view(caplog, tmp_path):
    study = AccuracyControlled.__new__(AccuracyControlled)
    study.rows, study.ratings = pd.DataFrame({"model": [], "item_id": []}), None
    study.store = SimpleNamespace(write_table=lambda name, tables: tmp_path / f"{name}.parquet")
    with caplog.at_level(logging.WARNING, logger="confgrid"):
        out = study.view(SimpleNamespace(planned={}))
    assert out.frames == type(out.frames)() and "no model has rows to compare; no ACE tables" in caplog.text
