"""``confgrid analyze`` at scale: the column-wise reader against the per-row one, hints, clipping, --threshold,
--uncertainty, and one setting at a time against the whole file. Small data; the sizes are in benchmarks/."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from confgrid.analysis import metrics as M
from confgrid.flows.analyze import input as NEW
from confgrid.flows.analyze.analysis import AnalyzeSpec, analyze
from confgrid.flows.analyze.input import AnalyzeWarning
from confgrid.flows.analyze.input import CheckOptions
from confgrid.flows.analyze.read import AnalyzeInputError
from confgrid.cli.main import app
from typer.testing import CliRunner

from reference import analyze_frame as COLUMNWISE
from reference import analyze_rowwise as REF
from reference.analyze_frame import read_input

FIX = Path(__file__).parents[2] / "fixtures"
SMALL = FIX / "analyze_small.csv"
HEAD = "setting,item_id,signal,confidence,correct\n"
runner = CliRunner()


def _run(mod, path, columns=None):
    try:
        rows, where = mod.read_input(path, columns)
        return "ok", rows, list(where)
    except mod.AnalyzeInputError as exc:
        return "error", str(exc).split("\nhint: ")[0], exc.problems


def _cases(tmp: Path) -> list[tuple[Path, dict | None]]:
    """Every analyze fixture of tests/, the inline inputs of test_analyze.py, and odd shapes of each format."""
    cases: list[tuple[Path, dict | None]] = [(FIX / n, None) for n in sorted(p.name for p in FIX.glob("analyze_*"))]

    def text(name: str, body: str, columns=None, raw: bytes | None = None):
        p = tmp / name
        if raw is not None:
            p.write_bytes(raw)
        else:
            p.write_text(body, encoding="utf-8", newline="")
        cases.append((p, columns))

    def parquet(name: str, table, columns=None):
        p = tmp / name
        (pq.write_table(table, p) if isinstance(table, pa.Table) else table.to_parquet(p, index=False))
        cases.append((p, columns))

    small = pd.read_csv(SMALL)
    # test_analyze.py's inline inputs
    parquet("bad.parquet", pd.DataFrame({"setting": ["A", "A", "A", None], "item_id": ["q1", "q2", "q1", "q3"],
                                         "signal": ["v"] * 4, "confidence": [0.5, -0.1, 0.2, float("nan")],
                                         "correct": [1.0, 0.0, 1.0, 0.5]}))
    text("many.csv", HEAD + "".join(f"A,q{i},v,{2 + i},1\n" for i in range(27)))
    text("mapped.csv", "setting,item_id,signal,p,correct\nA,q1,v,2,1\n", {"confidence": "p"})
    text("ragged.csv", HEAD + "A,q1,v,0.5,1,extra\n")
    text("short.csv", HEAD + "A,q1,v,0.5,1\nA,q2,v\n")
    # the small fixture in every format, renamed
    names = {"setting": "run", "item_id": "qid", "signal": "method", "confidence": "p", "correct": "is_right"}
    ren = small.rename(columns=names).assign(extra="x")
    text("small.jsonl", "".join(json.dumps(r) + "\n" for r in ren.to_dict(orient="records")), names)
    parquet("small.parquet", ren, names)
    text("small_missing_cols.jsonl", "".join(json.dumps(r) + "\n" for r in ren.to_dict(orient="records")))
    parquet("small_cat.parquet", small.astype({"setting": "category", "signal": "category"}))
    # CSV shapes: BOM + CRLF, blank and whitespace lines, quotes, Python-only number spellings, odd ids
    body = (HEAD + 'A,q1,v,0.5,1\r\n\r\nA," q2",v, 0.25 ,TRUE\r\n   \r\nA,q3,v,1_0,false\r\nA,q4,"v",inf,0\r\n'
            'A,q5,v,-0,1\r\nA,q6,v,1e-3,nan\r\n ,q7,v,0.5,1\r\nA,q8,v,"0.5",0.5\r\nA,ö,v,.5,1.\r\n')
    text("odd.csv", "", raw=b"\xef\xbb\xbf" + body.replace("\n", "\r\n").replace("\r\r", "\r").encode())
    text("quoted.csv", HEAD + 'A,"q,1",v,0.5,1\nA,"q""2",v,0.4,0\nA,q3,v,0.3,"1"\n')
    text("multiline.csv", HEAD + 'A,"q\n1",v,0.5,1\nA,q2,v,2,0\n')
    text("blank_first.csv", "\n\n" + HEAD + "A,q1,v,0.5,1\nA,q1,v,0.5,1\n")
    text("lone_cr.csv", HEAD + "A,q1,v,0.5,1\rA,q2,v,0.5,1\n")
    text("dup_header.csv", "setting,item_id,signal,confidence,correct,confidence\nA,q1,v,0.5,1,0.2\n")
    text("empty.csv", "")
    text("header_only.csv", HEAD)
    text("latin1.csv", "", raw=(HEAD + "A,q\xe9,v,0.5,1\n").encode("latin-1"))
    text("model.csv", "model," + HEAD + "m1,A,q1,v,0.5,1\nm2,A,q1,v,0.5,1\nm1,A,q1,v,0.3,0\n,A,q2,v,0.5,1\n"
         "m1,A/x,q1,v,0.5,1\nm1/A,x,q1,v,0.5,1\n")
    # JSON Lines shapes: typed ids, booleans, strings for numbers, nested values, mixed types, bad lines
    recs = [{"setting": 1, "item_id": 2, "signal": "v", "confidence": 1, "correct": True},
            {"setting": 1, "item_id": 3, "signal": "v", "confidence": 0.5, "correct": False}]
    text("typed.jsonl", "".join(json.dumps(r) + "\n" for r in recs))
    text("float_ids.jsonl", '{"setting": 1.0, "item_id": 2, "signal": "v", "confidence": 0.2, "correct": 1}\n'
                            '{"setting": 1, "item_id": 2.5, "signal": "v", "confidence": 0.2, "correct": 1}\n')
    text("mixed.jsonl", '{"setting": "A", "item_id": "q1", "signal": "v", "confidence": "0.3", "correct": "true"}\n'
                        '{"setting": "A", "item_id": 7, "signal": ["v"], "confidence": {"x": 1}, "correct": null}\n'
                        '\n  \n[1, 2]\n{"setting": "A", "item_id": "q2", "signal": "v", "confidence": 2e0}\n')
    text("crlf.jsonl", '{"setting": "A", "item_id": "q1", "signal": "v", "confidence": 0.3, "correct": 1}\r\n'
                       '\r\n{"setting": "A", "item_id": "q2", "signal": "v", "confidence": 1.5, "correct": 0}\r\n')
    text("empty.jsonl", "\n\n")
    # Parquet types: integer and float ids, booleans, float32, an all-null column, dictionary ids with nulls
    parquet("typed.parquet", pa.table({
        "setting": pa.array([1, 1, 2, None], pa.int32()), "item_id": pa.array([1.0, 2.5, float("nan"), 1.0]),
        "signal": pa.array(["v", "v", " ", "v"]).dictionary_encode(),
        "confidence": pa.array([0.1, 0.7, 1.5, 0.2], pa.float32()), "correct": pa.array([True, False, None, True])}))
    parquet("nulls.parquet", pa.table({"setting": ["A", "A"], "item_id": ["q1", "q2"], "signal": ["v", "v"],
                                       "confidence": pa.nulls(2), "correct": pa.array([1, 2], pa.int64())}))
    return cases


def _agree(path: Path, columns=None) -> str:
    """Assert both readers accept the same rows or raise the same problems; returns "ok" or "error"."""
    want, got = _run(REF, path, columns), _run(COLUMNWISE, path, columns)
    assert got[0] == want[0], (path.name, want[1] if want[0] == "error" else "", got[1])
    if want[0] == "error":
        assert got[1] == want[1], path.name
        assert got[2] == want[2], path.name
    else:
        pd.testing.assert_frame_equal(got[1], want[1], check_dtype=True, obj=path.name)
        assert got[2] == want[2], path.name
    return want[0]


def test_column_wise_reader_equals_the_per_row_reader_on_every_fixture(tmp_path):
    cases = _cases(tmp_path)
    assert len(cases) >= 29
    kinds = [_agree(path, columns) for path, columns in cases]
    assert kinds.count("ok") >= 8 and kinds.count("error") >= 15


def test_fast_paths_are_taken_for_plain_files_and_left_for_odd_ones(tmp_path):
    from confgrid.flows.analyze import read as R

    cols = NEW.role_columns(None)
    by_name = {p.name: p for p, _ in _cases(tmp_path)}
    assert R._read_csv_fast(SMALL, SMALL.read_bytes(), cols) is not None
    assert R._read_csv_fast(by_name["quoted.csv"], by_name["quoted.csv"].read_bytes(), cols) is not None
    for odd in ("odd.csv", "multiline.csv", "lone_cr.csv", "ragged.csv", "latin1.csv"):
        assert R._read_csv_fast(by_name[odd], by_name[odd].read_bytes(), cols) is None, odd
    assert R._read_jsonl_fast(by_name["typed.jsonl"], by_name["typed.jsonl"].read_bytes(), cols) is not None
    for odd in ("mixed.jsonl", "float_ids.jsonl"):
        assert R._read_jsonl_fast(by_name[odd], by_name[odd].read_bytes(), cols) is None, odd
    assert R._read_jsonl_fast(FIX / "analyze_bad.jsonl", (FIX / "analyze_bad.jsonl").read_bytes(), cols) is None


def test_random_inputs_agree_with_the_per_row_reader(tmp_path):
    rng = np.random.default_rng(0)
    tokens = ["0.5", "1", "0", "1.5", "", " ", "nan", "abc", "1e-2", " 0.3", "true", "-1", "0.25", "99", "0.125"]
    kinds = []
    for trial in range(12):
        n = 40
        bad = trial % 2 == 0  # every other input has only good values (checks the accepted rows)
        pick = tokens if bad else ["0.5", "1", "0", "1e-2", "0.25", "0.125", " 0.3"]
        df = pd.DataFrame({
            "setting": rng.choice(["A", "B", "", " C"] if bad else ["A", "B", " C"], n),
            "item_id": [f"q{i}" for i in (rng.integers(0, 25, n) if bad else rng.permutation(n))],
            "signal": rng.choice(["v", "t"], n), "confidence": rng.choice(pick, n), "correct": rng.choice(pick, n)})
        p = tmp_path / f"r{trial}.csv"
        df.to_csv(p, index=False)
        kinds.append(_agree(p))
        q = tmp_path / f"r{trial}.parquet"  # the same rows as Parquet with typed numbers
        df.assign(confidence=pd.to_numeric(df.confidence, errors="coerce"),
                  correct=pd.to_numeric(df.correct, errors="coerce")).to_parquet(q, index=False)
        kinds.append(_agree(q))
        j = tmp_path / f"r{trial}.jsonl"
        df.to_json(j, orient="records", lines=True)
        kinds.append(_agree(j))
    assert "ok" in kinds and "error" in kinds


# ---------------------------------------------------------------------------
# messages that say what to do
# ---------------------------------------------------------------------------


def _error(path, **kw) -> AnalyzeInputError:
    with pytest.raises(AnalyzeInputError) as info:
        read_input(path, **kw)
    return info.value


def test_percentages_suggest_dividing_by_100(tmp_path):
    p = tmp_path / "pct.csv"
    p.write_text(HEAD + "A,q1,v,80,1\nA,q2,v,35,0\nA,q3,v,0.5,1\nA,q4,v,100,1\n")
    err = _error(p)
    assert err.n_problems == 3 and err.problems[0] == "line 2: confidence 80 is outside [0, 1]"
    assert len(err.hints) == 1 and "look like percentages: divide the column by 100" in err.hints[0]
    assert "3 exceed 1" in err.hints[0] and str(err).endswith(err.hints[0])


def test_non_finite_values_are_named_with_their_lines_not_taken_for_uncertainty(tmp_path):
    """Issue 23 item 4: one inf among confidences in [0, 1] was told "values up to 1 (range 0 to 1) look like an
    uncertainty score"; the hint must name the non-finite value and its line, and no range hint follows."""
    p = tmp_path / "inf.csv"
    p.write_text(HEAD + "A,q1,v,0.5,1\nA,q2,v,0.3,0\nA,q3,v,inf,1\nA,q4,v,1.0,1\n")
    err = _error(p)
    assert err.problems == ["line 4: confidence inf is outside [0, 1]"]
    assert err.hints == ["confidence: 1 non-finite value(s): inf at line 4; confidence must be a finite number "
                         "in [0, 1] (an empty cell is a missing value)"]
    for ext in ("parquet", "jsonl"):  # the column-wise readers of the other formats say the same
        q = tmp_path / f"inf.{ext}"
        df = pd.DataFrame({"setting": "A", "item_id": [f"q{i}" for i in range(7)], "signal": "v",
                           "confidence": [0.5, -np.inf, 0.2, np.inf, 0.9, np.inf, np.inf], "correct": 1.0})
        if ext == "parquet":
            df.to_parquet(q, index=False)
        else:
            q.write_text("".join(f'{{"setting": "A", "item_id": "{r.item_id}", "signal": "v", "confidence": '
                                 f'{"Infinity" if r.confidence == np.inf else "-Infinity" if r.confidence == -np.inf else r.confidence}'
                                 f', "correct": 1}}\n' for r in df.itertuples()))
        err = _error(q)
        hint = [h for h in err.hints if "non-finite" in h]
        assert len(hint) == 1 and "4 non-finite value(s)" in hint[0] and "-inf at" in hint[0], err.hints
        assert not any("uncertainty" in h for h in err.hints), err.hints
    mixed = tmp_path / "mixed.csv"  # a real uncertainty column with one inf: both hints, the range of the finite
    mixed.write_text(HEAD + "A,q1,v,350,1\nA,q2,v,inf,0\nA,q3,v,0.2,1\n")
    err = _error(mixed)
    assert any("inf at line 3" in h for h in err.hints)
    assert any("values up to 350 (range 0.2 to 350)" in h for h in err.hints), err.hints


