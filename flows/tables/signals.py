"""The run's one signal table (analysis/signals.py): every stage's signal rows of every unit, and the methods'.

* :func:`unit_keys`: the analysis keys of a run: every (model, dataset, answer set) unit x parse policy x
  refusal policy x correctness rule.
* :func:`run_signal_table`: per unit and key, the rows of each stage with ``signals`` (flows/stages: grade's
  verbalized and token scores of each graded answer, probe's supplied answers), then every method row
  (flows/stages/method_base.py ``method_rows``) placed in the units of the main answer set whose
  correctness rule grades it.
* :class:`ProducerRows`: rows a later producer adds in units of its own, with the metrics those units are
  evaluated under (the capability estimators of study 004, flows/evaluate/capability.py; study 001's comparison,
  planned by its entry of flows/evaluate/run_evaluation.py ``UNIT_PLANNERS``).

Pure (pandas); nothing here calls a model.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from confgrid.analysis.signals import conform
from confgrid.flows.spec.grid import GridSpec
from confgrid.flows.stages.base import STAGES
from confgrid.flows.stages.method_base import method_rows
from confgrid.flows.tables.assemble import Unit

__all__ = ["run_signal_table", "unit_keys", "ProducerRows"]



@dataclass(frozen=True)
class ProducerRows:
    """Signal-table rows of a producer whose units are its own, with the metrics they are evaluated under.

    ``rows`` are conformed to :data:`~confgrid.analysis.signals.SCHEMA`, in units that are not the answer sets'
    (e.g. answer set ``capability``); ``metrics``: registered names for them (empty: the grid's).
    """

    rows: pd.DataFrame = field(default_factory=pd.DataFrame)
    metrics: tuple[str, ...] = ()


def _refusals(spec: GridSpec, a) -> tuple[str, ...]:
    """Refusal policies evaluated for an answer set: ``chance`` only where it shows options (format mc)."""
    if a.item_format.options:
        return spec.parsing.refusal
    return tuple(dict.fromkeys(r if r != "chance" else "drop" for r in spec.parsing.refusal))


def unit_keys(spec: GridSpec, units: dict[tuple[str, str, str], Unit]) -> list[dict[str, str]]:
    """The units of pairing of a run: every (model, dataset, answer set) x parse policy x refusal x rule."""
    return _keys(spec, [(m, d, u.answer_set) for (m, d, _), u in units.items()])


def _keys(spec: GridSpec, sets: list) -> list[dict[str, str]]:
    out = []
    for m, d, a in sets:
        aid = a.id
        for policy in spec.parsing.policies:
            for refusal in _refusals(spec, a):
                for rule in a.analysis_rules(spec.correctness.rules):
                    out.append({"setting": f"{m}/{d}", "model": m, "dataset": d, "answer_set": aid,
                                "parse_policy": policy, "refusal": refusal, "rule": rule})
    return out


def run_signal_table(spec: GridSpec, units: dict[tuple[str, str, str], Unit],
                     method_signals: pd.DataFrame | None = None) -> pd.DataFrame:
    """The run's one signal table (``tables/signals.parquet``): every unit's answer rows and method rows.

    A method's rows join the units of the main answer set (every parse and refusal policy) whose rule is the
    method's rule; a method graded under a rule the main set is not analyzed under (e.g. ``mc_favoured`` of
    letter probabilities) joins the units of the set's first rule, its ``target_rule`` saying how it is graded.
    Conformed to :data:`~confgrid.analysis.signals.SCHEMA` (with its header when empty).
    """
    frames = []
    for key in unit_keys(spec, units):
        u = units[(key["model"], key["dataset"], key["answer_set"])]
        for _, stage in STAGES.items():  # each stage's signal rows of the unit, in registration order
            rows = stage.signals(spec, u, key) if stage.signals is not None else None
            if rows is not None and len(rows):
                frames.append(conform(rows, **key))
    methods = method_rows(method_signals if method_signals is not None else pd.DataFrame())
    if len(methods):
        main_set = next(a for a in spec.all_answer_sets() if a.id == "main")
        main = _keys(spec, [(m.name, d.name, main_set) for m, d in spec.settings()])
        for (m, d, rule), g in methods.groupby(["model", "dataset", "target_rule"], sort=False):
            mine = [k for k in main if k["model"] == m and k["dataset"] == d]
            rules = list(dict.fromkeys(k["rule"] for k in mine))
            join = rule if rule in rules else (rules[0] if rules else None)
            for key in (k for k in mine if k["rule"] == join):
                frames.append(conform(g.drop(columns=["model", "dataset"]), **key))
    return conform(pd.concat(frames, ignore_index=True)) if frames else conform(pd.DataFrame())
