"""Print the capability tables of a run (``confgrid show``; study 004, flows/evaluate/capability.py), laid out as
the study's tables and figures they reproduce (each title names its table or figure)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from rich.console import Console

from confgrid.cli.show import register_show
from confgrid.cli.show.tables import _read, _table
from confgrid.flows.evaluate.outputs import fmt_interval

__all__ = ["print_capability"]

_TITLES = {"brier": "Table 3: Brier score against the capability target [95% paired item bootstrap]",
           "spearman": "Table 12: Spearman's rho against the capability target [95% paired item bootstrap]",
           "ece": "Table 13: ECE (10 bins, 1.0 in the last) against the capability target [95% paired item "
                  "bootstrap]"}


def _wide(m: pd.DataFrame, metric: str, target: str) -> pd.DataFrame:
    r = m[(m["metric"] == metric) & (m["target"] == target)]
    r = r.assign(value=[fmt_interval(p, lo, hi) for p, lo, hi in zip(r["point"], r["lo"], r["hi"], strict=True)])
    wide = r.pivot_table(index=["model", "estimator"], columns="dataset", values="value", aggfunc="first",
                         sort=False).reset_index()
    cost = r.groupby(["model", "estimator"], sort=False)["cost_tokens"].mean()
    wide.insert(2, "cost", [f"{cost[(m, e)]:.1f}" for m, e in zip(wide["model"], wide["estimator"], strict=True)])
    return wide


@register_show("capability", rank=40)
def print_capability(res: Path, console: Console) -> bool:
    """Print the capability tables under ``res`` (a run's results/) if they exist; returns whether any was."""
    m = _read(res, "capability_metrics")
    if m is None:
        return False
    for metric in ("brier", "spearman", "ece"):
        console.print(_table(_wide(m, metric, "capability"), _TITLES[metric] + "; cost = generated tokens per item "
                                                                     "(mean over datasets)"))
    console.print(_table(_wide(m, "brier", "response"), "Brier score against the response target (one sample's "
                                                        "correctness)"))
    pk = _read(res, "capability_pass_at_k")
    if pk is not None:
        w = pk.assign(mse=[f"{x:.4f}" if x == x else "n/a (k > samples)" for x in pk["mse"]])
        w = w.pivot_table(index=["model", "dataset", "estimator"], columns="k", values="mse", aggfunc="first",
                          sort=False).reset_index()
        w.columns = [c if isinstance(c, str) else f"pass@{c}" for c in w.columns]
        console.print(_table(w, "Tables 2 and 16: pass@k prediction, instance-level MSE against the unbiased "
                                "pass@k of the stored samples"))
    al = _read(res, "capability_allocation")
    if al is not None:
        a = al.assign(allocation=[f"{x}:{e}" if e == e and e else x for x, e in zip(al["allocation"], al["estimator"],
                                                                                     strict=True)],
                      solved=[f"{s:.3f}" for s in al["solved"]])
        a = a.pivot_table(index=["model", "dataset", "allocation"], columns="budget", values="solved",
                          aggfunc="first", sort=False).reset_index()
        a.columns = [c if isinstance(c, str) else f"B={c}" for c in a.columns]
        console.print(_table(a, "Figure 12: budget allocation, share of items solved (mean over seeds)"))
    se = _read(res, "capability_se_by_k")
    if se is not None:
        K = se.groupby(["model", "dataset"])["k"].transform("max")
        pick = se[se["k"].isin([2, 5, 10, 20, 50, 100]) | (se["k"] == K)]
        console.print(_table(pick[["model", "dataset", "k", "n_items", "mean_se", "max_se", "mean_abs_change"]],
                             "Figure 6: standard error of the capability target from the first k samples"))
    dv = _read(res, "capability_divergence")
    if dv is not None:
        s = dv.drop_duplicates(["model", "dataset", "response_target"])
        console.print(_table(s[["model", "dataset", "response_target", "n_items", "mean", "q25", "median", "q75",
                                "min", "max"]],
                             "Figure 2: the capability target among items whose response target is 0 or 1"))
    return True
