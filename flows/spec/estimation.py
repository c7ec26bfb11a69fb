"""The grid's estimation sections: how the signals become estimates (``metrics``, ``bootstrap``, ``verdicts``).

Which metrics are computed (the names, the binned-ECE axes and published conventions: analysis/binning.py,
analysis/conventions.py), the paired bootstrap and its interval method (analysis/intervals.py), and the thresholds of
the robustness verdicts (analysis/verdicts.py). They change numbers only, never a model call.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, StrictBool, field_validator, model_validator

from confgrid.analysis.binning import parse_binned_name, reordered_name
from confgrid.analysis.conventions import convention_metric
from confgrid.analysis.registry import GRAMMAR, METRICS, check_bins, expand_binned, metric_sort_key
from confgrid.analysis.verdicts import VerdictRule
from confgrid.flows.spec.base import LABEL_PATTERN, Conventions, _Spec

__all__ = ["MetricsSpec", "BootstrapSpec", "VerdictSpec"]


class MetricsSpec(_Spec):
    """Metrics computed for every signal."""

    names: tuple[str, ...] = Field(
        ("ece", "auroc", "aurc"), min_length=1,
        description="Metric names: the registered ones (confgrid analyze --help lists them) and every binned ECE "
        "of the grammar ece[_<B>][_equal_mass|_centred][_right|_right_float|_left_float][_midpoint]. A name that "
        "spells its closure or bin confidence (ece_right, ece_15_midpoint) or a convention (ece_study002) is "
        "computed exactly as named; an unsuffixed binned name (ece, ece_15, ece_equal_mass) takes each "
        "ece_closure and ece_bin_confidence.")
    ece_bins: int = Field(10, ge=1, le=1000, description="The bins of the binned names without their own count (ece, "
                          "ece_equal_mass, ece_centred; ece_<B> has its own): for ece, B equal-width bins "
                          "[k/B, (k+1)/B), the last one closed.")
    ece_closure: tuple[Literal["left", "right", "right_float", "left_float"], ...] = Field(
        ("left",), min_length=1,
        description="Bin closures of every unsuffixed binned metric named (ece, ece_<B>, ece_equal_mass), an axis: "
        "left (the default, [k/B, (k+1)/B), unchanged), right ((k/B, (k+1)/B], R's cut, as study 002), "
        "right_float (right-closed on np.linspace's float edges: scikit-learn's calibration_curve, and what "
        "reproduces study 002's Table 1) and left_float (left-closed on np.linspace's float edges: np.digitize). "
        "[left, right] adds ece_right beside ece (and ece_<B>_right ...), on the same resamples, and the "
        "results say where the two differ (results/closure.csv).")
    ece_bin_confidence: tuple[Literal["mean", "midpoint"], ...] = Field(
        ("mean",), min_length=1,
        description="What stands for a bin's confidence in every unsuffixed fixed-edge binned metric (equal-width "
        "and centred bins), an axis: "
        "mean (the default: the mean confidence of the bin's answers) or midpoint (the bin's centre, as Müller "
        "et al. 2026). [mean, midpoint] adds ece_midpoint beside ece.")
    ece_conventions: Conventions = Field(
        (), description="Published ECE conventions to compute beside names, each as the metric ece_<name> "
        "(study002, sklearn, muller2026, ...; docs 'ECE conventions' lists them with their sources).")
    group_by: tuple[str, ...] = Field(("category",), description="Item metadata fields whose values become grouping "
                                      "rows of results/calibration.csv (per-category tables, study 003 section 5.2).")
    hard_easy: StrictBool = Field(False, description="Write results/hard_easy.csv and hard_easy_bins.csv: the slope "
                                  "of overconfidence on difficulty with a paired bootstrap interval per cell (study "
                                  "002; on by default for grids with a lifeeval dataset).")
    calibration_extras: tuple[Literal["smece"], ...] = Field(
        (), description="Point metrics of results/calibration.csv beyond accuracy, Brier, gap and ECE: smece "
        "(relplot's smECE; about 0.4 s per small group, so off by default).")
    pairs: tuple[tuple[str, str], ...] = Field(
        (), description="Paired gaps beyond every signal against verbalized: [signal_a, signal_b] pairs of signal "
        "names (verbalized, token_<context>[__<aggregation>], a method id, <id>__majority, a capability "
        "estimator such as <id>_k<k> or <id>+isotonic), each gap = "
        "metric(signal_a) - metric(signal_b) on the items both have, on the unit's resamples.")

    @field_validator("names")
    @classmethod
    def _known_metrics(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        for name in v:  # a binned name that spells nothing says why (BinnedNameError, a ValueError)
            if name != name.strip() or name != name.lower():
                raise ValueError(f"metric {name!r}: names are lower case, without spaces: {name.strip().lower()!r}")
            if parse_binned_name(name) is None and name not in METRICS:
                hint = reordered_name(name)
                raise ValueError(f"unknown metric {name!r}; did you mean {hint!r}? (the grammar's order: {GRAMMAR})"
                                 if hint else f"unknown metric {name!r}; allowed: "
                                 f"{', '.join(sorted(METRICS, key=metric_sort_key))}, and every binned ECE of the "
                                 f"grammar {GRAMMAR}")
        if len(set(v)) != len(v):
            raise ValueError(f"metric names must be distinct: {sorted({x for x in v if v.count(x) > 1})} repeated")
        return v

    @field_validator("ece_closure", "ece_bin_confidence")
    @classmethod
    def _unique_axis(cls, v: tuple[str, ...], info) -> tuple[str, ...]:
        if len(set(v)) != len(v):
            raise ValueError(f"{info.field_name} lists a value twice: {list(v)}")
        return v

    @model_validator(mode="after")
    def _expands(self) -> "MetricsSpec":
        # e.g. ece_equal_mass under the midpoint bin confidence, ece_centred with ece_bins: 1 (ValueError, raised
        # as the section's error)
        check_bins(self.evaluated, self.ece_bins)
        return self

    @property
    def evaluated(self) -> list[str]:
        """The metric names the evaluator computes: :attr:`names`, every unsuffixed binned metric under each closure
        of :attr:`ece_closure` and bin confidence of :attr:`ece_bin_confidence`
        (:func:`confgrid.analysis.registry.expand_binned`), then the metric of each convention."""
        names = expand_binned(self.names, self.ece_closure, self.ece_bin_confidence)
        return list(dict.fromkeys([*names, *(convention_metric(c) for c in self.ece_conventions)]))


class BootstrapSpec(_Spec):
    """The paired bootstrap (study 000, Appendix A)."""

    resamples: int = Field(10_000, ge=1, le=1_000_000, description="Number of paired resamples.")
    seed: int = Field(0, ge=0, description="Base seed; each setting's seed is derived from (model, dataset, seed).")
    level: float = Field(0.95, gt=0.0, lt=1.0, description="Interval level, in (0, 1).")
    interval: Literal["percentile", "basic", "bc", "jeffreys"] = Field(
        "percentile", description="Interval method of results/metrics, gaps and shifts (and so of verdicts and early "
        "stopping): percentile (the default, unchanged), basic (reverse percentile), bc (bias-corrected "
        "percentile) or jeffreys (binned ECEs: each bin's accuracy drawn from its Jeffreys posterior on every "
        "resample, honest at 0% or 100% right; other metrics keep percentile); analysis/intervals.py. benchmarks/coverage.py measures how often each contains the population "
        "value (docs 'How far to trust an interval').")
    cluster: str | None = Field(
        None, description="Cluster bootstrap: an item metadata field (e.g. category) or item_id; the bootstrap "
        "resamples its distinct values with all their items (analysis/clusters.py). None: items are resampled.")

    @field_validator("cluster")
    @classmethod
    def _cluster_field(cls, v: str | None) -> str | None:
        # the per-answer columns of the signal table vary within an item: no cluster of items
        per_answer = ("signal", "context", "aggregation", "confidence", "correct", "replaced")
        if v is not None and (v in per_answer or not re.match(LABEL_PATTERN, v)):
            raise ValueError(f"{v!r} is not an item-level field; allowed: an item metadata field of the datasets "
                             "(e.g. 'category', 'subject'), 'item_id', or null for the item-level bootstrap")
        return v


class VerdictSpec(_Spec):
    """The thresholds of the robustness verdicts (analysis/verdicts.py ``VerdictRule``; docs "Is my conclusion
    robust?"). With p the share of settings where the majority side is better by point, r the share resolved in its
    favour and q the share resolved against it: robust if p >= robust_point_share, r >= robust_resolved_share and q
    = 0 over at least robust_min_settings settings; fragile if q > 0 or p < fragile_point_share; unresolved otherwise.
    """

    robust_point_share: float = Field(0.9, ge=0.0, le=1.0, description="Least share of settings where the "
                                      "majority side is better by point for 'robust'.")
    robust_resolved_share: float = Field(0.5, ge=0.0, le=1.0, description="Least share of settings resolved in "
                                         "the majority side's favour for 'robust'.")
    fragile_point_share: float = Field(0.75, ge=0.0, le=1.0, description="Below this share of settings favouring "
                                       "the majority side by point, the conclusion is 'fragile'.")
    robust_min_settings: int = Field(3, ge=1, description="Fewer settings than this: never 'robust' (one or two "
                                     "settings say nothing about a protocol's sensitivity).")

    @model_validator(mode="after")
    def _ordered(self) -> "VerdictSpec":
        self.rule()
        return self

    def rule(self):
        """The :class:`~confgrid.analysis.verdicts.VerdictRule` of these thresholds (ValueError if disordered)."""
        return VerdictRule(self.robust_point_share, self.robust_resolved_share, self.fragile_point_share,
                           self.robust_min_settings)
