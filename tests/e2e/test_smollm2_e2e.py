"""A grid on the real small model by its name, end to end through Ray (``run_grid``, as ``confgrid run``):
the replica resolves ``smollm2-135m-instruct`` to the converted cache directory, generates, the driver parses
and grades, the answers are scored in a context, and P(True) is read for every item.

Slow (``-m slow``): a Ray start and a second load of the model cost more than the CI budget of this issue; the
in-process tests of tests/actors/test_smollm2.py cover the real tokenizer and model in the default run.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from confgrid.flows.spec.grid import parse_grid

pytestmark = pytest.mark.slow

GRID = {
    "name": "smol_e2e",
    "models": [{"name": "smol", "model": "smollm2-135m-instruct", "batch_size": 8}],
    "datasets": [{"name": "triviaqa", "adapter": "triviaqa", "limit": 4, "seed": 0},
                 {"name": "mmlu", "adapter": "mmlu", "limit": 4, "seed": 0}],
    "elicitation": {"prompt": "confidence", "max_new_tokens": 24},
    "scoring": {"contexts": ["guess_slot"]},
    "methods": [{"id": "p_true", "kind": "p_true"}],
    "bootstrap": {"resamples": 50},
}


@pytest.fixture(scope="module")
def run(smollm2_dir, tmp_path_factory):
    import os

    import ray

    from confgrid.actors.gguf_models import CACHE_ENV
    from confgrid.flows.runner import run_grid

    before = os.environ.get(CACHE_ENV)
    os.environ[CACHE_ENV] = str(smollm2_dir.parent)  # the replica (a Ray worker) inherits it: no reconversion
    try:
        out = tmp_path_factory.mktemp("smol_run")
        summary = run_grid(parse_grid(GRID), out)
    finally:
        if ray.is_initialized():
            ray.shutdown()
        if before is None:
            os.environ.pop(CACHE_ENV, None)
        else:
            os.environ[CACHE_ENV] = before
    return out, summary


def test_grid_on_the_named_real_model(run, smollm2_dir):
    out, _ = run
    gen = pd.read_parquet(out / "tables" / "generations.parquet")
    assert len(gen) == 8 and (gen["raw_output"].str.len() > 0).all()
    assert set(gen["finish_reason"]) <= {"stop", "length"}
    graded = pd.read_parquet(out / "tables" / "graded.parquet")
    assert len(graded) == 8 and graded["parse_status"].notna().all()
    ok = graded[graded["parse_status"] == "ok"]
    assert ok["verbalized"].between(0, 1).all()
    scores = pd.read_parquet(out / "tables" / "scores.parquet")
    parsed = graded["answer"].map(lambda a: isinstance(a, str) and bool(a.strip())).sum()
    assert len(scores) == parsed and (scores["n_tokens"] == scores["logprobs"].map(len)).all()
    sig = pd.read_parquet(out / "tables" / "signals.parquet")
    pt = sig[sig["signal"] == "p_true"].drop_duplicates(["dataset", "item_id"]).set_index(["dataset", "item_id"])
    answered = graded[graded["answer"].map(lambda a: isinstance(a, str) and bool(a.strip()))]
    # P(True) of every item whose answer parsed: a probability read from the next-token distribution
    # (target_absent: A not among the top tokens, recorded as 0 by the method's definition)
    rows = pt.loc[list(zip(answered["dataset"], answered["item_id"]))]
    assert set(rows["status"]) <= {"ok", "target_absent"}
    assert np.isfinite(rows["confidence"]).all() and rows["confidence"].between(0, 1).all()
    assert (rows.loc[rows["status"] == "ok", "confidence"] > 0).all()
    import json

    manifest = json.loads((out / "manifest.json").read_text())
    prov = manifest["meta"]["mlflow_record"]
    assert str(smollm2_dir) in json.dumps(prov)  # the replica loaded the converted directory
