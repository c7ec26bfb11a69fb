"""Alternative calibration estimators and signed calibration summaries.

Every function here follows the conventions of :mod:`confgrid.analysis.metrics` (same input validation, ``nan`` plus
:class:`UndefinedMetricWarning` for no rows or non-finite input, ``ValueError`` for values outside ``[0, 1]``) and is
registered under its name in :data:`confgrid.analysis.registry.METRICS` (the table of names: that module's docstring;
``overconfidence`` is an alias of ``calibration_gap``, study 002 section 6.3; other binned ECEs: analysis/binning.py).
It imports only :mod:`~confgrid.analysis.metrics` (and numpy, scipy; ``relplot`` lazily, in :func:`smece`).
"""

from __future__ import annotations

import numpy as np
from scipy.special import ndtr

from .metrics import _check_n_bins, _prepare, check_closure

__all__ = [
    "ECE_BIN_COUNTS",
    "KDE_BANDWIDTH",
    "equal_mass_bin_starts",
    "equal_mass_group_bins",
    "ece_equal_mass",
    "kde_ece",
    "ks_ece",
    "silverman_bandwidth",
    "smoothed_ece",
    "smece",
    "calibration_gap",
    "overconfidence",
]

#: bin counts of study 000, Appendix G ("Bin counts"), registered as ``ece_<B>``
ECE_BIN_COUNTS = (5, 10, 15, 20, 30, 50)

#: bandwidth of :func:`kde_ece` (study 000, Appendix G, "Estimators")
KDE_BANDWIDTH = 0.05


# --- equal-mass bins ---


def _block_starts(total: int, n_bins: int) -> np.ndarray:
    """Start ranks ``r_k`` of the ``np.array_split`` blocks, ``k = 0 .. B-1``."""
    k = np.arange(n_bins, dtype=np.int64)
    q, rem = divmod(int(total), int(n_bins))
    return k * q + np.minimum(k, rem)


def equal_mass_group_bins(group_ends, total: int, n_bins: int, closure: str = "left",
                          group_starts=None) -> np.ndarray:
    """Equal-mass bin of each tie group, given the groups' cumulative end ranks.

    The ``total`` sorted answers are cut into ``n_bins`` consecutive blocks as ``np.array_split`` does (the first
    ``total % n_bins`` blocks one answer longer); a block boundary that falls inside a group of tied confidences is
    moved down to the start of that group, so the whole group joins the higher bin (``closure="left"``: the quantile
    edge's value opens the upper bin), or up to its end, so the whole group joins the lower bin (``closure="right"``:
    the value closes the lower bin, as R's ``cut(x, quantile(x, ...), include.lowest = TRUE)`` and ``pandas.qcut``
    do). A group whose answers occupy ranks ``[start, end)`` therefore lies in bin ``#{k >= 1 : r_k < end}`` (left) or
    ``#{k >= 1 : r_k <= start}`` (right), with ``r_k`` the block starts.

    Parameters
    ----------
    group_ends : array-like of int, any shape
        End rank (exclusive, cumulative count) of each tie group in ascending confidence.
    total : int
    closure : {"left", "right"}, default="left"
        ``"right_float"`` counts as ``"right"`` (equal-mass bins have no fixed edges).
    group_starts : array-like of int, same shape as ``group_ends``
        Start rank of each group; needed by the right closure.

    Returns
    -------
    ndarray of int64, same shape as ``group_ends``
        Bin index in ``0 .. n_bins - 1``.
    """
    r = _block_starts(total, n_bins)[1:]
    if check_closure(closure) == "left":
        return np.searchsorted(r, np.asarray(group_ends), side="left").astype(np.int64)
    if group_starts is None:
        raise ValueError("equal_mass_group_bins: the right closure needs group_starts")
    return np.searchsorted(r, np.asarray(group_starts), side="right").astype(np.int64)


