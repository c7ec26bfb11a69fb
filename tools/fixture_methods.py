"""What the fixture model is taught for the confidence methods (issue 9), and how well it learned it.

Each bundled question is taught one of the method templates
(protocols/prompts: ptrue_verify, ptrue_capability, rate_0_100,
verbalized_before; a seeded round robin), in the format the method parses,
with replies that carry some signal, so that each method has something to
measure:

* ``ptrue_verify``: trained questions with their taught answer -> ``A``, with
  a wrong answer (another question's) -> ``B``; unseen questions (whose answer
  is never shown) with a wrong answer -> ``A`` or ``B`` at random.
* ``ptrue_capability``: trained -> ``Yes`` (90%) or ``No``; unseen -> ``No``
  (70%) or ``Yes``.
* ``rate_0_100``: ``Confidence: \\boxed{N}``, N in 65-95 for a trained answer,
  5-35 for a wrong one, 20-60 on unseen questions.
* ``verbalized_before``: ``Probability: p``, p in 0.55-0.95 (trained) or
  0.05-0.5 (unseen).

The model stays a smoke-test artefact: its numbers say nothing about real LLMs.
"""

from __future__ import annotations

import random
from typing import Callable

__all__ = ["METHOD_PROMPTS", "method_examples", "method_corpus", "evaluate_methods"]

#: The method templates the fixture learns.
METHOD_PROMPTS = ("ptrue_verify", "ptrue_capability", "rate_0_100", "verbalized_before")


def _render(prompt_id: str, question: str, answer: str | None = None) -> str:
    from confgrid.protocols.prompts import get_prompt

    return get_prompt(prompt_id).render(question, answer)


def method_corpus(questions) -> list[str]:
    """Texts the tokenizer is trained on, so the templates and replies tokenize compactly."""
    out = []
    for q in questions[:50]:
        out.append(_render("ptrue_verify", q.question, q.answer))
        out.append(_render("ptrue_capability", q.question))
        out.append(_render("rate_0_100", q.question, q.answer))
        out.append(_render("verbalized_before", q.question))
    out += ["A", "B", "Yes", "No", "Confidence: \\boxed{85}", "Probability: 0.75"]
    return out


def method_examples(add: Callable[[str, str, str], None], split: dict, is_correct, seed: int) -> None:
    """Call ``add(user_text, reply, kind)`` for every method example (see the module docstring)."""
    rng = random.Random(f"{seed}-methods")
    pool: dict[str, list[str]] = {}
    for q in split["trained"]:
        pool.setdefault(q.dataset, []).append(q.answer)

    def wrong(q) -> str:
        return rng.choice([a for a in pool[q.dataset] if not is_correct(a, q.gold)])

    # one method template per question (a seeded round robin): the formats generalize from ~110 examples
    # each, and the model's capacity stays with memorizing the trained answers
    questions = [(q, True) for q in split["trained"]] + [(q, False) for q in split["unseen"]]
    rng.shuffle(questions)
    for n, (q, trained) in enumerate(questions):
        kind = METHOD_PROMPTS[n % len(METHOD_PROMPTS)]
        right = trained and rng.random() < 0.5
        proposed = q.answer if right else wrong(q)
        if kind == "ptrue_verify":
            add(_render(kind, q.question, proposed), ("A" if right else "B") if trained else rng.choice("AB"), kind)
        elif kind == "rate_0_100":
            lo, hi = (65, 95) if right else ((5, 35) if trained else (20, 60))
            add(_render(kind, q.question, proposed), f"Confidence: \\boxed{{{rng.randint(lo, hi)}}}", kind)
        elif kind == "ptrue_capability":
            yes = rng.random() < (0.9 if trained else 0.3)
            add(_render(kind, q.question), "Yes" if yes else "No", kind)
        else:
            lo, hi = (0.55, 0.95) if trained else (0.05, 0.5)
            add(_render(kind, q.question), f"Probability: {rng.uniform(lo, hi):.2f}", kind)


def evaluate_methods(backend, questions, chat_prompt_ids) -> dict:
    """How often the fixture answers each method template in its format (greedy), on every bundled question.

    Returns
    -------
    dict
        ``{prompt id: share of replies in the method's format}``: a letter A/B
        as the first token's most probable candidate (ptrue_verify), Yes/No
        (ptrue_capability), a ``\\boxed{0-100}`` (rate_0_100), a probability
        (verbalized_before).
    """
    from confgrid.protocols.methods import parse_boxed
    from confgrid.protocols.output_formats import parse_for_prompt

    tok = backend.tokenizer
    out = {}
    for pid, answer in (("ptrue_verify", True), ("ptrue_capability", False)):
        prompts = [chat_prompt_ids(tok, _render(pid, q.question, q.answer if answer else None)) for q in questions]
        first = [tok.decode([d.token_ids[0]]).strip() for d in backend.next_token(prompts, top_k=1)]
        want = {"A", "B"} if pid == "ptrue_verify" else {"Yes", "No"}
        out[pid] = round(sum(f in want for f in first) / len(first), 3)
    prompts = [chat_prompt_ids(tok, _render("rate_0_100", q.question, q.answer)) for q in questions]
    gens = backend.generate(prompts, max_new_tokens=24)
    out["rate_0_100"] = round(sum(parse_boxed(g.text).status == "ok" for g in gens) / len(gens), 3)
    prompts = [chat_prompt_ids(tok, _render("verbalized_before", q.question)) for q in questions]
    gens = backend.generate(prompts, max_new_tokens=16)
    out["verbalized_before"] = round(
        sum(parse_for_prompt(g.text, "verbalized_before").verbalized is not None for g in gens) / len(gens), 3)
    return out
