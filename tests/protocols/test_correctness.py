"""Normalization, correctness rules (study 000 Appendix A) and token aggregations."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from confgrid.protocols import aggregation as A
from confgrid.protocols import correctness as C
from confgrid.protocols.items import Item


def _item(*gold: str) -> Item:
    return Item(item_id="t-1", dataset="t", question="Q?", gold_answers=tuple(gold), canonical=gold[0])


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Paris", "paris"),
        ("  The   Eiffel-Tower!  ", "the eiffel tower"),
        ("**Paris**.", "paris"),
        ("U.S.A.", "u s a"),
        ("Zürich", "z rich"),  # non-ASCII letters become spaces
        ("naïve café", "na ve caf"),
        ("1,000", "1 000"),
        ("tab\tand\nnewline", "tab and newline"),
        ("?!...", ""),
        ("", ""),
        (None, ""),
    ],
)
def test_normalize(text, expected):
    assert C.normalize(text) == expected


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_normalize_properties(text):
    n = C.normalize(text)
    assert n == n.strip() and "  " not in n
    assert all((ch.isascii() and ch.isalnum() and not ch.isupper()) or ch == " " for ch in n)
    assert C.normalize(n) == n  # idempotent


@pytest.mark.parametrize(
    ("answer", "gold", "contain", "exact"),
    [
        ("Paris", ("Paris",), 1.0, 1.0),
        ("paris.", ("Paris",), 1.0, 1.0),
        ("**Paris**", ("Paris",), 1.0, 1.0),
        ("Paris, France", ("Paris",), 1.0, 0.0),  # answer contains gold
        ("Cotswold", ("The Cotswold Hills",), 1.0, 0.0),  # gold contains answer
        ("Rome", ("Paris",), 0.0, 0.0),
        ("Rome", ("Paris", "Rome"), 1.0, 1.0),  # any gold answer
        ("", ("Paris",), 0.0, 0.0),  # empty answer never correct
        (None, ("Paris",), 0.0, 0.0),
        ("?!", ("Paris",), 0.0, 0.0),  # normalizes to empty
        ("Paris", ("...",), 0.0, 0.0),  # empty normalized gold never matches
        ("the", ("The Cotswold Hills",), 1.0, 0.0),  # substring containment, character level
        ("Pari", ("Paris",), 1.0, 0.0),
    ],
)
def test_rules(answer, gold, contain, exact):
    item = _item(*gold)
    assert C.containment(answer, item) == contain
    assert C.exact_match(answer, item) == exact
    assert C.get_rule("containment") is C.containment and C.get_rule("exact_match") is C.exact_match


def test_rule_returns_float_in_01_and_exact_implies_containment():
    item = _item("George Washington", "Washington")
    for ans in ["george washington", "Washington.", "G. Washington", "Lincoln", ""]:
        c, e = C.containment(ans, item), C.exact_match(ans, item)
        assert type(c) is float and type(e) is float and c in (0.0, 1.0) and e in (0.0, 1.0)
        assert e <= c


def test_rule_registry():
    assert C.DEFAULT_RULE == "containment" and C.DEFAULT_RULE in C.RULES
    assert {"alias", "containment", "exact_match", "mc_letter", "mc_favoured", "given_answer", "lifeeval"} <= set(C.RULES)
    allowed = ", ".join(sorted(C.RULES))
    with pytest.raises(KeyError, match=rf"^unknown correctness rule 'nope'; allowed: {allowed}$"):
        C.get_rule("nope")
    with pytest.raises(ValueError, match="already registered"):
        C.register_rule("exact_match")(lambda a, i: 0.0)


# ----------------------------------------------------------------------------- aggregation


def test_aggregations_exact_values():
    lp = np.log(np.array([0.5, 0.8]))
    assert A.geometric_mean(lp) == pytest.approx(math.sqrt(0.4), rel=1e-12)
    assert A.sequence_probability(lp) == pytest.approx(0.4, rel=1e-12)
    assert A.geometric_mean(np.array([0.0, 0.0])) == 1.0
    assert A.geometric_mean(np.log([0.3])) == pytest.approx(0.3)
    assert A.geometric_mean(np.array([-np.inf, 0.0])) == 0.0


def test_aggregation_length_behaviour():
    p = np.log(np.full(10, 0.9))
    assert A.geometric_mean(p) == pytest.approx(0.9)  # independent of length
    assert A.sequence_probability(p) == pytest.approx(0.9**10)  # decreases with length


@pytest.mark.parametrize("name", ["geometric_mean", "sequence_probability"])
def test_aggregation_empty_is_nan_and_shape_checked(name):
    fn = A.get_aggregation(name)
    assert math.isnan(fn(np.array([], dtype=float)))
    with pytest.raises(ValueError, match=r"shape \(2, 2\)"):
        fn(np.zeros((2, 2)))


@settings(max_examples=100, deadline=None)
@given(st.lists(st.floats(min_value=-30.0, max_value=0.0), min_size=1, max_size=20))
def test_aggregation_properties(lps):
    lp = np.array(lps)
    g, s = A.geometric_mean(lp), A.sequence_probability(lp)
    assert 0.0 <= s <= g <= 1.0
    assert np.exp(lp.min()) - 1e-12 <= g <= np.exp(lp.max()) + 1e-12


def test_aggregation_registry():
    assert A.DEFAULT_AGGREGATION == "geometric_mean"
    with pytest.raises(KeyError, match=r"^unknown token aggregation 'mean'; allowed: arithmetic_mean, first_token, geometric_mean, min_probability, sequence_probability$"):
        A.get_aggregation("mean")
    with pytest.raises(ValueError, match="already registered"):
        A.register_aggregation("geometric_mean")(lambda x: 0.0)


# ----------------------------------------------------------------------------- issue 3: more aggregations and rules


def test_new_aggregations_exact_values():
    lp = np.log(np.array([0.5, 0.8, 0.2]))
    assert A.arithmetic_mean(lp) == pytest.approx(0.5, rel=1e-12)
    assert A.min_probability(lp) == pytest.approx(0.2, rel=1e-12)
    assert A.first_token(lp) == pytest.approx(0.5, rel=1e-12)
    assert A.first_token(np.log([0.9])) == pytest.approx(0.9)
    assert A.min_probability(np.array([-np.inf, 0.0])) == 0.0 and A.arithmetic_mean(np.array([-np.inf, 0.0])) == 0.5
    for name in ("arithmetic_mean", "min_probability", "first_token"):
        assert A.get_aggregation(name) is getattr(A, name)
        assert math.isnan(A.get_aggregation(name)(np.array([], dtype=float)))
        with pytest.raises(ValueError, match=r"shape \(2, 2\)"):
            A.get_aggregation(name)(np.zeros((2, 2)))


@settings(max_examples=100, deadline=None)
@given(st.lists(st.floats(min_value=-30.0, max_value=0.0), min_size=1, max_size=20))
def test_aggregation_order(lps):
    lp = np.array(lps)
    s, m, g, a = A.sequence_probability(lp), A.min_probability(lp), A.geometric_mean(lp), A.arithmetic_mean(lp)
    tol = 1e-12
    assert s <= m + tol and m <= g + tol and g <= a + tol and a <= 1.0
    assert 0.0 <= A.first_token(lp) <= 1.0


def test_option_renormalized():
    scores = {"A": math.log(0.1), "B": math.log(0.6), "C": math.log(0.2), "D": math.log(0.1)}
    assert A.option_renormalized(scores, "B") == pytest.approx(0.6, rel=1e-12)
    assert sum(A.option_renormalized(scores, k) for k in scores) == pytest.approx(1.0)
    assert A.option_renormalized({"A": -1000.0, "B": -1001.0}, "A") == pytest.approx(1 / (1 + math.exp(-1)))
    assert math.isnan(A.option_renormalized(scores, "E"))
    assert math.isnan(A.option_renormalized({"A": -np.inf, "B": -np.inf}, "A"))
    assert "option_renormalized" not in A.AGGREGATIONS  # needs every option's score: not per-answer


def test_alias_rule():
    item = Item("t1", "triviaqa", "Q?", ("Paris",), "Paris", aliases=("Paris", "City of Light"),
                normalized_aliases=("paris", "ville lumiere"))
    assert C.containment("City of Light", item) == 0.0 and C.alias("City of Light", item) == 1.0
    assert C.alias("Ville-Lumière", item) == 0.0  # "ville lumi re" after normalization: not contained
    assert C.alias("ville lumiere!", item) == 1.0
    assert C.alias("Paris, France", item) == 1.0 and C.alias("Lyon", item) == 0.0
    assert C.alias(None, item) == 0.0 and C.alias("?!", item) == 0.0
    assert C.get_rule("alias") is C.alias


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=20), st.lists(st.text(min_size=1, max_size=10), min_size=1, max_size=4))
def test_alias_rule_extends_containment(answer, gold):
    item = Item("x", "d", "Q?", tuple(gold), gold[0], aliases=tuple(gold))
    assert C.alias(answer, item) == C.containment(answer, item)
