"""Prompt texts as frozen, declared objects, loaded from YAML.

The built-in prompts are the YAML files in ``protocols/prompts/`` (package data): ``bare``, ``confidence`` and
``answer_only`` (study 000, Table 9). Four prompts are derived from the built-ins, never written twice (study 000
Appendix A "Prompts and contexts" and Appendix C):

* ``question``: the bare prompt without its final ``"\\nAnswer:"`` (the question alone; the user turn of the Answer:
  slot);
* ``answer_only_instruction``: the answer-only instruction without its final ``"\\nAnswer:"`` (the user turn of the
  answer-only context);
* ``confidence_no_probability``: the confidence prompt with its declared ``deletions`` applied (the prompt ablation);
* ``mc_letter_instruction``: the multiple-choice letter-only prompt without its final ``"\\nAnswer:"`` (the user turn
  of the multiple-choice Answer: slot).

Further built-ins: ``confidence_percent`` (integer 0-100 scale, study 000 Appendix B.1), ``mc_letter`` and
``mc_confidence`` (multiple-choice format, Appendix F; their ``{question}`` is the question with lettered options, see
:mod:`confgrid.protocols.mc`), ``gsm8k_boxed`` and ``gsm8k_boxed_confidence`` (a worked solution ending in
``\\boxed{}``, the second with a probability line; ``output: boxed``, study 004).

Examples
--------
>>> from confgrid.protocols.prompts import get_prompt
>>> get_prompt("bare").render("What is 2+2?")
'What is 2+2?\\nAnswer:'
>>> get_prompt("question").render("What is {x}?")
'What is {x}?'
"""

from __future__ import annotations

import dataclasses
import importlib.resources
import os
from dataclasses import dataclass
from typing import Any

from confgrid import yaml_load
from confgrid.protocols.output_formats import OUTPUT_FORMATS, OutputFormat, output_format
from confgrid.registry import Registry

__all__ = [
    "PLACEHOLDER",
    "PROMPTS",
    "Prompt",
    "get_prompt",
    "load_prompt_file",
    "register_prompt",
]

#: The one placeholder a template may contain; replaced by the question text.
PLACEHOLDER = "{question}"
#: Where a rating or verification template puts the proposed answer.
ANSWER_PLACEHOLDER = "{answer}"

_FIELDS = ("id", "template", "answer_label", "confidence_label", "scale", "decimal_comma", "deletions", "description",
           "output", "answer_key", "confidence_key")
_SCALES = (None, "unit", "percent")


