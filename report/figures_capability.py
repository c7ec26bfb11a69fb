"""Study 004's figures from its results tables (flows/evaluate/capability.py; drawn only when the run wrote them):
the tables hold the numbers already, the functions here only lay them out (each registration names its figure)."""

from __future__ import annotations

from typing import Any

import pandas as pd

from .figures_studies import _COLORS
from .registry import Drawn, FigureOptions, panels, register_figure
from .run_tables import RunTables

__all__ = ["divergence_figure", "pass_at_k_figure", "allocation_figure", "se_by_k_figure"]


def _cells(df: pd.DataFrame) -> pd.Series:
    """Each row's ``"model/dataset"``."""
    return df["model"].astype(str) + "/" + df["dataset"].astype(str)


def _per_cell(d: pd.DataFrame, opts: FigureOptions) -> tuple[Any, list[tuple[int, str, Any, pd.DataFrame]]]:
    """One panel per (model, dataset) of ``d``: the figure and, per panel, its index, ``"model/dataset"``, its
    axes and its rows of ``d``."""
    cells = _cells(d)
    fig, axes = panels(opts, list(dict.fromkeys(cells)))
    return fig, [(i, cell, ax, d[cells == cell]) for i, (cell, ax) in enumerate(axes)]


def _titled(fig, title: str, name: str, caption: str, d: pd.DataFrame) -> list[Drawn]:
    """The figure ``name`` with its title above the panels, drawn from ``d``."""
    fig.suptitle(title, fontsize=10)
    return [Drawn(name, fig, caption, d)]


def _label(ax, cell: str, xlabel: str, ylabel: str, legend: bool, log_x: bool = False, ncol: int = 1) -> None:
    """The axes of one (model, dataset) panel: labels, the cell as title, y in [0, 1], a legend if asked."""
    if log_x:
        ax.set_xscale("log", base=2)
    ax.set_ylim(0, 1)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(cell, fontsize=9)
    if legend:
        ax.legend(fontsize=7 if ncol == 1 else 6, ncol=ncol)


@register_figure("capability_divergence", title="Divergence of the calibration targets (study 004 Figure 2)")
def divergence_figure(tables: RunTables, opts: FigureOptions) -> list[Drawn]:
    """One panel per (model, dataset): the share of items per bin of the capability target, for items whose
    response target (one sample's correctness) is 0 and for those where it is 1; empty bins are zero bars."""
    d = tables.get("capability_divergence")
    fig, cells = _per_cell(d, opts)
    for _, cell, ax, dc in cells:
        for r, color, shift in ((0, _COLORS[3], -0.025), (1, _COLORS[0], 0.025)):
            dr = dc[dc["response_target"] == r]
            mid = (dr["bin_lo"] + dr["bin_hi"]) / 2
            n = int(dr["n_items"].iloc[0]) if len(dr) else 0
            ax.bar(mid + shift, dr["share"].fillna(0.0), width=0.045, color=color,
                   label=f"response target {r} (n = {n})")
        _label(ax, cell, "capability target (expected accuracy)", "share of items", legend=True)
        ax.set_xlim(0, 1)
        ax.set_ylim(auto=True)
    return _titled(fig, "The capability target given the response target", "capability_divergence",
                   "Distribution of the expected accuracy over k_eval samples among "
                   "items whose first sample is wrong (response target 0) and right (1), one panel per model and "
                   "dataset (study 004 Figure 2).", d)


@register_figure("capability_pass_at_k", title="pass@k prediction (study 004 Figure 11)")
def pass_at_k_figure(tables: RunTables, opts: FigureOptions) -> list[Drawn]:
    """One panel per (model, dataset): the actual pass@k (black, the unbiased estimator of the stored samples)
    and the predicted mean pass@k of each estimator (with its +-1.96 sigma band when at most 4 are drawn; the
    bands are in the table), k on a log scale."""
    d = tables.get("capability_pass_at_k")
    fig, cells = _per_cell(d, opts)
    estimators = list(dict.fromkeys(d["estimator"]))
    for i, cell, ax, dc in cells:
        actual = dc[dc["status"] == "ok"].drop_duplicates("k").sort_values("k")
        ax.plot(actual["k"], actual["actual"], "k-o", markersize=3, linewidth=1.6, label="actual")
        for j, est in enumerate(estimators):
            de = dc[dc["estimator"] == est].sort_values("k")
            color = _COLORS[j % len(_COLORS)]
            ax.plot(de["k"], de["predicted"], "--", color=color, linewidth=1, label=est)
            if len(estimators) <= 4:  # more bands than that hide each other
                ax.fill_between(de["k"], de["band_lo"], de["band_hi"], color=color, alpha=0.12, linewidth=0)
        _label(ax, cell, "k", "pass@k", legend=i == 0, log_x=True, ncol=2)
    return _titled(fig, "Predicted pass@k = mean of 1 - (1 - p)^k against the actual pass@k", "capability_pass_at_k",
                   "Predicted pass@k of each estimator (dashed; band +-1.96 sigma in the data) "
                   "against the unbiased pass@k of the stored samples (black); k above the stored samples has no "
                   "actual value (study 004 Figure 11).", d)


@register_figure("capability_allocation", title="Inference budget allocation (study 004 Figure 12)")
def allocation_figure(tables: RunTables, opts: FigureOptions) -> list[Drawn]:
    """One panel per (model, dataset): share of items solved (mean over seeds) against the samples per item B,
    for the uniform allocation (black) and the greedy allocation by each estimator."""
    d = tables.get("capability_allocation")
    d = d.assign(label=[a if a == "uniform" else f"greedy: {e}" for a, e in zip(d["allocation"], d["estimator"],
                                                                                  strict=True)])
    fig, cells = _per_cell(d, opts)
    labels = [lab for lab in dict.fromkeys(d["label"]) if lab != "uniform"]
    for i, cell, ax, dc in cells:
        u = dc[dc["label"] == "uniform"].sort_values("budget")
        ax.plot(u["budget"], u["solved"], "k-o", markersize=3, linewidth=1.6, label="uniform")
        for j, lab in enumerate(labels):
            dl = dc[dc["label"] == lab].sort_values("budget")
            ax.plot(dl["budget"], dl["solved"], "-", color=_COLORS[j % len(_COLORS)], linewidth=1, label=lab)
        _label(ax, cell, "samples per item B (total B x N)", "share of items solved", legend=i == 0, log_x=True,
               ncol=2)
    return _titled(fig, "Budget allocation: greedy by each estimator against uniform", "capability_allocation",
                   "Share of items with a correct sample among those allocated, "
                   "mean over seeds, against the budget per item (study 004 Figure 12).", d)


@register_figure("capability_se_by_k", title="Standard error of the capability target against k (study 004 Figure 6)")
def se_by_k_figure(tables: RunTables, opts: FigureOptions) -> list[Drawn]:
    """One line per (model, dataset): the mean standard error of the target from the first k samples."""
    d = tables.get("capability_se_by_k")
    fig, axes = panels(opts, ["standard error"])
    for _, ax in axes:
        cells = _cells(d)
        for j, cell in enumerate(dict.fromkeys(cells)):
            dc = d[cells == cell].sort_values("k")
            ax.plot(dc["k"], dc["mean_se"], "-", color=_COLORS[j % len(_COLORS)], label=cell)
        ax.set_xlabel("k (samples per item)")
        ax.set_ylabel("mean standard error of the target")
        ax.legend(fontsize=7)
    return [Drawn("capability_se_by_k", fig, "Mean over items of std(ddof 1)/sqrt(k) of the correctness of the "
                  "first k samples (study 004 Figure 6).", d)]
