"""The grid spec: the embedded demo grid is valid; bad grids fail with a clear message."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from confgrid.cli.main import DEMO_GRID
from confgrid.flows.spec.grid import GridSpec, load_grid, parse_grid
from confgrid.flows.spec.base import GridSpecError

GOOD = {
    "name": "t",
    "models": [{"name": "m", "model": "confgrid-fixture"}],
    "datasets": [{"name": "tq", "adapter": "truthfulqa", "path": "bundled", "limit": 10}],
}


def test_demo_grid_is_valid():
    spec = load_grid(Path(str(DEMO_GRID)))
    assert [d.name for d in spec.datasets] == ["truthfulqa", "triviaqa", "mmlu"]
    assert spec.scoring.contexts == ("bare", "answer_slot", "guess_slot")
    assert spec.bootstrap.resamples == 10_000
    assert spec.metrics.ece_bins == 10


def test_defaults_and_frozen():
    spec = parse_grid(GOOD)
    assert spec.models[0].dtype == "float32"
    assert spec.correctness.primary == "containment"
    with pytest.raises(Exception):
        spec.name = "other"  # frozen


def _with(path: str, value, base=GOOD):
    raw = copy.deepcopy(base)
    cur = raw
    keys = path.split(".")
    for k in keys[:-1]:
        cur = cur[int(k)] if k.isdigit() else cur.setdefault(k, {})
    last = keys[-1]
    if value is _DELETE:
        del cur[last]
    else:
        cur[int(last) if last.isdigit() else last] = value
    return raw


_DELETE = object()

BAD = [
    # (id, path, value, field named in the error, text that must appear)
    ("unknown top-level key", "temperature", 0.7, "temperature", "unknown key"),
    ("unknown model key", "models.0.tokenizer_name", "x", "models[0].tokenizer_name", "unknown key"),
    ("unknown context", "scoring", {"contexts": ["bare", "answer-slot"]}, "scoring.contexts", "answer-slot"),
    ("negative limit", "datasets.0.limit", -5, "datasets[0].limit", "-5"),
    ("zero limit", "datasets.0.limit", 0, "datasets[0].limit", "greater than or equal to 1"),
    ("missing dataset file", "datasets.0.path", "./no/such/file.csv", "datasets[0].path", "does not exist"),
    ("bins < 1", "metrics", {"ece_bins": 0}, "metrics.ece_bins", "greater than or equal to 1"),
    ("resamples < 1", "bootstrap", {"resamples": 0}, "bootstrap.resamples", "greater than or equal to 1"),
    ("unknown ECE closure", "metrics", {"ece_closure": ["left", "up"]}, "metrics.ece_closure[1]", "'right_float'"),
    ("ECE closure twice", "metrics", {"ece_closure": ["right", "right"]}, "metrics.ece_closure", "twice"),
    ("unknown dtype", "models.0.dtype", "float8", "models[0].dtype", "float8"),
    ("unknown backend", "models.0.backend", "onnx", "models[0].backend", "allowed: openai, transformers, vllm"),
    ("unknown adapter", "datasets.0.adapter", "squad", "datasets[0].adapter", "truthfulqa"),
    ("unknown metric", "metrics", {"names": ["ece", "f1"]}, "metrics.names", "f1"),
    ("unknown aggregation", "scoring", {"aggregations": ["median"]}, "scoring.aggregations", "geometric_mean"),
    ("unknown answer-set prompt", "answer_sets", [{"id": "x", "prompt": "nope"}], "answer_sets[0].prompt", "answer_only"),
    ("answer set named main", "answer_sets", [{"id": "main", "prompt": "answer_only"}], "grid", "main"),
    ("unknown parse policy", "parsing", {"policies": ["strict"]}, "parsing.policies[0]", "label_only"),
    ("unknown probe kind", "probe", {"enabled": True, "kinds": ["canonical", "gold"]}, "probe.kinds[1]", "plausible_wrong"),
    ("unknown correctness rule", "correctness", {"rules": ["containment", "fuzzy"]}, "correctness.rules", "fuzzy"),
    ("primary not in rules", "correctness", {"rules": ["exact_match"], "primary": "containment"}, "correctness", "primary"),
    ("unknown prompt", "elicitation", {"prompt": "chain_of_thought"}, "elicitation.prompt", "confidence"),
    ("no models", "models", [], "models", "at least 1"),
    ("missing model field", "models.0.model", _DELETE, "models[0].model", "Field required"),
    ("missing local model dir", "models.0.model", "./no_such_model_dir", "models[0].model", "does not exist"),
    ("bad model name", "models.0.name", "my model!", "models[0].name", "expected a label"),
    ("level out of range", "bootstrap", {"level": 1.5}, "bootstrap.level", "less than 1"),
    ("params of an adapter without any", "datasets.0.params", {"year": 2020}, "datasets[0].params", "takes no params"),
]


@pytest.mark.parametrize("case", BAD, ids=[b[0] for b in BAD])
def test_bad_spec_names_field_value_and_allowed(case, tmp_path):
    _, path, value, field, text = case
    raw = _with(path, value)
    with pytest.raises(GridSpecError) as ei:
        parse_grid(raw, base_dir=tmp_path)
    msg = str(ei.value)
    assert field in [f for f, _ in ei.value.problems], msg
    assert text in msg, msg


def test_duplicate_model_names():
    raw = copy.deepcopy(GOOD)
    raw["models"].append(dict(raw["models"][0]))
    with pytest.raises(GridSpecError, match="repeated"):
        parse_grid(raw)


def test_several_problems_reported_at_once(tmp_path):
    raw = _with("models.0.dtype", "int4", _with("datasets.0.limit", -1))
    with pytest.raises(GridSpecError) as ei:
        parse_grid(raw, base_dir=tmp_path)
    fields = [f for f, _ in ei.value.problems]
    assert "models[0].dtype" in fields and "datasets[0].limit" in fields


def test_missing_grid_file_and_bad_yaml(tmp_path):
    with pytest.raises(GridSpecError, match="does not exist"):
        load_grid(tmp_path / "nope.yaml")
    p = tmp_path / "bad.yaml"
    p.write_text("models: [\n", encoding="utf-8")
    with pytest.raises(GridSpecError, match="not valid YAML") as err:
        load_grid(p)
    assert f'in "{p}", line' in str(err.value)  # the mark names the file


def test_relative_paths_resolve_against_grid_file(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    f = data / "qa.jsonl"
    f.write_text('{"q": "What is 2+2?", "a": "4"}\n', encoding="utf-8")
    raw = _with("datasets.0", {"name": "mine", "adapter": "custom", "path": "data/qa.jsonl",
                               "columns": {"question": "q", "answers": "a"}})
    p = tmp_path / "grid.yaml"
    p.write_text(yaml.safe_dump(raw), encoding="utf-8")
    spec = load_grid(p)
    assert spec.datasets[0].path == str(f.resolve())
    assert isinstance(spec, GridSpec)


def test_columns_only_for_custom_and_keys_checked(tmp_path):
    raw = _with("datasets.0", {"name": "m", "adapter": "mmlu", "columns": {"question": "q"}})
    with pytest.raises(GridSpecError, match="only for adapter 'custom'"):
        parse_grid(raw)
    f = tmp_path / "qa.jsonl"
    f.write_text('{"q": "2+2?", "a": "4"}\n', encoding="utf-8")
    raw = _with("datasets.0", {"name": "mine", "adapter": "custom", "path": str(f),
                               "columns": {"question": "q", "answer_colum": "a"}})
    with pytest.raises(GridSpecError) as ei:
        parse_grid(raw)
    assert "datasets[0].columns.answer_colum" in [p for p, _ in ei.value.problems]


def test_one_line_per_problem_in_a_list(tmp_path):
    """A bad element of a one-element list is reported once, not also as 'list too short'."""
    raw = _with("models.0.dtype", "float8", _with("scoring", {"contexts": ["bare", "answer-slot"]}))
    with pytest.raises(GridSpecError) as ei:
        parse_grid(raw, base_dir=tmp_path)
    assert [f for f, _ in ei.value.problems] == ["models[0].dtype", "scoring.contexts"]


def test_custom_dataset_missing_column_is_a_clean_cli_error(tmp_path):
    from typer.testing import CliRunner

    from confgrid.cli.main import app

    f = tmp_path / "qa.jsonl"
    f.write_text('{"q": "2+2?", "a": "4"}\n', encoding="utf-8")
    grid = _with("datasets.0", {"name": "mine", "adapter": "custom", "path": str(f),
                                "columns": {"question": "question_text", "answers": "a"}})
    p = tmp_path / "grid.yaml"
    p.write_text(yaml.safe_dump(grid), encoding="utf-8")
    res = CliRunner().invoke(app, ["run", str(p), "--out", str(tmp_path / "out")])
    assert res.exit_code == 2, res.output
    assert "dataset 'mine'" in res.output and "question_text" in res.output
    assert "Traceback" not in res.output
    assert not (tmp_path / "out" / "mlflow.db").exists()  # failed before MLflow, Ray or any model


def test_user_prompt_and_context_files(tmp_path):
    (tmp_path / "p.yaml").write_text(
        "id: terse_user\ntemplate: |-\n  Q: {question}\n  A:\nanswer_label: 'A:'\n", encoding="utf-8")
    (tmp_path / "c.yaml").write_text(
        "- {id: terse_slot_user, user_prompt: terse_user, assistant_prefix: 'Answer:', separator: ' '}\n",
        encoding="utf-8")
    raw = _with("scoring", {"contexts": ["bare", "terse_slot_user"]})
    raw["prompt_files"] = ["p.yaml"]
    raw["context_files"] = ["c.yaml"]
    spec = parse_grid(raw, base_dir=tmp_path)
    assert spec.scoring.contexts == ("bare", "terse_slot_user")
    assert parse_grid(raw, base_dir=tmp_path) == spec  # the same files again: accepted
    (tmp_path / "p2.yaml").write_text("id: terse_user\ntemplate: 'other {question}'\n", encoding="utf-8")
    raw["prompt_files"] = ["p2.yaml"]
    with pytest.raises(GridSpecError, match="already registered with different content"):
        parse_grid(raw, base_dir=tmp_path)
    raw["prompt_files"] = ["missing.yaml"]
    with pytest.raises(GridSpecError, match="does not exist"):
        parse_grid(raw, base_dir=tmp_path)
