"""Calibration transfer between scoring contexts (study 000, Appendix G).

A calibration map (isotonic regression or Platt scaling) is fitted on the token scores of one context and applied to
the token scores of the **same answers** in another context. With 5-fold cross-fitting (fit on four folds, predict the
fifth) repeated over 10 random splits, the penalty of a direction ``A -> B`` in one split is

``penalty = Brier(map fitted on A's scores, applied to B's scores)
- Brier(map fitted on B's scores, applied to B's scores)``

both on the same out-of-fold predictions of the same folds; a positive penalty means the map does not carry over.

The recalibration maps
----------------------
* ``"isotonic"``: ``sklearn.isotonic.IsotonicRegression(y_min=0, y_max=1, increasing=True, out_of_bounds="clip")``
  on the raw score.
* ``"platt"``: ``sklearn.linear_model.LogisticRegression(C=1e4, solver="newton-cg", max_iter=1000)`` on
  ``logit(clip(score, eps, 1 - eps))`` with ``eps = 1e-6`` (:data:`PLATT_EPS`); the large finite ``C`` is practically
  unpenalized but keeps the fit finite on a separable fold.

A training fold with only one class gets the constant map "mean accuracy of the training fold" for both methods.

Splits: split ``k`` permutes the items with ``np.random.default_rng(np.random.SeedSequence([seed, k])).permutation(n)``
and cuts the permutation into ``n_folds`` folds with ``np.array_split``.
"""

from __future__ import annotations

import warnings
from typing import Sequence

import numpy as np
import pandas as pd

from .metrics import validate_inputs

__all__ = ["METHODS", "PLATT_EPS", "fit_map", "cross_fit", "transfer_penalties", "summarize_transfer"]

METHODS = ("isotonic", "platt")
#: scores are clipped to [eps, 1 - eps] before the logit of Platt scaling
PLATT_EPS = 1e-6
PLATT_C = 1e4


def _logit(s: np.ndarray) -> np.ndarray:
    s = np.clip(s, PLATT_EPS, 1.0 - PLATT_EPS)
    return np.log(s) - np.log1p(-s)


