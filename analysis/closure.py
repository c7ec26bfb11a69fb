"""The bin-closure diagnostic: how many confidences sit on bin edges, and where the closure matters.

Pure pandas/numpy. A binned ECE depends on which bin a confidence exactly on an edge joins
(:data:`confgrid.analysis.metrics.CLOSURES`); stated confidences are mostly multiples of 5% (study 002), so many of
them do sit on the edges of 10 or 20 bins. Two outputs, written by ``confgrid run`` and ``confgrid analyze`` alike:

* ``results/edges``: per unit (setting) and signal, and per edge set in use (a bin count and its scheme:
  ``width`` bins have edges ``k/B``, ``centred`` bins ``(k - 1/2)/(B - 1)``; analysis/binning.py), the share of
  the signal's confidences exactly on an edge (``on_edge``, 0 and 1 included) and on an inner edge
  (``on_inner_edge``: the values the left and right closures put in different bins);
* ``results/closure``: every binned metric or gap that the binning moves away from its reference (:func:`reference_of`,
  :func:`closure_notes`), with both values and a sentence ("ECE depends on the bin closure here: 0.008 (left) vs
  0.042 (right); 88% of confidences lie on bin edges") that ``confgrid show`` and the reports print.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd

from .binning import edge_counts_of
from .registry import METRICS, get_metric
from .signals import UNIT_COLUMNS

__all__ = ["EDGE_COLUMNS", "CLOSURE_COLUMNS", "edge_bins", "edge_rows", "edge_table", "closure_notes", "reference_of"]

EDGE_COLUMNS = [*UNIT_COLUMNS, "signal", "n_bins", "n", "on_edge", "on_inner_edge", "scheme"]
CLOSURE_COLUMNS = [*UNIT_COLUMNS, "what", "signal", "metric", "closure", "left", "other", "lo", "hi",
                   "on_edge", "note", "other_metric"]


def edge_bins(metrics: Sequence[str], n_bins: int) -> list[tuple[int, str]]:
    """The edge sets in use, ``(B, scheme)``: ``(n_bins, "width")`` (the ECE bins of the run) and the bins of every
    fixed-edge binned metric asked for (``ece_<B>`` in any closure, a convention, ``ece_<B>_centred``); the
    equal-width sets first, each by ascending ``B``."""
    out = {(int(n_bins), "width")}
    for m in metrics:
        b = get_metric(m).binning
        if b is not None and b.scheme != "mass":
            out.add((b.bins(int(n_bins)), b.scheme))
    return sorted(out, key=lambda k: (k[1] != "width", k[0]))


def edge_rows(confidence: np.ndarray, masks: np.ndarray, bins: Sequence[tuple[int, str]]
              ) -> dict[tuple[int, str], list[tuple[int, int]]]:
    """``{(B, scheme): [(on_edge, on_inner_edge) per row]}`` of the confidences of each row of ``confidence`` (S, n)
    on its support ``masks`` (S, n) (:func:`confgrid.analysis.binning.edge_counts_of`)."""
    return {(int(b), sc): [edge_counts_of(confidence[s, masks[s]], int(b), sc) for s in range(confidence.shape[0])]
            for b, sc in bins}


def edge_table(units) -> pd.DataFrame:
    """``results/edges`` of planned units (:class:`~confgrid.analysis.evaluation.UnitPlan` with ``edges``).

    Returns
    -------
    DataFrame
        Columns :data:`EDGE_COLUMNS`: ``n`` the signal's items, ``on_edge`` / ``on_inner_edge`` shares in
        ``[0, 1]`` (NaN for a signal without items).
    """
    rows = []
    for u in units:
        for (b, scheme), counts in sorted(getattr(u, "edges", {}).items(), key=lambda kv: (kv[0][1] != "width",
                                                                                         kv[0][0])):
            for s, sig in enumerate(u.signals):
                n = u.n_of(s)
                on, inner = counts[s]
                rows.append({**u.labels, "signal": sig, "n_bins": int(b), "n": n,
                             "on_edge": on / n if n else np.nan, "on_inner_edge": inner / n if n else np.nan,
                             "scheme": scheme})
    return pd.DataFrame(rows, columns=EDGE_COLUMNS)


def _label(metric: str) -> str:
    """How a note names a reference estimator: ``ECE`` for ``ece``, else ``ECE (ece_15)``."""
    return "ECE" if metric == "ece" else f"ECE ({metric})"


def reference_of(metric: str) -> str | None:
    """The metric a binned estimator is compared with in ``results/closure``: its bins left-closed with the mean bin
    confidence (``ece_15`` for ``ece_15_right_midpoint``), ``ece`` for a published convention; None for a reference
    itself and a metric without bins."""
    info = get_metric(metric)
    if info.binning is None:
        return None
    ref = info.family
    return None if ref == info.name else ref


def _differs(metric: str, n_bins: int) -> tuple[str, str, bool]:
    """What sets ``metric`` apart from its reference: (the words of the note, how the other value is tagged, whether
    its closure differs, so that the share of confidences on an inner edge matters)."""
    info = get_metric(metric)
    b, ref = info.binning, get_metric(reference_of(metric)).binning
    parts = []
    if b.bins(n_bins) != ref.bins(n_bins):
        parts.append(f"{b.bins(n_bins)} bins")
    if b.scheme != ref.scheme:
        parts.append(f"{b.scheme} bins")
    if b.closure != ref.closure:
        parts.append(f"closure {b.closure}")
    if b.bin_confidence != ref.bin_confidence:
        parts.append("bin midpoints" if b.bin_confidence == "midpoint" else "mean bin confidence")
    closure = b.closure != ref.closure
    if info.convention:
        return f"convention ({', '.join(parts) or 'the same bins'})", metric, closure
    if parts == [f"closure {b.closure}"]:
        return "bin closure", b.closure, True
    if parts == ["bin midpoints"]:
        return "bin confidence", "midpoint", False
    return " and ".join(parts), metric, closure


def closure_notes(metrics: pd.DataFrame, gaps: pd.DataFrame, edges: pd.DataFrame, n_bins: int = 10
                  ) -> pd.DataFrame:
    """Where the declared binning (closure, bin confidence, convention) changes a result: both values, and the share
    of confidences on edges.

    A metric row is flagged when a binned metric and its reference (:func:`reference_of`: ``ece`` for
    ``ece_right``, ``ece_midpoint`` or ``ece_muller2026``) were both computed for the same unit and signal and
    ``|other - reference|`` exceeds the half-width ``(hi - lo) / 2`` of the reference's interval; a gap row when
    the two gaps have opposite signs (neither 0); both come from the unit's resamples, so the comparison is paired.

    Parameters
    ----------
    metrics, gaps : DataFrame
        ``results/metrics`` and ``results/gaps`` (columns of analysis/evaluation.py).
    edges : DataFrame
        ``results/edges`` (:func:`edge_table`).
    n_bins : int
        The bins of ``ece`` (the run's ``metrics.ece_bins``, analyze's ``--ece-bins``).

    Returns
    -------
    DataFrame
        Columns :data:`CLOSURE_COLUMNS`; ``what`` is ``metric`` or ``gap``, ``signal`` the signal (a gap: ``a - b``),
        ``metric`` the reference, ``other_metric`` the compared estimator and ``closure`` its closure, ``left`` /
        ``other`` the two values, ``lo`` / ``hi`` the reference's interval (metrics), ``on_edge`` the signal's share
        on the compared estimator's edges (a gap: the larger of the two), ``note`` the sentence: it names what sets
        the two apart (bins, scheme, closure, bin midpoints) and, where the closure is among them, the share of
        confidences on an inner bin edge (the only ones a closure moves).
    """
    out: list[dict] = []
    if metrics.empty:
        return pd.DataFrame(out, columns=CLOSURE_COLUMNS)
    keys = [c for c in UNIT_COLUMNS if c in metrics.columns]
    share = {}
    if not edges.empty:
        schemes = edges["scheme"] if "scheme" in edges.columns else pd.Series("width", index=edges.index)
        for r, sc in zip(edges.itertuples(index=False), schemes, strict=True):
            share[(tuple(getattr(r, c) for c in keys), r.signal, int(r.n_bins), sc)] = (r.on_edge, r.on_inner_edge)

    def edges_of(metric: str) -> tuple[int, str]:
        b = get_metric(metric).binning
        return (b.bins(int(n_bins)), "width" if b.scheme == "mass" else b.scheme)

    def pct(x, closure: bool) -> str:
        if not closure or x is None or not np.isfinite(x):
            return ""
        return f"; {x:.0%} of confidences lie on an inner bin edge"

    def on_edges(unit, sig, other) -> tuple:
        return share.get((tuple(unit), sig, *edges_of(other)), (None, None))

    computed = set(metrics["metric"])
    binned = [m for m in dict.fromkeys(metrics["metric"]) if m in METRICS and reference_of(m) in computed]
    if binned:
        m = metrics.set_index([*keys, "signal", "metric"])
        for other in binned:
            fam, cl = reference_of(other), get_metric(other).closure
            what, tag, by_closure = _differs(other, n_bins)
            ref_tag = "left" if what == "bin closure" else "mean" if what == "bin confidence" else fam
            a = m.xs(fam, level="metric")
            b = m.xs(other, level="metric").reindex(a.index)
            for idx, ra, rb in zip(a.index, a.itertuples(), b.itertuples(), strict=True):
                half = (ra.hi - ra.lo) / 2
                if not (np.isfinite(ra.point) and np.isfinite(rb.point) and np.isfinite(half)):
                    continue
                if abs(rb.point - ra.point) <= half:
                    continue
                unit, sig = idx[:-1], idx[-1]
                on, inner = on_edges(unit, sig, other)
                out.append({**dict(zip(keys, unit)), "what": "metric", "signal": sig, "metric": fam, "closure": cl,
                            "left": float(ra.point), "other": float(rb.point), "lo": float(ra.lo),
                            "hi": float(ra.hi), "on_edge": on,
                            "note": f"{_label(fam)} depends on the {what} here: {ra.point:.3f} ({ref_tag}) vs "
                                    f"{rb.point:.3f} ({tag}){pct(inner, by_closure)}", "other_metric": other})
    if binned and not gaps.empty:
        g = gaps.set_index([*keys, "signal_a", "signal_b", "metric"])
        for other in binned:
            fam, cl = reference_of(other), get_metric(other).closure
            what, tag, by_closure = _differs(other, n_bins)
            ref_tag = "left" if what == "bin closure" else "mean" if what == "bin confidence" else fam
            if fam not in set(gaps["metric"]) or other not in set(gaps["metric"]):
                continue
            a = g.xs(fam, level="metric")
            b = g.xs(other, level="metric").reindex(a.index)
            for idx, ga, gb in zip(a.index, a["gap"], b["gap"], strict=True):
                if not (np.isfinite(ga) and np.isfinite(gb)) or ga * gb >= 0:
                    continue
                unit, sa, sb = idx[:-2], idx[-2], idx[-1]
                pairs = [on_edges(unit, s, other) for s in (sa, sb)]
                ons = [x for x, _ in pairs if x is not None and np.isfinite(x)]
                inners = [x for _, x in pairs if x is not None and np.isfinite(x)]
                on, inner = (max(ons) if ons else None), (max(inners) if inners else None)
                out.append({**dict(zip(keys, unit)), "what": "gap", "signal": f"{sa} - {sb}", "metric": fam,
                            "closure": cl, "left": float(ga), "other": float(gb), "lo": np.nan, "hi": np.nan,
                            "on_edge": on,
                            "note": f"the {_label(fam)} gap {sa} - {sb} changes sign with the {what}: "
                                    f"{ga:+.3f} ({ref_tag}) vs {gb:+.3f} ({tag}){pct(inner, by_closure)}",
                            "other_metric": other})
    return pd.DataFrame(out, columns=CLOSURE_COLUMNS)
