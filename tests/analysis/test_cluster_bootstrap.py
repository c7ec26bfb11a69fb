"""Cluster bootstrap (issue 12): brute-force references, a known intra-cluster correlation, analyze, the grid."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from confgrid.analysis import metrics as M
from confgrid.analysis.bootstrap import bootstrap_chunks, interval, paired_bootstrap
from confgrid.analysis.resampling import chunk_indices, setting_seed
from confgrid.analysis.clusters import cluster_codes, resample_rows, row_counts
from confgrid.flows.analyze.analysis import AnalyzeSpec, analyze
from confgrid.flows.analyze.read import AnalyzeInputError
from confgrid.cli.main import app
from reference.resample_loop import bootstrap_chunk

BRUTE = {"ece": M.ece, "brier": M.brier, "auroc": M.auroc, "aurc": M.aurc}
runner = CliRunner()


def _data(n=120, seed=0, graded=False, ties=True):
    rng = np.random.default_rng(seed)
    conf = rng.uniform(size=(2, n))
    conf = np.round(conf, 1) if ties else conf  # many ties, or (almost surely) none
    corr = rng.uniform(size=n) if graded else (rng.uniform(size=n) < conf[0]).astype(float)
    return conf, corr


def _by_hand(conf, corr, groups, n_resamples, seed, chunk_size):
    """The cluster draws reproduced without the package: sorted labels, SeedSequence([seed, c]) per chunk."""
    labels = sorted(set(groups))
    rows_of = [np.flatnonzero(np.asarray(groups) == lab) for lab in labels]
    G = len(labels)
    out = np.empty((conf.shape[0], len(BRUTE), n_resamples))
    for c in range(-(-n_resamples // chunk_size)):
        rng = np.random.default_rng(np.random.SeedSequence([seed, c]))
        b = min(chunk_size, n_resamples - c * chunk_size)
        draws = rng.integers(0, G, size=(b, G))
        for r, drawn in enumerate(draws):
            rows = np.concatenate([rows_of[k] for k in drawn])
            for s in range(conf.shape[0]):
                for j, f in enumerate(BRUTE.values()):
                    out[s, j, c * chunk_size + r] = f(conf[s, rows], corr[rows])
    return out


# ---------------------------------------------------------------------------
# (a) singletons and the brute-force reference
# ---------------------------------------------------------------------------


def test_singleton_clusters_in_row_order_draw_the_row_level_resamples():
    conf, corr = _data()
    mets = list(BRUTE) + ["calibration_gap", "ks_ece"]
    a = paired_bootstrap(conf, corr, mets, n_resamples=300, seed=5, chunk_size=128)
    b = paired_bootstrap(conf, corr, mets, n_resamples=300, seed=5, chunk_size=128, groups=np.arange(conf.shape[1]))
    assert b.n_clusters == conf.shape[1] and a.n_clusters is None
    np.testing.assert_array_equal(a.point, b.point)
    np.testing.assert_allclose(b.resamples, a.resamples, rtol=0, atol=1e-12)


def test_singleton_clusters_in_another_order_match_in_distribution():
    conf, corr = _data(n=200, seed=2)
    perm = np.random.default_rng(9).permutation(200)
    a = paired_bootstrap(conf, corr, list(BRUTE), n_resamples=3000, seed=1)
    b = paired_bootstrap(conf, corr, list(BRUTE), n_resamples=3000, seed=1, groups=[f"id{p}" for p in perm])
    np.testing.assert_array_equal(a.point, b.point)
    assert not np.allclose(a.resamples, b.resamples)  # other draws ...
    wa, wb = np.subtract(*a.interval()[::-1]), np.subtract(*b.interval()[::-1])
    np.testing.assert_allclose(wb, wa, rtol=0.12)  # ... same distribution


@pytest.mark.parametrize(("graded", "ties"), [(False, True), (True, True), (False, False)],
                         ids=["binary-ties", "graded-ties", "binary-distinct"])
def test_cluster_draws_by_hand_equal_the_bootstrap(graded, ties):
    # the fused AUROC / AURC path has a branch for binary correctness without mixed tie groups
    conf, corr = _data(n=90, seed=3, graded=graded, ties=ties)
    rng = np.random.default_rng(4)
    groups = np.array([f"q{k}" for k in rng.integers(0, 25, size=90)])  # unequal sizes, string labels
    res = paired_bootstrap(conf, corr, list(BRUTE), n_resamples=45, seed=11, chunk_size=16, groups=groups)
    ref = _by_hand(conf, corr, groups, 45, 11, 16)
    assert res.n_clusters == len(set(groups))
    np.testing.assert_allclose(res.resamples, ref, rtol=0, atol=1e-12)
    # the chunk functions of the Ray path: same numbers, chunk by chunk
    parts = bootstrap_chunks(conf, corr, list(BRUTE), 45, 11, [2, 0, 1], chunk_size=16, groups=groups)
    np.testing.assert_array_equal(parts[1], res.resamples[:, :, :16])
    np.testing.assert_array_equal(parts[0], res.resamples[:, :, 32:])
    idx = chunk_indices(res.n_clusters, 45, 11, 1, 16)
    one = bootstrap_chunk(conf, corr, list(BRUTE), idx, groups=groups)
    np.testing.assert_array_equal(one, res.resamples[:, :, 16:32])


def test_fallback_metric_uses_the_cluster_rows():
    conf, corr = _data(n=40, seed=6)
    groups = np.repeat(np.arange(10), 4)
    res = paired_bootstrap(conf, corr, ["smoothed_ece"], n_resamples=6, seed=2, groups=groups)
    cl = cluster_codes(groups)
    rows = resample_rows(chunk_indices(10, 6, 2, 0), cl)
    from confgrid.analysis.registry import METRICS

    f = METRICS.get("smoothed_ece").func
    want = [f(conf[0, r], corr[r]) for r in rows]
    np.testing.assert_allclose(res.resamples[0, 0], want, rtol=0, atol=1e-12)


def test_cluster_codes_and_row_counts():
    cl = cluster_codes([3, 1, 3, 2, 1])
    assert cl.labels.tolist() == [1, 2, 3] and cl.codes.tolist() == [2, 0, 2, 1, 0]
    assert cl.sizes.tolist() == [2, 1, 2] and [m.tolist() for m in cl.members] == [[1, 4], [3], [0, 2]]
    w = row_counts(np.array([[0, 0, 2], [1, 1, 1]]), cl)
    assert w.tolist() == [[1, 2, 1, 0, 2], [0, 0, 0, 3, 0]]
    mixed = cluster_codes(np.array([1, "a", 1], dtype=object))  # unsortable types: by string form
    assert mixed.labels.tolist() == [1, "a"] and mixed.codes.tolist() == [0, 1, 0]
    with pytest.raises(ValueError, match=r"groups\[1\] is a missing cluster label"):
        cluster_codes(np.array(["a", None], dtype=object))
    with pytest.raises(ValueError, match=r"groups\[2\] is a missing"):
        cluster_codes([1.0, 2.0, np.nan])
    with pytest.raises(ValueError, match="3 labels for 4 rows"):
        paired_bootstrap(np.full(4, 0.5), np.ones(4), ["brier"], n_resamples=2, groups=[1, 2, 3])


def test_one_cluster_gives_a_zero_width_interval():
    conf, corr = _data(n=30)
    res = paired_bootstrap(conf, corr, ["ece", "brier"], n_resamples=50, groups=np.zeros(30))
    assert res.n_clusters == 1
    np.testing.assert_allclose(res.resamples, np.repeat(res.point[:, :, None], 50, axis=2), atol=1e-12)


# ---------------------------------------------------------------------------
# (b) known intra-cluster correlation
# ---------------------------------------------------------------------------


def _icc_data(G=120, m=6, seed=0):
    """G clusters of m rows: a cluster's rows share a confidence shift L_k ~ N(0, 0.15^2) and a success
    probability p_k in {0.2, 0.9}; c = 0.6 + L_k + N(0, 0.1^2), y ~ Bernoulli(p_k).

    By design the ICC of c - y is (var L + var p) / (var L + var p + 0.1^2 + E p(1 - p))
    = 0.145 / 0.28 = 0.518 (clipping to [0, 1] is rare and ignored).
    """
    rng = np.random.default_rng(seed)
    shift = np.repeat(rng.normal(0.0, 0.15, G), m)
    p = np.repeat(rng.choice([0.2, 0.9], size=G), m)
    conf = np.clip(0.6 + shift + rng.normal(0.0, 0.1, G * m), 0.0, 1.0)
    corr = (rng.uniform(size=G * m) < p).astype(float)
    return conf, corr, np.repeat(np.arange(G), m)


ICC_DESIGN = 0.145 / 0.28


def _width(v):
    lo, hi = interval(v)
    return hi - lo


def test_clustered_width_matches_brute_force_and_the_design_effect():
    G, m, B = 120, 6, 4000
    conf, corr, groups = _icc_data(G, m)
    res = paired_bootstrap(conf, corr, ["calibration_gap", "brier"], n_resamples=B, seed=7, groups=groups)
    rows = paired_bootstrap(conf, corr, ["calibration_gap", "brier"], n_resamples=B, seed=7)
    # brute force: an independent generator, whole clusters concatenated, numpy means of the rows
    rng = np.random.default_rng(12345)
    members = [np.flatnonzero(groups == k) for k in range(G)]
    d, sq = conf - corr, (conf - corr) ** 2
    brute = np.empty((2, B))
    for r in range(B):
        pick = np.concatenate([members[k] for k in rng.integers(0, G, size=G)])
        brute[:, r] = d[pick].mean(), sq[pick].mean()
    for j, x in enumerate((d, sq)):
        w_cl, w_bf, w_row = _width(res.resamples[0, j]), _width(brute[j]), _width(rows.resamples[0, j])
        assert abs(w_cl / w_bf - 1) < 0.05, (j, w_cl, w_bf)
        # the sample's design effect 1 + (m - 1) ICC (moment estimator: m var(cluster means) / var(rows))
        deff = m * np.var(x.reshape(G, m).mean(axis=1)) / np.var(x)
        assert abs((w_cl / w_row) / np.sqrt(deff) - 1) < 0.06, (j, w_cl / w_row, np.sqrt(deff))
        if j == 0:  # the signed gap is linear in c - y: its design effect is the designed one
            assert deff == pytest.approx(1 + (m - 1) * ICC_DESIGN, rel=0.2)
            assert w_cl / w_row > 1.6


# ---------------------------------------------------------------------------
# (c) confgrid analyze --group-col
# ---------------------------------------------------------------------------


def _write_csv(path: Path, n_q=12, gens=4, seed=0) -> Path:
    rng = np.random.default_rng(seed)
    rows = []
    for setting in ("m1/d1", "m2/d1"):
        for q in range(n_q):
            shift = rng.normal(0, 0.2)
            for g in range(gens):
                y = int(rng.uniform() < 0.5 + shift)
                for sig in ("verbalized", "token"):
                    c = float(np.clip(0.5 + shift + rng.normal(0, 0.1), 0, 1))
                    rows.append(dict(setting=setting, item_id=f"q{q}-g{g}", signal=sig, confidence=round(c, 3),
                                     correct=y, question=f"q{q}"))
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def test_analyze_group_col_end_to_end(tmp_path):
    src = _write_csv(tmp_path / "gens.csv")
    out = tmp_path / "out"
    r = runner.invoke(app, ["analyze", str(src), "--out", str(out), "--bootstrap", "300", "--no-tracking",
                            "--group-col", "question"])
    assert r.exit_code == 0, r.output
    assert "300 paired resamples of clusters of 'question' (12 cluster(s) per setting; clustered intervals)" \
        in r.output
    m = pd.read_csv(out / "results" / "metrics.csv")
    assert (m["cluster_col"] == "question").all() and (m["n_clusters"] == 12).all() and (m["n"] == 48).all()
    g = pd.read_csv(out / "results" / "gaps.csv")
    assert (g["cluster_col"] == "question").all() and (g["n_clusters"] == 12).all()
    rec = json.loads((out / "analyze.json").read_text())
    assert rec["params"]["resampling"] == "clustered" and rec["params"]["interval"] == "percentile"
    assert rec["params"]["group_col"] == "question"
    assert [c["params"]["n_clusters"] for c in rec["children"]] == [12, 12]
    # the numbers are paired_bootstrap's with the questions as groups, items sorted as analyze sorts them
    df = pd.read_csv(src)
    sub = df[df.setting == "m1/d1"]
    conf = sub.pivot(index="item_id", columns="signal", values="confidence")[["token", "verbalized"]].to_numpy().T
    corr = sub.pivot(index="item_id", columns="signal", values="correct")["token"].to_numpy(float)
    grp = sub.drop_duplicates("item_id").set_index("item_id")["question"].sort_index().to_numpy()
    ref = paired_bootstrap(conf, corr, ["ece", "auroc", "aurc", "brier"], n_resamples=300,
                           seed=setting_seed("m1/d1", "", 0), groups=grp)
    lo, hi = ref.interval()
    got = m[m.setting == "m1/d1"].set_index(["signal", "metric"])
    for s, sig in enumerate(["token", "verbalized"]):
        for j, met in enumerate(["ece", "auroc", "aurc", "brier"]):
            assert got.loc[(sig, met), "lo"] == pytest.approx(lo[s, j], abs=1e-12)
            assert got.loc[(sig, met), "hi"] == pytest.approx(hi[s, j], abs=1e-12)
    # wider than the row-level interval on correlated generations
    plain = analyze(AnalyzeSpec(input=src, out=tmp_path / "plain", n_resamples=300, track=False))["metrics"]
    assert "cluster_col" not in plain.columns
    w = lambda t: (t["hi"] - t["lo"]).mean()  # noqa: E731
    assert w(m) > 1.2 * w(plain)


def test_analyze_group_col_errors(tmp_path):
    src = _write_csv(tmp_path / "gens.csv", n_q=3, gens=2)
    with pytest.raises(AnalyzeInputError, match=r"missing column\(s\) 'qid' \(named by --group-col\)\. "
                                                r"Columns found: 'setting', .*'question'"):
        analyze(AnalyzeSpec(input=src, out=tmp_path / "o1", n_resamples=5, track=False, group_col="qid"))
    r = runner.invoke(app, ["analyze", str(src), "--out", str(tmp_path / "o2"), "--no-tracking",
                            "--group-col", "qid"])
    assert r.exit_code == 2 and "'qid'" in r.output and not (tmp_path / "o2").exists()
    df = pd.read_csv(src)
    df.loc[4, "question"] = None  # CSV line 6 (header is line 1)
    df.loc[7, "question"] = "other"  # item of line 9 now names two clusters
    bad = tmp_path / "bad.csv"
    df.to_csv(bad, index=False)
    with pytest.raises(AnalyzeInputError, match=r"line 6: 'question' \(group\) is missing"):
        analyze(AnalyzeSpec(input=bad, out=tmp_path / "o3", n_resamples=5, track=False, group_col="question"))
    df.loc[4, "question"] = df.loc[5, "question"]
    df.to_csv(bad, index=False)
    with pytest.raises(AnalyzeInputError, match=r"(?s)setting 'm1/d1': the rows of an item must name one cluster.*"
                                                r"item 'q1-g1': 'q1' at line 8, 'other' at line 9"):
        analyze(AnalyzeSpec(input=bad, out=tmp_path / "o4", n_resamples=5, track=False, group_col="question"))


def _parquet(src: Path, row_group_size: int, df: pd.DataFrame | None = None) -> Path:
    """``src`` as Parquet, rows shuffled so that each setting spreads over several row groups."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    df = pd.read_csv(src) if df is None else df
    p = src.with_suffix(".parquet")
    pq.write_table(pa.Table.from_pandas(df.sample(frac=1.0, random_state=1), preserve_index=False), p,
                   row_group_size=row_group_size)
    return p


