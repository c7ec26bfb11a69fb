"""Answer extraction after a thinking model's reasoning block (protocols/reasoning.py, flows/stages/grade.py)."""

from __future__ import annotations

import pandas as pd

from confgrid.flows.stages.grade import parse_generations
from confgrid.protocols.reasoning import strip_reasoning


def test_think_block_removed_before_parsing():
    gen = pd.DataFrame({"item_id": ["1", "2", "3", "4"], "raw_output": [
        "<think>Lyon? No, Paris.\nGuess: Lyon</think>\nGuess: Paris\nProbability: 0.8",
        "<think>the budget ran out while thinking about Guess: X",
        "Guess: Rome\nProbability: 0.4",
        "reasoning opened by the template</think>Guess: Oslo\nProbability: 0.9"]})
    p = parse_generations(gen, "confidence")
    assert list(p["answer"][[0, 2, 3]]) == ["Paris", "Rome", "Oslo"]
    assert p["verbalized"][0] == 0.8
    assert list(p["parse_status"]) == ["ok", "reasoning_unterminated", "ok", "ok"]
    assert list(p["reasoning_status"]) == ["stripped", "unterminated", "none", "stripped"]
    assert pd.isna(p["answer"][1]) and pd.isna(p["verbalized"][1])


def test_declared_marker_uses_its_last_occurrence():
    v = strip_reasoning("analysis... final? no. assistantfinalGuess: Paris", end_marker="assistantfinal")
    assert v.text == "Guess: Paris" and v.status == "stripped"
    assert strip_reasoning("still analysing", end_marker="assistantfinal").status == "unterminated"
    assert strip_reasoning(None).status == "none"
