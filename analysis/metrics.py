"""Point estimates of the calibration and discrimination metrics.

Every metric takes ``confidence`` and ``correct``, array-likes of shape ``(n_samples,)`` (one row per answer; lengths
that differ raise ``ValueError``), and returns a Python ``float``. The definitions are those of study 000, Appendix A.

Conventions shared by every metric
----------------------------------
* ``confidence`` must lie in ``[0, 1]``; a finite value outside raises a ``ValueError`` naming the argument, the
  value, its index and the range.
* ``correct`` may be binary ``{0, 1}`` (``bool`` accepted) or graded in ``[0, 1]``; values outside raise the same error.
* Undefined cases return ``nan`` together with an :class:`UndefinedMetricWarning`: no rows, a non-finite value in
  either input, and (AUROC only) a single class. A metric never returns a silent 0.

Only numpy is used here (the count-weighted kernels of the bootstrap: :mod:`confgrid.analysis.kernels`). This module
imports no other module of the package; :mod:`confgrid.analysis.registry` registers its metrics.
"""

from __future__ import annotations

import warnings

import numpy as np

__all__ = [
    "UndefinedMetricWarning",
    "undefined",
    "validate_inputs",
    "CLOSURES",
    "check_closure",
    "bin_edges",
    "bin_indices",
    "edge_counts",
    "harmonic_numbers",
    "ece",
    "auroc",
    "aurc",
    "brier",
    "spearman",
]


class UndefinedMetricWarning(UserWarning):
    """Warning emitted when a metric is undefined and ``nan`` is returned."""


def undefined(what: str, reason: str, stacklevel: int = 3) -> float:
    """Warn that ``what`` is undefined (:class:`UndefinedMetricWarning`) and return ``nan``; ``stacklevel`` counts
    from this call, as in :func:`warnings.warn` (3: the caller of the function that calls this)."""
    warnings.warn(f"{what} is undefined: {reason}; returning nan", UndefinedMetricWarning, stacklevel=stacklevel)
    return float("nan")


# --- input handling ---


def _as_1d_float(x, name: str) -> np.ndarray:
    arr = np.asarray(x)
    if arr.dtype == object:
        try:
            arr = arr.astype(np.float64)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"{name} must be numeric, got an object array") from exc
    if not (np.issubdtype(arr.dtype, np.number) or arr.dtype == np.bool_):
        raise TypeError(f"{name} must be numeric or bool, got dtype {arr.dtype}")
    if np.issubdtype(arr.dtype, np.complexfloating):
        raise TypeError(f"{name} must be real-valued, got dtype {arr.dtype}")
    arr = arr.astype(np.float64, copy=False)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D of shape (n_samples,), got shape {arr.shape}")
    return arr


def _check_range(arr: np.ndarray, name: str) -> None:
    finite = np.isfinite(arr)
    bad = finite & ((arr < 0.0) | (arr > 1.0))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(
            f"{name} must lie in the closed range [0, 1]; "
            f"got {name}[{i}] = {float(arr[i])!r} ({int(bad.sum())} value(s) out of range)"
        )


def validate_inputs(confidence, correct) -> tuple[np.ndarray, np.ndarray]:
    """Check and convert the two inputs every metric takes.

    Parameters
    ----------
    confidence : array-like of floats in ``[0, 1]``, shape (n_samples,)
    correct : array-like of shape (n_samples,)
        Correctness of each answer: bool, binary ``{0, 1}`` or graded float in ``[0, 1]``.

    Returns
    -------
    confidence, correct : ndarray of shape (n_samples,), dtype float64
        Non-finite values are kept (the metrics turn them into ``nan`` with a warning).

    Raises
    ------
    ValueError
        If an input is not 1-D, the lengths differ, or a finite value lies outside ``[0, 1]`` (the message names the
        argument, the value, its index and the range).
    TypeError
        If an input is not numeric.
    """
    c = _as_1d_float(confidence, "confidence")
    y = _as_1d_float(correct, "correct")
    if c.shape != y.shape:
        raise ValueError(
            f"confidence and correct must have the same length; got {c.shape[0]} and {y.shape[0]}"
        )
    _check_range(c, "confidence")
    _check_range(y, "correct")
    return c, y


