"""The hard-easy effect: overconfidence against difficulty (study 002, sections 4.5, 6 and Table 2).

Per answer ``i`` there is a stated confidence ``c_i`` in [0, 1], a score ``s_i`` in [0, 1] (correctness, or LifeEval's
true probability of the guess) and a difficulty ``d_i`` in [0, 1]. Overconfidence is ``c - s`` per answer and
``mean(c) - mean(s)`` over a group. The hard-easy effect is overconfidence rising with difficulty; study 002 measures
it as the OLS regression coefficient of per-answer overconfidence on difficulty.

Difficulty (study 002): ``1 - MAS`` of the item for LifeEval (metadata ``mas``, :mod:`confgrid.protocols.lifeeval`);
elsewhere ``1 -`` the accuracy of the item's group (:func:`group_difficulty`, groups from a metadata column such as
MMLU's subject). The second is computed from the same scores it is then regressed against, so part of the slope is
regression to the mean (study 002 section 1); LifeEval's difficulty is exogenous.

Pure numpy/scipy: 1-D float arrays in (shape ``(n,)``; lengths that differ, a non-1-D input or a finite value outside
[0, 1] raise ``ValueError``), typed records out. Undefined results (no rows, one row, a constant input, a non-finite
value) are NaN with a ``status`` saying why and an :class:`~confgrid.analysis.metrics.UndefinedMetricWarning`, never 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import scipy.stats

from confgrid.analysis.bootstrap import interval
from confgrid.analysis.resampling import DEFAULT_CHUNK_SIZE, chunk_indices, n_chunks
from confgrid.analysis.metrics import bin_indices, undefined

__all__ = [
    "Correlation",
    "DifficultyBin",
    "GroupOverconfidence",
    "HardEasySlope",
    "RoundedShare",
    "confidence_truth_correlation",
    "group_difficulty",
    "hard_easy_slope",
    "overconfidence_by_difficulty",
    "overconfidence_by_group",
    "rounded_share",
]


def _unit(x, name: str) -> np.ndarray:
    """``x`` as a 1-D float64 array whose finite values lie in [0, 1]; non-finite values are kept."""
    try:
        arr = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be numeric") from None
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D of shape (n,), got shape {arr.shape}")
    bad = np.isfinite(arr) & ((arr < 0.0) | (arr > 1.0))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"{name} must lie in [0, 1]; got {name}[{i}] = {float(arr[i])!r} "
                         f"({int(bad.sum())} value(s) out of range)")
    return arr


def _same_length(**arrays: np.ndarray) -> None:
    sizes = {k: v.shape[0] for k, v in arrays.items()}
    if len(set(sizes.values())) > 1:
        raise ValueError("inputs must have the same length; got " + ", ".join(f"{k} {n}" for k, n in sizes.items()))


def _three(confidence, score, difficulty) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    c, s, d = _unit(confidence, "confidence"), _unit(score, "score"), _unit(difficulty, "difficulty")
    _same_length(confidence=c, score=s, difficulty=d)
    return c, s, d


def _non_finite(*arrays: np.ndarray) -> bool:
    return any(not np.isfinite(a).all() for a in arrays)


# ----------------------------------------------------------------------------- tables


class GroupOverconfidence(NamedTuple):
    """Overconfidence of one group: ``mean_confidence - mean_score`` over its ``n`` answers (NaN if ``n == 0``)."""

    group: str
    n: int
    mean_confidence: float
    mean_score: float
    overconfidence: float


def overconfidence_by_group(confidence, score, groups) -> tuple[GroupOverconfidence, ...]:
    """Mean confidence, mean score and overconfidence per group (e.g. LifeEval's radius).

    Parameters
    ----------
    confidence, score : array_like of floats in [0, 1], shape (n,)
    groups : array_like, shape (n,)
        A label per answer (compared as ``str``).

    Returns
    -------
    tuple of GroupOverconfidence
        One per distinct label, in sorted order of the labels (numbers sort as numbers when every label is one). A
        non-finite value makes its group's means NaN.
    """
    c, s = _unit(confidence, "confidence"), _unit(score, "score")
    g = np.asarray(groups, dtype=object).reshape(-1)
    _same_length(confidence=c, score=s, groups=g)
    labels = [str(x) for x in g]
    uniq = sorted(set(labels))
    try:
        uniq = sorted(uniq, key=float)
    except ValueError:
        pass
    lab = np.array(labels, dtype=object)
    out = []
    for u in uniq:
        m = lab == u
        mc, ms = float(c[m].mean()), float(s[m].mean())
        out.append(GroupOverconfidence(u, int(m.sum()), mc, ms, mc - ms))
    return tuple(out)


class DifficultyBin(NamedTuple):
    """One difficulty bin ``[lo, hi)`` (the last also holds ``hi``) and its ``n`` answers; NaN means when empty."""

    lo: float
    hi: float
    n: int
    mean_difficulty: float
    mean_confidence: float
    mean_score: float
    overconfidence: float


def overconfidence_by_difficulty(confidence, score, difficulty,
                                 bins: int | Sequence[float] = 10) -> tuple[DifficultyBin, ...]:
    """Overconfidence per bin of difficulty.

    Parameters
    ----------
    confidence, score, difficulty : array_like of floats in [0, 1], shape (n,)
    bins : int or sequence of float, default 10
        An integer ``B``: equal-width bins ``[k/B, (k+1)/B)`` on [0, 1], the last also holding 1 (edges as in ECE,
        :func:`confgrid.analysis.metrics.bin_indices`). A sequence: strictly increasing edges ``e_0 < ... < e_K`` that
        contain every difficulty (bin ``k`` = ``[e_k, e_{k+1})``, the last closed); quantile bins are
        ``np.unique(np.quantile(difficulty, np.linspace(0, 1, 11)))``.

    Returns
    -------
    tuple of DifficultyBin
        Every bin in order, empty ones included (``n = 0``, NaN means).

    Raises
    ------
    ValueError
        Bad inputs, edges not strictly increasing or fewer than two, or a difficulty outside the edges.
    """
    c, s, d = _three(confidence, score, difficulty)
    if isinstance(bins, (int, np.integer)) and not isinstance(bins, bool):
        idx = bin_indices(d, int(bins))
        edges = np.arange(int(bins) + 1, dtype=np.float64) / int(bins)
    else:
        edges = np.asarray(bins, dtype=np.float64)
        if edges.ndim != 1 or edges.size < 2 or not np.all(np.diff(edges) > 0):
            raise ValueError(f"bins: expected an integer >= 1 or at least two strictly increasing edges; "
                             f"received {bins!r}")
        fin = d[np.isfinite(d)]
        out_of = fin[(fin < edges[0]) | (fin > edges[-1])]
        if out_of.size:
            raise ValueError(f"difficulty {float(out_of[0])!r} lies outside the bin edges "
                             f"[{edges[0]!r}, {edges[-1]!r}] ({out_of.size} value(s))")
        idx = np.clip(np.searchsorted(edges, d, side="right") - 1, 0, edges.size - 2)
    rows = []
    for k in range(edges.size - 1):
        m = idx == k
        n = int(m.sum())
        if n == 0:
            rows.append(DifficultyBin(float(edges[k]), float(edges[k + 1]), 0, *(float("nan"),) * 4))
            continue
        mc, ms = float(c[m].mean()), float(s[m].mean())
        rows.append(DifficultyBin(float(edges[k]), float(edges[k + 1]), n, float(d[m].mean()), mc, ms, mc - ms))
    return tuple(rows)


def group_difficulty(score, groups) -> np.ndarray:
    """Difficulty of each answer as ``1 -`` the mean score (accuracy) of its group.

    Parameters
    ----------
    score : array_like of floats in [0, 1], shape (n,)
        e.g. one model on one dataset; the answer's own row is part of its group's accuracy.
    groups : array_like, shape (n,)
        Group label per answer (a metadata column, e.g. MMLU's subject).

    Returns
    -------
    numpy.ndarray, shape (n,), float64
        In [0, 1]; NaN for every member of a group holding a non-finite score.
    """
    s = _unit(score, "score")
    g = np.asarray([str(x) for x in np.asarray(groups, dtype=object).reshape(-1)], dtype=object)
    _same_length(score=s, groups=g)
    out = np.empty_like(s)
    for u in set(g.tolist()):
        m = g == u
        out[m] = 1.0 - s[m].mean()
    return out


# ----------------------------------------------------------------------------- the slope


class HardEasySlope(NamedTuple):
    """OLS fit ``overconfidence = intercept + slope * difficulty`` with a bootstrap interval of the slope.

    ``lo``/``hi``: percentile interval at ``level`` over ``resamples`` paired resamples of the answers;
    ``n_undefined`` resamples whose difficulties were all equal are left out of it. ``status``: ``"ok"``,
    ``"no_rows"``, ``"one_row"``, ``"constant_difficulty"`` or ``"non_finite"`` (then every number is NaN).
    """

    slope: float
    intercept: float
    lo: float
    hi: float
    n: int
    resamples: int
    n_undefined: int
    level: float
    status: str


def _ols_rows(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Slope and intercept of each row of ``x`` (shape (b, n)) on ``y``; NaN where a row's ``x`` is constant."""
    mx = x.mean(axis=1, keepdims=True)
    my = y.mean(axis=1, keepdims=True)
    dx = x - mx
    sxx = np.einsum("ij,ij->i", dx, dx)
    sxy = np.einsum("ij,ij->i", dx, y - my)
    const = x.max(axis=1) == x.min(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        slope = np.where(const, np.nan, sxy / np.where(const, 1.0, sxx))
    return slope, my[:, 0] - slope * mx[:, 0]


def _weighted_ols_slopes(w: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """OLS slope of ``y`` on ``x`` (n,) on each resample of the counts ``w`` (b, n): the slope of the rows repeated
    ``w`` times; NaN where the drawn rows' ``x`` is constant (or none is drawn)."""
    tot = w.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        mx = (w @ x) / tot
        my = (w @ y) / tot
        dx = x[None, :] - mx[:, None]
        sxx = (w * dx * dx).sum(axis=1)
        sxy = (w * dx * (y[None, :] - my[:, None])).sum(axis=1)
        drawn = w > 0
        const = np.where(drawn, x, np.inf).min(axis=1) >= np.where(drawn, x, -np.inf).max(axis=1)
        return np.where(const | (tot == 0), np.nan, sxy / np.where(const | (tot == 0), 1.0, sxx))


def hard_easy_slope(confidence, score, difficulty, *, resamples: int = 10_000, seed: int = 0,
                    level: float = 0.95, chunk_size: int = DEFAULT_CHUNK_SIZE,
                    counts: np.ndarray | None = None) -> HardEasySlope:
    """The hard-easy coefficient: OLS slope of per-answer overconfidence ``c - s`` on difficulty.

    Study 002 Table 2 ("Hard-Easy": the regression coefficient between difficulty and overconfidence; difficulty
    ``1 - MAS`` for LifeEval). A positive slope: overconfidence rises with difficulty.

    Parameters
    ----------
    confidence, score, difficulty : array_like of floats in [0, 1], shape (n,)
    resamples : int, default 10000
        Paired bootstrap resamples of the ``n`` answers (0: no interval, NaN bounds).
    seed : int, default 0
        Seed of the index draws (:func:`confgrid.analysis.resampling.chunk_indices`: the draws of the metric bootstrap
        for the same seed and ``n``).
    level : float, default 0.95
        Level of the percentile interval (``np.nanpercentile``, linear), in (0, 1).
    chunk_size : int
        Resamples per chunk of draws (part of the seed convention; memory is ``O(chunk_size * n)``).
    counts : ndarray of shape (B, n), optional
        The resamples as multiplicities of the ``n`` answers instead of the seeded draws (``resamples`` and ``seed``
        are then ignored): a run passes its unit's own resamples restricted to these answers
        (:func:`confgrid.analysis.bootstrap.resample_counts`), so the slope's interval is paired with the unit's
        metrics; a resample's slope is the OLS slope of its rows repeated that many times.

    Returns
    -------
    HardEasySlope
        The point estimate equals ``scipy.stats.linregress(difficulty, c - s)``.

    Raises
    ------
    ValueError
        Bad inputs (lengths, ranges), ``resamples < 0``, ``level`` outside (0, 1).
    """
    c, s, d = _three(confidence, score, difficulty)
    if isinstance(resamples, bool) or not isinstance(resamples, (int, np.integer)) or resamples < 0:
        raise ValueError(f"resamples={resamples!r}: expected an integer >= 0")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level={level!r}: expected a value in (0, 1)")
    n = int(c.size)
    nan = float("nan")
    status = ("no_rows" if n == 0 else "non_finite" if _non_finite(c, s, d) else "one_row" if n == 1
              else "constant_difficulty" if d.max() == d.min() else "ok")
    if status != "ok":
        undefined("the hard-easy slope", {"no_rows": "no rows", "non_finite": "a non-finite value", "one_row": "one row",
                                          "constant_difficulty": "every difficulty is equal"}[status])
        return HardEasySlope(nan, nan, nan, nan, n, int(resamples), 0, float(level), status)
    o = c - s
    slope, intercept = _ols_rows(d[None, :], o[None, :])
    if counts is not None:
        w = np.asarray(counts, dtype=np.float64)
        if w.ndim != 2 or w.shape[1] != n or (w.size and (w.min() < 0 or not np.isfinite(w).all())):
            raise ValueError(f"counts must be finite multiplicities >= 0 of shape (B, {n}), got {w.shape}")
        boot = _weighted_ols_slopes(w, d, o)
    else:
        boot = np.empty(int(resamples))
        for k in range(n_chunks(int(resamples), chunk_size) if resamples else 0):
            idx = chunk_indices(n, int(resamples), int(seed), k, chunk_size)
            boot[k * chunk_size : k * chunk_size + idx.shape[0]] = _ols_rows(d[idx], o[idx])[0]
    n_undef = int(np.isnan(boot).sum())
    lo, hi = interval(boot, level) if boot.size and n_undef < boot.size else (nan, nan)
    return HardEasySlope(float(slope[0]), float(intercept[0]), float(lo), float(hi), n, int(boot.size), n_undef,
                         float(level), "ok")


# ----------------------------------------------------------------------------- stated confidence


class RoundedShare(NamedTuple):
    """``share`` = ``n_multiples / n`` of confidences that are multiples of ``step_percent``% (NaN when ``n == 0``)."""

    share: float
    n_multiples: int
    n: int
    step_percent: float
    status: str


def rounded_share(confidence, step_percent: float = 5.0) -> RoundedShare:
    """Share of stated confidences that are multiples of 5% (study 002 section 6, "Percentage of Rounded outputs").

    A confidence ``c`` counts when ``round(round(100 c, 6) mod step, 6)`` is 0 or ``step``: rounding to 6 decimals of
    a percentage absorbs float noise (``0.35`` is ``35.00000000000001`` percent) while ``0.351`` or ``0.349999`` do
    not count.

    Parameters
    ----------
    confidence : array_like of floats in [0, 1], shape (n,)
    step_percent : float, default 5.0
        Step in percentage points, > 0.

    Returns
    -------
    RoundedShare
        ``status`` ``"ok"``, ``"no_rows"`` or ``"non_finite"`` (share NaN, with a warning).
    """
    c = _unit(confidence, "confidence")
    if not step_percent > 0:
        raise ValueError(f"step_percent={step_percent!r}: expected a number > 0")
    if c.size == 0 or _non_finite(c):
        status = "no_rows" if c.size == 0 else "non_finite"
        undefined("the rounded share", "no rows" if c.size == 0 else "a non-finite confidence")
        return RoundedShare(float("nan"), 0, int(c.size), float(step_percent), status)
    rem = np.round(np.mod(np.round(100.0 * c, 6), step_percent), 6)
    hits = int(np.count_nonzero((rem == 0.0) | (rem == round(float(step_percent), 6))))
    return RoundedShare(hits / c.size, hits, int(c.size), float(step_percent), "ok")


class Correlation(NamedTuple):
    """Pearson and Spearman correlation (scipy.stats) with their two-sided p-values; NaN unless ``status == "ok"``.

    ``status``: ``"ok"``, ``"fewer_than_2_rows"``, ``"non_finite"``, ``"constant_confidence"`` or ``"constant_truth"``.
    """

    pearson: float
    pearson_p: float
    spearman: float
    spearman_p: float
    n: int
    status: str


def confidence_truth_correlation(confidence, truth) -> Correlation:
    """Correlation between stated confidence and the true probability of the answer (LifeEval, study 002 4.5).

    Parameters
    ----------
    confidence, truth : array_like, shape (n,)
        Stated probability and true probability (the ``lifeeval`` rule's score), floats in [0, 1].

    Returns
    -------
    Correlation
        ``scipy.stats.pearsonr`` and ``scipy.stats.spearmanr`` (ties get average ranks). Undefined (NaN, with a
        warning and the reason in ``status``) for fewer than 2 rows, a non-finite value, or a constant input.
    """
    c, t = _unit(confidence, "confidence"), _unit(truth, "truth")
    _same_length(confidence=c, truth=t)
    n = int(c.size)
    status = ("fewer_than_2_rows" if n < 2 else "non_finite" if _non_finite(c, t)
              else "constant_confidence" if c.max() == c.min() else "constant_truth" if t.max() == t.min() else "ok")
    if status != "ok":
        undefined("the confidence-truth correlation", status.replace("_", " "))
        nan = float("nan")
        return Correlation(nan, nan, nan, nan, n, status)
    p = scipy.stats.pearsonr(c, t)
    r = scipy.stats.spearmanr(c, t)
    return Correlation(float(p.statistic), float(p.pvalue), float(r.statistic), float(r.pvalue), n, "ok")
