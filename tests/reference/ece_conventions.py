"""Independent references for every binned-ECE name (issue 36): a loop per bin, written from the definitions
and from each published project's source, never from confgrid's code.

* :func:`ece_spelled` reads a name of the grammar
  ``ece[_<B>][_equal_mass|_centred][_<closure>][_midpoint][_debiased]``
  (README, "ECE conventions") with its own regular expression and computes it with explicit ``lo <= c < hi``
  tests on each bin.
* ``ece_<project>`` functions follow the quoted lines of each project (file and line in each docstring).
"""

from __future__ import annotations

import re

import numpy as np
from scipy.stats import foldnorm

_NAME = re.compile(r"ece(?:_(\d+))?(_equal_mass|_centred)?(_right_float|_left_float|_right)?(_midpoint)?(_debiased)?")


def _from_bins(c, y, which, n_total, mid=None, debiased=False):
    """sum over bins b of |bin b| / n_total * |mean(y_b) - conf_b| with conf_b the mean confidence (or mid[b]);
    ``debiased``: each bin's term is Kumar et al. 2019's ``2 |d| - E|N(d, acc (1 - acc) / n_b)|``, the folded
    normal's mean taken from scipy.stats.foldnorm (their code, uncertainty-calibration 0.1.4
    calibration/utils.py:369-391, draws 1,000 normal samples for it)."""
    total = 0.0
    for b in sorted(set(which) - {-1}):
        m = np.asarray(which) == b
        conf_b = float(np.mean(c[m])) if mid is None else mid[b]
        acc = float(np.mean(y[m]))
        d = acc - conf_b
        term = abs(d)
        if debiased:
            s = np.sqrt(acc * (1 - acc) / m.sum())
            term = 2 * abs(d) - (foldnorm(abs(d) / s, scale=s).mean() if s > 0 else abs(d))
        total += m.sum() / n_total * term
    return total


def linspace_edges(n_bins: int) -> list[float]:
    """What ``np.linspace(0, 1, B + 1)`` and R's ``seq(0, 1, length.out = B + 1)`` compute: ``k * fl(1/B)``, the
    last edge 1.0 (numpy/core/function_base.py: ``y = arange(0, num) * step + start``; ``y[-1] = stop``)."""
    step = 1.0 / n_bins
    return [k * step for k in range(n_bins)] + [1.0]


def width_bin(c: float, edges, left: bool) -> int:
    """The bin of ``c`` among ``[e_k, e_{k+1})`` (left; the last bin closed) or ``(e_k, e_{k+1}]`` (right; the first
    closed), by explicit comparisons."""
    B = len(edges) - 1
    for k in range(B):
        lo, hi = edges[k], edges[k + 1]
        if left and (lo <= c < hi or (k == B - 1 and c == hi)):
            return k
        if not left and (lo < c <= hi or (k == 0 and c == lo)):
            return k
    raise AssertionError(f"{c} in no bin of {edges}")


def equal_mass_bins(c: np.ndarray, n_bins: int, left: bool) -> list[int]:
    """Equal-mass bins: the sorted answers cut as ``np.array_split`` cuts ``n`` into ``B`` blocks; a tie group cut by
    a block start joins the upper bin (left) or the lower one (right)."""
    n = c.size
    q, rem = divmod(n, n_bins)
    starts = [k * q + min(k, rem) for k in range(n_bins)]  # np.array_split's block starts
    order = np.argsort(c, kind="stable")
    s = c[order]
    which = np.empty(n, dtype=int)
    i = 0
    while i < n:
        j = i
        while j + 1 < n and s[j + 1] == s[i]:
            j += 1
        start, end = i, j + 1  # the tie group occupies ranks [start, end)
        b = sum(1 for r in starts[1:] if (r < end if left else r <= start))
        which[order[start:end]] = b
        i = end
    return list(which)


def ece_spelled(name: str, conf, correct, run_bins: int = 10) -> float:
    """The ECE a grammar name spells, computed bin by bin."""
    m = _NAME.fullmatch(name)
    assert m is not None, name
    B = int(m[1]) if m[1] else run_bins
    scheme = {"_equal_mass": "mass", "_centred": "centred", None: "width"}[m[2]]
    closure = (m[3] or "_left")[1:]
    midpoint = m[4] is not None
    debiased = m[5] is not None
    c, y = np.asarray(conf, dtype=float), np.asarray(correct, dtype=float)
    left = closure.startswith("left")
    if scheme == "mass":
        return _from_bins(c, y, equal_mass_bins(c, B, left), c.size)
    if scheme == "centred":
        # Müller et al. 2026, calibration_visualization/calculate_calibration_data.py (discrete binning):
        # bin_confidences = np.linspace(0.0, 1.0, n_buckets); w = 1.0 / (n_buckets - 1);
        # edges = np.concatenate([bin_confidences - w / 2, [bin_confidences[-1] + w / 2]])
        mid = [k * (1.0 / (B - 1)) for k in range(B - 1)] + [1.0]
        w = 1.0 / (B - 1)
        edges = [m - w / 2 for m in mid] + [mid[-1] + w / 2]
    else:
        edges = linspace_edges(B) if closure.endswith("float") else [k / B for k in range(B + 1)]
        mid = [(edges[k] + edges[k + 1]) / 2 for k in range(B)]
    which = [width_bin(v, edges, left) for v in c]
    return _from_bins(c, y, which, c.size, mid if midpoint else None, debiased)


