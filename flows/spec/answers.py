"""Grid sections of the generated answers: the elicitation (main set), further answer sets and parsing.

Definitions: study 000 sections 3.3-3.4, 4.3 and Appendix B.1 (answer sets, parse policies), study 003
section 3.2 (refusal policies, repeated runs), study 002 Appendix F (JSON prompts).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, StrictBool, field_validator, model_validator

from confgrid.actors.calls import Sampling
from confgrid.flows.spec.base import LABEL_PATTERN, Contexts, ItemFormatName, Prompt, Rules, _Spec
from confgrid.protocols.item_formats import ItemFormat, item_format
from confgrid.protocols.prompts import get_prompt

__all__ = ["ElicitationSpec", "AnswerSetSpec", "ParsingSpec", "probe_prompt_problem"]


class ElicitationSpec(_Spec):
    """How answers and verbalized confidence are elicited (the generate stage)."""

    prompt: Prompt = Field("confidence", description="Id of the confidence prompt (protocols/prompts/*.yaml).")
    max_new_tokens: int = Field(32, ge=1, le=262_144, description="Greedy decoding budget in new tokens (up to the "
                                "model's context; a thinking model needs thousands; required with a worked-solution "
                                "prompt, output: boxed, which 32 tokens would cut off).")

    @model_validator(mode="after")
    def _worked_solution_budget(self) -> ElicitationSpec:
        if get_prompt(self.prompt).reader.worked and "max_new_tokens" not in self.model_fields_set:
            raise ValueError(f"prompt {self.prompt!r} asks for a worked solution (output boxed); the default budget "
                             "of 32 new tokens cuts it off: set elicitation.max_new_tokens (e.g. 512, more for a "
                             "thinking model)")
        return self


class AnswerSetSpec(_Spec):
    """A further set of answers, generated under another prompt or format (study 000 sections 3.4, 4.3, B.1).

    The main answer set is ``elicitation``; each entry here adds one more generation of every question, scored in its
    own contexts. Its rows carry ``answer_set = id`` everywhere downstream.
    """

    id: str = Field(description="Label of the answer set (tables, MLflow).", pattern=LABEL_PATTERN)
    prompt: Prompt = Field(description="Generation prompt id, e.g. answer_only, mc_confidence, mc_letter, confidence_percent.")
    format: ItemFormatName = Field(
        "open", description="'open' asks the question alone; 'mc' shows lettered options (datasets with options only).")
    max_new_tokens: int | None = Field(None, ge=1, le=262_144, description="Decoding budget (default 32 open, 20 mc, "
                                       "96 for a JSON prompt, 512 for a boxed worked solution).")
    shuffle_options: StrictBool = Field(False, description="mc: shuffle option order with a fixed seed per question.")
    shuffle_seed: int = Field(0, ge=0, description="mc: base seed of the option shuffle.")
    contexts: Contexts | None = Field(
        None, description="Scoring contexts of this set (default: none for a JSON or boxed prompt, scoring.contexts "
        "for open, mc_bare/mc_answer_slot/mc_guess_slot for mc).")
    rules: Rules | None = Field(
        None, description="Correctness rules analyzed for this set (default: correctness.rules for open, mc_letter for mc).",
    )
    temperature: float = Field(0.0, ge=0.0, le=10.0, description="Decoding temperature (0: greedy; study 003 "
                               "runs at 1.0).")
    top_p: float = Field(1.0, gt=0.0, le=1.0, description="Nucleus mass when sampling (temperature > 0).")
    seed: int = Field(0, ge=0, description="Sampling seed (temperature > 0); run r of `runs` uses seed + r - 1, and "
                      "each question derives its own.")
    runs: int = Field(1, ge=1, le=100, description="Independent runs of the set (study 003: 3 at temperature 1.0): "
                      "answer sets <id>.run1 ... <id>.runN, each with its own seed; results/runs.csv gives the mean "
                      "and standard deviation across runs and the pooled n.")
    verbalized: Literal["stated", "probe", "none"] | None = Field(
        None,
        description="Where the verbalized score comes from: 'stated' (the generation states it), 'probe' (the "
        "supplied-answer format re-asks for it), 'none'. Default: stated if the prompt asks for a probability, else "
        "probe (none for a worked-solution prompt, output boxed).",
    )

    @model_validator(mode="after")
    def _runs_need_sampling(self) -> AnswerSetSpec:
        if self.runs > 1 and self.temperature == 0:
            raise ValueError(f"runs={self.runs} at temperature 0 repeats the same greedy answers; set a temperature "
                             "> 0 (study 003 uses 1.0) or runs: 1")
        return self

    @property
    def sampling(self) -> Any:
        """The decoding of this set: None (greedy) or a :class:`~confgrid.actors.calls.Sampling` with n = 1."""
        if self.temperature == 0:
            return None
        return Sampling(temperature=float(self.temperature), top_p=float(self.top_p), n=1, seed=int(self.seed))

    def expand_runs(self) -> tuple[AnswerSetSpec, ...]:
        """This set, or its runs ``<id>.run1`` ... ``<id>.runN`` (seed + r - 1 each) when ``runs > 1``."""
        if self.runs == 1:
            return (self,)
        return tuple(self.model_copy(update={"id": f"{self.id}.run{r}", "seed": self.seed + r - 1, "runs": 1})
                     for r in range(1, self.runs + 1))

    def analysis_rules(self, rules: tuple[str, ...]) -> tuple[str, ...]:
        """Rules this set is analyzed under (multiple choice: letter match only, unless declared; a prompt that states
        option probabilities: the favoured option with ties scored proportionally)."""
        if self.rules is not None:
            return self.rules
        if self.item_format.rules is not None:
            return ("mc_favoured",) if get_prompt(self.prompt).reader.options else self.item_format.rules
        return tuple(r for r in rules if r != "mc_letter") or rules

    @property
    def item_format(self) -> ItemFormat:
        """The entry of this set's ``format`` (protocols/item_formats.py)."""
        return item_format(self.format)

    @property
    def new_tokens(self) -> int:
        """Decoding budget: declared, else the prompt's output format's (protocols/output_formats.py: 96 for a JSON
        reply, 512 for a worked solution), else the item format's (20 mc, 32 open)."""
        return self.max_new_tokens or get_prompt(self.prompt).reader.new_tokens or self.item_format.new_tokens

    def verbalized_source(self) -> str:
        p = get_prompt(self.prompt)
        return self.verbalized or p.reader.verbalized(p)

    @property
    def verbalized_by_probe(self) -> bool:
        """Whether this set's verbalized score is read by the probe (the answer re-supplied after ``Guess:``)."""
        return self.verbalized_source() == "probe"

    @property
    def probes_open_answers(self) -> bool:
        """Whether the probe re-asks this set's own open answers for their verbalized score (the probe's prompt
        check and study 001's selection table read it)."""
        return self.item_format.probe_prompt is None and self.verbalized_by_probe

    def scoring_contexts(self, default: tuple[str, ...]) -> tuple[str, ...]:
        """Scoring contexts of this set: declared, else none for a JSON prompt (its letter probabilities come from the
        ``letter_probability`` method) or a boxed worked solution, mc_bare/mc_answer_slot/mc_guess_slot for mc, else
        ``default``."""
        if self.contexts is not None:
            return self.contexts
        if not get_prompt(self.prompt).reader.token_scores:
            return ()
        return default if self.item_format.contexts is None else self.item_format.contexts


