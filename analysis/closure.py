"""The bin-closure diagnostic (issue 26): how many confidences sit on bin edges, and where the closure matters.

Pure pandas/numpy. A binned ECE depends on which bin a confidence exactly on an edge joins
(:data:`confgrid.analysis.metrics.CLOSURES`); stated confidences are mostly multiples of 5% (study 002), so
many of them do sit on the edges of 10 or 20 bins. Two outputs, written by ``confgrid run`` and
``confgrid analyze`` alike:

* ``results/edges``: per unit (setting) and signal, and per bin count in use, the share of the signal's
  confidences exactly on an edge ``k/B`` (``on_edge``, 0 and 1 included) and on an inner edge
  (``on_inner_edge``: the values the left and right closures put in different bins);
* ``results/closure``: every binned metric computed under two closures (``ece`` and ``ece_right``, ...)
  whose values lie further apart than the half-width of the left-closed interval, or a gap whose sign the
  closure reverses, with both values and a sentence such as "ECE depends on the bin closure here: 0.008
  (left) vs 0.042 (right); 88% of confidences lie on bin edges". ``confgrid show``, ``report.md`` and
  ``report.html`` print these sentences.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd

from .registry import METRICS, get_metric
from .signals import UNIT_COLUMNS

__all__ = ["EDGE_COLUMNS", "CLOSURE_COLUMNS", "edge_bins", "edge_rows", "edge_table", "closure_notes"]

EDGE_COLUMNS = [*UNIT_COLUMNS, "signal", "n_bins", "n", "on_edge", "on_inner_edge"]
CLOSURE_COLUMNS = [*UNIT_COLUMNS, "what", "signal", "metric", "closure", "left", "other", "lo", "hi",
                   "on_edge", "note"]


def edge_bins(metrics: Sequence[str], n_bins: int) -> list[int]:
    """The equal-width bin counts in use: ``n_bins`` (the ECE bins of the run) and the ``B`` of every
    ``ece_<B>`` metric asked for (any closure), ascending."""
    out = {int(n_bins)}
    for m in metrics:
        fam = get_metric(m).family
        if fam.startswith("ece_") and fam[4:].isdigit():
            out.add(int(fam[4:]))
    return sorted(out)


def edge_rows(confidence: np.ndarray, masks: np.ndarray, bins: Sequence[int]) -> dict[int, list[tuple[int, int]]]:
    """``{B: [(on_edge, on_inner_edge) per row]}`` of the confidences of each row of ``confidence`` (S, n)
    on its support ``masks`` (S, n) (:func:`confgrid.analysis.metrics.edge_counts`)."""
    from .metrics import edge_counts

    return {int(b): [edge_counts(confidence[s, masks[s]], int(b)) for s in range(confidence.shape[0])]
            for b in bins}


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
        for b, counts in sorted(getattr(u, "edges", {}).items()):
            for s, sig in enumerate(u.signals):
                n = u.n_of(s)
                on, inner = counts[s]
                rows.append({**u.labels, "signal": sig, "n_bins": int(b), "n": n,
                             "on_edge": on / n if n else np.nan, "on_inner_edge": inner / n if n else np.nan})
    return pd.DataFrame(rows, columns=EDGE_COLUMNS)


def _label(metric: str) -> str:
    fam = get_metric(metric).family
    return "ECE" if fam == "ece" else fam.replace("ece_equal_mass", "equal-mass ECE").replace("ece_", "ECE, B=")


def closure_notes(metrics: pd.DataFrame, gaps: pd.DataFrame, edges: pd.DataFrame, n_bins: int = 10
                  ) -> pd.DataFrame:
    """Where the declared closure changes a result: both values, and the share of confidences on edges.

    A metric row is flagged when a binned metric and its left-closed form were both computed for the same
    unit and signal and ``|other - left|`` exceeds the half-width ``(hi - lo) / 2`` of the left-closed
    interval; a gap row when the two closures' gaps have opposite signs (neither 0). Both are computed on the
    same resamples (they are metrics of one unit), so the comparison is paired.

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
        Columns :data:`CLOSURE_COLUMNS`; ``what`` is ``metric`` or ``gap``, ``signal`` the signal (a gap:
        ``a - b``), ``left`` / ``other`` the two values, ``lo`` / ``hi`` the left-closed interval (metrics),
        ``on_edge`` the signal's share on edges (a gap: the larger of the two), ``note`` the sentence.
    """
    out: list[dict] = []
    if metrics.empty:
        return pd.DataFrame(out, columns=CLOSURE_COLUMNS)
    keys = [c for c in UNIT_COLUMNS if c in metrics.columns]
    share = {}
    if not edges.empty:
        for r in edges.itertuples(index=False):
            share[(tuple(getattr(r, c) for c in keys), r.signal, int(r.n_bins))] = r.on_edge

    def bins_of(metric: str) -> int:
        fam = get_metric(metric).family
        return int(fam[4:]) if fam[4:].isdigit() else int(n_bins)

    def pct(x) -> str:
        return "" if x is None or not np.isfinite(x) else f"; {x:.0%} of confidences lie on bin edges"

    binned = [m for m in dict.fromkeys(metrics["metric"]) if m in METRICS and get_metric(m).closure not in
              (None, "left") and get_metric(m).family in set(metrics["metric"])]
    if binned:
        m = metrics.set_index([*keys, "signal", "metric"])
        for other in binned:
            fam, cl = get_metric(other).family, get_metric(other).closure
            a = m.xs(fam, level="metric")
            b = m.xs(other, level="metric").reindex(a.index)
            for idx, ra, rb in zip(a.index, a.itertuples(), b.itertuples(), strict=True):
                half = (ra.hi - ra.lo) / 2
                if not (np.isfinite(ra.point) and np.isfinite(rb.point) and np.isfinite(half)):
                    continue
                if abs(rb.point - ra.point) <= half:
                    continue
                unit, sig = idx[:-1], idx[-1]
                on = share.get((tuple(unit), sig, bins_of(fam)))
                out.append({**dict(zip(keys, unit)), "what": "metric", "signal": sig, "metric": fam, "closure": cl,
                            "left": float(ra.point), "other": float(rb.point), "lo": float(ra.lo),
                            "hi": float(ra.hi), "on_edge": on,
                            "note": f"{_label(fam)} depends on the bin closure here: {ra.point:.3f} (left) vs "
                                    f"{rb.point:.3f} ({cl}){pct(on)}"})
    if binned and not gaps.empty:
        g = gaps.set_index([*keys, "signal_a", "signal_b", "metric"])
        for other in binned:
            fam, cl = get_metric(other).family, get_metric(other).closure
            if fam not in set(gaps["metric"]):
                continue
            a = g.xs(fam, level="metric")
            b = g.xs(other, level="metric").reindex(a.index)
            for idx, ga, gb in zip(a.index, a["gap"], b["gap"], strict=True):
                if not (np.isfinite(ga) and np.isfinite(gb)) or ga * gb >= 0:
                    continue
                unit, sa, sb = idx[:-2], idx[-2], idx[-1]
                ons = [share.get((tuple(unit), s, bins_of(fam))) for s in (sa, sb)]
                ons = [x for x in ons if x is not None and np.isfinite(x)]
                on = max(ons) if ons else None
                out.append({**dict(zip(keys, unit)), "what": "gap", "signal": f"{sa} - {sb}", "metric": fam,
                            "closure": cl, "left": float(ga), "other": float(gb), "lo": np.nan, "hi": np.nan,
                            "on_edge": on,
                            "note": f"the {_label(fam)} gap {sa} - {sb} changes sign with the bin closure: "
                                    f"{ga:+.3f} (left) vs {gb:+.3f} ({cl}){pct(on)}"})
    return pd.DataFrame(out, columns=CLOSURE_COLUMNS)
