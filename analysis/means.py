"""Means over settings (study 000 Tables 2-4 and 15): the evaluator's aggregate of the estimates, next to the verdicts.

The evaluator keeps, beside its tables, the resamples of some units' metric rows (:class:`Kept`: a run keeps its
main protocol's units, flows/evaluate/run_evaluation.py). :func:`sides` pairs each token signal's row with the
verbalized row of the same unit and metric: per setting the gap ``g = metric(verbalized) - metric(token)`` and its
*advantage*, the statistic whose sign says which signal is better (analysis/compare.py: the gap for an unsigned
metric, ``|v| - |t|`` for a signed one), point and paired resamples. Over settings, as study 000 Appendix A says
("average the resampled values across settings and take the percentiles of that average"):

* :func:`mean_gap`: the mean signed gap of a set of rows (one per setting) and the percentile interval of its
  per-resample mean (Tables 2 and 3);
* :func:`mean_shift`: for two sets of rows that differ in one axis (scoring context, token aggregation, correctness
  rule, or the metric: an ECE estimator against 10-bin ECE), per setting ``dg = g(to) - g(from)`` on the same
  resamples; the mean ``|dg|`` and the interval of ``mean_s |dg_s[r]|``, the settings whose ``dg`` interval
  excludes zero, and flips of the better signal by point (:func:`~confgrid.analysis.compare.flip` of the two
  advantages; resolved: both advantage intervals exclude zero). Across metrics the advantages are oriented first
  (times -1 for a higher-is-better metric) so that a positive one favours the token signal under both.

Settings pair on the ``setting`` column: a mean is over the settings both sets have. Two units of one setting (two
correctness rules) resample with the same seed (analysis/evaluation.py ``unit_seed``: model and dataset only), so
their resamples are paired.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping

import numpy as np
import pandas as pd

from .bootstrap import BootstrapResult, interval
from .compare import advantage, excludes_zero, flip
from .registry import get_metric
from .signals import UNIT_COLUMNS

__all__ = ["SUMMARY_COLUMNS", "KEPT_COLUMNS", "Kept", "Sides", "sides", "mean_gap", "mean_shift"]

#: The columns of a :func:`mean_shift` summary.
SUMMARY_COLUMNS = ["n_settings", "mean_abs", "lo", "hi", "max_abs", "n_excludes_zero", "n_flips", "n_resolved_flips"]
#: The columns of a kept metric row.
KEPT_COLUMNS = [*UNIT_COLUMNS, "signal", "kind", "context", "aggregation", "metric", "point"]


@dataclass(frozen=True)
class Kept:
    """Metric rows of some units with their resamples.

    Attributes
    ----------
    rows : DataFrame
        Columns :data:`KEPT_COLUMNS`: one row per (unit, signal, metric) with its point estimate.
    values : ndarray of shape (len(rows), B), float64
        Row ``i``'s resampled values (the unit's paired bootstrap).
    """

    rows: pd.DataFrame
    values: np.ndarray

    @classmethod
    def of(cls, labels: Mapping[str, str], signals: list[str], info: Mapping[str, Mapping], result: BootstrapResult
           ) -> "Kept":
        """The rows of a unit's own cells: the first ``len(signals)`` cells of ``result`` (analysis/evaluation.py)."""
        S, metrics = len(signals), list(result.metrics)
        rows = [{**labels, "signal": s, **{k: info[s].get(k, "") for k in ("kind", "context", "aggregation")},
                 "metric": m, "point": float(result.point[i, j])} for i, s in enumerate(signals)
                for j, m in enumerate(metrics)]
        return cls(pd.DataFrame(rows, columns=KEPT_COLUMNS), result.resamples[:S].reshape(S * len(metrics), -1).copy())

    @classmethod
    def concat(cls, parts: Iterable["Kept | None"]) -> "Kept":
        """One record of several (None entries skipped); every part needs the same number of resamples."""
        parts = [p for p in parts if p is not None]
        if len({p.values.shape[1] for p in parts}) > 1:
            raise ValueError(f"kept units differ in resamples: {sorted({p.values.shape[1] for p in parts})}")
        if not parts:
            return cls(pd.DataFrame(columns=KEPT_COLUMNS), np.zeros((0, 0)))
        return cls(pd.concat([p.rows for p in parts], ignore_index=True), np.concatenate([p.values for p in parts]))


