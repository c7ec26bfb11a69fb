"""Token aggregations: one confidence score from an answer's per-token log-probabilities.

Study 000 (section 3.1): the token score is the geometric mean of the
probabilities the model assigns to the answer's tokens under forced decoding
(the default), so it does not depend on the answer's length. Token
aggregation is one of the protocol axes (section 3.2, Table 1; section 4.3);
the sequence probability (the product of the token probabilities) is offered
as the length-dependent alternative.

Each aggregation maps a 1-D array of natural-log probabilities, shape
``(n_tokens,)``, values in ``(-inf, 0]``, to a float in ``[0, 1]``. An empty
array gives NaN (undefined, not zero).

Examples
--------
>>> import numpy as np
>>> lp = np.log([0.5, 0.8])
>>> round(geometric_mean(lp), 6), round(sequence_probability(lp), 6)
(0.632456, 0.4)
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

__all__ = ["AGGREGATIONS", "DEFAULT_AGGREGATION", "geometric_mean", "get_aggregation", "register_aggregation", "sequence_probability"]

#: ``aggregation(logprobs: np.ndarray) -> float``.
Aggregation = Callable[[np.ndarray], float]

#: Registered aggregations, by name.
AGGREGATIONS: dict[str, Aggregation] = {}

#: Name of the default aggregation (study 000).
DEFAULT_AGGREGATION = "geometric_mean"


def register_aggregation(name: str) -> Callable[[Aggregation], Aggregation]:
    """Decorator registering a token aggregation under ``name``.

    Raises
    ------
    ValueError
        If ``name`` is empty or already registered.
    """
    if not name:
        raise ValueError("register_aggregation: name must be a non-empty string, got ''")

    def decorator(fn: Aggregation) -> Aggregation:
        if name in AGGREGATIONS:
            raise ValueError(f"register_aggregation: an aggregation named {name!r} is already registered")
        AGGREGATIONS[name] = fn
        return fn

    return decorator


def get_aggregation(name: str) -> Aggregation:
    """The aggregation registered under ``name``.

    Raises
    ------
    KeyError
        If no aggregation has that name; the message lists the registered names.
    """
    try:
        return AGGREGATIONS[name]
    except KeyError:
        raise KeyError(f"aggregation={name!r} is not registered; choose one of {sorted(AGGREGATIONS)}") from None


def _as_logprobs(logprobs: np.ndarray, name: str) -> np.ndarray:
    lp = np.asarray(logprobs, dtype=float)
    if lp.ndim != 1:
        raise ValueError(f"{name}: logprobs must be 1-D with shape (n_tokens,), got shape {lp.shape}")
    return lp


@register_aggregation("geometric_mean")
def geometric_mean(logprobs: np.ndarray) -> float:
    """Geometric mean of the token probabilities, ``exp(mean(logprobs))`` (the default).

    Parameters
    ----------
    logprobs : np.ndarray of shape (n_tokens,)
        Natural-log probabilities of the answer tokens, each in (-inf, 0].

    Returns
    -------
    float
        In [0, 1]; NaN for an empty array.

    Raises
    ------
    ValueError
        If ``logprobs`` is not 1-D.
    """
    lp = _as_logprobs(logprobs, "geometric_mean")
    return float("nan") if lp.size == 0 else float(np.exp(lp.mean()))


@register_aggregation("sequence_probability")
def sequence_probability(logprobs: np.ndarray) -> float:
    """Probability of the whole answer, ``exp(sum(logprobs))`` (product of token probabilities).

    Parameters
    ----------
    logprobs : np.ndarray of shape (n_tokens,)
        Natural-log probabilities of the answer tokens, each in (-inf, 0].

    Returns
    -------
    float
        In [0, 1]; NaN for an empty array. Decreases with answer length.

    Raises
    ------
    ValueError
        If ``logprobs`` is not 1-D.
    """
    lp = _as_logprobs(logprobs, "sequence_probability")
    return float("nan") if lp.size == 0 else float(np.exp(lp.sum()))
