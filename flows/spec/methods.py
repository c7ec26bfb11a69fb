"""Grid sections of the confidence methods and of the comparison across models (``methods[]``, ``comparison``).

Definitions: study 001 section 5.1 and Appendix D.3 (methods), sections 4 and 6 (comparison); study 004
(capability P(True), expected accuracy).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from pydantic import Field, StrictBool, field_validator, model_validator

from confgrid.flows.spec.base import LABEL_PATTERN, Prompt, Rule, _Spec
from confgrid.flows.stages.base import STAGES, get_stage
from confgrid.flows.stages.method_base import MethodReader, get_reader
from confgrid.protocols.mc import LETTERS
from confgrid.protocols.method_kinds import METHOD_KINDS as KINDS
from confgrid.protocols.method_kinds import MethodKind, method_kind

__all__ = ["METHOD_KINDS", "MethodSpec", "PairSpec", "ComparisonSpec"]


#: Confidence methods a grid may declare (``methods[].kind``; docs "Confidence methods"): the names of the one
#: method-kind registry (protocols/method_kinds.py), in declaration order.
METHOD_KINDS: tuple[str, ...] = tuple(KINDS.names())


class MethodSpec(_Spec):
    """One confidence method (study 001 section 5.1 and Appendix D.3; study 004).

    Every method runs on the main answer set's questions; its rows carry the method's protocol (id, kind, template, k,
    temperature, seed) and a status.
    """

    id: str = Field(description="Label of the method: its signal name in every table.",
                    pattern=r"^[A-Za-z][A-Za-z0-9_]*$")
    kind: Literal[METHOD_KINDS] = Field(  # type: ignore[valid-type]  # the registry's names
        description="self_consistency (k samples, agreement with the first; majority share too), expected_accuracy "
        "(mean correctness of k samples: the capability target), p_true (the model's own answer: A. True / B. "
        "False), p_true_capability (can you answer it? Yes/No), rating (0-100 in \\boxed{} for the model's own "
        "answer), verbalized_before (probability of answering correctly, asked before answering), hidden_states "
        "(the last prompt token's hidden states, for probes), letter_probability (the next-token distribution "
        "over the option letters after the lettered question, renormalized; study 002 Appendix E.1).")
    template: Prompt | None = Field(None, description="Prompt id (protocols/prompts/*.yaml); default per kind.")
    k: int | None = Field(None, ge=1, le=100_000, description="Samples per question (default 10 for "
                          "self_consistency, 100 for expected_accuracy).")
    temperature: float | Literal["model_default"] = Field(
        1.0, description="Sampling temperature (> 0), or model_default: the model's generation_config values of "
        "temperature, top_p and top_k (recorded with every row).")
    top_p: float = Field(1.0, gt=0.0, le=1.0, description="Nucleus mass of sampling.")
    top_k: int = Field(0, ge=0, description="Top-k of sampling (0: off).")
    seed: int = Field(0, ge=0, description="Sampling seed; each question and sample derives its own.")
    max_new_tokens: int | None = Field(None, ge=1, le=262_144, description="Generation budget (default: "
                                       "elicitation.max_new_tokens for samples, 24 for rating and "
                                       "verbalized_before).")
    candidates: tuple[str, ...] | None = Field(None, min_length=2, description="p_true kinds: the candidate strings, "
                                               "the first meaning true (default A, B; Yes, No for capability).")
    cases: tuple[Literal["lower", "upper", "title"], ...] = Field(
        (), description="Case variants of the candidates also read (a candidate is always read with and without a "
        "leading space).")
    merge: Literal["sum", "exact"] = Field("sum", description="How a candidate's variant tokens merge: sum of their "
                                           "probabilities, or the exact token only (changing it reruns no model).")
    renormalize: StrictBool | None = Field(
        None, description="p_true kinds: p(first) / sum over the candidates (true) or p(first) alone (false). "
        "Default per kind (protocols/method_kinds.py): false for p_true (study 001 Appendix D.3: the probability of "
        "token A alone), true for p_true_capability (study 004's Yes/No pair).")
    top_logprobs: int = Field(20, ge=1, le=1000, description="Next tokens returned per question (p_true kinds).")
    layers: tuple[int, ...] | None = Field(None, description="hidden_states: layer indices (0 = embeddings; "
                                           "negative from the end); None = all.")
    rule: Rule | None = Field(None, description="Correctness rule whose normalization decides agreement and whose "
                             "labels grade the samples (default correctness.primary).")
    models: tuple[str, ...] | None = Field(None, min_length=1, description="Names of the models that run the "
                                           "method (default: every model).")
    assistant_prefix: str = Field("", description="Text opening the assistant turn before the model's reply is "
                                  "read (next-token and rating kinds), e.g. 'Answer:'.")
    split: Literal["all", "train", "eval"] = Field(
        "all", description="Items the method runs on: every item, or the train or evaluation split of the "
        "capability section (study 004: k_train samples on the train split, k_eval on the evaluation split).")

    @model_validator(mode="before")
    @classmethod
    def _renormalize_default(cls, data: Any) -> Any:
        """Fill ``renormalize`` with its kind's default (:attr:`MethodKind.defaults`) when it is not given."""
        if isinstance(data, dict) and data.get("renormalize") is None and data.get("kind") in KINDS:
            default = method_kind(data["kind"]).defaults.get("renormalize")
            if default is not None:
                data = {**data, "renormalize": default}
        return data

    @model_validator(mode="after")
    def _fields_of_the_kind(self) -> MethodSpec:
        entry = self.kind_entry

        def only(field: str, applies: Callable[[MethodKind], bool]) -> None:
            # a value other than the default (so a dumped grid, with every default written out, loads again)
            if not applies(entry) and getattr(self, field) != type(self).model_fields[field].default:
                kinds = [k.name for _, k in KINDS.items() if applies(k)]
                raise ValueError(f"{field} is for kinds {kinds}; kind {self.kind!r} has none "
                                 f"(received {getattr(self, field)!r})")

        for f in dict.fromkeys(f for _, st in STAGES.items() for f in st.fields):  # each stage's own fields
            only(f, lambda k, f=f: f in get_stage(k.stage).fields)
        if self.reader.options:
            for f in ("candidates", "renormalize"):
                if getattr(self, f) != type(self).model_fields[f].default:
                    raise ValueError(f"{f} is not for kind {self.kind!r}: its candidates are the option "
                                     "letters of each item, always renormalized over them (study 002 E.1)")
        if "temperature" in get_stage(entry.stage).fields and self.temperature != "model_default" \
                and self.temperature <= 0:
            raise ValueError(f"temperature must be > 0 for {self.kind} (received {self.temperature!r}); greedy "
                             "samples are all the same answer")
        return self

    @property
    def kind_entry(self) -> MethodKind:
        """The method kind's registry entry (stage, default template, reader; protocols/method_kinds.py)."""
        return method_kind(self.kind)

    @property
    def reader(self) -> MethodReader:
        """The reader of its rows (flows/stages/method_base.py: its signals, what it rates, its capability role)."""
        return get_reader(self.kind_entry.reader)

    def signals(self) -> tuple[str, ...]:
        """The signal names it adds to the one signal table (none for targets and features)."""
        return tuple(self.id + suffix for suffix in self.reader.signals)

    @property
    def n_samples(self) -> int:
        return self.k or self.kind_entry.defaults.get("k") or 0

    def template_id(self, elicitation_prompt: str) -> str:
        return self.template or self.kind_entry.template or elicitation_prompt

    def candidate_strings(self, n_letters: int = 0) -> tuple[str, ...]:
        """Candidates read in the next-token distribution (letter_probability: the first ``n_letters`` letters)."""
        if self.reader.options:
            return tuple(LETTERS[:n_letters])
        return self.candidates if self.candidates is not None else self.kind_entry.defaults.get("candidates", ())

    def new_tokens(self, elicitation_tokens: int) -> int:
        return self.max_new_tokens or self.kind_entry.defaults.get("max_new_tokens") or elicitation_tokens

    def agreement_rule(self, primary: str) -> str:
        return self.rule or primary


