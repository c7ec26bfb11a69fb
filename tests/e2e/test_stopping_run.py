"""Early stopping end to end (issue 22 item 4): the fixture model on Ray runs a grid with
``execution.stop_when_resolved`` in rounds of whole chunks; the manifest, results/stopping, ``confgrid show`` and
the report say why the setting stopped; the final tables are those of the items that ran; a rerun reuses every
shard and decides the same; a later run without early stopping reuses every shard the first one computed."""

from __future__ import annotations

import json
import logging
import shutil

import pandas as pd
import pytest

from confgrid.analysis.stopping import STOP_REASONS, STOPPING_COLUMNS, conclusion_gaps, round_order
from confgrid.cli.show.tables import print_results
from confgrid.flows.runner import run_grid
from confgrid.flows.spec.grid import parse_grid
from confgrid.report.html import write_report

ray = pytest.importorskip("ray")

STOP = {"round_share": 0.25, "min_items": 16}
GRID = {
    "name": "stop",
    "models": [{"name": "fixture", "model": "confgrid-fixture", "batch_size": 16}],
    "datasets": [{"name": "triviaqa", "adapter": "triviaqa", "limit": 48, "seed": 1}],
    "bootstrap": {"resamples": 200, "seed": 3},
    "execution": {"shard_size": 8, "stop_when_resolved": STOP},
}
N_CHUNKS = 6


def _full_grid() -> dict:
    return {**GRID, "execution": {"shard_size": 8}}


@pytest.fixture(scope="module")
def stopped(ray_local, tmp_path_factory):
    out = tmp_path_factory.mktemp("stop")
    lines: list[str] = []
    handler = logging.Handler(logging.INFO)
    handler.emit = lambda rec: lines.append(rec.getMessage())
    log = logging.getLogger("confgrid")
    level = log.level
    log.setLevel(logging.INFO)
    log.addHandler(handler)
    try:
        summary = run_grid(parse_grid(GRID), out)
    finally:
        log.removeHandler(handler)
        log.setLevel(level)
    return out, summary, lines


def _manifest(out) -> dict:
    return json.loads((out / "manifest.json").read_text(encoding="utf-8"))


def test_the_setting_ran_whole_chunks_in_the_seeded_order_and_says_why_it_stopped(stopped):
    out, summary, lines = stopped
    st = pd.read_csv(out / "results" / "stopping.csv")
    assert list(st.columns) == STOPPING_COLUMNS and len(st) == 1
    row = st.iloc[0]
    assert row["reason"] in STOP_REASONS and row["items_total"] == 48 and row["chunks_total"] == N_CHUNKS
    # whole chunks, the first ones of the dataset's seeded order
    gens = pd.read_parquet(out / "tables" / "generations.parquet")
    assert set(gens["chunk"]) == set(round_order(N_CHUNKS, "triviaqa").tolist()[: int(row["chunks"])])
    assert len(gens) == row["items"] == gens["item_id"].nunique()
    assert gens.groupby("chunk").size().eq(8).all()
    # the manifest: the same reason, one history entry per round, and the log a line per round
    meta = _manifest(out)["meta"]["stopping"]["fixture/triviaqa"]
    assert meta["reason"] == row["reason"] and len(meta["history"]) == meta["rounds"] == row["rounds"]
    assert [h["items"] for h in meta["history"]] == sorted({h["items"] for h in meta["history"]})
    for r in range(1, int(row["rounds"]) + 1):
        assert sum(ln.startswith(f"early stopping fixture/triviaqa, round {r}: ") for ln in lines) == 1
    if row["reason"] == "budget_insufficient":
        assert row["n_required"] > row["budget"] and "the planner needs" in row["detail"]
    elif row["reason"] == "exhausted":
        assert row["items"] == row["items_total"]
    else:
        assert row["reason"] == "resolved" and row["n_resolved"] == row["n_gaps"]


