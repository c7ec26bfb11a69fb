"""Study 001's own paired bootstrap of the ACE gaps of one cell, vectorized over resamples: a test-only oracle.

This was ``confgrid.analysis.ace.bootstrap.cell_bootstrap``. The package computes the same gaps as units of the
one evaluator (analysis/ace/units.py, analysis/reweighting.py); tests/analysis/test_ace_bootstrap.py checks those against
this and this against a per-resample loop of the point-estimate functions, and benchmarks/ace_bench.py times
both. Independent of the evaluator's computation (per-item sums and one matrix product here, reweighted rows
there); it shares with it only the draws (:func:`confgrid.analysis.bootstrap.resample_counts`), the ECE bins
(:func:`confgrid.analysis.metrics.bin_indices`) and the cell's point estimate (strata, direction, IA parts).

Per cell, ``B`` (2,000) resamples of the cell's ``n`` questions are drawn
**jointly for the pair** as the count matrix ``W`` of shape ``(B, n)`` that the
paired bootstrap itself draws (:func:`confgrid.analysis.bootstrap.resample_counts`,
the one resampling stream), seeded per cell by
:func:`confgrid.analysis.resampling.setting_seed` of ``("A vs B",
"dataset|method", seed)``. Each
resample then

* recomputes the raw metrics of both models;
* rebuilds IA: an item's membership in ``D_IA`` (and its parts) depends on
  that item alone, so IA is the raw computation restricted to the member
  rows;
* re-estimates both models' outcome compositions and hence the DA weights
  ``q_k / p_{m,k}`` (and the support check, ``nan`` for a resample where a
  stratum with target mass has no row); the DA strata and the direction of
  the ``da`` view are those of the point estimate;
* keeps each question with its whole candidate pool for CA, and with its
  self-preference difference.

Vectorization: every statistic is a function of per-item sums. For each
model an item contributes, per (ECE bin, outcome stratum), ``z - c``; per
stratum, the count and ``(c - z)^2``. ``W @ contributions`` gives all the
sums of all resamples in one matrix product; the weighted ECE of a resample
is ``sum_bins |sum_k omega_k D_{bin,k}| / sum_k omega_k N_k`` with
``omega_k = q_k / p_k`` (1 for unweighted views) and the weighted Brier
``sum_k omega_k Q_k / sum_k omega_k N_k``, equal (to rounding) to
:func:`.views.weighted_ece` / :func:`.views.weighted_brier` on the
resample's rows. No Python loop runs over resamples.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
from threadpoolctl import threadpool_limits

from confgrid.analysis.ace.bootstrap import DEFAULT_RESAMPLES
from confgrid.analysis.bootstrap import resample_counts
from confgrid.analysis.ace.candidates import CACell, SelfPreferenceData
from confgrid.analysis.ace.frame import Cell
from confgrid.analysis.ace.views import DA_VIEWS, DEFAULT_OPTIONS, METRICS, CellViews, ViewOptions
from confgrid.analysis.metrics import bin_indices

__all__ = ["CellBootstrap", "cell_bootstrap"]


@dataclass(frozen=True)
class _Contrib:
    """Per-item sums of one model (or rater) for ``G`` groups and ``nb`` ECE bins."""

    D: np.ndarray  # (n, nb * G): z - c per (bin, group)
    Q: np.ndarray  # (n, G): (c - z)^2
    C: np.ndarray  # (n, G): rows
    G: int
    nb: int

    def masked(self, mask: np.ndarray) -> "_Contrib":
        m = mask.astype(np.float64)[:, None]
        return _Contrib(self.D * m, self.Q * m, self.C * m, self.G, self.nb)


def _contrib(conf, correct, group, G: int, n_bins: int, item=None, n_items: int | None = None) -> _Contrib:
    conf = np.asarray(conf, dtype=np.float64)
    z = np.asarray(correct, dtype=np.float64)
    item = np.arange(conf.size) if item is None else np.asarray(item, dtype=np.int64)
    n = conf.size if n_items is None else int(n_items)
    col = bin_indices(conf, n_bins) * G + group
    D = np.zeros((n, n_bins * G))
    Q = np.zeros((n, G))
    C = np.zeros((n, G))
    np.add.at(D, (item, col), z - conf)
    np.add.at(Q, (item, group), (conf - z) ** 2)
    np.add.at(C, (item, group), 1.0)
    return _Contrib(D, Q, C, G, n_bins)


@dataclass(frozen=True)
class _Sums:
    D: np.ndarray  # (B, nb, G)
    Q: np.ndarray  # (B, G)
    C: np.ndarray  # (B, G)

    @classmethod
    def many(cls, W: np.ndarray, contribs: Sequence[_Contrib]) -> list["_Sums"]:
        """The sums of every contribution over every resample: one product ``W @ [D Q C ...]``."""
        M = np.hstack([x for c in contribs for x in (c.D, c.Q, c.C)])
        with threadpool_limits(limits=1, user_api="blas"):  # small products: one thread is fastest
            S = W @ M
        out, j = [], 0
        for c in contribs:
            k = c.nb * c.G
            D, Q, C = S[:, j : j + k], S[:, j + k : j + k + c.G], S[:, j + k + c.G : j + k + 2 * c.G]
            out.append(cls(D.reshape(W.shape[0], c.nb, c.G), Q, C))
            j += k + 2 * c.G
        return out

    def composition(self) -> np.ndarray:
        """``p`` per resample, shape (B, G); ``nan`` rows for empty resamples."""
        tot = self.C.sum(axis=1, keepdims=True)
        with np.errstate(invalid="ignore", divide="ignore"):
            return self.C / tot

    def metric(self, name: str, omega: np.ndarray | None = None) -> np.ndarray:
        om = np.ones_like(self.C) if omega is None else omega
        with np.errstate(invalid="ignore", divide="ignore"):
            tot = (self.C * om).sum(axis=1)
            if name == "ece":
                num = np.abs((self.D * om[:, None, :]).sum(axis=2)).sum(axis=1)
            else:
                num = (self.Q * om).sum(axis=1)
            return np.where(tot > 0, num / np.where(tot > 0, tot, 1.0), np.nan)


def _omega(p_self: np.ndarray, q: np.ndarray) -> np.ndarray:
    """``q_k / p_k`` per resample; ``nan`` rows where a stratum with ``q_k > 0`` has ``p_k = 0``."""
    q = np.broadcast_to(q, p_self.shape)
    with np.errstate(invalid="ignore", divide="ignore"):
        om = np.where(p_self > 0, q / np.where(p_self > 0, p_self, 1.0), 0.0)
    bad = ((q > 0) & (p_self == 0)).any(axis=1) | ~np.isfinite(q).all(axis=1) | ~np.isfinite(p_self).all(axis=1)
    om[bad] = np.nan
    return om


@dataclass(frozen=True)
class CellBootstrap:
    """Resampled gaps of one cell.

    Attributes
    ----------
    seed, n_resamples : int
    gaps : dict (view, metric) -> ndarray of shape (B,)
        ``value_a - value_b`` per resample, ``nan`` where undefined.
    self_preference : dict rater -> ndarray of shape (B,)
        Mean ``own - other`` per resample.
    """

    seed: int
    n_resamples: int
    gaps: dict = field(default_factory=dict)
    self_preference: dict = field(default_factory=dict)


def cell_bootstrap(
    cell: Cell,
    point: CellViews,
    metrics: Sequence[str] = METRICS,
    views: Sequence[str] = ("ia", "da"),
    opts: ViewOptions = DEFAULT_OPTIONS,
    ca: CACell | None = None,
    self_pref: Sequence[SelfPreferenceData] = (),
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
) -> CellBootstrap:
    """Paired bootstrap of every view's gap in one cell.

    Parameters
    ----------
    cell : Cell
        ``n >= 1`` items.
    point : CellViews
        The point estimates (:func:`.views.cell_views`): its ``strata``,
        ``direction`` and which IA parts exist are reused.
    metrics : sequence of str
    views : sequence of str
        ``"ia"`` and/or ``"da"`` (``raw`` always; ``da_resample`` is random
        itself and not bootstrapped); CA when ``ca`` is given.
    opts : ViewOptions
    ca : CACell, optional
    self_pref : sequence of SelfPreferenceData
    n_resamples : int, default=2000
    seed : int
        The cell's seed (:func:`cell_seed`).

    Returns
    -------
    CellBootstrap
    """
    n, nb = cell.n, opts.n_bins
    W = resample_counts(n, n_resamples, seed)
    strata = point.strata
    ka, kb = strata.assign(cell.correct_a), strata.assign(cell.correct_b)
    base = [_contrib(cell.conf_a, cell.correct_a, ka, strata.size, nb),
            _contrib(cell.conf_b, cell.correct_b, kb, strata.size, nb)]
    contribs = {("raw", "a"): base[0], ("raw", "b"): base[1]}
    if "ia" in views:
        for view in sorted({v.view for v in point.values if v.view.startswith("ia")}):
            mask = point.ia.mask(view)
            contribs[(view, "a")], contribs[(view, "b")] = base[0].masked(mask), base[1].masked(mask)
    if ca is not None:
        zero = np.zeros(ca.n_pairs, dtype=np.int64)
        contribs[("ca", "a")] = _contrib(ca.signal_a, ca.label, zero, 1, nb, ca.item_index, n)
        contribs[("ca", "b")] = _contrib(ca.signal_b, ca.label, zero, 1, nb, ca.item_index, n)
    sums = dict(zip(contribs, _Sums.many(W, list(contribs.values()))))
    out: dict = {}
    for (view, side), sa in sums.items():
        if side == "a":
            for m in metrics:
                out[(view, m)] = sa.metric(m) - sums[(view, "b")].metric(m)
    if "da" in views:
        sa, sb = sums[("raw", "a")], sums[("raw", "b")]
        p_a, p_b = sa.composition(), sb.composition()
        if opts.target == "mean":
            q = 0.5 * (p_a + p_b)
        else:  # a declared accuracy: checked binary by the point estimate
            q = np.array([1.0 - float(opts.target), float(opts.target)])[None, :]
        om = {"da_a_to_b": (_omega(p_a, p_b), None), "da_b_to_a": (None, _omega(p_b, p_a)),
              "da_target": (_omega(p_a, q), _omega(p_b, q))}
        om["da"] = om["da_" + point.direction]
        for view in DA_VIEWS:
            oa, ob = om[view]
            for m in metrics:
                out[(view, m)] = sa.metric(m, oa) - sb.metric(m, ob)
    sp = {}
    for d in self_pref:
        Wd = W[:, d.item_index]
        with np.errstate(invalid="ignore", divide="ignore"):
            tot = Wd.sum(axis=1)
            sp[d.rater] = np.where(tot > 0, (Wd @ d.diff) / np.where(tot > 0, tot, 1.0), np.nan)
    return CellBootstrap(int(seed), int(n_resamples), out, sp)