def _undefined_reason(c: np.ndarray, y: np.ndarray) -> str | None:
    if c.size == 0:
        return "no rows (n_samples == 0)"
    if not np.isfinite(c).all():
        i = int(np.flatnonzero(~np.isfinite(c))[0])
        return f"non-finite confidence (confidence[{i}] = {float(c[i])!r})"
    if not np.isfinite(y).all():
        i = int(np.flatnonzero(~np.isfinite(y))[0])
        return f"non-finite correct (correct[{i}] = {float(y[i])!r})"
    return None


def _prepare(metric: str, confidence, correct):
    """Validate; return ``(c, y)`` or ``None`` after warning when undefined."""
    c, y = validate_inputs(confidence, correct)
    reason = _undefined_reason(c, y)
    if reason is not None:
        undefined(metric, reason, stacklevel=4)
        return None
    return c, y


# --- shared helpers (also used by the bootstrap kernels) ---


#: The bin closures of every binned estimator (ECE, ``ece_<B>``, equal-mass ECE, reliability bins):
#:
#: * ``"left"`` (the default): bin ``k`` is ``[k/B, (k+1)/B)``, the last bin also holds ``1.0``; edges are the correctly
#:   rounded doubles ``k / B``. numpy's ``np.digitize(x, edges)`` and ``pandas.cut(x, edges, right=False)`` bin so.
#: * ``"right"``: bin ``k`` is ``(k/B, (k+1)/B]``, the first bin also holds ``0``; the same edges ``k / B``. The default
#:   of R's ``cut`` and ``pandas.cut``; scikit-learn's ``calibration_curve`` puts an edge value in the lower bin too.
#: * ``"right_float"``: right-closed on the floating-point edges ``k * fl(1/B)`` that ``np.linspace(0, 1, B + 1)``
#:   (scikit-learn's ``calibration_curve``) and R's ``seq(0, 1, by = 1/B)`` compute, e.g. ``0.30000000000000004``,
#:   ``0.6000000000000001``, ``0.7000000000000001`` for ``B = 10``. It differs from ``"right"`` only for values
#:   between ``k/B`` and ``k * fl(1/B)``, such as a stated 70% stored as ``0.7000000000000001`` after float
#:   arithmetic. This is the rule that reproduces study 002's published Table 1 (docs/reproductions.md).
#: * ``"left_float"``: left-closed on those float edges, the last bin also holding ``1.0``: ``np.digitize(x,
#:   np.linspace(0, 1, B + 1))`` and ``x >= lo`` tests on ``np.linspace`` edges (Müller et al. 2026, Yang et al.
#:   2024; analysis/conventions.py). A stated 30% (``0.3``) lies below the float edge ``0.30000000000000004``
#:   and joins the bin below, where ``"left"`` puts it in the bin starting at 0.3.
CLOSURES = ("left", "right", "right_float", "left_float")

#: the closures on the float edges ``k * fl(1/B)`` of ``np.linspace`` (the others use the exact ``k / B``)
FLOAT_CLOSURES = ("right_float", "left_float")
#: the closures whose bins hold their lower edge (``[lo, hi)``); the others hold their upper edge
LEFT_CLOSURES = ("left", "left_float")


def check_closure(closure) -> str:
    """Return ``closure`` if it is one of :data:`CLOSURES`, else raise ``ValueError`` naming it and the choices."""
    if closure not in CLOSURES:
        raise ValueError(f"closure must be one of {', '.join(CLOSURES)}; got {closure!r}")
    return closure


