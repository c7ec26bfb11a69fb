"""Robustness verdicts: over a grid's protocol settings, how often does a conclusion hold, is it resolved, and which
single axis flips it (conclusions, settings, columns and rules: docs/concepts/verdicts.md).

A *conclusion* (:class:`Conclusion`) is a signed comparison "signal A is better than signal B on metric M". Its
*settings* are the rows of the estimates' gap table (analysis/evaluation.py ``GAP_COLUMNS``) that compare the two:
every unit, every scoring context and token aggregation of a token side (:func:`side`), and every estimator of the
metric's family (:func:`metric_family`). Per conclusion, :func:`verdict_table` gives the share of settings where A is
better by point (its interval from the same paired resamples as the gaps: :class:`ShareCounts`), the shares resolved
either way, the axis (:data:`AXES`) whose single change flips it most often, and a verdict (:class:`VerdictRule`).

A specification-curve summary (Simonsohn, Simmons and Nelson, "Specification curve analysis", Nature Human Behaviour
4, 1208-1214, 2020): every defensible specification of the analysis is run and the conclusion judged on all of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import numpy as np
import pandas as pd

from .bootstrap import interval
from .registry import get_metric

__all__ = ["CONCLUSION_METRICS", "AXES", "VERDICT_COLUMNS", "VERDICTS", "Conclusion", "ShareCounts", "VerdictRule",
           "metric_family", "side", "conclusion_of", "favours_a", "flip_axis", "verdict_table",
           "specification_curve"]

#: The metric families a conclusion is judged on by default: calibration error, AUROC, AURC, Brier.
CONCLUSION_METRICS = ("ece", "auroc", "aurc", "brier")
#: The protocol axes a setting is placed on, in the order ties of :func:`flip_axis` are broken.
AXES = ("model", "dataset", "setting", "answer_set", "parse_policy", "refusal", "rule", "target_kind", "context",
        "aggregation", "method", "estimator")
#: The words of a verdict.
VERDICTS = ("robust", "fragile", "unresolved")
#: Columns of ``results/verdicts``.
VERDICT_COLUMNS = ["signal_a", "signal_b", "metric", "view", "verdict", "holds_for", "n_settings", "n_undefined",
                   "share_a_better", "lo", "hi", "share_resolved_a", "share_resolved_b", "flip_axis", "flip_count",
                   "single_changes", "axes"]
#: Calibration-error estimators outside the ``ece`` name family (unsigned, lower is better).
_CALIBRATION_ERRORS = ("kde_ece", "ks_ece", "smoothed_ece", "smece")


@dataclass(frozen=True, order=True)
class Conclusion:
    """"Side A is better than side B on a metric family": the unit a verdict is given for.

    Attributes
    ----------
    signal_a, signal_b : str
        The two sides (:func:`side`): a signal name, or ``token`` for every token score.
    metric : str
        The metric family (:data:`CONCLUSION_METRICS`).
    view : str
        Study 001's view of a model-vs-model conclusion (``raw``, ``ia``, ``da`` ...: analysis/ace/units.py; the
        sides are then models); ``""`` for a signal-vs-signal one.
    """

    signal_a: str
    signal_b: str
    metric: str
    view: str = ""


@dataclass
class ShareCounts:
    """Per resample, how many of a conclusion's settings favour side A, and how many have a defined advantage.

    Attributes
    ----------
    favours_a, defined : ndarray of shape (B,), int64
    """

    favours_a: np.ndarray
    defined: np.ndarray

    def add(self, favours: np.ndarray, defined: np.ndarray) -> None:
        """Add one setting's per-resample ``favours`` (bool (B,)) where ``defined`` (bool (B,))."""
        if favours.shape != self.favours_a.shape:
            raise ValueError(f"a setting has {favours.shape[0]} resamples, the others {self.favours_a.shape[0]}; "
                             "every unit of one evaluation needs the same number")
        self.favours_a += favours & defined
        self.defined += defined

    @classmethod
    def empty(cls, n_resamples: int) -> "ShareCounts":
        """Zero counts for ``n_resamples`` resamples (int64 arrays of shape (B,))."""
        return cls(np.zeros(int(n_resamples), dtype=np.int64), np.zeros(int(n_resamples), dtype=np.int64))

    def shares(self) -> np.ndarray:
        """(B,) float64: the share of settings favouring A in each resample (NaN where none is defined)."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(self.defined > 0, self.favours_a / np.maximum(self.defined, 1), np.nan)


@dataclass(frozen=True)
class VerdictRule:
    """The thresholds that turn a conclusion's shares into a word (defaults stated in docs/concepts/verdicts.md).

    With ``p`` the share of settings where the majority side (``holds_for``) is better by point, ``r`` the share
    where it is resolved in its favour and ``q`` the share resolved in the other side's favour:

    * ``robust``: ``p >= robust_point_share`` and ``r >= robust_resolved_share`` and ``q == 0``, over at least
      ``robust_min_settings`` settings (one or two settings say nothing about a protocol's sensitivity);
    * ``fragile``: ``q > 0`` (resolved in both directions) or ``p < fragile_point_share`` (the point estimates
      disagree in a large share of settings);
    * ``unresolved``: otherwise (one direction, too rarely resolved to call it robust).

    Attributes
    ----------
    robust_point_share, robust_resolved_share, fragile_point_share : float in [0, 1], default 0.9, 0.5, 0.75
    robust_min_settings : int >= 1, default 3

    Raises
    ------
    ValueError
        A threshold outside [0, 1], ``fragile_point_share > robust_point_share``, ``robust_min_settings < 1``.
    """

    robust_point_share: float = 0.9
    robust_resolved_share: float = 0.5
    fragile_point_share: float = 0.75
    robust_min_settings: int = 3

    def __post_init__(self) -> None:
        for name in ("robust_point_share", "robust_resolved_share", "fragile_point_share"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and 0.0 <= float(v) <= 1.0):
                raise ValueError(f"verdicts.{name}: {v!r} is not a share in [0, 1]")
        if self.fragile_point_share > self.robust_point_share:
            raise ValueError(f"verdicts.fragile_point_share ({self.fragile_point_share}) must not exceed "
                             f"robust_point_share ({self.robust_point_share})")
        m = self.robust_min_settings
        if isinstance(m, bool) or not isinstance(m, (int, np.integer)) or m < 1:
            raise ValueError(f"verdicts.robust_min_settings: {m!r} is not a whole number of settings >= 1")

    def verdict(self, point_share: float, resolved_for: float, resolved_against: float,
                n_settings: int | None = None) -> str:
        """The word for a majority side better by point in ``point_share`` of ``n_settings`` settings (None: enough),
        resolved in its favour in ``resolved_for`` and against it in ``resolved_against`` (``unresolved`` when
        ``point_share`` is NaN)."""
        if not np.isfinite(point_share):
            return "unresolved"
        if resolved_against > 0 or point_share < self.fragile_point_share:
            return "fragile"
        enough = n_settings is None or n_settings >= self.robust_min_settings
        if enough and point_share >= self.robust_point_share and resolved_for >= self.robust_resolved_share:
            return "robust"
        return "unresolved"


def metric_family(metric: str) -> str | None:
    """The conclusion metric a registered metric estimates: ``ece`` for every unsigned calibration-error estimator
    (``ece``, its bin and closure variants, ``ece_equal_mass``, ``kde_ece``, ``ks_ece``, ``smoothed_ece``, ``smece``),
    ``auroc``, ``aurc``, ``brier`` as themselves, None for the rest (signed summaries, Spearman)."""
    info = get_metric(metric)
    if info.signed:
        return None
    name = info.name
    if name.startswith("ece") or name in _CALIBRATION_ERRORS:
        return "ece"
    return name if name in CONCLUSION_METRICS else None


def side(kind: str, signal: str) -> str:
    """The side of a conclusion a signal stands for: ``token`` for every token score (its scoring context and
    aggregation are axes of the conclusion), the signal's own name otherwise."""
    return "token" if kind == "token" else signal


def conclusion_of(kind_a: str, kind_b: str, signal_a: str, signal_b: str, metric: str,
                  view: str = "") -> Conclusion | None:
    """The conclusion a gap row ``metric(signal_a) - metric(signal_b)`` is a setting of, or None (a metric without a
    family, or two signals on the same side, e.g. two token scores: a shift, not a conclusion). ``view``: the ACE view
    of a model-vs-model gap (part of the conclusion: "A better than B once accuracy is aligned")."""
    fam = metric_family(metric)
    a, b = side(kind_a, signal_a), side(kind_b, signal_b)
    if fam is None or a == b:
        return None
    return Conclusion(a, b, fam, str(view or ""))


def favours_a(metric: str, advantage: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per resample, whether side A is better, and whether the comparison is defined.

    ``advantage``: ``metric(a) - metric(b)`` per resample ((B,) float64; analysis/evaluation.py; the metric is
    unsigned, :func:`metric_family`). Returns two bool arrays (B,): ``advantage < 0`` for a metric where lower is
    better (``> 0`` otherwise), and ``isfinite(advantage)``.
    """
    adv = np.asarray(advantage, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        fav = adv < 0 if get_metric(metric).lower_is_better else adv > 0
    return fav, np.isfinite(adv)


def _axes_of(rows: pd.DataFrame) -> list[str]:
    """The axes that vary among a conclusion's settings (``setting`` only where model and dataset are absent)."""
    have = [a for a in AXES if a in rows.columns and rows[a].astype(str).nunique() > 1]
    named = "model" in rows.columns and (rows["model"].astype(str) != "").all()
    return [a for a in have if not (a == "setting" and named)]


def _conclusions(gaps: pd.DataFrame) -> list[Conclusion | None]:
    """The conclusion of each gap row (:func:`conclusion_of`), in row order."""
    views = gaps["view"] if "view" in gaps.columns else [""] * len(gaps)
    return [conclusion_of(str(ka), str(kb), str(a), str(b), str(m), "" if _missing(v) else str(v))
            for ka, kb, a, b, m, v in zip(gaps["kind_a"], gaps["kind_b"], gaps["signal_a"], gaps["signal_b"],
                                          gaps["metric"], views, strict=True)]


def _missing(v) -> bool:
    return v is None or v is pd.NA or (isinstance(v, float) and np.isnan(v))


def flip_axis(rows: pd.DataFrame, direction: np.ndarray) -> tuple[str, int, int]:
    """The axis whose single change flips a conclusion most often.

    Parameters
    ----------
    rows : DataFrame
        The conclusion's settings with the columns of :data:`AXES` it has (``estimator``: the metric name).
    direction : ndarray of shape (len(rows),), int
        +1 where A is better by point, -1 where B is, 0 otherwise.

    Returns
    -------
    (axis, flips, single_changes)
        ``flips``: pairs of settings that differ only in ``axis`` and whose directions are +1 and -1;
        ``single_changes``: every pair that differs only in ``axis``. ``("", 0, 0)`` when no single change flips it;
        ties: the first axis of :data:`AXES`.
    """
    axes = _axes_of(rows)
    best = ("", 0, 0)
    if not axes:
        return best
    codes = np.column_stack([pd.factorize(rows[a].astype(str))[0] for a in axes])
    d = np.asarray(direction, dtype=np.int64)
    plus, minus = (d == 1).astype(np.int64), (d == -1).astype(np.int64)
    for k, axis in enumerate(axes):
        others = np.delete(codes, k, axis=1)
        group = (np.unique(others, axis=0, return_inverse=True)[1].ravel() if others.shape[1]
                 else np.zeros(len(d), dtype=np.int64))
        n = np.bincount(group)
        flips = int((np.bincount(group, weights=plus) * np.bincount(group, weights=minus)).sum())
        changes = int((n * (n - 1) // 2).sum())
        if flips > best[1]:
            best = (axis, flips, changes)
    return best


def verdict_table(gaps: pd.DataFrame, shares: Mapping[Conclusion, ShareCounts] | None = None,
                  rule: VerdictRule | None = None, level: float = 0.95,
                  metrics: tuple[str, ...] = CONCLUSION_METRICS) -> pd.DataFrame:
    """Every conclusion of an evaluation's gap table with its shares, flipping axis and verdict.

    Parameters
    ----------
    gaps : DataFrame
        The estimates' gap table (:data:`confgrid.analysis.evaluation.GAP_COLUMNS`: signal_a, signal_b, kind_a,
        kind_b, context, aggregation, metric, gap, lo, hi, excludes_zero, favours and the unit columns).
    shares : mapping Conclusion -> ShareCounts, optional
        The per-resample counts of the same evaluation (:attr:`confgrid.analysis.evaluation.Estimates.shares`);
        without them ``lo`` and ``hi`` are NaN.
    rule : VerdictRule, optional
    level : float in (0, 1)
        Level of the percentile interval of ``share_a_better``.
    metrics : tuple of str
        The metric families judged (default :data:`CONCLUSION_METRICS`).

    Returns
    -------
    DataFrame
        :data:`VERDICT_COLUMNS`, one row per conclusion, in the order conclusions first appear in ``gaps``; of a
        comparison present both ways (``analyze``'s every ordered pair) the first orientation only. ``n_settings``:
        settings with a finite gap (the denominators); ``n_undefined``: the others; ``axes``: the axes that vary
        (comma-separated, display only).
    """
    rule = rule or VerdictRule()
    if gaps is None or gaps.empty:
        return pd.DataFrame(columns=VERDICT_COLUMNS)
    g = gaps.reset_index(drop=True)
    keys = _conclusions(g)
    g = g.assign(estimator=g["metric"])
    where: dict[Conclusion, list[int]] = {}
    for i, k in enumerate(keys):
        if k is not None and k.metric in metrics:
            where.setdefault(k, []).append(i)
    out = []
    seen: set[Conclusion] = set()
    for key, idx in where.items():
        if Conclusion(key.signal_b, key.signal_a, key.metric, key.view) in seen:  # every ordered pair: B vs A is A vs B
            continue
        seen.add(key)
        rows = g.iloc[idx]
        finite = np.isfinite(rows["gap"].to_numpy(np.float64))
        sub = rows[finite]
        n = len(sub)
        d = np.where(sub["favours"] == sub["signal_a"], 1, np.where(sub["favours"] == sub["signal_b"], -1, 0))
        resolved = sub["excludes_zero"].astype(bool).to_numpy()
        p_a = float((d == 1).mean()) if n else np.nan
        p_b = float((d == -1).mean()) if n else np.nan
        r_a = float((resolved & (d == 1)).mean()) if n else np.nan
        r_b = float((resolved & (d == -1)).mean()) if n else np.nan
        lo = hi = np.nan
        counts = (shares or {}).get(key)
        if counts is not None and counts.defined.size and (counts.defined > 0).any():
            lo, hi = (float(x) for x in interval(counts.shares(), level))
        a_leads = n and p_a >= p_b
        if not n or max(p_a, p_b) == 0:  # no setting, or every one a tie: no side to speak of
            holds, word = ("neither" if n else ""), "unresolved"
        elif p_a == p_b:  # as many settings favour B as A: no majority side; the less favourable word, never robust
            holds = "neither"
            words = {rule.verdict(p_a, r_a, r_b, n), rule.verdict(p_b, r_b, r_a, n)}
            word = "fragile" if "fragile" in words else "unresolved"
        else:
            holds = key.signal_a if a_leads else key.signal_b
            word = rule.verdict(p_a if a_leads else p_b, r_a if a_leads else r_b, r_b if a_leads else r_a, n)
        axis, flips, changes = flip_axis(sub, d)
        out.append({"signal_a": key.signal_a, "signal_b": key.signal_b, "metric": key.metric, "view": key.view,
                    "verdict": word,
                    "holds_for": holds, "n_settings": n, "n_undefined": int((~finite).sum()), "share_a_better": p_a,
                    "lo": lo, "hi": hi, "share_resolved_a": r_a, "share_resolved_b": r_b, "flip_axis": axis,
                    "flip_count": flips, "single_changes": changes, "axes": ", ".join(_axes_of(sub))})
    return pd.DataFrame(out, columns=VERDICT_COLUMNS)


def specification_curve(gaps: pd.DataFrame, conclusion: Conclusion) -> pd.DataFrame:
    """The data of one conclusion's specification curve (Simonsohn, Simmons and Nelson 2020): every setting's gap with
    its interval, sorted, and the axis values it used.

    Parameters
    ----------
    gaps : DataFrame
        The estimates' gap table (as :func:`verdict_table` reads it).

    Returns
    -------
    DataFrame
        One row per setting with a finite gap, sorted by ``gap`` (ties in table order): ``rank`` (0-based), ``gap``
        (``metric(A) - metric(B)``), ``lo``, ``hi``, ``excludes_zero``, ``direction`` (+1: A better by point, -1: B
        better, 0: neither), ``signal_b``, ``estimator`` (the metric variant), and the columns of :data:`AXES` that
        vary among the settings (the dots of the lower panel). Empty when the conclusion has no setting.
    """
    if gaps is None or gaps.empty:
        return pd.DataFrame(columns=["rank", "gap", "lo", "hi", "excludes_zero", "direction", "signal_b",
                                     "estimator"])
    rows = gaps[[k == conclusion for k in _conclusions(gaps)]].assign(estimator=lambda d: d["metric"])
    rows = rows[np.isfinite(rows["gap"].to_numpy(np.float64))]
    axes = _axes_of(rows)
    d = np.where(rows["favours"] == rows["signal_a"], 1, np.where(rows["favours"] == rows["signal_b"], -1, 0))
    out = rows.assign(direction=d)[["gap", "lo", "hi", "excludes_zero", "direction", "signal_b", "estimator",
                                    *[a for a in axes if a != "estimator"]]]
    out = out.sort_values("gap", kind="stable").reset_index(drop=True)
    return out.assign(rank=np.arange(len(out)))[["rank", *out.columns]]