def test_uncertainty_scores_point_to_the_flag(tmp_path):
    for values, word in (([-0.2, -1.5, -0.01], "negative values"), ([3.2, 150.0, 0.4], "values up to 150")):
        p = tmp_path / "u.csv"
        p.write_text(HEAD + "".join(f"A,q{i},v,{v},1\n" for i, v in enumerate(values)))
        err = _error(p)
        assert len(err.hints) == 1 and word in err.hints[0], err.hints
        assert "--uncertainty exp-neg" in err.hints[0] and "percent" not in err.hints[0]
    p = tmp_path / "logp.csv"
    p.write_text(HEAD + "A,q1,v,-0.2,1\nA,q2,v,-3,0\n")
    assert "log-probabilities" in _error(p).hints[0]
    p.write_text(HEAD + "A,q1,v,0.5,1\nA,q2,v,0.3,7\n")  # only correct out of range: no confidence hint
    err = _error(p)
    assert err.problems == ["line 3: correct 7 is outside [0, 1] (use 0/1 or a graded value in between)"]
    assert len(err.hints) == 1 and err.hints[0].startswith("correct: every value lies in [0, 100]")


def test_values_within_1e6_of_the_bounds_are_clipped_with_a_warning(tmp_path):
    p = tmp_path / "f32.parquet"
    conf = np.array([1.0000001, 0.5, -1e-7, 0.3], dtype=np.float32)  # float32 round-off of 1 and 0
    pd.DataFrame({"setting": "A", "item_id": ["q1", "q2", "q3", "q4"], "signal": "v", "confidence": conf,
                  "correct": [1.0, 0.0, 1.0 + 5e-7, 0.0]}).to_parquet(p, index=False)
    with pytest.warns(AnalyzeWarning) as rec:
        rows, _ = read_input(p)
    msgs = [str(w.message) for w in rec]
    assert any("confidence: 2 value(s) within 1e-6" in m and "first at row 0" in m for m in msgs), msgs
    assert any("correct: 1 value(s)" in m and "first at row 2" in m for m in msgs), msgs
    assert rows.confidence.tolist()[0] == 1.0 and rows.confidence.tolist()[2] == 0.0
    assert rows.correct.tolist()[2] == 1.0
    assert rows.confidence.tolist()[1] == float(np.float32(0.5))
    # the per-row reader rejected them; just beyond the tolerance is still rejected
    with pytest.raises(REF.AnalyzeInputError):
        REF.read_input(p)
    q = tmp_path / "beyond.csv"
    q.write_text(HEAD + "A,q1,v,1.0000011,1\nA,q2,v,-0.0000011,1\n")
    assert _error(q).problems == ["line 2: confidence 1.0000011 is outside [0, 1]",
                                  "line 3: confidence -0.0000011 is outside [0, 1]"]


