"""A binned ECE as its declared parts: bin count, bin scheme, bin closure and bin confidence.

Every binned calibration error confgrid computes is ``ECE = sum_b (n_b / n) |acc_b - conf_b|`` over the
non-empty bins ``b``; published implementations differ in four choices, each of which can move the number by
more than its interval (docs/reproductions.md):

* the **bin count** ``B`` (a fixed number, or the run's ``metrics.ece_bins`` / ``--ece-bins``);
* the **bin scheme**: ``width`` (equal-width bins ``[k/B, (k+1)/B)``), ``mass`` (equal-mass bins, cut at the
  quantiles of the confidences; analysis/estimators.py :func:`~confgrid.analysis.estimators.ece_equal_mass`) or
  ``centred`` (``B`` equal-width bins centred on ``k / (B - 1)``, ``k = 0 .. B-1``, edges ``+-`` half a width:
  Müller et al. 2026's bins for answer consistency, whose values are multiples of ``1 / (B - 1)``; built as
  their ``calculate_calibration_data.py`` builds them, in float arithmetic: centres ``np.linspace(0, 1, B)``,
  edges ``centres - w / 2`` and ``1 + w / 2`` with ``w = 1 / (B - 1)``);
* the **bin closure**: which bin a confidence on an edge joins (:data:`~confgrid.analysis.metrics.CLOSURES`:
  ``left``, ``right``, and both on the float edges of ``np.linspace``);
* the **bin confidence** ``conf_b``: ``mean`` (the mean confidence of the bin's answers: Guo et al. 2017 and
  confgrid's default) or ``midpoint`` (the bin's centre ``(lo + hi) / 2`` of its edges, whatever its answers
  stated: Müller et al. 2026, ``calculate_calibration_data.py``).

A :class:`Binning` holds the four, and the **estimator** of the binned error: ``plugin`` (the sum above) or
``debiased`` (Kumar, Liang & Ma 2019, "Verified Uncertainty Calibration", NeurIPS, section 5: the plug-in's upward
bias, ``E|acc_b - conf_b|`` under a normal model of each bin's accuracy, subtracted once; :func:`debiased_terms`).
Its metric name follows one grammar (:func:`binned_name`, :func:`parse_binned_name`)::

    ece[_<B>][_equal_mass | _centred][_right | _right_float | _left_float][_midpoint][_debiased]

so ``ece`` is the run's bins, equal width, left-closed, mean confidence, ``ece_15_left_float_midpoint`` Müller et
al.'s verbalized ECE, ``ece_11_centred_midpoint`` their answer consistency ECE. A name computes exactly the estimator
it spells; a name that spells nothing (``ece_7_foo``, midpoint bins of equal mass) is refused with the reason and the
spelling that works.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
from scipy.special import ndtr

from .estimators import ece_equal_mass
from .metrics import (CLOSURES, FLOAT_CLOSURES, LEFT_CLOSURES, _check_n_bins, _prepare, bin_edges, bin_indices,
                      edge_counts)

__all__ = ["SCHEMES", "BIN_CONFIDENCES", "ESTIMATORS", "MAX_BINS", "Binning", "binned_name", "parse_binned_name",
           "BinnedNameError", "binned_ece", "edge_counts_of", "debiased_terms", "reordered_name"]

#: the bin schemes (module docstring)
SCHEMES = ("width", "mass", "centred")
#: what stands for a bin's confidence: the mean of its answers' confidences, or the bin's midpoint
BIN_CONFIDENCES = ("mean", "midpoint")
#: the estimators of the binned error: the plug-in sum, or Kumar et al. 2019's debiased one
ESTIMATORS = ("plugin", "debiased")
#: the largest bin count a name may spell (as ``metrics.ece_bins``)
MAX_BINS = 1000

_SCHEME_SUFFIX = {"width": "", "mass": "_equal_mass", "centred": "_centred"}
_NAME = re.compile(r"^ece(?:_(?P<bins>[0-9]+))?(?P<scheme>_equal_mass|_centred)?"
                   r"(?P<closure>_right_float|_left_float|_right)?(?P<conf>_midpoint)?(?P<est>_debiased)?$")


class BinnedNameError(ValueError):
    """A metric name in the binned-ECE grammar that spells no estimator (the message says why and what works)."""


@dataclass(frozen=True)
class Binning:
    """The declared parts of one binned ECE (module docstring).

    Attributes
    ----------
    n_bins : int or None, default None
        Bin count ``B`` in ``1 .. 1000`` (``centred``: ``2 ..``); None: the run's ``metrics.ece_bins``
        (``--ece-bins``), passed to :meth:`bins`.
    scheme : {"width", "mass", "centred"}, default "width"
    closure : {"left", "right", "right_float", "left_float"}, default "left"
        Equal-mass bins have no fixed edges: ``left`` or ``right`` only (a tie group on a quantile edge joins
        the upper or the lower bin). Centred bins: ``left`` or ``right`` (their edges are not ``np.linspace``'s).
    bin_confidence : {"mean", "midpoint"}, default "mean"
        ``midpoint`` needs fixed edges (``width`` or ``centred``).
    estimator : {"plugin", "debiased"}, default "plugin"
        ``debiased``: Kumar et al. 2019's bias-corrected estimate (:func:`debiased_terms`); fixed edges only.

    Raises
    ------
    BinnedNameError
        (a ``ValueError``) A combination that spells no estimator, naming the field, the value and what is allowed.
    """

    n_bins: int | None = None
    scheme: str = "width"
    closure: str = "left"
    bin_confidence: str = "mean"
    estimator: str = "plugin"

    def __post_init__(self) -> None:
        if self.n_bins is not None:
            if isinstance(self.n_bins, bool) or not isinstance(self.n_bins, (int, np.integer)) \
                    or not 1 <= self.n_bins <= MAX_BINS:
                raise BinnedNameError(f"bins: {self.n_bins!r}; allowed: an integer in 1..{MAX_BINS}")
            object.__setattr__(self, "n_bins", int(self.n_bins))
        if self.scheme not in SCHEMES:
            raise BinnedNameError(f"bin scheme: {self.scheme!r}; allowed: {', '.join(SCHEMES)}")
        if self.closure not in CLOSURES:
            raise BinnedNameError(f"bin closure: {self.closure!r}; allowed: {', '.join(CLOSURES)}")
        if self.bin_confidence not in BIN_CONFIDENCES:
            raise BinnedNameError(f"bin confidence: {self.bin_confidence!r}; allowed: {', '.join(BIN_CONFIDENCES)}")
        if self.estimator not in ESTIMATORS:
            raise BinnedNameError(f"estimator: {self.estimator!r}; allowed: {', '.join(ESTIMATORS)}")
        if self.scheme == "mass" and self.estimator == "debiased":
            raise BinnedNameError("estimator 'debiased' of equal-mass bins: confgrid debiases fixed-edge bins only; "
                                  f"use {binned_name(Binning(self.n_bins, 'width', 'left', 'mean', 'debiased'))!r} "
                                  f"or {binned_name(Binning(self.n_bins, 'mass', self.closure))!r}")
        if self.scheme == "mass" and self.closure in FLOAT_CLOSURES:
            raise BinnedNameError(f"bin closure {self.closure!r} of equal-mass bins: they have no fixed (float) edges; "
                                  f"use {binned_name(Binning(self.n_bins, 'mass', 'right'))!r} (a tie group on a "
                                  "quantile edge in the lower bin) or the left closure")
        if self.scheme == "mass" and self.bin_confidence == "midpoint":
            raise BinnedNameError("bin confidence 'midpoint' of equal-mass bins: their edges depend on the data, so "
                                  f"a midpoint is no declared value; use {binned_name(Binning(self.n_bins, 'mass', self.closure))!r} "
                                  "(the mean confidence of each bin)")
        if self.scheme == "centred" and self.closure in FLOAT_CLOSURES:
            raise BinnedNameError(f"bin closure {self.closure!r} of centred bins: their edges are built from "
                                  f"np.linspace's centres already (c -+ w/2); use {binned_name(Binning(self.n_bins, 'centred', 'left', self.bin_confidence))!r} "
                                  "or the right closure")
        if self.scheme == "centred" and self.n_bins == 1:
            raise BinnedNameError("bins: 1 centred bin has no width (centres k / (B - 1)); allowed: 2..1000")

    @property
    def name(self) -> str:
        """The metric name of this binning (:func:`binned_name`)."""
        return binned_name(self)

    def bins(self, default: int = 10) -> int:
        """``B``: :attr:`n_bins`, or ``default`` (the run's ECE bins) when None."""
        b = _check_n_bins(default) if self.n_bins is None else self.n_bins
        if self.scheme == "centred" and b < 2:
            raise ValueError(f"centred bins need B >= 2 (centres k / (B - 1)); got B = {b}")
        return b

    def edges(self, default: int = 10) -> np.ndarray:
        """The ``B + 1`` ascending bin edges, float64.

        ``width``: :func:`~confgrid.analysis.metrics.bin_edges` of the closure. ``centred``: Müller et al. 2026's
        float construction (module docstring; ``-0.05, 0.05, 0.15000000000000002, ...`` for ``B = 11``). ValueError
        for equal-mass bins (their edges depend on the data).
        """
        b = self.bins(default)
        if self.scheme == "mass":
            raise ValueError("equal-mass bins have no fixed edges")
        if self.scheme == "centred":
            centres, w = np.linspace(0.0, 1.0, b), 1.0 / (b - 1)
            return np.concatenate([centres - w / 2, [centres[-1] + w / 2]])
        return bin_edges(b, self.closure)

    def midpoints(self, default: int = 10) -> np.ndarray:
        """Bin midpoints, shape ``(B,)`` float64: ``(lo + hi) / 2`` of each bin's :meth:`edges` (``width``), the
        centres ``np.linspace(0, 1, B)`` (``centred``); ValueError for equal-mass bins."""
        b = self.bins(default)
        if self.scheme == "mass":
            raise ValueError("equal-mass bins have no fixed midpoints")
        if self.scheme == "centred":
            return np.linspace(0.0, 1.0, b)
        e = self.edges(b)
        return (e[:-1] + e[1:]) / 2

    def indices(self, confidence, default: int = 10) -> np.ndarray:
        """Bin index of each confidence, int64 in ``0 .. B-1``, shape of ``confidence`` (n,) (values in ``[0, 1]``).
        ``width``: :func:`~confgrid.analysis.metrics.bin_indices`; ``centred``: the bin whose ``[lo, hi)`` (left) or
        ``(lo, hi]`` (right) holds the value (one outside every bin, impossible for a value in ``[0, 1]``, joins the
        nearest). ValueError for equal-mass bins (their membership is by rank:
        :func:`~confgrid.analysis.estimators.equal_mass_bin_starts`)."""
        if self.scheme == "width":
            return bin_indices(confidence, self.bins(default), self.closure)
        edges = self.edges(default)
        side = "right" if self.closure in LEFT_CLOSURES else "left"
        idx = np.searchsorted(edges, np.asarray(confidence, dtype=np.float64), side=side) - 1
        return np.clip(idx, 0, edges.size - 2).astype(np.int64, copy=False)


def binned_name(binning: Binning) -> str:
    """The metric name of ``binning``: ``ece[_<B>][_equal_mass|_centred][_<closure>][_midpoint][_debiased]`` (the left
    closure, the mean bin confidence and the plug-in estimator are unsuffixed).

    Examples
    --------
    >>> binned_name(Binning()), binned_name(Binning(15, closure="left_float", bin_confidence="midpoint"))
    ('ece', 'ece_15_left_float_midpoint')
    >>> binned_name(Binning(None, "mass", "right")), binned_name(Binning(11, "centred", bin_confidence="midpoint"))
    ('ece_equal_mass_right', 'ece_11_centred_midpoint')
    """
    out = "ece" + ("" if binning.n_bins is None else f"_{binning.n_bins}") + _SCHEME_SUFFIX[binning.scheme]
    out += "" if binning.closure == "left" else f"_{binning.closure}"
    out += "_midpoint" if binning.bin_confidence == "midpoint" else ""
    return out + ("_debiased" if binning.estimator == "debiased" else "")


def parse_binned_name(name: str) -> Binning | None:
    """The :class:`Binning` a metric name spells, or None if the name is not in the binned-ECE grammar.

    Raises
    ------
    BinnedNameError
        The name is in the grammar but spells no estimator (e.g. ``ece_equal_mass_midpoint``, ``ece_0``, ``ece_007``),
        with the reason and, where there is one, the spelling that works.

    Examples
    --------
    >>> parse_binned_name("ece_15_right_float")
    Binning(n_bins=15, scheme='width', closure='right_float', bin_confidence='mean', estimator='plugin')
    >>> parse_binned_name("kde_ece") is None
    True
    """
    m = _NAME.match(name)
    if m is None:
        return None
    bins = m["bins"]
    if bins is not None and (bins.startswith("0") or not 1 <= int(bins) <= MAX_BINS):
        raise BinnedNameError(f"metric {name!r}: bins {bins!r}; allowed: an integer in 1..{MAX_BINS} without "
                              "leading zeros (ece_15)")
    scheme = {"_equal_mass": "mass", "_centred": "centred", None: "width"}[m["scheme"]]
    closure = (m["closure"] or "_left")[1:]
    try:
        return Binning(None if bins is None else int(bins), scheme, closure, "midpoint" if m["conf"] else "mean",
                       "debiased" if m["est"] else "plugin")
    except BinnedNameError as exc:
        raise BinnedNameError(f"metric {name!r}: {exc}") from None


_PARTS = {"equal_mass": 1, "centred": 1, "right_float": 2, "left_float": 2, "right": 2, "midpoint": 3,
          "debiased": 4}


def reordered_name(name: str) -> str | None:
    """The grammar's spelling of a binned name whose parts are in another order (``ece_debiased_right`` ->
    ``ece_right_debiased``), or None when it has other words or is not binned.

    Examples
    --------
    >>> reordered_name("ece_debiased_15"), reordered_name("ece_midpoint_right_float"), reordered_name("ece_foo")
    ('ece_15_debiased', 'ece_right_float_midpoint', None)
    """
    toks = name.split("_")
    if toks[0] != "ece" or len(toks) < 2:
        return None
    parts: list[tuple[int, str]] = []
    i = 1
    while i < len(toks):
        two = "_".join(toks[i:i + 2])
        if two in _PARTS:
            parts.append((_PARTS[two], two))
            i += 2
        elif toks[i] in _PARTS:
            parts.append((_PARTS[toks[i]], toks[i]))
            i += 1
        elif toks[i].isascii() and toks[i].isdigit():
            parts.append((0, toks[i]))
            i += 1
        else:
            return None
    if len({k for k, _ in parts}) != len(parts):
        return None
    out = "_".join(["ece", *(p for _, p in sorted(parts))])
    try:
        return out if out != name and parse_binned_name(out) is not None else None
    except BinnedNameError:
        return None


def binned_ece(confidence, correct, binning: Binning, n_bins: int = 10) -> float:
    """ECE under a declared :class:`Binning`: ``sum_b (n_b / n) |acc_b - conf_b|`` over the non-empty bins.

    ``conf_b`` is the mean confidence of bin ``b``'s answers (``bin_confidence="mean"``) or the bin's midpoint
    (``"midpoint"``: :meth:`Binning.midpoints`). Equal-mass bins: :func:`~confgrid.analysis.estimators.ece_equal_mass`.
    Reference: study 000, Appendix A (the mean); Müller et al. 2026, ``calculate_calibration_data.py`` in
    ``calibration_visualization/`` (the midpoint, centred bins).

    ``confidence`` and ``correct`` as in :mod:`confgrid.analysis.metrics` (shape ``(n_samples,)``, in ``[0, 1]``);
    ``n_bins``: the run's bins, used when ``binning.n_bins`` is None. Returns the ECE in ``[0, 1]``, **lower is
    better**; ``nan`` (with an :class:`~confgrid.analysis.metrics.UndefinedMetricWarning`) for no rows or a non-finite
    input. ValueError as the metrics, or for ``n_bins < 1``.

    Examples
    --------
    Two answers stated 0.62 and 0.68, one right: the mean confidence is 0.65, the midpoint of ``[0.6, 0.7)`` 0.65
    too; stated 0.61 and 0.63, the mean is 0.62 and the midpoint stays 0.65:

    >>> b = Binning(10, bin_confidence="midpoint")
    >>> round(binned_ece([0.61, 0.63], [1, 0], Binning(10)), 12), round(binned_ece([0.61, 0.63], [1, 0], b), 12)
    (0.12, 0.15)
    """
    if binning.scheme == "mass":
        return ece_equal_mass(confidence, correct, n_bins=binning.bins(n_bins), closure=binning.closure)
    if (prep := _prepare("ECE", confidence, correct)) is None:
        return float("nan")
    c, y = prep
    B = binning.bins(n_bins)
    b = binning.indices(c, B)
    n_b = np.bincount(b, minlength=B)
    sum_y = np.bincount(b, weights=y, minlength=B)
    nz = n_b > 0
    if binning.bin_confidence == "midpoint":
        conf_b = binning.midpoints(B)[nz]
    else:
        conf_b = np.bincount(b, weights=c, minlength=B)[nz] / n_b[nz]
    if binning.estimator == "debiased":
        return float(np.sum(n_b[nz] / c.size * debiased_terms(sum_y[nz] / n_b[nz], conf_b, n_b[nz])))
    return float(np.sum(n_b[nz] / c.size * np.abs(sum_y[nz] / n_b[nz] - conf_b)))


def debiased_terms(acc, conf, n_b):
    """Each bin's debiased calibration error, ``2 |acc_b - conf_b| - E|N(acc_b - conf_b, s_b^2)|``.

    Kumar, Liang & Ma 2019, "Verified Uncertainty Calibration" (NeurIPS), section 5, and their
    uncertainty-calibration 0.1.4 ``calibration/utils.py:369-391`` (``normal_debiased_ce``, p = 1): the plug-in
    ``|acc_b - conf_b|`` overestimates ``|E acc_b - conf_b|`` by about ``E|X| - |x|`` for ``X`` normal around the
    observed difference with the binomial variance ``s_b^2 = acc_b (1 - acc_b) / n_b``; the estimate subtracts
    that bias once. Their code draws 1,000 normal samples; this is the expectation in closed form,
    ``E|X| = s sqrt(2/pi) exp(-d^2 / 2s^2) + d (1 - 2 Phi(-d/s))`` (``|d|`` when ``s = 0``). A bin may come out
    negative (its error is within the noise), and so may the sum: the estimator is unbiased, not non-negative.

    Parameters
    ----------
    acc, conf : ndarray, any shape (the same)
        Per-bin accuracy (mean correctness, in ``[0, 1]``; graded correctness uses ``acc (1 - acc)`` as its
        variance bound) and bin confidence.
    n_b : ndarray, the same shape
        Answers per bin (> 0; counts of a resample may be any positive reals).

    Returns
    -------
    ndarray, the same shape, float64

    Examples
    --------
    A bin of 4 answers stated 0.9, 3 right: ``d = -0.15``, ``s = sqrt(0.75 * 0.25 / 4) = 0.2165``,
    ``E|X| = 0.1359 + 0.0767 = 0.2126``, so ``2 * 0.15 - 0.2126``:

    >>> round(float(debiased_terms(np.array([0.75]), np.array([0.9]), np.array([4.0]))[0]), 6)
    0.087376
    """
    acc, conf, n_b = (np.asarray(a, dtype=np.float64) for a in (acc, conf, n_b))
    d = acc - conf
    with np.errstate(invalid="ignore", divide="ignore"):
        s = np.sqrt(np.clip(acc * (1.0 - acc), 0.0, None) / n_b)
        z = np.where(s > 0, d / np.where(s > 0, s, 1.0), 0.0)
        folded = np.where(s > 0, s * np.sqrt(2.0 / np.pi) * np.exp(-0.5 * z * z) + d * (1.0 - 2.0 * ndtr(-z)),
                          np.abs(d))
    return 2.0 * np.abs(d) - folded



def edge_counts_of(confidence, n_bins: int = 10, scheme: str = "width") -> tuple[int, int]:
    """How many confidences lie exactly on an edge of ``n_bins`` bins of ``scheme``.

    ``width``: :func:`~confgrid.analysis.metrics.edge_counts` (edges ``k/B``, 0 and 1 included). ``centred``: the
    edges of :meth:`Binning.edges` inside ``[0, 1]`` (all inner: 0 and 1 are centres).

    Parameters
    ----------
    confidence : array-like of shape (n_samples,)
    scheme : {"width", "centred"}, default="width"

    Returns
    -------
    (on_edge, on_inner_edge) : tuple of int

    Examples
    --------
    >>> edge_counts_of([0.0, 0.05, 0.1, 0.15000000000000002, 1.0], 11, "centred")
    (2, 2)
    """
    if scheme == "width":
        return edge_counts(confidence, n_bins)
    if scheme != "centred":
        raise ValueError(f"scheme: {scheme!r}; edges are counted for width and centred bins")
    c = np.asarray(confidence, dtype=np.float64)
    on = int(np.isin(c, Binning(int(n_bins), "centred").edges()).sum())
    return on, on