@dataclass(frozen=True)
class Prompt:
    """A prompt template with its declared labels.

    Attributes
    ----------
    id : str
        Registry key (``bare``, ``confidence``, ...).
    template : str
        The text with one or more ``{question}`` placeholders; no other placeholders (other braces are literal text).
    answer_label : str or None
        Label before the answer (``"Answer:"``, ``"Guess:"``), None if none.
    confidence_label : str or None
        Label before the stated confidence (``"Probability:"``), None if the prompt asks for no confidence.
    scale : str or None
        Scale of the stated confidence: ``"unit"`` (a probability in [0, 1]), ``"percent"`` (0-100), or None without a
        confidence request.
    decimal_comma : bool
        The stated numbers use a decimal comma (``0,9``; a prompt in a language that writes them so); the parser then
        reads ``,`` and not ``.`` as the decimal separator (protocols/parsing.py, ``parse_number``). Default False.
    deletions : tuple of str
        Substrings that remove the probability request, applied in order by :meth:`without_probability_request`; each
        must occur exactly once.
    description : str
        One line for humans and run reports.
    output : str
        How the reply is read: a registered output format (protocols/output_formats.py: labels, json, json_options,
        boxed; default ``labels``), its entry :attr:`reader`.
    answer_key, confidence_key : str or None
        ``json`` output: the keys of the answer and of the probability (matched case-insensitively; default ``answer``
        and ``probability``). ``answer_key: null``: the prompt asks for a probability only (the answer rated is the
        item's supplied answer, e.g. HaluEval's).
    """

    id: str
    template: str
    answer_label: str | None = None
    confidence_label: str | None = None
    scale: str | None = None
    decimal_comma: bool = False
    deletions: tuple[str, ...] = ()
    description: str = ""
    output: str = "labels"
    answer_key: str | None = "answer"
    confidence_key: str | None = "probability"

    def __post_init__(self) -> None:
        if not self.id:
            raise ValueError("Prompt.id must be a non-empty string, got ''")
        if PLACEHOLDER not in self.template:
            raise ValueError(f"Prompt {self.id!r}: template has no {PLACEHOLDER} placeholder")
        if self.scale not in _SCALES:
            raise ValueError(f"Prompt {self.id!r}: scale={self.scale!r}; allowed: {list(_SCALES)}")
        if not isinstance(self.decimal_comma, bool):
            raise ValueError(f"Prompt {self.id!r}: decimal_comma={self.decimal_comma!r}; allowed: true or false")
        if isinstance(self.deletions, str) or not all(isinstance(d, str) and d for d in self.deletions):
            raise ValueError(f"Prompt {self.id!r}: deletions={self.deletions!r}; must be a list of non-empty strings")
        object.__setattr__(self, "deletions", tuple(self.deletions))
        if self.output not in OUTPUT_FORMATS:
            raise ValueError(f"Prompt {self.id!r}: output={self.output!r}; allowed: {list(OUTPUT_FORMATS)}")
        for key in ("answer_key", "confidence_key"):
            v = getattr(self, key)
            if v is not None and (not isinstance(v, str) or not v.strip()):
                raise ValueError(f"Prompt {self.id!r}: {key}={v!r}; must be a non-empty string or null")
        problem = self.reader.problem(self)
        if problem:
            raise ValueError(f"Prompt {self.id!r}: {problem}")

    @property
    def reader(self) -> OutputFormat:
        """How its reply is read: the entry of its output format (protocols/output_formats.py)."""
        return output_format(self.output)

    @property
    def asks_answer(self) -> bool:
        """Whether the reply holds an answer (False: a json prompt that asks a probability for a supplied answer)."""
        return self.reader.asks_answer(self)

    def render(self, question: str, answer: str | None = None) -> str:
        """The prompt text with ``{question}`` replaced by ``question`` (and ``{answer}`` by ``answer``).

        Plain substitution (``str.replace``), so braces in the question or in the template are kept as they are.
        ``{answer}`` is the proposed answer of a rating or verification template (study 001 Tables 5 and 6);
        ``ValueError`` if the template has it and no ``answer`` is given.
        """
        text = self.template
        if ANSWER_PLACEHOLDER in text:
            if answer is None:
                raise ValueError(f"Prompt {self.id!r} rates a proposed answer ({ANSWER_PLACEHOLDER}); pass answer=")
            text = text.replace(ANSWER_PLACEHOLDER, answer)
        return text.replace(PLACEHOLDER, question)

    @property
    def takes_answer(self) -> bool:
        """Whether the template holds ``{answer}`` (a proposed answer is rated)."""
        return ANSWER_PLACEHOLDER in self.template

    def without_probability_request(self, new_id: str | None = None) -> Prompt:
        """This prompt with its ``deletions`` applied in order; ``confidence_label``, ``scale``, ``deletions`` unset.

        Study 000 Appendix C. ``new_id`` defaults to ``"<id>_no_probability"``. Raises ``ValueError`` if no deletions
        are declared, or one does not occur exactly once in the text left by the deletions before it.
        """
        if not self.deletions:
            raise ValueError(f"Prompt {self.id!r}: declares no deletions; cannot remove a probability request")
        text = self.template
        for k, d in enumerate(self.deletions):
            n = text.count(d)
            if n != 1:
                raise ValueError(
                    f"Prompt {self.id!r}: deletions[{k}]={d!r} occurs {n} times in the template; must occur exactly once"
                )
            text = text.replace(d, "")
        return dataclasses.replace(
            self,
            id=new_id or f"{self.id}_no_probability",
            template=text,
            confidence_label=None,
            scale=None,
            deletions=(),
            description=f"{self.id} without its probability request",
        )

    def without_answer_label(self, new_id: str | None = None) -> Prompt:
        """This prompt without its final ``"\\n" + answer_label`` (study 000 Appendix A).

        For the Answer: slot and the answer-only context, where the final Answer: moves from the user turn to the
        start of the assistant turn. Raises ``ValueError`` if the template does not end with ``"\\n" + answer_label``.
        """
        suffix = f"\n{self.answer_label}" if self.answer_label else None
        if suffix is None or not self.template.endswith(suffix):
            raise ValueError(
                f"Prompt {self.id!r}: template does not end with a newline and answer_label={self.answer_label!r}"
            )
        return dataclasses.replace(
            self,
            id=new_id or f"{self.id}_no_answer_label",
            template=self.template[: -len(suffix)],
            answer_label=None,
            description=f"{self.id} without its final {self.answer_label}",
        )