def test_undefined_metric_warning_names_setting_and_signal(tmp_path):
    p = tmp_path / "one.csv"
    p.write_text(HEAD + "".join(f"A,q{i},tok,0.{i + 1},1\nA,q{i},verb,0.5,1\nB,q{i},tok,0.{i + 1},{i % 2}\n"
                                for i in range(4)))
    r = runner.invoke(app, ["analyze", str(p), "--out", str(tmp_path / "o"), "--bootstrap", "20", "--no-tracking",
                            "--metrics", "auroc,ece"])
    assert r.exit_code == 0, r.output
    lines = [x for x in r.output.splitlines() if x.startswith("warning:") and "AUROC" in x]
    assert sorted(lines) == sorted(f"warning: setting 'A', signal {s!r}, auroc: AUROC is undefined: only one class "
                                   "present in correct (positive mass 4, negative mass 0); returning nan"
                                   for s in ("tok", "verb")), r.output


# ---------------------------------------------------------------------------
# graded correctness, uncertainty scores
# ---------------------------------------------------------------------------


def _graded(tmp_path: Path) -> Path:
    rng = np.random.default_rng(1)
    n = 30
    df = pd.DataFrame({"setting": "A", "item_id": [f"q{i}" for i in range(n)] * 2,
                       "signal": ["tok"] * n + ["verb"] * n, "confidence": rng.random(2 * n).round(3),
                       "correct": np.tile(rng.choice([0.0, 0.3, 0.7, 0.75, 1.0], n), 2)})
    p = tmp_path / "graded.csv"
    df.to_csv(p, index=False)
    return p