def bin_edges(n_bins: int = 10, closure: str = "left") -> np.ndarray:
    """The ``n_bins + 1`` equal-width bin edges a closure uses.

    ``"left"`` and ``"right"``: the correctly rounded doubles ``k / B`` (not ``np.linspace``, whose ``3 * 0.1`` is
    ``0.30000000000000004``). ``"right_float"`` and ``"left_float"``: ``k * fl(1/B)`` with the last edge ``1.0``, bit
    for bit the edges of ``np.linspace(0, 1, B + 1)`` and of R's ``seq(0, 1, by = 1/B)``.

    Parameters
    ----------
    closure : {"left", "right", "right_float", "left_float"}, default="left"

    Returns
    -------
    ndarray of shape (n_bins + 1,), float64
        Ascending, from ``0.0`` to ``1.0``.

    Raises
    ------
    ValueError
        ``n_bins < 1`` or an unknown closure.

    Examples
    --------
    >>> bin_edges(10)[[3, 7]].tolist()
    [0.3, 0.7]
    >>> bin_edges(10, "right_float")[[3, 7]].tolist()
    [0.30000000000000004, 0.7000000000000001]
    """
    n_bins = _check_n_bins(n_bins)
    check_closure(closure)
    k = np.arange(n_bins + 1, dtype=np.float64)
    if closure in FLOAT_CLOSURES:
        edges = k * (1.0 / n_bins)
        edges[-1] = 1.0
        return edges
    return k / n_bins


def bin_indices(confidence, n_bins: int = 10, closure: str = "left") -> np.ndarray:
    """Equal-width bin index of each confidence under a declared closure, robust at the bin edges.

    Bin ``k`` is ``[k/B, (k+1)/B)`` (``"left"``, the default: the last bin also holds ``1.0``, so ``0.3`` lands in the
    bin starting at 0.3) or ``(k/B, (k+1)/B]`` (``"right"``: the first bin also holds ``0.0``); ``"right_float"`` and
    ``"left_float"`` use the float edges of :func:`bin_edges` (``np.searchsorted(np.linspace(0, 1, B + 1)[1:-1], p)``
    and ``np.digitize(p, np.linspace(0, 1, B + 1)) - 1``). Who bins which way: :data:`CLOSURES`.

    Parameters
    ----------
    confidence : ndarray of shape (n_samples,)
        Finite values in ``[0, 1]``.
    n_bins : int >= 1, default=10
    closure : {"left", "right", "right_float", "left_float"}, default="left"

    Returns
    -------
    ndarray of shape (n_samples,), dtype int64
        Values in ``0 .. n_bins - 1``. Raises ``ValueError`` as :func:`bin_edges` does.

    Examples
    --------
    >>> bin_indices(np.array([0.0, 0.1, 0.3, 0.7, 0.99, 1.0])).tolist()
    [0, 1, 3, 7, 9, 9]
    >>> bin_indices(np.array([0.0, 0.1, 0.3, 0.7, 0.99, 1.0]), closure="right").tolist()
    [0, 0, 2, 6, 9, 9]
    """
    edges = bin_edges(n_bins, closure)
    side = "right" if closure in LEFT_CLOSURES else "left"
    idx = np.searchsorted(edges, np.asarray(confidence, dtype=np.float64), side=side) - 1
    return np.clip(idx, 0, edges.size - 2).astype(np.int64, copy=False)