def test_analyze_group_col_settings_in_turn_equal_the_whole_file(tmp_path):
    pq_src = _parquet(_write_csv(tmp_path / "gens.csv", n_q=10, gens=3), row_group_size=23)
    out = {mode: analyze(AnalyzeSpec(input=pq_src, out=tmp_path / f"o{mode}", n_resamples=200, track=False,
                                     group_col="question",
                         in_turn=mode)) for mode in (True, False)}
    assert (out[True]["metrics"]["n_clusters"] == 10).all()
    for name in ("metrics", "gaps", "alignment"):
        pd.testing.assert_frame_equal(out[True][name], out[False][name], check_exact=True)
    rec = {mode: json.loads((tmp_path / f"o{mode}" / "analyze.json").read_text()) for mode in (True, False)}
    assert rec[True]["params"]["in_turn"] is True and rec[True]["params"]["resampling"] == "clustered"
    assert rec[True]["children"] == rec[False]["children"] and rec[True]["children"][0]["params"]["n_clusters"] == 10
    # the same input errors, each before anything is written
    with pytest.raises(AnalyzeInputError, match=r"missing column\(s\) 'qid' \(named by --group-col\)"):
        analyze(AnalyzeSpec(input=pq_src, out=tmp_path / "x", n_resamples=5, track=False, group_col="qid",
                            in_turn=True))
    df = pd.read_csv(tmp_path / "gens.csv")
    df.loc[df.index[df.setting == "m2/d1"][[1, 2]], "question"] = ["z1", "z2"]  # an item of m2/d1 in two clusters
    bad = _parquet(tmp_path / "bad.csv", 23, df)
    errs = []
    for mode in (True, False):
        with pytest.raises(AnalyzeInputError, match=r"setting 'm2/d1': the rows of an item must name one") as ei:
            analyze(AnalyzeSpec(input=bad, out=tmp_path / f"b{mode}", n_resamples=5, track=False,
                                group_col="question", in_turn=mode))
        errs.append(str(ei.value))
        assert not (tmp_path / f"b{mode}").exists()
    assert errs[0] == errs[1] and "'z1' at row" in errs[0]


