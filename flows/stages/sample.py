"""Method stage ``sample``: k sampled answers to the elicitation prompt (self-consistency, expected accuracy;
study 001 Appendix D.3, study 004).

Rows: ``MethodRow``; engine call ``generate`` with sampling; table ``tables/samples.parquet`` (one row per
sample, with the sampling parameters actually used), parsed and graded under the method's rule; signal rows:
the share of samples agreeing with the first (and ``<id>__majority``), or the expected-accuracy target.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from confgrid.actors.calls import CallParams, Sampling
from confgrid.flows.stages.base import Stage, prompted, register_stage
from confgrid.flows.stages.grade import grade_answers, parse_generations
from confgrid.flows.stages.method_base import CapabilityRole, MethodReader, protocol, register_reader
from confgrid.protocols.correctness import agreement_key
from confgrid.protocols.methods import agreement_share, expected_accuracy, majority_share

__all__: list[str] = []

_COLUMNS = ["item_id", "sample_idx", "raw_output", "finish_reason", "n_new_tokens", "temperature", "top_p", "top_k",
            "n", "seed"]


def _table(plan: Any, shard: Any, outputs: tuple[Any, ...]) -> pd.DataFrame:
    """One row per sample of each request."""
    rows = []
    for item_id, out in zip(shard.item_ids, outputs, strict=True):
        used = out.sampling
        for j, g in enumerate(out.samples):
            rows.append({"item_id": item_id, "sample_idx": j, "raw_output": g.text, "finish_reason": g.finish_reason,
                         "n_new_tokens": g.n_tokens, "temperature": used.temperature, "top_p": used.top_p,
                         "top_k": used.top_k, "n": used.n, "seed": used.seed})
    df = pd.DataFrame(rows, columns=_COLUMNS)
    return df.assign(model=shard.model, dataset=shard.dataset, answer_set=shard.answer_set, method=shard.method,
                     chunk=shard.chunk)[["model", "dataset", "answer_set", "method", "chunk", *df.columns]]


def _method_call(method: Any, spec: Any, n_letters: int) -> tuple[dict[str, Any], CallParams]:
    md = method.temperature == "model_default"
    sampling = Sampling(temperature=0.0 if md else float(method.temperature), top_p=method.top_p,
                        top_k=method.top_k, n=method.n_samples, seed=method.seed, from_model=md)
    budget = method.new_tokens(spec.elicitation.max_new_tokens)
    params = {"max_new_tokens": budget,
              "sampling": [sampling.temperature, sampling.top_p, sampling.top_k, sampling.n, sampling.seed,
                           "model_default" if md else "given"]}
    return params, CallParams(max_new_tokens=budget, sampling=sampling, top_logprobs=method.top_logprobs)


def _graded(plan: Any, method: Any, model: str, dataset: str, table: pd.DataFrame,
            out: dict[str, list]) -> tuple[pd.DataFrame, str, dict[str, Any]]:
    """The samples parsed with the method's template and graded under its rule (bucket ``samples``), with the
    rule and the protocol columns."""
    spec = plan.spec
    rule = method.agreement_rule(spec.correctness.primary)
    parsed = parse_generations(table, method.template_id(spec.elicitation.prompt), plan.models[model].reasoning_end)
    samples = grade_answers(parsed, plan.set_items[("main", dataset)], (rule,), rule)
    out["samples"].append(samples)
    used = {k: samples[k].iloc[0] for k in ("temperature", "top_p", "top_k")} if len(samples) else {}
    return samples.sort_values(["item_id", "sample_idx"]), rule, protocol(method, spec, used)


def _agreement(plan: Any, method: Any, model: str, dataset: str, table: pd.DataFrame, out: dict[str, list]) -> None:
    """Per item, the share of samples agreeing with the first (signal ``<id>``) and the majority answer's share
    (``<id>__majority``), each graded as the answer it rates (bucket ``signals``)."""
    samples, rule, proto = _graded(plan, method, model, dataset, table, out)
    key = agreement_key(rule)
    for item_id, g in samples.groupby("item_id", sort=True):
        answers = [a if isinstance(a, str) else None for a in g["answer"]]
        correct = g[f"correct_{rule}"].tolist()
        norm = [key(a) if a is not None and a.strip() else None for a in answers]
        for signal, c in ((method.id, agreement_share(answers, key)),
                          (f"{method.id}__majority", majority_share(answers, key))):
            rated_correct = correct[norm.index(key(c.rated))] if c.rated is not None else np.nan
            out["signals"].append({"model": model, "dataset": dataset, "signal": signal, "item_id": item_id,
                                   "confidence": c.value, "status": c.status,
                                   "rated": method.reader.rated if signal == method.id else "majority_answer",
                                   "rated_answer": c.rated, "correct": rated_correct, "rule": rule, "detail": None,
                                   **proto})


def _expected_accuracy(plan: Any, method: Any, model: str, dataset: str, table: pd.DataFrame,
                       out: dict[str, list]) -> None:
    """Per item, the mean correctness of the k samples and its standard error (bucket ``targets``)."""
    samples, rule, proto = _graded(plan, method, model, dataset, table, out)
    for item_id, g in samples.groupby("item_id", sort=True):
        ea = expected_accuracy(g[f"correct_{rule}"].tolist())
        out["targets"].append({"model": model, "dataset": dataset, "method": method.id, "item_id": item_id,
                               "expected_accuracy": ea.value, "se": ea.detail, "k": len(g),
                               "n_unparsed": int(sum(not isinstance(a, str) for a in g["answer"])), "rule": rule,
                               **{k: proto[k] for k in ("temperature", "top_p", "top_k", "seed")}})


register_stage(Stage("sample", "generate", request=prompted, table=_table, method_call=_method_call,
                     fields=("k", "temperature", "top_p", "top_k", "seed")))
register_reader(MethodReader("agreement", "sample", _agreement, signals=("", "__majority"), rated="first_sample",
                             capability=CapabilityRole("consistency", pooled=True), pools_samples=True))
register_reader(MethodReader("expected_accuracy", "sample", _expected_accuracy, signals=(), rated=None,
                             capability=CapabilityRole("target", estimator=False)))