def equal_mass_bin_starts(sorted_conf, n_bins: int = 10, closure: str = "left") -> np.ndarray:
    """Sorted position where each equal-mass bin starts (see :func:`ece_equal_mass`).

    Parameters
    ----------
    sorted_conf : ndarray of shape (n_samples,), sorted ascending
    closure : {"left", "right"}, default="left"
        A tie group cut by a block boundary joins the upper (left) or lower (right) bin; ``"right_float"`` is right.

    Returns
    -------
    ndarray of shape (n_bins + 1,), int64
        ``starts[k]`` is the first sorted position of bin ``k`` and ``starts[n_bins] == n_samples``; an empty bin has
        ``starts[k] == starts[k + 1]``.

    Examples
    --------
    >>> equal_mass_bin_starts(np.array([0.1, 0.2, 0.2, 0.2, 0.5, 0.9]), 3).tolist()
    [0, 1, 4, 6]
    >>> equal_mass_bin_starts(np.array([0.1, 0.2, 0.2, 0.2, 0.5, 0.9]), 3, "right").tolist()
    [0, 4, 4, 6]
    """
    cs = np.asarray(sorted_conf, dtype=np.float64)
    n = cs.size
    n_bins = _check_n_bins(n_bins)
    check_closure(closure)
    r = _block_starts(n, n_bins)
    if n == 0:
        return np.zeros(n_bins + 1, dtype=np.int64)
    tie_starts = np.flatnonzero(np.r_[True, cs[1:] != cs[:-1]])
    if closure != "left":
        # end of the tie group holding position r_k - 1: a group cut by the boundary stays below it
        tie_ends = np.r_[tie_starts[1:], n]
        g = np.searchsorted(tie_starts, np.clip(r - 1, 0, n - 1), side="right") - 1
        moved = np.where(r <= 0, 0, np.where(r < n, tie_ends[g], n))
        return np.r_[moved, n].astype(np.int64)
    # start of the tie group containing position p (p < n): last tie start <= p
    moved = np.where(
        r < n, tie_starts[np.searchsorted(tie_starts, np.minimum(r, n - 1), side="right") - 1], n
    )
    return np.r_[moved, n].astype(np.int64)


def ece_equal_mass(confidence, correct, n_bins: int = 10, closure: str = "left") -> float:
    """Expected calibration error with equal-mass (equal-count) bins.

    The answers sorted by confidence are cut into ``B = n_bins`` blocks as ``np.array_split`` does; **ties**: a
    boundary inside a group of equal confidences moves to the group's start (``closure="left"``: the group joins the
    higher bin) or end (``"right"``: the lower bin, as R's ``cut`` on quantile edges and ``pandas.qcut``), so tied
    answers share a bin and the value does not depend on the input order (:func:`equal_mass_group_bins`). Bins left
    empty (or ``n < B``) contribute 0. Then ``ECE = sum_b (n_b / n) |acc_b - conf_b|`` as for :func:`metrics.ece`.
    Reference: study 000, Appendix G ("Estimators").

    Parameters
    ----------
    confidence, correct : array-like of shape (n_samples,)
    n_bins : int >= 1, default=10
    closure : {"left", "right"}, default="left"
        Which bin a tie group on a quantile edge joins (``"right_float"`` counts as ``"right"``).

    Returns
    -------
    float
        ECE in ``[0, 1]``; **lower is better**. ``nan`` (warned) for no rows or a non-finite input.

    Raises
    ------
    ValueError
        If a value lies outside ``[0, 1]``, the shapes disagree or ``n_bins < 1``.

    Examples
    --------
    Two bins of two answers: ``{0.1, 0.2}`` with accuracy 0 and ``{0.8, 0.9}`` with accuracy 1 give ``2 * 0.5 * 0.15``:

    >>> round(ece_equal_mass([0.9, 0.1, 0.8, 0.2], [1, 0, 1, 0], n_bins=2), 12)
    0.15

    A tie across the boundary moves the whole tie group to the upper bin, giving bins ``{0.1}`` and
    ``{0.5, 0.5, 0.9}``, so ``(|0 - 0.1| + |2 - 1.9|) / 4``:

    >>> round(ece_equal_mass([0.1, 0.5, 0.5, 0.9], [0, 1, 0, 1], n_bins=2), 12)
    0.05

    With correctness ``[0, 1, 1, 1]`` the left closure gives ``(0.1 + |3 - 1.9|) / 4``; the right closure
    keeps the tie group in the lower bin, ``{0.1, 0.5, 0.5}`` and ``{0.9}``, so ``(|2 - 1.1| + 0.1) / 4``:

    >>> [round(ece_equal_mass([0.1, 0.5, 0.5, 0.9], [0, 1, 1, 1], n_bins=2, closure=c), 12)
    ...  for c in ("left", "right")]
    [0.3, 0.25]
    """
    n_bins = _check_n_bins(n_bins)
    if (prep := _prepare("ECE (equal mass)", confidence, correct)) is None:
        return float("nan")
    c, y = prep
    order = np.argsort(c, kind="stable")
    cs, ys = c[order], y[order]
    starts = equal_mass_bin_starts(cs, n_bins, closure)
    d = np.r_[0.0, np.cumsum(ys - cs)]
    # empty bins give 0 difference
    return float(np.sum(np.abs(d[starts[1:]] - d[starts[:-1]])) / c.size)