@pytest.mark.slow  # ~25 s on 2 cores (Ray start, one Ray Data stage, one Ray task per setting)
def test_analyze_group_col_ray_equals_in_process(tmp_path, ray_local):
    src = _write_csv(tmp_path / "gens.csv", n_q=8, gens=3)
    a, b = tmp_path / "a", tmp_path / "b"
    kw = dict(n_resamples=250, track=False, group_col="question", chunk_size=100)
    analyze(AnalyzeSpec(input=src, out=a, **kw))
    analyze(AnalyzeSpec(input=src, out=b, use_ray=True, num_workers=2, **kw))
    for name in ("metrics.csv", "gaps.csv"):
        assert (a / "results" / name).read_bytes() == (b / "results" / name).read_bytes()
    # Parquet settings in turn, one Ray task per setting: the same numbers
    c, d = tmp_path / "c", tmp_path / "d"
    pq_src = _parquet(src, row_group_size=19)
    analyze(AnalyzeSpec(input=pq_src, out=c, in_turn=True, **kw))
    analyze(AnalyzeSpec(input=pq_src, out=d, in_turn=True, use_ray=True, num_workers=2, **kw))
    for name in ("metrics.csv", "gaps.csv"):
        assert (a / "results" / name).read_bytes() == (c / "results" / name).read_bytes() == (d / "results" / name).read_bytes()


