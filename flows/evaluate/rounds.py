"""Early stopping's rounds (``execution.stop_when_resolved``), driven by the executor.

Each (model, dataset) setting runs its items in rounds of whole generate shards: the main answer set's chunks of
``execution.shard_size`` items enter in a seeded order, the same for every model on the dataset (analysis/stopping.py
``round_order`` and ``round_chunks``). The plan admits a round's items (flows/plan/grid_plan.py ``GridPlan.admit``):
the generate shards of every answer set and the item-only method shards whose items are all admitted, with the keys a
run without early stopping gives them, so a later run without it (or with a higher limit) reuses each of them. Score,
probe and answer-rating shards follow the admitted answers as in any run.

When a setting has nothing queued or running (its round is done, downstream shards included), the executor calls
:meth:`Rounds.advance`: the setting's signal rows so far are evaluated by the run's one evaluator
(flows/evaluate/run_evaluation.py ``evaluate``: same seeds, resamples and level as the final evaluation, so a gap
resolved at the stop is resolved in results/gaps too) and analysis/stopping.py ``decide`` says whether it stops
(``resolved``, ``budget_insufficient``, ``exhausted``) or continues; a setting with a failed (or, under ``resubmit
--failed``, skipped) shard stops as ``failed``. Each round logs one line per setting, and the manifest's
``meta.stopping`` keeps every setting's rounds, items, reason and deciding numbers. The cross-model probe kinds and
the candidate pools of the accuracy-controlled comparison need every model's answers on a dataset: they are planned
once every model's setting on it has stopped (``GridPlan.finalize``).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from confgrid.analysis.stopping import STOPPING_COLUMNS, StopDecision, StopRule, decide, round_chunks, round_order
from confgrid.flows.evaluate.methods import method_tables
from confgrid.flows.evaluate.run_evaluation import evaluate
from confgrid.flows.plan.grid_plan import GridPlan
from confgrid.flows.plan.shards import ShardRequest
from confgrid.flows.spec.grid import GridSpec
from confgrid.flows.store.run_store import RunStore
from confgrid.flows.tables.assemble import assemble

__all__ = ["Rounds", "stopping_table"]

log = logging.getLogger("confgrid")


@dataclass
class _Setting:
    """One (model, dataset) setting's rounds."""

    model: str
    dataset: str
    chunks: list[list[str]]  # item ids per chunk, in round order
    after: list[int]  # chunks run after each round (analysis/stopping.py round_chunks)
    rounds: int = 0
    reason: str = "running"
    decision: StopDecision | None = None
    history: list[dict[str, Any]] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"{self.model}/{self.dataset}"

    @property
    def n_chunks(self) -> int:
        return self.after[self.rounds - 1] if self.rounds else 0

    @property
    def items(self) -> int:
        return sum(len(c) for c in self.chunks[: self.n_chunks])

    @property
    def items_total(self) -> int:
        return sum(len(c) for c in self.chunks)

    @property
    def exhausted(self) -> bool:
        return self.n_chunks >= len(self.chunks)

    def record(self) -> dict[str, Any]:
        """The manifest entry and the row of results/stopping (``history``: one entry per round)."""
        d = self.decision.record() if self.decision is not None else {}
        row = {"model": self.model, "dataset": self.dataset, "rounds": self.rounds, "items": self.items,
               "items_total": self.items_total, "chunks": self.n_chunks, "chunks_total": len(self.chunks), **d,
               "reason": self.reason}
        return {**{c: row.get(c) for c in STOPPING_COLUMNS}, "history": list(self.history)}


