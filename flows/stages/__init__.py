"""The model stages, one file each, registered on import (see flows/stages/base.py and README "Adding a stage").

The pure steps of the stage DAG (building requests, parsing, grading, aggregating) live in their stage's file
and are importable from here, as before the split.
"""

from __future__ import annotations

from confgrid.flows.stages.base import STAGES, CallParams, MethodRow, Stage, get_stage, register_stage, relabel
from confgrid.flows.stages.generate import GenerateRow, question_text
from confgrid.flows.stages.grade import REFUSAL_POLICIES, grade_answers, parse_generations
from confgrid.flows.stages.score import ScoreRow, aggregate_scores, score_requests, token_signal
from confgrid.flows.stages.probe import ProbeRow
from confgrid.flows.stages import hidden, next_token, rate, sample  # noqa: F401 - registers the method stages

__all__ = ["STAGES", "Stage", "get_stage", "register_stage", "CallParams", "GenerateRow", "ScoreRow", "ProbeRow",
           "MethodRow", "REFUSAL_POLICIES", "relabel", "question_text", "parse_generations", "grade_answers",
           "score_requests", "aggregate_scores", "token_signal"]
