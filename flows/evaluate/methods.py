"""Confidence methods of a run: from stored method shards to per-item signals, targets and metrics.

Pure (no Ray, no model): everything here re-reads stored shard tables, so a
new agreement rule, merge rule or metric reruns no model. The formulas are in
protocols/methods.py; this module joins them with the answers they rate.

Tables (README "Confidence methods"):

* ``tables/samples.parquet``: every sampled answer, parsed and graded (one row
  per model, dataset, method, item, sample), with the sampling parameters
  actually used.
* ``tables/method_signals.parquet``: one row per (model, dataset, method
  signal, item): confidence (or None), status, the answer rated and its
  correctness under the method's rule, and the method's protocol.
* ``tables/targets.parquet``: expected accuracy over k samples per item, with
  its standard error (the capability target of study 004).
* ``tables/next_token.parquet``, ``tables/hidden_states.parquet``: what the
  next-token and hidden-state methods read.

Which answer a signal rates (seed 001 D.3, seed 004): self-consistency the
first sample; its ``__majority`` signal the majority answer; P(True), the
rating and verbalized-before the model's own greedy answer (the main answer
set), graded under the method's rule.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from confgrid.flows.plan.grid_plan import GridPlan
from confgrid.flows.plan.shards import ShardRequest
from confgrid.flows.spec.grid import GridSpec
from confgrid.flows.spec.methods import MethodSpec
from confgrid.flows.stages import grade_answers, relabel
from confgrid.protocols.correctness import agreement_key

__all__ = ["MethodTables", "method_tables", "RatedConfidence", "rated_confidence", "ratings_of_supplied_answers",
           "METHOD_SIGNAL_COLUMNS"]

log = logging.getLogger("confgrid")

METHOD_SIGNAL_COLUMNS = ["model", "dataset", "method", "kind", "signal", "item_id", "confidence", "status",
                         "rated", "rated_answer", "correct", "rule", "detail", "template", "k", "temperature",
                         "top_p", "top_k", "seed", "merge", "renormalize"]


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


def _protocol(method: MethodSpec, spec: GridSpec, used: dict[str, Any] | None = None) -> dict[str, Any]:
    used = used or {}
    return {"method": method.id, "kind": method.kind, "template": method.template_id(spec.elicitation.prompt),
            "k": method.n_samples if method.kind_entry.sampled else None,
            "temperature": used.get("temperature", method.temperature if method.temperature != "model_default"
                                    else None),
            "top_p": used.get("top_p", method.top_p), "top_k": used.get("top_k", method.top_k),
            "seed": method.seed, "merge": method.merge if method.kind_entry.next_token else None,
            "renormalize": (True if method.kind_entry.letters else method.renormalize if method.kind_entry.next_token
                            else None)}


def _greedy_correct(plan: GridPlan, model: str, dataset: str, rule: str) -> dict[str, float]:
    """item -> correctness of the model's greedy answer (main set) under ``rule``."""
    unit = plan.units.get((model, dataset, "main"))
    frames = [plan.graded[s.label] for s in (unit.shards if unit else []) if s.label in plan.graded]
    if not frames:
        return {}
    g = pd.concat(frames, ignore_index=True)
    return dict(zip(g["item_id"], g[f"correct_{rule}"], strict=True))


def _sample_rows(plan: GridPlan, method: MethodSpec, model: str, dataset: str, table: pd.DataFrame) -> pd.DataFrame:
    """Sampled answers parsed with the method's template and graded under its rule."""
    from confgrid.flows.stages import parse_generations

    spec = plan.spec
    rule = method.agreement_rule(spec.correctness.primary)
    parsed = parse_generations(table, method.template_id(spec.elicitation.prompt),
                               plan.models[model].reasoning_end)
    return grade_answers(parsed, plan.set_items[("main", dataset)], (rule,), rule)


