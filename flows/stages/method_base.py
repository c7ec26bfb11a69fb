"""What the method stages (sample, rate, next_token, hidden) share: the registry of the readers of their rows,
their rows' protocol columns, the greedy answer they rate, and the signal rows of a method that rates it.

A reader (``READERS``, lm-evaluation-harness style: a duplicate name is an error, an unknown one lists the
choices) is what a method kind does with its stage's rows (protocols/method_kinds.py names it): it is registered
by its stage's file, next to the functions it calls.

Which answer a signal rates (seed 001 D.3, seed 004): self-consistency the first sample; its ``__majority``
signal the majority answer; P(True), the rating and verbalized-before the model's own greedy answer (the main
answer set), graded under the method's rule.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, NamedTuple

import numpy as np
import pandas as pd

from confgrid.flows.stages.base import get_stage
from confgrid.registry import Registry


__all__ = ["CapabilityRole", "MethodReader", "READERS", "register_reader", "get_reader", "RatedValue", "protocol",
           "rated_signals", "method_columns", "method_rows"]

#: ``(plan, method, model, dataset, table, out)``: a method's rows appended to the method tables' buckets.
CollectFn = Callable[[Any, Any, str, str, pd.DataFrame, dict[str, list]], None]


@dataclass(frozen=True)
class CapabilityRole:
    """A reader's part in capability calibration (study 004): ``family`` names it in ``capability_metrics``;
    ``estimator`` False is the target. An estimator's values are, with ``pooled``, the majority shares of the
    first k_c of its own samples (one per ``consistency_k``); with ``probe``, linear probes on its hidden states;
    else its signal's confidence, also after an isotonic map (``capability.isotonic``)."""

    family: str
    estimator: bool = True
    pooled: bool = False
    probe: bool = False

    def fitted_on_train(self, isotonic: bool) -> bool:
        """Whether an estimate is fitted on the train split (so it needs the train target)."""
        return self.probe or isotonic and not self.pooled


@dataclass(frozen=True)
class MethodReader:
    """How the rows of a method stage become the method's tables and signal rows.

    Attributes
    ----------
    name : str
        The ``reader`` of a method kind (protocols/method_kinds.py).
    stage : str
        The method stage whose rows it reads.
    collect : callable
        :data:`CollectFn`: the method's rows into the buckets of the method tables (flows/evaluate/methods.py):
        ``signals``, ``targets``, ``samples``, ``next_token``, ``hidden``, ``costs``.
    signals : tuple of str
        Suffixes of the signal names it adds to the one signal table (``("",)``: its id; ``()``: none, a target or
        features).
    rated : str or None
        The ``rated`` column of its signal rows: ``greedy_answer`` (the model's greedy answer's correctness),
        ``first_sample`` (self-consistency; its majority signal rates ``majority_answer``), ``favoured_letter``
        (letter probabilities); None without signals.
    capability : CapabilityRole or None
        Its role in capability calibration (study 004); None: it cannot serve there.
    rated_values : callable or None
        ``(plan, method, model, table) -> list of RatedValue``: the confidence of each row, for a template that shows
        the answer it rates (ACE's candidate ratings read it).
    options : bool
        Reads each item's option letters after the lettered question (study 002 Appendix E.1): items with options
        only, always renormalized over the letters (``candidates`` and ``renormalize`` do not apply).
    pools_samples : bool
        Its sampled answers rate a supplied candidate by their share (ACE's candidate view, self-consistency).
    """

    name: str
    stage: str
    collect: CollectFn
    signals: tuple[str, ...] = ("",)
    rated: str | None = "greedy_answer"
    capability: CapabilityRole | None = None
    rated_values: Callable[..., list] | None = None
    options: bool = False
    pools_samples: bool = False


#: Every reader, by name.
READERS: Registry[MethodReader] = Registry("method reader", value_type=MethodReader)


def register_reader(reader: MethodReader) -> MethodReader:
    """Register ``reader`` under its name. Raises ValueError if the name is taken."""
    return READERS.register(reader.name, reader)