def fit_map(method: str, scores, correct):
    """Fit a calibration map; return ``predict(scores) -> probabilities``.

    Parameters
    ----------
    method : {"isotonic", "platt"}
    scores : ndarray of shape (n_train,)
        Token scores in ``[0, 1]``.
    correct : ndarray of shape (n_train,)
        Binary correctness.

    Returns
    -------
    callable
        Maps an array of scores to calibrated probabilities in ``[0, 1]``. With a single class in ``correct`` it
        returns the constant ``mean(correct)``.
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {list(METHODS)}, got {method!r}")
    s = np.asarray(scores, dtype=np.float64)
    y = np.asarray(correct, dtype=np.float64)
    if y.min() == y.max():
        const = float(y.mean())
        return lambda x: np.full(np.shape(x), const)
    if method == "isotonic":
        from sklearn.isotonic import IsotonicRegression  # lazy: scikit-learn takes about a second to import

        iso = IsotonicRegression(y_min=0.0, y_max=1.0, increasing=True, out_of_bounds="clip").fit(s, y)
        return lambda x: iso.predict(np.asarray(x, dtype=np.float64))
    from sklearn.linear_model import LogisticRegression  # lazy: as above

    lr = LogisticRegression(C=PLATT_C, solver="newton-cg", max_iter=1000)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", category=UserWarning)
        lr.fit(_logit(s)[:, None], y.astype(int))
    return lambda x: lr.predict_proba(_logit(np.asarray(x, dtype=np.float64))[:, None])[:, 1]


def _folds(n: int, n_folds: int, seed: int, split: int) -> list[np.ndarray]:
    perm = np.random.default_rng(np.random.SeedSequence([int(seed), int(split)])).permutation(n)
    return np.array_split(perm, n_folds)


def cross_fit(method: str, fit_scores, apply_scores, correct, folds: Sequence[np.ndarray]) -> np.ndarray:
    """Out-of-fold predictions (n,): fit on the other folds' ``fit_scores``, apply to the fold's ``apply_scores``."""
    fit_scores = np.asarray(fit_scores, dtype=np.float64)
    apply_scores = np.asarray(apply_scores, dtype=np.float64)
    correct = np.asarray(correct, dtype=np.float64)
    pred = np.full(correct.size, np.nan)
    for k, test in enumerate(folds):
        train = np.concatenate([f for j, f in enumerate(folds) if j != k])
        pred[test] = fit_map(method, fit_scores[train], correct[train])(apply_scores[test])
    return pred


def _check(scores_a, scores_b, correct, n_folds):
    a, y = validate_inputs(scores_a, correct)
    b, _ = validate_inputs(scores_b, correct)
    if not (np.isfinite(a).all() and np.isfinite(b).all() and np.isfinite(y).all()):
        raise ValueError("scores and correct must be finite for calibration transfer")
    if not np.isin(y, (0.0, 1.0)).all():
        raise ValueError("correct must be binary {0, 1} for calibration transfer")
    if isinstance(n_folds, bool) or int(n_folds) != n_folds or n_folds < 2:
        raise ValueError(f"n_folds must be an integer >= 2, got {n_folds!r}")
    if a.size < n_folds:
        raise ValueError(f"calibration transfer needs at least n_folds = {n_folds} answers, got n = {a.size}")
    return a, b, y


def transfer_penalties(
    scores_a,
    scores_b,
    correct,
    contexts: tuple[str, str] = ("A", "B"),
    methods: Sequence[str] = METHODS,
    n_folds: int = 5,
    n_splits: int = 10,
    seed: int = 0,
) -> pd.DataFrame:
    """Penalty of transferring a calibration map between two contexts.

    Parameters
    ----------
    scores_a, scores_b : array-like of shape (n_samples,)
        Token scores of the same answers in context A and context B, in ``[0, 1]``.
    correct : array-like of shape (n_samples,)
        Binary correctness.
    contexts : (str, str), default=("A", "B")
        Names used in the ``direction`` column (``"A->B"``: fitted on A, applied to B).
    methods : sequence of {"isotonic", "platt"}

    Returns
    -------
    DataFrame
        One row per (method, direction, split): ``method``, ``direction``, ``source``, ``target``, ``split``,
        ``brier_transferred`` (map fitted on the source context, applied to the target's scores), ``brier_native``
        (fitted and applied in the target context, same folds), ``penalty`` = transferred - native, ``n``.

    Raises
    ------
    ValueError
        ``n_samples < n_folds`` (at least 5 answers by default), graded or non-finite input, scores outside
        ``[0, 1]``, unknown method.

    Examples
    --------
    Identical scores in both contexts transfer perfectly:

    >>> rng = np.random.default_rng(0)
    >>> s = rng.random(50); y = (rng.random(50) < s).astype(int)
    >>> df = transfer_penalties(s, s, y, n_splits=2)
    >>> float(df["penalty"].abs().max())
    0.0
    """
    a, b, y = _check(scores_a, scores_b, correct, n_folds)
    for m in methods:
        if m not in METHODS:
            raise ValueError(f"method must be one of {list(METHODS)}, got {m!r}")
    if int(n_splits) < 1:
        raise ValueError(f"n_splits must be >= 1, got {n_splits!r}")
    ca, cb = contexts
    rows = []
    for split in range(int(n_splits)):
        folds = _folds(a.size, int(n_folds), seed, split)
        for method in methods:
            native = {"a": cross_fit(method, a, a, y, folds), "b": cross_fit(method, b, b, y, folds)}
            for src, tgt, s_src, s_tgt, name_src, name_tgt in (
                ("a", "b", a, b, ca, cb),
                ("b", "a", b, a, cb, ca),
            ):
                transferred = cross_fit(method, s_src, s_tgt, y, folds)
                bt = float(np.mean((transferred - y) ** 2))
                bn = float(np.mean((native[tgt] - y) ** 2))
                rows.append(dict(method=method, direction=f"{name_src}->{name_tgt}", source=name_src,
                                 target=name_tgt, split=split, brier_transferred=bt, brier_native=bn,
                                 penalty=bt - bn, n=int(a.size)))
    cols = ["method", "direction", "source", "target", "split", "brier_transferred", "brier_native",
            "penalty", "n"]
    return pd.DataFrame(rows, columns=cols)


def summarize_transfer(penalties: pd.DataFrame, by: Sequence[str] = ("method", "direction")) -> pd.DataFrame:
    """Mean penalty and the fraction of splits (rows) with a positive penalty.

    Parameters
    ----------
    penalties : DataFrame
        Output of :func:`transfer_penalties`, possibly concatenated over settings (add a ``setting`` column and
        include it in ``by`` to keep settings apart).

    Returns
    -------
    DataFrame
        The ``by`` columns, ``mean_penalty``, ``frac_positive``, ``min_penalty``, ``max_penalty``,
        ``mean_brier_transferred``, ``mean_brier_native``, ``n_rows``.
    """
    g = penalties.groupby(list(by), sort=False)
    out = g.agg(
        mean_penalty=("penalty", "mean"),
        frac_positive=("penalty", lambda p: float(np.mean(p > 0))),
        min_penalty=("penalty", "min"),
        max_penalty=("penalty", "max"),
        mean_brier_transferred=("brier_transferred", "mean"),
        mean_brier_native=("brier_native", "mean"),
        n_rows=("penalty", "size"),
    )
    return out.reset_index()