def _from_samples(plan: GridPlan, method: MethodSpec, model: str, dataset: str, samples: pd.DataFrame,
                  out: dict[str, list]) -> None:
    from confgrid.protocols.methods import agreement_share, expected_accuracy, majority_share

    spec = plan.spec
    rule = method.agreement_rule(spec.correctness.primary)
    used = {k: samples[k].iloc[0] for k in ("temperature", "top_p", "top_k")} if len(samples) else {}
    proto = _protocol(method, spec, used)
    for item_id, g in samples.sort_values(["item_id", "sample_idx"]).groupby("item_id", sort=True):
        answers = [a if isinstance(a, str) else None for a in g["answer"]]
        correct = g[f"correct_{rule}"].tolist()
        if method.kind_entry.output == "target":
            ea = expected_accuracy(correct)
            out["targets"].append({"model": model, "dataset": dataset, "method": method.id, "item_id": item_id,
                                   "expected_accuracy": ea.value, "se": ea.detail, "k": len(answers),
                                   "n_unparsed": sum(a is None for a in answers), "rule": rule, **{
                                       k: proto[k] for k in ("temperature", "top_p", "top_k", "seed")}})
            continue
        key = agreement_key(rule)
        norm = [key(a) if a is not None and a.strip() else None for a in answers]
        for signal, c in ((method.id, agreement_share(answers, key)),
                          (f"{method.id}__majority", majority_share(answers, key))):
            if c.rated is not None:
                k = next(j for j, n in enumerate(norm) if n == key(c.rated))
                rated_correct = correct[k]
            else:
                rated_correct = np.nan
            out["signals"].append({"model": model, "dataset": dataset, "signal": signal, "item_id": item_id,
                                   "confidence": c.value, "status": c.status,
                                   "rated": method.kind_entry.rated if signal == method.id else "majority_answer",
                                   "rated_answer": c.rated, "correct": rated_correct, "rule": rule, "detail": None,
                                   **proto})


def _next_token_values(method: MethodSpec, table: pd.DataFrame) -> list[RatedValue]:
    """The P(True) of every row of a next-token method table."""
    from confgrid.protocols.methods import candidate_probability, p_true

    cands = method.candidate_strings()
    out = []
    for r in table.itertuples(index=False):
        status = getattr(r, "logprobs_status", "ok")  # absent from tables stored before it existed
        if status != "ok":  # an API server returned no distribution: NaN with its reason, never 0
            out.append(RatedValue(r.item_id, r.rated_answer if method.kind_entry.takes_answer else None, None,
                                  str(status)))
            continue
        top = dict(zip((int(t) for t in r.top_token_ids), (float(v) for v in r.top_logprobs), strict=True))
        ids = {c: {int(t): s for t, s in m.items()} for c, m in json.loads(r.candidate_tokens).items()}
        probs = {c: candidate_probability(ids.get(c, {}), top, c, method.merge) for c in cands}
        c = p_true(probs, cands[0], method.renormalize)
        out.append(RatedValue(r.item_id, r.rated_answer if method.kind_entry.takes_answer else None, c.value,
                              c.status, c.detail))
    return out


@dataclass(frozen=True)
class RatedConfidence:
    """What one rating or verbalized-before output states: a confidence in [0, 1] (None when it states none) and
    the parse status (``ok``, ``missing``, ``unparsed_number``, ``out_of_range``)."""

    value: float | None
    status: str