def edge_counts(confidence, n_bins: int = 10) -> tuple[int, int]:
    """How many confidences lie exactly on an edge ``k / B`` of the equal-width bins.

    Parameters
    ----------
    confidence : array-like of shape (n_samples,)
        Finite values in ``[0, 1]`` (non-finite ones count as off every edge).

    Returns
    -------
    (on_edge, on_inner_edge) : tuple of int
        ``on_edge``: values equal to some ``k / B``, ``k = 0 .. B`` (0 and 1 included: the study 002 count,
        "57% of the confidences lie on an edge of the 10 bins"). ``on_inner_edge``: values equal to an inner
        edge ``k = 1 .. B - 1``, the only ones the ``left`` and ``right`` closures put in different bins.

    Examples
    --------
    >>> edge_counts([0.0, 0.05, 0.3, 0.9, 1.0])
    (4, 2)
    """
    c = np.asarray(confidence, dtype=np.float64)
    edges = bin_edges(n_bins, "left")
    pos = np.searchsorted(edges, c, side="left")
    on = (pos < edges.size) & (edges[np.minimum(pos, edges.size - 1)] == c)
    inner = on & (pos > 0) & (pos < edges.size - 1)
    return int(on.sum()), int(inner.sum())


def _check_n_bins(n_bins) -> int:
    if isinstance(n_bins, bool) or not isinstance(n_bins, (int, np.integer)) or n_bins < 1:
        raise ValueError(f"n_bins must be an integer >= 1, got {n_bins!r}")
    return int(n_bins)


def harmonic_numbers(n: int) -> np.ndarray:
    """Harmonic numbers ``H[k] = sum_{i=1..k} 1/i`` for ``k = 0..n`` (``H[0] = 0``).

    Examples
    --------
    >>> harmonic_numbers(3).tolist() == [0.0, 1.0, 1.5, 1.5 + 1 / 3]
    True
    """
    h = np.zeros(int(n) + 1, dtype=np.float64)
    if n > 0:
        np.cumsum(1.0 / np.arange(1, int(n) + 1, dtype=np.float64), out=h[1:])
    return h


def aurc_tie_groups(m, e, K, C, H: np.ndarray):
    """Exact expected AURC numerator contribution of tie groups (closed form).

    A group of ``m`` tied answers with error mass ``e``, placed after ``K`` answers holding ``C`` errors, contributes
    ``sum_{t=1..m} (C + t e/m) / (K + t) = m r + (C - K r)(H[K+m] - H[K])`` with ``r = e / m``. Groups with ``m == 0``
    contribute 0. Works elementwise on arrays of the same shape; ``m`` and ``K`` must hold integer counts (as floats).
    The ``m == 1`` case uses ``1 / (K + 1)`` directly.
    """
    m = np.asarray(m, dtype=np.float64)
    K = np.asarray(K, dtype=np.float64)
    e = np.asarray(e, dtype=np.float64)
    # m * r == e (both 0 when m == 0), so the contribution is e + (C - K r) dh
    Ki = (K + 0.5).astype(np.int64)  # exact counts; + 0.5 rounds
    dh = H[(K + m + 0.5).astype(np.int64)]
    dh -= H[Ki]
    np.divide(1.0, K + 1.0, out=dh, where=(m == 1.0))  # exact for the common single item
    r = np.maximum(m, 1.0)
    np.divide(e, r, out=r)  # r = e / m, and 0 for empty groups
    r *= K
    np.subtract(C, r, out=r)
    r *= dh
    r += e
    return r


# --- metrics ---