def test_what_the_ray_path_ships_gives_the_in_process_numbers():
    # flows/evaluate/bootstrap_ray.py sends each setting's int64 cluster codes, not its labels, to bootstrap_chunks
    conf, corr = _data(n=60, seed=8)
    labels = np.array([f"question {k % 13}" for k in range(60)], dtype=object)
    ref = paired_bootstrap(conf, corr, list(BRUTE), n_resamples=70, seed=4, chunk_size=32, groups=labels)
    codes = cluster_codes(labels, 60).codes
    parts = bootstrap_chunks(conf, corr, list(BRUTE), 70, 4, [0, 1, 2], chunk_size=32, groups=codes)
    np.testing.assert_array_equal(np.concatenate(parts, axis=2), ref.resamples)


# ---------------------------------------------------------------------------
# (d) the grid: bootstrap.cluster
# ---------------------------------------------------------------------------

GRID = {"name": "t", "models": [{"name": "m", "model": "confgrid-fixture"}],
        "datasets": [{"name": "mm", "adapter": "mmlu", "path": "bundled", "limit": 40}],
        "scoring": {"contexts": ["bare"]}, "bootstrap": {"resamples": 300, "cluster": "category"}}


def test_grid_cluster_field_is_validated():
    from confgrid.flows.runner import _load_items
    from confgrid.flows.evaluate.run_evaluation import cluster_problems
    from confgrid.flows.spec.grid import parse_grid
    from confgrid.flows.spec.base import GridSpecError

    for bad in ("confidence", "signal", "a b", ""):
        with pytest.raises(GridSpecError) as ei:
            parse_grid({**GRID, "bootstrap": {"cluster": bad}})
        assert [f for f, _ in ei.value.problems] == ["bootstrap.cluster"]
        assert "not an item-level field" in str(ei.value) and repr(bad) in str(ei.value)
    assert parse_grid({**GRID, "bootstrap": {}}).bootstrap.cluster is None
    spec = parse_grid({**GRID, "bootstrap": {"cluster": "topic"}})
    items = {d.name: _load_items(d) for d in spec.datasets}
    (field, msg), = cluster_problems(spec, items)
    assert field == "bootstrap.cluster"
    assert "40 of 40 items have no metadata field 'topic'" in msg and "category, row, subject" in msg
    assert cluster_problems(parse_grid(GRID), items) == []


