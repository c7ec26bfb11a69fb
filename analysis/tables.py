"""Report tables of study 000 as DataFrames, CSV and Markdown.

Every table function returns a **numeric** DataFrame in which an estimate with an interval is three columns ``X``,
``X_lo``, ``X_hi``; CSV files keep those numbers. :func:`format_table` turns each such triple into one string
``"point [lo, hi]"`` with :func:`format_estimate` (the only place that formats numbers) for Markdown and display.

Inputs are tidy DataFrames (per-setting metrics and gaps, means over settings of :mod:`confgrid.analysis.means` and
:mod:`confgrid.analysis.transfer`; columns in each function).

Tables: :func:`three_context_table` (Table 2), :func:`ablation_path_table` (Table 3), :func:`axis_table` (Table 4),
:func:`estimators_table` (Table 15), :func:`transfer_table` (Appendix G); the Markdown writer :func:`to_markdown`.
"""

from __future__ import annotations

import math
from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from .compare import flip, fully_resolved
from .means import SUMMARY_COLUMNS
from .transfer import summarize_transfer

__all__ = [
    "format_estimate",
    "format_table",
    "to_markdown",
    "three_context_table",
    "ablation_path_table",
    "axis_table",
    "estimators_table",
    "transfer_table",
]


def format_estimate(point, lo=None, hi=None, digits: int = 3, signed: bool = False) -> str:
    """``"point [lo, hi]"`` (or just ``"point"``); ``nan`` prints as ``"-"``.

    Examples
    --------
    >>> format_estimate(0.3041, 0.25, 0.361)
    '0.304 [0.250, 0.361]'
    >>> format_estimate(-0.019, -0.04, 0.002, signed=True)
    '-0.019 [-0.040, +0.002]'
    >>> format_estimate(float("nan"))
    '-'
    """
    def one(x) -> str:
        if x is None or (isinstance(x, float) and math.isnan(x)) or pd.isna(x):
            return "-"
        return f"{float(x):+.{digits}f}" if signed else f"{float(x):.{digits}f}"

    if lo is None and hi is None:
        return one(point)
    if pd.isna(lo) and pd.isna(hi):
        return one(point)
    return f"{one(point)} [{one(lo)}, {one(hi)}]"


def format_table(df: pd.DataFrame, digits: int = 3, signed: Sequence[str] = ()) -> pd.DataFrame:
    """Merge every ``X, X_lo, X_hi`` triple into one string column ``X``; format other floats.

    ``signed`` names the columns printed with an explicit sign (gaps, shifts).
    """
    out = {}
    cols = list(df.columns)
    skip = set()
    for c in cols:
        if c in skip:
            continue
        lo, hi = f"{c}_lo", f"{c}_hi"
        sg = c in signed
        if lo in df.columns and hi in df.columns:
            out[c] = [format_estimate(p, a, b, digits, sg) for p, a, b in zip(df[c], df[lo], df[hi])]
            skip |= {lo, hi}
        elif c.startswith("n_") or c in _COUNT_COLUMNS:
            out[c] = ["-" if pd.isna(x) else str(int(x)) if float(x).is_integer() else str(x) for x in df[c]]
        elif pd.api.types.is_float_dtype(df[c]):
            out[c] = [format_estimate(p, digits=digits, signed=sg) for p in df[c]]
        else:
            out[c] = df[c].tolist()
    return pd.DataFrame(out, columns=[c for c in cols if c not in skip])


#: integer-valued columns printed without decimals (besides every ``n_*`` column)
_COUNT_COLUMNS = {"step", "split", "better_signal_changes", "resolved_changes", "context_flips"}


def to_markdown(df: pd.DataFrame) -> str:
    """A GitHub-flavoured Markdown table of ``df`` as is (format it first)."""
    cols = [str(c) for c in df.columns]

    def cell(x) -> str:
        s = "-" if x is None or (isinstance(x, float) and math.isnan(x)) else str(x)
        return s.replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(cols) + " |", "| " + " | ".join("---" for _ in cols) + " |"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join(lines) + "\n"


def _tidy(df: pd.DataFrame, what: str) -> pd.DataFrame:
    for name in ("gap", "g"):  # a run's gaps table names its point estimate ``gap``
        if name in df.columns and "point" not in df.columns:
            df = df.rename(columns={name: "point"})
    need = ["setting", "metric", "point", "lo", "hi"]
    missing = [c for c in need if c not in df.columns]
    if missing:
        raise ValueError(f"{what} is missing columns {missing}; has {list(df.columns)}")
    return df


# --- Table 2: the same answers in three contexts ---


def _triple(name: str, one_row: pd.DataFrame, cast=lambda x: x) -> dict:
    """``{name: point, name_lo: lo, name_hi: hi}`` of a one-row table."""
    return {name: cast(one_row.point.iloc[0]), f"{name}_lo": cast(one_row.lo.iloc[0]),
            f"{name}_hi": cast(one_row.hi.iloc[0])}