class PairSpec(_Spec):
    """A declared pair of models for the accuracy-controlled comparison, with its comparison label."""

    a: str = Field(description="Model name (gaps are A - B).")
    b: str = Field(description="Model name.")
    label: str = Field("pair", description="Comparison type, e.g. size or mode (reversal rates are grouped by it).",
                       pattern=LABEL_PATTERN)


class ComparisonSpec(_Spec):
    """Accuracy-controlled comparison of calibration across models (study 001, ACE; docs "Comparing models").

    Off unless ``views`` is given. Every pair of models (or the declared ``pairs``), on every dataset and compared
    method, gets the raw gap and the aligned gaps of the chosen views, with paired bootstrap intervals.
    """

    views: tuple[Literal["raw", "ia", "da", "ca", "da_resample"], ...] = Field(
        (), description="Views: raw, ia (instance-aligned), da (distribution-aligned), ca (candidate-aligned: every "
        "model rates every model's answers), da_resample (DA by discarding rows instead of weighting). Empty: off.")
    bootstrap: int = Field(2000, ge=0, le=1_000_000, description="Paired resamples of questions per cell (0: none).")
    seed: int = Field(0, ge=0, description="Base seed; each cell derives its own.")
    pairs: tuple[PairSpec, ...] | None = Field(None, description="Declared pairs (default: every pair, label 'pair').")
    methods: tuple[str, ...] | None = Field(
        None, description="Signals compared: verbalized (the stated score) and method ids (default: verbalized and "
        "every confidence method of the grid).")
    metrics: tuple[Literal["ece", "brier"], ...] = Field(("ece", "brier"), min_length=1,
                                                      description="Metrics of each view compared across the pairs.")
    target: Literal["mean"] | float = Field("mean", description="Common target accuracy of DA's third direction: the "
                                            "pair's mean, or an accuracy in [0, 1].")
    rule: Rule | None = Field(None, description="Correctness rule that normalizes and labels the candidates of CA "
                             "(default correctness.primary).")
    ia_strata: int | None = Field(None, ge=2, le=1000, description="Graded correctness: IA matches items whose "
                                  "scores fall in the same of this many equal-width strata (default: exact match).")
    n_strata: int = Field(10, ge=2, le=1000, description="Graded correctness: DA's outcome strata when a pair has "
                          "more than 10 distinct scores (Appendix E.7).")

    @field_validator("target")
    @classmethod
    def _target_range(cls, v):
        if not isinstance(v, str) and not 0.0 <= v <= 1.0:
            raise ValueError(f"target must be 'mean' or an accuracy in [0, 1] (received {v!r})")
        return v

    @property
    def enabled(self) -> bool:
        return bool(self.views)