def test_the_final_tables_are_those_of_the_items_that_ran(stopped):
    out, *_ = stopped
    row = pd.read_csv(out / "results" / "stopping.csv").iloc[0]
    settings = pd.read_csv(out / "results" / "settings.csv")
    assert (settings["items"] == row["items"]).all()
    # the decision was taken on the same evaluation as results/gaps (same items, seeds and resamples)
    gaps = conclusion_gaps(pd.read_parquet(out / "results" / "gaps.parquet"))
    tied = (gaps["gap"] == 0) & (gaps["lo"] == 0) & (gaps["hi"] == 0)
    finite = gaps[gaps["gap"].notna() & ~tied]
    assert (len(finite), int(finite["excludes_zero"].sum()), int(tied.sum())) == (
        row["n_gaps"], row["n_resolved"], row["n_tied"])


def test_show_and_the_report_say_why_the_setting_stopped(stopped):
    from rich.console import Console


    out, *_ = stopped
    reason = pd.read_csv(out / "results" / "stopping.csv").iloc[0]["reason"]
    console = Console(width=260, record=True)
    print_results(out, console)
    text = console.export_text()
    assert "Early stopping (execution.stop_when_resolved)" in text and reason in text
    assert text.index("Is the conclusion robust?") < text.index("Early stopping") < text.index("Metrics per setting")
    page = write_report(out, log_mlflow=False).path.read_text(encoding="utf-8")
    assert "Early stopping: why each setting stopped" in page and reason in page


def test_a_rerun_reuses_every_shard_and_decides_the_same(stopped, tmp_path):
    out, first, _ = stopped
    copy = tmp_path / "again"
    shutil.copytree(out, copy, ignore=shutil.ignore_patterns("mlflow.db", "mlartifacts"))
    again = run_grid(parse_grid(GRID), copy)
    assert again.computed_shards == 0 and again.model_calls == 0
    assert again.reused_shards == first.computed_shards
    a, b = (pd.read_csv(p / "results" / "stopping.csv") for p in (out, copy))
    pd.testing.assert_frame_equal(a, b)


def test_a_later_run_without_early_stopping_reuses_every_shard_it_computed(stopped, tmp_path):
    out, *_ = stopped
    copy = tmp_path / "full"
    shutil.copytree(out, copy, ignore=shutil.ignore_patterns("mlflow.db", "mlartifacts"))
    ran = {r["key"] for r in _manifest(copy)["shards"] if r["status"] == "done"}
    full = run_grid(parse_grid(_full_grid()), copy)
    records = _manifest(copy)["shards"]
    recomputed = [r for r in records if r["key"] in ran and not r["reused"]]
    assert recomputed == []
    assert {r["key"] for r in records if r["reused"]} >= ran
    assert full.computed_shards > 0  # the chunks the first run left out
    assert pd.read_parquet(copy / "tables" / "generations.parquet")["item_id"].nunique() == 48
    # no stale reasons: results/stopping keeps its header only, the manifest no entry
    assert list(pd.read_csv(copy / "results" / "stopping.csv").columns) == STOPPING_COLUMNS
    assert pd.read_csv(copy / "results" / "stopping.csv").empty
    assert "stopping" not in _manifest(copy)["meta"]


def test_a_later_run_with_a_higher_limit_reuses_every_shard_it_computed(stopped, tmp_path):
    """Issue 22 item 4: "a later run with a higher limit reuses everything": limit draws are nested, so the
    first 48 items (6 chunks of 8) are the first 48 of 64, with the same shard keys."""
    out, *_ = stopped
    copy = tmp_path / "more"
    shutil.copytree(out, copy, ignore=shutil.ignore_patterns("mlflow.db", "mlartifacts"))
    # every model shard (the dataset's own "items" record lists the 48 items: another list at 64)
    ran = {r["key"] for r in _manifest(copy)["shards"] if r["status"] == "done" and r["stage"] != "items"}
    grid = _full_grid()
    grid["datasets"] = [{**GRID["datasets"][0], "limit": 64}]
    run_grid(parse_grid(grid), copy)
    records = _manifest(copy)["shards"]
    assert [r for r in records if r["key"] in ran and not r["reused"]] == []
    assert {r["key"] for r in records if r["reused"]} >= ran
    assert pd.read_parquet(copy / "tables" / "generations.parquet")["item_id"].nunique() == 64
