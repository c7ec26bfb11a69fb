"""The producers of a run's one signal table (analysis/signals.py): the answer's signals and the methods'.

* :func:`answer_rows`: per (model, dataset, answer set) unit and (parse
  policy, refusal policy, correctness rule), the verbalized score and the
  token score of every scoring context and token aggregation of each graded
  answer, usable or not, with its status. They share the ``align`` label
  ``answer``: they are evaluated on the answers where all of them are usable
  (study 000 section 3.1).
* :func:`method_rows`: every confidence method's rows (flows/evaluate/methods.py
  ``tables/method_signals.parquet``), each on its own items.
* :func:`probe_rows`: the supplied-answer probe (study 000 section 3.6): one
  signal ``probe_<kind>`` per supplied-answer kind, the stated probability
  graded by the unit's rule against the answer that was supplied.
* :func:`run_signal_table`: both, every method row placed in the units of the
  main answer set whose correctness rule grades it.
* :class:`ProducerRows`: rows a later producer adds in units of its own, with
  the metrics those units are evaluated under (the capability estimators of
  study 004, flows/evaluate/capability.py).

Pure (pandas); nothing here calls a model.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from confgrid.analysis.signals import conform
from confgrid.flows.spec.grid import GridSpec
from confgrid.flows.stages.grade import REFUSAL_POLICIES
from confgrid.flows.stages.score import token_signal
from confgrid.flows.tables.assemble import Unit
from confgrid.protocols.correctness import get_rule
from confgrid.protocols.items import Item
from confgrid.protocols.json_output import chance_answer
from confgrid.protocols.parsing import ParseResult, apply_parse_policy

__all__ = ["answer_rows", "method_rows", "probe_rows", "run_signal_table", "unit_keys", "ANSWER_ALIGN", "CAPABILITY_SET",
           "ProducerRows"]

#: The ``align`` label of the signals of one answer (verbalized and token scores).
ANSWER_ALIGN = "answer"
#: The answer-set label of the capability estimators' units (study 004; flows/evaluate/capability.py).
CAPABILITY_SET = "capability"


@dataclass(frozen=True)
class ProducerRows:
    """Signal-table rows of a producer whose units are its own, with the metrics they are evaluated under.

    Attributes
    ----------
    rows : DataFrame
        Conformed to :data:`~confgrid.analysis.signals.SCHEMA`; their units (the unit columns) are not units of
        the answer sets (e.g. answer set ``capability``).
    metrics : tuple of str
        Registered metric names (analysis/registry.py) for these units; empty: the grid's
        (``metrics.names``).
    """

    rows: pd.DataFrame
    metrics: tuple[str, ...] = ()


def _item_status(g: pd.DataFrame, policy: str, verbalized: bool) -> pd.Series:
    """Each graded row's status under the parse policy (``ok``: an answer and, when ``verbalized``, a score)."""
    status = []
    for ans, verb, st, fb in zip(g["answer"], g["verbalized"], g["parse_status"], g["used_fallback"], strict=True):
        r = apply_parse_policy(ParseResult(ans if isinstance(ans, str) else None,
                                           None if pd.isna(verb) else float(verb), st, bool(fb)), policy)
        status.append("ok" if (not verbalized and r.answer is not None and r.answer.strip()) else r.status)
    return pd.Series(status, index=g.index, dtype=object)


def _chance(g: pd.DataFrame, status: pd.Series, items: list[Item], corr_col: str, rule: str,
            seed: int, run: str) -> pd.DataFrame:
    """Rows whose parse failed answered by chance (study 003 section 3.2): letter, 1/k and its correctness.

    Returns a frame indexed like ``g`` with columns ``confidence`` (1/k, NaN if not replaced) and ``target``.
    """
    by_id = {it.item_id: it for it in items}
    fn = get_rule(rule)
    out = pd.DataFrame({"confidence": np.nan, "target": np.nan}, index=g.index)
    for idx in status.index[status != "ok"]:
        item = by_id.get(g.at[idx, "item_id"])
        if item is None or not item.options:
            continue
        k = len(item.options)
        letter = chance_answer(seed, item.item_id, k, run)
        out.loc[idx] = (1.0 / k, float(fn(letter, item)))
    return out