def ece(confidence, correct, n_bins: int = 10, closure: str = "left") -> float:
    """Expected calibration error with equal-width bins.

    The answers are sorted into ``B = n_bins`` equal-width bins under ``closure`` (:func:`bin_indices`; by default
    ``[k/B, (k+1)/B)``, the last also holding ``1.0``); then ``ECE = sum_b (n_b / n) |acc_b - conf_b|`` with ``acc_b``
    the mean correctness and ``conf_b`` the mean confidence in bin ``b`` (empty bins contribute 0). Reference: study
    000, Appendix A.

    Parameters
    ----------
    confidence, correct : array-like of shape (n_samples,)
    closure : {"left", "right", "right_float", "left_float"}, default="left"
        Which bin a confidence on an edge joins (:data:`CLOSURES`).

    Returns
    -------
    float
        ECE in ``[0, 1]``; **lower is better**. ``nan`` (warned) for no rows or a non-finite input.

    Examples
    --------
    >>> ece([0.0, 0.1, 0.5, 1.0], [0, 0, 1, 1])
    0.15

    ``0.1`` lies on an edge: the left closure pools it with ``0.15`` (``|1 - 0.25| / 3``), the right closure with
    nothing (``(|1 - 0.1| + |0 - 0.15|) / 3``):

    >>> round(ece([0.1, 0.15, 1.0], [1, 0, 1]), 12), round(ece([0.1, 0.15, 1.0], [1, 0, 1], closure="right"), 12)
    (0.25, 0.35)
    """
    n_bins = _check_n_bins(n_bins)
    check_closure(closure)
    if (prep := _prepare("ECE", confidence, correct)) is None:
        return float("nan")
    c, y = prep
    n = c.size
    b = bin_indices(c, n_bins, closure)
    n_b = np.bincount(b, minlength=n_bins)
    sum_c = np.bincount(b, weights=c, minlength=n_bins)
    sum_y = np.bincount(b, weights=y, minlength=n_bins)
    nz = n_b > 0
    acc_b = sum_y[nz] / n_b[nz]
    conf_b = sum_c[nz] / n_b[nz]
    return float(np.sum(n_b[nz] / n * np.abs(acc_b - conf_b)))


def auroc(confidence, correct) -> float:
    """Area under the ROC curve of confidence as a score for correctness.

    The probability that a randomly chosen correct answer gets a higher confidence than a randomly chosen wrong one,
    ties counting one half (the Mann-Whitney statistic; equals ``sklearn.metrics.roc_auc_score(correct, confidence)``
    for binary ``correct``). Graded correctness ``y_i`` in ``[0, 1]`` is treated as a soft label: answer ``i`` counts
    as correct with mass ``y_i`` and as wrong with mass ``1 - y_i``. Reference: study 000, Appendix A.

    Returns
    -------
    float
        AUROC in ``[0, 1]``; **higher is better** (0.5 is chance). ``nan`` (with an :class:`UndefinedMetricWarning`)
        for no rows, a non-finite input or a single class.

    Examples
    --------
    >>> auroc([0.9, 0.8, 0.8, 0.3], [1, 1, 0, 0])
    0.875
    """
    if (prep := _prepare("AUROC", confidence, correct)) is None:
        return float("nan")
    c, y = prep
    uniq, inv = np.unique(c, return_inverse=True)  # groups in ascending confidence
    pos = np.bincount(inv, weights=y, minlength=uniq.size)
    neg = np.bincount(inv, weights=1.0 - y, minlength=uniq.size)
    P, N = pos.sum(), neg.sum()
    if P <= 0 or N <= 0:
        warnings.warn(
            "AUROC is undefined: only one class present in correct "
            f"(positive mass {P:g}, negative mass {N:g}); returning nan",
            UndefinedMetricWarning,
            stacklevel=2,
        )
        return float("nan")
    neg_below = np.cumsum(neg) - neg
    U = np.sum(pos * (neg_below + 0.5 * neg))
    return float(U / (P * N))


