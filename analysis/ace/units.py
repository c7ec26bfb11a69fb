"""A cell of the accuracy-controlled comparison as a unit of the one evaluator (study 001 on analysis/evaluation.py).

Each cell (a pair of models on one dataset and method, :class:`.frame.Cell`) becomes one
:class:`~confgrid.analysis.evaluation.UnitPlan` whose signals are the two models under every bootstrapped view,
so the comparison's intervals come from the same paired bootstrap, kernels and resampling stream as every other
estimate of a run (the one evaluator):

* ``raw``: each model on the cell's items;
* the instance-aligned views (``ia``, ``ia_both_right``, ``ia_both_wrong``, ``ia_partial``): the same items
  restricted to the view's support (an item's membership depends on that item alone, so the restriction is a
  support of the paired bootstrap);
* the distribution-aligned views (``da``, ``da_a_to_b``, ``da_b_to_a``, ``da_target``): the reweighted side is
  a reweighted cell (analysis/reweighting.py: both compositions re-estimated on every resample, the direction
  and strata of the point estimate kept);
* ``ca``: every rated (item, candidate) pair as a row of its item, so the unit is a cluster bootstrap over items
  (each item with its whole candidate pool). Clusters are the items in their order, so the draws are the
  cell's own draws (``chunk_indices(n, ...)``) whether or not the unit has CA rows.

Cell keys are ``"<model>|<view>"`` (unique in the unit, never parsed); the tables show the model as the signal
and the view in the ``view`` column. The compared pairs are ``(A, B)`` under each view, and the shifts go from
the raw gap to each aligned gap: their ``flip_share`` is study 001's retention probability (Appendix E.6). The
unit's seed is the cell's (:func:`.bootstrap.cell_seed`), so its resamples are the ones study 001's reference
bootstrap (tests/reference/ace_cell_bootstrap.py) draws.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd

from confgrid.analysis.evaluation import UnitPlan, ShiftPlan
from confgrid.analysis.reweighting import Reweight
from confgrid.analysis.signals import UNIT_COLUMNS, conform

from .candidates import CACell
from .frame import Cell
from .views import DA_VIEWS, DEFAULT_OPTIONS, CellViews, ViewOptions

__all__ = ["ace_unit", "ACE_KIND", "COMPARISON_SET", "OWN_KIND", "CANDIDATE_KIND", "unit_labels", "signal_rows", "comparison_inputs",
           "without_comparison"]

#: The ``kind`` of an ACE unit's signals: each side of a gap is a model (analysis/verdicts.py ``side``).
ACE_KIND = "model"
#: The answer set of the comparison's input rows in the one signal table (:func:`signal_rows`), and their kinds: a
#: compared model's own-answer row, a rater's rating of a pooled candidate.
COMPARISON_SET, OWN_KIND, CANDIDATE_KIND = "comparison", "comparison", "candidate"


def signal_rows(rows: pd.DataFrame, ratings: pd.DataFrame | None = None) -> pd.DataFrame:
    """The comparison's inputs as rows of the one signal table (analysis/signals.py), answer set ``comparison``.

    * own-answer rows (:mod:`.frame`): unit ``model/dataset``, kind ``comparison``, ``signal`` and ``method`` the
      compared method, ``rated`` ``own_answer``, ``target`` the correctness;
    * candidate ratings (:data:`.candidates.RATING_COLUMNS`): unit ``rater/dataset/method`` (model the rater), kind
      ``candidate``, ``signal`` the candidate (normalized), ``rated`` its producers ``a|b``, ``target`` its label.

    :func:`comparison_inputs` gives both back (the candidate's surface form is not kept: it gives the normalized
    candidate as ``surface``). Raises ``ValueError`` if a producer's name holds ``|`` (a grid's model names cannot:
    flows/spec/base.py ``LABEL_PATTERN``).
    """
    own = rows.rename(columns={"signal": "confidence", "correct": "target"})
    out = [own.assign(setting=own["model"] + "/" + own["dataset"], signal=own["method"], kind=OWN_KIND,
                      rated="own_answer")]
    if ratings is not None and len(ratings):
        r = ratings.rename(columns={"rater": "model", "signal": "confidence", "label": "target"})
        if bad := sorted({m for p in r["producers"] for m in p if "|" in m}):
            raise ValueError(f"producers: model name(s) {bad} hold '|', which joins a candidate's producers")
        out.append(r.assign(setting=r["model"] + "/" + r["dataset"] + "/" + r["method"], kind=CANDIDATE_KIND,
                            signal=r["candidate"], rated=["|".join(p) for p in r["producers"]]))
    return conform(pd.concat(out, ignore_index=True), answer_set=COMPARISON_SET)


def comparison_inputs(table: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The own-answer rows and the candidate ratings of :func:`signal_rows`' rows (other rows are ignored)."""
    t = table[table["answer_set"] == COMPARISON_SET]
    own, cand = t[t["kind"] == OWN_KIND], t[t["kind"] == CANDIDATE_KIND]
    rows = own[["model", "dataset", "method", "item_id", "confidence", "target"]].rename(
        columns={"confidence": "signal", "target": "correct"})
    ratings = pd.DataFrame({"dataset": cand["dataset"], "item_id": cand["item_id"], "candidate": cand["signal"],
                            "surface": cand["signal"], "producers": cand["rated"], "label": cand["target"],
                            "rater": cand["model"], "method": cand["method"], "signal": cand["confidence"]})
    return rows.reset_index(drop=True), ratings.reset_index(drop=True)