def three_context_table(metrics: pd.DataFrame, gaps: pd.DataFrame, advantages: pd.DataFrame, metric: str,
                        contexts: Sequence[str], verbalized: str = "verbalized", key: str = "context") -> pd.DataFrame:
    """Per setting: verbalized metric, token metric and gap in each context (Table 2).

    Parameters
    ----------
    metrics : DataFrame
        Per-setting metrics: ``setting``, ``signal``, ``context``, ``metric``, ``point``, ``lo``, ``hi``; the
        verbalized row has ``signal == verbalized``.
    gaps : DataFrame
        Per setting: ``setting``, ``key`` (default ``context``), ``metric``, ``point`` (or ``gap``), ``lo``, ``hi``.
    advantages : DataFrame
        Per-setting advantages (:func:`compare.advantage`: ``setting``, ``key``, ``metric``, ``point``, ``lo``,
        ``hi``), the paired intervals a resolved flip needs (for a signed metric those of ``|v| - |t|``; for an
        unsigned one they equal the gaps'); one row per (setting, context) of ``metric``.
    contexts : sequence of str
        The token contexts in column order (e.g. bare, Answer: slot, Guess: slot).
    key : {"context", "signal"}
        Column identifying the token signal in both tables.

    Returns
    -------
    DataFrame
        One row per setting: ``setting``, ``verbalized`` (+ ``_lo``/``_hi``), ``token_<ctx>`` and ``g_<ctx>`` triples
        per context, then ``flip`` and ``resolved_flip`` between the first and the last context: :func:`compare.flip`
        and :func:`compare.fully_resolved` of the two advantages (a signed metric compares ``|verbalized|`` with
        ``|token|``, never the gaps' signs or intervals).
    """
    m = _tidy(metrics, "metrics")
    g = _tidy(gaps, "gaps")
    m = m[m["metric"] == metric]
    g = g[g["metric"] == metric]
    a = _tidy(advantages, "advantages")
    if key not in a.columns:
        raise ValueError(f"advantages is missing column {key!r}; has {list(a.columns)}")
    a = a[a["metric"] == metric]
    rows = []
    for setting in dict.fromkeys(m["setting"]):
        ms = m[m["setting"] == setting]
        gs = g[g["setting"] == setting]
        v = ms[ms["signal"] == verbalized]
        if len(v) != 1:
            raise ValueError(f"setting {setting!r}: need one verbalized row for {metric}, got {len(v)}")
        row = {"setting": setting, **_triple("verbalized", v)}
        adv = {}
        for ctx in contexts:
            t = ms[(ms[key] == ctx) & (ms["signal"] != verbalized)]
            gg = gs[gs[key] == ctx]
            if len(t) != 1 or len(gg) != 1:
                raise ValueError(f"setting {setting!r}: need one {key} {ctx!r} row for {metric}")
            row.update(_triple(f"token_{ctx}", t) | _triple(f"g_{ctx}", gg, float))
            aa = a[(a["setting"] == setting) & (a[key] == ctx)]
            if len(aa) != 1:
                raise ValueError(f"setting {setting!r}: need one advantages row for {key} {ctx!r} and {metric}")
            adv[ctx] = tuple(float(aa[c].iloc[0]) for c in ("point", "lo", "hi"))
        first, last = adv[contexts[0]], adv[contexts[-1]]
        row["flip"] = flip(first[0], last[0])
        row["resolved_flip"] = fully_resolved(first, last)
        rows.append(row)
    return pd.DataFrame(rows)


# --- Table 3: ablation path ---


def ablation_path_table(
    gap_summary: pd.DataFrame,
    shift_summary: pd.DataFrame,
    path: Sequence[tuple[str, str]],
    metric: str,
) -> pd.DataFrame:
    """The gap along a stated path of contexts and each step's shift (Table 3).

    Parameters
    ----------
    gap_summary : DataFrame
        per token signal, :func:`means.mean_gap` (``signal``, ``metric``, ``point``, ``lo``, ``hi``, ...): the mean
        signed gap per context.
    shift_summary : DataFrame
        :func:`means.mean_shift` rows holding every consecutive pair of the path (``context_a``, ``context_b``,
        ``metric``, ``mean_abs``, ``lo``, ``hi``, ``n_flips``, ...); its ``n_flips`` (changes of
        :func:`compare.better_signal`) are taken as they are.
    path : sequence of (context, change)
        The contexts in order with the change that leads to each (the first change is usually ``"start"``).

    Returns
    -------
    DataFrame
        ``step``, ``context``, ``change``, ``g`` triple (mean signed gap over settings), ``dg_step`` = mean gap minus
        the previous row's mean gap (point only; ``nan`` on the first row), ``abs_dg`` triple (mean ``|dg|`` of the
        step over settings), ``n_excludes_zero`` and ``n_flips`` of the step.
    """
    gs = gap_summary[gap_summary["metric"] == metric].set_index("signal")
    ss = shift_summary[shift_summary["metric"] == metric].set_index(["context_a", "context_b"])
    rows, prev = [], None
    for step, (ctx, change) in enumerate(path):
        if ctx not in gs.index:
            raise ValueError(f"context {ctx!r} not in gap_summary for metric {metric!r}")
        r = gs.loc[ctx]
        row = {"step": step, "context": ctx, "change": change, "g": r.point, "g_lo": r.lo, "g_hi": r.hi,
               "dg_step": np.nan, "abs_dg": np.nan, "abs_dg_lo": np.nan, "abs_dg_hi": np.nan,
               "n_excludes_zero": np.nan, "n_flips": np.nan}
        if prev is not None:
            if (prev, ctx) not in ss.index:
                raise ValueError(f"shift_summary has no pair ({prev!r}, {ctx!r}) for metric {metric!r}")
            s = ss.loc[(prev, ctx)]
            row.update(dg_step=r.point - gs.loc[prev].point, abs_dg=s.mean_abs, abs_dg_lo=s.lo,
                       abs_dg_hi=s.hi, n_excludes_zero=s.n_excludes_zero, n_flips=s.n_flips)
        rows.append(row)
        prev = ctx
    return pd.DataFrame(rows)


