"""Confidence methods of a run: from stored method shards to per-item signals, targets and metrics.

Pure (no Ray, no model): everything here re-reads stored shard tables, so a new agreement rule, merge rule or metric
reruns no model. The formulas are in protocols/methods.py; this module joins them with the answers they rate.

Tables (docs/concepts/methods.md):

* ``tables/samples.parquet``: every sampled answer, parsed and graded (one row per model, dataset, method, item,
  sample), with the sampling parameters actually used.
* ``tables/method_signals.parquet``: one row per (model, dataset, method signal, item): confidence (or None), status,
  the answer rated and its correctness under the method's rule, and the method's protocol.
* ``tables/targets.parquet``: expected accuracy over k samples per item, with its standard error (the capability
  target of study 004).
* ``tables/next_token.parquet``, ``tables/hidden_states.parquet``: what the next-token and hidden-state methods read.

Each method stage reads its own shards into these tables (its ``collect`` in flows/stages/<stage>.py); which answer a
signal rates is in flows/stages/method_base.py.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import pandas as pd

from confgrid.flows.plan.grid_plan import GridPlan
from confgrid.flows.plan.shards import ShardRequest
from confgrid.flows.spec.methods import MethodSpec
from confgrid.flows.stages.base import relabel
from confgrid.flows.stages.method_base import RatedValue, frame

__all__ = ["MethodTables", "method_tables", "ratings_of_supplied_answers", "METHOD_SIGNAL_COLUMNS"]

log = logging.getLogger("confgrid")

METHOD_SIGNAL_COLUMNS = ["model", "dataset", "method", "kind", "signal", "item_id", "confidence", "status",
                         "rated", "rated_answer", "correct", "rule", "detail", "template", "k", "temperature",
                         "top_p", "top_k", "seed", "merge", "renormalize"]


@dataclass
class MethodTables:
    """Everything the methods of a run produced (empty frames when the grid declares none)."""

    samples: pd.DataFrame = field(default_factory=pd.DataFrame)
    signals: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=METHOD_SIGNAL_COLUMNS))
    targets: pd.DataFrame = field(default_factory=pd.DataFrame)
    next_token: pd.DataFrame = field(default_factory=pd.DataFrame)
    hidden: pd.DataFrame = field(default_factory=pd.DataFrame)
    #: generated tokens per item of the rate-stage methods (model, dataset, method, item_id, generated_tokens)
    costs: pd.DataFrame = field(default_factory=pd.DataFrame)
    incomplete: list[str] = field(default_factory=list)

    def stored(self) -> dict[str, pd.DataFrame]:
        """The non-empty frames a run stores, by their ``tables/<name>.parquet`` name."""
        return {name: df for name, df in (("samples", self.samples), ("method_signals", self.signals),
                                          ("targets", self.targets), ("next_token", self.next_token),
                                          ("hidden_states", self.hidden)) if len(df)}


def ratings_of_supplied_answers(plan: GridPlan, method: MethodSpec, model: str, table: pd.DataFrame) -> pd.DataFrame:
    """A rating method's confidence in each supplied answer of a shard table (candidate ratings of ACE's CA view):
    columns item_id, rated_answer, confidence (float in [0, 1] or None), status."""
    values = method.reader.rated_values(plan, method, model, table)
    return pd.DataFrame([v[:4] for v in values], columns=list(RatedValue._fields[:4]))


def method_tables(plan: GridPlan, done: dict[str, pd.DataFrame], shards: list[ShardRequest]) -> MethodTables:
    """Gather the method shards of a run into tables (see the module docstring).

    A (model, dataset, method) with a shard missing (failed or not run) is left out and named in
    :attr:`MethodTables.incomplete`.
    """
    spec = plan.spec
    out: dict[str, list] = {"signals": [], "targets": [], "samples": [], "next_token": [], "hidden": [], "costs": []}
    incomplete: list[str] = []
    by_method: dict[tuple[str, str, str], list[ShardRequest]] = {}
    for sh in shards:
        if sh.method and sh.part != "ca":  # candidate ratings (comparison view ca) are read by flows/evaluate/ace.py
            by_method.setdefault((sh.model, sh.dataset, sh.method), []).append(sh)
    methods = {m.id: m for m in spec.methods}
    for (model, dataset, mid), shs in by_method.items():
        method = methods[mid]
        uniq = list({s.label: s for s in shs}.values())
        if any(s.key not in done for s in uniq):
            incomplete.append(f"{model}/{dataset}/{mid}")
            log.warning("%s/%s: method %s has shards missing; left out of the method tables", model, dataset, mid)
            continue
        frames = [relabel(done[s.key], model=model, dataset=dataset, method=mid, chunk=s.chunk) for s in uniq]
        table = pd.concat(frames, ignore_index=True)
        method.reader.collect(plan, method, model, dataset, table, out)
    return MethodTables(frame(out["samples"]), pd.DataFrame(out["signals"], columns=METHOD_SIGNAL_COLUMNS),
                        pd.DataFrame(out["targets"]), frame(out["next_token"]), frame(out["hidden"]),
                        frame(out["costs"]), incomplete)