# --- the published projects, from their source -------------------------------------------------------------


def ece_polygraph(conf, correct, n_bins=20):
    """LM-Polygraph src/lm_polygraph/ue_metrics/ece.py:46-59 @ efea882: ``bin_edges = np.linspace(0.0, 1.0,
    n_bins + 1)``; bin 0 ``(c >= lo) & (c <= hi)``, bin i > 0 ``(c > lo) & (c <= hi)``; ``conf_bin =
    np.mean(confidences[in_bin])``; ``ece += (np.sum(in_bin) / N) * abs(acc_bin - conf_bin)``."""
    c, y = np.asarray(conf, float), np.asarray(correct, float)
    e = np.linspace(0.0, 1.0, n_bins + 1)
    ece, N = 0.0, len(c)
    for i in range(n_bins):
        lo, hi = e[i], e[i + 1]
        in_bin = ((c > lo) & (c <= hi)) if i > 0 else ((c >= lo) & (c <= hi))
        if not np.any(in_bin):
            continue
        ece += (np.sum(in_bin) / N) * abs(np.mean(y[in_bin]) - np.mean(c[in_bin]))
    return ece


def ece_helm(conf, correct, num_bins=10):
    """HELM ``cal.get_ece_em(max_probs, correct, num_bins=10)`` (basic_metrics.py:614 @ 63754d0), i.e.
    uncertainty-calibration 0.1.4 calibration/utils.py: ``get_equal_bins`` (20-40: sort, ``np.array_split`` into
    ``min(num_bins, n)`` parts, bounds ``(last of part i + first of part i+1) / 2``, then 1.0, de-duplicated),
    ``fast_bin`` (306-312: ``np.searchsorted(bins, p)``, side 'left'), ``plugin_ce`` with p = 1."""
    c, y = np.asarray(conf, float), np.asarray(correct, float)
    s = sorted(c)
    parts = np.array_split(s, min(num_bins, len(s)))
    bounds = sorted(set([(parts[i][-1] + parts[i + 1][0]) / 2.0 for i in range(len(parts) - 1)] + [1.0]))
    which = list(np.searchsorted(bounds, c))
    return _from_bins(c, y, which, len(c))


