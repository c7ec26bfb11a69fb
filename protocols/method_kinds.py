"""The confidence-method kinds a grid may declare (``methods[].kind``): one registry entry each.

Each kind says, in one place, what the rest of confgrid used to decide by
comparing kind strings: the stage that computes it (flows/stages: its engine call),
its default template, the fields a grid may set for it, what it rates, the
signals it adds to the one signal table and what the capability study reads
from it. Definitions: study 001 section 5.1 and Appendix D.3 (self-consistency,
P(True), the 0-100 rating, verbalized-before), study 002 Appendix E.1 (letter
token probabilities), study 004 (capability P(True), expected accuracy,
hidden states for probes).

Examples
--------
>>> method_kind("p_true").stage, method_kind("p_true").template, method_kind("p_true").renormalize
('next_token', 'ptrue_verify', False)
>>> method_kind("self_consistency").signals("sc")
('sc', 'sc__majority')
>>> method_kind("expected_accuracy").signals("ea")
()
>>> method_kind("p_tru")
Traceback (most recent call last):
    ...
confgrid.registry.UnknownNameError: unknown method kind 'p_tru'; allowed: expected_accuracy, hidden_states, \
letter_probability, p_true, p_true_capability, rating, self_consistency, verbalized_before
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from confgrid.registry import Registry

__all__ = ["MethodKind", "METHOD_KINDS", "method_kind"]


@dataclass(frozen=True)
class MethodKind:
    """What one method kind is and does.

    Attributes
    ----------
    name : str
        The ``methods[].kind`` value.
    stage : {"sample", "rate", "next_token", "hidden"}
        ``sample``: k sampled answers to the elicitation prompt; ``rate``: one greedy generation that states a
        rating; ``next_token``: the next-token distribution after the template (candidate tokens read);
        ``hidden``: the last prompt token's hidden states.
    template : str or None
        Default prompt id (protocols/prompts/*.yaml); None: the grid's elicitation prompt.
    output : {"confidence", "target", "features"}
        What its rows are: confidence signals (rows of the signal table), the capability target (expected
        accuracy), or probe features (hidden states).
    rated : str or None
        The ``rated`` column of its signal rows: what the confidence is graded as, ``greedy_answer`` (the
        model's own greedy answer's correctness), ``first_sample`` (self-consistency; its majority signal rates
        ``majority_answer``), ``favoured_letter`` (letter probabilities); None for non-confidence kinds.
    takes_answer : bool
        Its template shows the answer it rates (P(True)'s "Proposed answer", the rating): the rows keep that
        ``rated_answer``, and it can rate a supplied candidate answer with one model call (ACE's candidate-answer
        view, study 001 section 6).
    candidates : tuple of str or None
        Default candidate strings of a next-token kind, the first meaning true; None: not a next-token kind, or
        the option letters of each item (``letter_probability``).
    renormalize : bool or None
        Default ``renormalize`` of a p_true kind (study 001 D.3: p(A) alone; study 004: over Yes/No); None: the
        field does not apply (letter probabilities are always renormalized over the letters).
    default_k : int or None
        Samples per question when the grid does not say (sampled kinds only).
    default_new_tokens : int or None
        Generation budget when the grid does not say; None: ``elicitation.max_new_tokens``.
    majority : bool
        Also yields the ``<id>__majority`` signal (the majority answer's share).
    prefix : bool
        ``assistant_prefix`` applies (a template whose reply is read after a prefix).
    parser : {"boxed_rating", "stated_probability"} or None
        How a rate-stage reply becomes a confidence: the last ``\\boxed{N}`` / 100 (the rating), or the
        template's stated probability (verbalized-before); None for the other stages.
    capability : {"target", "consistency", "probe", "verbalized", "p_true"} or None
        Its role in capability calibration (study 004): the target (expected accuracy), or an estimator of
        that family (self-consistency over k samples, a probe on hidden states, a stated or a P(True)
        confidence); None: it cannot serve there (letter probabilities).
    letters : bool
        Its candidates are each item's option letters, always renormalized over them (letter probabilities,
        study 002 Appendix E.1): it runs on items with options only, and ``candidates`` and ``renormalize``
        do not apply.
    """

    name: str
    stage: Literal["sample", "rate", "next_token", "hidden"]
    template: str | None
    output: Literal["confidence", "target", "features"] = "confidence"
    rated: str | None = "greedy_answer"
    candidates: tuple[str, ...] | None = None
    renormalize: bool | None = None
    default_k: int | None = None
    default_new_tokens: int | None = 24
    majority: bool = False
    prefix: bool = False
    takes_answer: bool = False
    parser: Literal["boxed_rating", "stated_probability"] | None = None
    capability: Literal["target", "consistency", "probe", "verbalized", "p_true"] | None = None
    letters: bool = False

    @property
    def sampled(self) -> bool:
        """k sampled answers (the fields k, temperature, top_p, top_k and seed apply)."""
        return self.stage == "sample"

    @property
    def next_token(self) -> bool:
        """Reads candidate tokens of the next-token distribution (candidates, cases, merge, top_logprobs)."""
        return self.stage == "next_token"

    def signals(self, method_id: str) -> tuple[str, ...]:
        """The signal names a method of this kind adds to the one signal table (none for targets and features)."""
        if self.output != "confidence":
            return ()
        return (method_id, f"{method_id}__majority") if self.majority else (method_id,)


#: Every method kind, by name (the one Registry class: unknown names list the allowed ones).
METHOD_KINDS: Registry[MethodKind] = Registry("method kind")
for _k in (
    MethodKind("self_consistency", "sample", None, rated="first_sample", default_k=10, default_new_tokens=None,
               majority=True, capability="consistency"),
    MethodKind("expected_accuracy", "sample", None, output="target", rated=None, default_k=100,
               default_new_tokens=None, capability="target"),
    MethodKind("p_true", "next_token", "ptrue_verify", candidates=("A", "B"), renormalize=False, prefix=True,
               takes_answer=True, capability="p_true"),
    MethodKind("p_true_capability", "next_token", "ptrue_capability", candidates=("Yes", "No"),
               renormalize=True, prefix=True, capability="p_true"),
    MethodKind("rating", "rate", "rate_0_100", prefix=True, takes_answer=True, parser="boxed_rating",
               capability="verbalized"),
    MethodKind("verbalized_before", "rate", "verbalized_before", prefix=True, parser="stated_probability",
               capability="verbalized"),
    MethodKind("hidden_states", "hidden", None, output="features", rated=None, capability="probe"),
    MethodKind("letter_probability", "next_token", "mc_letter", rated="favoured_letter", prefix=True,
               letters=True),
):
    METHOD_KINDS.register(_k.name, _k)


def method_kind(name: str) -> MethodKind:
    """The registry entry of a method kind.

    Raises
    ------
    UnknownNameError
        If ``name`` is not a registered kind (the message lists the allowed kinds).
    """
    return METHOD_KINDS.get(name)