def test_threshold_turns_graded_correctness_into_0_1(tmp_path):
    p = _graded(tmp_path)
    df = pd.read_csv(p)
    r = runner.invoke(app, ["analyze", str(p), "--out", str(tmp_path / "soft"), "--bootstrap", "20", "--no-tracking"])
    assert r.exit_code == 0, r.output
    n_graded = int(((df.correct > 0) & (df.correct < 1)).sum())
    assert f"correctness is graded ({n_graded} values strictly between 0 and 1): AUROC and AURC use them as soft " \
           "labels" in r.output
    r = runner.invoke(app, ["analyze", str(p), "--out", str(tmp_path / "hard"), "--bootstrap", "20", "--no-tracking",
                            "--threshold", "0.7"])
    assert r.exit_code == 0, r.output and "thresholded at 0.7" in r.output
    m = pd.read_csv(tmp_path / "hard" / "results" / "metrics.csv").set_index(["signal", "metric"]).point
    tok = df[df.signal == "tok"]
    y = (tok.correct >= 0.7).astype(float).to_numpy()  # 0.7 itself counts as correct
    assert set(y) == {0.0, 1.0}
    assert m["tok", "auroc"] == pytest.approx(M.auroc(tok.confidence.to_numpy(), y), abs=1e-15)
    assert m["tok", "brier"] == pytest.approx(float(np.mean((tok.confidence.to_numpy() - y) ** 2)), abs=1e-15)
    rec = json.loads((tmp_path / "hard" / "analyze.json").read_text())["params"]
    assert rec["threshold"] == 0.7 and rec["graded_soft_labels"] is False
    assert json.loads((tmp_path / "soft" / "analyze.json").read_text())["params"]["graded_soft_labels"] is True
    for bad in ("0", "1.5", "-1"):
        r = runner.invoke(app, ["analyze", str(p), "--out", str(tmp_path / "x"), "--threshold", bad])
        assert r.exit_code == 2 and "--threshold: must be a number in (0, 1]" in r.output


