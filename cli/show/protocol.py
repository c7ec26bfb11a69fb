"""Print study 000's tables of a run (``confgrid show``; the ``protocol`` study, flows/studies/protocol.py)."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from confgrid.analysis.tables import format_table
from confgrid.cli.show import register_show
from confgrid.cli.show.tables import _read, _table
from confgrid.flows.evaluate.outputs import fmt_interval

__all__ = ["print_protocol"]

_TITLES = {
    "table2_contexts": "Table 2: the same answers in three contexts (token metric and gap g per context)",
    "table3_ablation": "Table 3: the ablation path (mean gap over settings and each step's mean |shift|)",
    "table4_axes": "Table 4: mean |shift| of g per protocol axis",
    "table15_estimators": "Table 15: ECE estimators replacing 10-bin ECE (mean and max |shift of g|, flips)",
    "transfer": "Calibration transfer (Appendix G): Brier penalty of a map fitted in one context, applied in another",
    "table17_probe": "Table 17: supplied-answer probe, paired differences of stated confidence (pooled pairs)",
}


@register_show("protocol", rank=60)
def print_protocol(res: Path, console: Console) -> None:
    """Study 000's Tables 2-4, 15, 17 and the calibration transfer, those the run wrote with rows."""
    for name, title in _TITLES.items():
        df = _read(res, name)
        if df is None:
            continue
        if name == "table17_probe":
            df = df.assign(mean_diff=[fmt_interval(p, lo, hi) for p, lo, hi in
                                      zip(df["mean_diff"], df["lo"], df["hi"], strict=True)])
            df = df[["pair", "n", "mean_diff", "share_strings_differ"]]
        else:
            df = format_table(df)
        console.print(_table(df, title))
