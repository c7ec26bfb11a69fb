"""Published ECE conventions, one name each (docs/reproductions.md).

A convention is a :class:`~confgrid.analysis.binning.Binning` (bins, scheme, closure, bin confidence) that a paper or
a library computes, with the file and line it was read from. Each is registered as the metric ``ece_<name>``
(analysis/registry.py), asked for with ``confgrid analyze --ece-convention NAME[,NAME]`` or a grid's
``metrics.ece_conventions: [NAME, ...]``, and equals the grammar name of its binning (``ece_muller2026`` is
``ece_15_left_float_midpoint``) on every input (tests/analysis/test_conventions.py checks each against its project's
formula, re-implemented from the source).
"""

from __future__ import annotations

from dataclasses import dataclass

from confgrid.registry import Registry

from .binning import Binning

__all__ = ["Convention", "CONVENTIONS", "get_convention", "convention_metric"]


@dataclass(frozen=True)
class Convention:
    """One published way of computing a binned ECE.

    Attributes
    ----------
    name : str
        The convention's name (``muller2026``); its metric is ``ece_<name>`` (:attr:`metric`).
    binning : Binning
    source : str
        Repository, file and line(s) the rule was read from, and the commit.
    description : str
        One line for tables (``ECE, Müller et al. 2026: 15 bins ...``).
    reproduces : str
        The published numbers this name reproduces, and how closely (the ledger in docs/reproductions.md).
    note : str
        What the convention does beyond its binning, and what confgrid does about it.
    """

    name: str
    binning: Binning
    source: str
    description: str
    reproduces: str = ""
    note: str = ""

    @property
    def metric(self) -> str:
        """The metric name: ``ece_<name>``."""
        return convention_metric(self.name)


def convention_metric(name: str) -> str:
    """``muller2026`` -> ``ece_muller2026``."""
    return f"ece_{name}"


#: the conventions, by name (kind ``"ECE convention"``)
CONVENTIONS: Registry[Convention] = Registry("ECE convention", value_type=Convention)


def get_convention(name: str) -> Convention:
    """The convention registered as ``name``; :class:`~confgrid.registry.UnknownNameError` listing the names."""
    return CONVENTIONS.get(name)