def _ranking_metrics(score, y):
    """AUROC by scikit-learn on the raw score; AURC on another order-preserving map of it (ranks / n)."""
    from scipy.stats import rankdata
    from sklearn.metrics import roc_auc_score

    return roc_auc_score(y, score), M.aurc(rankdata(score) / score.size, y)


@pytest.mark.parametrize("how", ["exp-neg", "sigmoid-neg", "rank"])
def test_uncertainty_transforms_keep_auroc_and_aurc_exact(tmp_path, how):
    rng = np.random.default_rng(2)
    n = 60
    u = np.round(rng.gamma(2.0, 1.5, n), 2)  # an NLL-like score, with ties
    u[:5] = u[5]  # more ties
    y = (rng.random(n) < 1 / (1 + u)).astype(float)
    if how != "exp-neg":
        u = u - 3.0  # any real value
    df = pd.DataFrame({"setting": "A", "item_id": [f"q{i}" for i in range(n)], "signal": "nll", "confidence": u,
                       "correct": y})
    p = tmp_path / "u.parquet"
    df.to_parquet(p, index=False)
    t = analyze(AnalyzeSpec(input=p, out=tmp_path / "o", metrics="auroc,aurc,ece", n_resamples=20, track=False,
                            uncertainty=how))
    m = t["metrics"].set_index("metric").point
    # reference: the negated score itself orders the items; AUROC and AURC depend on the order only
    ref_auroc, ref_aurc = _ranking_metrics(-u, y)
    assert m["auroc"] == pytest.approx(ref_auroc, abs=1e-15)
    assert m["aurc"] == pytest.approx(ref_aurc, abs=1e-15)
    rows, _ = read_input(p, options=CheckOptions(uncertainty=how))
    c = rows.confidence.to_numpy()
    assert ((c >= 0) & (c <= 1)).all()
    want = {"exp-neg": np.exp(-u), "sigmoid-neg": 1 / (1 + np.exp(u)),
            "rank": (n - pd.Series(u).rank(method="average").to_numpy()) / (n - 1)}[how]
    np.testing.assert_allclose(c, want, rtol=1e-15, atol=0)


