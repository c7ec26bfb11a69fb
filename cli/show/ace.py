"""Print the accuracy-controlled comparison of a run or analysis (``confgrid show``; study 001 Tables 1, 2, 7-10)."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from confgrid.cli.show import register_show
from confgrid.cli.show.tables import _read, _table
from confgrid.flows.evaluate.outputs import fmt_interval as _fmt

__all__ = ["print_ace"]


@register_show("ace", rank=20)
def print_ace(res: Path, console: Console) -> bool:
    """Print the ACE tables found in ``res`` (results/), each titled with its table of study 001; returns whether
    there were any."""
    gaps = _read(res, "ace_gaps")
    if gaps is None:
        return False
    boot = _read(res, "ace_bootstrap")
    cell = ["model_a", "model_b", "comparison", "dataset", "method", "metric"]
    gaps_main = gaps[gaps["view"].isin(["raw", "ia", "da", "ca", "da_resample"])]  # the parts and directions: CSV
    g = gaps_main.assign(cell_gap=[f"{x:.3f}" if x == x else "nan" for x in gaps_main["gap"]])
    if boot is not None:
        b = boot.assign(ci=[_fmt(p, lo, hi) for p, lo, hi in zip(boot["gap"], boot["lo"], boot["hi"], strict=True)])
        g = g.merge(b[[*cell, "view", "ci"]], on=[*cell, "view"], how="left")
        g["cell_gap"] = g["ci"].fillna(g["cell_gap"])
    wide = g.pivot_table(index=[*cell, "acc_a", "acc_b"], columns="view", values="cell_gap", aggfunc="first",
                         sort=False).reset_index()
    console.print(_table(wide, "ACE: calibration gap metric(A) - metric(B) per view [95% paired bootstrap interval]; "
                               "a reversal is an aligned gap of the other sign than raw"))
    shares = _read(res, "ace_pattern_shares")
    if shares is not None:
        console.print(_table(shares[shares["by"].isin(["method", "comparison", "all"])]
                             if "all" in set(shares["by"]) else shares[shares["by"].isin(["method", "comparison"])],
                             "Tables 1-2: exclusive reversal patterns (share of cells) and DA/IA agreement"))
    rates = _read(res, "ace_reversals")
    if rates is not None:
        console.print(_table(rates[rates["by"].isin(["method", "dataset"])],
                             "Table 7: reversal rates by method and dataset"))
        console.print(_table(rates[rates["by"] == "acc_gap_bin"],
                             "Table 8: reversal rates by accuracy-gap bin |a_A - a_B| (0.1: Appendix E.2)"))
    ia = gaps[gaps["view"] == "ia"]
    if len(ia):
        console.print(_table(ia[[*cell, "n_items", "retention"]].drop_duplicates(cell[:-1]),
                             "Table 9: instance-aligned retention |D_IA| / |D|"))
    summary = _read(res, "ace_bootstrap_summary")
    if summary is not None:
        console.print(_table(summary, "Table 10: bootstrap reliability of reversals (retention probability, strict "
                                      "criterion)"))
    sp = _read(res, "ace_self_preference")
    if sp is not None:
        sp = sp.assign(diff=[_fmt(p, lo, hi) for p, lo, hi in zip(sp["diff"], sp["lo"], sp["hi"], strict=True)])
        console.print(_table(sp[[*cell[:-1], "rater", "other", "n_differ", "mean_own", "mean_other", "diff"]],
                             "Self-preference: confidence in the own candidate minus in the other model's"))
    corr = _read(res, "ace_correlation")
    if corr is not None:
        console.print(_table(corr, "Spearman correlation of the raw gap with the accuracy gap across cells"))
    msgs = res / "ace_messages.txt"
    if msgs.is_file():
        console.print(msgs.read_text(encoding="utf-8").strip())
    return True
