"""The plan: what a grid computes, as named, typed shard requests (pure: no Ray, no model).

A grid expands into shards. A shard is (stage, model, dataset, answer set, chunk of items, the axis values that stage
depends on); its key hashes exactly those inputs (flows/store/run_store.py), so a shard is computed once and found
again by any later grid that needs it.

The plan is incremental, because later stages read earlier outputs: the generate shards are known from the spec and
the items; a finished generate shard is parsed and graded here (pure, on the driver) and yields its score shards (one
per scoring context) and the probe shards that need only the model's own answers; the probe kinds that need *other*
models' answers (``plausible_wrong`` and, where none exists, ``off_type``) are planned once every model's main answers
on that dataset exist. :class:`GridPlan` holds that state; the executor (flows/execute/executor.py) only runs what it
returns, so the whole chain is unit-testable by feeding it outputs by hand.

Study 000 section 3 (the stages), section 3.6 and Appendix I (the probe).
"""

from __future__ import annotations

import logging
import dataclasses
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from confgrid.actors.calls import CallParams
from confgrid.analysis.ace.candidates import candidate_pool
from confgrid.flows.plan.shards import ShardRequest
from confgrid.flows.spec.answers import AnswerSetSpec
from confgrid.flows.spec.api import api_problems
from confgrid.flows.spec.grid import GridSpec, ModelSpec
from confgrid.flows.spec.methods import MethodSpec
from confgrid.flows.stages.base import MethodRow, get_stage, relabel
from confgrid.flows.stages.grade import grade_answers, parse_generations
from confgrid.flows.stages.generate import GenerateRow
from confgrid.flows.stages.probe import ProbeRow
from confgrid.flows.stages.score import score_requests
from confgrid.flows.store.run_store import shard_key
from confgrid.protocols.contexts import get_context
from confgrid.protocols.correctness import normalize
from confgrid.protocols.item_formats import item_format
from confgrid.protocols.items import Item
from confgrid.protocols.mc import shuffle_options
from confgrid.protocols.probe import PROBE_MAX_NEW_TOKENS, probe_request, supplied_answers
from confgrid.protocols.prompts import Prompt, get_prompt
from confgrid.protocols.splits import train_eval_split

__all__ = ["GridPlan", "model_identity", "OWN_PROBE_KINDS", "CROSS_PROBE_KINDS"]

log = logging.getLogger("confgrid")

#: Probe kinds that need only the model's own answers and the dataset.
OWN_PROBE_KINDS = ("canonical", "first_alias", "own")
#: Probe kinds that need the other models' answers (``off_type`` only where no plausible wrong answer exists).
CROSS_PROBE_KINDS = ("plausible_wrong", "off_type")


def model_identity(m: ModelSpec) -> dict[str, Any]:
    """The model inputs every shard key depends on (not batch size, replicas or engine limits).

    An API model adds its ``base_url`` (two servers may serve different models under one name) but not its key,
    concurrency, time-out or retries."""
    ident = {"model": m.model, "revision": m.revision, "backend": m.backend, "dtype": m.dtype,
             "chat_template": m.chat_template, "tensor_parallel_size": m.tensor_parallel_size}
    if m.generation_bos is not None or m.scoring_bos is not None:
        ident["bos"] = [m.generation_bos, m.scoring_bos]
    if m.chat_template_kwargs:
        ident["chat_template_kwargs"] = dict(sorted(m.chat_template_kwargs.items()))
    if m.api is not None:  # an API model: the server is part of what the model is; how it is reached is not
        ident["base_url"] = m.api.base_url
        if m.api.assistant_prefill:
            ident["assistant_prefill"] = True
    return ident


def _chunks(seq: list, size: int) -> list[list]:
    return [seq[i : i + size] for i in range(0, len(seq), size)]


def _probe_rows(question: str, item_id: str, prompt_id: str, supplied) -> list[ProbeRow]:
    """The probe requests of one item's supplied answers (protocols/probe.py ``probe_request``)."""
    reqs = [(s, probe_request(question, s.answer, prompt_id)) for s in supplied]
    return [ProbeRow(item_id, r.user_text, r.assistant_prefix, s.kind, s.answer, prompt_id, s.source or "")
            for s, r in reqs]


