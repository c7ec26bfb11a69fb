"""The metric registry: every metric a grid spec or ``confgrid analyze`` can name.

One place registers every built-in metric, the base metrics of
:mod:`confgrid.analysis.metrics` and the alternative estimators and signed
summaries of :mod:`confgrid.analysis.estimators`. The imports run one way::

    metrics  <-  estimators  <-  registry  <-  bootstrap, compare, summary, flows

``metrics`` imports no other analysis module, ``estimators`` imports
``metrics`` only, and this module imports both. (Before, ``metrics`` defined
the registry and imported ``estimators`` at its bottom so that the
estimators could register themselves, while ``estimators`` imported helpers
from ``metrics``: a cycle.) The registry class is the generic
:class:`confgrid.registry.Registry`, shared with the protocol registries.

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

The binned estimators carry their bin closure (:attr:`MetricInfo.closure`,
:data:`confgrid.analysis.metrics.CLOSURES`): the unsuffixed names are
left-closed, as they always were; ``<name>_right`` and ``<name>_right_float``
are the other closures, registered for every binned name
(:func:`closure_variant`). Being metrics of the same unit, both closures are
computed on the same resamples, so their values and gaps are paired.

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
from dataclasses import dataclass
from typing import Callable

from confgrid.registry import Registry, UnknownNameError

from . import estimators as _E
from . import metrics as _M

__all__ = ["METRICS", "MetricInfo", "UnknownMetricError", "get_metric", "register_metric", "closure_variant",
           "binned_metrics", "with_closures"]


@dataclass(frozen=True)
class MetricInfo:
    """A registered metric.

    Attributes
    ----------
    name : str
        Registry key (lower case), e.g. ``"ece"``.
    func : callable
        ``func(confidence, correct) -> float`` (ECE also takes ``n_bins``).
    lower_is_better : bool
        Direction of the metric.
    description : str
        One line for tables and reports.
    signed : bool, default=False
        True for a signed summary (e.g. ``calibration_gap``) whose best
        value is 0; ``lower_is_better`` then refers to its absolute value.
    closure : str or None, default=None
        The bin closure of a binned estimator (``"left"``, ``"right"``,
        ``"right_float"``); None for a metric without bins.
    family : str, default=""
        The left-closed name of a binned estimator (``ece_15`` for
        ``ece_15_right``); empty for a metric without bins.
    """

    name: str
    func: Callable[..., float]
    lower_is_better: bool
    description: str
    signed: bool = False
    closure: str | None = None
    family: str = ""

    @property
    def takes_n_bins(self) -> bool:
        """Whether ``func`` accepts an ``n_bins`` keyword (``ece``, ``ece_equal_mass``)."""
        try:
            return "n_bins" in inspect.signature(self.func).parameters
        except (TypeError, ValueError):  # pragma: no cover - builtins
            return False


#: Registered metrics, by name (kind ``"metric"``).
METRICS: Registry[MetricInfo] = Registry("metric", value_type=MetricInfo)

#: The error of an unknown metric name; the same class as every registry's
#: :class:`~confgrid.registry.UnknownNameError` (a ``KeyError`` and a ``ValueError``).
UnknownMetricError = UnknownNameError


def register_metric(info: MetricInfo) -> MetricInfo:
    """Add ``info`` to :data:`METRICS` under ``info.name``.

    Parameters
    ----------
    info : MetricInfo

    Returns
    -------
    MetricInfo
        ``info`` itself.

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
    """Look up a registered metric by name.

    Parameters
    ----------
    name : str

    Returns
    -------
    MetricInfo

    Raises
    ------
    UnknownMetricError
        (:class:`~confgrid.registry.UnknownNameError`, a subclass of both
        ``KeyError`` and ``ValueError``) listing the registered names when
        ``name`` is unknown.

    Examples
    --------
    >>> get_metric("auroc").lower_is_better
    False
    """
    return METRICS.get(name)


