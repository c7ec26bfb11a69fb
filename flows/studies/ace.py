"""Study 001 (ACE): the accuracy-controlled comparison across models (flows/evaluate/ace.py)."""

from __future__ import annotations

import logging

import pandas as pd
import pyarrow as pa

from confgrid.analysis.ace.tables import ACEPlan, ace_plan, ace_views
from confgrid.analysis.ace.units import ACE_KIND, COMPARISON_SET, comparison_inputs, signal_rows
from confgrid.analysis.signals import analyzed
from confgrid.flows.evaluate.ace import ACE_TABLES, ace_frames, ace_mlflow_metrics, ace_rows, ca_ratings
from confgrid.flows.evaluate.run_evaluation import UNIT_PLANNERS
from confgrid.flows.spec.grid import GridSpec
from confgrid.flows.studies import Study, StudyOutput
from confgrid.flows.tables.signals import ProducerRows

log = logging.getLogger("confgrid")


@UNIT_PLANNERS.register(COMPARISON_SET)
def plan_comparison(spec: GridSpec, table: pd.DataFrame) -> ACEPlan | None:
    """The comparison's cells as units of their own (analysis/ace/units.py), planned from its rows of the signal table
    by :func:`~confgrid.analysis.ace.tables.ace_plan` with the grid's comparison section (views, metrics, ``bootstrap``
    resamples, seed, DA target, bins, strata): the plan of the ACE tables. None when fewer than two models have rows
    (said in the log)."""
    c = spec.comparison
    rows, ratings = comparison_inputs(table)
    if rows["model"].nunique() < 2:
        log.warning("comparison: fewer than two models have rows to compare; no ACE tables")
        return None
    pairs = [(p.a, p.b, p.label) for p in c.pairs] if c.pairs else None
    return ace_plan(rows, ratings if "ca" in c.views else None, pairs=pairs, views=c.views, metrics=c.metrics,
                    n_bootstrap=c.bootstrap, seed=c.seed, target=c.target, n_bins=spec.metrics.ece_bins,
                    ia_strata=c.ia_strata, n_strata=c.n_strata)


class AccuracyControlled(Study, name="ace", section="comparison", tables=ACE_TABLES, figures=("ace_reversals",),
                         title="study 001: calibration compared across models at controlled accuracy (views ia, "
                               "da, ca)"):
    rows = ratings = None

    def signals(self, table):
        """The comparison's inputs as signal rows of answer set ``comparison`` (analysis/ace/units.py
        ``signal_rows``): the own-answer rows of the run's table that enter the metrics, the methods' rows and the
        candidate pools' ratings."""
        run = self.run
        self.ratings = ca_ratings(run.plan, run.done, run.submitted, run.methods.samples)
        self.rows = ace_rows(self.spec, analyzed(table).rename(columns={"target": "correct"}), run.methods.signals)
        return (ProducerRows(signal_rows(self.rows, self.ratings)),)

    def view(self, ev) -> StudyOutput:
        """results/ace_*.{csv,parquet,md} as views of the estimates, and the tables the comparison read (``ace_rows``,
        ``ace_candidates``)."""
        if self.rows is None:
            return StudyOutput()
        tables = {"ace_rows": self.store.write_table("ace_rows", [pa.Table.from_pandas(self.rows,
                                                                                       preserve_index=False)])}
        if self.ratings is not None and len(self.ratings):
            tables["ace_candidates"] = self.store.write_table(
                "ace_candidates", [pa.Table.from_pandas(self.ratings.astype({"producers": str}), preserve_index=False)])
        plan = ev.planned.get(COMPARISON_SET)
        if plan is None:
            if COMPARISON_SET not in ev.planned:  # no rows at all: the planner was never called to say it
                log.warning("comparison: no model has rows to compare; no ACE tables")
            return StudyOutput(tables=tables)
        # the ace_* tables are views of the comparison's rows of the one estimates table
        ace = ace_views(plan, ev.gaps[ev.gaps["kind_a"] == ACE_KIND].reset_index(drop=True),
                        ev.shifts[ev.shifts["from_view"] != ""].reset_index(drop=True))
        for msg in ace.messages:
            log.info("comparison: %s", msg)
        return StudyOutput(ace_frames(ace), tables, ace_mlflow_metrics(ace))
