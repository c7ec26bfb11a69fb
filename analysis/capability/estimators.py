"""Capability estimators fitted on a train split (study 004, sections 5.1-5.3 and Appendix Table 8).

* Isotonic recalibration: ``sklearn.isotonic.IsotonicRegression`` (increasing, outputs clipped to [0, 1], inputs
  outside the fitted range clipped) fitted on the train split's (estimate, target) pairs, applied to the eval split.
* Linear probe on hidden-state features: logistic regression on soft labels (each train item enters twice, labelled 1
  with weight mu and 0 with weight 1 - mu: the cross-entropy against the soft target), or ridge regression clipped to
  [0, 1]. The regularization strength and the preprocessing (standardized features or raw) are chosen by K-fold
  cross-validation inside the train split, by the Brier score against the soft target; the evaluation split is never
  looked at (the official code selects checkpoints on it for some datasets).
* The uniform random baseline: an estimate drawn from U(0, 1) has expected Brier ``1/3 - mu + mu^2`` against target mu.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np

from confgrid.analysis.capability.metrics import ece_to_target

__all__ = ["IsotonicFit", "fit_isotonic", "ProbeFit", "fit_probe", "PROBE_C_GRID", "PROBE_ALPHA_GRID",
           "uniform_brier", "uniform_expected_ece"]

#: Inverse regularization strengths tried for the logistic probe (C of scikit-learn).
PROBE_C_GRID = (1e-3, 1e-2, 1e-1, 1.0, 10.0)
#: Regularization strengths tried for the ridge probe (alpha of scikit-learn).
PROBE_ALPHA_GRID = (1e-2, 1e-1, 1.0, 10.0, 100.0)


@dataclass(frozen=True)
class IsotonicFit:
    """An isotonic map fitted on ``n_train`` pairs; ``predict`` maps estimates (n,) to [0, 1] (NaN stays NaN)."""

    model: object | None
    n_train: int

    def predict(self, p: np.ndarray) -> np.ndarray:
        p = np.asarray(p, dtype=np.float64)
        out = np.full(p.shape, np.nan)
        ok = ~np.isnan(p)
        if self.model is not None and ok.any():
            out[ok] = np.clip(self.model.predict(p[ok]), 0.0, 1.0)
        return out


def fit_isotonic(p_train: np.ndarray, mu_train: np.ndarray) -> IsotonicFit:
    """Isotonic regression of the target on the estimate over the train pairs where both are defined.

    Fewer than 2 defined pairs give a fit whose ``predict`` is all NaN (``n_train`` says how many there were).
    """
    from sklearn.isotonic import IsotonicRegression  # lazy: scikit-learn takes about a second to import

    p = np.asarray(p_train, dtype=np.float64)
    mu = np.asarray(mu_train, dtype=np.float64)
    ok = ~(np.isnan(p) | np.isnan(mu))
    if ok.sum() < 2:
        return IsotonicFit(None, int(ok.sum()))
    iso = IsotonicRegression(y_min=0.0, y_max=1.0, increasing=True, out_of_bounds="clip")
    iso.fit(p[ok], mu[ok])
    return IsotonicFit(iso, int(ok.sum()))


@dataclass(frozen=True)
class ProbeFit:
    """A linear probe: the chosen model, regularization and preprocessing, and the CV Brier of every candidate."""

    kind: str
    strength: float
    standardize: bool
    cv_brier: dict[str, float] = field(default_factory=dict)
    n_train: int = 0
    pipeline: object | None = None

    def predict(self, X: np.ndarray) -> np.ndarray:
        """Estimated expected accuracy in [0, 1] per row of ``X`` (n, d)."""
        X = np.asarray(X, dtype=np.float64)
        if self.pipeline is None or len(X) == 0:
            return np.full(len(X), np.nan)
        return _predict(self.pipeline, self.kind, X)


def _fit(kind: str, strength: float, standardize: bool, X: np.ndarray, mu: np.ndarray):
    """The probe fitted on (X, mu): a pipeline of (standardized or raw) features and the model, or ``("constant",
    mean)`` when every target is 0 or every target is 1."""
    from sklearn.linear_model import LogisticRegression, Ridge  # lazy: as above
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import FunctionTransformer, StandardScaler

    pipe = make_pipeline(StandardScaler() if standardize else FunctionTransformer(),
                         LogisticRegression(C=strength, max_iter=2000) if kind == "logistic" else Ridge(alpha=strength))
    if kind == "logistic":
        X2 = np.vstack([X, X])
        y2 = np.r_[np.ones(len(X)), np.zeros(len(X))]
        w2 = np.r_[mu, 1.0 - mu]
        keep = w2 > 0
        if len(np.unique(y2[keep])) < 2:  # every target 0 or every target 1: a constant probe
            return ("constant", float(mu.mean()))
        pipe.fit(X2[keep], y2[keep], **{pipe.steps[-1][0] + "__sample_weight": w2[keep]})
        return pipe
    pipe.fit(X, mu)
    return pipe


def _predict(pipe, kind: str, X: np.ndarray) -> np.ndarray:
    if isinstance(pipe, tuple):
        return np.full(len(X), pipe[1])
    if kind == "logistic":
        return pipe.predict_proba(X)[:, 1]
    return np.clip(pipe.predict(X), 0.0, 1.0)


def fit_probe(X: np.ndarray, mu: np.ndarray, kind: str = "logistic", folds: int = 5, seed: int = 0) -> ProbeFit:
    """Fit a linear probe of the soft target on features, choosing its regularization by CV in the train split.

    Parameters
    ----------
    X : ndarray (n, d), float: features of the train items (e.g. hidden states of the last prompt token)
    mu : ndarray (n,), float in [0, 1]: the train target (expected accuracy over k_train samples)
    kind : ``logistic`` (soft-label cross-entropy via sample weights) or ``ridge`` (clipped to [0, 1])
    folds : K of the K-fold CV (shuffled with ``seed``); fewer items than 2 * K lowers K, under 4 items no CV
    seed : seed of the fold assignment

    Returns
    -------
    ProbeFit, refitted on all train items with the candidate of the lowest mean CV Brier (ties: the stronger
    regularization, then standardized features).

    Raises
    ------
    ValueError
        ``kind`` unknown, shapes that differ, or targets outside [0, 1].
    """
    from sklearn.model_selection import KFold  # lazy: as above

    if kind not in ("logistic", "ridge"):
        raise ValueError(f"probe kind must be 'logistic' or 'ridge', got {kind!r}")
    X = np.asarray(X, dtype=np.float64)
    mu = np.asarray(mu, dtype=np.float64)
    if X.ndim != 2 or len(X) != len(mu):
        raise ValueError(f"features (n, d) and target (n,) must agree, got {X.shape} and {mu.shape}")
    if np.any((mu < 0) | (mu > 1)) or np.isnan(mu).any():
        raise ValueError("probe target must lie in [0, 1] with no NaN")
    n = len(X)
    if n == 0:
        return ProbeFit(kind, float("nan"), True, {}, 0, None)
    grid = PROBE_C_GRID if kind == "logistic" else PROBE_ALPHA_GRID
    # candidates ordered from the strongest regularization: a tie keeps the earlier one
    strengths = sorted(grid, reverse=(kind == "ridge"))
    cands = [(s, std) for s in strengths for std in (True, False)]
    k = min(int(folds), n // 2)
    cv: dict[str, float] = {}
    if k >= 2:
        splits = list(KFold(n_splits=k, shuffle=True, random_state=int(seed)).split(X))
        for s, std in cands:
            errs = []
            for tr, va in splits:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    pipe = _fit(kind, s, std, X[tr], mu[tr])
                    errs.append(float(np.mean((_predict(pipe, kind, X[va]) - mu[va]) ** 2)))
            cv[f"{s:g}/{'std' if std else 'raw'}"] = float(np.mean(errs))
        best = min(cands, key=lambda c: (cv[f"{c[0]:g}/{'std' if c[1] else 'raw'}"], cands.index(c)))
    else:
        best = cands[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pipe = _fit(kind, best[0], best[1], X, mu)
    return ProbeFit(kind, float(best[0]), bool(best[1]), cv, n, pipe)


def uniform_brier(mu: np.ndarray) -> np.ndarray:
    """Expected Brier per item of an estimate drawn from U(0, 1): ``1/3 - mu + mu^2`` (study 004 Table 3).

    ``mu`` (n,) in [0, 1]; returns (n,) float64 in [1/12, 1/3].
    """
    mu = np.asarray(mu, dtype=np.float64)
    return 1.0 / 3.0 - mu + mu**2


def uniform_expected_ece(mu: np.ndarray, draws: int = 200, seed: int = 0, n_bins: int = 10) -> float:
    """Mean ECE of ``draws`` seeded U(0, 1) estimates against ``mu`` (n,) (Monte Carlo; NaN for empty input)."""
    mu = np.asarray(mu, dtype=np.float64)
    mu = mu[~np.isnan(mu)]
    if len(mu) == 0:
        return float("nan")
    rng = np.random.default_rng(np.random.SeedSequence(int(seed)))
    return float(np.mean([ece_to_target(rng.random(len(mu)), mu, n_bins) for _ in range(int(draws))]))
