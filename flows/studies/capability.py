"""Study 004: capability calibration (flows/evaluate/capability.py); its estimators' rows join the evaluation."""

from __future__ import annotations

from confgrid.flows.evaluate.capability import (CAPABILITY_TABLES, capability_estimates, capability_mlflow_metrics,
                                                capability_rows, capability_tables)
from confgrid.flows.store.run_store import Frames
from confgrid.flows.studies import Study, StudyOutput


class CapabilityCalibration(Study, name="capability", section="capability", tables=CAPABILITY_TABLES,
                            figures=("capability",),
                            title="study 004: response vs capability calibration, pass@k, budget allocation"):
    est = None

    def signals(self, table):
        """The capability estimators' rows (units of answer set ``capability``); none when they could not be computed
        (logged, never fatal)."""
        mt = self.run.methods
        self.est = self.never_fatal("capability estimators not computed", capability_estimates, self.spec,
                                    self.run.plan.splits, mt.samples, mt.signals, mt.targets, mt.hidden, mt.costs)
        return () if self.est is None else (capability_rows(self.spec, self.est),)

    def view(self, ev) -> StudyOutput:
        """results/capability_*; a view of the data, never fatal."""
        tables = None if self.est is None else self.never_fatal("capability tables not built", capability_tables,
                                                                self.spec, self.est, ev.metrics, ev.signals)
        if tables is None:
            return StudyOutput()
        return StudyOutput(Frames(tables, skip_empty=True), metrics=capability_mlflow_metrics(tables))