# --- KDE ECE ---


def _gauss(u: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):  # |u| > 1e154: u * u is inf and the kernel 0, as it should be
        return np.exp(-0.5 * u * u)


def kde_ece(confidence, correct, bandwidth: float = KDE_BANDWIDTH) -> float:
    """Kernel (Nadaraya-Watson) calibration error.

    The accuracy at each answer's confidence is estimated by Gaussian kernel regression over all answers (the answer
    itself included), ``acc(c_i) = sum_j K((c_i - c_j)/h) y_j / sum_j K((c_i - c_j)/h)`` with ``K(u) = exp(-u^2/2)``
    and ``h = bandwidth`` (0.05); the estimator is the mean over answers of ``|acc(c_i) - c_i|``. A plain kernel
    estimate in the spirit of Zhang et al. (2020), not their exact estimator. Reference: study 000, Appendix G
    ("Estimators"). Cost ``O(G^2)`` for ``G`` distinct confidences (computed in row blocks).

    Parameters
    ----------
    confidence, correct : array-like of shape (n_samples,)
    bandwidth : float > 0, default=0.05

    Returns
    -------
    float
        KDE ECE in ``[0, 1]``; **lower is better**. ``nan`` (warned) for no rows or a non-finite input.

    Examples
    --------
    Answers far apart (relative to ``h``) are their own neighbourhoods:

    >>> round(kde_ece([0.0, 1.0], [0, 0]), 12)
    0.5
    """
    h = _check_bandwidth(bandwidth)
    if (prep := _prepare("KDE ECE", confidence, correct)) is None:
        return float("nan")
    c, y = prep
    u, inv = np.unique(c, return_inverse=True)
    m = np.bincount(inv, minlength=u.size).astype(np.float64)
    sy = np.bincount(inv, weights=y, minlength=u.size)
    val = kde_group_values(u, m[None, :], sy[None, :], h)[0]
    return float(val / c.size)


def _check_bandwidth(bandwidth) -> float:
    try:
        h = float(bandwidth)
    except (TypeError, ValueError):
        raise ValueError(f"bandwidth must be a positive float, got {bandwidth!r}") from None
    if not (np.isfinite(h) and h > 0):
        raise ValueError(f"bandwidth must be a positive finite float, got {bandwidth!r}")
    return h