def set_items(a: AnswerSetSpec, its: list[Item]) -> list[Item]:
    """The items an answer set asks: all for open sets; items with options (shuffled if asked) for mc."""
    if not a.item_format.options:
        return its

    with_opts = [i for i in its if i.options]
    return [shuffle_options(i, a.shuffle_seed) for i in with_opts] if a.shuffle_options else with_opts


def check_items(spec: GridSpec, items: dict[str, list[Item]]) -> list[tuple[str, str]]:
    """What the loaded items make impossible in ``spec``, found before any model is loaded.

    What the grid asks of an API model that chat completions cannot do (flows/spec/api.py ``api_problems``; parse_grid
    checks it too). A scoring context that shows lettered options (``item_format: mc``) needs every item of the answer
    set to have options; a multiple-choice answer set (``format: mc``) needs a dataset with at least one item that has
    options. ``items``: every dataset's loaded items, by name.

    Returns ``(field, message)`` problems (:class:`~confgrid.flows.spec.grid.GridSpecError` entries, raised by the
    caller); empty if the grid can run.
    """
    problems: list[tuple[str, str]] = api_problems(spec)  # a grid built in Python skips parse_grid's check
    for i, a in enumerate(spec.all_answer_sets()):
        where = "elicitation" if a.id == "main" else f"answer_sets[{i - 1}]"
        ctx_field = ("scoring.contexts" if a.id == "main" or (a.contexts is None and a.item_format.contexts is None)
                     else f"{where}.contexts")
        mc_ctx = [c for c in a.scoring_contexts(spec.scoring.contexts)
                  if item_format(get_context(c).item_format).options]
        if a.item_format.options:
            bare = [d for d in spec.datasets if not any(it.options for it in items.get(d.name, []))]
            if len(bare) == len(spec.datasets):
                problems.append((f"{where}.format", f"'mc' asks lettered options, but no dataset of the grid has "
                                 f"any ({', '.join(f'{d.name!r} ({d.adapter})' for d in bare)}); use format 'open' "
                                 "or add a dataset with options (mmlu, a custom one with options)"))
                continue
            if bare:
                log.info("answer set %s (mc): asked on %s only; %s have no options", a.id,
                         ", ".join(d.name for d in spec.datasets if d not in bare), ", ".join(d.name for d in bare))
        for d in spec.datasets:
            asked = set_items(a, items.get(d.name, []))
            bare = [it.item_id for it in asked if not it.options]
            if bare and mc_ctx:
                problems.append((ctx_field, f"{', '.join(map(repr, mc_ctx))} show(s) lettered options, but "
                                 f"{len(bare)} of {len(asked)} items of dataset {d.name!r} ({d.adapter}) have none "
                                 f"(e.g. {bare[0]!r}); allowed for it: contexts with item_format 'open'"))
    problems += _check_json_items(spec, items)
    return problems


def _check_json_items(spec: GridSpec, items: dict[str, list[Item]]) -> list[tuple[str, str]]:
    """JSON prompts and letter probabilities against the loaded items (:func:`check_items`)."""
    problems: list[tuple[str, str]] = []
    for i, a in enumerate(spec.answer_sets):
        p = get_prompt(a.prompt)
        where = f"answer_sets[{i}]"
        if p.reader.options and not a.item_format.options:
            problems.append((f"{where}.format", f"prompt {p.id!r} asks a probability per option letter (output "
                             "json_options); it needs format 'mc' (the options shown)"))
        if not p.asks_answer:
            asked = [it for d in spec.datasets for it in set_items(a, items.get(d.name, []))]
            bare = [it.item_id for it in asked if not it.metadata.get("given_answer")]
            if bare:
                problems.append((f"{where}.prompt", f"prompt {p.id!r} asks a probability for a supplied answer "
                                 f"(answer_key null), but {len(bare)} of {len(asked)} items carry none (e.g. "
                                 f"{bare[0]!r}); allowed: datasets whose items have metadata given_answer "
                                 "(adapter halueval_qa)"))
    main = get_prompt(spec.elicitation.prompt)
    if not main.asks_answer or main.reader.options:
        why = "asks no answer" if not main.asks_answer else "a probability per option"
        problems.append(("elicitation.prompt", f"prompt {main.id!r} ({why}) needs an answer set (answer_sets[]): the "
                         "main set asks open questions"))
    for j, m in enumerate(spec.methods):
        if m.reader.options and not any(it.options for its in items.values() for it in its):
            problems.append((f"methods[{j}].kind", f"{m.kind} reads the option letters, but no dataset "
                             "of the grid has items with options (mmlu, mmlu_pro, agieval_*, boolq, a custom one "
                             "with options)"))
    return problems


