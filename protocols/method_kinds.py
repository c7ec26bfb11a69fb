"""The confidence-method kinds a grid may declare (``methods[].kind``): one registry entry each.

A kind is data: the stage that computes it (flows/stages: its engine call and stored table), its default template, the
reader that turns the stage's rows into confidences (flows/stages/method_base.py ``READERS``: its signals, what it
rates, its capability role), and the defaults of its ``methods[]`` fields. Definitions: study 001 section 5.1 and
Appendix D.3 (self-consistency, P(True), the 0-100 rating, verbalized-before), study 002 Appendix E.1 (letter token
probabilities), study 004 (capability P(True), expected accuracy, hidden states for probes).

Examples
--------
>>> method_kind("p_true").stage, method_kind("p_true").template, method_kind("p_true").defaults["renormalize"]
('next_token', 'ptrue_verify', False)
>>> method_kind("p_tru")
Traceback (most recent call last):
    ...
confgrid.registry.UnknownNameError: unknown method kind 'p_tru'; allowed: expected_accuracy, hidden_states, \
letter_probability, p_true, p_true_capability, rating, self_consistency, verbalized_before
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from confgrid.registry import Registry

__all__ = ["MethodKind", "METHOD_KINDS", "method_kind"]


@dataclass(frozen=True)
class MethodKind:
    """What one method kind is.

    Attributes
    ----------
    name : str
        The ``methods[].kind`` value.
    stage : str
        The method stage that computes it (flows/stages: ``sample`` k sampled answers, ``rate`` one greedy generation
        that states a rating, ``next_token`` the next-token distribution after the template, ``hidden`` the last
        prompt token's hidden states).
    template : str or None
        Default prompt id (protocols/prompts/*.yaml); None: the grid's elicitation prompt. A template with an
        ``{answer}`` slot rates the model's own answer (and, in ACE's candidate view, any supplied answer).
    reader : str
        The reader of its stage's rows (flows/stages/method_base.py ``READERS``).
    defaults : mapping
        Defaults of ``methods[]`` fields when the grid does not set them (``k``, ``candidates``, ``renormalize``,
        ``max_new_tokens``; an absent ``max_new_tokens``: ``elicitation.max_new_tokens``).
    """

    name: str
    stage: str
    template: str | None
    reader: str
    defaults: Mapping[str, Any] = field(default_factory=dict)


#: Every method kind, by name (the one Registry class: unknown names list the allowed ones).
METHOD_KINDS: Registry[MethodKind] = Registry("method kind")
for _k in (
    MethodKind("self_consistency", "sample", None, "agreement", {"k": 10}),
    MethodKind("expected_accuracy", "sample", None, "expected_accuracy", {"k": 100}),
    MethodKind("p_true", "next_token", "ptrue_verify", "p_true", {"candidates": ("A", "B"), "renormalize": False}),
    MethodKind("p_true_capability", "next_token", "ptrue_capability", "p_true",
               {"candidates": ("Yes", "No"), "renormalize": True}),
    MethodKind("rating", "rate", "rate_0_100", "boxed_rating", {"max_new_tokens": 24}),
    MethodKind("verbalized_before", "rate", "verbalized_before", "stated_probability", {"max_new_tokens": 24}),
    MethodKind("hidden_states", "hidden", None, "features"),
    MethodKind("letter_probability", "next_token", "mc_letter", "option_letters"),
):
    METHOD_KINDS.register(_k.name, _k)


def method_kind(name: str) -> MethodKind:
    """The registry entry of a method kind.

    Raises ``UnknownNameError`` if ``name`` is not a registered kind (the message lists the allowed kinds).
    """
    return METHOD_KINDS.get(name)
