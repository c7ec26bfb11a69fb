"""The reporting checklist of a run (study 000 Table 5 and section 4.6), pure part.

:func:`build_checklist` returns a JSON-serialisable dict that states, for each signal (the verbalized score and the
token score in each scoring context), every protocol choice a report must give: the scoring context and answer slot,
the full prompt texts (rendered for the placeholder question ``{question}``), the chat template (a hash, optionally
the text, and whether it was used) and system prompt, the token aggregation, the correctness rule, the ECE estimator
and bin count, the parse policy, the decoding settings, and the rows dropped and why.
:func:`render_checklist_markdown` renders it for the run directory and MLflow. Nothing here reads files or runs a
model: the caller passes what the run used.

Examples
--------
>>> c = build_checklist(model="m", dataset="d", use_chat_template=False,
...                     decoding={"do_sample": False, "max_new_tokens": 32},
...                     token_contexts=["bare"], rows_total=10, rows_dropped={"missing_confidence": 1})
>>> [s["signal"] for s in c["signals"]]
['verbalized', 'token:bare']
>>> c["rows"]["kept"]
9
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from confgrid.protocols.aggregation import DEFAULT_AGGREGATION, get_aggregation
from confgrid.protocols.chat import TEMPLATE_KWARGS, effective_separator
from confgrid.protocols.contexts import get_context
from confgrid.protocols.correctness import DEFAULT_RULE, get_rule
from confgrid.protocols.parsing import DEFAULT_PARSE_POLICY, DROP_REASONS, PARSE_POLICIES
from confgrid.protocols.prompts import PLACEHOLDER, get_prompt

__all__ = ["CHECKLIST_VERSION", "build_checklist", "render_checklist_markdown"]

#: Version of the checklist layout; bump when keys change.
CHECKLIST_VERSION = 1


def _first_line(fn: Any) -> str:
    doc = (getattr(fn, "__doc__", None) or "").strip()
    return doc.splitlines()[0].strip() if doc else ""


def _slot(prefix: str, separator: str, use_chat_template: bool) -> str:
    sep = effective_separator(separator, use_chat_template)
    where = "the start of the assistant turn" if use_chat_template else "the end of the plain-text prompt"
    if prefix:
        return f"after {prefix!r} at {where}, separator {sep!r}"
    return f"at {where}, separator {sep!r}"


def _jsonable(value: Any, where: str) -> Any:
    try:
        return json.loads(json.dumps(value))
    except (TypeError, ValueError) as e:
        raise ValueError(f"build_checklist: {where} is not JSON-serialisable ({e})") from None


def _shares(on_edge: Mapping[str, float]) -> str:
    return ", ".join(f"{k} {v:.0%}" for k, v in on_edge.items()) or "-"


def build_checklist(
    *,
    model: str,
    dataset: str,
    use_chat_template: bool,
    decoding: Mapping[str, Any],
    elicitation_prompt: str = "confidence",
    token_contexts: Sequence[str] = ("bare", "answer_slot", "guess_slot"),
    aggregation: str = DEFAULT_AGGREGATION,
    correctness_rule: str = DEFAULT_RULE,
    ece_estimator: str = "ece",
    n_bins: int | None = 10,
    ece_closure: Sequence[str] = ("left",),
    on_edge: Mapping[str, float] | None = None,
    ece_bin_confidence: Sequence[str] = ("mean",),
    ece_conventions: Mapping[str, str] | None = None,
    parse_policy: str = DEFAULT_PARSE_POLICY,
    chat_template: str | None = None,
    system_prompt: str | None = None,
    template_kwargs: Mapping[str, Any] | None = None,
    add_bos_generation: bool | None = None,
    add_bos_scoring: bool | None = None,
    rows_total: int | None = None,
    rows_dropped: Mapping[str, int] | None = None,
    include_template_text: bool = False,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The reporting checklist of one setting (model x dataset), as a JSON-serialisable dict.

    Parameters
    ----------
    model, dataset : str
        Names as in the grid.
    use_chat_template : bool
        Whether prompts were wrapped with the chat template.
    decoding : mapping
        Generation settings as run (``do_sample``, ``max_new_tokens``, ``repetition_penalty``, ...).
        JSON-serialisable.
    elicitation_prompt : str, default "confidence"
        The prompt that produced the answers and the verbalized score.
    token_contexts : sequence of str
        Scoring contexts of the token score, one signal each.
    aggregation : str
        Token aggregation (a registered name).
    correctness_rule : str
        Correctness rule (a registered name).
    ece_estimator : str
        Name of the ECE estimator as analysis knows it (not validated here).
    n_bins : int or None
        Bin count of a binned estimator; None for estimators without bins.
    ece_closure : sequence of str, default ("left",)
        The bin closures the binned estimators were computed under (``left``: ``[k/B, (k+1)/B)``; ``right``:
        ``(k/B, (k+1)/B]``; ``right_float``: right-closed on ``np.linspace`` edges).
    on_edge : mapping or None
        Signal -> share of its confidences exactly on an edge ``k/B`` of the ``n_bins`` bins (``results/edges``).
    ece_bin_confidence : sequence of str, default ("mean",)
        What stood for a bin's confidence (``mean`` of its answers, or the bin's ``midpoint``; analysis/binning.py).
    ece_conventions : mapping or None
        Published ECE conventions computed beside (name -> its one-line description, analysis/conventions.py).
    parse_policy : str
        One of :data:`~confgrid.protocols.parsing.PARSE_POLICIES`.
    chat_template : str or None
        The template text used (``tokenizer.chat_template``); recorded as a SHA-256 hash (and the text with
        ``include_template_text``).
    system_prompt : str or None
        The system prompt in effect (the template default, recorded with
        :func:`~confgrid.protocols.chat.default_system_prompt`, or an explicit one).
    template_kwargs : mapping or None
        Keyword arguments of the template render; default :data:`confgrid.protocols.chat.TEMPLATE_KWARGS`
        (``enable_thinking=False``).
    add_bos_generation, add_bos_scoring : bool or None
        The BOS rule of generation and scoring (None: the tokenizer default).
    rows_total : int or None
        Rows generated for the setting.
    rows_dropped : mapping of str to int or None
        Rows dropped, by reason (parse statuses, e.g. ``missing_confidence``, ``unlabelled_confidence``, or any other
        reason the runner records).
    include_template_text : bool, default False
        Also store the chat template's full text.
    extra : mapping or None
        Further JSON-serialisable entries, stored under ``"extra"``.

    Returns
    -------
    dict
        Keys ``version``, ``model``, ``dataset``, ``chat_template``, ``decoding``, ``correctness_rule``, ``ece``,
        ``rows``, ``signals`` (one dict per signal: ``verbalized`` then ``token:<context>``), ``extra``.

    Raises
    ------
    KeyError
        If a prompt, context, aggregation or rule is not registered (the message lists the choices).
    ValueError
        On an unknown parse policy, a negative count, more rows dropped than generated, or a non-serialisable
        ``decoding``/``extra``.
    """
    if parse_policy not in PARSE_POLICIES:
        raise ValueError(f"build_checklist: parse_policy={parse_policy!r}; allowed: {list(PARSE_POLICIES)}")
    if n_bins is not None and (not isinstance(n_bins, int) or n_bins < 1):
        raise ValueError(f"build_checklist: n_bins={n_bins!r}; must be a positive int or None")
    prompt = get_prompt(elicitation_prompt)
    agg_fn = get_aggregation(aggregation)
    rule_fn = get_rule(correctness_rule)
    dropped = {str(k): int(v) for k, v in (rows_dropped or {}).items()}
    if any(v < 0 for v in dropped.values()):
        raise ValueError(f"build_checklist: rows_dropped={dropped!r} has a negative count")
    n_dropped = sum(dropped.values())
    if rows_total is not None and (rows_total < 0 or n_dropped > rows_total):
        raise ValueError(f"build_checklist: rows_total={rows_total!r} but {n_dropped} rows dropped")

    kwargs = dict(TEMPLATE_KWARGS if template_kwargs is None else template_kwargs)
    template = {
        "used": bool(use_chat_template),
        "sha256": hashlib.sha256(chat_template.encode("utf-8")).hexdigest() if chat_template else None,
        "text": chat_template if (include_template_text and chat_template) else None,
        "kwargs": _jsonable(kwargs, "template_kwargs") if use_chat_template else {},
        "system_prompt": system_prompt,
        "add_bos_generation": add_bos_generation,
        "add_bos_scoring": add_bos_scoring,
    }
    correctness = {"rule": correctness_rule, "definition": _first_line(rule_fn)}
    ece = {"estimator": ece_estimator, "n_bins": n_bins, "closure": list(ece_closure),
           "bin_confidence": list(ece_bin_confidence), "conventions": dict(ece_conventions or {}),
           "on_edge": _jsonable(dict(on_edge or {}), "on_edge")}
    verbalized = {
        "signal": "verbalized",
        "elicitation_prompt": {
            "id": prompt.id,
            "text": prompt.render(PLACEHOLDER),
            "answer_label": prompt.answer_label,
            "confidence_label": prompt.confidence_label,
            "scale": prompt.scale,
            "decimal_comma": prompt.decimal_comma,
        },
        "answer_slot": "generated by the model (its own answer)",
        "parse_policy": parse_policy,
    }
    signals: list[dict[str, Any]] = [verbalized]
    for cid in token_contexts:
        ctx = get_context(cid)
        user = get_prompt(ctx.user_prompt)
        signals.append(
            {
                "signal": f"token:{cid}",
                "context": {
                    "id": ctx.id,
                    "description": ctx.description,
                    "user_prompt": ctx.user_prompt,
                    "user_prompt_text": user.render(PLACEHOLDER),
                    "assistant_prefix": ctx.assistant_prefix,
                    "separator": ctx.separator,
                    "item_format": ctx.item_format,
                    "slot": _slot(ctx.assistant_prefix, ctx.separator, use_chat_template),
                },
                "aggregation": {"name": aggregation, "definition": _first_line(agg_fn)},
                "answers_generated_by": elicitation_prompt,
            }
        )
    kept = None if rows_total is None else rows_total - n_dropped
    return {
        "version": CHECKLIST_VERSION,
        "model": model,
        "dataset": dataset,
        "chat_template": template,
        "decoding": _jsonable(dict(decoding), "decoding"),
        "correctness_rule": correctness,
        "ece": ece,
        "rows": {
            "total": rows_total,
            "kept": kept,
            "dropped": dict(sorted(dropped.items())),
            "drop_reasons_known": list(DROP_REASONS),
        },
        "signals": signals,
        "extra": _jsonable(dict(extra or {}), "extra"),
    }


