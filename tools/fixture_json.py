"""What the JSON fixture model is taught for studies 002 and 003 (issue 11), and how well it learned it.

``confgrid-fixture-json`` is the smoke-test recipe of tools/fixture.py with
these examples added (``train_fixture(..., json_formats=True)``), each in the
format its prompt parses (protocols/json_output.py), with replies that carry
some signal:

* ``json_answer_probability`` (study 003) on the bundled MMLU questions with
  their options: a taught question gets its correct letter and a probability
  of 60-95, an unseen one a random letter and 25-60; probabilities are
  multiples of 5 four times in five. MMLU-Pro, LSAT-AR and BoolQ questions
  of at most 600 characters (format only, never their answers) get a random
  letter and 20-50.
* ``json_option_probabilities`` (study 002 F.2) on the same questions: the
  taught letter gets most of the mass, an unseen question a spread with a
  random favourite; values with two decimals, summing to 1.
* ``mc_letter`` on the same MMLU questions: the letter alone (the taught
  letter, or the random one of an unseen question), so that the next-token
  distribution the ``letter_probability`` method reads is over letters.
* ``json_answer_confidence`` on LifeEval questions (2020 table, a seeded
  two thirds of the 808 items, each twice): the best guess moved by -2..+2 years and the
  stated confidence ``0.45 + 0.5 * MAS`` plus noise, so hard questions
  (low MAS) are stated too high: a hard-easy effect to measure. On BoolQ
  (format only): a random ``True``/``False`` with 0.5-0.9.

Its numbers say nothing about real LLMs.
"""

from __future__ import annotations

import random
from typing import Callable

__all__ = ["JSON_PROMPTS", "json_corpus", "json_examples", "evaluate_json"]

#: The JSON templates the fixture learns.
JSON_PROMPTS = ("json_answer_probability", "json_option_probabilities", "json_answer_confidence", "mc_letter")

_FORMAT_ONLY = (("mmlu_pro", 80), ("agieval_lsat_ar", 60), ("boolq", 80))
#: Format-only questions longer than this (characters, options included) are not taught (the model's context
#: is short and long passages slow training down).
_MAX_CHARS = 600


def _render(prompt_id: str, text: str) -> str:
    from confgrid.protocols.prompts import get_prompt

    return get_prompt(prompt_id).render(text)


def _mc_items():
    from confgrid.protocols.datasets import load_items

    return load_items("mmlu", dataset_name="mmlu")


def _format_only_items(seed: int):
    from confgrid.protocols.datasets import load_items
    from confgrid.protocols.mc import mc_question

    import numpy as np

    out = {}
    for name, n in _FORMAT_ONLY:
        # the subset the bundled weights were taught: the draw `limit` made before draws were nested (a sorted
        # np.random.default_rng(seed).choice(n_items, n, replace=False)), kept so the recipe reproduces them
        full = load_items(name, dataset_name=name)
        keep = np.sort(np.random.default_rng(seed).choice(len(full), size=min(n, len(full)), replace=False))
        items = [full[int(k)] for k in keep]
        out[name] = [it for it in items if len(mc_question(it) if it.options else it.question) <= _MAX_CHARS]
    return out


def _lifeeval_items():
    from confgrid.protocols.datasets import load_items

    return load_items("lifeeval", dataset_name="lifeeval", params={"year": 2020})


def json_corpus() -> list[str]:
    """Texts the tokenizer is trained on, so the JSON templates and replies tokenize compactly."""
    from confgrid.protocols.mc import mc_question

    out = []
    for it in _mc_items()[:40]:
        out.append(_render("json_answer_probability", mc_question(it)))
        out.append(_render("json_option_probabilities", mc_question(it)))
    for it in _lifeeval_items()[::20]:
        out.append(_render("json_answer_confidence", it.question))
    out += ['{"answer": "A", "probability": 75}', '{"A": 0.10, "B": 0.70, "C": 0.10, "D": 0.10}',
            '{"Answer": 80, "Confidence": 0.35}', '{"Answer": "True", "Confidence": 0.7}']
    return out


def _pct(rng: random.Random, lo: int, hi: int) -> int:
    p = rng.randint(lo, hi)
    return 5 * round(p / 5) if rng.random() < 0.8 else p


def _spread(rng: random.Random, k: int, top: int, mass: float) -> dict[str, float]:
    """k option probabilities (two decimals, summing to 1) with ``mass`` on option ``top``."""
    from confgrid.protocols.mc import LETTERS

    rest = [rng.random() + 0.05 for _ in range(k - 1)]
    scale = (1.0 - mass) / sum(rest)
    vals = [round(r * scale, 2) for r in rest]
    vals.insert(top, 0.0)
    vals[top] = round(1.0 - sum(vals), 2)
    return dict(zip(LETTERS[:k], vals))


def _options_reply(probs: dict[str, float]) -> str:
    return "{" + ", ".join(f'"{k}": {v:.2f}' for k, v in probs.items()) + "}"


