"""How a reply is read: one registry entry per prompt ``output`` (labels, json, json_options, boxed).

A prompt declares its output format (protocols/prompts/*.yaml ``output``); the entry, reached as ``Prompt.reader``,
holds the parser and everything else that depends on the format (:class:`OutputFormat`). Duplicate name -> error;
unknown -> error listing them.

``labels``: ``Guess:`` / ``Probability:`` lines; ``json``: an answer and a probability (study 003 Appendix C), a
probability only without ``answer_key``; ``json_options``: a probability per option letter (study 002 Appendix F.2),
the answer the favoured letter(s) joined by ``|``; ``boxed``: a worked solution whose answer is its final number
(study 004 GSM8K).

Examples
--------
>>> output_format("json_options").options, output_format("labels").token_scores
(True, True)
>>> output_format("xml")
Traceback (most recent call last):
    ...
confgrid.registry.UnknownNameError: unknown output format 'xml'; allowed: boxed, json, json_options, labels
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from confgrid.protocols.json_output import TIE_SEPARATOR, parse_json_answer, parse_option_probabilities
from confgrid.protocols.numeric import parse_boxed_output
from confgrid.protocols.parsing import ParseResult, parse_output
from confgrid.registry import Registry

__all__ = ["OutputFormat", "OUTPUT_FORMATS", "output_format", "parse_for_prompt"]

_JSON_CONVENTION = ("JSON reply: the last object holding the asked key is read; keys case-insensitive; a '%' means "
                    "percent, else the prompt's scale ({scale}) is applied, never guessed")


@dataclass(frozen=True)
class OutputFormat:
    """One way a reply is read.

    Attributes
    ----------
    name : str
        The prompts' ``output`` value.
    parse : callable
        ``(text, prompt, n_options) -> ParseResult``; never raises for any text.
    problem : callable
        ``prompt -> str or None``: what the prompt lacks for this format (its ``__post_init__`` raises it).
    asks_answer : callable
        ``prompt -> bool``: whether the reply holds an answer (False: a probability for a supplied answer).
    new_tokens : int or None
        Default decoding budget of an answer set (None: 32 open, 20 multiple choice).
    token_scores : bool
        The answer is token-scored in the scoring contexts by default (False: no default contexts).
    verbalized : callable
        ``prompt -> "stated" | "probe" | "none"``: where an answer set's verbalized score comes from.
    options : bool
        The reply states a probability per option letter: the set needs format ``mc``, its rule is ``mc_favoured``,
        and the main set cannot use it.
    worked : bool
        A worked solution: the elicitation's default budget cuts it off, so it must be declared.
    conventions : callable
        ``prompt -> list of str``: the reading conventions a reader could choose otherwise (the checklist).
    """

    name: str
    parse: Callable[[str | None, Any, int | None], ParseResult]
    problem: Callable[[Any], str | None] = lambda p: None
    asks_answer: Callable[[Any], bool] = lambda p: True
    new_tokens: int | None = None
    token_scores: bool = False
    verbalized: Callable[[Any], str] = lambda p: "stated"
    options: bool = False
    worked: bool = False
    conventions: Callable[[Any], list[str]] = lambda p: []


#: Every output format, by name.
OUTPUT_FORMATS: Registry[OutputFormat] = Registry("output format", value_type=OutputFormat)


def output_format(name: str) -> OutputFormat:
    """The entry of an output format. Raises UnknownNameError (listing the formats) for an unknown name."""
    return OUTPUT_FORMATS.get(name)


def _labels(text: str | None, p: Any, n_options: int | None) -> ParseResult:
    return parse_output(text, answer_label=getattr(p, "answer_label", None) or "Guess:",
                        confidence_label=getattr(p, "confidence_label", None) or "Probability:",
                        scale=getattr(p, "scale", None) or "unit", decimal_comma=bool(getattr(p, "decimal_comma", False)))


def _json(text: str | None, p: Any, n_options: int | None) -> ParseResult:
    if getattr(p, "answer_key", None) is None:  # a probability for a supplied answer
        r = parse_json_answer(text, answer_key=p.confidence_key, confidence_key=p.confidence_key, scale=p.scale,
                              n_options=None)
        return ParseResult(None, r.probability, r.status, False)
    r = parse_json_answer(text, answer_key=p.answer_key, confidence_key=p.confidence_key, scale=p.scale,
                          n_options=n_options)
    return ParseResult(r.answer, r.probability, r.status, False)


def _json_problem(p: Any) -> str | None:
    if not p.confidence_key:
        return "output 'json' needs confidence_key (the probability's key)"
    if p.scale not in ("unit", "percent"):
        return f"output 'json' needs scale 'unit' or 'percent' (received {p.scale!r})"
    return None


def _json_options(text: str | None, p: Any, n_options: int | None) -> ParseResult:
    if not n_options:
        return ParseResult(None, None, "empty" if not (text or "").strip() else "unparseable", False)
    o = parse_option_probabilities(text, int(n_options))
    return ParseResult(TIE_SEPARATOR.join(o.favoured) if o.favoured else None, o.confidence, o.status, False)


def _boxed(text: str | None, p: Any, n_options: int | None) -> ParseResult:
    return parse_boxed_output(text, confidence_label=getattr(p, "confidence_label", None),
                              scale=getattr(p, "scale", None) or "unit",
                              decimal_comma=bool(getattr(p, "decimal_comma", False)))


def _boxed_conventions(p: Any) -> list[str]:
    return ["worked solution: the answer is the last number in the last closed \\boxed{} (else the last number of "
            "the reply), thousands separators read, $ and % ignored, a/b only inside the box; "
            + (f"the confidence is the number after the last {p.confidence_label!r} label (no unlabelled fallback)"
               if p.confidence_label else "no confidence asked")]


for _f in (
    OutputFormat("labels", _labels, token_scores=True,
                 verbalized=lambda p: "stated" if p.confidence_label else "probe"),
    OutputFormat("json", _json, problem=_json_problem, asks_answer=lambda p: p.answer_key is not None,
                 new_tokens=96, conventions=lambda p: [_JSON_CONVENTION.format(scale=p.scale or "normalized")]),
    OutputFormat("json_options", _json_options, new_tokens=96, options=True, conventions=lambda p: [
        _JSON_CONVENTION.format(scale=p.scale or "normalized"),
        "option probabilities normalized to sum to 1 (a sum of 0 is status zero_sum); the favoured option is the "
        "argmax; a tie of m options including the gold one scores 1/m"]),
    OutputFormat("boxed", _boxed, problem=lambda p: (
        f"output 'boxed' with a confidence_label needs scale 'unit' or 'percent' (received {p.scale!r})"
        if p.confidence_label and p.scale not in ("unit", "percent") else None),
        new_tokens=512, worked=True,  # its number re-supplied after Guess: is no reply to probe: "none"
        verbalized=lambda p: "stated" if p.confidence_label else "none",
        conventions=_boxed_conventions),
):
    OUTPUT_FORMATS.register(_f.name, _f)


def parse_for_prompt(text: str | None, prompt: object, n_options: int | None = None) -> ParseResult:
    """The reply read the way its prompt asked for it (the prompt's :class:`OutputFormat` ``parse``).

    Parameters
    ----------
    text : str
        The generated text.
    prompt : Prompt or str
        A :class:`~confgrid.protocols.prompts.Prompt` or a registered prompt id; an object without ``output`` is read
        as ``labels`` (missing labels fall back to ``Guess:`` / ``Probability:``).
    n_options : int or None
        Lettered options of the item (``json``: the answer must be one of their letters; ``json_options``: required,
        else ``unparseable``).

    Raises
    ------
    KeyError
        If ``prompt`` is an id that is not registered (the only error; the parse itself never raises for any text).
    """
    from confgrid.protocols.prompts import get_prompt  # prompts.py imports this registry: a cycle at the top

    p = get_prompt(prompt) if isinstance(prompt, str) else prompt
    return output_format(getattr(p, "output", "labels")).parse(text, p, n_options)