# --- Table 4: mean |shift| per axis ---


def axis_table(axes: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    """Mean ``|dg|`` per axis and metric (Table 4).

    Parameters
    ----------
    axes : mapping axis name -> DataFrame
        Per axis (context, estimator, aggregation, correctness rule, bin count) a summary with a ``metric`` column (or
        ``estimator``, taken as the metric of that row) and :data:`means.SUMMARY_COLUMNS`, one row per metric
        (:func:`means.mean_shift` of one axis).

    Returns
    -------
    DataFrame
        Columns ``axis``, ``metric``, ``mean_abs`` (+ ``_lo``/``_hi``), ``n_settings``, ``n_excludes_zero``,
        ``n_flips``, ``n_resolved_flips``.
    """
    parts = []
    for axis, df in axes.items():
        d = df.copy()
        if "metric" not in d.columns:
            if "estimator" not in d.columns:
                raise ValueError(f"axis {axis!r}: need a 'metric' or 'estimator' column")
            d["metric"] = d["estimator"]
        missing = [c for c in SUMMARY_COLUMNS if c not in d.columns]
        if missing:
            raise ValueError(f"axis {axis!r}: missing columns {missing}")
        d = d.rename(columns={"lo": "mean_abs_lo", "hi": "mean_abs_hi"})
        d.insert(0, "axis", axis)
        parts.append(d[["axis", "metric", "mean_abs", "mean_abs_lo", "mean_abs_hi", "n_settings",
                        "n_excludes_zero", "n_flips", "n_resolved_flips"]])
    return pd.concat(parts, ignore_index=True)


# --- Table 15: estimators; transfer penalties ---


def estimators_table(estimator_summary: pd.DataFrame) -> pd.DataFrame:
    """Table 15 from :func:`means.mean_shift` rows of each (signal, estimator) against 10-bin ECE.

    Returns
    -------
    DataFrame
        ``signal`` (context), ``estimator``, ``mean_abs`` triple, ``max_abs``, ``better_signal_changes`` (settings
        where the estimator, not the context, flips the better signal; by point estimate), ``resolved_changes``,
        ``context_flips``.
    """
    d = estimator_summary
    return pd.DataFrame({
        "signal": d["signal"], "estimator": d["estimator"],
        "mean_abs": d["mean_abs"], "mean_abs_lo": d["lo"], "mean_abs_hi": d["hi"],
        "max_abs": d["max_abs"], "better_signal_changes": d["n_flips"],
        "resolved_changes": d["n_resolved_flips"], "context_flips": d["context_flips"],
        "n_settings": d["n_settings"],
    })


def transfer_table(penalties: pd.DataFrame, by: Sequence[str] = ("method", "direction")) -> pd.DataFrame:
    """Transfer penalties (Appendix G) from :func:`transfer.transfer_penalties` rows.

    ``penalties`` may hold several settings (a ``setting`` column). Returns per ``by`` group: ``mean_penalty``,
    ``min_penalty``, ``max_penalty``, ``frac_positive`` (fraction of rows, i.e. setting x split, with a positive
    penalty), ``n_settings_all_positive`` (settings whose every split is positive; ``nan`` without a ``setting``
    column), ``mean_brier_transferred``, ``mean_brier_native``.
    """
    out = summarize_transfer(penalties, by)
    if "setting" in penalties.columns:
        allpos = (penalties.assign(pos=penalties["penalty"] > 0)
                  .groupby([*by, "setting"], sort=False)["pos"].all()
                  .groupby(list(by), sort=False).sum().rename("n_settings_all_positive").reset_index())
        out = out.merge(allpos, on=list(by), how="left")
    else:
        out["n_settings_all_positive"] = np.nan
    return out