def rated_confidence(text: str | None, parser: str | None, template: str) -> RatedConfidence:
    """The confidence in [0, 1] (or None) and the status of one rating or verbalized-before output.

    ``parser`` ``boxed_rating`` (the 0-100 rating): the last ``\\boxed{N}`` / 100 (``parse_boxed``), statuses ``ok``,
    ``missing``, ``unparsed_number``, ``out_of_range``. Otherwise the stated confidence of
    ``template`` (``parse_for_prompt``): ``ok``, ``out_of_range``, ``unparsed_number``, or
    ``missing`` for every other parse status. ``text`` is the output after its reasoning block.
    """
    from confgrid.protocols.methods import parse_boxed
    from confgrid.protocols.parsing import parse_for_prompt
    from confgrid.protocols.prompts import get_prompt

    if parser == "boxed_rating":
        c = parse_boxed(text, decimal_comma=get_prompt(template).decimal_comma)
        return RatedConfidence(c.value, c.status)
    p = parse_for_prompt(text, template)
    if p.verbalized is not None:
        return RatedConfidence(p.verbalized, "ok")
    return RatedConfidence(None, p.status if p.status in ("out_of_range", "unparsed_number") else "missing")


def _rate_values(plan: GridPlan, method: MethodSpec, model: str, table: pd.DataFrame) -> list[RatedValue]:
    """The stated rating of every row of a rate-stage method table."""
    from confgrid.protocols.reasoning import strip_reasoning

    template = method.template_id(plan.spec.elicitation.prompt)
    out = []
    for r in table.itertuples(index=False):
        v = strip_reasoning(r.raw_output, plan.models[model].reasoning_end)
        c = (RatedConfidence(None, "reasoning_unterminated") if v.status == "unterminated"
             else rated_confidence(v.text, method.kind_entry.parser, template))
        out.append(RatedValue(r.item_id, r.rated_answer or None, c.value, c.status))
    return out


def _from_next_token(plan: GridPlan, method: MethodSpec, model: str, dataset: str, table: pd.DataFrame,
                     out: dict[str, list]) -> None:
    if method.kind_entry.letters:
        _letter_signals(plan, method, model, dataset, table, out)
        return
    _rated_signals(plan, method, model, dataset, _next_token_values(method, table), out)


def _letter_signals(plan: GridPlan, method: MethodSpec, model: str, dataset: str, table: pd.DataFrame,
                    out: dict[str, list]) -> None:
    """Letter token probabilities (study 002 Appendix E.1): the next-token distribution restricted to the item's
    option letters and renormalized; the favoured letter(s) scored with proportional ties against the gold letter;
    ``detail`` = how many option letters were absent from the returned top k (counted as 0, E.3)."""
    from confgrid.protocols.json_output import TIE_SEPARATOR, favoured_score, letter_distribution
    from confgrid.protocols.mc import LETTERS
    from confgrid.protocols.methods import candidate_probability

    items = {i.item_id: i for i in plan.set_items[("main", dataset)]}
    proto = _protocol(method, plan.spec)
    for r in table.itertuples(index=False):
        item = items[r.item_id]
        top = dict(zip((int(t) for t in r.top_token_ids), (float(v) for v in r.top_logprobs), strict=True))
        ids = {c: {int(t): s for t, s in m.items()} for c, m in json.loads(r.candidate_tokens).items()}
        letters = LETTERS[:len(item.options)]
        d = letter_distribution({c: candidate_probability(ids.get(c, {}), top, c, method.merge) for c in letters})
        gold = item.gold_letter.strip().upper() if item.gold_letter else None
        out["signals"].append({"model": model, "dataset": dataset, "signal": method.id, "item_id": r.item_id,
                               "confidence": d.confidence, "status": d.status, "rated": method.kind_entry.rated,
                               "rated_answer": TIE_SEPARATOR.join(d.favoured) or None,
                               "correct": favoured_score(d.favoured, gold) if d.favoured else np.nan,
                               "rule": "mc_favoured", "detail": d.n_absent, **proto})


def _from_rate(plan: GridPlan, method: MethodSpec, model: str, dataset: str, table: pd.DataFrame,
               out: dict[str, list]) -> None:
    _rated_signals(plan, method, model, dataset, _rate_values(plan, method, model, table), out)


