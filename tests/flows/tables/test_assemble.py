"""Assembly of a run's units from its finished shards (flows/tables/assemble.py), without Ray: a plan is run by hand,
each stage's stored table built by its own ``table`` from made-up engine outputs. A unit with a needed shard missing
gets no metrics and is named in the log with its counts; the probe's completeness is the unit's ``probe_complete``.
"""

from __future__ import annotations

import numpy as np
import pytest

from confgrid.actors.calls import GenerationOutput, ScoreOutput
from confgrid.flows.plan.grid_plan import GridPlan
from confgrid.flows.spec.grid import parse_grid
from confgrid.flows.tables.assemble import assemble, shard_table
from confgrid.protocols.aggregation import get_aggregation
from confgrid.protocols.datasets import BUNDLED, load_items

ITEMS = {"triviaqa": load_items("triviaqa", BUNDLED["triviaqa"], limit=6, seed=0, dataset_name="triviaqa")}
LOGPROBS = (-0.5, -0.25)  # every scored answer's two answer tokens, in nats
UNIT = ("a", "triviaqa", "main")


def _plan(**over) -> GridPlan:
    grid = {"name": "assemble", "models": [{"name": "a", "model": "confgrid-fixture"}],
            "datasets": [{"name": "triviaqa", "adapter": "triviaqa", "limit": 6, "seed": 0}],
            "scoring": {"contexts": ["bare", "guess_slot"]}, "execution": {"shard_size": 4}, **over}
    return GridPlan(parse_grid(grid), ITEMS)


def _outputs(sh) -> tuple:
    if sh.stage == "score":
        return tuple(ScoreOutput(LOGPROBS, (1, 2), 10) for _ in sh.rows)
    text = "Guess: Paris\nProbability: 0.7" if sh.stage == "generate" else "Probability: 0.8"
    return tuple(GenerationOutput(text, "stop", n_tokens=5, prompt_tokens=20) for _ in sh.rows)


def _run(plan: GridPlan, skip=lambda sh: False) -> tuple[dict, list]:
    """Every shard the plan yields, done in plan order, except those ``skip`` picks (never run: their downstream
    shards are never planned)."""
    done, shards, todo = {}, [], list(plan.generate_shards())
    while todo:
        sh = todo.pop(0)
        shards.append(sh)
        if skip(sh):
            plan.on_failed(sh)
            continue
        done[sh.key] = shard_table(plan, sh, _outputs(sh))
        todo += plan.on_done(sh, done[sh.key])
    return done, shards


def _first(stage: str):
    """A ``skip`` that picks the first shard of ``stage`` only."""
    picked: list = []

    def pick(sh) -> bool:
        if sh.stage == stage and not picked:
            picked.append(sh)
            return True
        return False

    return pick


def test_a_complete_unit_has_its_answers_and_token_scores_per_context():
    plan = _plan()
    done, shards = _run(plan)
    out = assemble(plan, done, shards)
    unit = out.units[UNIT]
    assert len(unit.graded) == 6 and {i.item_id for i in unit.items} == set(unit.graded["item_id"])
    assert sorted(unit.tokens["context_id"].unique()) == ["bare", "guess_slot"] and len(unit.tokens) == 12
    primary = plan.spec.scoring.aggregations[0]
    np.testing.assert_allclose(unit.tokens["token_score"], get_aggregation(primary)(np.array(LOGPROBS)))
    assert sum(t.num_rows for t in out.stage_tables["generations"]) == 6
    assert sum(t.num_rows for t in out.stage_tables["scores"]) == 12
    assert unit.probe is None  # no probe in this grid


def test_a_missing_score_shard_leaves_the_unit_out_and_says_how_many(caplog):
    plan = _plan()
    done, shards = _run(plan, skip=_first("score"))
    with caplog.at_level("WARNING", logger="confgrid"):
        out = assemble(plan, done, shards)
    assert UNIT not in out.units
    assert "a/triviaqa [main]: 1 shard(s) missing (1 planned and not done, 0 not planned" in caplog.text
    assert sum(t.num_rows for t in out.stage_tables["generations"]) == 6  # what was done is still stored


def test_a_missing_answer_shard_counts_the_score_shards_it_would_have_planned(caplog):
    plan = _plan()
    done, shards = _run(plan, skip=lambda sh: sh.stage == "generate" and sh.chunk == 1)
    with caplog.at_level("WARNING", logger="confgrid"):
        out = assemble(plan, done, shards)
    assert UNIT not in out.units
    # the missing generate shard, and its two scoring contexts' shards that were never planned
    assert "3 shard(s) missing (1 planned and not done, 2 not planned because the answers they read" in caplog.text


@pytest.mark.parametrize("skip_probe", [False, True])
def test_the_probe_is_complete_only_when_every_probe_shard_is_done(skip_probe, caplog):
    plan = _plan(probe={"enabled": True, "kinds": ["canonical", "own"]})
    done, shards = _run(plan, skip=lambda sh: skip_probe and sh.stage == "probe")
    assert any(sh.stage == "probe" for sh in shards)
    with caplog.at_level("WARNING", logger="confgrid"):
        out = assemble(plan, done, shards)
    unit = out.units[UNIT]  # the main set states its score: the probe is not needed for its metrics
    assert unit.probe_complete is not skip_probe
    assert ("supplied-answer probe is incomplete" in caplog.text) is skip_probe
    if not skip_probe:
        assert set(unit.probe["kind"]) == {"canonical", "own"} and (unit.probe["verbalized"] == 0.8).all()