def answer_rows(graded: pd.DataFrame, tokens: pd.DataFrame, contexts: tuple[str, ...], *,
                aggregations: tuple[str, ...] = ("geometric_mean",), policy: str = "label_or_fallback",
                rule: str, verbalized: bool = True, refusal: str = "drop", items: list[Item] | None = None,
                chance_seed: int = 0, chance_run: str = "") -> pd.DataFrame:
    """Signal rows of one answer set's graded answers: the verbalized score and every token score.

    Parameters
    ----------
    graded : DataFrame
        ``tables/graded`` rows of one (model, dataset, answer set): item_id, answer, verbalized,
        parse_status, used_fallback, ``correct_<rule>``.
    tokens : DataFrame
        Aggregated token scores (flows/stages/score.py ``aggregate_scores``): item_id, context_id,
        ``token_score__<aggregation>``.
    contexts, aggregations : tuple of str
        Scoring contexts and token aggregations (the first is the primary one: signal ``token_<context>``;
        the others ``token_<context>__<aggregation>``).
    policy : str
        Parse policy (protocols/parsing.py ``apply_parse_policy``).
    rule : str
        Correctness rule: the target is ``correct_<rule>`` (0/1 or graded in [0, 1]).
    verbalized : bool
        The answer set states a confidence (else no verbalized row; an answer alone is ``ok``).
    refusal : str
        ``drop`` or ``chance`` (study 003 section 3.2): a row of an item with options whose parse failed is
        answered by a seeded random letter (:func:`~confgrid.protocols.json_output.chance_answer` of
        ``chance_seed``, the item and ``chance_run``) with confidence 1/k in every signal (``replaced``).
    items : list of Item
        The answer set's items (options for ``chance``).

    Returns
    -------
    DataFrame
        Signal-table rows without unit labels: item_id, signal, kind, context, aggregation, confidence,
        target, status, replaced, rated (``own_answer``), target_rule, align (``answer``). Status:
        ``ok``; the parse status under the policy; ``rule_undefined`` (no label under the rule);
        ``token_score_missing``.

    Raises
    ------
    ValueError
        ``refusal`` outside :data:`~confgrid.flows.stages.grade.REFUSAL_POLICIES`.
    """
    if refusal not in REFUSAL_POLICIES:
        raise ValueError(f"refusal={refusal!r}; allowed: {list(REFUSAL_POLICIES)}")
    if graded.empty:
        return pd.DataFrame(columns=["item_id", "signal"])
    g = graded.reset_index(drop=True)
    corr_col = f"correct_{rule}"
    status = _item_status(g, policy, verbalized)
    target = g[corr_col].astype(float)
    replaced = pd.Series(False, index=g.index)
    chance = None
    if refusal == "chance":
        chance = _chance(g, status, items or [], corr_col, rule, chance_seed, chance_run)
        replaced = chance["confidence"].notna()
        status = status.where(~replaced, "ok")
        target = target.where(~replaced, chance["target"])
    answered = (g["answer"].map(lambda a: isinstance(a, str) and bool(a.strip())) | replaced).to_numpy(bool)
    target_v = target.to_numpy(np.float64)
    base_status = status.where(status != "ok", np.where(np.isnan(target_v), "rule_undefined", "ok")).to_numpy(object)
    n = len(g)
    item_ids, replaced_v = g["item_id"].to_numpy(object), replaced.to_numpy(bool)
    # one block of n rows per signal, stacked column by column into one frame (a frame per signal is slow)
    blocks: dict[str, list] = {c: [] for c in ("signal", "kind", "context", "aggregation", "confidence", "status")}

    def add(signal: str, kind: str, context: str, aggregation: str, confidence: np.ndarray, st: np.ndarray) -> None:
        for col, v in (("signal", signal), ("kind", kind), ("context", context), ("aggregation", aggregation)):
            blocks[col].append(np.full(n, v, dtype=object))
        blocks["confidence"].append(np.asarray(confidence, dtype=np.float64))
        blocks["status"].append(np.asarray(st, dtype=object))

    chance_conf = chance["confidence"].to_numpy(np.float64) if chance is not None else None
    if verbalized:
        conf = g["verbalized"].astype(float).to_numpy(np.float64)
        add("verbalized", "verbalized", "", "", np.where(replaced_v, chance_conf, conf) if chance is not None
            else np.where(replaced_v, np.nan, conf), base_status)
    primary = aggregations[0]
    by_ctx = ({c: t.set_index("item_id") for c, t in tokens.drop_duplicates(["context_id", "item_id"])
               .groupby("context_id", sort=False)} if len(tokens) else {})
    status_v = status.to_numpy(object)
    for ctx in contexts:
        t = by_ctx.get(ctx, pd.DataFrame())
        for agg in aggregations:
            col = f"token_score__{agg}"
            score = (g["item_id"].map(t[col]).astype(float).to_numpy(np.float64) if col in t
                     else np.full(n, np.nan))
            if chance is not None:
                score = np.where(replaced_v, chance_conf, score)
            st = np.where(~answered, status_v, np.where(np.isnan(target_v), "rule_undefined",
                                                        np.where(np.isfinite(score), "ok", "token_score_missing")))
            add(token_signal(ctx, agg, primary), "token", ctx, agg, score, st)
    k = len(blocks["signal"])
    if not k:
        return pd.DataFrame(columns=["item_id", "signal"])
    out = pd.DataFrame({c: np.concatenate(v) for c, v in blocks.items()})
    out.insert(0, "item_id", np.tile(item_ids, k))
    return out.assign(target=np.tile(target_v, k), replaced=np.tile(replaced_v, k), rated="own_answer",
                      target_rule=rule, align=ANSWER_ALIGN)


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
        "target": pd.to_numeric(m["correct"], errors="coerce"), "status": m["status"], "align": "",
    })