def ece_yang2024(conf, correct, n_bins=20):
    """danielyxyang/llm-verbalized-uq src/benchmark/evaluation.py:211-239 @ 1bb8c5d: ``bins = np.linspace(0.0, 1.0,
    n_bins + 1)``, ``binids = np.digitize(y_pred, bins[1:-1])``, per-bin means by ``np.bincount``, ``ece =
    np.sum(bin_count / n_samples * np.abs(prob_pred - prob_true), where=bin_count > 0)``."""
    c, y = np.asarray(conf, float), np.asarray(correct, float)
    bins = np.linspace(0.0, 1.0, n_bins + 1)
    ids = np.digitize(c, bins[1:-1])
    count = np.bincount(ids, minlength=n_bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        prob_true = np.bincount(ids, weights=y, minlength=n_bins) / count
        prob_pred = np.bincount(ids, weights=c, minlength=n_bins) / count
    return float(np.sum(count / len(y) * np.abs(prob_pred - prob_true), where=count > 0))


def ece_appier2025(conf, correct, n_bins=10):
    """appier-research/llm-calibration src/metrics/custom.py:137-152 @ 50ce6a3 (the corrected rule):
    ``bin_boundaries = np.linspace(0, 1, n_bins + 1)``; the last bin ``(c >= lo) & (c <= hi)``, the others
    ``(c >= lo) & (c < hi)``; ``ece += (bin_size / n) * abs(mean_c_star - mean_c_est)``."""
    c, y = np.asarray(conf, float), np.asarray(correct, float)
    e = np.linspace(0, 1, n_bins + 1)
    ece, n = 0.0, len(c)
    for i in range(n_bins):
        mask = (c >= e[i]) & (c <= e[i + 1]) if i == n_bins - 1 else (c >= e[i]) & (c < e[i + 1])
        if mask.sum() > 0:
            ece += (mask.sum() / n) * abs(np.mean(y[mask]) - np.mean(c[mask]))
    return ece


def ece_study002(conf, correct):
    """Study 002's R notebook (NoamMichael/Comparing-Confidence-in-LLMs R/2analyze.Rmd:129-149 @ 560aae7):
    ``cut(stated_confidence, breaks = 10)`` over every cell's confidences (whose range is [0, 1]), i.e. R's
    ``breaks <- seq.int(0, 1, length.out = 11)`` with the outer breaks moved out by 1/1000 of the range,
    right-closed; per bin ``confidence = mean(stated_confidence)``, ``accuracy = mean(correct)``;
    ``ece = sum(num * abs(accuracy - confidence)) / num_tot``."""
    c, y = np.asarray(conf, float), np.asarray(correct, float)
    br = linspace_edges(10)
    br[0], br[-1] = br[0] - 1 / 1000, br[-1] + 1 / 1000
    which = [next(k for k in range(10) if br[k] < v <= br[k + 1]) for v in c]
    return _from_bins(c, y, which, len(c))


def ece_sklearn(conf, correct, n_bins=5):
    """scikit-learn 1.9.1 ``calibration_curve(y, p, n_bins=5, strategy='uniform')`` (sklearn/calibration.py):
    ``bins = np.linspace(0.0, 1.0, n_bins + 1)``, ``binids = np.searchsorted(bins[1:-1], y_prob)``, the
    non-empty bins' ``prob_true = bin_true / bin_total``, ``prob_pred = bin_sums / bin_total``; the ECE weighs
    each by ``bin_total / n``."""
    c, y = np.asarray(conf, float), np.asarray(correct, float)
    bins = np.linspace(0.0, 1.0, n_bins + 1)
    ids = np.searchsorted(bins[1:-1], c)
    total = np.bincount(ids, minlength=len(bins))
    nz = total != 0
    prob_true = np.bincount(ids, weights=y, minlength=len(bins))[nz] / total[nz]
    prob_pred = np.bincount(ids, weights=c, minlength=len(bins))[nz] / total[nz]
    return float(np.sum(total[nz] / len(c) * np.abs(prob_true - prob_pred)))


def ece_muller2026(conf, correct, n_buckets=15):
    """Müller et al. 2026 calibration_visualization/calculate_calibration_data.py:30-46 @ 79a40ed:
    ``bins = np.linspace(0, 1, n_buckets + 1)``; ``indices = [min(x, n_buckets - 1) for x in np.digitize(certainty,
    bins) - 1]``; ``bin_confidences = (bins[:-1] + bins[1:]) / 2``; ece.py:40 ``np.sum(np.abs(acc - conf) *
    counts) / np.sum(counts)``."""
    c, y = np.asarray(conf, float), np.asarray(correct, float)
    bins = np.linspace(0, 1, n_buckets + 1)
    idx = np.array([min(x, n_buckets - 1) for x in np.digitize(c, bins) - 1])
    counts, right = np.zeros(n_buckets), np.zeros(n_buckets)
    for i, b in enumerate(idx):
        counts[b] += 1
        right[b] += y[i]
    acc = np.divide(right, counts, where=counts > 0, out=np.zeros(n_buckets))
    mid = (bins[:-1] + bins[1:]) / 2
    return float(np.sum(np.abs(acc - mid) * counts) / np.sum(counts))


def ece_muller2026_consistency(conf, correct, n_buckets=11):
    """Müller et al. 2026 calculate_calibration_data.py:84-110 @ 79a40ed (``calculate_calibration_data_discrete``):
    ``bin_confidences = np.linspace(0.0, 1.0, n_buckets)``, ``w = 1.0 / (n_buckets - 1)``, ``edges =
    np.concatenate([bin_confidences - w/2, [bin_confidences[-1] + w/2]])``, ``indices = np.digitize(certainty,
    edges) - 1`` (kept when ``0 <= idx < n_buckets``)."""
    c, y = np.asarray(conf, float), np.asarray(correct, float)
    mid = np.linspace(0.0, 1.0, n_buckets)
    w = 1.0 / (n_buckets - 1)
    edges = np.concatenate([mid - w / 2, [mid[-1] + w / 2]])
    idx = np.digitize(c, edges) - 1
    counts, right = np.zeros(n_buckets), np.zeros(n_buckets)
    for i, b in enumerate(idx):
        if 0 <= b < n_buckets:
            counts[b] += 1
            right[b] += y[i]
    acc = np.divide(right, counts, where=counts > 0, out=np.zeros(n_buckets))
    return float(np.sum(np.abs(acc - mid) * counts) / np.sum(counts))


#: convention name -> its reference
PROJECTS = {"polygraph": ece_polygraph, "helm": ece_helm, "yang2024": ece_yang2024, "appier2025": ece_appier2025,
            "study002": ece_study002, "sklearn": ece_sklearn, "muller2026": ece_muller2026,
            "muller2026_consistency": ece_muller2026_consistency}
