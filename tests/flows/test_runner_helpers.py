"""Pure helpers of the runner and executor: the grid written for resume, the MLflow store of a moved folder,
manifest pruning, relabelling of shared shards, one-line error texts. No Ray, no model."""

from __future__ import annotations

import json
import os

import pandas as pd

from confgrid.flows.spec.grid import load_grid, parse_grid
from confgrid.flows.store.run_store import RunStore, ShardRecord


def test_grid_yaml_resolves_relative_paths_so_resume_works_from_anywhere(tmp_path, monkeypatch):
    from confgrid.flows.runner import _write_grid

    proj = tmp_path / "proj"
    (proj / "data").mkdir(parents=True)
    (proj / "data" / "mine.jsonl").write_text(json.dumps({"q": "Capital of France?", "a": ["Paris"]}) + "\n")
    text = ("# my grid\nname: rel\nmodels: [{name: m, model: confgrid-fixture}]\n"
            "datasets: [{name: mine, adapter: custom, path: data/mine.jsonl, columns: {question: q, answers: a}}]\n")
    (proj / "grid.yaml").write_text(text)
    spec = load_grid(proj / "grid.yaml")
    out = tmp_path / "runs" / "o"
    _write_grid(spec, RunStore(out), text)
    assert (out / "grid.source.yaml").read_text() == text  # the file as written, comments included
    monkeypatch.chdir(tmp_path)
    again = load_grid(out / "grid.yaml")  # what `confgrid resume runs/o` loads
    assert again == spec
    assert again.datasets[0].path == str((proj / "data" / "mine.jsonl").resolve())


def test_a_moved_folder_logs_into_its_own_store(tmp_path):
    from confgrid.flows.runner import _tracking_uri
    from confgrid.flows.tracking import default_tracking_uri

    old = tmp_path / "old"
    store = RunStore(old)
    assert _tracking_uri(store, None) == default_tracking_uri(old)
    store.save_manifest()
    os.rename(old, tmp_path / "new")
    moved = RunStore(tmp_path / "new")
    assert _tracking_uri(moved, None) == default_tracking_uri(tmp_path / "new")
    # a store given on the command line is kept for later resumes
    assert _tracking_uri(moved, "http://mlflow:5000") == "http://mlflow:5000"
    assert _tracking_uri(moved, None) == "http://mlflow:5000"
    # a manifest from before the key existed: its default path was not a choice of the user
    legacy = RunStore(tmp_path / "legacy")
    legacy.meta["tracking_uri"] = "sqlite:////somewhere/else/mlflow.db"
    assert _tracking_uri(legacy, None) == default_tracking_uri(tmp_path / "legacy")


def test_records_of_models_no_longer_in_the_grid_are_pruned(tmp_path):
    from confgrid.flows.runner import _in_grid

    spec = parse_grid({"models": [{"name": "a", "model": "confgrid-fixture"}],
                       "datasets": [{"name": "tq", "adapter": "triviaqa"}],
                       "answer_sets": [{"id": "ao", "prompt": "answer_only"}]})
    keep = _in_grid(spec)

    def rec(stage, label, model=None, dataset=None, answer_set=None):
        return ShardRecord(stage=stage, setting=label, key="k", model=model, dataset=dataset, answer_set=answer_set)

    assert keep(rec("generate", "a/tq#0", "a", "tq", "main")) and keep(rec("score", "a/tq/bare#1", "a", "tq", "main"))
    assert keep(rec("generate", "a/tq[ao]#0", "a", "tq", "ao")) and keep(rec("probe", "a/tq/own#0", "a", "tq", "main"))
    assert keep(rec("items", "tq", dataset="tq"))
    assert not keep(rec("generate", "broken/tq#0", "broken", "tq", "main"))
    assert not keep(rec("generate", "a/other#0", "a", "other", "main")) and not keep(rec("items", "other", dataset="other"))
    assert not keep(rec("generate", "a/tq[mc]#0", "a", "tq", "mc"))
    # the grid entries are fields, never parsed out of the label: a label that says otherwise changes nothing
    assert not keep(rec("generate", "a/tq#0", "broken", "tq", "main"))
    assert keep(rec("generate", "broken/tq#0"))  # a record written before the fields existed: kept
    store = RunStore(tmp_path / "o")
    for r in (rec("generate", "a/tq#0", "a", "tq", "main"), rec("generate", "broken/tq#0", "broken", "tq", "main")):
        store.records[f"{r.stage}/{r.setting}"] = r
    assert store.prune(keep) == 1 and list(store.records) == ["generate/a/tq#0"]
    # begin and reuse keep the fields on the manifest record, through a save and a reload
    r = store.begin("generate", "a/tq#1", "k2", model="a", dataset="tq", answer_set="main")
    store.save_manifest()
    again = RunStore(tmp_path / "o").records["generate/a/tq#1"]
    assert (again.model, again.dataset, again.answer_set) == ("a", "tq", "main") and r.model == "a"


def test_relabel_sets_the_names_of_the_shard_it_is_read_for():
    from confgrid.flows.stages.base import relabel

    t = pd.DataFrame({"model": ["twin-a"] * 2, "dataset": "d", "item_id": ["1", "2"], "chunk": 0})
    out = relabel(t, model="twin-b", chunk=3, context_id="bare")
    assert list(out["model"]) == ["twin-b"] * 2 and list(out["chunk"]) == [3, 3]
    assert "context_id" not in out and list(t["model"]) == ["twin-a"] * 2  # a copy; absent columns not added


def test_error_text_is_one_line_with_the_cause():
    from ray.exceptions import ActorDiedError

    from confgrid.flows.execute.queue import error_text as _error_text

    died = ActorDiedError.__new__(ActorDiedError)  # as Ray raises it for an actor whose constructor failed
    died.error_msg = ("The actor died because of an error raised in its creation task, \x1b[36mray::"
                      "ModelWorker.__init__()\x1b[39m (pid=1)\n  File \"x.py\", line 3\n    json.loads(s)\n"
                      "json.decoder.JSONDecodeError: Expecting property name: line 1 column 2 (char 1)")
    died._actor_init_failed = True
    assert _error_text(died) == ("the replica's model load raised JSONDecodeError: Expecting property name: "
                                 "line 1 column 2 (char 1)")
    assert _error_text(ValueError("bad value\nmore")) == "ValueError: bad value more"