def probe_rows(probe: pd.DataFrame, items: list[Item], rule: str) -> pd.DataFrame:
    """Signal-table rows of the supplied-answer probe of one answer set (study 000 section 3.6, Appendix I).

    Parameters
    ----------
    probe : DataFrame
        ``tables/probe`` rows of one (model, dataset, answer set): item_id, kind (protocols/probe.py
        ``SUPPLIED_KINDS``), answer (the supplied answer), verbalized (the stated probability, NaN if none),
        parse_status.
    items : list of Item
        The answer set's items (for grading).
    rule : str
        The unit's correctness rule: the target is the supplied answer's correctness under it.

    Returns
    -------
    DataFrame
        Rows without unit labels: item_id, signal ``probe_<kind>``, kind ``probe``, rated ``supplied``,
        target_rule, confidence, target, status (the probe's parse status; ``rule_undefined`` where the rule
        cannot grade the item), align empty (each kind on its own items). The first row of an (item, kind) is kept.
    """
    if probe is None or probe.empty:
        return pd.DataFrame(columns=["item_id", "signal"])
    p = probe.drop_duplicates(["item_id", "kind"]).reset_index(drop=True)
    by_id = {it.item_id: it for it in items}
    fn = get_rule(rule)
    target = np.array([float(fn(a, by_id[i])) if i in by_id and isinstance(a, str) else np.nan
                       for i, a in zip(p["item_id"], p["answer"], strict=True)], dtype=np.float64)
    conf = pd.to_numeric(p["verbalized"], errors="coerce").to_numpy(np.float64)
    status = np.where(p["parse_status"].astype(str) != "ok", p["parse_status"].astype(str),
                      np.where(np.isnan(target), "rule_undefined", "ok"))
    return pd.DataFrame({"item_id": p["item_id"], "signal": "probe_" + p["kind"].astype(str), "kind": "probe",
                         "rated": "supplied", "target_rule": rule, "confidence": conf, "target": target,
                         "status": status, "align": ""})


