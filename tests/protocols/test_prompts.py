"""Prompt registry, rendering and derived prompts (study 000 Table 9, Appendix C)."""

from __future__ import annotations

import dataclasses

import pytest

from confgrid.protocols import prompts as P

CONFIDENCE_NO_PROB = (
    "Give your best short answer to the question below. Write nothing else: no sentence, no explanation. "
    "Use this format:\n\nGuess: <your answer, a few words at most>\n\nQuestion: {question}"
)


def test_builtins_registered():
    assert {"bare", "confidence", "answer_only", "question", "answer_only_instruction", "confidence_no_probability"} <= set(
        P.PROMPTS
    )
    conf = P.get_prompt("confidence")
    assert conf.answer_label == "Guess:" and conf.confidence_label == "Probability:" and conf.scale == "unit"
    assert len(conf.deletions) == 2
    assert P.get_prompt("bare").answer_label == "Answer:" and P.get_prompt("bare").confidence_label is None


def test_render_bare_and_question():
    assert P.get_prompt("bare").render("What is 2+2?") == "What is 2+2?\nAnswer:"
    assert P.get_prompt("question").render("What is 2+2?") == "What is 2+2?"
    assert P.get_prompt("question").template == "{question}"


def test_render_keeps_braces():
    q = "What does {x} mean in f'{x}' and {question} and {}?"
    assert P.get_prompt("question").render(q) == q
    assert P.get_prompt("bare").render(q) == q + "\nAnswer:"
    out = P.get_prompt("confidence").render(q)
    assert out.endswith("Question: " + q) and out.count(q) == 1


def test_confidence_text_snapshot():
    assert P.get_prompt("confidence").render("Q?") == (
        "Give your best short answer to the question below and the probability that it is correct (0.0 to 1.0). "
        "Write nothing else: no sentence, no explanation. Use this format:\n\n"
        "Guess: <your answer, a few words at most>\nProbability: <a number from 0.0 to 1.0>\n\nQuestion: Q?"
    )


def test_without_probability_request():
    derived = P.get_prompt("confidence").without_probability_request()
    assert derived.id == "confidence_no_probability"
    assert derived.template == CONFIDENCE_NO_PROB
    assert derived.confidence_label is None and derived.scale is None and derived.deletions == ()
    assert derived.answer_label == "Guess:"
    assert "probab" not in derived.template.lower()
    assert P.get_prompt("confidence_no_probability").template == CONFIDENCE_NO_PROB


def test_answer_only_instruction():
    ao = P.get_prompt("answer_only_instruction")
    assert ao.template == P.get_prompt("answer_only").template.removesuffix("\nAnswer:")
    assert not ao.template.endswith("Answer:")


def test_deletion_must_match_exactly_once():
    base = P.get_prompt("confidence")
    missing = dataclasses.replace(base, deletions=("not in the text",))
    with pytest.raises(ValueError, match=r"deletions\[0\].*occurs 0 times"):
        missing.without_probability_request()
    twice = dataclasses.replace(base, deletions=("answer",))
    with pytest.raises(ValueError, match="occurs 2 times"):
        twice.without_probability_request()
    with pytest.raises(ValueError, match="declares no deletions"):
        P.get_prompt("bare").without_probability_request()
    # deletions apply in order: the second sees the text left by the first
    seq = dataclasses.replace(base, deletions=(" and the probability", " that it is correct"))
    assert "that it is correct" not in seq.without_probability_request().template


def test_without_answer_label_errors():
    with pytest.raises(ValueError, match="does not end"):
        P.get_prompt("confidence").without_answer_label()


def test_prompt_validation():
    with pytest.raises(ValueError, match="placeholder"):
        P.Prompt(id="x", template="no placeholder")
    with pytest.raises(ValueError, match="scale='bogus'"):
        P.Prompt(id="x", template="{question}", scale="bogus")
    with pytest.raises(dataclasses.FrozenInstanceError):
        P.get_prompt("bare").template = "x"  # type: ignore[misc]


def test_registry_errors():
    with pytest.raises(KeyError, match=r"^unknown prompt 'nope'; allowed: .*\bbare\b"):
        P.get_prompt("nope")
    with pytest.raises(ValueError, match="already registered"):
        P.register_prompt(P.Prompt(id="bare", template="{question}"))


def test_load_prompt_file(tmp_path):
    p = tmp_path / "pct.yaml"
    p.write_text(
        "id: test_percent_prompt\n"
        "description: percent scale\n"
        "answer_label: 'Guess:'\n"
        "confidence_label: 'Probability:'\n"
        "scale: percent\n"
        "template: |-\n  {question}\n  Guess: <answer>\n  Probability: <0 to 100>\n"
        "deletions:\n  - \"\\nProbability: <0 to 100>\"\n"
    )
    try:
        prompt = P.load_prompt_file(p)
        assert P.get_prompt("test_percent_prompt") is prompt
        assert prompt.render("Q?") == "Q?\nGuess: <answer>\nProbability: <0 to 100>"
        assert prompt.without_probability_request().render("Q?") == "Q?\nGuess: <answer>"
        with pytest.raises(ValueError, match="already registered"):
            P.load_prompt_file(p)
    finally:
        P.PROMPTS.unregister("test_percent_prompt", missing_ok=True)


def test_load_prompt_file_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="missing.yaml"):
        P.load_prompt_file(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("id: x\ntemplate: '{question}'\ntempalte: typo\n")
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['tempalte'\]"):
        P.load_prompt_file(bad, register=False)
    nod = tmp_path / "noid.yaml"
    nod.write_text("template: '{question}'\n")
    with pytest.raises(ValueError, match="'id' must be a string"):
        P.load_prompt_file(nod, register=False)


def test_decimal_comma_is_declared_by_a_prompt(tmp_path):
    assert P.get_prompt("confidence").decimal_comma is False  # off unless declared
    p = tmp_path / "komma.yaml"
    p.write_text("id: x\ntemplate: '{question}'\nconfidence_label: 'Probability:'\nscale: unit\ndecimal_comma: true\n")
    assert P.load_prompt_file(p, register=False).decimal_comma is True
    p.write_text("id: x\ntemplate: '{question}'\ndecimal_comma: 'yes'\n")
    with pytest.raises(ValueError, match=r"decimal_comma='yes'; allowed: true or false"):
        P.load_prompt_file(p, register=False)