def _rated_signals(plan: GridPlan, method: MethodSpec, model: str, dataset: str, values: list[RatedValue],
                   out: dict[str, list]) -> None:
    """Signal rows of a method that rates the model's greedy answer (graded under the method's rule)."""
    rule = method.agreement_rule(plan.spec.correctness.primary)
    greedy = _greedy_correct(plan, model, dataset, rule)
    proto = _protocol(method, plan.spec)
    for v in values:
        out["signals"].append({"model": model, "dataset": dataset, "signal": method.id, "item_id": v.item_id,
                               "confidence": v.confidence, "status": v.status, "rated": method.kind_entry.rated,
                               "rated_answer": v.rated_answer, "correct": greedy.get(v.item_id, np.nan),
                               "rule": rule, "detail": v.detail, **proto})


def ratings_of_supplied_answers(plan: GridPlan, method: MethodSpec, model: str, table: pd.DataFrame) -> pd.DataFrame:
    """A rating method's confidence in each supplied answer of a shard table (candidate ratings of ACE's CA view).

    Returns
    -------
    DataFrame
        Columns item_id, rated_answer, confidence (float in [0, 1] or None), status.
    """
    values = (_next_token_values(method, table) if method.kind_entry.next_token
              else _rate_values(plan, method, model, table))
    return pd.DataFrame([v[:4] for v in values], columns=list(RatedValue._fields[:4]))


def method_tables(plan: GridPlan, done: dict[str, pd.DataFrame], shards: list[ShardRequest]) -> MethodTables:
    """Gather the method shards of a run into tables (see the module docstring).

    A (model, dataset, method) with a shard missing (failed or not run) is
    left out and named in :attr:`MethodTables.incomplete`.
    """
    spec = plan.spec
    out: dict[str, list] = {"signals": [], "targets": [], "samples": [], "next_token": [], "hidden": [], "costs": []}
    tables = MethodTables()
    by_method: dict[tuple[str, str, str], list[ShardRequest]] = {}
    for sh in shards:
        if sh.method and sh.part != "ca":  # candidate ratings (comparison view ca) are read by flows/evaluate/ace.py
            by_method.setdefault((sh.model, sh.dataset, sh.method), []).append(sh)
    methods = {m.id: m for m in spec.methods}
    for (model, dataset, mid), shs in by_method.items():
        method = methods[mid]
        uniq = list({s.label: s for s in shs}.values())
        if any(s.key not in done for s in uniq):
            tables.incomplete.append(f"{model}/{dataset}/{mid}")
            log.warning("%s/%s: method %s has shards missing; left out of the method tables", model, dataset, mid)
            continue
        frames = [relabel(done[s.key], model=model, dataset=dataset, method=mid, chunk=s.chunk) for s in uniq]
        table = pd.concat(frames, ignore_index=True)
        stage = uniq[0].stage
        if stage == "sample":
            graded = _sample_rows(plan, method, model, dataset, table)
            out["samples"].append(graded)
            _from_samples(plan, method, model, dataset, graded, out)
        elif stage == "next_token":
            out["next_token"].append(table)
            _from_next_token(plan, method, model, dataset, table, out)
        elif stage == "rate":
            _from_rate(plan, method, model, dataset, table, out)
            out["costs"].append(table[["model", "dataset", "method", "item_id", "n_new_tokens"]].rename(
                columns={"n_new_tokens": "generated_tokens"}))
        else:
            out["hidden"].append(table)
    tables.samples = pd.concat(out["samples"], ignore_index=True) if out["samples"] else pd.DataFrame()
    tables.signals = pd.DataFrame(out["signals"], columns=METHOD_SIGNAL_COLUMNS)
    tables.targets = pd.DataFrame(out["targets"])
    tables.next_token = pd.concat(out["next_token"], ignore_index=True) if out["next_token"] else pd.DataFrame()
    tables.hidden = pd.concat(out["hidden"], ignore_index=True) if out["hidden"] else pd.DataFrame()
    tables.costs = pd.concat(out["costs"], ignore_index=True) if out["costs"] else pd.DataFrame()
    return tables