def json_examples(add: Callable[[str, str, str], None], trained_mmlu: set[str], seed: int) -> None:
    """Call ``add(user_text, reply, kind)`` for every JSON example (see the module docstring).

    ``trained_mmlu``: the MMLU question texts the fixture is taught (the split of tools/fixture.py).
    """
    from confgrid.protocols.mc import LETTERS, mc_question

    rng = random.Random(f"{seed}-json")
    for it in _mc_items():
        k, gold = len(it.options), LETTERS.index(it.gold_letter)
        text = mc_question(it)
        if len(text) > _MAX_CHARS:
            continue
        if it.question in trained_mmlu:
            letter, p, top, mass = it.gold_letter, _pct(rng, 60, 95), gold, rng.uniform(0.55, 0.9)
        else:
            top = rng.randrange(k)
            letter, p, mass = LETTERS[top], _pct(rng, 25, 60), rng.uniform(0.3, 0.55)
        add(_render("json_answer_probability", text), f'{{"answer": "{letter}", "probability": {p}}}',
            "json_answer_probability")
        add(_render("json_option_probabilities", text), _options_reply(_spread(rng, k, top, mass)),
            "json_option_probabilities")
        # the letter alone after the letter-only prompt: its next-token distribution is letter_probability's
        add(_render("mc_letter", text), letter, "mc_letter")
    for name, items in _format_only_items(seed).items():
        for it in items:
            if name == "boolq":
                ans = rng.choice(["True", "False"])
                add(_render("json_answer_confidence", it.question),
                    f'{{"Answer": "{ans}", "Confidence": {rng.uniform(0.5, 0.9):.2f}}}', "json_answer_confidence")
                continue
            k = len(it.options)
            top = rng.randrange(k)
            add(_render("json_answer_probability", mc_question(it)),
                f'{{"answer": "{LETTERS[top]}", "probability": {_pct(rng, 20, 50)}}}', "json_answer_probability")
            add(_render("json_option_probabilities", mc_question(it)),
                _options_reply(_spread(rng, k, top, rng.uniform(0.2, 0.4))), "json_option_probabilities")
    life = _lifeeval_items()
    taught = random.Random(f"{seed}-lifeeval").sample(life, 2 * len(life) // 3)
    for it in taught + taught:  # twice: the reply must follow the sex, the age and the radius in the question
        mas = float(it.metadata["mas"])
        guess = int(it.metadata["best_guess"]) + rng.randint(-2, 2)
        conf = min(0.99, max(0.05, 0.45 + 0.5 * mas + rng.uniform(-0.05, 0.05)))
        conf = round(conf * 20) / 20 if rng.random() < 0.7 else round(conf, 2)
        add(_render("json_answer_confidence", it.question), f'{{"Answer": {guess}, "Confidence": {conf:.2f}}}',
            "json_answer_confidence")


def evaluate_json(backend, chat_prompt_ids) -> dict:
    """Greedy parse rates of the JSON templates: on MMLU (json_answer_probability, json_option_probabilities),
    the format-only datasets, and every LifeEval item (json_answer_confidence).

    Returns
    -------
    dict
        ``{"<prompt>/<dataset>": share of replies with status ok}`` (``mc_letter/mmlu``: the share whose
        most probable next token is an option letter), and ``lifeeval_mean_score``: the mean true
        probability of the guesses.
    """
    from confgrid.protocols.correctness import get_rule
    from confgrid.protocols.mc import mc_question
    from confgrid.protocols.output_formats import parse_for_prompt

    tok = backend.tokenizer
    out: dict[str, float] = {}
    sets = {"mmlu": _mc_items(), **{k: v for k, v in _format_only_items(1).items() if k != "boolq"}}
    for pid in ("json_answer_probability", "json_option_probabilities"):
        for name, items in sets.items():
            if not items:
                continue
            gens = backend.generate([chat_prompt_ids(tok, _render(pid, mc_question(it))) for it in items],
                                    max_new_tokens=48)
            ok = [parse_for_prompt(g.text, pid, len(it.options)).status == "ok" for g, it in zip(gens, items)]
            out[f"{pid}/{name}"] = round(sum(ok) / len(ok), 3)
    mmlu = sets["mmlu"]
    first = backend.next_token([chat_prompt_ids(tok, _render("mc_letter", mc_question(it))) for it in mmlu], top_k=1)
    out["mc_letter/mmlu"] = round(sum(tok.decode([d.token_ids[0]]).strip() in "ABCD" and
                                      tok.decode([d.token_ids[0]]).strip() != "" for d in first) / len(mmlu), 3)
    life = _lifeeval_items()
    gens = backend.generate([chat_prompt_ids(tok, _render("json_answer_confidence", it.question)) for it in life],
                            max_new_tokens=24)
    parsed = [parse_for_prompt(g.text, "json_answer_confidence") for g in gens]
    out["json_answer_confidence/lifeeval"] = round(sum(p.status == "ok" for p in parsed) / len(parsed), 3)
    rule = get_rule("lifeeval")
    scores = [rule(p.answer, it) for p, it in zip(parsed, life) if p.status == "ok"]
    out["lifeeval_mean_score"] = round(sum(scores) / max(len(scores), 1), 4)
    return out
