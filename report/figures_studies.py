"""The studies' figures, each from the results table that holds its numbers (drawn only when the run wrote it; each
registration names its table and the study's figure or table it reproduces; the list: docs/guides/report.md)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
from confgrid.analysis.figure_data import (ablation_path, ace_quadrants, brier_accuracy, gap_intervals,
                                           overconfidence_bins, probe_differences, random_baselines, select_group)

from .registry import Drawn, FigureOptions, panels, register_figure
from .run_tables import RunTables

__all__ = ["gaps_figure", "ablation_figure", "probe_figure", "ace_quadrant_figure", "brier_accuracy_figure",
           "hard_easy_figure"]

#: matplotlib's tab20 order: ten colours, then their light shades (20 series before a colour repeats)
_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
           "#17becf", "#aec7e8", "#ffbb78", "#98df8a", "#ff9896", "#c5b0d5", "#c49c94", "#f7b6d2", "#c7c7c7",
           "#dbdb8d", "#9edae5")


def _metrics_in(df: pd.DataFrame) -> list[str]:
    return list(dict.fromkeys(df["metric"])) if "metric" in df else []


@register_figure("gaps", needs=("gaps",), title="The gap per setting and context (study 000 Figure 3)")
def gaps_figure(tables: RunTables, opts: FigureOptions) -> list[Drawn]:
    """One panel per metric: the gap of every setting (rows) in each context (markers), with its interval;
    filled markers: the interval excludes 0."""
    g = select_group(tables.get("gaps"), tables.primary)
    metrics = _metrics_in(g)
    if not metrics:
        return []
    settings = list(dict.fromkeys(g["setting"]))
    contexts = list(dict.fromkeys(gap_intervals(g, metrics[0])["label"]))  # token contexts, then methods
    fig, axes = panels(replace(opts, panel_px=max(opts.panel_px, 28 * len(settings) + 120)), metrics)
    data = []
    for i, (met, ax) in enumerate(axes):
        d = gap_intervals(g, met)
        data.append(d.assign(metric=met))
        y0 = {s: k for k, s in enumerate(settings)}
        for j, ctx in enumerate(contexts):
            dc = d[d["label"] == ctx]
            y = np.array([y0[s] for s in dc["setting"]]) + (j - (len(contexts) - 1) / 2) * 0.8 / max(len(contexts), 1)
            x = dc["gap"].to_numpy(float)
            err = np.vstack([x - dc["lo"].to_numpy(float), dc["hi"].to_numpy(float) - x])
            col = _COLORS[j % len(_COLORS)]
            ax.errorbar(x, y, xerr=err, fmt="none", ecolor=col, elinewidth=1, capsize=2)
            ex = dc["excludes_zero"].to_numpy(bool)
            ax.scatter(x[ex], y[ex], color=col, s=18, zorder=3, label=ctx)
            ax.scatter(x[~ex], y[~ex], facecolors="white", edgecolors=col, s=18, zorder=3)
        ax.axvline(0, color="grey", linewidth=0.8)
        ax.set_yticks(range(len(settings)), settings if i % 3 == 0 else [""] * len(settings), fontsize=7)
        ax.invert_yaxis()
        ax.set_xlabel(f"g ({met})")
        ax.set_title(met, fontsize=9)
        if i == 0:
            fig.legend(fontsize=7, title="token context / method", title_fontsize=7, loc="outside right upper")
    fig.suptitle("Gap per setting and scoring context with its paired bootstrap interval (filled: excludes 0)",
                 fontsize=10)
    return [Drawn("gaps", fig, "The gap g per setting (rows) in each scoring context (colours), with its paired "
                  "bootstrap interval; a filled marker's interval excludes 0 (study 000 Figure 3).",
                  pd.concat(data, ignore_index=True))]


@register_figure("ablation", needs=("table3_ablation",), title="The ablation path (study 000 Table 3)")
def ablation_figure(tables: RunTables, opts: FigureOptions) -> list[Drawn]:
    """One panel per metric: the mean gap over settings at each step of the ablation path, with its interval."""
    t = tables.get("table3_ablation")
    metrics = _metrics_in(t)
    fig, axes = panels(opts, metrics, 2)
    data = []
    for met, ax in axes:
        d = ablation_path(t, met)
        data.append(d.assign(metric=met))
        x = d["step"].to_numpy(int)
        g = d["g"].to_numpy(float)
        ax.errorbar(x, g, yerr=np.vstack([g - d["g_lo"].to_numpy(float), d["g_hi"].to_numpy(float) - g]),
                    fmt="o-", color=_COLORS[0], capsize=3)
        ax.axhline(0, color="grey", linewidth=0.8)
        ax.set_xticks(x, [f"{s}: {c}" for s, c in zip(x, d["change"], strict=True)], rotation=30, ha="right",
                      fontsize=7)
        ax.set_ylabel(f"mean g ({met})")
        ax.set_title(met, fontsize=9)
    fig.suptitle("The gap along the ablation path, one edit at a time (mean over settings, interval)", fontsize=10)
    return [Drawn("ablation", fig, "The mean gap g over settings at each step of the ablation path from the bare "
                  "context to the Guess: slot (study 000 Table 3), with its interval.", pd.concat(data, ignore_index=True))]


@register_figure("probe", needs=("table17_probe",), title="Probe differences (study 000 Table 17)")
def probe_figure(tables: RunTables, opts: FigureOptions) -> list[Drawn]:
    """The mean paired difference of stated confidence per probe pair, with its interval (pairs with no data
    are listed without a marker)."""
    d = probe_differences(tables.get("table17_probe"))
    fig, [(_, ax)] = panels(replace(opts, panel_px=max(140, 60 * len(d) + 60)), [None])
    y = np.arange(len(d))
    x = d["mean_diff"].to_numpy(float)
    ax.errorbar(x, y, xerr=np.vstack([x - d["lo"].to_numpy(float), d["hi"].to_numpy(float) - x]), fmt="o",
                color=_COLORS[0], capsize=3)
    ax.axvline(0, color="grey", linewidth=0.8)
    ax.set_yticks(y, [f"{p} (n = {n})" for p, n in zip(d["pair"], d["n"], strict=True)], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("mean difference of stated confidence")
    fig.suptitle("Probe: paired differences of stated confidence (pooled over settings)", fontsize=10)
    return [Drawn("probe", fig, "Paired differences of the stated confidence for each probe pair (study 000 Table "
                  "17), pooled over settings, with bootstrap intervals.", d)]


@register_figure("ace_quadrants", needs=("ace_gaps",), title="Raw against aligned gap (study 001)")
def ace_quadrant_figure(tables: RunTables, opts: FigureOptions) -> list[Drawn]:
    """One figure per metric, one panel per view: each cell's raw gap (x) against its aligned gap (y);
    quadrants 2 and 4 (shaded) are ranking reversals."""
    a = tables.get("ace_gaps")
    out = []
    for met in _metrics_in(a):
        d = ace_quadrants(a, met)
        views = list(dict.fromkeys(d["view"]))
        if not views:
            continue
        fig, axes = panels(opts, views)
        methods = list(dict.fromkeys(d["method"]))
        for i, (v, ax) in enumerate(axes):
            dv = d[d["view"] == v]
            vals = np.abs(dv[["raw_gap", "gap"]].to_numpy(float))
            lim = float(np.nanmax(vals)) * 1.1 if np.isfinite(vals).any() and np.nanmax(vals) > 0 else 1.0
            ax.fill_between([-lim, 0], 0, lim, color="#c44e52", alpha=0.08)
            ax.fill_between([0, lim], -lim, 0, color="#c44e52", alpha=0.08)
            ax.axhline(0, color="grey", linewidth=0.8)
            ax.axvline(0, color="grey", linewidth=0.8)
            for j, m in enumerate(methods):
                dm = dv[dv["method"] == m]
                ax.scatter(dm["raw_gap"], dm["gap"], s=16, color=_COLORS[j % len(_COLORS)], label=m)
            ax.set_xlim(-lim, lim)
            ax.set_ylim(-lim, lim)
            ax.set_xlabel(f"raw gap ({met}, model_a - model_b)")
            ax.set_ylabel(f"aligned gap ({v})")
            ax.set_title(f"{v}: {int(dv['reversal'].sum())} reversal(s) of {len(dv)}", fontsize=9)
            if i == 0:
                ax.legend(fontsize=7)
        fig.suptitle(f"ACE, {met}: raw against accuracy-aligned gap per view (shaded: ranking reversal)", fontsize=10)
        out.append(Drawn(f"ace_quadrants__{met}", fig, f"Raw gap against aligned gap under {met} for each model pair, "
                         "dataset and method, one panel per view; points in the shaded quadrants are ranking "
                         "reversals (study 001 Figures 2 and 3).", d))
    return out


@register_figure("brier_accuracy", needs=("calibration",), title="Brier score against accuracy (study 003 Figure 1)")
def brier_accuracy_figure(tables: RunTables, opts: FigureOptions) -> list[Drawn]:
    """One panel per dataset: Brier score (x) against accuracy (y) per model and signal, with the
    calibrated-random baselines (dashed: Brier (k - 1)/k^2 and accuracy 1/k)."""
    c = tables.get("calibration")
    p = {k: v for k, v in tables.primary.items() if k in ("parse_policy", "refusal", "rule")}
    main = select_group(c[c["answer_set"] != "method"], p)
    c = pd.concat([main, c[c["answer_set"] == "method"]], ignore_index=True)
    d = brier_accuracy(c)
    datasets = list(dict.fromkeys(d["dataset"]))
    fig, axes = panels(opts, datasets)
    models = list(dict.fromkeys(d["model"]))
    markers = "osD^vP*Xh<>"
    signals = list(dict.fromkeys(d["signal"]))
    for ds, ax in axes:
        dd = d[d["dataset"] == ds]
        for (m, sig), dg in dd.groupby(["model", "signal"], sort=False):
            ax.scatter(dg["brier"], dg["accuracy"], color=_COLORS[models.index(m) % len(_COLORS)],
                       marker=markers[signals.index(sig) % len(markers)], s=28)
        for b in random_baselines(observed=dd["baseline_brier"].to_numpy(float)).itertuples():
            ax.axvline(b.brier, color="grey", linestyle="--", linewidth=0.8)
            ax.axhline(b.accuracy, color="grey", linestyle="--", linewidth=0.8)
            ax.annotate(f"calibrated random, k = {b.k}", (b.brier, b.accuracy), fontsize=6, color="grey")
        ax.set_xlim(0, max(1.0, float(np.nanmax(dd["brier"])) if len(dd) else 1.0))
        ax.set_ylim(0, 1)
        ax.set_xlabel("Brier score (lower is better)")
        ax.set_ylabel("accuracy")
        ax.set_title(ds, fontsize=9)
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color=_COLORS[k % len(_COLORS)], marker="o", linestyle="", label=m)
               for k, m in enumerate(models)]
    handles += [Line2D([], [], color="black", marker=markers[k % len(markers)], linestyle="", label=s)
                for k, s in enumerate(signals)]
    fig.legend(handles=handles, fontsize=7, loc="outside right upper")
    fig.suptitle("Brier score against accuracy per model and signal (upper left is best)", fontsize=10)
    return [Drawn("brier_accuracy", fig, "Brier score against accuracy per model (colour) and signal (marker), one "
                  "panel per dataset; dashed: the calibrated random guesser of k options, accuracy 1/k and Brier "
                  "(k - 1)/k^2 (study 003 Figure 1).", d)]


@register_figure("hard_easy", needs=("hard_easy_bins",), title="Overconfidence by difficulty (study 002 Figure 4)")
def hard_easy_figure(tables: RunTables, opts: FigureOptions) -> list[Drawn]:
    """One panel per setting: overconfidence (mean confidence - mean score) per difficulty bin, a line per
    signal; empty bins are gaps."""
    d = overconfidence_bins(select_group(tables.get("hard_easy_bins"), tables.primary))
    settings = list(dict.fromkeys(d["setting"]))
    fig, axes = panels(opts, settings)
    signals = list(dict.fromkeys(d["signal"]))
    for i, (s, ax) in enumerate(axes):
        ds = d[d["setting"] == s]
        for j, sig in enumerate(signals):
            dg = ds[ds["signal"] == sig]
            ax.plot(dg["mid"], dg["overconfidence"], "o-", color=_COLORS[j % len(_COLORS)], markersize=3, label=sig)
        ax.axhline(0, color="grey", linewidth=0.8)
        ax.set_xlim(0, 1)
        ax.set_xlabel(f"difficulty ({ds['difficulty'].iloc[0]})" if len(ds) else "difficulty")
        ax.set_ylabel("overconfidence")
        ax.set_title(s, fontsize=9)
        if i == 0:
            ax.legend(fontsize=7)
    fig.suptitle("Overconfidence (mean confidence - mean score) by difficulty bin", fontsize=10)
    return [Drawn("hard_easy", fig, "Overconfidence per difficulty bin, one line per signal and one panel per "
                  "setting; empty bins are gaps (study 002 Figure 4).", d)]
