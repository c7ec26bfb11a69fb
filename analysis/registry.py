"""The metric registry: every metric a grid spec or ``confgrid analyze`` can name.

One place registers every built-in metric, the base metrics of :mod:`confgrid.analysis.metrics` and the alternative
estimators and signed summaries of :mod:`confgrid.analysis.estimators`. The imports run one way::

    metrics  <-  estimators  <-  registry  <-  bootstrap, compare, summary, flows

The registry class is the generic :class:`confgrid.registry.Registry`, shared with the protocol registries.

=================== ============= ================================================
name                direction     function
=================== ============= ================================================
``ece``             lower better  :func:`metrics.ece` (equal-width bins, ``n_bins``)
``auroc``           higher better :func:`metrics.auroc`
``aurc``            lower better  :func:`metrics.aurc`
``brier``           lower better  :func:`metrics.brier`
``spearman``        higher better :func:`metrics.spearman` (rank correlation; study 004 Table 12)
``ece_equal_mass``  lower better  :func:`estimators.ece_equal_mass` (``n_bins``)
``kde_ece``         lower better  :func:`estimators.kde_ece`
``ks_ece``          lower better  :func:`estimators.ks_ece`
``smoothed_ece``    lower better  :func:`estimators.smoothed_ece`
``smece``           lower better  :func:`estimators.smece` (needs ``relplot``)
``calibration_gap`` signed, 0     :func:`estimators.calibration_gap`
``overconfidence``  signed, 0     :func:`estimators.overconfidence`
``ece_<B>``         lower better  ``ece`` with B = 5, 10, 15, 20, 30, 50 bins
``ece_right``       lower better  ``ece``, right-closed bins ``(k/B, (k+1)/B]``
``ece_right_float`` lower better  ``ece``, right-closed on ``np.linspace`` edges
``ece_<B>_right``   lower better  ``ece_<B>`` right-closed (also ``_right_float``)
``ece_equal_mass_right`` lower    ``ece_equal_mass``, ties on a quantile edge below
=================== ============= ================================================

Binned estimators carry their bin closure (:attr:`MetricInfo.closure`, :data:`~confgrid.analysis.metrics.CLOSURES`;
unsuffixed names are left-closed, :func:`closure_variant`); the closures of a unit share its resamples, so their
values and gaps are paired.

Examples
--------
>>> get_metric("aurc").lower_is_better
True
>>> get_metric("calibration_gap").signed
True
>>> get_metric("f1")  # doctest: +ELLIPSIS
Traceback (most recent call last):
    ...
confgrid.registry.UnknownNameError: unknown metric 'f1'; allowed: aurc, auroc, brier, calibration_gap, ece, ...
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, replace
from typing import Callable

from confgrid.registry import Registry, UnknownNameError

from . import estimators as _E
from . import metrics as _M
from .binning import BIN_CONFIDENCES, Binning, BinnedNameError, binned_ece, parse_binned_name, reordered_name
from .conventions import CONVENTIONS

__all__ = ["METRICS", "MetricInfo", "MetricRegistry", "UnknownMetricError", "get_metric", "register_metric",
           "closure_variant", "binned_metrics", "expand_binned", "binned_info", "GRAMMAR",
           "check_bins", "metric_sort_key"]


@dataclass(frozen=True)
class MetricInfo:
    """A registered metric.

    Attributes
    ----------
    name : str
        Registry key (lower case), e.g. ``"ece"``.
    func : callable
        ``func(confidence, correct) -> float`` (a binned ECE also takes ``n_bins``, the run's bins).
    lower_is_better : bool
    description : str
        One line for tables and reports.
    signed : bool, default=False
        True for a signed summary (e.g. ``calibration_gap``) whose best value is 0; ``lower_is_better`` then refers
        to its absolute value.
    binning : Binning or None, default=None
        The declared parts of a binned ECE (:class:`~confgrid.analysis.binning.Binning`); None: no bins.
    convention : str, default=""
        The published convention a name like ``ece_muller2026`` stands for (analysis/conventions.py); empty for the
        names of the grammar (``ece_15_right``).
    """

    name: str
    func: Callable[..., float]
    lower_is_better: bool
    description: str
    signed: bool = False
    binning: Binning | None = None
    convention: str = ""

    @property
    def closure(self) -> str | None:
        """The bin closure of a binned estimator (``"left"``, ``"right"``, ...); None without bins."""
        return None if self.binning is None else self.binning.closure

    @property
    def family(self) -> str:
        """The name of a binned estimator with the left closure and mean bin confidence (``ece_15`` for
        ``ece_15_right_midpoint``; ``ece`` for a convention); empty for a metric without bins."""
        if self.binning is None:
            return ""
        if self.convention:
            return "ece"
        return replace(self.binning, closure="left", bin_confidence="mean").name

    @property
    def takes_n_bins(self) -> bool:
        """Whether ``func`` uses an ``n_bins`` keyword, the run's bins (``ece``, ``ece_equal_mass``; not ``ece_15``)."""
        if self.binning is not None:
            return self.binning.n_bins is None
        try:
            return "n_bins" in inspect.signature(self.func).parameters
        except (TypeError, ValueError):  # pragma: no cover - builtins
            return False


class MetricRegistry(Registry[MetricInfo]):
    """The metric registry: the listed metrics, and every name of the binned-ECE grammar on demand.

    Iteration lists the registered metrics (the ``--metrics`` choices printed in full); lookup and ``in`` also accept
    every name of :func:`~confgrid.analysis.binning.parse_binned_name`'s grammar (``ece_12_left_float_midpoint``),
    whose :class:`MetricInfo` is built once and kept apart from the listed ones. A name in the grammar that spells no
    estimator raises :class:`~confgrid.analysis.binning.BinnedNameError` with the reason and the spelling that works.
    """

    def __init__(self) -> None:
        super().__init__("metric", value_type=MetricInfo)
        self._spelled: dict[str, MetricInfo] = {}

    def get(self, name: str) -> MetricInfo:
        if name in self._entries or not isinstance(name, str):
            return super().get(name)
        if name not in self._spelled:
            binning = parse_binned_name(name)  # BinnedNameError: a name of the grammar that spells nothing
            if binning is None:
                raise self._unknown(name)
            self._spelled[name] = binned_info(binning)
        return self._spelled[name]

    def _unknown(self, name):
        err = super()._unknown(name)
        hint = reordered_name(name) if isinstance(name, str) else None
        return UnknownNameError((f"unknown metric {name!r}; did you mean {hint!r}? (the grammar's order: {GRAMMAR})"
                                 if hint else f"{err}; and every binned ECE of the grammar {GRAMMAR}"),
                                kind=err.kind, value=err.value, allowed=err.allowed)

    def __contains__(self, name: object) -> bool:
        try:
            self.get(name)  # type: ignore[arg-type]
        except (UnknownNameError, BinnedNameError):
            return False
        return True


def metric_sort_key(name: str) -> tuple:
    """Sort key of metric names with numbers in numeric order (``ece_5`` before ``ece_10``)."""
    return tuple((0, int(t), "") if t.isdigit() else (1, 0, t) for t in name.split("_"))


#: the binned-ECE names, as the ``--metrics`` help and the errors print them
GRAMMAR = "ece[_<B>][_equal_mass|_centred][_right|_right_float|_left_float][_midpoint][_debiased]"

#: Registered metrics, by name (kind ``"metric"``).
METRICS: MetricRegistry = MetricRegistry()

#: The error of an unknown metric name; the same class as every registry's
#: :class:`~confgrid.registry.UnknownNameError` (a ``KeyError`` and a ``ValueError``).
UnknownMetricError = UnknownNameError


def register_metric(info: MetricInfo) -> MetricInfo:
    """Add ``info`` to :data:`METRICS` under ``info.name`` and return it.

    Raises
    ------
    TypeError
        If ``info`` is not a :class:`MetricInfo`.
    ValueError
        If a metric with that name is already registered.
    """
    if not isinstance(info, MetricInfo):
        raise TypeError(f"register_metric: expected a MetricInfo, got {type(info).__name__}")
    return METRICS.register(info.name, info)


def get_metric(name: str) -> MetricInfo:
    """Look up a metric by name: a registered one, or a name of the binned-ECE grammar (:data:`GRAMMAR`).

    Raises
    ------
    UnknownMetricError
        (:class:`~confgrid.registry.UnknownNameError`, a subclass of both ``KeyError`` and ``ValueError``) listing the
        registered names when ``name`` is unknown.
    BinnedNameError
        (a ``ValueError``) a name of the grammar that spells no estimator (``ece_equal_mass_midpoint``), with the
        spelling that works.

    Examples
    --------
    >>> get_metric("auroc").lower_is_better
    False
    >>> get_metric("ece_12_left_float_midpoint").binning
    Binning(n_bins=12, scheme='width', closure='left_float', bin_confidence='midpoint', estimator='plugin')
    """
    return METRICS.get(name)


def closure_variant(name: str, closure: str) -> str:
    """The name of binned metric ``name`` under ``closure`` (bins, scheme and bin confidence kept).

    Examples
    --------
    >>> closure_variant("ece_15", "right"), closure_variant("ece_right", "left")
    ('ece_15_right', 'ece')
    >>> closure_variant("ece_10_midpoint", "left_float")
    'ece_10_left_float_midpoint'

    Raises
    ------
    ValueError
        ``name`` has no bins (naming it and the binned metrics), names a convention (which fixes its closure), an
        unknown closure, or a float closure of equal-mass or centred bins (which have no ``np.linspace`` edges; the
        message names the closure that exists).
    """
    info = get_metric(name)
    if info.binning is None:
        raise ValueError(f"metric {name!r} has no bins, so no closure; binned metrics: "
                         f"{', '.join(binned_metrics())} and {GRAMMAR}")
    if info.convention:
        raise ValueError(f"metric {name!r} is the {info.convention} convention, which fixes its bin closure "
                         f"({info.binning.closure}); name {info.binning.name!r} with another closure suffix instead")
    _M.check_closure(closure)
    if info.binning.scheme != "width" and closure in _M.FLOAT_CLOSURES:
        what = "equal-mass bins have no fixed edges" if info.binning.scheme == "mass" else \
            "centred bins have no np.linspace edges"
        raise ValueError(f"metric {name!r} under closure {closure!r}: {what}, so no float closure; name "
                         f"{replace(info.binning, closure=closure.removesuffix('_float')).name!r} for the "
                         f"{closure.removesuffix('_float')} closure, or leave {name!r} out of this axis")
    return replace(info.binning, closure=closure).name


def expand_binned(names, closures=("left",), bin_confidences=("mean",)) -> list[str]:
    """The metric names evaluated when the unsuffixed binned names are taken under each closure and bin confidence.

    A binned name with neither a closure, a bin-confidence nor an estimator suffix (``ece``, ``ece_15``,
    ``ece_equal_mass``) stands for its family: it is replaced by the family under each of ``closures`` and
    ``bin_confidences`` (in that order, closures outermost). A name that spells its closure, bin confidence or
    estimator (``ece_right``, ``ece_15_midpoint``, ``ece_debiased``) or a convention (``ece_study002``) is computed
    exactly as named, whatever the axes; other names stay. Duplicates are dropped, the first place kept. With the
    defaults every name is kept.

    Examples
    --------
    >>> expand_binned(["ece", "auroc", "ece_15"], ["left", "right"])
    ['ece', 'ece_right', 'auroc', 'ece_15', 'ece_15_right']
    >>> expand_binned(["ece_right", "brier"])  # a name with its closure is computed as named
    ['ece_right', 'brier']
    >>> expand_binned(["ece"], ["left"], ["mean", "midpoint"])
    ['ece', 'ece_midpoint']

    Raises
    ------
    ValueError
        An unknown or repeated closure or bin confidence, none at all, or a family without midpoints (equal mass).
    """
    closures = [_M.check_closure(c) for c in closures]
    confs = list(bin_confidences)
    for label, got, allowed in (("closure", closures, _M.CLOSURES), ("bin confidence", confs, BIN_CONFIDENCES)):
        bad = [c for c in got if c not in allowed]
        if bad or not got or len(set(got)) != len(got):
            raise ValueError(f"{label}s {got!r}: give one or more of {', '.join(allowed)}, each once")
    out: list[str] = []
    for n in names:
        info = get_metric(n)
        b = info.binning
        if b is None or info.convention or b.closure != "left" or b.bin_confidence != "mean" or b.estimator != "plugin":
            out.append(info.name)
            continue
        for c in closures:
            for conf in confs:
                if b.scheme == "mass" and conf == "midpoint":
                    raise ValueError(f"metric {n!r} with bin confidence 'midpoint': equal-mass bins have no fixed "
                                     "midpoints; ask for the midpoint of the fixed-edge names only (e.g. "
                                     "the metrics ece, ece_midpoint and ece_equal_mass)")
                out.append(get_metric(closure_variant(replace(b, bin_confidence=conf).name, c)).name)
    return list(dict.fromkeys(out))


def check_bins(names, n_bins: int) -> None:
    """Raise ``ValueError`` if a binned metric that takes the run's bins (``ece``, ``ece_equal_mass``,
    ``ece_centred``) cannot have ``n_bins`` of them (centred bins need 2 or more)."""
    for n in names:
        b = get_metric(n).binning
        if b is not None and b.n_bins is None:
            try:
                b.bins(n_bins)
            except ValueError as exc:
                raise ValueError(f"metric {n!r} takes the run's ECE bins, {n_bins}: {exc}") from None


def binned_metrics(closure: str = "left") -> list[str]:
    """Listed binned metrics of one closure, no conventions, sorted (``ece``, ``ece_10``, ..., ``ece_equal_mass``)."""
    return sorted(n for n in METRICS if METRICS.get(n).closure == closure and not METRICS.get(n).convention)


def binned_info(binning: Binning, name: str | None = None, convention: str = "", description: str = "") -> MetricInfo:
    """The :class:`MetricInfo` of a binned ECE: its point function is :func:`~confgrid.analysis.binning.binned_ece`
    under ``binning`` (``n_bins``: the run's bins, used when ``binning.n_bins`` is None)."""
    name = name or binning.name

    def f(confidence, correct, n_bins: int = 10) -> float:
        return binned_ece(confidence, correct, binning, n_bins)

    f.__name__ = f.__qualname__ = name
    f.__doc__ = f"``binned_ece(confidence, correct, {binning!r}, n_bins)``; lower is better."
    return MetricInfo(name, f, True, description or describe(binning), binning=binning, convention=convention)


def describe(binning: Binning) -> str:
    """One line for tables: ``ECE, 15 equal-width bins, left-closed on np.linspace edges, bin midpoints``."""
    bins = "the run's" if binning.n_bins is None else str(binning.n_bins)
    scheme = {"width": "equal-width", "mass": "equal-mass", "centred": "centred"}[binning.scheme]
    closure = {"left": "", "right": ", right-closed", "right_float": ", right-closed on np.linspace edges",
               "left_float": ", left-closed on np.linspace edges"}[binning.closure]
    conf = ", bin midpoints" if binning.bin_confidence == "midpoint" else ""
    return f"ECE, {bins} {scheme} bins{closure}{conf}"


def _binned() -> list[MetricInfo]:
    """The listed binned metrics: ``ece``, ``ece_<B>`` (B of study 000) and ``ece_equal_mass``, under the closures
    left, right and right_float (the equal-mass bins: left and right), then the published conventions
    (analysis/conventions.py). Every other binned name is spelled by the grammar (``ece_left_float``)."""
    out = []
    for c in ("left", "right", "right_float"):
        out += [binned_info(Binning(b, "width", c)) for b in (None, *_E.ECE_BIN_COUNTS)]
        if c in ("left", "right"):
            out.append(binned_info(Binning(None, "mass", c)))
    out[0] = replace(out[0], description="expected calibration error, equal-width bins")
    return out + [binned_info(cv.binning, cv.metric, cv.name, cv.description) for _, cv in CONVENTIONS.items()]


def _builtins() -> list[MetricInfo]:
    infos = [
        MetricInfo("auroc", _M.auroc, False, "AUROC of confidence for correctness"),
        MetricInfo("aurc", _M.aurc, True, "area under the risk-coverage curve"),
        MetricInfo("brier", _M.brier, True, "Brier score"),
        MetricInfo("spearman", _M.spearman, False, "Spearman's rank correlation of confidence with the target"),
        MetricInfo("kde_ece", _E.kde_ece, True, "KDE ECE (Gaussian kernel regression, h=0.05)"),
        MetricInfo("ks_ece", _E.ks_ece, True, "KS calibration error (Gupta et al. 2021)"),
        MetricInfo("smoothed_ece", _E.smoothed_ece, True, "smoothed ECE (plain Gaussian kernel, Silverman)"),
        MetricInfo("smece", _E.smece, True, "smECE (Blasiok & Nakkiran 2024, relplot)"),
        MetricInfo("calibration_gap", _E.calibration_gap, True,
                   "signed calibration gap: mean confidence - accuracy (0 is best)", signed=True),
        MetricInfo("overconfidence", _E.overconfidence, True,
                   "overconfidence (study 002): mean confidence - accuracy; same value as calibration_gap",
                   signed=True),
    ]
    return _binned() + infos


for _info in _builtins():
    register_metric(_info)
del _info