class Rounds:
    """The rounds of every setting of a grid with ``execution.stop_when_resolved``; ``plan`` (of the same spec) holds
    the shards of items not admitted yet, ``store`` keeps ``meta.stopping`` as rounds end.

    The executor calls :meth:`start` once, then :meth:`advance` for each setting of :meth:`active` that has no
    shard queued or running; each returns the shards to submit.
    """

    def __init__(self, spec: GridSpec, plan: GridPlan, store: RunStore) -> None:
        st = spec.execution.stopping
        if st is None:
            raise ValueError("Rounds: the grid has no execution.stop_when_resolved")
        self.spec, self.plan, self.store = spec, plan, store
        self.rule = StopRule(min_items=st.min_items, power=st.power, level=spec.bootstrap.level,
                             planner_resamples=st.planner_resamples, seed=st.seed, n_bins=spec.metrics.ece_bins)
        self.settings: dict[tuple[str, str], _Setting] = {}
        for d in spec.datasets:
            chunks = plan.main_chunks(d.name)
            order = round_order(len(chunks), d.name, st.seed)
            ordered = [chunks[c] for c in order]
            after = round_chunks([len(c) for c in ordered], st.round_share, st.min_items)
            for m in spec.models:
                self.settings[(m.name, d.name)] = _Setting(m.name, d.name, ordered, after)
            if chunks:
                log.info("early stopping on %s: %d chunk(s) of up to %d items, entering in a seeded order; rounds "
                         "end after %s chunk(s)", d.name, len(chunks), spec.execution.shard_size,
                         ", ".join(map(str, after)))

    def active(self) -> list[tuple[str, str]]:
        """The settings that have not stopped."""
        return [k for k, s in self.settings.items() if s.reason == "running"]

    def start(self) -> list[ShardRequest]:
        """Admit every setting's first round; returns its shards (a setting without items stops at once)."""
        out: list[ShardRequest] = []
        for key, s in self.settings.items():
            if not s.chunks:
                out += self._stop(s, StopDecision("stop", "exhausted", 0, 0, 0, 0, None, "the dataset has no items"))
                continue
            out += self._admit(s)
        return out

    def _admit(self, s: _Setting) -> list[ShardRequest]:
        before = s.n_chunks
        s.rounds += 1
        ids = [i for c in s.chunks[before: s.n_chunks] for i in c]
        return self.plan.admit(s.model, s.dataset, ids)

    def _stop(self, s: _Setting, decision: StopDecision, reason: str | None = None) -> list[ShardRequest]:
        s.decision, s.reason = decision, reason or decision.reason
        self._save()
        return self.plan.finalize(s.model, s.dataset)

    def _save(self) -> None:
        self.store.meta["stopping"] = self.records()
        self.store.touch()

    def records(self) -> dict[str, dict[str, Any]]:
        """``meta.stopping`` of the manifest: per setting ``model/dataset``, its rounds, items, reason, deciding
        numbers and one history entry per round."""
        return {s.name: s.record() for s in self.settings.values()}

    def advance(self, key: tuple[str, str], done: dict[str, pd.DataFrame], submitted: list[ShardRequest],
                failed: int = 0) -> list[ShardRequest]:
        """A setting's round is done (nothing of it queued or running): evaluate it, decide, and return the next
        round's shards, or the cross-model work its stop makes plannable. ``key``: (model, dataset); ``done``: every
        shard table so far, by key; ``failed``: the setting's shards that failed in this run (methods included).
        """
        s = self.settings[key]
        t0 = time.time()
        units = [u for (m, d, _a), u in self.plan.units.items() if (m, d) == key]
        not_run = sum(len(u.failed) for u in units)
        if failed or not_run:
            why = (f"{max(failed, not_run)} shard(s) failed or not run after round {s.rounds}; the setting stops "
                   "(confgrid resubmit --failed or resume runs them; the next run goes on from there)")
            log.warning("early stopping %s: %s", s.name, why)
            s.history.append({"round": s.rounds, "items": s.items, "action": "stop", "reason": "failed",
                              "detail": why})
            return self._stop(s, StopDecision("stop", "failed", 0, 0, 0, 0, None, why), "failed")
        ev = self._evaluate(key, done, submitted)
        decision = decide(ev.gaps, ev.units, items_run=s.items, items_total=s.items_total, exhausted=s.exhausted,
                          rule=self.rule)
        s.history.append({"round": s.rounds, "items": s.items, "action": decision.action, "reason": decision.reason,
                          "n_gaps": decision.n_gaps, "n_resolved": decision.n_resolved, "detail": decision.detail,
                          "seconds": round(time.time() - t0, 3)})
        log.info("early stopping %s, round %d: %d of %d items (%d of %d chunks), %d of %d conclusion gap(s) "
                 "resolved: %s (%s)", s.name, s.rounds, s.items, s.items_total, s.n_chunks, len(s.chunks),
                 decision.n_resolved, decision.n_gaps, "stop, " + decision.reason if decision.action == "stop"
                 else "next round", decision.detail)
        if decision.action == "stop":
            return self._stop(s, decision)
        s.decision = decision
        self._save()
        return self._admit(s)

    def _evaluate(self, key: tuple[str, str], done: dict[str, pd.DataFrame], submitted: list[ShardRequest]):
        """The setting's evaluation so far, by the run's own evaluator (its log lines, e.g. undefined metrics, are
        kept for the final evaluation)."""
        shards = [sh for sh in submitted if (sh.model, sh.dataset) == key]
        level = log.level
        log.setLevel(logging.ERROR)
        try:
            asm = assemble(self.plan, done, shards, only={key})
            mt = method_tables(self.plan, done, shards)
            return evaluate(self.spec, asm.units, mt.signals)
        finally:
            log.setLevel(level)


def stopping_table(rounds: Rounds | None) -> pd.DataFrame:
    """``results/stopping``: one row per (model, dataset) setting with why it stopped (:data:`STOPPING_COLUMNS` of
    analysis/stopping.py); the header alone without early stopping."""
    if rounds is None:
        return pd.DataFrame(columns=STOPPING_COLUMNS)
    df = pd.DataFrame(list(rounds.records().values()), columns=STOPPING_COLUMNS)
    # counts stay whole numbers where a setting has none (a missing planner need is <NA>, not 17119.0)
    counts = ["rounds", "items", "items_total", "chunks", "chunks_total", "n_gaps", "n_resolved", "n_undefined",
              "n_tied", "n", "n_required", "budget"]
    return df.astype({c: "Int64" for c in counts if c in df.columns})
