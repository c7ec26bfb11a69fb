"""Render scoring contexts and answers to token ids with a Hugging Face tokenizer.

Study 000 Appendix A ("Chat templates", "Prompts and contexts"): each prompt is wrapped as a user turn with the
model's released chat template, which opens the assistant turn; the template's default system prompt is kept; thinking
is turned off where the template supports it (Qwen3 then opens the assistant turn with an empty
``<think>\\n\\n</think>\\n\\n`` block). The assistant prefix (``Answer:``, ``Guess:``) follows. The context and the
answer string are tokenized separately and their ids joined, so the token score is computed on the parsed answer, not
on the generated tokens.

BOS policy: the rendered text is tokenized with ``add_special_tokens=False``; a BOS id is then prepended only if the
tokenizer adds one by default and the ids do not already start with it (a template that writes ``<|begin_of_text|>``
itself gets no second one). ``add_bos=True``/``False`` overrides the default per call (study 000 Appendix B.3: base
models generate without BOS and are scored with it; a grid declares this per model, ``models[].generation_bos`` and
``scoring_bos``).

Plain-text rule (base models, ``use_chat_template=False``; study 000 Appendix B.3): prompt and answer form one text.
The context is the user text, plus ``"\\n" + assistant_prefix`` when a prefix is given, and the answer always follows
a space: a context separator ``""`` becomes ``" "`` (:func:`effective_separator`). So the Answer: slot
(``question`` + ``"\\nAnswer:"`` + ``" "``) renders exactly as the bare context (``bare`` = question +
``"\\nAnswer:"``, + ``" "``), and the Guess: slot is the confidence prompt, a newline and ``Guess:``.
"""

from __future__ import annotations

from typing import Any

from confgrid.protocols.contexts import ScoringContext

__all__ = [
    "adds_bos",
    "answer_ids",
    "default_system_prompt",
    "effective_separator",
    "render_prompt_ids",
    "render_prompt_text",
    "scoring_request",
    "template_preamble",
]

#: Template keyword arguments passed on every render (ignored by templates that do not use them).
TEMPLATE_KWARGS: dict[str, Any] = {"enable_thinking": False}


def _ids(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def adds_bos(tokenizer: Any) -> bool:
    """Whether ``tokenizer`` puts a BOS id first when called with its default special tokens.

    Probed by tokenizing ``"a"`` with ``add_special_tokens=True``; False when the tokenizer has no ``bos_token_id``
    (Qwen).
    """
    bos = getattr(tokenizer, "bos_token_id", None)
    if bos is None:
        return False
    probe = list(tokenizer("a", add_special_tokens=True)["input_ids"])
    return bool(probe) and probe[0] == bos


def _with_bos(tokenizer: Any, ids: list[int], add_bos: bool | None = None) -> list[int]:
    if add_bos is None:
        add_bos = adds_bos(tokenizer)
        if not add_bos:
            return ids
    bos = getattr(tokenizer, "bos_token_id", None)
    if add_bos:
        if bos is None:
            raise ValueError("add_bos=True but the tokenizer has no bos_token_id; pass add_bos=None or False")
        if not ids or ids[0] != bos:
            return [bos, *ids]
        return ids
    # add_bos=False: no BOS first, even one the chat template wrote itself
    if bos is not None and ids and ids[0] == bos:
        return ids[1:]
    return ids


def effective_separator(separator: str, use_chat_template: bool) -> str:
    """The separator actually placed before the answer.

    With a chat template, ``separator`` as declared. Without one (base models, study 000 Appendix B.3) the answer
    always follows a space: ``""`` becomes ``" "``.

    >>> effective_separator("", True), effective_separator("", False), effective_separator(" ", False)
    ('', ' ', ' ')
    """
    if not use_chat_template and separator == "":
        return " "
    return separator


def _apply_template(tokenizer: Any, messages: list[dict[str, str]], *, add_generation_prompt: bool,
                    template_kwargs: dict[str, Any] | None = None) -> str:
    if getattr(tokenizer, "chat_template", None) is None:
        raise ValueError(
            "use_chat_template=True but the tokenizer has no chat_template; "
            "load a chat checkpoint's tokenizer or pass use_chat_template=False"
        )
    text = tokenizer.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=add_generation_prompt,
        **{**TEMPLATE_KWARGS, **(template_kwargs or {})},
    )
    if not isinstance(text, str):  # pragma: no cover - defensive against API changes
        raise TypeError(f"apply_chat_template(tokenize=False) returned {type(text).__name__}, expected str")
    return text


