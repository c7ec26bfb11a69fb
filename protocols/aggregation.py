"""Token aggregations: one confidence score from an answer's per-token log-probabilities.

Study 000 (section 3.1): the token score is the geometric mean of the probabilities the model assigns to the answer's
tokens under forced decoding (the default), so it does not depend on the answer's length. Token aggregation is one of
the protocol axes (section 3.2, Table 1; section 4.3); the sequence probability (the product of the token
probabilities) is offered as the length-dependent alternative.

Each aggregation maps a 1-D array of natural-log probabilities, shape ``(n_tokens,)``, values in ``(-inf, 0]``, to a
float in ``[0, 1]``. An empty array gives NaN (undefined, not zero); an array that is not 1-D raises ``ValueError``.

Registered: ``geometric_mean`` (default), ``sequence_probability``, ``arithmetic_mean``, ``min_probability``,
``first_token``. With log-probs ``l_1..l_T`` and token probabilities ``p_t = exp(l_t)``:

========================  ==========================================
name                      formula
========================  ==========================================
``geometric_mean``        ``exp((1/T) * sum_t l_t)``
``sequence_probability``  ``exp(sum_t l_t) = prod_t p_t``
``arithmetic_mean``       ``(1/T) * sum_t p_t``
``min_probability``       ``min_t p_t``
``first_token``           ``p_1``
========================  ==========================================

For any answer, ``sequence_probability <= min_probability <= geometric_mean <= arithmetic_mean``.
:func:`option_renormalized` (multiple choice) needs the scores of every option, so it is not a per-answer aggregation
and is not in the registry.

Examples
--------
>>> import numpy as np
>>> lp = np.log([0.5, 0.8])
>>> round(geometric_mean(lp), 6), round(sequence_probability(lp), 6)
(0.632456, 0.4)
>>> round(arithmetic_mean(lp), 6), round(min_probability(lp), 6), round(first_token(lp), 6)
(0.65, 0.5, 0.5)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import numpy as np

from confgrid.registry import Registry

__all__ = [
    "AGGREGATIONS",
    "DEFAULT_AGGREGATION",
    "arithmetic_mean",
    "first_token",
    "geometric_mean",
    "get_aggregation",
    "min_probability",
    "option_renormalized",
    "register_aggregation",
    "sequence_probability",
]

#: ``aggregation(logprobs: np.ndarray) -> float``.
Aggregation = Callable[[np.ndarray], float]

#: Registered aggregations, by name (kind ``"token aggregation"``).
AGGREGATIONS: Registry[Aggregation] = Registry("token aggregation")

#: Name of the default aggregation (study 000).
DEFAULT_AGGREGATION = "geometric_mean"


#: ``@register_aggregation(name)`` registers a token aggregation (``scoring.aggregations`` in grid specs).
register_aggregation = AGGREGATIONS.register
#: The aggregation registered under a name (:meth:`~confgrid.registry.Registry.get`).
get_aggregation = AGGREGATIONS.get


def _reduce(logprobs: np.ndarray, name: str, fn: Callable[[np.ndarray], float]) -> float:
    lp = np.asarray(logprobs, dtype=float)
    if lp.ndim != 1:
        raise ValueError(f"{name}: logprobs must be 1-D with shape (n_tokens,), got shape {lp.shape}")
    return float("nan") if lp.size == 0 else float(fn(lp))


@register_aggregation("geometric_mean")
def geometric_mean(logprobs: np.ndarray) -> float:
    """Geometric mean of the token probabilities, ``exp(mean(logprobs))`` (the default)."""
    return _reduce(logprobs, "geometric_mean", lambda lp: np.exp(lp.mean()))


@register_aggregation("sequence_probability")
def sequence_probability(logprobs: np.ndarray) -> float:
    """Probability of the whole answer, ``exp(sum(logprobs))`` (product of token probabilities).

    Decreases with answer length.
    """
    return _reduce(logprobs, "sequence_probability", lambda lp: np.exp(lp.sum()))


@register_aggregation("arithmetic_mean")
def arithmetic_mean(logprobs: np.ndarray) -> float:
    """Arithmetic mean of the token probabilities, ``mean(exp(logprobs))``."""
    return _reduce(logprobs, "arithmetic_mean", lambda lp: np.exp(lp).mean())


@register_aggregation("min_probability")
def min_probability(logprobs: np.ndarray) -> float:
    """Smallest token probability, ``exp(min(logprobs))`` (the weakest token)."""
    return _reduce(logprobs, "min_probability", lambda lp: np.exp(lp.min()))


@register_aggregation("first_token")
def first_token(logprobs: np.ndarray) -> float:
    """Probability of the first answer token, ``exp(logprobs[0])``.

    For a multiple-choice letter answer (one token) this is the letter's probability. The first token carries the
    separator: after ``Answer:`` it is the token with the leading space.
    """
    return _reduce(logprobs, "first_token", lambda lp: np.exp(lp[0]))


def option_renormalized(option_logprobs: Mapping[str, float], chosen: str) -> float:
    """Probability of the chosen option renormalized over all options (multiple choice).

    ``exp(l_chosen) / sum_k exp(l_k)``, where ``l_k`` is the total log-prob of option ``k``'s answer string (for a
    one-token letter, the letter's log-prob) scored in the same context. Computed stably (log-sum-exp).

    Not a per-answer aggregation: it needs one score per option, so a runner scores every option letter of an item in
    the context (one forced-decoding request per letter) and passes
    ``{letter: sum of that letter's token log-probs}``.

    Parameters
    ----------
    option_logprobs : mapping of str to float
        Log-probability of each option, values in [-inf, 0].
    chosen : str
        The key of the chosen option.

    Returns
    -------
    float
        In [0, 1]; NaN when ``chosen`` is not an option or every option has probability 0.

    Examples
    --------
    >>> round(option_renormalized({"A": math.log(0.2), "B": math.log(0.6)}, "B"), 6)
    0.75
    """
    if chosen not in option_logprobs:
        return float("nan")
    vals = np.asarray([float(v) for v in option_logprobs.values()], dtype=float)
    if vals.size == 0 or not np.isfinite(vals.max()):
        return float("nan")
    m = vals.max()
    log_z = m + math.log(float(np.exp(vals - m).sum()))
    return float(math.exp(float(option_logprobs[chosen]) - log_z))