def _refusals(spec: GridSpec, a) -> tuple[str, ...]:
    """Refusal policies evaluated for an answer set: ``chance`` only where it shows options (format mc)."""
    if a.format == "mc":
        return spec.parsing.refusal
    return tuple(dict.fromkeys(r if r != "chance" else "drop" for r in spec.parsing.refusal))


def unit_keys(spec: GridSpec, units: dict[tuple[str, str, str], Unit]) -> list[dict[str, str]]:
    """The units of pairing of a run: every (model, dataset, answer set) x parse policy x refusal x rule."""
    return _keys(spec, [(m, d, u.answer_set) for (m, d, _), u in units.items()])


def _keys(spec: GridSpec, sets: list) -> list[dict[str, str]]:
    out = []
    for m, d, a in sets:
        aid = a.id
        for policy in spec.parsing.policies:
            for refusal in _refusals(spec, a):
                for rule in a.analysis_rules(spec.correctness.rules):
                    out.append({"setting": f"{m}/{d}", "model": m, "dataset": d, "answer_set": aid,
                                "parse_policy": policy, "refusal": refusal, "rule": rule})
    return out


def run_signal_table(spec: GridSpec, units: dict[tuple[str, str, str], Unit],
                     method_signals: pd.DataFrame | None = None) -> pd.DataFrame:
    """The run's one signal table (``tables/signals.parquet``): every unit's answer rows and method rows.

    A method's rows join the units of the main answer set (every parse and refusal policy) whose rule is the
    method's rule; a method graded under a rule the main set is not analyzed under (e.g. ``mc_favoured`` of
    letter probabilities) joins the units of the set's first rule, its ``target_rule`` saying how it is graded.

    Returns
    -------
    DataFrame
        Conformed to :data:`~confgrid.analysis.signals.SCHEMA` (with its header when empty).
    """
    frames = []
    for key in unit_keys(spec, units):
        u = units[(key["model"], key["dataset"], key["answer_set"])]
        a = u.answer_set
        rows = answer_rows(u.graded, u.tokens, a.scoring_contexts(spec.scoring.contexts),
                           aggregations=spec.scoring.aggregations, policy=key["parse_policy"], rule=key["rule"],
                           verbalized=a.verbalized_source() != "none", refusal=key["refusal"], items=u.items,
                           chance_seed=spec.parsing.chance_seed, chance_run=key["answer_set"])
        if len(rows):
            frames.append(conform(rows, **key))
        if u.probe is not None and len(u.probe) and a.verbalized_source() != "probe":  # an extra signal
            probes = probe_rows(u.probe, u.items, key["rule"])
            if len(probes):
                frames.append(conform(probes, **key))
    methods = method_rows(method_signals if method_signals is not None else pd.DataFrame())
    if len(methods):
        main_set = next(a for a in spec.all_answer_sets() if a.id == "main")
        main = [k for k in _keys(spec, [(m.name, d.name, main_set) for m, d in spec.settings()])]
        for (m, d, rule), g in methods.groupby(["model", "dataset", "target_rule"], sort=False):
            mine = [k for k in main if k["model"] == m and k["dataset"] == d]
            rules = list(dict.fromkeys(k["rule"] for k in mine))
            join = rule if rule in rules else (rules[0] if rules else None)
            for key in (k for k in mine if k["rule"] == join):
                frames.append(conform(g.drop(columns=["model", "dataset"]), **key))
    return conform(pd.concat(frames, ignore_index=True)) if frames else conform(pd.DataFrame())