def test_uncertainty_errors_and_merged_ties(tmp_path):
    p = tmp_path / "neg.csv"
    p.write_text(HEAD + "A,q1,v,-0.5,1\nA,q2,v,inf,0\nA,q3,v,0.2,1\n")
    err = _error(p, options=CheckOptions(uncertainty="exp-neg"))
    need = "need a finite u >= 0 (use sigmoid-neg or rank for any real u)"
    assert err.problems == [f"line 2: confidence -0.5 is not an uncertainty score for --uncertainty exp-neg: {need}",
                            f"line 3: confidence inf is not an uncertainty score for --uncertainty exp-neg: {need}"]
    with pytest.raises(AnalyzeInputError, match="--uncertainty: unknown transform 'log'; choose from exp-neg"):
        CheckOptions(uncertainty="log")
    q = tmp_path / "far.csv"
    q.write_text(HEAD + "A,q1,v,800,1\nA,q2,v,900,0\nA,q3,v,1,1\n")  # exp(-800) == exp(-900) == 0.0
    with pytest.warns(AnalyzeWarning, match="became one confidence .* in 1 \\(setting, signal\\) group"):
        read_input(q, options=CheckOptions(uncertainty="exp-neg"))


# ---------------------------------------------------------------------------
# one setting at a time
# ---------------------------------------------------------------------------


def _multi(tmp_path: Path, row_group_size: int) -> Path:
    rng = np.random.default_rng(3)
    parts = []
    for k in range(5):
        n = 25 + 5 * k
        for sig in ("tok", "verb"):
            keep = rng.random(n) > (0.1 if sig == "verb" else 0.0)  # verb lacks some items: alignment leaves them
            parts.append(pd.DataFrame({"setting": f"s{k}", "item_id": [f"q{i}" for i in range(n) if keep[i]],
                                       "signal": sig, "confidence": rng.random(int(keep.sum())),
                                       "correct": (rng.random(int(keep.sum())) < 0.6).astype(float)}))
    df = pd.concat(parts).sample(frac=1.0, random_state=4)  # settings interleaved across row groups
    p = tmp_path / f"multi_{row_group_size}.parquet"
    pq.write_table(pa.Table.from_pandas(df, preserve_index=False), p, row_group_size=row_group_size)
    return p


