"""Early stopping: in which order a setting's items run, in rounds, and when a setting stops.

A grid with ``execution.stop_when_resolved`` runs each (model, dataset) setting in rounds of whole generate shards:
the chunks enter in a seeded order (:func:`round_order`), a round adds a share of them (:func:`round_chunks`), and
after each round :func:`decide` reads the :func:`conclusion_gaps`: ``resolved``, ``budget_insufficient``, ``exhausted``
or ``continue`` (the runner adds ``failed``, flows/evaluate/rounds.py; the rules in full: docs/guides/plan-size.md).
Everything here is pure: the decision is a function of the gap table, the units' arrays and the item counts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import pandas as pd

from .evaluation import UnitPlan, unit_name
from .planner import plan_size
from .resampling import setting_seed
from .signals import UNIT_COLUMNS
from .verdicts import CONCLUSION_METRICS, conclusion_of

__all__ = ["STOP_REASONS", "STOPPING_COLUMNS", "StopRule", "GapNeed", "StopDecision", "round_order",
           "round_chunks", "conclusion_gaps", "decide"]

#: Why a setting stopped (``results/stopping``'s ``reason``).
STOP_REASONS = ("resolved", "budget_insufficient", "exhausted", "failed")
#: Columns of ``results/stopping``: one row per (model, dataset) setting of a grid with ``stop_when_resolved``.
STOPPING_COLUMNS = ["model", "dataset", "reason", "rounds", "items", "items_total", "chunks", "chunks_total",
                    "n_gaps", "n_resolved", "n_undefined", "n_tied", "unit", "signal_a", "signal_b", "metric", "gap", "lo",
                    "hi", "n", "n_required", "budget", "detail"]


@dataclass(frozen=True)
class StopRule:
    """The thresholds of :func:`decide` (a grid's ``execution.stop_when_resolved``, flows/spec/execution.py StopSpec).

    Attributes
    ----------
    min_items : int >= 1
        Items the setting runs before it may stop as resolved or budget_insufficient.
    power : float in (0, 1)
        The planner's power: the units needed to resolve a gap of the observed size with this probability.
    level : float in (0, 1)
        The intervals' level (``bootstrap.level``).
    planner_resamples : int >= 3
        Resamples per subsample size of the planner.
    seed : int
        Seed of the planner's subsamples.
    n_bins : int, the ECE bins (``metrics.ece_bins``)
    """

    min_items: int = 30
    power: float = 0.5
    level: float = 0.95
    planner_resamples: int = 200
    seed: int = 0
    n_bins: int = 10


@dataclass(frozen=True)
class GapNeed:
    """One conclusion gap row with what the planner says about it.

    Attributes
    ----------
    unit : str
        The unit (analysis/evaluation.py ``unit_name``).
    gap, lo, hi : float
        The gap ``metric(a) - metric(b)`` and its interval.
    n : int
        Items both signals have (the gap's support).
    n_required : int or None
        Units (items, or clusters) the planner needs for the observed gap; None when it cannot tell.
    budget : int or None
        Units the whole setting would give: the pilot's units scaled by items in all / items run.
    status : str
        ``resolved``, ``ok`` (the planner told), or why it cannot tell: ``zero_gap`` (an observed gap of exactly 0
        with a spread: no size to extrapolate), ``pilot_too_small`` or ``no_kernel`` (no weighted kernel for it).
    reason : str
        The planner's reason when it cannot tell.
    """

    unit: str
    signal_a: str
    signal_b: str
    metric: str
    gap: float
    lo: float
    hi: float
    n: int
    n_required: int | None = None
    budget: int | None = None
    status: str = "resolved"
    reason: str = ""

    @property
    def out_of_budget(self) -> bool:
        """Whether the whole setting cannot resolve it (the planner's n exceeds the budget)."""
        return self.status == "ok" and self.n_required is not None and self.budget is not None \
            and self.n_required > self.budget

    def line(self) -> str:
        """One line for the log and the stopping table."""
        what = f"{self.signal_a} vs {self.signal_b} {self.metric} in {self.unit}: gap {self.gap:.4f} " \
               f"[{self.lo:.4f}, {self.hi:.4f}] on {self.n} items"
        if self.status == "ok":
            return (f"{what}; the planner needs {self.n_required} items (clusters with bootstrap.cluster), the "
                    f"setting has at most {self.budget} with both signals usable")
        if self.status == "resolved":
            return f"{what}; resolved"
        return f"{what}; the planner cannot tell yet ({self.reason})"


@dataclass(frozen=True)
class StopDecision:
    """What :func:`decide` says about a setting after a round.

    Attributes
    ----------
    action : {"stop", "continue"}
    reason : str
        ``resolved``, ``budget_insufficient``, ``exhausted`` (stop) or ``continue``.
    n_gaps, n_resolved, n_undefined, n_tied : int
        Conclusion gap rows with a defined gap, those resolved, those undefined (NaN) and those tied (0 in every
        resample); the last two are left out of ``n_gaps``.
    deciding : GapNeed or None
        The gap that decided: the one out of budget by the largest factor (budget_insufficient), the unresolved one
        needing the most units (continue, exhausted), the least clearly resolved one (resolved).
    detail : str
        One line saying why.
    needs : tuple of GapNeed
        Every unresolved gap the planner was asked about.
    """

    action: str
    reason: str
    n_gaps: int
    n_resolved: int
    n_undefined: int
    n_tied: int
    deciding: GapNeed | None
    detail: str
    needs: tuple[GapNeed, ...] = field(default_factory=tuple)

    def record(self) -> dict[str, Any]:
        """The decision as plain values (the manifest's ``stopping`` entry and a row of ``results/stopping``)."""
        d = self.deciding
        out: dict[str, Any] = {"reason": self.reason, "n_gaps": self.n_gaps, "n_resolved": self.n_resolved,
                               "n_undefined": self.n_undefined, "n_tied": self.n_tied, "detail": self.detail}
        for k in ("unit", "signal_a", "signal_b", "metric", "gap", "lo", "hi", "n", "n_required", "budget"):
            v = getattr(d, k) if d is not None else None
            out[k] = float(v) if isinstance(v, (float, np.floating)) else v
        return out


def round_order(n_chunks: int, dataset: str, seed: int = 0) -> np.ndarray:
    """The order in which a dataset's generate chunks enter the rounds: a permutation of ``range(n_chunks)``.

    Drawn from ``default_rng(setting_seed("stop_when_resolved", dataset, seed))`` (analysis/resampling.py), so it is
    the same in every process and for every model on the dataset, and changes with the dataset name or ``seed``.

    Examples
    --------
    >>> sorted(round_order(5, "d").tolist())
    [0, 1, 2, 3, 4]
    >>> bool((round_order(8, "d") == round_order(8, "d")).all())
    True
    """
    if n_chunks < 0:
        raise ValueError(f"n_chunks={n_chunks!r}: a number of chunks >= 0")
    rng = np.random.default_rng(setting_seed("stop_when_resolved", dataset, int(seed)))
    return rng.permutation(int(n_chunks))


def round_chunks(chunk_items: Sequence[int], share: float, min_items: int = 1) -> list[int]:
    """How many chunks (in round order) have run after each round: a strictly increasing list ending at
    ``len(chunk_items)``. A round adds ``max(1, ceil(share * n_chunks))`` chunks; the first round adds as many more as
    it takes to reach ``min_items`` items (no decision is made before).

    Parameters
    ----------
    chunk_items : sequence of int
        Items of each chunk, in round order (:func:`round_order`).
    share : float in (0, 1], the ``round_share``
    min_items : int
        Items the first round covers at least (all of them if the setting has fewer).

    Examples
    --------
    >>> round_chunks([10] * 10, 0.25)
    [3, 6, 9, 10]
    >>> round_chunks([10] * 10, 0.1, min_items=35)
    [4, 5, 6, 7, 8, 9, 10]
    >>> round_chunks([], 0.1)
    []
    """
    if not 0 < share <= 1:
        raise ValueError(f"share={share!r}: a share of the chunks in (0, 1]")
    n = len(chunk_items)
    if n == 0:
        return []
    step = max(1, math.ceil(share * n - 1e-9))
    cum = np.cumsum(np.asarray(chunk_items, dtype=np.int64))
    first = max(step, int(np.searchsorted(cum, min_items)) + 1)
    out = list(range(min(first, n), n, step))
    return out + [n] if not out or out[-1] != n else out


def conclusion_gaps(gaps: pd.DataFrame) -> pd.DataFrame:
    """The rows of an estimates' gap table that are settings of a declared conclusion: two signals on different sides
    (analysis/verdicts.py ``side``) under a metric of :data:`CONCLUSION_METRICS`' families (undefined gaps included;
    :func:`decide` counts them apart)."""
    if gaps is None or gaps.empty:
        return pd.DataFrame(columns=list(gaps.columns) if gaps is not None else [])
    keep = [(k := conclusion_of(str(ka), str(kb), str(a), str(b), str(m))) is not None and k.metric in
            CONCLUSION_METRICS for ka, kb, a, b, m in
            zip(gaps["kind_a"], gaps["kind_b"], gaps["signal_a"], gaps["signal_b"], gaps["metric"], strict=True)]
    return gaps[np.asarray(keep, dtype=bool)].reset_index(drop=True)


def _unit_key(values) -> tuple[str, ...]:
    return tuple("" if v is None or (isinstance(v, float) and np.isnan(v)) else str(v) for v in values)


def _need(row: Any, unit: UnitPlan | None, items_run: int, items_total: int, rule: StopRule) -> GapNeed:
    """What the planner says about one unresolved gap row (analysis/planner.py ``plan_size`` at the observed gap, on
    the pair's common items of the unit)."""
    base = dict(unit=unit_name(getattr(row, c, "") for c in UNIT_COLUMNS), signal_a=str(row.signal_a),
                signal_b=str(row.signal_b), metric=str(row.metric), gap=float(row.gap), lo=float(row.lo),
                hi=float(row.hi), n=int(row.n))
    if row.gap == 0:
        return GapNeed(**base, status="zero_gap", reason="an observed gap of exactly 0 gives no size to plan for")
    cells = None if unit is None else next(((ca, cb) for a, b, ca, cb in unit.pairs
                                            if a == row.signal_a and b == row.signal_b), None)
    if cells is None or unit.confidence.shape[1] == 0:
        return GapNeed(**base, status="pilot_too_small", reason="the unit's arrays are not at hand")
    ca, cb = cells
    mask = unit.masks[ca] & unit.masks[cb]
    groups = None if unit.groups is None else unit.groups[mask]
    try:
        plan = plan_size(unit.confidence[ca][mask], unit.confidence[cb][mask], unit.target[ca][mask],
                         str(row.metric), float(row.gap), power=rule.power, level=rule.level,
                         n_resamples=rule.planner_resamples, seed=rule.seed, groups=groups, n_bins=rule.n_bins,
                         target_b=unit.target[cb][mask])
    except ValueError as exc:  # a metric without a weighted kernel (kde_ece, ece_15 ...), an undefined input
        return GapNeed(**base, status="no_kernel", reason=str(exc).split(";")[0])
    if plan.status != "ok":
        return GapNeed(**base, status="pilot_too_small", reason=plan.reason)
    budget = int(math.floor(plan.n_pilot * items_total / max(items_run, 1)))
    return GapNeed(**base, n_required=plan.n_required, budget=budget, status="ok")


def decide(gaps: pd.DataFrame, units: Sequence[UnitPlan], *, items_run: int, items_total: int, exhausted: bool,
           rule: StopRule = StopRule()) -> StopDecision:
    """Whether a setting stops after a round, and why (see the module docstring).

    Parameters
    ----------
    gaps : DataFrame
        The setting's gap rows (analysis/evaluation.py ``GAP_COLUMNS``), evaluated on the items run so far.
    units : sequence of UnitPlan
        The setting's units with their arrays (the planner subsamples the pair's common items); a unit whose
        arrays were dropped makes its gaps "cannot tell".
    items_run, items_total : int
        Items of the setting run so far, and in all (every chunk).
    exhausted : bool
        Every chunk ran.

    Returns
    -------
    StopDecision
        Order of the tests: every defined conclusion gap resolved (and ``min_items`` reached, or exhausted):
        ``resolved``; else exhausted: ``exhausted``; else fewer than ``min_items`` items: ``continue``; else an
        unresolved gap out of the setting's budget: ``budget_insufficient``; else ``continue``.
    """
    rows = conclusion_gaps(gaps)
    defined = rows[np.isfinite(rows["gap"].to_numpy(np.float64))] if len(rows) else rows
    n_und = len(rows) - len(defined)
    tied = ((defined["gap"] == 0) & (defined["lo"] == 0) & (defined["hi"] == 0)).to_numpy(bool) if len(defined) \
        else np.zeros(0, dtype=bool)
    finite = defined[~tied]
    resolved = finite["excludes_zero"].astype(bool).to_numpy() if len(finite) else np.zeros(0, dtype=bool)
    n_gaps, n_res = len(finite), int(resolved.sum())
    counts = dict(n_gaps=n_gaps, n_resolved=n_res, n_undefined=n_und, n_tied=int(tied.sum()))
    enough = items_run >= rule.min_items
    if n_gaps and n_res == n_gaps and (enough or exhausted):
        # the least clearly resolved: the interval's end nearest 0, relative to the gap
        near = min(finite.itertuples(index=False), key=lambda r: min(abs(r.lo), abs(r.hi)))

        d = GapNeed(unit_name(getattr(near, c, "") for c in UNIT_COLUMNS), str(near.signal_a), str(near.signal_b),
                    str(near.metric), float(near.gap), float(near.lo), float(near.hi), int(near.n))
        return StopDecision("stop", "resolved", **counts, deciding=d,
                            detail=f"all {n_gaps} conclusion gap(s) resolved on {items_run} of {items_total} items; "
                                   f"the closest to 0: {d.line()}")
    if exhausted:
        return StopDecision("stop", "exhausted", **counts, deciding=None,
                            detail=f"every item ran ({items_total}); {n_res} of {n_gaps} conclusion gap(s) resolved")
    if not enough:
        return StopDecision("continue", "continue", **counts, deciding=None,
                            detail=f"{items_run} items run; no decision before min_items={rule.min_items}")
    if not n_gaps:
        return StopDecision("continue", "continue", **counts, deciding=None,
                            detail=f"no defined conclusion gap yet ({n_und} undefined, {int(tied.sum())} tied)")
    by_unit = {_unit_key(u.labels[c] for c in UNIT_COLUMNS): u for u in units}
    needs = tuple(_need(r, by_unit.get(_unit_key(getattr(r, c, "") for c in UNIT_COLUMNS)), items_run,
                        items_total, rule)
                  for r, ok in zip(finite.itertuples(index=False), resolved, strict=True) if not ok)
    over = [x for x in needs if x.out_of_budget]
    if over:
        worst = max(over, key=lambda x: x.n_required / max(x.budget, 1))
        return StopDecision("stop", "budget_insufficient", **counts, deciding=worst, needs=needs,
                            detail=f"{n_gaps - n_res} of {n_gaps} conclusion gap(s) unresolved; {worst.line()}")
    told = [x for x in needs if x.status == "ok"]
    d = max(told, key=lambda x: x.n_required) if told else needs[0]
    return StopDecision("continue", "continue", **counts, deciding=d, needs=needs,
                        detail=f"{n_gaps - n_res} of {n_gaps} conclusion gap(s) unresolved; {d.line()}")