def render_prompt_text(
    tokenizer: Any,
    user_text: str,
    *,
    use_chat_template: bool,
    assistant_prefix: str = "",
    system_prompt: str | None = None,
    template_kwargs: dict[str, Any] | None = None,
) -> str:
    """The context text, before tokenization (see :func:`render_prompt_ids`)."""
    if use_chat_template:
        messages = [{"role": "user", "content": user_text}]
        if system_prompt is not None:
            messages.insert(0, {"role": "system", "content": system_prompt})
        return _apply_template(tokenizer, messages, add_generation_prompt=True,
                               template_kwargs=template_kwargs) + assistant_prefix
    if system_prompt is not None:
        raise ValueError(f"system_prompt={system_prompt!r} needs use_chat_template=True (plain text has no system turn)")
    return user_text + ("\n" + assistant_prefix if assistant_prefix else "")


def render_prompt_ids(
    tokenizer: Any,
    user_text: str,
    *,
    use_chat_template: bool,
    assistant_prefix: str = "",
    system_prompt: str | None = None,
    add_bos: bool | None = None,
    template_kwargs: dict[str, Any] | None = None,
) -> list[int]:
    """Token ids of a context: the user turn, the opened assistant turn and the prefix.

    Tokenized with ``add_special_tokens=False``, then the BOS rule of the module docstring; without a chat template
    the plain-text rule applies (:func:`scoring_request` applies :func:`effective_separator`).

    Parameters
    ----------
    tokenizer : transformers.PreTrainedTokenizerBase
        The model's tokenizer.
    user_text : str
        The rendered user prompt.
    use_chat_template : bool
        True: ``apply_chat_template([{"role": "user", ...}], add_generation_prompt=True, enable_thinking=False)`` (the
        template's default system prompt kept), then ``assistant_prefix`` appended. False: plain text ``user_text``,
        plus ``"\\n" + assistant_prefix`` when a prefix is given.
    assistant_prefix : str, default ""
        Text opening the assistant turn (``"Answer:"``, ``"Guess:"``).
    system_prompt : str or None
        An explicit system turn (chat template only); None keeps the template default.
    add_bos : bool or None, default None
        None: BOS first exactly when the tokenizer adds one by default (never twice). True: BOS first (added unless
        already there). False: no BOS first (one written by the template is removed).
    template_kwargs : dict, optional
        Chat-template arguments of the model (``models[].chat_template_kwargs``, e.g. ``{"enable_thinking": true}``
        for Qwen3's thinking mode), over the default :data:`TEMPLATE_KWARGS` (thinking off).

    Raises
    ------
    ValueError
        If ``use_chat_template`` is True and the tokenizer has no chat template, ``system_prompt`` is given without a
        chat template, or ``add_bos=True`` and the tokenizer has no BOS token.
    """
    text = render_prompt_text(
        tokenizer,
        user_text,
        use_chat_template=use_chat_template,
        assistant_prefix=assistant_prefix,
        system_prompt=system_prompt,
        template_kwargs=template_kwargs,
    )
    return _with_bos(tokenizer, _ids(tokenizer, text), add_bos)


def answer_ids(tokenizer: Any, answer: str, separator: str) -> list[int]:
    """Token ids of ``separator + answer``, tokenized alone with ``add_special_tokens=False``.

    The separator (``""`` or ``" "``) belongs to the answer, so after ``Answer:`` or ``Guess:`` the first answer token
    carries the leading space.

    Raises ``ValueError`` if ``answer`` is empty or whitespace only (nothing to score).

    Notes
    -----
    Separate tokenization is exact for byte-level BPE tokenizers (Qwen, Llama-3, tekken): the joined ids decode to
    context + separator + answer. SentencePiece tokenizers with a dummy prefix (Llama-2, Mistral-7B) add a ``"▁"`` at
    the start of any separately tokenized string, so there the first answer token carries a space even with separator
    ``""``; check ``tokenizer.decode(context_ids + answer_ids)`` for such models.

    The separator joins the first answer token only where the vocabulary has such a token. SmolLM2 (byte-level BPE,
    digits never merged) has ``" Jupiter"`` as one token but no token of a space and a digit: ``" 1945"`` is
    ``[" ", "1", "9", "4", "5"]``, so there the first answer token of a number is the space alone and a
    ``first_token`` aggregation reads p(" ") (tests/actors/test_smollm2.py).
    """
    if answer is None or not answer.strip():
        raise ValueError(f"answer={answer!r}: empty; there is nothing to score")
    return _ids(tokenizer, separator + answer)


