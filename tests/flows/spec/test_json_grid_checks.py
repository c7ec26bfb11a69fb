"""The grid checks of JSON elicitation, refusal policies, repeated runs and letter probabilities (studies 002 and
003): each fails before Ray starts, naming the field (the runs themselves: tests/e2e/test_examples_studies.py)."""

from __future__ import annotations

import pytest

from confgrid.flows.spec.grid import parse_grid
from confgrid.flows.spec.base import GridSpecError

ray = pytest.importorskip("ray")

GRID = {
    "name": "json_e2e",
    "models": [{"name": "fixture", "model": "confgrid-fixture", "batch_size": 32}],
    "datasets": [{"name": "mmlu", "adapter": "mmlu", "limit": 8, "seed": 0}],
    "scoring": {"contexts": ["guess_slot"]},
    "metrics": {"names": ["ece", "brier", "calibration_gap"]},
    "bootstrap": {"resamples": 30},
    "parsing": {"refusal": ["drop", "chance"], "chance_seed": 1},
    "answer_sets": [
        {"id": "cb", "prompt": "json_answer_probability", "format": "mc", "temperature": 1.0, "runs": 2,
         "max_new_tokens": 16},
        {"id": "opts", "prompt": "json_option_probabilities", "format": "mc", "max_new_tokens": 16},
    ],
    "methods": [{"id": "letters", "kind": "letter_probability"}],
    "execution": {"shard_size": 8},
}


def test_grid_checks_fail_before_ray(monkeypatch, tmp_path):
    from confgrid.flows.runner import run_grid

    def never(*a, **k):
        raise AssertionError("Ray was started")

    monkeypatch.setattr(ray, "init", never)
    bad = {**GRID, "answer_sets": [{"id": "o", "prompt": "json_option_probabilities", "format": "open"}],
           "methods": []}
    with pytest.raises(GridSpecError, match="json_options"):
        run_grid(parse_grid(bad), tmp_path / "a")
    given = {**GRID, "answer_sets": [{"id": "h", "prompt": "json_confidence_given"}], "methods": []}
    with pytest.raises(GridSpecError, match="given_answer"):
        run_grid(parse_grid(given), tmp_path / "b")
    with pytest.raises(GridSpecError, match="temperature 0"):
        parse_grid({**GRID, "answer_sets": [{"id": "cb", "prompt": "json_answer_probability", "runs": 3}]})
    with pytest.raises(GridSpecError, match="refusal"):
        parse_grid({**GRID, "parsing": {"refusal": ["drop", "drop"]}})
    with pytest.raises(GridSpecError, match="letter_probability"):
        parse_grid({**GRID, "methods": [{"id": "l", "kind": "letter_probability", "renormalize": False}]})