def get_reader(name: str) -> MethodReader:
    """The registry entry of a reader. Raises UnknownNameError (listing the readers) for an unknown name."""
    return READERS.get(name)


class RatedValue(NamedTuple):
    """One rating read from a method shard's row: the confidence of one item, before it meets its target."""

    item_id: str
    #: the answer rated (P(True), the rating: the proposed answer shown in the template); None for kinds that rate
    #: no shown answer
    rated_answer: str | None
    #: confidence in [0, 1], or None (with its status)
    confidence: float | None
    status: str
    #: the formula's detail (P(True): the candidates' probability mass), or None
    detail: Any = None


def protocol(method: Any, spec: Any, used: dict[str, Any] | None = None) -> dict[str, Any]:
    """The protocol columns of a method's signal rows (``tables/method_signals.parquet``); ``used``: the sampling
    parameters a sample shard actually used (a model's own defaults)."""
    used = used or {}
    fields = get_stage(method.kind_entry.stage).fields
    return {"method": method.id, "kind": method.kind, "template": method.template_id(spec.elicitation.prompt),
            "k": method.n_samples if "k" in fields else None,
            "temperature": used.get("temperature", method.temperature if method.temperature != "model_default"
                                    else None),
            "top_p": used.get("top_p", method.top_p), "top_k": used.get("top_k", method.top_k),
            "seed": method.seed, "merge": method.merge if "merge" in fields else None,
            "renormalize": (True if method.reader.options else method.renormalize if "renormalize" in fields
                            else None)}


def rated_signals(plan: Any, method: Any, model: str, dataset: str, values: list[RatedValue],
                  out: dict[str, list]) -> None:
    """Signal rows of a method that rates the model's greedy answer (graded under the method's rule)."""
    rule = method.agreement_rule(plan.spec.correctness.primary)
    g = plan.answers(model, dataset, "main")  # the model's greedy answers and their correctness
    greedy = dict(zip(g["item_id"], g[f"correct_{rule}"], strict=True)) if g is not None else {}
    proto = protocol(method, plan.spec)
    for v in values:
        out["signals"].append({"model": model, "dataset": dataset, "signal": method.id, "item_id": v.item_id,
                               "confidence": v.confidence, "status": v.status, "rated": method.reader.rated,
                               "rated_answer": v.rated_answer, "correct": greedy.get(v.item_id, np.nan),
                               "rule": rule, "detail": v.detail, **proto})


def method_columns(shard: Any) -> dict[str, Any]:
    """The leading columns of a rate, next_token or hidden shard's rows (one row per request)."""
    return {"model": shard.model, "dataset": shard.dataset, "answer_set": shard.answer_set,
            "item_id": shard.item_ids, "method": shard.method, "chunk": shard.chunk,
            "rated_answer": [getattr(r, "rated_answer", "") for r in shard.rows]}


def frame(rows: list[pd.DataFrame]) -> pd.DataFrame:
    """The rows of one bucket of the method tables as one frame (an empty frame for none)."""
    return pd.concat(rows, ignore_index=True) if rows else pd.DataFrame()


def method_rows(method_signals: pd.DataFrame) -> pd.DataFrame:
    """Signal-table rows of the confidence methods (``tables/method_signals.parquet`` of flows/evaluate/methods.py).

    Each method signal is evaluated on its own items (``align`` empty); its target is the correctness of the
    answer it rates (``rated``) under the method's rule (``target_rule``).
    """
    if method_signals.empty:
        return pd.DataFrame(columns=["item_id", "signal"])
    m = method_signals
    return pd.DataFrame({
        "model": m["model"], "dataset": m["dataset"], "item_id": m["item_id"], "signal": m["signal"],
        "kind": m["kind"], "method": m["method"], "template": m["template"], "k": m["k"],
        "temperature": m["temperature"], "top_p": m["top_p"], "top_k": m["top_k"], "seed": m["seed"],
        "merge": m["merge"], "renormalize": m["renormalize"], "rated": m["rated"], "target_rule": m["rule"],
        "confidence": pd.to_numeric(m["confidence"], errors="coerce"),
        "target": pd.to_numeric(m["correct"], errors="coerce"), "status": m["status"], "align": ""})