#: Registered prompts, by id (kind ``"prompt"``).
PROMPTS: Registry[Prompt] = Registry("prompt", value_type=Prompt)


def register_prompt(prompt: Prompt) -> Prompt:
    """Add ``prompt`` to :data:`PROMPTS` under ``prompt.id`` and return it.

    Raises ``ValueError`` if the id is already registered, ``TypeError`` if ``prompt`` is not a :class:`Prompt`.
    """
    if not isinstance(prompt, Prompt):
        raise TypeError(f"register_prompt: expected a Prompt, got {type(prompt).__name__}")
    return PROMPTS.register(prompt.id, prompt)


#: The registered prompt of an id (:meth:`~confgrid.registry.Registry.get`).
get_prompt = PROMPTS.get


def _prompt_from_mapping(data: Any, where: str) -> Prompt:
    if not isinstance(data, dict):
        raise ValueError(f"{where}: expected a YAML mapping, got {type(data).__name__}")
    unknown = sorted(set(data) - set(_FIELDS))
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {unknown}; allowed: {list(_FIELDS)}")
    for key in ("id", "template"):
        if not isinstance(data.get(key), str):
            raise ValueError(f"{where}: {key!r} must be a string, got {data.get(key)!r}")
    fields = dict(data)
    fields["deletions"] = tuple(fields.get("deletions") or ())
    fields["description"] = fields.get("description") or ""
    return Prompt(**fields)


def load_prompt_file(path: str | os.PathLike[str], *, register: bool = True) -> Prompt:
    """Read one YAML prompt file (keys: the fields of :class:`Prompt`); with ``register``, add it to :data:`PROMPTS`.

    Raises ``FileNotFoundError`` if ``path`` does not exist; ``ValueError`` on unknown keys, a missing
    ``id``/``template``, a template without ``{question}``, or (with ``register``) an id already registered.
    """
    p = os.fspath(path)
    if not os.path.isfile(p):
        raise FileNotFoundError(f"path={p!r}: no such prompt file")
    with open(p, encoding="utf-8") as f:
        prompt = _prompt_from_mapping(yaml_load.safe_load(f), f"prompt file {p!r}")
    return register_prompt(prompt) if register else prompt


def _load_builtins() -> None:
    folder = importlib.resources.files("confgrid.protocols").joinpath("prompts")
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.name.endswith((".yaml", ".yml")):
            register_prompt(_prompt_from_mapping(yaml_load.safe_load(entry.read_text("utf-8")), f"built-in {entry.name}"))
    register_prompt(get_prompt("bare").without_answer_label("question"))
    if "answer_only" in PROMPTS:
        register_prompt(get_prompt("answer_only").without_answer_label("answer_only_instruction"))
    register_prompt(get_prompt("confidence").without_probability_request("confidence_no_probability"))
    if "mc_letter" in PROMPTS:  # the user turn of the multiple-choice Answer: slot (study 000 Appendix F)
        register_prompt(get_prompt("mc_letter").without_answer_label("mc_letter_instruction"))


_load_builtins()
