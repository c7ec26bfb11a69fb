"""Scoring contexts: the text placed before an answer when its token score is read.

Study 000 section 3.4 and Appendix A ("Prompts and contexts"). A context is a user prompt (rendered with the question,
wrapped as the user turn), an assistant prefix that opens the assistant turn, and the separator between that prefix
and the answer. The context and the answer are tokenized separately and their ids joined
(:func:`confgrid.protocols.chat.scoring_request`).

Built-in contexts:

================  ===========================  ================  =========
id                user prompt                  assistant prefix  separator
================  ===========================  ================  =========
``bare``          ``bare`` (question+Answer:)  ``""``            ``""``
``answer_slot``   ``question`` (question only) ``"Answer:"``     ``" "``
``guess_slot``    ``confidence``               ``"Guess:"``      ``" "``
``answer_only``   ``answer_only_instruction``  ``"Answer:"``     ``" "``
================  ===========================  ================  =========

In the bare context the answer starts the assistant turn with no leading space; after ``Answer:`` or ``Guess:`` it
follows a single space, so the first answer token can differ between contexts (study 000 Appendix A).

Further built-ins (this module registers them at import):

* ``gen_answer_only``: the generating context of the answer-only answers (user turn: the full answer-only instruction,
  ending in ``Answer:``; the answer starts the assistant turn). :func:`generating_context` maps any elicitation prompt
  id to its generating context.
* ``guess_slot_percent``: the Guess: slot of the 0-100 prompt ``confidence_percent`` (study 000 Appendix B.1).
* ``mc_bare``, ``mc_answer_slot``, ``mc_guess_slot``: the multiple-choice format (study 000 Appendix F),
  ``item_format="mc"``: the question is rendered with lettered options (:func:`confgrid.protocols.mc.mc_question`).
  The bare context uses the letter-only prompt ``mc_letter`` (ending in ``Answer:``); the Answer: slot uses
  ``mc_letter_instruction`` (the same prompt without its final ``Answer:``) and opens the assistant turn with
  ``Answer:``; the Guess: slot uses ``mc_confidence``.
* The prompt ablation (study 000 section 3.4, Appendix C): 4 user prompts x 2 markers, ids ``abl_<prompt>_<marker>``
  (:data:`ABLATION_PROMPTS`, :data:`ABLATION_MARKERS`, :func:`ablation_cells`). Three cells have the coordinates of
  main contexts: ``abl_question_answer`` = ``answer_slot``, ``abl_instruction_answer`` = ``answer_only``,
  ``abl_confidence_guess`` = ``guess_slot`` (:func:`same_context` finds such twins, so a runner can score each
  distinct context once).

Users add contexts in YAML with :func:`load_context_file` (a list of mappings with keys ``id``, ``user_prompt``,
``assistant_prefix``, ``separator``, ``item_format``, ``description``).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any, NamedTuple

from confgrid import yaml_load
from confgrid.protocols.items import Item
from confgrid.protocols.item_formats import ITEM_FORMATS
from confgrid.protocols.prompts import PROMPTS, get_prompt
from confgrid.registry import Registry

__all__ = [
    "ABLATION_MARKERS",
    "ABLATION_PROMPTS",
    "CONTEXTS",
    "ITEM_FORMATS",
    "AblationCell",
    "ScoringContext",
    "ablation_cells",
    "contexts_from_mappings",
    "generating_context",
    "get_context",
    "load_context_file",
    "register_context",
    "same_context",
]

_SEPARATORS = ("", " ")

# ids must be usable in file names and MLflow keys
_ID_RE = re.compile(r"^[A-Za-z0-9_.-]+$")
_CONTEXT_FIELDS = ("id", "user_prompt", "assistant_prefix", "separator", "item_format", "description")


@dataclass(frozen=True)
class ScoringContext:
    """One scoring context, declared.

    Attributes
    ----------
    id : str
        Registry key (``bare``, ``answer_slot``, ``guess_slot``, ...).
    user_prompt : str
        Id of a registered prompt (:func:`confgrid.protocols.prompts.get_prompt`) rendered with the question as the
        user turn.
    assistant_prefix : str
        Text that opens the assistant turn before the answer (``"Answer:"``, ``"Guess:"``), ``""`` for none.
    separator : str
        Text between the prefix and the answer: ``""`` or ``" "``. The separator is tokenized with the answer, so a
        leading space belongs to the answer's first token.
    description : str
        One line for reports.
    item_format : str, default "open"
        A registered item format (:mod:`confgrid.protocols.item_formats`): ``"open"`` renders ``item.question``;
        ``"mc"`` renders the question with lettered options. Used by :meth:`item_text`.
    """

    id: str
    user_prompt: str
    assistant_prefix: str = ""
    separator: str = ""
    description: str = ""
    item_format: str = "open"

    def __post_init__(self) -> None:
        if not self.id:
            raise ValueError("ScoringContext.id must be a non-empty string, got ''")
        if not _ID_RE.match(self.id):
            raise ValueError(
                f"ScoringContext id={self.id!r}: allowed characters are letters, digits, '_', '.', '-' "
                "(ids name files and MLflow keys)"
            )
        if self.separator not in _SEPARATORS:
            raise ValueError(
                f"ScoringContext {self.id!r}: separator={self.separator!r}; allowed: {list(_SEPARATORS)} "
                "(the separator is tokenized with the answer; put any other text, such as a newline, "
                "at the end of assistant_prefix)"
            )
        if self.item_format not in ITEM_FORMATS:
            raise ValueError(f"ScoringContext {self.id!r}: item_format={self.item_format!r}; allowed: {list(ITEM_FORMATS)}")

    @property
    def coordinates(self) -> tuple[str, str, str, str]:
        """``(user_prompt, assistant_prefix, separator, item_format)``: what the rendered ids depend on."""
        return (self.user_prompt, self.assistant_prefix, self.separator, self.item_format)

    def question_text(self, item: Item) -> str:
        """What replaces ``{question}`` for ``item``: the question, with lettered options when ``item_format="mc"``.

        Raises ``ValueError`` if ``item_format="mc"`` and the item has no options.
        """
        return ITEM_FORMATS[self.item_format].question(item)

    def item_text(self, item: Item) -> str:
        """The user turn for ``item``: ``user_text(question_text(item))``."""
        return self.user_text(self.question_text(item))

    def user_text(self, question: str) -> str:
        """The user turn for ``question``: the user prompt rendered (``KeyError`` if it is not registered)."""
        return get_prompt(self.user_prompt).render(question)


#: Registered scoring contexts, by id (kind ``"scoring context"``).
CONTEXTS: Registry[ScoringContext] = Registry("scoring context", value_type=ScoringContext)


def register_context(context: ScoringContext) -> ScoringContext:
    """Add ``context`` to :data:`CONTEXTS` under ``context.id`` and return it.

    Raises ``ValueError`` if the id is already registered, :class:`~confgrid.registry.UnknownNameError` (a
    ``KeyError`` and a ``ValueError``) if ``context.user_prompt`` is not a registered prompt id (nothing is registered
    then), and ``TypeError`` if ``context`` is not a :class:`ScoringContext`.
    """
    if not isinstance(context, ScoringContext):
        raise TypeError(f"register_context: expected a ScoringContext, got {type(context).__name__}")
    get_prompt(context.user_prompt)
    return CONTEXTS.register(context.id, context)


def get_context(context_id: str) -> ScoringContext:
    """The registered context ``context_id``.

    Raises :class:`~confgrid.registry.UnknownNameError` (a ``KeyError`` and a ``ValueError``) listing the registered
    ids if none has that id.
    """
    return CONTEXTS.get(context_id)


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


# ----------------------------------------------------------------------------- lookups


def same_context(context: ScoringContext | str) -> str:
    """Id of the first registered context with the same :attr:`~ScoringContext.coordinates`.

    Contexts with equal coordinates render identical ids for every item, so a runner can score each distinct context
    once and copy the scores (e.g. ``same_context("abl_confidence_guess") == "guess_slot"``). A context that is not
    registered and has no twin returns its own id.
    """
    ctx = get_context(context) if isinstance(context, str) else context
    for cid, other in CONTEXTS.items():
        if other.coordinates == ctx.coordinates:
            return cid
    return ctx.id


# ----------------------------------------------------------------------------- generating contexts

#: Prompts whose ``{question}`` is the multiple-choice rendering.
_MC_PROMPTS = ("mc_letter", "mc_confidence", "mc_letter_instruction")


def generating_context(prompt_id: str, *, item_format: str | None = None) -> ScoringContext:
    """The generating context of an elicitation prompt: the exact prompt that produced the answer.

    Rule: if the prompt's template ends with ``"\\n" + answer_label`` (``bare``, ``answer_only``, ``mc_letter``), the
    label is in the user turn and the model writes the answer directly: prefix ``""``, separator ``""``. Otherwise
    (``confidence``, ``confidence_percent``, ``mc_confidence``) the model writes ``<answer_label> <answer>`` itself,
    so the answer follows ``answer_label`` and a space: prefix ``answer_label``, separator ``" "``.

    Parameters
    ----------
    prompt_id : str
        A registered prompt id.
    item_format : str or None
        ``"open"`` or ``"mc"``; None infers ``"mc"`` for the built-in multiple-choice prompts and ``"open"``
        otherwise.

    Returns
    -------
    ScoringContext
        The registered context with these coordinates when there is one (``confidence`` -> ``guess_slot``, ``bare`` ->
        ``bare``, ``answer_only`` -> ``gen_answer_only``, ``mc_letter`` -> ``mc_bare``, ``mc_confidence`` ->
        ``mc_guess_slot``, ``confidence_percent`` -> ``guess_slot_percent``); else a new, unregistered context with id
        ``gen_<prompt_id>``.

    Raises
    ------
    KeyError
        If the prompt is not registered.
    ValueError
        If the prompt has no ``answer_label`` (there is no answer to place).
    """
    prompt = get_prompt(prompt_id)
    if not prompt.answer_label:
        raise ValueError(f"generating_context: prompt {prompt_id!r} has answer_label=None; it elicits no labelled answer")
    fmt = item_format or ("mc" if prompt_id in _MC_PROMPTS else "open")
    if prompt.template.endswith("\n" + prompt.answer_label):
        prefix, sep = "", ""
    else:
        prefix, sep = prompt.answer_label, " "
    candidate = ScoringContext(
        f"gen_{prompt_id}", prompt_id, prefix, sep, f"Generating context of prompt {prompt_id!r}.", fmt
    )
    twin = same_context(candidate)
    return CONTEXTS.get(twin) if twin in CONTEXTS else candidate


# ----------------------------------------------------------------------------- prompt ablation

#: The ablation's user prompts, in the order the study adds them (axis name -> prompt id).
ABLATION_PROMPTS: dict[str, str] = {
    "question": "question",
    "instruction": "answer_only_instruction",
    "noprob": "confidence_no_probability",
    "confidence": "confidence",
}

#: The ablation's markers at the start of the assistant turn (axis name -> prefix).
ABLATION_MARKERS: dict[str, str] = {"answer": "Answer:", "guess": "Guess:"}

#: Cells that coincide with a main context (study 000 Appendix C).
_ABLATION_TWINS = {
    ("question", "answer"): "answer_slot",
    ("instruction", "answer"): "answer_only",
    ("confidence", "guess"): "guess_slot",
}


class AblationCell(NamedTuple):
    """One cell of the prompt ablation.

    Attributes
    ----------
    context_id : str
        The registered context, ``abl_<prompt>_<marker>``.
    prompt, marker : str
        Axis names: keys of :data:`ABLATION_PROMPTS` and :data:`ABLATION_MARKERS`.
    user_prompt : str
        The prompt id.
    assistant_prefix : str
        ``"Answer:"`` or ``"Guess:"``.
    same_as : str or None
        The main context with the same coordinates, or None.
    """

    context_id: str
    prompt: str
    marker: str
    user_prompt: str
    assistant_prefix: str
    same_as: str | None


def ablation_cells() -> list[AblationCell]:
    """The 8 cells of the prompt ablation, prompts in study order, ``answer`` before ``guess``.

    >>> [c.context_id for c in ablation_cells()][:3]
    ['abl_question_answer', 'abl_question_guess', 'abl_instruction_answer']
    """
    return [
        AblationCell(f"abl_{p}_{m}", p, m, ABLATION_PROMPTS[p], ABLATION_MARKERS[m], _ABLATION_TWINS.get((p, m)))
        for p in ABLATION_PROMPTS
        for m in ABLATION_MARKERS
    ]


# ----------------------------------------------------------------------------- YAML


def contexts_from_mappings(data: Any, *, where: str = "contexts", register: bool = True) -> list[ScoringContext]:
    """Contexts declared as a list of mappings (or one mapping).

    Keys: ``id`` and ``user_prompt`` (required), ``assistant_prefix`` (default ``""``), ``separator`` (``""`` or
    ``" "``, default ``""``), ``item_format`` (``"open"`` or ``"mc"``, default ``"open"``), ``description``. ``where``
    names the source in error messages; with ``register`` each context is also added to :data:`CONTEXTS`, after all
    entries are validated.

    Raises ``ValueError`` on a non-mapping entry, unknown keys, a missing or non-string field, an unknown prompt id
    (the message lists the registered prompts), an invalid separator or item_format, an id registered already or given
    twice.
    """
    entries = [data] if isinstance(data, dict) else data
    if not isinstance(entries, list) or not entries:
        raise ValueError(f"{where}: expected a non-empty list of context mappings, got {type(data).__name__}")
    out: list[ScoringContext] = []
    seen: set[str] = set()
    for k, entry in enumerate(entries):
        at = f"{where}[{k}]"
        if not isinstance(entry, dict):
            raise ValueError(f"{at}: expected a mapping, got {type(entry).__name__}")
        unknown = sorted(set(entry) - set(_CONTEXT_FIELDS))
        if unknown:
            raise ValueError(f"{at}: unknown key(s) {unknown}; allowed: {list(_CONTEXT_FIELDS)}")
        for key in ("id", "user_prompt"):
            if not isinstance(entry.get(key), str) or not entry.get(key):
                raise ValueError(f"{at}: {key!r} must be a non-empty string, got {entry.get(key)!r}")
        for key in ("assistant_prefix", "separator", "item_format", "description"):
            if key in entry and not isinstance(entry[key], str):
                raise ValueError(f"{at}: {key!r} must be a string, got {entry[key]!r}")
        if entry["user_prompt"] not in PROMPTS:
            raise ValueError(
                f"{at}: user_prompt={entry['user_prompt']!r} is not a registered prompt; choose one of {sorted(PROMPTS)}"
            )
        cid = entry["id"]
        if cid in seen or (register and cid in CONTEXTS):
            # with register=False the caller decides about ids already registered
            raise ValueError(f"{at}: a context with id={cid!r} is already registered or declared")
        seen.add(cid)
        try:
            out.append(
                ScoringContext(
                    id=cid,
                    user_prompt=entry["user_prompt"],
                    assistant_prefix=entry.get("assistant_prefix", ""),
                    separator=entry.get("separator", ""),
                    description=entry.get("description", ""),
                    item_format=entry.get("item_format", "open"),
                )
            )
        except ValueError as e:
            raise ValueError(f"{at}: {e}") from None
    if register:
        for ctx in out:
            register_context(ctx)
    return out


def load_context_file(path: str | os.PathLike[str], *, register: bool = True) -> list[ScoringContext]:
    """Read scoring contexts from a YAML file (keys and ``ValueError`` as :func:`contexts_from_mappings`).

    Example file::

        - id: answer_slot_newline
          user_prompt: question
          assistant_prefix: "Answer:\\n"
          separator: ""
          description: Answer: on its own line.

    Raises ``FileNotFoundError`` if ``path`` does not exist.
    """
    p = os.fspath(path)
    if not os.path.isfile(p):
        raise FileNotFoundError(f"path={p!r}: no such context file")
    with open(p, encoding="utf-8") as f:
        data = yaml_load.safe_load(f)
    return contexts_from_mappings(data, where=f"context file {p!r}", register=register)


# ----------------------------------------------------------------------------- further built-ins

register_context(
    ScoringContext(
        "gen_answer_only",
        "answer_only",
        "",
        "",
        "Generating context of the answer-only answers: the full answer-only instruction; the answer starts the assistant turn.",
    )
)
register_context(
    ScoringContext(
        "guess_slot_percent",
        "confidence_percent",
        "Guess:",
        " ",
        "User turn: the 0-100 confidence prompt; assistant: 'Guess: <answer>'.",
    )
)
register_context(
    ScoringContext(
        "mc_bare", "mc_letter", "", "",
        "Multiple choice: user turn the letter-only prompt with options and Answer:; the letter starts the assistant turn.",
        "mc",
    )
)
register_context(
    ScoringContext(
        "mc_answer_slot", "mc_letter_instruction", "Answer:", " ",
        "Multiple choice: user turn the letter-only prompt without its Answer:; assistant: 'Answer: <letter>'.",
        "mc",
    )
)
register_context(
    ScoringContext(
        "mc_guess_slot", "mc_confidence", "Guess:", " ",
        "Multiple choice: user turn the multiple-choice confidence prompt; assistant: 'Guess: <letter>'.",
        "mc",
    )
)
for _cell in ablation_cells():
    register_context(
        ScoringContext(
            _cell.context_id,
            _cell.user_prompt,
            _cell.assistant_prefix,
            " ",
            f"Prompt ablation: user prompt {_cell.user_prompt!r}, assistant: '{_cell.assistant_prefix} <answer>'"
            + (f" (same as {_cell.same_as})." if _cell.same_as else "."),
        )
    )
del _cell