@dataclass(frozen=True)
class Sides:
    """Per (unit, token signal, metric): the gap against the verbalized signal and the advantage.

    Attributes
    ----------
    rows : DataFrame
        The token rows of :class:`Kept` (without ``point``) and ``gap``, ``advantage`` (points), ``orient`` (+1 when
        a positive advantage favours the token signal, -1 for a higher-is-better metric).
    gaps, advantages : ndarray of shape (len(rows), B)
        Their paired resamples (``nan`` where either side is undefined).
    """

    rows: pd.DataFrame
    gaps: np.ndarray
    advantages: np.ndarray

    def where(self, **eq) -> pd.DataFrame:
        """The rows whose columns equal ``eq`` (the index addresses :attr:`gaps` and :attr:`advantages`)."""
        mask = np.ones(len(self.rows), dtype=bool)
        for k, v in eq.items():
            mask &= (self.rows[k] == v).to_numpy()
        return self.rows[mask]


def sides(kept: Kept, against: str = "verbalized") -> Sides:
    """Pair every token row of ``kept`` (``kind == "token"``) with the ``against`` row of its unit and metric."""
    r = kept.rows.reset_index(drop=True)
    keys = [*UNIT_COLUMNS, "metric"]
    v = r.loc[r["signal"] == against, keys].reset_index().rename(columns={"index": "_v"})
    m = r[r["kind"] == "token"].reset_index().rename(columns={"index": "_t"}).merge(v, on=keys, sort=False)
    iv, it = m["_v"].to_numpy(dtype=np.int64), m["_t"].to_numpy(dtype=np.int64)
    pv, pt = r["point"].to_numpy(np.float64)[iv], r["point"].to_numpy(np.float64)[it]
    rv, rt = kept.values[iv], kept.values[it]
    info = [get_metric(x) for x in m["metric"]]
    adv, adv_res = advantage(np.array([i.signed for i in info], dtype=bool), pv, pt, rv, rt)
    rows = m.drop(columns=["_v", "_t", "point"]).assign(
        gap=pv - pt, advantage=adv, orient=[1.0 if i.lower_is_better else -1.0 for i in info])
    return Sides(rows, rv - rt, adv_res)


def mean_gap(s: Sides, rows: pd.DataFrame, level: float = 0.95) -> dict:
    """``point`` (mean of the rows' gaps), ``lo``, ``hi`` (percentiles of the per-resample mean over the rows)."""
    i = rows.index.to_numpy()
    lo, hi = interval(np.mean(s.gaps[i], axis=0), level)
    return {"point": float(np.mean(s.rows["gap"].to_numpy()[i])), "lo": float(lo), "hi": float(hi)}


def mean_shift(s: Sides, frm: pd.DataFrame, to: pd.DataFrame, level: float = 0.95) -> dict | None:
    """The mean ``|dg|`` over the settings ``frm`` and ``to`` (rows of ``s``, one per setting each) both have.

    Returns
    -------
    dict or None
        :data:`SUMMARY_COLUMNS` (counts as int); None when they share no setting.

    Raises
    ------
    ValueError
        ``frm`` or ``to`` has two rows of one setting.
    """
    for what, df in (("frm", frm), ("to", to)):
        if df["setting"].duplicated().any():
            raise ValueError(f"{what} has two rows of one setting: {df['setting'][df['setting'].duplicated()].tolist()}")
    m = frm[["setting"]].reset_index().merge(to[["setting"]].reset_index(), on="setting", sort=False)
    if m.empty:
        return None
    i, j = m["index_x"].to_numpy(), m["index_y"].to_numpy()
    g = s.rows["gap"].to_numpy()
    p, d = g[j] - g[i], s.gaps[j] - s.gaps[i]
    lo, hi = interval(np.mean(np.abs(d), axis=0), level)
    dlo, dhi = interval(d, level)
    across = s.rows["metric"].to_numpy()[i] != s.rows["metric"].to_numpy()[j]
    (pa, la, ha), (pb, lb, hb) = (  # the advantages, oriented where the two rows differ in metric (x * 1.0 is x)
        (o * s.rows["advantage"].to_numpy()[k], *interval(o[:, None] * s.advantages[k], level))
        for k in (i, j) for o in [np.where(across, s.rows["orient"].to_numpy()[k], 1.0)])
    f = flip(pa, pb)
    return {"n_settings": len(m), "mean_abs": float(np.mean(np.abs(p))), "lo": float(lo), "hi": float(hi),
            "max_abs": float(np.max(np.abs(p))), "n_excludes_zero": int(excludes_zero(dlo, dhi).sum()),
            "n_flips": int(f.sum()),
            "n_resolved_flips": int((f & excludes_zero(la, ha) & excludes_zero(lb, hb)).sum())}
