"""Scoring contexts: the text placed before an answer when its token score is read.

Study 000 section 3.4 and Appendix A ("Prompts and contexts"). A context is a
user prompt (rendered with the question, wrapped as the user turn), an
assistant prefix that opens the assistant turn, and the separator between that
prefix and the answer. The context and the answer are tokenized separately and
their ids joined (:func:`confgrid.protocols.chat.scoring_request`).

Built-in contexts:

================  ===========================  ================  =========
id                user prompt                  assistant prefix  separator
================  ===========================  ================  =========
``bare``          ``bare`` (question+Answer:)  ``""``            ``""``
``answer_slot``   ``question`` (question only) ``"Answer:"``     ``" "``
``guess_slot``    ``confidence``               ``"Guess:"``      ``" "``
``answer_only``   ``answer_only_instruction``  ``"Answer:"``     ``" "``
================  ===========================  ================  =========

In the bare context the answer starts the assistant turn with no leading
space; after ``Answer:`` or ``Guess:`` it follows a single space, so the first
answer token can differ between contexts (study 000 Appendix A).
"""

from __future__ import annotations

from dataclasses import dataclass

from confgrid.protocols.prompts import get_prompt

__all__ = ["CONTEXTS", "ScoringContext", "get_context", "register_context"]

_SEPARATORS = ("", " ")


@dataclass(frozen=True)
class ScoringContext:
    """One scoring context, declared.

    Attributes
    ----------
    id : str
        Registry key (``bare``, ``answer_slot``, ``guess_slot``, ...).
    user_prompt : str
        Id of a registered prompt (:func:`confgrid.protocols.prompts.get_prompt`)
        rendered with the question as the user turn.
    assistant_prefix : str
        Text that opens the assistant turn before the answer (``"Answer:"``,
        ``"Guess:"``), ``""`` for none.
    separator : str
        Text between the prefix and the answer: ``""`` or ``" "``. The
        separator is tokenized with the answer, so a leading space belongs to
        the answer's first token.
    description : str
        One line for reports.
    """

    id: str
    user_prompt: str
    assistant_prefix: str = ""
    separator: str = ""
    description: str = ""

    def __post_init__(self) -> None:
        if not self.id:
            raise ValueError("ScoringContext.id must be a non-empty string, got ''")
        if self.separator not in _SEPARATORS:
            raise ValueError(f"ScoringContext {self.id!r}: separator={self.separator!r}; allowed: {list(_SEPARATORS)}")

    def user_text(self, question: str) -> str:
        """The user turn for ``question``: the user prompt rendered.

        Raises
        ------
        KeyError
            If ``user_prompt`` is not a registered prompt id.
        """
        return get_prompt(self.user_prompt).render(question)


#: Registered scoring contexts, by id.
CONTEXTS: dict[str, ScoringContext] = {}


def register_context(context: ScoringContext) -> ScoringContext:
    """Add ``context`` to :data:`CONTEXTS`.

    Raises
    ------
    ValueError
        If a context with the same id is already registered.
    KeyError
        If ``context.user_prompt`` is not a registered prompt id.
    """
    if context.id in CONTEXTS:
        raise ValueError(f"register_context: a context with id={context.id!r} is already registered")
    get_prompt(context.user_prompt)
    CONTEXTS[context.id] = context
    return context


def get_context(context_id: str) -> ScoringContext:
    """The registered context ``context_id``.

    Raises
    ------
    KeyError
        If no context has that id; the message lists the registered ids.
    """
    try:
        return CONTEXTS[context_id]
    except KeyError:
        raise KeyError(f"context id={context_id!r} is not registered; choose one of {sorted(CONTEXTS)}") from None


register_context(
    ScoringContext("bare", "bare", "", "", "User turn: the question and Answer:; the answer starts the assistant turn.")
)
register_context(
    ScoringContext("answer_slot", "question", "Answer:", " ", "User turn: the question alone; assistant: 'Answer: <answer>'.")
)
register_context(
    ScoringContext("guess_slot", "confidence", "Guess:", " ", "User turn: the confidence prompt; assistant: 'Guess: <answer>'.")
)
register_context(
    ScoringContext(
        "answer_only",
        "answer_only_instruction",
        "Answer:",
        " ",
        "User turn: the answer-only instruction without its Answer:; assistant: 'Answer: <answer>'.",
    )
)
