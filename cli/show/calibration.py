"""Print the calibration tables of studies 002 and 003 of a run (``confgrid show``): per category, refusals,
repeated runs and the hard-easy effect (flows/evaluate/calibration_tables.py)."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from confgrid.cli.show import register_show
from confgrid.cli.show.tables import _read, _table

__all__ = ["print_calibration"]

_CELL = ["setting", "answer_set", "refusal", "rule", "signal"]


@register_show("calibration", rank=30)
def print_calibration(res: Path, console: Console) -> bool:
    """Print ``results/{calibration,refusals,runs,hard_easy}`` when a run has answer sets beyond the main one,
    method signals or unusable replies (the rows over all items; every other row is in the CSV files); returns
    whether anything was printed."""
    printed = False
    cal = _read(res, "calibration")
    if cal is not None:
        show = cal[(cal["answer_set"] != "main") & (cal["group"] == "all")]
        if len(show):
            cols = [*_CELL, "n", "accuracy", "mean_confidence", "brier", "calibration_gap", "ece", "smece",
                    "baseline_brier", "brier_skill_score"]
            console.print(_table(show[cols], "Calibration by answer set and policy (study 003; baseline = (k - 1)/k^2, "
                                             "skill = 1 - Brier / baseline; per category: results/calibration.csv)"))
            printed = True
    ref = _read(res, "refusals")
    if ref is not None and (ref["unusable_rate"] > 0).any():
        r = ref[ref["group"] == "all"]
        console.print(_table(r[["setting", "answer_set", "replies", "refusal", "unparseable", "other_unusable",
                                "refusal_rate", "unusable_rate"]], "Refusals and unusable replies (study 003 5.3)"))
        printed = True
    runs = _read(res, "runs")
    if runs is not None:
        r = runs[runs["group"] == "all"]
        cols = ["answer_set", "setting", "refusal", "rule", "signal", "runs", "n_pooled"]
        wide = r[cols].copy()
        for m in ("accuracy", "brier", "calibration_gap", "ece"):
            wide[m] = [f"{a:.3f} ± {s:.3f}" for a, s in zip(r[f"{m}_mean"], r[f"{m}_sd"], strict=True)]
        console.print(_table(wide, "Repeated runs: mean ± sd across runs, pooled n (study 003 Table 2)"))
        printed = True
    he = _read(res, "hard_easy")
    if he is not None:
        h = he.assign(slope=[f"{s:.3f} [{lo:.3f}, {hi:.3f}]" for s, lo, hi in zip(he["slope"], he["lo"], he["hi"],
                                                                                  strict=True)])
        console.print(_table(h[[*_CELL, "difficulty", "n", "overconfidence", "slope", "share_multiple_of_5",
                                "pearson", "spearman"]],
                             "Hard-easy effect: slope of overconfidence on difficulty [95% paired bootstrap] "
                             "(study 002 Table 2)"))
        printed = True
    return printed
