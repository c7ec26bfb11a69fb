"""Grid section of capability calibration (study 004): ``capability``.

It names the methods (``methods[]``) that give the targets and the estimators, splits every dataset into a train and
an evaluation part, and sets the applications (pass@k prediction, budget allocation). Checked against the methods by
:func:`check_capability` when the grid loads (before anything runs).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from pydantic import Field, StrictBool

from confgrid.flows.spec.base import _section, _Spec
from confgrid.flows.stages.method_base import get_reader
from confgrid.protocols.method_kinds import METHOD_KINDS

if TYPE_CHECKING:
    from confgrid.flows.spec.methods import MethodSpec

__all__ = ["CapabilitySpec", "ProbeFitSpec", "ESTIMATOR_KINDS", "check_capability"]

#: Method kinds that may serve as capability estimators (``capability.estimators``).
ESTIMATOR_KINDS = tuple(k.name for _, k in METHOD_KINDS.items()
                        if getattr(get_reader(k.reader).capability, "estimator", False))


class ProbeFitSpec(_Spec):
    """The linear probe on hidden states (study 004 section 5.3, Table 8)."""

    model: str = Field("logistic", pattern="^(logistic|ridge)$",
                       description="logistic (soft labels through sample weights) or ridge (clipped to [0, 1]).")
    layer: int = Field(-1, description="The single layer of the second probe (index into the method's layers; "
                       "negative from the end). The first probe reads the mean over layers.")
    folds: int = Field(5, ge=2, le=20, description="Folds of the cross-validation inside the train split that "
                       "chooses the regularization and the preprocessing.")
    seed: int = Field(0, ge=0, description="Seed of the fold assignment.")


class CapabilitySpec(_Spec):
    """Capability calibration (study 004): targets, estimators, splits, pass@k and budget allocation."""

    target: str | None = Field(None, description="Id of the expected_accuracy method on the evaluation split "
                               "(k = k_eval samples per item): the capability target. None: no capability study.")
    train_target: str | None = Field(None, description="Id of the expected_accuracy method on the train split "
                                     "(k = k_train samples): the target isotonic maps and probes are fitted to.")
    train_fraction: float = Field(0.5, gt=0.0, lt=1.0, description="Share of each dataset's items in the train "
                                  "split (the rest is the evaluation split).")
    split_seed: int = Field(0, ge=0, description="Seed of the split: items ordered by sha256(seed, dataset, "
                            "item_id), the first round(fraction * n) are the train split.")
    estimators: tuple[str, ...] = Field((), description="Ids of the methods rated as estimators (kinds "
                                        f"{list(ESTIMATOR_KINDS)}).")
    consistency_k: tuple[int, ...] = Field((5, 10, 20), description="Samples k_c of response consistency, read "
                                           "as prefixes of each self_consistency estimator's pool.")
    leaky_consistency: StrictBool = Field(False, description="Also rate consistency read from the target's own "
                                          "samples (the official code's choice; the target leaks into it): "
                                          "signals named consistency_leaky_k<k>.")
    isotonic: StrictBool = Field(True, description="Also rate every verbalized, P(True) and rating estimator "
                                 "after isotonic recalibration fitted on the train split.")
    probe: ProbeFitSpec = _section(ProbeFitSpec, "The linear probe on hidden states (study 004 section 5.3, "
                                   "Table 8).")
    pass_at_k: tuple[int, ...] = Field((1, 4, 16, 64), description="k of the pass@k prediction.")
    budgets: tuple[int, ...] = Field((1, 2, 4, 8, 16, 32), description="Samples per item B of the budget "
                                     "allocation (a total of B x N).")
    allocation_seeds: int = Field(10, ge=1, le=1000, description="Seeds of the sample order in the allocation.")

    @property
    def enabled(self) -> bool:
        return self.target is not None

    def estimator_signals(self, methods: tuple[MethodSpec, ...]) -> list[str]:
        """The signal names of the estimators in the one signal table (flows/evaluate/capability.py): each estimator's
        id (and ``<id>+isotonic``), ``<id>_k<k>`` of a consistency estimator, ``<id>_probe_mean`` and
        ``<id>_probe_layer<L>`` of a probe (``L`` resolved against the stored layers when ``probe.layer`` is negative:
        named only for a non-negative one here), ``consistency_leaky_k<k>``. Empty when the section is off."""
        if not self.enabled:
            return []
        by_id = {m.id: m for m in methods}
        out: list[str] = []
        for e in self.estimators:
            role = by_id[e].reader.capability if e in by_id else None
            if getattr(role, "pooled", False):
                out += [f"{e}_k{k}" for k in self.consistency_k]
            elif getattr(role, "probe", False):
                out += [f"{e}_probe_mean"] + ([f"{e}_probe_layer{self.probe.layer}"] if self.probe.layer >= 0 else [])
            else:
                out += [e] + ([f"{e}+isotonic"] if self.isotonic else [])
        if self.leaky_consistency:
            out += [f"consistency_leaky_k{k}" for k in self.consistency_k]
        return out

    def is_probe_layer_signal(self, name: str, methods: tuple[MethodSpec, ...]) -> bool:
        """Whether ``name`` is ``<id>_probe_layer<L>`` of a probe estimator (any ``L``: a negative ``probe.layer`` is
        resolved only against the stored layers)."""
        by_id = {m.id: m for m in methods}
        return any(e in by_id and getattr(by_id[e].reader.capability, "probe", False)
                   and re.fullmatch(re.escape(e) + r"_probe_layer\d+", name) for e in self.estimators)


def check_capability(cap: CapabilitySpec, methods: tuple[MethodSpec, ...]) -> None:
    """Raise ValueError (naming the field, the value and what is allowed) when the section and the methods disagree.

    Checked: target and train_target are expected_accuracy methods on the eval and train splits; estimators exist and
    have an estimator kind; every self_consistency estimator has k >= max(consistency_k) and a seed other than the
    target's (else its samples are the target's: the leak the study's code has); methods with a split other than
    ``all`` need this section.
    """
    by_id = {m.id: m for m in methods}
    split_methods = [m.id for m in methods if m.split != "all"]
    if not cap.enabled:
        if split_methods:
            raise ValueError(f"methods {split_methods} set a split; the split is defined by the capability section "
                             "(capability.target, train_fraction, split_seed)")
        return

    def need(field: str, mid: str | None, kind: str, split: str) -> MethodSpec:
        if mid not in by_id:
            raise ValueError(f"capability.{field}: unknown method {mid!r}; allowed: {sorted(by_id)}")
        m = by_id[mid]
        if m.kind != kind:
            raise ValueError(f"capability.{field}: method {mid!r} is of kind {m.kind!r}; it must be {kind!r}")
        if m.split != split:
            raise ValueError(f"capability.{field}: method {mid!r} has split {m.split!r}; it must be {split!r}")
        return m

    target = need("target", cap.target, "expected_accuracy", "eval")
    if cap.train_target is not None:
        need("train_target", cap.train_target, "expected_accuracy", "train")
    for e in cap.estimators:
        if e not in by_id:
            raise ValueError(f"capability.estimators: unknown method {e!r}; allowed: {sorted(by_id)}")
        m = by_id[e]
        if m.kind not in ESTIMATOR_KINDS:
            raise ValueError(f"capability.estimators: method {e!r} is of kind {m.kind!r}; allowed kinds: "
                             f"{list(ESTIMATOR_KINDS)}")
        if m.reader.capability.pooled:
            if cap.consistency_k and m.n_samples < max(cap.consistency_k):
                raise ValueError(f"capability.consistency_k: {max(cap.consistency_k)} samples asked of method {e!r}, "
                                 f"which draws k={m.n_samples}")
            if m.seed == target.seed and m.split in ("all", "eval"):
                raise ValueError(f"capability.estimators: method {e!r} has seed {m.seed}, the target's seed: its "
                                 "samples would be the target's own (the leak of the official code); give it another "
                                 "seed (capability.leaky_consistency: true adds the leaky variant, read from the "
                                 "target's own samples, for comparison)")
        if m.split == "eval" and m.reader.capability.fitted_on_train(cap.isotonic):
            raise ValueError(f"capability.estimators: method {e!r} runs on the eval split only; probes and "
                             "isotonic maps are fitted on the train split: give it split 'all'")
    if cap.train_target is None and any(by_id[e].reader.capability.fitted_on_train(cap.isotonic)
                                        for e in cap.estimators):
        raise ValueError("capability.train_target: probes and isotonic recalibration are fitted on the train "
                         "split against its target; name an expected_accuracy method with split 'train' "
                         "(or set isotonic: false and list no hidden_states estimator)")
    if cap.leaky_consistency and cap.consistency_k and max(cap.consistency_k) > target.n_samples:
        raise ValueError(f"capability.leaky_consistency: consistency_k {max(cap.consistency_k)} exceeds the target's "
                         f"k={target.n_samples} samples it is read from")
    for field, what in (("pass_at_k", "k"), ("budgets", "samples per item"), ("consistency_k", "k")):
        if bad := [v for v in getattr(cap, field) if v < 1]:
            raise ValueError(f"capability.{field}: {what} must be >= 1, got {bad}")