def without_comparison(table: pd.DataFrame) -> pd.DataFrame:
    """A signal table without the comparison's rows: their units are planned from the grid's ``comparison``
    section (flows/studies/ace.py), which ``confgrid analyze`` and ``plan-size`` of a run's table do not have."""
    return table[table["answer_set"] != COMPARISON_SET].reset_index(drop=True)


def unit_labels(cell: Cell) -> dict[str, str]:
    """The unit columns of a cell's unit: ``setting`` = the comparison's label, ``model`` = ``"A vs B"``, its dataset,
    ``target_kind`` ``correct``; the compared method is each signal's ``method``."""
    lab = {c: "" for c in UNIT_COLUMNS}
    lab.update(setting=str(cell.pair.label), model=str(cell.pair.name), dataset=str(cell.dataset),
               target_kind="correct")
    return lab


def ace_unit(cell: Cell, point: CellViews, metrics: Sequence[str], views: Sequence[str] = ("ia", "da"),
             opts: ViewOptions = DEFAULT_OPTIONS, ca: CACell | None = None, n_resamples: int = 2000,
             seed: int = 0) -> UnitPlan:
    """The unit of the one evaluator that bootstraps a cell's views.

    Parameters
    ----------
    cell : Cell
        ``n >= 1`` matched items.
    point : CellViews
        The cell's point estimates (:func:`.views.cell_views`): its IA parts, DA strata and ``da`` direction are
        kept on every resample.
    metrics : sequence of str
        Among ``("ece", "brier")`` (the unit's own metrics, :attr:`UnitPlan.metrics`).
    views : sequence of str
        ``"ia"`` and/or ``"da"`` (``raw`` always; ``da_resample`` is random itself and not bootstrapped).
    opts : ViewOptions
        Its ``target`` gives ``da_target``'s composition (the pair's mean, or a declared accuracy).
    ca : CACell, optional
        The cell's rated candidate pairs (view ``ca``).
    n_resamples : int
        The comparison's resamples (its own ``bootstrap``, :attr:`UnitPlan.n_resamples`).
    seed : int
        The cell's seed (:func:`.bootstrap.cell_seed`).

    Returns
    -------
    UnitPlan
        Cells ``(A, view), (B, view)`` per view in the order raw, IA views, ``ca``, DA views (the order of the
        reference's tables); pairs ``(A, B)`` per view; shifts raw -> each other view.
    """
    n = cell.n
    P = 0 if ca is None else ca.n_pairs
    N = n + P
    own = np.zeros(N, dtype=bool)
    own[:n] = True
    a, b = str(cell.pair.a), str(cell.pair.b)
    entries: list[tuple[str, str, np.ndarray, np.ndarray, np.ndarray, Reweight | None]] = []

    def add(model: str, view: str, conf, target, mask, rw=None) -> None:
        c = np.full(N, np.nan)
        t = np.full(N, np.nan)
        c[mask], t[mask] = conf, target
        entries.append((model, view, c, t, mask, rw))

    def both(view: str, mask_items: np.ndarray, rw_a=None, rw_b=None) -> None:
        m = own.copy()
        m[:n] = mask_items
        add(a, view, cell.conf_a[mask_items], cell.correct_a[mask_items], m, rw_a)
        add(b, view, cell.conf_b[mask_items], cell.correct_b[mask_items], m, rw_b)

    every = np.ones(n, dtype=bool)
    both("raw", every)
    if "ia" in views:
        for view in sorted({v.view for v in point.values if v.view.startswith("ia")}):
            both(view, point.ia.mask(view))
    if ca is not None:
        m = np.zeros(N, dtype=bool)
        m[n:] = True
        add(a, "ca", ca.signal_a, ca.label, m)
        add(b, "ca", ca.signal_b, ca.label, m)
    if "da" in views:
        st = point.strata
        ka = np.full(N, -1, dtype=np.int64)
        kb = np.full(N, -1, dtype=np.int64)
        ka[:n], kb[:n] = st.assign(cell.correct_a), st.assign(cell.correct_b)
        if opts.target == "mean":
            ta, tb = Reweight(ka, st.size, targets=(ka, kb)), Reweight(kb, st.size, targets=(ka, kb))
        else:  # a declared accuracy (binary correctness: checked by the point estimate)
            q = np.array([1.0 - float(opts.target), float(opts.target)])
            ta, tb = Reweight(ka, st.size, fixed=q), Reweight(kb, st.size, fixed=q)
        to_b, to_a = Reweight(ka, st.size, targets=(kb,)), Reweight(kb, st.size, targets=(ka,))
        rws = {"da_a_to_b": (to_b, None), "da_b_to_a": (None, to_a), "da_target": (ta, tb)}
        rws["da"] = rws["da_" + point.direction]
        for view in DA_VIEWS:
            both(view, every, *rws[view])
    keys = [f"{m}|{v}" for m, v, *_ in entries]
    masks = np.vstack([e[4] for e in entries])
    info = {k: {"kind": ACE_KIND, "method": str(cell.method), "context": "", "aggregation": "", "rated": "",
                "target_rule": "", "view": v} for k, (_, v, *_) in zip(keys, entries, strict=True)}
    pairs = [(keys[i], keys[i + 1], i, i + 1) for i in range(0, len(keys), 2)]
    raw_a, raw_b = keys[0], keys[1]
    # n of a shift: the items both gaps have (an IA view's items; CA's pool pairs belong to all n items)
    shifts = [ShiftPlan(raw_a, raw_b, ka_, kb_, n if info[ka_]["view"] == "ca" else int(masks[c, :n].sum()))
              for ka_, kb_, c, _ in pairs[1:]]
    groups = None if ca is None else np.r_[np.arange(n), ca.item_index].astype(np.int64)
    return UnitPlan(
        labels=unit_labels(cell), seed=int(seed), items=np.r_[cell.item_ids, cell.item_ids[ca.item_index]]
        if ca is not None else np.asarray(cell.item_ids, dtype=object), groups=groups, signals=keys, info=info,
        confidence=np.vstack([e[2] for e in entries]), target=np.vstack([e[3] for e in entries]), masks=masks,
        cell_names=keys, pairs=pairs, shifts=shifts, cell_n=[int(m.sum()) for m in masks],
        n_rows={k: int(m.sum()) for k, m in zip(keys, masks, strict=True)}, metrics=tuple(metrics),
        reweight=[e[5] for e in entries] if any(e[5] is not None for e in entries) else None,
        n_resamples=int(n_resamples), names={k: m for k, (m, *_) in zip(keys, entries, strict=True)},
    )
