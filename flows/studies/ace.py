"""Study 001 (ACE): the accuracy-controlled comparison across models (flows/evaluate/ace.py)."""

from __future__ import annotations

import logging

import pyarrow as pa

from confgrid.analysis.ace.units import ACE_KIND
from confgrid.flows.evaluate.ace import ACE_TABLES, ace_frames, ace_mlflow_metrics, ace_rows, ca_ratings, plan_comparison
from confgrid.flows.studies import Study, StudyOutput, register_study

log = logging.getLogger("confgrid")


@register_study
class AccuracyControlled(Study):
    name = "ace"
    title = "study 001: calibration compared across models at controlled accuracy (views ia, da, ca)"
    section = "comparison"
    tables = ACE_TABLES
    figures = ("ace_reversals",)

    def joins(self):
        """The comparison's cells, planned from the analyzed rows and the candidate ratings."""
        run = self.run
        ratings = ca_ratings(run.plan, run.done, run.submitted, run.methods.samples)
        return lambda analyzed: plan_comparison(self.spec, ace_rows(self.spec, analyzed, run.methods.signals), ratings)

    def view(self, ev) -> StudyOutput:
        """results/ace_*.{csv,parquet,md} as views of the estimates, and the tables the comparison read
        (``ace_rows``, ``ace_candidates``)."""
        comparison = ev.joined
        if comparison is None:
            return StudyOutput()
        # the ace_* tables are views of the comparison's rows of the one estimates table
        comparison.gaps = ev.gaps[ev.gaps["kind_a"] == ACE_KIND].reset_index(drop=True)
        comparison.shifts = ev.shifts[ev.shifts["from_view"] != ""].reset_index(drop=True)
        rows, ratings = comparison.rows, comparison.ratings
        tables = {"ace_rows": self.store.write_table("ace_rows", [pa.Table.from_pandas(rows, preserve_index=False)])}
        if ratings is not None and len(ratings):
            tables["ace_candidates"] = self.store.write_table(
                "ace_candidates", [pa.Table.from_pandas(ratings.astype({"producers": str}), preserve_index=False)])
        ace = comparison.tables()
        if ace is None:
            return StudyOutput(tables=tables)
        for msg in ace.messages:
            log.info("comparison: %s", msg)
        return StudyOutput(ace_frames(ace), tables, ace_mlflow_metrics(ace))