for _c in (
    Convention(
        "study002", Binning(10, "width", "right_float"),
        source="study 002, section 6.2; its authors' notebook NoamMichael/Comparing-Confidence-in-LLMs "
               "R/2analyze.Rmd:129-149 @ 560aae7: `cut(stated_confidence, breaks = 10)` over every cell's "
               "confidences (their range is [0, 1], so the breaks are seq(0, 1, length.out = 11): the float "
               "k * fl(1/10), the outer ones moved out by 1/1000), right-closed; the mean confidence per bin",
        description="ECE, study 002: 10 equal-width bins right-closed on seq(0, 1, 0.1)'s float edges, mean "
                    "bin confidence",
        reproduces="study 002, Table 1: the 55 cells outside LifeEval from the authors' per-item outputs, to 2e-14 "
                   "(benchmarks/closure_study002.py; five of them in tests/analysis/test_conventions.py); the 11 LifeEval "
                   "cells differ by up to 0.011 under every closure (their stored outputs are not the table's)"),
    Convention(
        "sklearn", Binning(5, "width", "right_float"),
        source="scikit-learn 1.9.1 sklearn/calibration.py:1227-1342 `calibration_curve(y_true, y_prob, n_bins=5, "
               "strategy='uniform')`: `bins = np.linspace(0.0, 1.0, n_bins + 1)`, "
               "`binids = np.searchsorted(bins[1:-1], y_prob)` (side='left': right-closed, 0.0 in the first bin)",
        description="ECE on scikit-learn's calibration_curve bins (its default n_bins=5): equal-width, right-closed "
                    "on np.linspace edges, mean bin confidence",
        reproduces="sklearn.calibration.calibration_curve's per-bin means, to 1e-15 (tests/analysis/test_conventions.py)",
        note="calibration_curve returns the non-empty bins' means only; the ECE is sum_b n_b / n |acc_b - conf_b| "
             "over them. With n_bins=10 it is ece_10_right_float, which is ece_study002. Before 1.1 scikit-learn "
             "binned with np.digitize (left-closed: ece_5_left_float)"),
    Convention(
        "polygraph", Binning(20, "width", "right_float"),
        source="LM-Polygraph src/lm_polygraph/ue_metrics/ece.py:13-61 @ efea882 (`ECE(normalize, n_bins=20)`: "
               "`bin_edges = np.linspace(0.0, 1.0, n_bins + 1)`, bin 0 `(c >= lo) & (c <= hi)`, the others "
               "`(c > lo) & (c <= hi)`, `conf_bin = np.mean(confidences[in_bin])`); scripts/polygraph_eval:182-188 "
               "registers ECE(normalize=True)",
        description="ECE, LM-Polygraph: 20 equal-width bins right-closed on np.linspace edges (the first also "
                    "holds 0), mean bin confidence",
        note="LM-Polygraph's confidence is -uncertainty, min-max scaled (normalize=True) before binning; confgrid "
             "bins the confidence it is given (map raw uncertainties with analyze --uncertainty). A scaled value "
             "1 ulp above 1.0 falls in no bin of theirs (and stays in N); confgrid refuses a value above 1"),
    Convention(
        "helm", Binning(10, "mass", "right"),
        source="HELM src/helm/benchmark/metrics/basic_metrics.py:599-616 @ 63754d0 "
               "(`ece_10_bin = cal.get_ece_em(max_probs, correct, num_bins=10)`); uncertainty-calibration 0.1.4 "
               "calibration/utils.py:20-40 (`get_equal_bins`: np.array_split of the sorted probabilities into "
               "min(B, n) parts, bounds the midpoints between parts), 201-204 (`get_ece_em`: p=1, not debiased), "
               "306-312 (`fast_bin`: np.searchsorted side='left', so a tie group cut by a bound joins the lower bin)",
        description="ECE, HELM ece_10_bin: 10 equal-mass bins (np.array_split of the sorted confidences; a tie "
                    "group on a cut joins the lower bin), mean bin confidence",
        note="HELM's bounds are midpoints between neighbouring confidences; a tie group cut by a part boundary "
             "goes to the lower bin, which is confgrid's right closure of equal-mass bins (ece_equal_mass_right "
             "with 10 bins). HELM turns a fractional exact-match score into 0 (int()); confgrid keeps graded "
             "correctness"),
    Convention(
        "yang2024", Binning(20, "width", "left_float"),
        source="danielyxyang/llm-verbalized-uq src/benchmark/evaluation.py:208-239 @ 1bb8c5d "
               "(`bins = np.linspace(0.0, 1.0, n_bins + 1)`, `binids = np.digitize(y_pred, bins[1:-1])`, "
               "`ece = np.sum(bin_count / n_samples * np.abs(prob_pred - prob_true), where=bin_count > 0)`); "
               "notebooks/paper_plots.ipynb passes n_bins=20",
        description="ECE, Yang et al. 2024: 20 equal-width bins left-closed on np.linspace edges (np.digitize; 1.0 "
                    "in the last bin), mean bin confidence",
        note="The code cites scikit-learn's calibration_curve but bins the other way (np.digitize is left-closed). "
             "On the float edges a stated 0.15, 0.3, 0.35, 0.6, 0.7, 0.85 or 0.95 joins the bin below"),
    Convention(
        "appier2025", Binning(10, "width", "left_float"),
        source="appier-research/llm-calibration (study 004's authors) src/metrics/custom.py:128-154 @ 50ce6a3 "
               "(neurips branch; `bin_boundaries = np.linspace(0, 1, n_bins + 1)`, `[lo, hi)` with the last bin "
               "`[lo, 1]`), the rule of their corrected tables (analysis/corrected_calibration_tables.md, "
               "regenerated by analysis/reliability_diagrams.ipynb with ECE_CONVENTION = 'closed')",
        description="ECE, study 004's authors (corrected): 10 equal-width bins left-closed on np.linspace edges, the "
                    "last closed, mean bin confidence",
        note="Their submitted tables (scripts/verbalize_confidence.py:118-128, scripts/ptrue.py:148-158) left "
             "confidence 1.0 out of every bin while dividing by all n; corrected_calibration_tables.md closes the "
             "last bin (e.g. Olmo verbalized GSM8K 0.0191 -> 0.0143). confgrid offers no name for the submitted "
             "rule: it counts answers no bin holds"),
    Convention(
        "muller2026", Binning(15, "width", "left_float", "midpoint"),
        source="muelphil/llm-uncertainty-bench calibration_visualization/calculate_calibration_data.py:30-47 @ "
               "79a40ed (`bins = np.linspace(0, 1, n_buckets + 1)`, `indices = min(x, n_buckets - 1) for x in "
               "np.digitize(certainty, bins) - 1`, `bin_confidences = (bins[:-1] + bins[1:]) / 2`), ece.py:40 "
               "(`sum(|acc - conf| * count) / sum(count)`); 15 bins for verbalized, P(True) and CCP "
               "(seq_ue_calibration/analysis_config)",
        description="ECE, Müller et al. 2026: 15 equal-width bins left-closed on np.linspace edges (1.0 in the last "
                    "bin), each bin's midpoint as its confidence",
        reproduces="Müller et al. 2026 (arXiv 2602.00279) Tables of ECE: SVamp / Llama-4-Scout verbalized 0.0422 "
                   "and GSM8K / Mistral-Small-3.2 P(True) 0.0311, to every printed digit (tests/analysis/test_conventions.py)"
                   "; the other arithmetic cells with outputs in their repository come from older runs (their "
                   "accuracy differs from the tables')",
        note="The midpoint moves numbers: on SVamp / Llama-4-Scout 2,391 of 2,499 answers state 1.0 and are scored "
             "against 0.9667, so the ECE is 0.0422 where the mean bin confidence gives 0.0755"),
    Convention(
        "muller2026_consistency", Binning(11, "centred", "left", "midpoint"),
        source="muelphil/llm-uncertainty-bench calibration_visualization/calculate_calibration_data.py:50-110 @ "
               "79a40ed (`calculate_calibration_data_discrete`: `bin_confidences = np.linspace(0.0, 1.0, "
               "n_buckets)`, `w = 1.0 / (n_buckets - 1)`, `edges = np.concatenate([bin_confidences - w/2, "
               "[bin_confidences[-1] + w/2]])`, `indices = np.digitize(certainty, edges) - 1`); 11 buckets for "
               "answer consistency (frequency_of_answer)",
        description="ECE, Müller et al. 2026, answer consistency: 11 bins centred on k/10 (edges +- 0.05, "
                    "left-closed), each bin's centre as its confidence",
        reproduces="Müller et al. 2026 Tables of ECE, answer consistency: SVamp / Llama-4-Scout 0.0327, "
                   "SVamp / Qwen3-30B-A3B-Instruct 0.0298, GSM8K / Mistral-Small-3.2 0.0338 and GSM8K / "
                   "Llama-3.3-70B 0.0248, to every printed digit (tests/analysis/test_conventions.py)",
        note="Values outside [-0.05, 1.05) fall in no bin of theirs and leave the count; a confidence in [0, 1] "
             "never does"),
):
    CONVENTIONS.register(_c.name, _c)
del _c
