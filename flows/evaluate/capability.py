"""Capability calibration of a run (study 004): from the method tables to ``results/capability_*``.

Pure (no Ray, no model): it re-reads the stored samples, method signals, targets and hidden states. Per (model,
dataset):

1. Targets on the evaluation split: the capability target (expected accuracy over the k_eval samples of
   ``capability.target``) and the response target (the correctness of the first of those samples). The train split's
   target comes from ``capability.train_target`` (k_train samples).
2. Estimators on the evaluation split: every method in ``capability.estimators``, as it is and (``isotonic``) after an
   isotonic map fitted on the train split; response consistency (the majority share) at each k_c from its own sample
   pool (a seed other than the target's), and (``leaky_consistency``) from the target's own samples for comparison;
   linear probes on the mean over layers and on one layer of the hidden states, fitted on the train split; the uniform
   random baseline.
3. Brier, ECE and Spearman against both targets with paired item-bootstrap intervals: the estimators are rows of the
   run's one signal table (:func:`capability_rows`: kind ``capability_estimator``, target kind ``expected_accuracy``
   or ``correct``), evaluated by the one evaluator in the run's bootstrap job, so ``results/metrics`` holds them and a
   grid's ``metrics.pairs`` gives their paired gaps; ``capability_metrics`` is a view of those rows beside the uniform
   random baseline. Then pass@k prediction; budget allocation; the standard error of the target against k; the
   divergence of the two targets.

Tables (docs/studies/004.md): ``capability_metrics``, ``capability_pass_at_k``, ``capability_allocation``,
``capability_se_by_k``, ``capability_divergence``, ``capability_probes``, each CSV and Parquet.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from confgrid.analysis.bootstrap import interval, resample_counts
from confgrid.analysis.evaluation import unit_seed
from confgrid.analysis.signals import conform
from confgrid.analysis.capability.allocation import greedy_allocation, solved_share, uniform_allocation
from confgrid.analysis.capability.estimators import fit_isotonic, fit_probe, uniform_brier, uniform_expected_ece
from confgrid.analysis.capability.metrics import CAPABILITY_METRICS
from confgrid.analysis.capability.pass_at_k import pass_at_k_row
from confgrid.analysis.capability.targets import divergence, sample_matrix, se_by_k
from confgrid.flows.spec.grid import GridSpec
from confgrid.flows.spec.methods import MethodSpec
from confgrid.flows.tables.signals import ProducerRows
from confgrid.flows.tracking import keyed_metrics
from confgrid.protocols.correctness import agreement_key
from confgrid.protocols.methods import majority_share
from confgrid.analysis.registry import closure_variant, get_metric

__all__ = ["CapabilityCell", "CapabilityEstimates", "capability_estimates", "capability_rows",
           "capability_tables", "capability_mlflow_metrics", "CAPABILITY_TABLES",
           "CAPABILITY_SET"]

log = logging.getLogger("confgrid")

#: The answer-set label of the capability estimators' units (study 004).
CAPABILITY_SET = "capability"
#: Names of the capability tables under results/.
CAPABILITY_TABLES = ("capability_metrics", "capability_pass_at_k", "capability_allocation", "capability_se_by_k",
                     "capability_divergence", "capability_probes")
UNIFORM = "uniform_random"
#: Target name in the capability tables -> ``target_kind`` of its unit.
TARGETS = {"capability": "expected_accuracy", "response": "correct"}
ORACLE_CC, ORACLE_RC = "oracle_cc", "oracle_rc"


@dataclass
class _Estimate:
    name: str
    method: str
    family: str
    values: np.ndarray  # (N_eval,), NaN where undefined
    cost_tokens: float
    fitted_on: str = ""
    k: int | None = None  # samples of a consistency estimator


def _rows(df: pd.DataFrame, model: str, dataset: str, method: str, col: str = "method") -> pd.DataFrame:
    if df is None or df.empty:
        return pd.DataFrame()
    return df[(df["model"] == model) & (df["dataset"] == dataset) & (df[col] == method)]


def _by_item(df: pd.DataFrame, col: str, ids: list[str]) -> np.ndarray:
    m = dict(zip(df["item_id"], pd.to_numeric(df[col], errors="coerce"), strict=True)) if len(df) else {}
    return np.array([m.get(i, np.nan) for i in ids], dtype=np.float64)


def _consistency(samples: pd.DataFrame, ids: list[str], k: int, rule: str) -> tuple[np.ndarray, float]:
    """Majority share of the first k samples per item (agreement under the rule's key, all unparsed: 0), and the mean
    generated tokens per item."""
    vals = np.full(len(ids), np.nan)
    tokens = []
    by = {i: g.sort_values("sample_idx").head(k) for i, g in samples.groupby("item_id", sort=False)}
    for j, i in enumerate(ids):
        g = by.get(i)
        if g is None or len(g) < k:
            continue
        answers = [a if isinstance(a, str) else None for a in g["answer"]]
        c = majority_share(answers, agreement_key(rule))
        vals[j] = c.value if c.value is not None else 0.0
        if "n_new_tokens" in g:
            tokens.append(float(pd.to_numeric(g["n_new_tokens"], errors="coerce").sum()))
    return vals, float(np.mean(tokens)) if tokens else float("nan")


def _features(hidden: pd.DataFrame, ids: list[str], layer: int | None) -> np.ndarray:
    """(N, d) features: the mean over layers (layer None) or one layer of the last prompt token's states."""
    by = {r.item_id: r for r in hidden.itertuples(index=False)}
    rows = []
    for i in ids:
        r = by.get(i)
        if r is None:
            rows.append(None)
            continue
        if layer is None:
            rows.append(np.asarray(r.mean_state, dtype=np.float64))
        else:
            st = np.asarray(r.states, dtype=np.float64).reshape(len(r.layers), int(r.hidden_size))
            rows.append(st[layer])
    d = next((len(x) for x in rows if x is not None), 0)
    return np.vstack([x if x is not None else np.full(d, np.nan) for x in rows]) if rows else np.zeros((0, d))


def _probe_estimates(cap, m: MethodSpec, hidden: pd.DataFrame, train_ids, mu_train, eval_ids,
                     probe_rows: list, where: dict) -> list[_Estimate]:
    out = []
    if hidden.empty:
        return out
    n_layers = len(hidden.iloc[0]["layers"])
    layer = cap.probe.layer if cap.probe.layer >= 0 else n_layers + cap.probe.layer
    feats = [("mean", None)]
    if 0 <= layer < n_layers:
        feats.append((f"layer{layer}", layer))
    else:
        log.warning("capability.probe.layer %d: method %s has %d layers; single-layer probe left out",
                    cap.probe.layer, m.id, n_layers)
    for tag, lay in feats:
        Xtr, Xev = _features(hidden, train_ids, lay), _features(hidden, eval_ids, lay)
        ok = ~np.isnan(Xtr).any(axis=1) & ~np.isnan(mu_train)
        fit = fit_probe(Xtr[ok], mu_train[ok], kind=cap.probe.model, folds=cap.probe.folds, seed=cap.probe.seed)
        pred = np.full(len(eval_ids), np.nan)
        have = ~np.isnan(Xev).any(axis=1)
        if have.any():
            pred[have] = fit.predict(Xev[have])
        name = f"{m.id}_probe_{tag}"
        probe_rows.append({**where, "estimator": name, "method": m.id, "features": tag, "probe_model": fit.kind,
                           "strength": fit.strength, "standardize": fit.standardize, "n_train": fit.n_train,
                           "cv_brier": min(fit.cv_brier.values()) if fit.cv_brier else np.nan,
                           "candidates": ";".join(f"{k}={v:.6g}" for k, v in fit.cv_brier.items())})
        out.append(_Estimate(name, m.id, m.reader.capability.family, pred, 0.0, "train"))
    return out


def _unit_labels(cell: "CapabilityCell", target_kind: str) -> dict[str, str]:
    """The unit of pairing of one (model, dataset, target) of the capability study in the one signal table."""
    return {"setting": f"{cell.model}/{cell.dataset}", "model": cell.model, "dataset": cell.dataset,
            "answer_set": CAPABILITY_SET, "parse_policy": "", "refusal": "", "rule": cell.rule,
            "target_kind": target_kind}


def _uniform_values(cell: "CapabilityCell", target_kind: str, t: np.ndarray, used: np.ndarray, spec: GridSpec,
                    groups) -> dict[str, tuple]:
    """Metric -> (point, lo, hi, n) of the uniform random baseline on the unit's items: the expected Brier
    ``1/3 - mu + mu^2`` resampled on the unit's own resamples (:func:`~confgrid.analysis.bootstrap.resample_counts`),
    the mean ECE of 200 seeded draws, Spearman 0 (its expectation)."""
    tu = t[used]
    n = int(used.sum())
    if not n:
        return dict.fromkeys(CAPABILITY_METRICS, (np.nan, np.nan, np.nan, 0))
    ub = uniform_brier(tu)
    seed = unit_seed(_unit_labels(cell, target_kind), spec.bootstrap.seed)
    W = resample_counts(n, spec.bootstrap.resamples, seed, groups=groups)
    lo, hi = interval((W @ ub) / W.sum(axis=1), spec.bootstrap.level)
    return {"brier": (float(ub.mean()), lo, hi, n),
            "ece": (uniform_expected_ece(tu, seed=seed, n_bins=spec.metrics.ece_bins), np.nan, np.nan, n),
            "spearman": (0.0, np.nan, np.nan, n)}


def _candidates(cell: "CapabilityCell", *oracles: tuple[str, np.ndarray]) -> list[tuple[str, str, np.ndarray]]:
    """(name, family, values) of every estimator of the cell, then the oracles."""
    return [(e.name, e.family, e.values) for e in cell.estimates] + [(o, "oracle", v) for o, v in oracles]


def _pass_rows(cell: "CapabilityCell", ks) -> list[dict]:
    n = (~np.isnan(cell.mat)).sum(axis=1)
    c = np.nan_to_num(cell.mat, nan=0.0).round().astype(np.int64).sum(axis=1)
    rows = []
    for name, family, p in _candidates(cell, (ORACLE_CC, cell.mu), (ORACLE_RC, cell.resp)):
        for k in ks:
            r = pass_at_k_row(p, n, c, k)
            rows.append({**cell.where, "estimator": name, "family": family, "k": r.k, "n_items": r.n_items,
                         "predicted": r.predicted, "band_lo": r.band_lo, "band_hi": r.band_hi, "actual": r.actual,
                         "mse": r.mse, "status": r.status})
    return rows


def _allocation_rows(cell: "CapabilityCell", cap) -> list[dict]:
    N, K = cell.mat.shape
    corr = np.nan_to_num(cell.mat, nan=0.0)
    where = cell.where
    rows = []
    for B in cap.budgets:
        capped = B > K
        mean, sd = solved_share(corr, uniform_allocation(N, B, K), cap.allocation_seeds)
        rows.append({**where, "budget": B, "allocation": "uniform", "estimator": "", "family": "uniform",
                     "solved": mean, "solved_sd": sd, "n_items": N, "capped": capped, "filled": 0})
        for name, family, p in _candidates(cell, (ORACLE_CC, cell.mu)):
            p = np.asarray(p, dtype=np.float64)
            miss = np.isnan(p)
            if miss.all():
                continue
            p = np.where(miss, np.nanmean(p), p)  # an item without an estimate gets the estimator's mean
            mean, sd = solved_share(corr, greedy_allocation(p, B * N, K), cap.allocation_seeds)
            rows.append({**where, "budget": B, "allocation": "greedy", "estimator": name, "family": family,
                         "solved": mean, "solved_sd": sd, "n_items": N, "capped": capped, "filled": int(miss.sum())})
    return rows


@dataclass
class CapabilityCell:
    """One (model, dataset) of the capability study: ``eval_ids``, its ``N`` evaluation items (in the order of
    :func:`~confgrid.analysis.capability.targets.sample_matrix`); the capability target ``mu`` (expected accuracy
    over the k_eval samples) and the response target ``resp`` (the first sample's correctness), (N,) float64 in
    [0, 1], NaN where missing; ``mat`` (N, k_eval), the target samples' correctness (NaN: a missing sample), under the
    target's agreement ``rule``; ``estimates``, every estimator's values on ``eval_ids``."""

    model: str
    dataset: str
    rule: str
    eval_ids: list[str]
    mu: np.ndarray
    resp: np.ndarray
    mat: np.ndarray
    estimates: list[_Estimate]

    @property
    def where(self) -> dict[str, str]:
        return {"model": self.model, "dataset": self.dataset}

    def target(self, name: str) -> np.ndarray:
        """The target of a name of :data:`TARGETS` (KeyError for another name)."""
        return {"capability": self.mu, "response": self.resp}[name]


@dataclass
class CapabilityEstimates:
    """What the capability estimators of a run produce, before any metric: one :class:`CapabilityCell` per (model,
    dataset), and the probes' fits (``capability_probes``)."""

    cells: list[CapabilityCell] = field(default_factory=list)
    probes: list[dict] = field(default_factory=list)


def capability_estimates(spec: GridSpec, splits: dict[str, dict[str, str]], samples: pd.DataFrame,
                         signals: pd.DataFrame, targets: pd.DataFrame, hidden: pd.DataFrame,
                         costs: pd.DataFrame) -> CapabilityEstimates:
    """Targets and every estimator's values on the evaluation split of each (model, dataset) (module docstring, steps
    1 and 2). ``splits``: dataset -> {item_id: "train" | "eval"} (:func:`confgrid.protocols.splits.train_eval_split`);
    the frames are those of :class:`confgrid.flows.evaluate.methods.MethodTables`. A (model, dataset) whose target
    samples are missing is left out with a warning.
    """
    cap = spec.capability
    out = CapabilityEstimates()
    if not cap.enabled:
        return out
    methods = {m.id: m for m in spec.methods}
    target_m = methods[cap.target]
    rule = target_m.agreement_rule(spec.correctness.primary)
    for model in [m.name for m in spec.method_models(target_m)]:
        for d in spec.datasets:
            where = {"model": model, "dataset": d.name}
            tsamp = _rows(samples, model, d.name, cap.target)
            if tsamp.empty:
                log.warning("capability: %s/%s has no samples of the target %s; left out", model, d.name, cap.target)
                continue
            eval_ids, mat = sample_matrix(tsamp, f"correct_{rule}")
            mu = np.nanmean(mat, axis=1)  # NaN: a missing sample (an unparsed one counts 0 already)
            resp = mat[:, 0].copy()
            split = splits.get(d.name, {})
            train_ids = sorted(i for i, s in split.items() if s == "train")
            mu_train = (_by_item(_rows(targets, model, d.name, cap.train_target), "expected_accuracy", train_ids)
                        if cap.train_target else np.full(len(train_ids), np.nan))
            ests: list[_Estimate] = []
            for eid in cap.estimators:
                m = methods[eid]
                role = m.reader.capability
                if role.pooled:
                    pool = _rows(samples, model, d.name, eid)
                    for k in cap.consistency_k:
                        v, tok = _consistency(pool, eval_ids, k, m.agreement_rule(spec.correctness.primary))
                        ests.append(_Estimate(f"{eid}_k{k}", eid, role.family, v, tok, k=k))
                elif role.probe:
                    ests += _probe_estimates(cap, m, _rows(hidden, model, d.name, eid), train_ids, mu_train,
                                             eval_ids, out.probes, where)
                else:
                    sig = _rows(signals, model, d.name, eid, "signal")
                    if sig.empty:
                        log.warning("capability: %s/%s has no rows of estimator %s; left out", model, d.name, eid)
                        continue
                    raw = _by_item(sig, "confidence", eval_ids)
                    rc = _rows(costs, model, d.name, eid)
                    tok = float(pd.to_numeric(rc["generated_tokens"]).mean()) if len(rc) else 1.0
                    ests.append(_Estimate(eid, eid, role.family, raw, tok))
                    if cap.isotonic:
                        fit = fit_isotonic(_by_item(sig, "confidence", train_ids), mu_train)
                        ests.append(_Estimate(f"{eid}+isotonic", eid, role.family, fit.predict(raw), tok, "train"))
            if cap.leaky_consistency:
                for k in cap.consistency_k:  # k <= the target's k: checked when the grid loads
                    v, tok = _consistency(tsamp, eval_ids, k, rule)
                    ests.append(_Estimate(f"consistency_leaky_k{k}", cap.target, "consistency_leaky", v, tok, k=k))
            out.cells.append(CapabilityCell(model, d.name, rule, list(eval_ids), mu, resp, mat, ests))
    return out


def capability_rows(spec: GridSpec, est: CapabilityEstimates) -> ProducerRows:
    """The capability estimators as rows of the one signal table, with the metrics their units take.

    Per (model, dataset) two units (answer set ``capability``, the target's rule): ``target_kind``
    ``expected_accuracy`` (graded against the capability target) and ``correct`` (the response target). Each estimator
    is a signal of kind ``capability_estimator`` (``method``: its method id; ``k``: the samples of a consistency
    estimator), on its own items (``align`` empty). Status ``no_estimate`` where the estimator has no value,
    ``target_missing`` where the target has none. The metrics are Brier, ECE (the grid's bins and first closure) and
    Spearman (study 004 Tables 3, 13 and 12), through the one evaluator.
    """
    frames = []
    for cell in est.cells:
        for target_name, kind in TARGETS.items():
            t = cell.target(target_name)
            for e in cell.estimates:
                conf = np.asarray(e.values, dtype=np.float64)
                status = np.where(~np.isfinite(conf), "no_estimate", np.where(np.isfinite(t), "ok", "target_missing"))
                frames.append(conform(pd.DataFrame({
                    "item_id": cell.eval_ids, "signal": e.name, "kind": "capability_estimator", "method": e.method,
                    "k": e.k, "target_rule": cell.rule, "confidence": conf, "target": t, "status": status,
                    "align": ""}), **_unit_labels(cell, kind)))
    rows = conform(pd.concat(frames, ignore_index=True)) if frames else conform(pd.DataFrame())
    ece = closure_variant("ece", spec.metrics.ece_closure[0])
    return ProducerRows(rows, ("brier", ece, "spearman"))


def capability_tables(spec: GridSpec, est: CapabilityEstimates, metrics: pd.DataFrame,
                      signals: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """Every capability table of a run by name (:data:`CAPABILITY_TABLES`; empty frames without a capability section;
    module docstring, step 3): ``capability_metrics`` is a view of the one estimates table (the evaluator's
    ``metrics`` rows of the capability units) beside the uniform baseline; the others are computed from the targets
    and estimates. ``metrics``: the evaluator's metrics of a table holding :func:`capability_rows`; ``signals``: the
    evaluated signal table (its ``cluster`` column, for the baseline's clustered resamples).
    """
    cap = spec.capability
    out = dict.fromkeys(CAPABILITY_TABLES, pd.DataFrame())
    if not cap.enabled:
        return out
    acc: dict[str, list] = {name: [] for name in CAPABILITY_TABLES}
    acc["capability_probes"] = list(est.probes)
    mine = metrics[metrics["answer_set"] == CAPABILITY_SET] if len(metrics) else metrics
    info = {m: get_metric(m) for m in (set(mine["metric"]) if len(mine) else ())}
    # every closure variant of ECE (``ece_right``...) under its family's name
    by_key = {(r.model, r.dataset, r.target_kind, r.signal, info[r.metric].family or info[r.metric].name): r
              for r in mine.itertuples(index=False)}
    nan4 = (np.nan, np.nan, np.nan, 0)
    for cell in est.cells:
        where = cell.where
        for target_name, kind in TARGETS.items():
            t = cell.target(target_name)
            used = np.zeros(len(t), dtype=bool)
            vals = []  # (estimator, metric, (point, lo, hi, n))
            for e in cell.estimates:
                used |= np.isfinite(np.asarray(e.values, dtype=np.float64)) & np.isfinite(t)
                for metric in CAPABILITY_METRICS:
                    r = by_key.get((cell.model, cell.dataset, kind, e.name, metric))
                    vals.append((e, metric, nan4 if r is None else (r.point, r.lo, r.hi, int(r.n))))
            groups = None
            if spec.bootstrap.cluster and len(signals):
                unit = signals[(signals["answer_set"] == CAPABILITY_SET) & (signals["model"] == cell.model)
                               & (signals["dataset"] == cell.dataset) & (signals["target_kind"] == kind)]
                cl = unit.drop_duplicates("item_id").set_index("item_id")["cluster"]
                groups = cl.reindex(np.asarray(cell.eval_ids)[used]).to_numpy(dtype=object)
            uniform = _Estimate(UNIFORM, "", "baseline", t, 0.0)
            vals += [(uniform, m, v) for m, v in _uniform_values(cell, kind, t, used, spec, groups).items()]
            n_target = int(np.isfinite(t).sum())
            acc["capability_metrics"] += [
                {**where, "target": target_name, "estimator": e.name, "method": e.method, "family": e.family,
                 "cost_tokens": e.cost_tokens, "fitted_on": e.fitted_on, "metric": metric, "point": point, "lo": lo,
                 "hi": hi, "n": n, "dropped": n_target - n} for e, metric, (point, lo, hi, n) in vals]
        acc["capability_pass_at_k"] += _pass_rows(cell, cap.pass_at_k)
        acc["capability_allocation"] += _allocation_rows(cell, cap)
        acc["capability_se_by_k"] += [{**where, **r} for r in se_by_k(cell.mat).to_dict("records")]
        acc["capability_divergence"] += [{**where, **r} for r in divergence(cell.mu, cell.resp).to_dict("records")]
    return {name: pd.DataFrame(rows) for name, rows in acc.items()}


def capability_mlflow_metrics(tables: dict[str, pd.DataFrame]) -> dict[str, float]:
    """MLflow metrics of the capability study: ``capability/<model>/<dataset>/<target>/<estimator>/<metric>/
    {point,lo,hi}``, the pass@k MSE (``.../pass_at_k/<estimator>/k<k>/mse``) and the solved share of each
    allocation (``.../allocation/<allocation>_<estimator>/B<B>/solved``); NaN values are left out
    (:func:`~confgrid.flows.tracking.keyed_metrics`)."""
    return {
        **keyed_metrics(tables["capability_metrics"],
                        lambda r: ("capability", r.model, r.dataset, r.target, r.estimator, r.metric),
                        {"point": "point", "lo": "lo", "hi": "hi"}),
        **keyed_metrics(tables["capability_pass_at_k"],
                        lambda r: ("capability", r.model, r.dataset, "pass_at_k", r.estimator, f"k{r.k}"),
                        {"mse": "mse"}),
        **keyed_metrics(tables["capability_allocation"],
                        lambda r: ("capability", r.model, r.dataset, "allocation",
                                   f"{r.allocation}_{r.estimator}" if r.estimator else r.allocation, f"B{r.budget}"),
                        {"solved": "solved"})}