def aurc(confidence, correct) -> float:
    """Area under the risk-coverage curve (exact expectation over tie orders).

    For ``k = 1 .. n`` keep the ``k`` most confident answers and compute their error rate ``1 - mean(correct)``; AURC
    is the average over ``k``. Answers with tied confidence are ordered at random and the **exact expected value**
    over that ordering is returned, via the closed form per tie group (size ``m``, error mass ``e``, after ``K``
    answers with ``C`` errors): ``m r + (C - K r)(H(K+m) - H(K))`` with ``r = e/m`` and ``H`` the harmonic numbers.
    The result does not depend on the input order. Reference: study 000, Appendix A.

    Returns
    -------
    float
        AURC in ``[0, 1]``; **lower is better**. ``nan`` (warned) for no rows or a non-finite input.

    Examples
    --------
    Risks at k = 1, 2, 3 are 0, 1/2, 1/3, so AURC = (0 + 1/2 + 1/3) / 3:

    >>> round(aurc([0.9, 0.5, 0.1], [1, 0, 1]), 12)
    0.277777777778

    A tie between a correct and a wrong answer at the top: expected risks (1/2, 1/2, 1/3) give AURC = 4/9:

    >>> round(aurc([0.9, 0.9, 0.1], [1, 0, 1]), 12)
    0.444444444444
    """
    if (prep := _prepare("AURC", confidence, correct)) is None:
        return float("nan")
    c, y = prep
    n = c.size
    uniq, inv = np.unique(c, return_inverse=True)
    # groups in descending confidence
    g = uniq.size - 1 - inv
    m = np.bincount(g, minlength=uniq.size).astype(np.float64)
    e = np.bincount(g, weights=1.0 - y, minlength=uniq.size)
    K = np.cumsum(m) - m
    C = np.cumsum(e) - e
    contrib = aurc_tie_groups(m, e, K, C, harmonic_numbers(n))
    return float(np.sum(contrib) / n)


def brier(confidence, correct) -> float:
    """Brier score: mean squared difference between confidence and correctness.

    ``Brier = (1/n) sum_i (confidence_i - correct_i)^2``. Reference: study 000, Appendix A.

    Returns
    -------
    float
        Brier score in ``[0, 1]``; **lower is better**. ``nan`` (warned) for no rows or a non-finite input.

    Examples
    --------
    >>> brier([1.0, 0.5, 0.0], [1, 0, 0])
    0.08333333333333333
    """
    if (prep := _prepare("Brier", confidence, correct)) is None:
        return float("nan")
    c, y = prep
    return float(np.mean((c - y) ** 2))


def spearman(confidence, correct) -> float:
    """Spearman's rank correlation between confidence and the target (average ranks on ties).

    The Pearson correlation of the two rank vectors (``scipy.stats.rankdata``, ties sharing their average rank), so it
    equals ``scipy.stats.spearmanr(confidence, correct).statistic``. It measures how well confidence orders items by
    the target (discrimination), whatever the scale; with a graded target such as the expected accuracy over k samples
    it is study 004's Table 12 (Spearman's rho of each estimator against the capability and the response target).

    Parameters
    ----------
    confidence : array-like of shape (n_samples,)
        Confidence of each answer, float in ``[0, 1]``.
    correct : array-like of shape (n_samples,)
        The target: binary or graded in ``[0, 1]`` (e.g. expected accuracy).

    Returns
    -------
    float
        rho in ``[-1, 1]``; **higher is better**. ``nan`` (with an :class:`UndefinedMetricWarning`) for fewer than 2
        rows, a non-finite input, or a constant input (no ranking to correlate).

    Examples
    --------
    >>> spearman([0.1, 0.5, 0.9], [0.0, 0.5, 1.0])
    1.0
    >>> round(spearman([0.2, 0.2, 0.9, 0.4], [0, 1, 1, 0]), 6)
    0.235702
    """
    from scipy.stats import rankdata  # lazy: the base metrics load no scipy; only Spearman needs it

    if (prep := _prepare("Spearman", confidence, correct)) is None:
        return float("nan")
    c, y = prep
    if c.size < 2 or np.all(c == c[0]) or np.all(y == y[0]):
        warnings.warn("Spearman is undefined: " + ("fewer than 2 rows" if c.size < 2 else
                      f"{'confidence' if np.all(c == c[0]) else 'correct'} is constant") + "; returning nan",
                      UndefinedMetricWarning, stacklevel=2)
        return float("nan")
    rx, ry = rankdata(c), rankdata(y)
    rx -= rx.mean()
    ry -= ry.mean()
    return float((rx @ ry) / np.sqrt((rx @ rx) * (ry @ ry)))