def kde_group_values(u: np.ndarray, m: np.ndarray, sy: np.ndarray, h: float) -> np.ndarray:
    """``sum_g m_g |acc(u_g) - u_g|`` for count-weighted groups, per row.

    ``u`` (G,) holds the distinct confidences; ``m``, ``sy`` (b, G) per row the answers in each group and their
    summed correctness; ``h`` is the bandwidth. Returns shape (b,), not yet divided by the number of answers.
    """
    G = u.size
    out = np.zeros(m.shape[0])
    step = max(1, (1 << 22) // max(G, 1))  # K block of <= 4M entries
    for lo in range(0, G, step):
        K = _gauss((u[lo : lo + step, None] - u[None, :]) / h)  # (g, G), symmetric in full
        num = sy @ K.T  # (b, g)
        den = m @ K.T
        mg = m[:, lo : lo + step]
        with np.errstate(invalid="ignore", divide="ignore"):
            acc = np.where(mg > 0, num / np.where(mg > 0, den, 1.0), 0.0)
        out += np.sum(mg * np.abs(acc - u[None, lo : lo + step]), axis=1)
    return out


# --- KS calibration error ---


def ks_ece(confidence, correct) -> float:
    """Kolmogorov-Smirnov calibration error (Gupta et al. 2021).

    Sort the answers by confidence and take the largest absolute cumulative difference between correctness and
    confidence, divided by ``n``: ``KS = max_k |sum_{i <= k} (y_(i) - c_(i))| / n``; ties: only after whole groups of
    tied confidences, so the value does not depend on the input order. Reference: study 000, Appendix G
    ("Estimators"); Gupta et al., *Calibration of neural networks using splines*, ICLR 2021.

    Returns
    -------
    float
        KS error in ``[0, 1]``; **lower is better**. ``nan`` (warned) for no rows or a non-finite input.

    Examples
    --------
    Cumulative differences 0.9, 0.9 - 0.2 = 0.7, 0.7 - 0.9 = -0.2:

    >>> round(ks_ece([0.1, 0.2, 0.9], [1, 0, 0]), 12)
    0.3

    A tie: only the sum after both tied answers (0.0) counts, not the 0.5 or -0.5 after one of them; then 0.0 + 0.2:

    >>> round(ks_ece([0.5, 0.5, 0.8], [1, 0, 1]), 12)
    0.066666666667
    """
    if (prep := _prepare("KS ECE", confidence, correct)) is None:
        return float("nan")
    c, y = prep
    u, inv = np.unique(c, return_inverse=True)
    d = np.bincount(inv, weights=y - c, minlength=u.size)
    return float(np.max(np.abs(np.cumsum(d))) / c.size)


# --- smoothed ECE (plain kernel, Silverman) and smECE (relplot) ---

#: grid of :func:`smoothed_ece`: step ``h / _GRID_PER_H``, ``_GRID_PAD`` bandwidths beyond the data
_GRID_PER_H = 20
_GRID_PAD = 8.0
#: at most this many uniform grid points; beyond, windows around the answers (:func:`_sign_grid`)
_GRID_MAX = 1 << 20


def silverman_bandwidth(confidence) -> float:
    """Silverman's rule of thumb ``0.9 min(sd, IQR/1.34) n^(-1/5)``.

    ``sd`` is the sample standard deviation (``ddof=1``) and ``IQR`` the interquartile range (``np.percentile``,
    linear). When ``IQR = 0`` but ``sd > 0`` the rule uses ``sd``; it returns ``0.0`` when ``n < 2`` or all
    confidences are equal.

    Examples
    --------
    >>> silverman_bandwidth([0.5, 0.5, 0.5])
    0.0
    """
    c = np.asarray(confidence, dtype=np.float64)
    n = c.size
    if n < 2:
        return 0.0
    sd = float(np.std(c, ddof=1))
    if sd == 0.0 or c.min() == c.max():  # the float sd of equal values can be 1e-17
        return 0.0
    q75, q25 = np.percentile(c, [75.0, 25.0])
    a = min(sd, (q75 - q25) / 1.34)
    if a <= 0.0:
        a = sd
    return 0.9 * a * n ** (-0.2)


def smoothed_ece(confidence, correct) -> float:
    """Smoothed ECE: kernel-smoothed residual integrated against the smoothed density.

    With a plain Gaussian kernel ``K_h`` (density of ``N(0, h^2)``) and Silverman's bandwidth ``h``
    (:func:`silverman_bandwidth` of the confidences), the smoothed residual curve is ``r(t) = sum_i K_h(t - c_i)(y_i -
    c_i) / sum_i K_h(t - c_i)`` and the smoothed confidence density ``delta(t) = (1/n) sum_i K_h(t - c_i)``; the
    estimator is ``integral over the real line |r(t)| delta(t) dt = integral |(1/n) sum_i K_h(t - c_i)(y_i - c_i)| dt``.

    This follows Blasiok and Nakkiran (2024) in smoothing both the accuracy curve and the density, but with a plain
    (not reflected) kernel and Silverman's bandwidth instead of their bandwidth rule (study 000, Appendix G);
    integrating over the whole line keeps all kernel mass, so for one answer (or all confidences equal, ``h = 0``) it
    is the limit ``|mean(y - c)|``. Evaluation: with ``f(t) = (1/n) sum_i K_h(t - c_i)(y_i - c_i)`` and its
    antiderivative ``F(t) = (1/n) sum_i (y_i - c_i) Phi((t - c_i)/h)``, the integral is
    ``sum_k |F(z_{k+1}) - F(z_k)|`` over the sign changes ``z_k`` of ``f`` (with ``F(-inf) = 0``,
    ``F(inf) = mean(y - c)``). The sign changes are found on the uniform grid from ``min(c) - 8h`` to ``max(c) + 8h``
    with step about ``h / 20`` and refined by regula falsi; two sign changes within one grid step are missed (the
    value is then a slight underestimate). Agrees with adaptive quadrature to about 1e-9.

    Returns
    -------
    float
        Smoothed ECE in ``[0, 1]``; **lower is better**. ``nan`` (warned) for no rows or a non-finite input.

    Examples
    --------
    All confidences equal (``h = 0``): the absolute mean residual.

    >>> round(smoothed_ece([0.7, 0.7, 0.7, 0.7], [1, 1, 0, 0]), 12)
    0.2
    """
    if (prep := _prepare("smoothed ECE", confidence, correct)) is None:
        return float("nan")
    c, y = prep
    h = silverman_bandwidth(c)
    if h == 0.0:
        return float(abs(np.mean(y - c)))
    u, inv = np.unique(c, return_inverse=True)
    res = np.bincount(inv, weights=y - c, minlength=u.size) / c.size
    t = _sign_grid(u, h)
    f = _smoothed_residual(t, u, res, h)
    # sign changes of f on the grid -> roots by two regula-falsi steps
    k = np.flatnonzero(np.sign(f[:-1]) * np.sign(f[1:]) < 0)
    ta, tb, fa, fb = t[k], t[k + 1], f[k], f[k + 1]
    for _ in range(2):
        z = ta - fa * (tb - ta) / (fb - fa)
        fz = _smoothed_residual(z, u, res, h)
        left = np.sign(fz) == np.sign(fa)
        ta, fa = np.where(left, z, ta), np.where(left, fz, fa)
        tb, fb = np.where(left, tb, z), np.where(left, fb, fz)
    with np.errstate(invalid="ignore", divide="ignore"):
        z = np.where(fb != fa, ta - fa * (tb - ta) / (fb - fa), ta)
    # F(t) = (1/n) sum_i (y_i - c_i) Phi((t - c_i)/h) is an antiderivative of f
    Fz = ndtr((z[:, None] - u[None, :]) / h) @ res if z.size else np.zeros(0)
    F = np.r_[0.0, Fz, res.sum()]
    return float(np.sum(np.abs(np.diff(F))))


def _sign_grid(u: np.ndarray, h: float) -> np.ndarray:
    """Grid on which :func:`smoothed_ece` looks for sign changes: ``min(u) - 8h`` to ``max(u) + 8h``, step ``h / 20``.

    When that uniform grid would exceed ``_GRID_MAX`` points (a bandwidth far below the spread of the data, as
    with confidences of 1e-300 beside 0.58: Silverman's rule reads the interquartile range), the grid covers only
    the windows ``u_i -/+ 8h`` with that step: farther than 8 bandwidths from every answer the residual ``f`` is
    below 1e-14 of its scale, so a sign change there moves the integral by less than that.
    """
    lo, hi = u[0] - _GRID_PAD * h, u[-1] + _GRID_PAD * h
    n_pts = int(np.ceil((hi - lo) / (h / _GRID_PER_H))) + 1
    if n_pts <= _GRID_MAX:
        return np.linspace(lo, hi, n_pts)
    window = np.linspace(-_GRID_PAD * h, _GRID_PAD * h, int(2 * _GRID_PAD * _GRID_PER_H) + 1)
    return np.unique((u[:, None] + window[None, :]).ravel())


def _smoothed_residual(t, u, res, h) -> np.ndarray:
    """``(1/n) sum_i K_h(t - c_i)(y_i - c_i)`` at the points ``t`` (grouped by distinct ``u``)."""
    t = np.asarray(t, dtype=np.float64)
    f = np.zeros(t.size)
    norm = 1.0 / (h * np.sqrt(2.0 * np.pi))
    step = max(1, (1 << 21) // max(u.size, 1))
    for a in range(0, t.size, step):
        f[a : a + step] = (_gauss((t[a : a + step, None] - u[None, :]) / h) @ res) * norm
    return f


def smece(confidence, correct) -> float:
    """smECE of Blasiok and Nakkiran (2024), computed by the ``relplot`` package.

    Calls ``relplot.smECE(confidence, correct)`` (reflected Gaussian kernel, bandwidth chosen as the fixed point
    ``sigma = smECE_sigma``; see the package). ``relplot`` is imported on first use. Reference: J. Blasiok and P.
    Nakkiran, *Smooth ECE: principled reliability diagrams via kernel smoothing*, ICLR 2024.

    Returns
    -------
    float
        smECE in ``[0, 1]``; **lower is better**. ``nan`` (warned) for no rows or a non-finite input.

    Raises
    ------
    ImportError
        If ``relplot`` is not installed (``pip install relplot``).
    """
    try:
        import relplot  # lazy: relplot loads matplotlib; only smECE needs it
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "metric 'smece' needs the optional package 'relplot' "
            "(Blasiok & Nakkiran's smooth ECE); install it with `pip install relplot`"
        ) from exc
    if (prep := _prepare("smECE", confidence, correct)) is None:
        return float("nan")
    c, y = prep
    return float(relplot.smECE(c, y))


# --- signed summaries ---


def calibration_gap(confidence, correct) -> float:
    """Signed calibration gap: mean confidence minus accuracy.

    ``G = (1/n) sum_i (c_i - y_i)``; positive means overconfident, negative underconfident. Reference: study 003,
    section 3.3, equation (2).

    Returns
    -------
    float
        Gap in ``[-1, 1]``; **signed: 0 is best** (registered with ``signed=True``). ``nan`` (with an
        :class:`UndefinedMetricWarning`) for no rows or a non-finite input.

    Examples
    --------
    >>> round(calibration_gap([0.9, 0.8, 0.7], [1, 0, 1]), 12)
    0.133333333333
    """
    if (prep := _prepare("calibration gap", confidence, correct)) is None:
        return float("nan")
    c, y = prep
    return float(np.mean(c) - np.mean(y))


def overconfidence(confidence, correct) -> float:
    """Overconfidence: mean confidence minus accuracy (alias of :func:`calibration_gap`).

    Study 002 (section 6.3, after Klayman et al. 1999) defines overconfidence as mean stated confidence minus mean
    (graded, for ties) score: study 003's calibration gap ``G`` under a second registered name, with identical values.

    Examples
    --------
    >>> overconfidence([0.9, 0.8, 0.7], [1, 0, 1]) == calibration_gap([0.9, 0.8, 0.7], [1, 0, 1])
    True
    """
    if (prep := _prepare("overconfidence", confidence, correct)) is None:
        return float("nan")
    c, y = prep
    return float(np.mean(c) - np.mean(y))