def test_grid_evaluate_resamples_the_clusters():
    from confgrid.flows.tables.assemble import Unit
    from confgrid.flows.evaluate.run_evaluation import evaluate, item_clusters
    from confgrid.flows.runner import _load_items
    from confgrid.flows.spec.grid import parse_grid

    spec = parse_grid(GRID)
    its = _load_items(spec.datasets[0])
    rng = np.random.default_rng(0)
    ids = [it.item_id for it in its]
    y = (rng.uniform(size=len(ids)) < 0.6).astype(float)
    graded = pd.DataFrame({"item_id": ids, "answer": "x", "verbalized": np.round(rng.uniform(size=len(ids)), 2),
                           "parse_status": "ok", "used_fallback": False, "correct_containment": y,
                           "correct_exact_match": y})
    tokens = pd.DataFrame({"item_id": ids, "context_id": "bare",
                           "token_score__geometric_mean": rng.uniform(size=len(ids))})
    ev = evaluate(spec, {("m", "mm", "main"): Unit(spec.all_answer_sets()[0], graded, tokens, None, False, its)})
    cats = item_clusters(its, "category")
    m = ev.metrics[(ev.metrics.rule == "containment") & (ev.metrics.signal == "verbalized")].set_index("metric")
    assert (m["cluster_col"] == "category").all() and (m["n_clusters"] == len(set(cats.values()))).all()
    # the same numbers as paired_bootstrap with each item's category as its cluster
    order = sorted(ids)
    sig = graded.set_index("item_id").loc[order]
    tok = tokens.set_index("item_id").loc[order, "token_score__geometric_mean"]
    ref = paired_bootstrap(np.vstack([sig["verbalized"], tok]), sig["correct_containment"].to_numpy(),
                           list(spec.metrics.names), n_resamples=300, seed=setting_seed("m", "mm", 0),
                           groups=[cats[i] for i in order])
    lo, hi = ref.interval()
    for j, met in enumerate(spec.metrics.names):
        assert m.loc[met, "lo"] == pytest.approx(lo[0, j], abs=1e-12)
        assert m.loc[met, "hi"] == pytest.approx(hi[0, j], abs=1e-12)
    assert not ev.gaps.empty and (ev.gaps["n_clusters"] == m["n_clusters"].iloc[0]).all()
