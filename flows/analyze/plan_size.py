"""``confgrid plan-size``: how many items a comparison needs, from a pilot run or an analyze input.

Reads the pilot's one signal table (a run directory's ``tables/signals.parquet``, or such a Parquet file), or an
``analyze`` input (CSV, JSONL or Parquet with columns setting, item_id, signal, confidence, correct), and gives every
unit of pairing that has both signals to :func:`confgrid.analysis.planner.plan_size`: the two signals on the items
both have after the evaluator's alignment rule (analysis/signals.py ``analyzed``), each with its own target. Pure
(pandas and numpy); nothing runs a model.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq

from confgrid.analysis.ace.units import without_comparison
from confgrid.analysis.evaluation import unit_name
from confgrid.analysis.planner import plan_size
from confgrid.analysis.signals import UNIT_COLUMNS, analyzed, conform
from confgrid.flows.analyze.input import read_rows
from confgrid.flows.analyze.read import AnalyzeInputError
from confgrid.flows.analyze.roads import checked

__all__ = ["PLAN_COLUMNS", "read_pilot", "plan_sizes"]

#: Columns of the planner's table.
PLAN_COLUMNS = ["unit", "setting", "signal_a", "signal_b", "metric", "gap", "power", "n_pilot", "pilot_gap",
                "pilot_power", "c", "slope", "n_required", "status", "reason"]


def read_pilot(path: str | Path, group_col: str | None = None) -> pd.DataFrame:
    """The pilot as a conformed signal table.

    ``path``: a run directory (its ``tables/signals.parquet``), a signal-table Parquet file, or an analyze input
    (``.csv``, ``.jsonl``/``.ndjson``, ``.parquet``) with columns setting, item_id, signal, confidence, correct;
    ``group_col`` names an analyze input's cluster column (required then; it becomes the ``cluster`` column).

    Raises
    ------
    AnalyzeInputError
        A missing path, or any problem ``confgrid analyze`` reports for the same file (an unknown suffix, a missing
        column, a missing or out-of-range value, by line), or a duplicate row.
    """
    p = Path(path)
    if p.is_dir():
        p = p / "tables" / "signals.parquet"
        if not p.is_file():
            raise AnalyzeInputError(f"{path}: no tables/signals.parquet (a finished run's directory is needed)")
    if not p.is_file():
        raise AnalyzeInputError(f"{path}: no such file or directory")
    if p.suffix.lower() in (".parquet", ".pq"):
        names = set(pq.read_schema(p).names)
        if set(UNIT_COLUMNS) <= names and "target" in names:  # a run's signal table
            return checked(without_comparison(conform(pd.read_parquet(p))), path)
    # an analyze input: read and checked by analyze's own reader (columns, missing values by line, ranges)
    try:
        frame = read_rows(p, {"group": group_col} if group_col else None).frame
    except AnalyzeInputError as exc:  # the reader speaks of --group-col; plan-size's flag is --clustered
        raise AnalyzeInputError(str(exc).replace("(named by --group-col)", "(--clustered: the pilot has no clusters; "
                                                 "drop --clustered to count items)")) from None
    rows = pd.DataFrame({"setting": frame["setting"].astype(str), "item_id": frame["item_id"].astype(str),
                         "signal": frame["signal"].astype(str), "confidence": frame["confidence"],
                         "target": frame["correct"]})
    if group_col:
        rows["cluster"] = frame["group"].astype(str)
    return checked(conform(rows), path)


def plan_sizes(pilot: pd.DataFrame, signal_a: str, signal_b: str, metric: str, gap: float, *, power: float = 0.8,
               level: float = 0.95, n_resamples: int = 1000, seed: int = 0, clustered: bool = False,
               unit: str | None = None, n_bins: int = 10) -> pd.DataFrame:
    """The planner's answer for every unit of ``pilot`` holding both signals (:data:`PLAN_COLUMNS`).

    ``unit``: only the units whose name (``setting|answer set|parse policy|refusal|rule``, the empty parts left out)
    or setting equals it. ``clustered``: the ``cluster`` column's clusters are the resampled unit (a run's
    ``bootstrap.cluster``). ``pilot_power``: the predicted power of the pilot's own size for ``gap``.

    Raises
    ------
    AnalyzeInputError
        ``signal_a == signal_b``, no unit holds both signals (naming the signals the pilot has), no unit matches
        ``unit`` (naming the units that hold both), or ``clustered`` on a pilot without clusters (every cluster a
        single item).
    """
    if signal_a == signal_b:
        raise AnalyzeInputError(f"signal_a and signal_b are both {signal_a!r}: a signal against itself has no gap; "
                                "give two different signals")
    rows = analyzed(pilot)
    have = sorted(set(pilot["signal"]))
    if clustered and (pilot["cluster"].astype(str) == pilot["item_id"].astype(str)).all():
        raise AnalyzeInputError("--clustered: the pilot has no clusters (every row's cluster is its own item: a run "
                                "without bootstrap.cluster, or an input without a cluster column); drop --clustered "
                                "to count items")
    out, both = [], []
    for key, g in rows.groupby(list(UNIT_COLUMNS), sort=False):
        labels = dict(zip(UNIT_COLUMNS, key, strict=True))
        # the unit as results/metrics names it, without what the setting already says
        name = unit_name(v for c, v in labels.items() if c not in ("model", "dataset")
                         and not (c == "target_kind" and v == "correct"))
        a = g[g["signal"] == signal_a].drop_duplicates("item_id").set_index("item_id")
        b = g[g["signal"] == signal_b].drop_duplicates("item_id").set_index("item_id")
        if a.empty or b.empty:
            continue
        both.append(name)
        if unit is not None and unit not in (name, labels["setting"]):
            continue
        ids = a.index.intersection(b.index)
        groups = a.loc[ids, "cluster"].to_numpy(dtype=object) if clustered else None
        plan = plan_size(a.loc[ids, "confidence"].to_numpy(float), b.loc[ids, "confidence"].to_numpy(float),
                         a.loc[ids, "target"].to_numpy(float), metric, gap, power=power, level=level,
                         n_resamples=n_resamples, seed=seed, groups=groups, n_bins=n_bins,
                         target_b=b.loc[ids, "target"].to_numpy(float))
        out.append({"unit": name, "setting": labels["setting"], "signal_a": signal_a, "signal_b": signal_b,
                    "metric": metric, "gap": gap, "power": power, "n_pilot": plan.n_pilot,
                    "pilot_gap": plan.pilot_gap, "pilot_power": plan.power_at(plan.n_pilot, gap, level),
                    "c": plan.c, "slope": plan.slope, "n_required": plan.n_required, "status": plan.status,
                    "reason": plan.reason})
    if not out and both:  # only --unit left every unit out
        raise AnalyzeInputError(f"no unit or setting is called {unit!r}; the units with both signals {signal_a!r} and "
                                f"{signal_b!r}: {', '.join(both)}")
    if not out:
        where = f" matching {unit!r}" if unit is not None else ""
        raise AnalyzeInputError(f"no unit{where} has both signals {signal_a!r} and {signal_b!r}; the pilot's signals: "
                                f"{', '.join(have)}")
    df = pd.DataFrame(out, columns=PLAN_COLUMNS)
    df["n_required"] = df["n_required"].astype("Int64")
    return df