def test_settings_in_turn_equal_the_whole_file(tmp_path):
    for rg in (17, 10_000):
        p = _multi(tmp_path, rg)
        out = {}
        for mode in (True, False):
            d = tmp_path / f"{rg}_{mode}"
            with pytest.warns(AnalyzeWarning, match="left out"):
                out[mode] = analyze(AnalyzeSpec(input=p, out=d, metrics="ece,auroc,brier", n_resamples=50,
                                                track=False, in_turn=mode))
            assert json.loads((d / "analyze.json").read_text())["params"]["in_turn"] is mode
        for name in ("metrics", "gaps", "alignment"):
            pd.testing.assert_frame_equal(out[True][name], out[False][name], check_exact=True)
        for name in ("metrics.csv", "gaps.csv", "alignment.csv"):
            assert (tmp_path / f"{rg}_True" / "results" / name).read_bytes() == (tmp_path / f"{rg}_False" / "results" / name).read_bytes()


def test_settings_in_turn_report_the_same_problems(tmp_path):
    p = _multi(tmp_path, 13)
    df = pq.read_table(p).to_pandas()
    df.loc[df.index[3], "confidence"] = 1.7
    df.loc[df.index[40], "setting"] = None
    df.loc[df.index[41], "correct"] = 80.0
    df = pd.concat([df, df.iloc[[7]]])  # a duplicate at the end
    bad = tmp_path / "bad.parquet"
    pq.write_table(pa.Table.from_pandas(df, preserve_index=False), bad, row_group_size=13)
    errs = []
    for mode in (True, False):
        with pytest.raises(AnalyzeInputError) as info:
            analyze(AnalyzeSpec(input=bad, out=tmp_path / f"o{mode}", n_resamples=10, track=False, in_turn=mode))
        errs.append(info.value)
        assert not (tmp_path / f"o{mode}").exists()
    assert errs[0].problems == errs[1].problems == _error(bad).problems
    assert str(errs[0]) == str(errs[1]) and len(errs[0].problems) == 4
    with pytest.raises(AnalyzeInputError, match="--in-turn: needs a Parquet input"):
        analyze(AnalyzeSpec(input=SMALL, out=tmp_path / "x", n_resamples=10, track=False, in_turn=True))


def test_settings_in_turn_with_ray_equal_in_process(tmp_path):
    ray = pytest.importorskip("ray")
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        p = _multi(tmp_path, 29)
        a = analyze(AnalyzeSpec(input=p, out=tmp_path / "a", metrics="ece,auroc", n_resamples=40, track=False,
                                in_turn=True))
        b = analyze(AnalyzeSpec(input=p, out=tmp_path / "b", metrics="ece,auroc", n_resamples=40, track=False,
                                in_turn=True, use_ray=True,
                    num_workers=2))
    finally:
        if started:
            ray.shutdown()
    for name in ("metrics", "gaps", "alignment"):
        pd.testing.assert_frame_equal(a[name], b[name], check_exact=True)


def test_a_few_stray_values_get_no_column_hint(tmp_path):
    """One confidence of 1.5 among values in [0, 1] is named by its line; it is not taken for a column of
    percentages or of uncertainty scores (fresh-user walk)."""
    p = tmp_path / "stray.csv"
    p.write_text(HEAD + "A,q1,v,0.8,1\nA,q2,v,1.5,0\nA,q3,v,0.6,1\nA,q4,v,0.2,0\n")
    err = _error(p)
    assert err.problems == ["line 3: confidence 1.5 is outside [0, 1]"] and err.hints == []
    p.write_text(HEAD + "A,q1,v,0.8,1\nA,q2,v,0.5,2\nA,q3,v,0.6,1\nA,q4,v,0.2,0\n")
    assert _error(p).hints == []
    p.write_text(HEAD + "A,q1,v,80,1\nA,q2,v,0.5,0\n")  # half the column: a hint, in the singular
    assert "and 1 exceeds 1; they look like percentages" in _error(p).hints[0]