@dataclass
class _Unit:
    """The generate shards of one (model, dataset, answer set), which of them settled, and the graded answers of those
    done (by shard label: two shards of different models may share a key)."""

    shards: list[ShardRequest] = field(default_factory=list)
    done: set[str] = field(default_factory=set)
    failed: set[str] = field(default_factory=set)
    graded: dict[str, pd.DataFrame] = field(default_factory=dict)

    @property
    def settled(self) -> bool:
        return len(self.done) + len(self.failed) >= len({s.key for s in self.shards})


class GridPlan:
    """The grid's shard requests, planned stage by stage as outputs arrive (``items``: every dataset's loaded items).

    Calls: :meth:`generate_shards` once, then :meth:`on_done` for every shard that finished (computed or reused) and
    :meth:`on_failed` for every shard that failed; each returns the shards that became plannable. The graded answers
    of every finished generate shard are kept with its unit (:meth:`answers`).
    """

    def __init__(self, spec: GridSpec, items: dict[str, list[Item]]) -> None:
        self.spec = spec
        self.items = items
        self.sets = spec.all_answer_sets()
        self.set_of = {a.id: a for a in self.sets}
        self.models = {m.name: m for m in spec.models}
        self.set_items = {(a.id, d.name): set_items(a, items[d.name]) for a in self.sets for d in spec.datasets}
        self.units: dict[tuple[str, str, str], _Unit] = {}
        self._cross_done: set[tuple[str, str]] = set()  # (model, dataset) whose cross probe is planned
        self._blocked: dict[str, str] = {}  # dataset -> why its cross probe cannot be planned
        self.ca_rule = spec.comparison.rule or spec.correctness.primary
        self.grade_rules = tuple(dict.fromkeys((*spec.correctness.rules, spec.probe.rule,
                                                *(m.rule for m in spec.methods if m.rule),
                                                *((self.ca_rule,) if spec.comparison.enabled else ()))))
        self._ca_done: set[str] = set()  # datasets whose candidate-rating shards are planned
        #: early stopping (``execution.stop_when_resolved``): (model, dataset) -> the item ids admitted so far; a
        #: generate shard (any answer set) or an item-only method shard runs once all its items are admitted.
        #: None: every shard runs (no early stopping).
        self.admitted: dict[tuple[str, str], set[str]] | None = (
            {(m.name, d.name): set() for m in spec.models for d in spec.datasets}
            if spec.execution.stopping is not None else None)
        self._held: dict[tuple[str, str], list[ShardRequest]] = {}  # shards waiting for their items' round
        self.final: set[tuple[str, str]] = set()  # settings whose last round is admitted (early stopping)
        cap = spec.capability
        #: dataset -> {item_id: "train" | "eval"} of the capability section (empty without one)
        self.splits: dict[str, dict[str, str]] = {
            d.name: train_eval_split([i.item_id for i in self.set_items[("main", d.name)]], d.name,
                                     cap.train_fraction, cap.split_seed) for d in spec.datasets} if cap.enabled else {}

    def in_split(self, method: MethodSpec, dataset: str, item_id: str) -> bool:
        """Whether a method with ``split`` train or eval runs on the item (every item for split all)."""
        return method.split == "all" or self.splits.get(dataset, {}).get(item_id) == method.split

    # -- generate -----------------------------------------------------------------------
    def generate_shards(self) -> list[ShardRequest]:
        """Every generate shard of the grid: one per (model, answer set, dataset, chunk of items), in model order."""
        out: list[ShardRequest] = []
        size = self.spec.execution.shard_size
        for m in self.spec.models:
            ident = model_identity(m)
            for a in self.sets:
                prompt = get_prompt(a.prompt)
                smp = a.sampling
                decoding: Any = "greedy" if smp is None else ["sampling", smp.temperature, smp.top_p, smp.seed]
                for d in self.spec.datasets:
                    self.units.setdefault((m.name, d.name, a.id), _Unit())
                    for c, chunk in enumerate(_chunks(self.set_items[(a.id, d.name)], size)):
                        rows = tuple(GenerateRow(i.item_id, prompt.render(a.item_format.question(i))) for i in chunk)
                        key = shard_key("generate", {
                            "model": ident, "prompt": prompt.template, "prompt_id": prompt.id, "format": a.format,
                            "max_new_tokens": a.new_tokens, "decoding": decoding,
                            "items": [(r.item_id, r.user_text) for r in rows]})
                        out.append(ShardRequest("generate", m.name, d.name, a.id, c, key, rows,
                                                call=CallParams(max_new_tokens=a.new_tokens, sampling=smp)))
        return self._let_through(out + self._method_shards_from_items())

    # -- early stopping (execution.stop_when_resolved) ---------------------------------------
    def _let_through(self, shards: list[ShardRequest]) -> list[ShardRequest]:
        """The shards whose items are all admitted (every shard without early stopping); the others are held for
        :meth:`admit`. Generate shards let through join their unit."""
        out = []
        for sh in shards:
            setting = (sh.model, sh.dataset)
            if self.admitted is not None and not set(sh.item_ids) <= self.admitted[setting]:
                self._held.setdefault(setting, []).append(sh)
                continue
            if sh.answers:
                self.units[(sh.model, sh.dataset, sh.answer_set)].shards.append(sh)
            out.append(sh)
        return out

    def main_chunks(self, dataset: str) -> list[list[str]]:
        """The item ids of each generate chunk of the main answer set on ``dataset`` (chunk ``c`` is element ``c``):
        the units early stopping admits round by round."""
        return [[i.item_id for i in chunk]
                for chunk in _chunks(self.set_items[("main", dataset)], self.spec.execution.shard_size)]

    def admit(self, model: str, dataset: str, item_ids) -> list[ShardRequest]:
        """Early stopping: admit more items of the setting (model, dataset); returns the held generate and item-only
        method shards whose items are now all admitted (keys unchanged: the shards are the ones a run without early
        stopping plans)."""
        if self.admitted is None:
            raise ValueError("admit: this grid has no execution.stop_when_resolved (every shard is planned)")
        setting = (model, dataset)
        self.admitted[setting].update(item_ids)
        return self._let_through(self._held.pop(setting, []))

    def finalize(self, model: str, dataset: str) -> list[ShardRequest]:
        """Early stopping: the setting runs no further round (its held shards never run). Returns the cross-model work
        of the dataset (probe kinds needing other models' answers, candidate ratings) once every model's setting on it
        is final."""
        self.final.add((model, dataset))
        self._held.pop((model, dataset), None)
        return self._cross_probe_shards(dataset) + self._ca_shards(dataset)

    def _rounds_open(self, dataset: str) -> list[str]:
        """Models whose setting on ``dataset`` may still admit items (early stopping): cross-model work waits."""
        if self.admitted is None:
            return []
        return [m for m in self.models if (m, dataset) not in self.final]

    def _settled_main(self, dataset: str) -> dict[str, _Unit] | None:
        """Every model's main unit on ``dataset`` once all settled, none failed and no round is open; else None."""
        units = {m: u for m in self.models if (u := self.units.get((m, dataset, "main"))) is not None and u.shards}
        if not units or not all(u.settled for u in units.values()) or any(u.failed for u in units.values()):
            return None
        return None if self._rounds_open(dataset) else units

    # -- confidence methods -------------------------------------------------------------
    def _prompt(self, method: MethodSpec) -> Prompt:
        return get_prompt(method.template_id(self.spec.elicitation.prompt))

    def _raters_of(self, model: str) -> list[tuple[MethodSpec, Prompt]]:
        """The methods that rate ``model``'s own answers (P(True) verification, 0-100 rating), with their prompts."""
        return [(m, p) for m in self.spec.methods
                if (p := self._prompt(m)).takes_answer and model in {x.name for x in self.spec.method_models(m)}]

    def _method_shard(self, method: Any, model: str, dataset: str, chunk: int, rows: list[MethodRow],
                      upstream: tuple[str, ...] = (), n_letters: int = 0) -> ShardRequest:
        """One shard of a method: its stage, engine-call parameters and content key."""
        stage = get_stage(method.kind_entry.stage)
        prompt = self._prompt(method)
        params, call = stage.method_call(method, self.spec, n_letters)
        key = shard_key(stage.name, {"model": model_identity(self.models[model]), "prompt": prompt.template,
                                     **params, "requests": [(r.item_id, r.user_text, r.assistant_prefix)
                                                            for r in rows]})
        return ShardRequest(stage.name, model, dataset, "main", chunk, key, tuple(rows), upstream=upstream,
                            method=method.id, call=call)

    def _method_shards_from_items(self) -> list[ShardRequest]:
        """Methods that need only the questions: samples, capability P(True), verbalized before, hidden states."""
        out = []
        size = self.spec.execution.shard_size
        for method in self.spec.methods:
            prompt = self._prompt(method)
            if prompt.takes_answer:
                continue
            letters = method.reader.options  # the lettered question; items with options only
            shown = item_format("mc" if letters else "open")
            for m in self.spec.method_models(method):
                for d in self.spec.datasets:
                    its = [i for i in self.set_items[("main", d.name)]
                           if (i.options or not letters) and self.in_split(method, d.name, i.item_id)]
                    n_letters = max((len(i.options) for i in its), default=0) if letters else 0
                    for c, chunk in enumerate(_chunks(its, size)):
                        rows = [MethodRow(i.item_id, prompt.render(shown.question(i)),
                                          assistant_prefix=method.assistant_prefix) for i in chunk]
                        out.append(self._method_shard(method, m.name, d.name, c, rows, n_letters=n_letters))
        return out

    def _method_shards_from_answers(self, gen: ShardRequest, graded: pd.DataFrame) -> list[ShardRequest]:
        """Methods that rate the model's own answer (P(True) verification, 0-100 rating): after its generate shard."""
        if gen.answer_set != "main":
            return []
        out = []
        by_id = {i.item_id: i for i in self.set_items[("main", gen.dataset)]}
        for method, prompt in self._raters_of(gen.model):
            rows = [MethodRow(i, prompt.render(by_id[i].question, a.strip()), a.strip(),
                              method.assistant_prefix)
                    for i, a in zip(graded["item_id"], graded["answer"], strict=True)
                    if isinstance(a, str) and a.strip() and self.in_split(method, gen.dataset, i)]
            if rows:
                out.append(self._method_shard(method, gen.model, gen.dataset, gen.chunk, rows, (gen.key,)))
        return out

    def downstream_bound(self, gen: ShardRequest) -> int:
        """An upper bound of the requests that :meth:`on_done` of generate shard ``gen`` can plan: one per item and
        scoring context, own probe kind, answer-rating method and cross-model probe kind (the answers that do not
        parse plan none). The progress bar counts it from the start, so its total only shrinks."""
        if not gen.answers:
            return 0
        a = self.set_of[gen.answer_set]
        per_item = len(a.scoring_contexts(self.spec.scoring.contexts))
        if a.id == "main" and self.spec.probe.enabled:
            per_item += len(self.spec.probe.kinds)
        elif a.verbalized_by_probe:
            per_item += 1
        if a.id == "main":
            per_item += len(self._raters_of(gen.model)) + len(self.spec.ca_methods()) * len(self.models)
        return per_item * len(gen.rows)

    def grade(self, shard: ShardRequest, generations: pd.DataFrame) -> pd.DataFrame:
        """Parse and grade one generate shard's answers (pure; every rule of the grid and the probe rule)."""
        a = self.set_of[shard.answer_set]
        its = self.set_items[(a.id, shard.dataset)]
        rules = tuple(dict.fromkeys((*self.grade_rules, *a.analysis_rules(self.spec.correctness.rules))))
        primary = (a.analysis_rules(self.spec.correctness.rules)[0] if a.item_format.rules is not None
                   else self.spec.correctness.primary)
        parsed = parse_generations(generations, a.prompt, self.models[shard.model].reasoning_end, its, a.format)
        return grade_answers(parsed, its, rules, primary)

    def answers(self, model: str, dataset: str, answer_set: str) -> pd.DataFrame | None:
        """The graded answers of a unit's generate shards done so far, in chunk order (None: none is done)."""
        unit = self.units.get((model, dataset, answer_set))
        frames = [unit.graded[s.label] for s in unit.shards if s.label in unit.graded] if unit else []
        return pd.concat(frames, ignore_index=True) if frames else None

    # -- events -------------------------------------------------------------------------
    def on_done(self, shard: ShardRequest, table: pd.DataFrame) -> list[ShardRequest]:
        """A shard finished (computed now or read from the store); returns the shards it makes plannable."""
        if not shard.answers:
            return []
        table = relabel(table, model=shard.model, dataset=shard.dataset, answer_set=shard.answer_set,
                        chunk=shard.chunk)
        graded = self.grade(shard, table)
        unit = self.units[(shard.model, shard.dataset, shard.answer_set)]
        unit.graded[shard.label] = graded
        unit.done.add(shard.key)
        out = (self._score_shards(shard, graded) + self._own_probe_shards(shard, graded)
               + self._method_shards_from_answers(shard, graded))
        if shard.answer_set == "main":
            out += self._cross_probe_shards(shard.dataset) + self._ca_shards(shard.dataset)
        return out

    def on_failed(self, shard: ShardRequest) -> list[ShardRequest]:
        """A shard failed; nothing downstream of it is planned (``resubmit --failed`` plans it later)."""
        if self._lost(shard, f"main answers of model {shard.model!r} are missing (failed shards)"):
            what = " and ".join(([f"probe kinds {'/'.join(self._cross_kinds())}"] if self._needs_cross() else [])
                                + (["candidate ratings (comparison view ca)"] if self.spec.ca_methods() else []))
            log.warning("%s on %s wait for every model's answers, and the %s; not planned in this run",
                        what, shard.dataset, self._blocked[shard.dataset])
        return []

    def on_skipped(self, shard: ShardRequest) -> list[ShardRequest]:
        """A shard left for ``resume`` (``resubmit --failed`` runs only failed shards): nothing downstream of it."""
        self._lost(shard, f"main answers of model {shard.model!r} were not run (`confgrid resume` runs them)")
        return []

    def _lost(self, shard: ShardRequest, why: str) -> bool:
        """A generate shard that will not finish: its unit counts it settled, and the cross-model work of its
        dataset is blocked for ``why`` (True when this blocks it)."""
        if not shard.answers:
            return False
        self.units[(shard.model, shard.dataset, shard.answer_set)].failed.add(shard.key)
        if shard.answer_set != "main" or not self._any_cross() or shard.dataset in self._blocked:
            return False
        self._blocked[shard.dataset] = why
        return True

    def expects_work(self, model: str) -> bool:
        """Whether the plan may still hand ``model`` new shards (cross-model probe kinds or candidate ratings not yet
        planned)."""
        if self._ca_pending(model):
            return True
        return self._needs_cross() and any(
            d.name not in self._blocked and (model, d.name) not in self._cross_done
            and self.units.get((model, d.name, "main")) is not None for d in self.spec.datasets)

    def expects_cross_for(self, model: str, dataset: str) -> bool:
        """Whether ``model``'s main unit on ``dataset`` still lacks its cross-model probe shards."""
        return self._needs_cross() and (model, dataset) not in self._cross_done

    def waiting_for(self) -> list[str]:
        """Why planned work waits (for the log): datasets whose cross-model work needs answers still missing."""
        out = []
        for d in self.spec.datasets:
            if d.name in self._blocked:
                continue
            missing = [m for m in self.models if (u := self.units.get((m, d.name, "main"))) and not u.settled]
            if (open_ := self._rounds_open(d.name)) and (self._needs_cross() or (
                    self.spec.ca_methods() and d.name not in self._ca_done)):
                out.append(f"cross-model work on {d.name} waits for the last round of {', '.join(open_)} "
                           "(execution.stop_when_resolved)")
                continue
            if missing and self._needs_cross():
                out.append(f"probe on {d.name} waits for the main answers of {', '.join(missing)}")
            if missing and self.spec.ca_methods() and d.name not in self._ca_done:
                out.append(f"candidate ratings on {d.name} wait for the main answers of {', '.join(missing)}")
        return out

    # -- candidate-aligned ratings (study 001, section 4.3) -----------------------------
    def _ca_pending(self, model: str) -> bool:
        """Whether ``model`` rates candidates on some dataset whose candidate shards are not planned yet."""
        raters = {m.name for x in self.spec.ca_methods() for m in self.spec.method_models(x)}
        return model in raters and any(d.name not in self._ca_done and d.name not in self._blocked
                                       for d in self.spec.datasets)

    def candidate_pool(self, dataset: str) -> pd.DataFrame | None:
        """The shared candidate pool of every item of ``dataset``: every model's main (greedy) answer, normalized with
        the correctness rule's normalizer and deduplicated, keeping the first surface form, with the models that
        produced it and its label under ``comparison.rule`` (analysis/ace/candidates.py ``candidate_pool``).

        None until every model's main answers on ``dataset`` exist.
        """
        units = self._settled_main(dataset)
        if units is None:
            return None
        col = f"correct_{self.ca_rule}"
        frames, labels = [], {}
        for m, u in units.items():
            g = self.answers(m, dataset, "main")
            ok = g["answer"].map(lambda a: isinstance(a, str) and bool(a.strip()))
            g = g[ok]
            labels.update({(str(i), a): float(c) for i, a, c in zip(g["item_id"], g["answer"], g[col], strict=True)
                           if c == c})
            frames.append(pd.DataFrame({"model": m, "dataset": dataset, "method": "answer",
                                        "item_id": g["item_id"].astype(str), "signal": 0.0,
                                        "correct": g[col].fillna(0.0).astype(float), "answer": g["answer"]}))
        rows = pd.concat(frames, ignore_index=True)
        if rows.empty:
            return pd.DataFrame(columns=["dataset", "item_id", "candidate", "surface", "producers", "label"])
        return candidate_pool(rows, normalize, lambda d, i, surface: labels.get((str(i), surface), 0.0))

    def _ca_shards(self, dataset: str) -> list[ShardRequest]:
        """Once every model's main answers on ``dataset`` exist: each rater rates every pooled candidate with each
        candidate-aligned rating method (shards of part ``ca``)."""
        methods = self.spec.ca_methods()
        if not methods or dataset in self._ca_done or dataset in self._blocked:
            return []
        pool = self.candidate_pool(dataset)
        if pool is None:
            return []
        self._ca_done.add(dataset)
        by_id = {i.item_id: i for i in self.set_items[("main", dataset)]}
        upstream = tuple(s.key for m in self.models if (u := self.units.get((m, dataset, "main"))) for s in u.shards)
        out = []
        for method in methods:
            prompt = self._prompt(method)
            rows = [MethodRow(i, prompt.render(by_id[i].question, surface), surface,
                              method.assistant_prefix)
                    for i, surface in zip(pool["item_id"], pool["surface"], strict=True) if i in by_id]
            for rater in self.spec.method_models(method):
                for c, chunk in enumerate(_chunks(rows, self.spec.execution.shard_size * 4)):
                    sh = self._method_shard(method, rater.name, dataset, c, chunk, upstream)
                    out.append(dataclasses.replace(sh, part="ca"))
        return out

    # -- score --------------------------------------------------------------------------
    def _score_shards(self, gen: ShardRequest, graded: pd.DataFrame) -> list[ShardRequest]:
        a = self.set_of[gen.answer_set]
        its = self.set_items[(a.id, gen.dataset)]
        ident = model_identity(self.models[gen.model])
        q = {i.item_id: i.question for i in its}
        out = []
        for ctx_id in a.scoring_contexts(self.spec.scoring.contexts):
            ctx = get_context(ctx_id)
            reqs = score_requests(graded, its, ctx_id)
            if not reqs:
                continue
            key = shard_key("score", {"model": ident, "context": [ctx.user_prompt, get_prompt(ctx.user_prompt).template,
                                                                  ctx.assistant_prefix, ctx.separator, ctx.item_format],
                                      "requests": [(r.item_id, q[r.item_id], r.user_text, r.answer) for r in reqs]})
            out.append(ShardRequest("score", gen.model, gen.dataset, a.id, gen.chunk, key, tuple(reqs), context=ctx_id,
                                    upstream=(gen.key,)))
        return out

    # -- probe --------------------------------------------------------------------------
    def _cross_kinds(self) -> tuple[str, ...]:
        return tuple(k for k in self.spec.probe.kinds if k in CROSS_PROBE_KINDS)

    def _needs_cross(self) -> bool:
        return self.spec.probe.enabled and bool(self._cross_kinds())

    def _any_cross(self) -> bool:
        """Cross-model work of any kind: probe kinds that need other models' answers, or candidate ratings."""
        return self._needs_cross() or bool(self.spec.ca_methods())

    def _probe_prompt(self, a: AnswerSetSpec) -> str:
        return a.item_format.probe_prompt or self.spec.elicitation.prompt

    def _probe_shard(self, model: str, dataset: str, a: AnswerSetSpec, chunk: int, rows: list[ProbeRow],
                     part: str, upstream: tuple[str, ...]) -> ShardRequest:
        prompt_id = self._probe_prompt(a)
        inputs: dict[str, Any] = {"model": model_identity(self.models[model]),
                                  "prompt": get_prompt(prompt_id).template, "part": part,
                                  "requests": [(r.item_id, r.user_text, r.assistant_prefix) for r in rows]}
        if part == "cross":
            inputs["rule"] = self.spec.probe.rule  # the rule that chose the plausible wrong answers
        return ShardRequest("probe", model, dataset, a.id, chunk, shard_key("probe", inputs), tuple(rows),
                            call=CallParams(max_new_tokens=PROBE_MAX_NEW_TOKENS), upstream=upstream, part=part)

    def _own_probe_shards(self, gen: ShardRequest, graded: pd.DataFrame) -> list[ShardRequest]:
        """Probe rows from the model's own answers: a set without a stated score gets its answers re-supplied (kind
        ``own``); with ``probe.enabled`` the main set gets the kinds that need no other model."""
        a = self.set_of[gen.answer_set]
        study = a.id == "main" and self.spec.probe.enabled
        if study:
            kinds = tuple(k for k in self.spec.probe.kinds if k in OWN_PROBE_KINDS)
        elif a.verbalized_by_probe:
            kinds = ("own",)
        else:
            return []
        if not kinds:
            return []
        prompt_id = self._probe_prompt(a)
        by_id = {i.item_id: i for i in self.set_items[(a.id, gen.dataset)]}
        rows = []
        for item_id, ans in zip(graded["item_id"], graded["answer"], strict=True):
            item = by_id[item_id]
            own = ans if isinstance(ans, str) and ans.strip() else None
            rows += _probe_rows(a.item_format.question(item), item_id, prompt_id,
                                supplied_answers(item, own, {}, self.spec.probe.seed, (), kinds=kinds))
        if not rows:
            return []
        return [self._probe_shard(gen.model, gen.dataset, a, gen.chunk, rows, "own", (gen.key,))]

    def _cross_probe_shards(self, dataset: str) -> list[ShardRequest]:
        """Once every model's main answers on ``dataset`` exist: the kinds that need them, for every model."""
        if not self._needs_cross() or dataset in self._blocked:
            return []
        units = self._settled_main(dataset)
        if units is None:
            return []
        a = self.set_of["main"]
        rule = self.spec.probe.rule
        graded = {m: self.answers(m, dataset, "main").set_index("item_id") for m in units}
        upstream = tuple(s.key for u in units.values() for s in u.shards)
        its = self.set_items[("main", dataset)]
        by_id = {i.item_id: i for i in its}
        prompt_id = self._probe_prompt(a)
        out = []
        for m in self.models:
            if m not in units or (m, dataset) in self._cross_done:
                continue
            self._cross_done.add((m, dataset))
            g = graded[m]
            others = {o: graded[o] for o in units if o != m}
            rows = []
            for item_id, ans in zip(g.index, g["answer"], strict=True):
                item = by_id[item_id]
                own = ans if isinstance(ans, str) and ans.strip() else None
                oth = {k: (v.at[item_id, "answer"], v.at[item_id, f"correct_{rule}"]) for k, v in others.items()
                       if item_id in v.index}
                rows += _probe_rows(a.item_format.question(item), item_id, prompt_id, supplied_answers(
                    item, own, oth, self.spec.probe.seed, self.items[dataset], kinds=self._cross_kinds()))
            for c, chunk in enumerate(_chunks(rows, self.spec.execution.shard_size * 4)):
                out.append(self._probe_shard(m, dataset, a, c, chunk, "cross", upstream))
        return out
