"""Reliability diagrams: one figure per setting, one panel per signal (the verbalized score and the token score
in each scoring context), bin counts below each panel.

Data: :func:`confgrid.analysis.figure_data.reliability_table` on the primary group of
``tables/signals.parquet`` with the run's ECE bins; the title's metric and interval come from
``results/metrics``. Empty bins are gaps (no bar, a break in the line, a zero count), never dropped.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
from confgrid.analysis.figure_data import reliability_table, reliability_titles, select_group, smooth_curve
from confgrid.analysis.registry import METRICS, expand_binned
from confgrid.analysis.signals import analyzed
from confgrid.flows.evaluate.outputs import fmt_interval

from .registry import Drawn, FigureOptions, grid_shape, new_figure, register_figure
from .run_tables import RunTables

__all__ = ["reliability_figures", "method_reliability_figures", "draw_reliability_panel", "file_stem",
           "RELIABILITY_FAMILY"]

RELIABILITY_FAMILY = "reliability"


def file_stem(*parts: str) -> str:
    """A file name from labels: every run of characters outside ``[A-Za-z0-9_.-]`` becomes ``_``."""
    return "__".join(re.sub(r"[^A-Za-z0-9_.-]+", "_", p).strip("_") for p in parts)


def draw_reliability_panel(ax, ax_counts, rows: pd.DataFrame, title: str, smooth: dict | None = None,
                           midpoint: bool = False) -> None:
    """Draw one reliability diagram from its bins (one diagram's rows of
    :func:`~confgrid.analysis.figure_data.reliability_table`): accuracy against confidence on ``ax``, answers per
    bin on ``ax_counts``; ``smooth``: a :func:`~confgrid.analysis.figure_data.smooth_curve` drawn as a line;
    ``midpoint``: the rows' ``bin_confidence`` is the bins' midpoints (the legend says so)."""
    lo, hi = rows["bin_lo"].to_numpy(float), rows["bin_hi"].to_numpy(float)
    what = "bin_confidence" if "bin_confidence" in rows.columns else "mean_confidence"
    acc, conf = rows["accuracy"].to_numpy(float), rows[what].to_numpy(float)
    counts = rows["count"].to_numpy(np.int64)
    nz = counts > 0
    ax.plot([0, 1], [0, 1], linestyle="--", color="grey", linewidth=1, label="perfect calibration")
    ax.bar(lo[nz], acc[nz], width=(hi - lo)[nz], align="edge", color="#4c72b0", alpha=0.55, edgecolor="black",
           linewidth=0.6, label="accuracy per bin", gid="accuracy_bars")
    # the line breaks at empty bins (NaN), so a gap stays a gap
    ax.plot(conf, acc, "o-", color="black", markersize=3, linewidth=0.8,
            label="bin midpoint, accuracy" if midpoint else "mean confidence, accuracy")
    if smooth is not None:
        ax.plot(smooth["mesh"], smooth["mu"], color="#dd8452", linewidth=1.5,
                label=f"smooth (smECE {smooth['smece']:.3f})")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_ylabel("accuracy")
    ax.set_title(title, fontsize=9)
    ax.tick_params(labelbottom=False)
    ax_counts.bar(lo, counts, width=hi - lo, align="edge", color="grey", edgecolor="black", linewidth=0.5,
                  gid="count_bars")
    ax_counts.set_xlim(0, 1)
    ax_counts.set_xlabel("confidence")
    ax_counts.set_ylabel("count")


def _title_metric(metric: str, tables: RunTables) -> str:
    """The titles' metric under the closure and bin confidence of the drawn bins (``ece`` -> ``ece_right`` for a
    right-closed run, ``ece_midpoint`` for a run of bin midpoints)."""
    if metric in METRICS and METRICS.get(metric).closure is not None:
        return expand_binned([metric], [tables.closure], [tables.bin_confidence])[0]
    return metric


def _per_setting(sig: pd.DataFrame, tables: RunTables, opts: FigureOptions, titles: dict, stem: str,
                 what: str) -> list[Drawn]:
    """One figure per setting of a long signal table (``RELIABILITY_KEYS``, confidence, correct): a panel per
    signal with its bins, counts and the ``titles`` metric."""
    rel = reliability_table(sig, n_bins=tables.n_bins, closure=tables.closure, bin_confidence=tables.bin_confidence)
    out = []
    for setting, rs in rel.groupby("setting", sort=False):
        names = list(dict.fromkeys(rs["signal"]))
        signals = sorted(names, key=lambda s: (s != "verbalized", names.index(s)))  # verbalized first
        nrows, ncols = grid_shape(len(signals))
        fig = new_figure(opts, nrows)
        gs = fig.add_gridspec(2 * nrows, ncols, height_ratios=[3, 1] * nrows)
        for i, s in enumerate(signals):
            r, c = divmod(i, ncols)
            ax = fig.add_subplot(gs[2 * r, c])
            axc = fig.add_subplot(gs[2 * r + 1, c], sharex=ax)
            rows = rs[rs["signal"] == s]
            ctx = rows["context"].iloc[0]
            label = s if not ctx else f"{s} (context {ctx})"
            n = int(rows["count"].sum())
            m = titles.get((setting, s))
            title = f"{label}\n{opts.metric.upper()} {fmt_interval(*m)}, n = {n}" if m else f"{label}\nn = {n}"
            smooth = None
            if opts.smooth and n:
                one = sig[(sig["setting"] == setting) & (sig["signal"] == s)]
                smooth = smooth_curve(one["confidence"], one["correct"])
            draw_reliability_panel(ax, axc, rows, title, smooth, midpoint=tables.bin_confidence == "midpoint")
            if i == 0:
                ax.legend(fontsize=7, loc="upper left")
        fig.suptitle(f"{setting}: reliability of {what}, {tables.n_bins} equal-width bins", fontsize=10)
        out.append(Drawn(file_stem(stem, *str(setting).split("/", 1)), fig,
                         f"Reliability diagrams of {setting} ({what}): bin accuracy against bin confidence (diagonal: "
                         "perfect calibration), answers per bin below; empty bins are gaps. Titles: "
                         f"{opts.metric} with its {tables.level:.0%} paired bootstrap interval.",
                         rs.reset_index(drop=True)))
    return out


def _analyzed(tables: RunTables, answer: bool) -> pd.DataFrame:
    """The rows of ``tables/signals`` that entered the metrics in the primary group, with ``correct`` = target:
    the answer's signals (verbalized and token scores) or the confidence methods'."""
    sig = tables.get("signals")
    if sig.empty:
        return sig
    sig = select_group(analyzed(sig), tables.primary).rename(columns={"target": "correct"})
    is_answer = sig["kind"].isin(["verbalized", "token"])
    return sig[is_answer if answer else ~is_answer].reset_index(drop=True)


@register_figure(RELIABILITY_FAMILY, needs=("signals",), title="Reliability diagrams")
def reliability_figures(tables: RunTables, opts: FigureOptions) -> list[Drawn]:
    """One figure per setting of the primary group: a reliability diagram per signal (verbalized, then the token
    score of each scoring context), titled with ``opts.metric`` and its interval from ``results/metrics``."""
    p = tables.primary
    titles = reliability_titles(select_group(tables.get("metrics"), p), _title_metric(opts.metric, tables))
    what = f"answer set {p.get('answer_set')}, rule {p.get('rule')}, aggregation {p.get('aggregation')}"
    return _per_setting(_analyzed(tables, answer=True), tables, opts, titles, "reliability", what)


@register_figure("method_reliability", needs=("signals", "methods"),
                 title="Reliability diagrams of the confidence methods")
def method_reliability_figures(tables: RunTables, opts: FigureOptions) -> list[Drawn]:
    """One figure per setting: a reliability diagram per confidence method signal (its rows of the one signal
    table, each graded under its method's rule, on its own items), titled from ``results/metrics``."""
    sig = _analyzed(tables, answer=False)
    if sig.empty:
        return []
    sig = sig.assign(signal=sig["signal"] + " (rule " + sig["target_rule"] + ")", context="", aggregation="")
    met = select_group(tables.get("metrics"), tables.primary)
    if len(met):
        met = met.assign(signal=met["signal"] + " (rule " + met["target_rule"] + ")")
    return _per_setting(sig, tables, opts, reliability_titles(met, _title_metric(opts.metric, tables)), "reliability_methods",
                        "the confidence methods")