def closure_variant(name: str, closure: str) -> str:
    """The registered name of binned metric ``name``'s family under ``closure``.

    Examples
    --------
    >>> closure_variant("ece_15", "right"), closure_variant("ece_right", "left")
    ('ece_15_right', 'ece')
    >>> closure_variant("ece_equal_mass", "right_float")  # equal-mass bins have no fixed edges
    'ece_equal_mass_right'

    Raises
    ------
    ValueError
        ``name`` has no bins (naming it and the binned metrics), or an unknown closure.
    """
    info = get_metric(name)
    if info.closure is None:
        raise ValueError(f"metric {name!r} has no bins, so no closure; binned metrics: "
                         f"{', '.join(binned_metrics())}")
    name = _E.closure_name(info.family, _M.check_closure(closure))
    if name not in METRICS and closure == "right_float":  # no fixed edges (equal mass): the right closure
        name = _E.closure_name(info.family, "right")
    return get_metric(name).name


def with_closures(names, closures) -> list[str]:
    """The metric names evaluated when the binned ones are taken under each of ``closures``.

    Every binned name (any closure) is replaced by its family's name under each closure, in the order
    given; other names stay. Duplicates are dropped, the first place kept.

    Examples
    --------
    >>> with_closures(["ece", "auroc", "ece_15"], ["left", "right"])
    ['ece', 'ece_right', 'auroc', 'ece_15', 'ece_15_right']
    >>> with_closures(["ece", "brier"], ["right"])
    ['ece_right', 'brier']

    Raises
    ------
    ValueError
        An unknown closure (naming it and the choices), or no closure at all.
    """
    closures = [_M.check_closure(c) for c in closures]
    if not closures:
        raise ValueError(f"name at least one closure; choose from {', '.join(_M.CLOSURES)}")
    out: list[str] = []
    for n in names:
        out += [closure_variant(n, c) for c in closures] if get_metric(n).closure is not None else [n]
    return list(dict.fromkeys(out))


def binned_metrics(closure: str = "left") -> list[str]:
    """Registered binned metrics of one closure, sorted (``ece``, ``ece_10``, ..., ``ece_equal_mass``)."""
    return sorted(n for n in METRICS if METRICS.get(n).closure == closure)


def _closed(func, closure: str, name: str):
    """``func`` with its bin closure fixed (``n_bins`` still free)."""

    def f(confidence, correct, n_bins: int = 10) -> float:
        return func(confidence, correct, n_bins=n_bins, closure=closure)

    f.__name__ = f.__qualname__ = name
    f.__doc__ = f"``{func.__name__}(confidence, correct, n_bins, closure={closure!r})``; lower is better."
    return f


def _binned() -> list[MetricInfo]:
    kinds = {"right": "right-closed bins", "right_float": "right-closed on np.linspace edges"}
    out = [MetricInfo("ece", _M.ece, True, "expected calibration error, equal-width bins", closure="left",
                      family="ece"),
           MetricInfo("ece_equal_mass", _E.ece_equal_mass, True, "ECE, equal-mass bins", closure="left",
                      family="ece_equal_mass")]
    out += [MetricInfo(f"ece_{b}", f, True, f"ECE, {b} equal-width bins", closure="left", family=f"ece_{b}")
            for b, f in _E.FIXED_BIN_ECE.items()]
    for c, what in kinds.items():
        out.append(MetricInfo(_E.closure_name("ece", c), _closed(_M.ece, c, _E.closure_name("ece", c)), True,
                              f"expected calibration error, equal-width {what}", closure=c, family="ece"))
        out += [MetricInfo(f.__name__, f, True, f"ECE, {b} equal-width {what}", closure=c, family=f"ece_{b}")
                for (b, cc), f in _E.CLOSED_BIN_ECE.items() if cc == c]
    out.append(MetricInfo("ece_equal_mass_right", _closed(_E.ece_equal_mass, "right", "ece_equal_mass_right"),
                          True, "ECE, equal-mass bins, a tie group on a quantile edge in the lower bin",
                          closure="right", family="ece_equal_mass"))
    return out


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
