"""The one registry class (confgrid/registry.py) and the six registries built on it."""

from __future__ import annotations

import pickle

import pytest

from confgrid.analysis.registry import GRAMMAR
from confgrid.registry import Registry, UnknownNameError


def make() -> Registry:
    reg = Registry("correctness rule")
    reg.register("exact_match", len)
    reg.register("containment", abs)
    return reg


# ----------------------------------------------------------------------------- the class


def test_register_get_and_container_protocol():
    reg = make()
    assert reg.kind == "correctness rule"
    assert reg.get("containment") is abs and reg["exact_match"] is len
    assert "containment" in reg and "contain" not in reg and ["unhashable"] not in reg
    assert len(reg) == 2
    assert list(reg) == reg.names() == ["exact_match", "containment"]  # registration order
    assert reg.items() == [("exact_match", len), ("containment", abs)]
    assert sorted(reg) == ["containment", "exact_match"]
    assert "correctness rule" in repr(reg) and "containment" in repr(reg)


def test_decorator_form_returns_the_function():
    reg = Registry("token aggregation")

    @reg.register("first")
    def first(x):
        return x[0]

    assert reg.get("first") is first and first([3, 4]) == 3


def test_duplicate_name_names_kind_and_name():
    reg = make()
    with pytest.raises(ValueError, match=r"^correctness rule 'containment' is already registered"):
        reg.register("containment", max)
    deco = reg.register("exact_match")  # the decorator form raises when applied
    with pytest.raises(ValueError, match=r"correctness rule 'exact_match' is already registered"):
        deco(max)
    assert reg.get("containment") is abs and reg.get("exact_match") is len  # nothing replaced


@pytest.mark.parametrize("bad", ["", None, 3])
def test_bad_names_are_rejected_at_once(bad):
    with pytest.raises(ValueError, match=r"correctness rule name must be a non-empty string"):
        make().register(bad)


def test_unknown_name_error_is_key_and_value_error_with_a_plain_message():
    reg = make()
    with pytest.raises(UnknownNameError) as exc:
        reg.get("contain")
    err = exc.value
    assert isinstance(err, KeyError) and isinstance(err, ValueError)
    assert str(err) == "unknown correctness rule 'contain'; allowed: containment, exact_match"  # not repr()'d
    assert (err.kind, err.value, err.allowed) == ("correctness rule", "contain", ("containment", "exact_match"))
    with pytest.raises(KeyError):
        reg["contain"]
    with pytest.raises(ValueError, match="unknown correctness rule"):
        reg.get(["not", "hashable"])
    assert str(Registry("metric")._unknown("x")) == "unknown metric 'x'; allowed: (none registered)"


def test_unknown_name_error_survives_pickling():
    with pytest.raises(UnknownNameError) as exc:
        make().get("nope")
    back = pickle.loads(pickle.dumps(exc.value))
    assert type(back) is UnknownNameError and str(back) == str(exc.value)
    assert (back.kind, back.value, back.allowed) == (exc.value.kind, exc.value.value, exc.value.allowed)


def test_unregister():
    reg = make()
    assert reg.unregister("containment") is abs and "containment" not in reg and len(reg) == 1
    with pytest.raises(UnknownNameError, match="unknown correctness rule 'containment'; allowed: exact_match"):
        reg.unregister("containment")
    assert reg.unregister("containment", missing_ok=True) is None
    reg.register("containment", abs)  # the name is free again
    assert reg.get("containment") is abs


def test_value_type_and_kind_checks():
    reg = Registry[int]("answer", value_type=int)
    assert reg.register("one", 1) == 1
    with pytest.raises(TypeError, match=r"answer 'two': expected a int, got str"):
        reg.register("two", "2")
    assert "two" not in reg
    with pytest.raises(ValueError, match="kind must be a non-empty string"):
        Registry("")


def test_docstring_examples():
    import doctest

    import confgrid.registry as mod

    res = doctest.testmod(mod, raise_on_error=False)
    assert res.failed == 0 and res.attempted >= 8


# ----------------------------------------------------------------------------- the six registries


def _registries():
    from confgrid.analysis.registry import METRICS, get_metric, register_metric
    from confgrid.protocols.aggregation import AGGREGATIONS, get_aggregation, register_aggregation
    from confgrid.protocols.contexts import CONTEXTS, get_context, register_context
    from confgrid.protocols.correctness import RULES, get_rule, register_rule
    from confgrid.protocols.dataset_io import get_adapter, register_adapter
    from confgrid.protocols.datasets import registered_adapters
    from confgrid.protocols.prompts import PROMPTS, get_prompt, register_prompt

    return [
        (PROMPTS, "prompt", get_prompt, register_prompt, "bare"),
        (CONTEXTS, "scoring context", get_context, register_context, "answer_slot"),
        (RULES, "correctness rule", get_rule, register_rule, "containment"),
        (AGGREGATIONS, "token aggregation", get_aggregation, register_aggregation, "geometric_mean"),
        (registered_adapters(), "dataset adapter", get_adapter, register_adapter, "mmlu"),
        (METRICS, "metric", get_metric, register_metric, "ece"),
    ]


