"""The reporting checklist, pure part (study 000 Table 5, section 4.6)."""

from __future__ import annotations

import hashlib
import json

import pytest

from confgrid.protocols.checklist import CHECKLIST_VERSION, build_checklist, render_checklist_markdown
from confgrid.protocols.prompts import get_prompt

TEMPLATE = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"


def _checklist(**kw):
    args = dict(
        model="qwen3-8b",
        dataset="triviaqa",
        use_chat_template=True,
        decoding={"do_sample": False, "max_new_tokens": 32, "repetition_penalty": 1.0},
        token_contexts=["bare", "guess_slot", "mc_answer_slot"],
        chat_template=TEMPLATE,
        system_prompt=None,
        rows_total=100,
        rows_dropped={"missing_confidence": 3, "unlabelled_confidence": 2},
    )
    args.update(kw)
    return build_checklist(**args)


def test_build_checklist_content():
    c = _checklist()
    assert json.loads(json.dumps(c)) == c  # JSON-serialisable
    assert c["version"] == CHECKLIST_VERSION and (c["model"], c["dataset"]) == ("qwen3-8b", "triviaqa")
    t = c["chat_template"]
    assert t["used"] is True and t["sha256"] == hashlib.sha256(TEMPLATE.encode()).hexdigest() and t["text"] is None
    assert t["kwargs"] == {"enable_thinking": False} and t["system_prompt"] is None
    assert c["correctness_rule"]["rule"] == "containment" and "containment" in c["correctness_rule"]["definition"].lower()
    assert c["ece"] == {"estimator": "ece", "n_bins": 10, "closure": ["left"], "bin_confidence": ["mean"],
                        "conventions": {}, "on_edge": {}}
    assert c["rows"]["total"] == 100 and c["rows"]["kept"] == 95
    assert c["rows"]["dropped"] == {"missing_confidence": 3, "unlabelled_confidence": 2}
    assert [s["signal"] for s in c["signals"]] == ["verbalized", "token:bare", "token:guess_slot", "token:mc_answer_slot"]
    v = c["signals"][0]
    assert v["elicitation_prompt"]["text"] == get_prompt("confidence").template  # rendered for "{question}"
    assert v["parse_policy"] == "label_or_fallback" and v["elicitation_prompt"]["scale"] == "unit"
    assert v["elicitation_prompt"]["decimal_comma"] is False
    bare, guess, mc = c["signals"][1:]
    assert bare["context"]["user_prompt_text"] == "{question}\nAnswer:"
    assert bare["context"]["slot"] == "at the start of the assistant turn, separator ''"
    assert guess["context"]["slot"] == "after 'Guess:' at the start of the assistant turn, separator ' '"
    assert guess["aggregation"]["name"] == "geometric_mean" and "exp(mean(logprobs))" in guess["aggregation"]["definition"]
    assert mc["context"]["item_format"] == "mc"


def test_plain_text_and_options():
    c = _checklist(use_chat_template=False, chat_template=None, aggregation="min_probability",
                   correctness_rule="exact_match", parse_policy="label_only", ece_estimator="ks", n_bins=None,
                   elicitation_prompt="confidence_percent", add_bos_generation=False, add_bos_scoring=True,
                   include_template_text=True, extra={"grid": "sensitivity"})
    assert c["chat_template"]["used"] is False and c["chat_template"]["sha256"] is None and c["chat_template"]["kwargs"] == {}
    assert (c["chat_template"]["add_bos_generation"], c["chat_template"]["add_bos_scoring"]) == (False, True)
    # the plain-text rule: the bare answer follows a space
    assert c["signals"][1]["context"]["slot"] == "at the end of the plain-text prompt, separator ' '"
    assert c["signals"][0]["elicitation_prompt"]["scale"] == "percent" and c["signals"][0]["parse_policy"] == "label_only"
    assert c["ece"] == {"estimator": "ks", "n_bins": None, "closure": ["left"], "bin_confidence": ["mean"],
                        "conventions": {}, "on_edge": {}} and c["extra"] == {"grid": "sensitivity"}
    assert _checklist(include_template_text=True)["chat_template"]["text"] == TEMPLATE


@pytest.mark.parametrize(
    ("kw", "exc", "message"),
    [
        ({"token_contexts": ["nope"]}, KeyError, "unknown scoring context 'nope'"),
        ({"aggregation": "mean"}, KeyError, "unknown token aggregation 'mean'"),
        ({"correctness_rule": "fuzzy"}, KeyError, "unknown correctness rule 'fuzzy'"),
        ({"elicitation_prompt": "nope"}, KeyError, "unknown prompt 'nope'"),
        ({"parse_policy": "strict"}, ValueError, r"parse_policy='strict'.*label_only"),
        ({"n_bins": 0}, ValueError, "n_bins=0"),
        ({"rows_total": 4}, ValueError, "rows_total=4 but 5 rows dropped"),
        ({"rows_dropped": {"empty": -1}}, ValueError, "negative"),
        ({"decoding": {"stop": object()}}, ValueError, "decoding is not JSON-serialisable"),
    ],
)
def test_errors(kw, exc, message):
    with pytest.raises(exc, match=message):
        _checklist(**kw)


def test_markdown():
    md = render_checklist_markdown(_checklist())
    assert md.startswith("# Reporting checklist: qwen3-8b on triviaqa\n")
    for needle in [
        "| chat template used | true |",
        '| decoding | {"do_sample": false, "max_new_tokens": 32, "repetition_penalty": 1.0} |',
        "| ECE estimator | ece, bins: 10, closure: left, bin confidence: mean |",
        "| confidences on bin edges | - |",
        "| rows generated / kept | 100 / 95 |",
        "## Signal `token:guess_slot`",
        "| parse policy | label_or_fallback |",
        "| missing_confidence | 3 |",
        "```text\n{question}\nAnswer:\n```",
        "```text\n" + get_prompt("confidence").template + "\n```",
    ]:
        assert needle in md, needle
    assert "None." in render_checklist_markdown(_checklist(rows_dropped={}))
