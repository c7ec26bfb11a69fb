"""Result tables of a setting: metrics, gaps and shifts with paired intervals.

Thin glue between the long signal table (flows/stages.py) and the pure
analysis (analysis/bootstrap.py, analysis/compare.py): it builds the (S, n)
confidence matrix of one setting, runs the paired bootstrap once for every
signal and metric, and labels the tidy tables with the setting.
"""

from __future__ import annotations

import itertools
from typing import Mapping

import numpy as np
import pandas as pd

from confgrid.analysis.bootstrap import BootstrapResult, setting_seed
from confgrid.analysis.compare import flips, gaps, shifts
from confgrid.flows.bootstrap_ray import bootstrap_one

__all__ = ["setting_tables"]


def setting_tables(
    signals: pd.DataFrame,
    *,
    model: str,
    dataset: str,
    metrics: tuple[str, ...],
    n_bins: int,
    n_resamples: int,
    base_seed: int,
    level: float = 0.95,
    use_ray: bool = False,
    num_workers: int | None = None,
    pairs: list[tuple[str, str]] | None = None,
    clusters: Mapping[str, str] | None = None,
    cluster_col: str | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, BootstrapResult]:
    """Metrics, gaps and shifts of one (model, dataset) setting.

    Parameters
    ----------
    signals : DataFrame
        Long table with columns item_id, signal, context, confidence, correct
        (one row per item and signal; every signal on the same items).
    metrics : tuple of str
        Metric names (analysis/metrics.py registry).
    n_bins, n_resamples, base_seed, level
        ECE bins, paired resamples, base seed (the setting's seed is
        ``setting_seed(model, dataset, base_seed)``) and interval level.
    use_ray, num_workers
        Spread the resample chunks over CPU workers with Ray Data
        (flows/bootstrap_ray.py); bit-identical to the in-process path.
    pairs : list of (signal, signal), optional
        Token-signal pairs whose gap shift is reported (default: every pair).
    clusters : mapping of str to str, optional
        item_id -> cluster label (``bootstrap.cluster``): the bootstrap then
        resamples clusters with all their items, and the three tables gain
        the columns ``cluster_col`` (``cluster_col``) and ``n_clusters``.

    Raises
    ------
    ValueError
        ``clusters`` lacks an item of ``signals``.

    Returns
    -------
    metrics_df : columns setting, model, dataset, signal, context, metric, point, lo, hi, n
    gaps_df : columns setting, model, dataset, signal_a (``verbalized``),
        signal_b (the token signal), context, aggregation, metric, gap, lo, hi,
        excludes_zero, favours, n. gap = metric(signal_a) - metric(signal_b):
        positive favours the token score under ECE and AURC and the verbalized
        score under AUROC (study 000 section 3.5); ``favours`` names the better
        signal by point estimate (for a signed metric, the one closer to 0).
    shifts_df : columns setting, model, dataset, from_context, to_context, metric,
        shift, lo, hi, excludes_zero, flip, resolved_flip, n; shift =
        g(to) - g(from) on the same resamples, for every pair of contexts in
        declaration order (or the given ``pairs``).
    result : BootstrapResult
        The paired bootstrap itself (signal names in ``result.signal_names``),
        for summaries over settings.
    """
    setting = f"{model}/{dataset}"
    order = list(dict.fromkeys(signals["signal"]))
    ctx_of = dict(zip(signals["signal"], signals["context"], strict=False))
    agg_of = dict(zip(signals["signal"], signals["aggregation"], strict=False)) if "aggregation" in signals else {}
    conf = signals.pivot(index="item_id", columns="signal", values="confidence")[order].to_numpy(np.float64).T
    corr = signals.pivot(index="item_id", columns="signal", values="correct")[order].to_numpy(np.float64).T
    n = conf.shape[1]
    groups = None
    if clusters is not None:
        items = signals.pivot(index="item_id", columns="signal", values="confidence").index
        lack = [i for i in items if i not in clusters]
        if lack:
            raise ValueError(f"setting {setting!r}: no cluster ({cluster_col!r}) for {len(lack)} item(s), e.g. "
                             f"{lack[0]!r}")
        groups = np.array([clusters[i] for i in items], dtype=object)
    res = bootstrap_one(conf, corr, list(metrics), n_resamples=n_resamples,
                        seed=setting_seed(model, dataset, base_seed), n_bins=n_bins, signal_names=order,
                        use_ray=use_ray, num_workers=num_workers, groups=groups)
    lo, hi = res.interval(level)
    base = {"setting": setting, "model": model, "dataset": dataset}
    if groups is not None:  # the tables say the intervals are clustered, on which field, over how many clusters
        base.update(cluster_col=cluster_col, n_clusters=res.n_clusters)
    metrics_df = pd.DataFrame([
        {**base, "signal": sig, "context": ctx_of[sig], "aggregation": agg_of.get(sig, ""), "metric": met,
         "point": res.point[s, j], "lo": lo[s, j], "hi": hi[s, j], "n": n}
        for s, sig in enumerate(order) for j, met in enumerate(metrics)
    ])
    if "verbalized" not in order or len(order) < 2:
        return metrics_df, pd.DataFrame(), pd.DataFrame(), res

    g = gaps(res, order, level=level).rename(columns={"point": "gap", "signal": "signal_b"})
    g.insert(0, "signal_a", "verbalized")
    g.insert(2, "context", g["signal_b"].map(ctx_of))
    g.insert(3, "aggregation", g["signal_b"].map(lambda x: agg_of.get(x, "")))
    gaps_df = pd.concat([pd.DataFrame([base] * len(g)), g.drop(columns="n_undefined")], axis=1).assign(n=n)

    if pairs is None:
        pairs = list(itertools.combinations([s for s in order if s != "verbalized"], 2))
    pairs = [(a, b) for a, b in pairs if a in order and b in order]
    if not pairs:
        return metrics_df, gaps_df, pd.DataFrame(), res
    sh = shifts(res, order, pairs, level=level)
    fl = flips(res, order, pairs, level=level)
    sh = sh.merge(fl[["context_a", "context_b", "metric", "flip", "fully_resolved"]],
                  on=["context_a", "context_b", "metric"])
    sh = sh.assign(from_context=sh["context_a"].map(ctx_of), to_context=sh["context_b"].map(ctx_of),
                   from_signal=sh["context_a"], to_signal=sh["context_b"],
                   from_aggregation=sh["context_a"].map(lambda x: agg_of.get(x, "")),
                   to_aggregation=sh["context_b"].map(lambda x: agg_of.get(x, "")))
    sh = sh.rename(columns={"point": "shift", "fully_resolved": "resolved_flip"})
    cols = ["from_context", "to_context", "from_aggregation", "to_aggregation", "from_signal", "to_signal",
            "metric", "shift", "lo", "hi", "excludes_zero", "flip", "resolved_flip"]
    shifts_df = pd.concat([pd.DataFrame([base] * len(sh)), sh[cols]], axis=1).assign(n=n)
    return metrics_df, gaps_df, shifts_df, res