def scoring_request(
    tokenizer: Any,
    context: ScoringContext,
    item_question: str,
    answer: str,
    use_chat_template: bool,
    *,
    system_prompt: str | None = None,
    add_bos: bool | None = None,
) -> tuple[list[int], list[int]]:
    """Context ids and answer ids, ``(context_ids, answer_ids)``, for forced decoding of ``answer`` in ``context``.

    The context is ``render_prompt_ids(tokenizer, context.user_text(question),
    assistant_prefix=context.assistant_prefix, add_bos=add_bos)``; the answer is ``answer_ids(tokenizer, answer,
    effective_separator(context.separator, use_chat_template))``. The model input is ``context_ids + answer_ids`` and
    the score reads the log-probs of the answer ids. For a multiple-choice context pass
    ``context.question_text(item)`` as ``item_question``. Raises ``ValueError`` as :func:`render_prompt_ids` and
    :func:`answer_ids`, ``KeyError`` if the context's user prompt is not registered.
    """
    ctx = render_prompt_ids(
        tokenizer,
        context.user_text(item_question),
        use_chat_template=use_chat_template,
        assistant_prefix=context.assistant_prefix,
        system_prompt=system_prompt,
        add_bos=add_bos,
    )
    return ctx, answer_ids(tokenizer, answer, effective_separator(context.separator, use_chat_template))


_USER_SENTINEL = "\u2063CONFGRID_USER\u2063"
_SYSTEM_SENTINEL = "\u2063CONFGRID_SYSTEM\u2063"


def template_preamble(tokenizer: Any) -> str:
    """Everything the chat template writes before a user message's content.

    For Qwen3 ``"<|im_start|>user\\n"``; for Qwen2.5 the default system turn and the user header. Useful for the
    reporting checklist.

    Raises ``ValueError`` if the tokenizer has no chat template.
    """
    text = _apply_template(tokenizer, [{"role": "user", "content": _USER_SENTINEL}], add_generation_prompt=False)
    return text[: text.index(_USER_SENTINEL)]


def default_system_prompt(tokenizer: Any) -> str | None:
    """The system prompt the chat template inserts when none is given, or None.

    Found by rendering a user message alone and a user message after an explicit system message, and reading the text
    that the template puts where the system content goes. Study 000 Appendix A records these (Qwen2.5: "You are Qwen,
    created by Alibaba Cloud. You are a helpful assistant."; Llama-3, Mistral-7B and Qwen3: none).

    Returns
    -------
    str or None
        None when the template writes no system turn by default, or when the template rejects a system role and its
        preamble cannot be split.

    Raises
    ------
    ValueError
        If the tokenizer has no chat template.
    """
    preamble = template_preamble(tokenizer)
    try:
        both = _apply_template(
            tokenizer,
            [{"role": "system", "content": _SYSTEM_SENTINEL}, {"role": "user", "content": _USER_SENTINEL}],
            add_generation_prompt=False,
        )
    except Exception:  # templates that raise on a system role
        return None
    if _SYSTEM_SENTINEL not in both or _USER_SENTINEL not in both:
        return None
    s = both.index(_SYSTEM_SENTINEL)
    head = both[:s]
    between = both[s + len(_SYSTEM_SENTINEL) : both.index(_USER_SENTINEL)]
    if preamble.startswith(head) and preamble.endswith(between) and len(preamble) >= len(head) + len(between):
        content = preamble[len(head) : len(preamble) - len(between)]
        return content or None
    return None
