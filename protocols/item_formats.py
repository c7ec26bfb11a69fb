"""How an item is asked: one registry entry per item format (``open``, ``mc``).

An answer set (grid ``answer_sets[].format``) and a scoring context (``item_format``) name their format; the entry holds
everything that depends on it (:class:`ItemFormat`). ``open``: the question alone, graded under the grid's rules.
``mc``: the question with lettered options, answered with a letter (study 000 Appendix F "Multiple-choice format"),
where the ``chance`` refusal policy applies (study 003 section 3.2). Duplicate name -> error; unknown -> error listing
them.

Examples
--------
>>> item_format("mc").options, item_format("mc").new_tokens, item_format("open").contexts
(True, 20, None)
>>> item_format("cloze")
Traceback (most recent call last):
    ...
confgrid.registry.UnknownNameError: unknown item format 'cloze'; allowed: mc, open
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from confgrid.protocols.items import Item
from confgrid.protocols.mc import MC_MAX_NEW_TOKENS, mc_question
from confgrid.registry import Registry

__all__ = ["ItemFormat", "ITEM_FORMATS", "item_format"]


@dataclass(frozen=True)
class ItemFormat:
    """One way an item is asked.

    Attributes
    ----------
    name : str
        The ``format`` / ``item_format`` value.
    question : callable
        ``Item -> str``: what replaces a prompt's ``{question}``.
    options : bool
        Lettered options are shown: only items with options are asked, the parser gets their number, the ``chance``
        refusal policy and the random baseline apply, and a prompt stating a probability per option letter needs it.
    new_tokens : int
        Default decoding budget of an answer set whose prompt's output format sets none.
    contexts : tuple of str or None
        Default scoring contexts of an answer set (None: the grid's ``scoring.contexts``).
    rules : tuple of str or None
        Default correctness rules of an answer set, the first its primary (None: the grid's ``correctness.rules``
        without ``mc_letter``, under ``correctness.primary``).
    probe_prompt : str or None
        The prompt the probe re-asks this format's answers under for their verbalized score (None: the elicitation
        prompt, whose labels the grid check then needs).
    """

    name: str
    question: Callable[[Item], str]
    options: bool = False
    new_tokens: int = 32
    contexts: tuple[str, ...] | None = None
    rules: tuple[str, ...] | None = None
    probe_prompt: str | None = None


#: Every item format, by name (registration order: ``open``, ``mc``).
ITEM_FORMATS: Registry[ItemFormat] = Registry("item format", value_type=ItemFormat)


def item_format(name: str) -> ItemFormat:
    """The entry of an item format. Raises UnknownNameError (listing the formats) for an unknown name."""
    return ITEM_FORMATS.get(name)


for _f in (
    ItemFormat("open", lambda item: item.question),
    ItemFormat("mc", mc_question, options=True, new_tokens=MC_MAX_NEW_TOKENS,
               contexts=("mc_bare", "mc_answer_slot", "mc_guess_slot"), rules=("mc_letter",),
               probe_prompt="mc_confidence"),
):
    ITEM_FORMATS.register(_f.name, _f)