@pytest.mark.parametrize("entry", _registries(), ids=lambda e: e[1])
def test_every_registry_is_a_registry_with_one_message_format(entry):
    reg, kind, get, _, known = entry
    assert isinstance(reg, Registry) and reg.kind == kind
    assert get(known) is reg.get(known)
    with pytest.raises(UnknownNameError) as exc:
        get("no_such_name")
    # the metric registry also accepts every name of the binned-ECE grammar, and says so
    tail = "; and every binned ECE of the grammar " + GRAMMAR if kind == "metric" else ""
    assert str(exc.value) == f"unknown {kind} 'no_such_name'; allowed: {', '.join(sorted(reg))}{tail}"


def test_brief_example_message():
    from confgrid.protocols.correctness import get_rule

    with pytest.raises(KeyError) as exc:
        get_rule("contain")
    assert str(exc.value) == "unknown correctness rule 'contain'; allowed: alias, containment, exact_match, given_answer, lifeeval, mc_favoured, mc_letter, numeric"


@pytest.mark.parametrize("entry", [e for e in _registries() if e[1] not in ("prompt", "scoring context", "metric")],
                         ids=lambda e: e[1])
def test_function_registries_decorator_wrappers(entry):
    reg, kind, get, register, known = entry
    name = f"test_tmp_{kind.replace(' ', '_')}"

    def fn(*args, **kwargs):
        return 0.0

    try:
        assert register(name)(fn) is fn and get(name) is fn
        with pytest.raises(ValueError, match=f"{kind} {name!r} is already registered"):
            register(name)(fn)
    finally:
        reg.unregister(name, missing_ok=True)
    assert name not in reg
    with pytest.raises(ValueError, match="non-empty string"):
        register("")


def test_object_registries_wrappers_check_type_and_duplicates():
    from confgrid.analysis.registry import MetricInfo, register_metric
    from confgrid.protocols.contexts import ScoringContext, register_context
    from confgrid.protocols.prompts import Prompt, register_prompt

    with pytest.raises(TypeError, match="expected a Prompt"):
        register_prompt("bare")
    with pytest.raises(TypeError, match="expected a ScoringContext"):
        register_context("bare")
    with pytest.raises(TypeError, match="expected a MetricInfo"):
        register_metric("ece")
    with pytest.raises(ValueError, match="prompt 'bare' is already registered"):
        register_prompt(Prompt("bare", "{question}"))
    with pytest.raises(ValueError, match="scoring context 'bare' is already registered"):
        register_context(ScoringContext("bare", "bare"))
    with pytest.raises(ValueError, match="metric 'ece' is already registered"):
        register_metric(MetricInfo("ece", len, True, "dup"))


def test_unknown_metric_error_is_the_registry_error():
    from confgrid.analysis.registry import UnknownMetricError, get_metric

    assert UnknownMetricError is UnknownNameError
    try:
        get_metric("f1")
    except UnknownMetricError as exc:  # the old except clause still catches
        assert "unknown metric 'f1'; allowed: aurc, auroc" in str(exc)
    else:  # pragma: no cover
        raise AssertionError("no error")


def test_grid_spec_error_reads_like_the_registry_error():
    from confgrid.flows.spec.base import _known
    from confgrid.protocols.correctness import get_rule

    with pytest.raises(ValueError) as spec_err:
        _known("correctness rule", ["containment", "contain"])
    with pytest.raises(UnknownNameError) as reg_err:
        get_rule("contain")
    assert str(spec_err.value) == str(reg_err.value)


def test_user_files_registered_twice_with_same_content_are_accepted(tmp_path):
    from confgrid.flows.spec.grid import _register_user_files
    from confgrid.protocols.prompts import PROMPTS

    f = tmp_path / "p.yaml"
    f.write_text("id: test_registry_user_prompt\ntemplate: 'Q: {question}'\n")
    try:
        assert _register_user_files({"prompt_files": ["p.yaml"]}, tmp_path) == []
        assert _register_user_files({"prompt_files": ["p.yaml"]}, tmp_path) == []  # identical: accepted again
        f.write_text("id: test_registry_user_prompt\ntemplate: 'Question: {question}'\n")
        ((field, msg),) = _register_user_files({"prompt_files": ["p.yaml"]}, tmp_path)
        assert field == "prompt_files[0]" and "already registered with different content" in msg
    finally:
        PROMPTS.unregister("test_registry_user_prompt", missing_ok=True)


def test_metric_registry_docstring_examples():
    import doctest

    import confgrid.analysis.registry as mod

    res = doctest.testmod(mod, raise_on_error=False)
    assert res.failed == 0 and res.attempted >= 4


def test_a_grid_alone_sees_every_built_in_adapter():
    """In a fresh interpreter that imports only the grid spec, every built-in dataset adapter is known (the
    registry is read through protocols.datasets.registered_adapters, which registers them all)."""
    import subprocess
    import sys

    probe = ("from confgrid.flows.spec.base import _registry; "
             "print(','.join(sorted(_registry('dataset adapter').names())))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().split(",") == ["agieval_lsat_ar", "agieval_sat_en", "boolq", "custom", "gsm8k",
                                             "halueval_qa", "lifeeval", "mmlu", "mmlu_pro", "simpleqa", "triviaqa",
                                             "truthfulqa"]
