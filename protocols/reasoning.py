"""Answer extraction around a reasoning block (thinking models).

A thinking model writes its reasoning before the answer: Qwen3 and DeepSeek-R1 inside ``<think>...</think>``, others
up to a declared marker (``models[].reasoning_end``, e.g. gpt-oss's ``assistantfinal`` once special tokens are
dropped). Parsing reads only what follows the reasoning; a reasoning block that never ends (the budget ran out while
thinking) is a recorded parse status, ``reasoning_unterminated``, never an answer.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["THINK_START", "THINK_END", "Visible", "strip_reasoning"]

#: The reasoning block of Qwen3 / DeepSeek-R1 style templates.
THINK_START = "<think>"
THINK_END = "</think>"


class Visible(NamedTuple):
    """A generation split into its reasoning and the text after it.

    Attributes
    ----------
    text : str or None
        What the answer is parsed from; None when the reasoning never ended.
    reasoning : str or None
        The reasoning text (markers removed), or None when there was none.
    status : str
        ``none`` (no reasoning block), ``stripped`` or ``unterminated``.
    """

    text: str | None
    reasoning: str | None
    status: str


def strip_reasoning(text: str | None, end_marker: str | None = None) -> Visible:
    """The text a parser should read, with the reasoning block removed.

    Parameters
    ----------
    text : str or None
        The decoded generation.
    end_marker : str, optional
        A model's declared end of reasoning: everything up to and including its LAST occurrence is reasoning; if the
        marker never occurs, the reasoning is unterminated. None: a ``<think>...</think>`` block is removed when the
        text opens one (a text without ``<think>`` is left as it is; a lone ``</think>`` ends an opened-by-template
        block).

    Returns
    -------
    Visible

    Examples
    --------
    >>> strip_reasoning("<think>Paris or Lyon?</think>\\nGuess: Paris")
    Visible(text='\\nGuess: Paris', reasoning='Paris or Lyon?', status='stripped')
    >>> strip_reasoning("<think>still thinking").status
    'unterminated'
    >>> strip_reasoning("Guess: Paris")
    Visible(text='Guess: Paris', reasoning=None, status='none')
    """
    if text is None:
        return Visible(None, None, "none")
    if end_marker:
        k = text.rfind(end_marker)
        if k < 0:
            return Visible(None, text, "unterminated")
        return Visible(text[k + len(end_marker):], text[:k], "stripped")
    start = text.find(THINK_START)
    end = text.rfind(THINK_END)
    if start < 0 and end < 0:
        return Visible(text, None, "none")
    if end < 0:
        return Visible(None, text[start + len(THINK_START):], "unterminated")
    begin = start + len(THINK_START) if 0 <= start < end else 0
    return Visible(text[end + len(THINK_END):], text[begin:end].strip(), "stripped")
