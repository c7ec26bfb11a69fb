"""The specification curve of each conclusion (``results/verdicts`` and ``results/gaps``).

One figure per conclusion of ``results/verdicts`` (analysis/verdicts.py), after Simonsohn, Simmons and Nelson,
"Specification curve analysis", Nature Human Behaviour 4, 1208-1214 (2020):

* top panel: every setting's gap ``metric(A) - metric(B)`` with its paired bootstrap interval, sorted; filled
  markers: the interval excludes 0; colour: the side the point estimate favours;
* bottom panel: a grid of dots marking which value of each varying axis (model, dataset, rule, context,
  aggregation, ECE estimator, ...) the setting above it used.
"""

from __future__ import annotations

import re
from dataclasses import replace

import numpy as np

from confgrid.analysis.verdicts import Conclusion, specification_curve

from .registry import Drawn, FigureOptions, new_figure, register_figure
from .run_tables import RunTables

__all__ = ["specification_curve_figure", "MAX_CURVES"]

#: At most this many conclusions get a figure (in the order of results/verdicts); the rest are in the tables.
MAX_CURVES = 24
_A, _B, _NEITHER = "#1f77b4", "#d62728", "#7f7f7f"


def _stem(c: Conclusion, taken: set[str]) -> str:
    """A file stem of the conclusion (characters outside ``[A-Za-z0-9_.-]`` to ``_``), ending in the view of a
    model-vs-model conclusion (``spec_curve_large_vs_small_ece_da``); a stem two conclusions would share
    (``p_true+isotonic`` and ``p_true_isotonic``) gets ``_2``, ``_3`` ... in table order."""
    view = f"_{c.view}" if c.view else ""
    stem = "spec_curve_" + re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{c.signal_a}_vs_{c.signal_b}_{c.metric}{view}")
    name, k = stem, 1
    while name in taken:
        k += 1
        name = f"{stem}_{k}"
    taken.add(name)
    return name


@register_figure("specification_curve", needs=("verdicts", "gaps"),
                 title="Specification curves: every setting of each conclusion (Simonsohn et al. 2020)")
def specification_curve_figure(tables: RunTables, opts: FigureOptions) -> list[Drawn]:
    """One figure per conclusion (at most :data:`MAX_CURVES`): the sorted gaps with their intervals over the axis
    values each setting used."""
    from matplotlib.gridspec import GridSpec

    verdicts, gaps = tables.get("verdicts"), tables.get("gaps")
    out, taken = [], set()
    for v in verdicts.head(MAX_CURVES).itertuples(index=False):
        view = "" if "view" not in verdicts.columns or v.view != v.view else str(v.view or "")
        c = Conclusion(str(v.signal_a), str(v.signal_b), str(v.metric), view)
        in_view = f" ({view} view)" if view else ""
        d = specification_curve(gaps, c)
        if d.empty:
            continue
        axes = [a for a in d.columns if a not in ("rank", "gap", "lo", "hi", "excludes_zero", "direction",
                                                  "signal_b") and d[a].astype(str).nunique() > 1]
        labels = [(a, val) for a in axes for val in dict.fromkeys(d[a].astype(str))]
        rows_px = max(len(labels), 1) * 14 + 40
        fig = new_figure(opts if opts.height_px is not None else
                         replace(opts, height_px=opts.panel_px + rows_px + 60))
        grid = GridSpec(2, 1, figure=fig, height_ratios=[opts.panel_px, rows_px])
        top, bottom = fig.add_subplot(grid[0]), fig.add_subplot(grid[1])
        x = d["rank"].to_numpy(int)
        g = d["gap"].to_numpy(float)
        colour = np.where(d["direction"] == 1, _A, np.where(d["direction"] == -1, _B, _NEITHER))
        err = np.vstack([g - d["lo"].to_numpy(float), d["hi"].to_numpy(float) - g])
        for col in (_A, _B, _NEITHER):
            m = colour == col
            if m.any():
                top.errorbar(x[m], g[m], yerr=err[:, m], fmt="none", ecolor=col, elinewidth=0.8, alpha=0.6)
        ex = d["excludes_zero"].to_numpy(bool)
        top.scatter(x[ex], g[ex], c=colour[ex], s=12, zorder=3)
        top.scatter(x[~ex], g[~ex], facecolors="white", edgecolors=colour[~ex], s=12, zorder=3)
        top.axhline(0, color="grey", linewidth=0.8)
        top.set_ylabel(f"{v.metric}({c.signal_a}) - {v.metric}({c.signal_b})", fontsize=8)
        top.set_xticks([])
        bottom.xaxis.get_major_locator().set_params(integer=True)  # settings are counted, not measured
        top.set_title(f"{c.signal_a} vs {c.signal_b}{in_view} on {v.metric}: {v.verdict} (A better in "
                      f"{float(v.share_a_better):.0%} of {int(v.n_settings)} settings; flips most with "
                      f"{v.flip_axis or 'no single axis'}); blue favours {c.signal_a}, red {c.signal_b}, filled: "
                      "interval excludes 0", fontsize=8)
        ypos = {lab: k for k, lab in enumerate(labels)}
        for a in axes:
            vals = d[a].astype(str).to_numpy()
            bottom.scatter(x, [ypos[(a, val)] for val in vals], s=6, color="black")
        bottom.set_yticks(range(len(labels)), [f"{a}: {val}" for a, val in labels], fontsize=6)
        bottom.set_ylim(len(labels) - 0.5, -0.5)
        bottom.set_xlim(top.get_xlim())
        bottom.set_xlabel("settings, sorted by the gap", fontsize=8)
        data = d.assign(signal_a=c.signal_a, conclusion_metric=c.metric)
        out.append(Drawn(_stem(c, taken), fig, f"Specification curve of '{c.signal_a} better than {c.signal_b}'"
                         f"{in_view} on {v.metric}: every setting's gap with its paired bootstrap interval, sorted "
                         "(top), and the axis values of each setting (bottom); Simonsohn, Simmons and Nelson (2020).",
                         data.assign(view=view) if view else data))
    left = len(verdicts) - MAX_CURVES
    if left > 0 and out:  # say which conclusions have no figure, never drop them silently
        rest = "; ".join(f"{r.signal_a} vs {r.signal_b} on {r.metric}"
                         + (f" ({r.view} view)" if "view" in verdicts.columns and r.view == r.view and r.view else "")
                         for r in verdicts.iloc[MAX_CURVES:].itertuples(index=False))
        last = out[-1]
        out[-1] = replace(last, caption=f"{last.caption} Only the first {MAX_CURVES} of the {len(verdicts)} "
                                        f"conclusions of results/verdicts.csv are drawn; without a figure: {rest}.")
    return out