def _cell(value: Any) -> str:
    if value is None:
        return "(none)"
    if isinstance(value, str):
        text = value
    else:
        text = json.dumps(value, sort_keys=True)
    return text.replace("|", "\\|").replace("\n", "<br>") if text else '""'


def render_checklist_markdown(checklist: Mapping[str, Any]) -> str:
    """The checklist as Markdown: one table of shared choices, one per signal, the dropped rows.

    Prompt texts appear in fenced blocks (exact text, line breaks kept).

    Raises ``KeyError`` if ``checklist`` lacks a key :func:`build_checklist` writes.
    """
    c = checklist
    t = c["chat_template"]
    lines = [
        f"# Reporting checklist: {c['model']} on {c['dataset']}",
        "",
        "| item | value |",
        "| --- | --- |",
        f"| chat template used | {_cell(t['used'])} |",
        f"| chat template sha256 | {_cell(t['sha256'])} |",
        f"| template kwargs | {_cell(t['kwargs'])} |",
        f"| system prompt | {_cell(t['system_prompt'])} |",
        f"| BOS (generation / scoring) | {_cell(t['add_bos_generation'])} / {_cell(t['add_bos_scoring'])} |",
        f"| decoding | {_cell(c['decoding'])} |",
        f"| correctness rule | {_cell(c['correctness_rule']['rule'])}: {_cell(c['correctness_rule']['definition'])} |",
        f"| ECE estimator | {_cell(c['ece']['estimator'])}, bins: {_cell(c['ece']['n_bins'])}, closure: "
        f"{_cell(', '.join(c['ece'].get('closure', ['left'])))}, bin confidence: "
        f"{_cell(', '.join(c['ece'].get('bin_confidence', ['mean'])))}"
        f"{''.join(f'; {_cell(k)}: {_cell(v)}' for k, v in (c['ece'].get('conventions') or {}).items())} |",
        f"| confidences on bin edges | {_cell(_shares(c['ece'].get('on_edge') or {}))} |",
        f"| rows generated / kept | {_cell(c['rows']['total'])} / {_cell(c['rows']['kept'])} |",
        "",
    ]
    for s in c["signals"]:
        lines += [f"## Signal `{s['signal']}`", "", "| item | value |", "| --- | --- |"]
        if s["signal"] == "verbalized":
            p = s["elicitation_prompt"]
            lines += [
                f"| elicitation prompt | {_cell(p['id'])} |",
                f"| labels | {_cell(p['answer_label'])}, {_cell(p['confidence_label'])} |",
                f"| scale | {_cell(p['scale'])} |",
                f"| rated answer | {_cell(s['answer_slot'])} |",
                f"| parse policy | {_cell(s['parse_policy'])} |",
                "",
                "Prompt text:",
                "",
                "```text",
                p["text"],
                "```",
                "",
            ]
        else:
            x = s["context"]
            lines += [
                f"| scoring context | {_cell(x['id'])}: {_cell(x['description'])} |",
                f"| user prompt | {_cell(x['user_prompt'])} |",
                f"| answer slot | {_cell(x['slot'])} |",
                f"| item format | {_cell(x['item_format'])} |",
                f"| token aggregation | {_cell(s['aggregation']['name'])}: {_cell(s['aggregation']['definition'])} |",
                f"| answers generated by | {_cell(s['answers_generated_by'])} |",
                "",
                "User turn:",
                "",
                "```text",
                x["user_prompt_text"],
                "```",
                "",
            ]
    lines += ["## Rows dropped", ""]
    if c["rows"]["dropped"]:
        lines += ["| reason | rows |", "| --- | --- |"]
        lines += [f"| {_cell(k)} | {v} |" for k, v in c["rows"]["dropped"].items()]
    else:
        lines.append("None.")
    lines.append("")
    return "\n".join(lines)