def probe_prompt_problem(elicitation: ElicitationSpec, answer_sets: tuple[AnswerSetSpec, ...],
                         probe_enabled: bool) -> str | None:
    """Why the supplied-answer probe cannot run, or None.

    The probe of open answers (``probe.enabled``, or an open answer set whose verbalized score comes from the probe)
    re-asks under the elicitation prompt after its answer label (protocols/probe.py ``probe_request``), so that prompt
    needs an answer label and a confidence label; a JSON or worked-solution (``output: boxed``) prompt has neither.
    """

    users = (["probe.enabled"] if probe_enabled else []) + [
        f"answer_sets[{a.id}] (verbalized: probe)" for a in answer_sets if a.probes_open_answers]
    p = get_prompt(elicitation.prompt)
    if not users or (p.answer_label and p.confidence_label):
        return None
    return (f"{', '.join(users)}: the supplied-answer probe re-asks under the elicitation prompt {p.id!r}, which "
            f"lacks an answer or confidence label (answer_label {p.answer_label!r}, confidence_label "
            f"{p.confidence_label!r}); use a labelled elicitation prompt such as 'confidence', or verbalized: none")


class ParsingSpec(_Spec):
    """Which parsed rows enter the metrics (study 000 Appendix A "Parsing", B.1)."""

    policies: tuple[Literal["label_or_fallback", "label_only"], ...] = Field(
        ("label_or_fallback",), min_length=1,
        description="label_or_fallback keeps a score taken from the first standalone number when the Probability: "
        "label is missing; label_only keeps only labelled scores. Several policies are compared side by side.",
    )
    refusal: tuple[Literal["drop", "chance"], ...] = Field(
        ("drop",), min_length=1,
        description="Refusal policy (study 003 section 3.2): drop leaves a reply without a usable answer and "
        "confidence out (counted by status); chance scores it as a seeded random option letter with confidence "
        "1/k (answer sets that show options), so refusing cannot improve a score. Several are compared side by side.",
    )
    chance_seed: int = Field(0, ge=0, description="Seed of the random letters of the chance refusal policy.")

    @field_validator("refusal")
    @classmethod
    def _unique_refusal(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        if len(set(v)) != len(v):
            raise ValueError(f"refusal policies must be unique; received {list(v)}")
        return v
