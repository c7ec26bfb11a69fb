"""The data behind each figure of a run, computed from its results tables (compute; drawing is in report/).

Pure pandas / numpy: every function takes tidy tables as ``confgrid run`` writes them (``OUT/results/*.parquet``,
``OUT/tables/signals.parquet``) and returns a tidy frame holding exactly what is drawn, so a figure can be checked
against its numbers. Empty bins stay as rows with ``count == 0`` and ``NaN`` means (drawn as gaps, never dropped).

Sources of the definitions: reliability diagrams (DeGroot and Fienberg 1983; bins of
:func:`confgrid.analysis.reliability.reliability_diagram`), the gap ``g = metric(verbalized) - metric(token)`` per
context (study 000 section 3.5, Figure 3), the ablation path (study 000 Table 3), the probe differences (study 000
Table 17), ACE's raw against aligned gap (study 001 Figures 2 and 3: a reversal lies in the second or fourth
quadrant), Brier score against accuracy with the calibrated-random baseline ``(k - 1) / k^2`` (study 003 Figure 1,
section 3.3) and overconfidence by difficulty (study 002 Figure 4).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from .reliability import reliability_diagram

__all__ = ["select_group", "reliability_table", "RELIABILITY_KEYS", "reliability_titles", "gap_intervals",
           "ablation_path", "probe_differences", "ace_quadrants", "brier_accuracy", "random_baselines",
           "overconfidence_bins", "smooth_curve"]

#: Columns that identify one reliability diagram (one setting, signal and scoring context).
RELIABILITY_KEYS = ("setting", "model", "dataset", "signal", "context", "aggregation")


def select_group(df: pd.DataFrame, primary: Mapping[str, str]) -> pd.DataFrame:
    """Rows of ``df`` in the run's primary group (``results/run_info.json``, flows/store/run_info.py).

    Parameters
    ----------
    df : DataFrame
        Any results table; columns it lacks are not filtered.
    primary : mapping
        ``answer_set``, ``parse_policy``, ``refusal``, ``rule``, ``aggregation``: rows match (aggregation also ``""``).

    Returns
    -------
    DataFrame with a fresh index.
    """
    if df.empty:
        return df.reset_index(drop=True)
    mask = pd.Series(True, index=df.index)
    for k, v in primary.items():
        if k not in df.columns:
            continue
        mask &= df[k].isin(["", v]) if k == "aggregation" else df[k] == v
    return df[mask].reset_index(drop=True)


def reliability_table(signals: pd.DataFrame, n_bins: int = 10, strategy: str = "uniform",
                      closure: str = "left", bin_confidence: str = "mean") -> pd.DataFrame:
    """Per-bin reliability data of every (setting, signal, context) in a long signal table.

    Parameters
    ----------
    signals : DataFrame
        ``tables/signals.parquet`` rows of one group (e.g. :func:`select_group`): columns setting, model, dataset,
        signal, context, aggregation, confidence and correct (floats in [0, 1]).
    n_bins, strategy, closure, bin_confidence
        As :func:`confgrid.analysis.reliability.reliability_diagram` (the run's ``metrics.ece_bins`` with
        ``"uniform"`` and its first ``metrics.ece_closure`` and ``metrics.ece_bin_confidence`` give its ECE's bins).

    Returns
    -------
    DataFrame
        One row per diagram and bin (``n_bins`` rows per diagram, empty bins included): the key columns, ``bin`` (int,
        0-based), ``bin_lo``, ``bin_hi`` (edges), ``count`` (int64), ``mean_confidence``, ``accuracy`` and
        ``bin_confidence`` (the mean confidence or the bin's midpoint), all three ``NaN`` for an empty bin. Diagrams
        keep the order of first appearance.

    Raises
    ------
    ValueError
        A required column is missing, or a value is out of range (from ``reliability_diagram``).
    """
    need = {*RELIABILITY_KEYS, "confidence", "correct"}
    missing = sorted(need - set(signals.columns))
    if missing:
        raise ValueError(f"signals table lacks column(s) {missing}; has {sorted(signals.columns)}")
    cols = [*RELIABILITY_KEYS, "bin", "bin_lo", "bin_hi", "count", "mean_confidence", "accuracy", "bin_confidence"]
    frames = []
    for key, g in signals.groupby(list(RELIABILITY_KEYS), sort=False, dropna=False):
        d = reliability_diagram(g["confidence"].to_numpy(np.float64), g["correct"].to_numpy(np.float64),
                                n_bins=n_bins, strategy=strategy, closure=closure, bin_confidence=bin_confidence)
        f = pd.DataFrame({"bin": np.arange(d.n_bins), "bin_lo": d.bin_edges[:-1], "bin_hi": d.bin_edges[1:],
                          "count": d.counts, "mean_confidence": d.mean_confidence, "accuracy": d.accuracy,
                          "bin_confidence": d.confidence})
        frames.append(f.assign(**dict(zip(RELIABILITY_KEYS, key, strict=True))))
    if not frames:
        return pd.DataFrame(columns=cols)
    return pd.concat(frames, ignore_index=True)[cols]


def reliability_titles(metrics: pd.DataFrame, metric: str = "ece") -> dict[tuple[str, str], tuple[float, float, float]]:
    """``{(setting, signal): (point, lo, hi)}`` of ``metric`` from ``results/metrics`` (one group), for titles."""
    if metrics.empty or "metric" not in metrics:
        return {}
    m = metrics[metrics["metric"] == metric]
    return {(r.setting, r.signal): (float(r.point), float(r.lo), float(r.hi)) for r in m.itertuples()}


def gap_intervals(gaps: pd.DataFrame, metric: str, signal_a: str = "verbalized") -> pd.DataFrame:
    """The paired gap against ``signal_a`` per setting and compared signal, with its interval (study 000 Figure 3,
    with the confidence methods beside the token score of each context).

    Parameters
    ----------
    gaps : DataFrame
        ``results/gaps`` of one group (columns setting, signal_a, signal_b, context, metric, gap, lo, hi,
        excludes_zero).
    signal_a : str
        The reference signal (gap = metric(signal_a) - metric(signal_b)).

    Returns
    -------
    DataFrame: setting, signal_b, label (the context of a token signal, else the signal), gap, lo, hi,
    excludes_zero; in table order.
    """
    cols = ["setting", "signal_b", "label", "gap", "lo", "hi", "excludes_zero"]
    if gaps.empty:
        return pd.DataFrame(columns=cols)
    g = gaps[(gaps["metric"] == metric) & (gaps["signal_a"] == signal_a)]
    label = g["context"].where(g["context"].astype(str) != "", g["signal_b"])
    return g.assign(label=label)[cols].reset_index(drop=True)


def ablation_path(table3: pd.DataFrame, metric: str) -> pd.DataFrame:
    """The mean gap along study 000's ablation path (Table 3): step, context, change, g, g_lo, g_hi."""
    cols = ["step", "context", "change", "g", "g_lo", "g_hi"]
    if table3.empty:
        return pd.DataFrame(columns=cols)
    return table3[table3["metric"] == metric][cols].sort_values("step").reset_index(drop=True)


def probe_differences(table17: pd.DataFrame) -> pd.DataFrame:
    """Paired differences of stated confidence per probe pair (study 000 Table 17): pair, n, mean_diff, lo, hi; pairs
    with ``n == 0`` are kept (``NaN`` values)."""
    cols = ["pair", "description", "n", "mean_diff", "lo", "hi"]
    return table17[cols].reset_index(drop=True) if len(table17) else pd.DataFrame(columns=cols)


def ace_quadrants(ace_gaps: pd.DataFrame, metric: str) -> pd.DataFrame:
    """Raw gap against the aligned gap of every ACE cell and view (study 001 Figures 2 and 3).

    Returns
    -------
    DataFrame: view (``ia``, ``da``, ``ca``; raw rows dropped), model_a, model_b, dataset, method, raw_gap, gap,
    quadrant (1 to 4 counter-clockwise from top right, 0 on an axis or undefined) and reversal (bool: the two gaps
    disagree in sign, quadrants 2 and 4).
    """
    cols = ["view", "model_a", "model_b", "dataset", "method", "raw_gap", "gap", "quadrant", "reversal"]
    if ace_gaps.empty:
        return pd.DataFrame(columns=cols)
    a = ace_gaps[(ace_gaps["metric"] == metric) & (ace_gaps["view"] != "raw")].copy()
    x, y = a["raw_gap"].to_numpy(float), a["gap"].to_numpy(float)
    q = np.select([(x > 0) & (y > 0), (x < 0) & (y > 0), (x < 0) & (y < 0), (x > 0) & (y < 0)], [1, 2, 3, 4], 0)
    a["quadrant"] = q
    a["reversal"] = np.isin(q, (2, 4))
    return a[cols].reset_index(drop=True)


def brier_accuracy(calibration: pd.DataFrame) -> pd.DataFrame:
    """One point per (setting, answer set, signal): accuracy and Brier score over all items (study 003 Figure 1).

    Parameters
    ----------
    calibration : DataFrame
        ``results/calibration`` (rows with ``group == "all"`` are used).

    Returns
    -------
    DataFrame: setting, model, dataset, answer_set, signal, n, accuracy, brier, baseline_brier.
    """
    cols = ["setting", "model", "dataset", "answer_set", "signal", "n", "accuracy", "brier", "baseline_brier"]
    if calibration.empty:
        return pd.DataFrame(columns=cols)
    c = calibration[calibration["group"] == "all"]
    return c[cols].reset_index(drop=True)


def random_baselines(max_k: int = 10, observed: np.ndarray | None = None) -> pd.DataFrame:
    """The calibrated random guesser of k options: accuracy ``1/k``, Brier ``(k - 1) / k^2`` (study 003, 3.3).

    Parameters
    ----------
    max_k : int
        Largest k listed when ``observed`` is not given (k = 2 .. max_k).
    observed : array of float, optional
        Baseline Brier scores in a calibration table: only the k whose baseline equals one (within 1e-9).

    Returns
    -------
    DataFrame: k (int), accuracy, brier.
    """
    k = np.arange(2, max_k + 1)
    df = pd.DataFrame({"k": k, "accuracy": 1.0 / k, "brier": (k - 1) / k.astype(float) ** 2})
    if observed is not None:
        obs = np.asarray(observed, dtype=float)
        obs = obs[np.isfinite(obs)]
        df = df[[bool(np.any(np.abs(obs - b) < 1e-9)) for b in df["brier"]]]
    return df.reset_index(drop=True)


def overconfidence_bins(hard_easy_bins: pd.DataFrame) -> pd.DataFrame:
    """Overconfidence (mean confidence - mean score) per difficulty bin (study 002 Figure 4).

    Parameters
    ----------
    hard_easy_bins : DataFrame
        ``results/hard_easy_bins`` of one group (analysis/hard_easy.py ``overconfidence_by_difficulty``).

    Returns
    -------
    DataFrame: setting, signal, difficulty (its definition), lo, hi, mid, n, overconfidence; empty bins kept with
    ``n == 0`` and ``NaN`` overconfidence.
    """
    cols = ["setting", "signal", "difficulty", "lo", "hi", "mid", "n", "overconfidence"]
    if hard_easy_bins.empty:
        return pd.DataFrame(columns=cols)
    b = hard_easy_bins.assign(mid=(hard_easy_bins["lo"] + hard_easy_bins["hi"]) / 2)
    return b[cols].reset_index(drop=True)


def smooth_curve(confidence, correct) -> dict[str, np.ndarray | float]:
    """The smooth reliability curve of smECE (Blasiok and Nakkiran 2024), from ``relplot``.

    Parameters
    ----------
    confidence, correct : array-like of shape (n_samples,), floats in [0, 1]

    Returns
    -------
    dict: ``mesh`` (grid on [0, 1]), ``mu`` (smoothed accuracy on the mesh), ``density`` (kernel density of the
    confidences on the mesh) and ``smece`` (float). Deterministic (no bootstrap band).

    Raises
    ------
    ImportError
        ``relplot`` is not installed.
    """
    import relplot  # lazy: relplot loads matplotlib; only the smooth reliability curve needs it

    c = np.asarray(confidence, dtype=np.float64)
    y = np.asarray(correct, dtype=np.float64)
    out = relplot.prepare_rel_diagram(c, y, plot_confidence_band=False, report_CE_std=False)
    return {"mesh": np.asarray(out["mesh"]), "mu": np.asarray(out["mu"]), "density": np.asarray(out["density"]),
            "smece": float(out["ce"])}
