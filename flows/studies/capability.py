"""Study 004: capability calibration (flows/evaluate/capability.py); its estimators' rows join the evaluation."""

from __future__ import annotations

import logging

from confgrid.flows.evaluate.capability import (
    CAPABILITY_TABLES,
    capability_estimates,
    capability_mlflow_metrics,
    capability_rows,
    capability_tables,
)
from confgrid.flows.store.run_store import Frames
from confgrid.flows.studies import Study, StudyOutput, register_study

log = logging.getLogger("confgrid")


@register_study
class CapabilityCalibration(Study):
    name = "capability"
    title = "study 004: response vs capability calibration, pass@k, budget allocation"
    section = "capability"
    tables = CAPABILITY_TABLES
    figures = ("capability",)
    est = None

    def signals(self, table):
        """The capability estimators' rows (units of answer set ``capability``); none when they could not be
        computed (logged, never fatal)."""
        mt = self.run.methods
        try:
            self.est = capability_estimates(self.spec, self.run.plan.splits, mt.samples, mt.signals, mt.targets,
                                            mt.hidden, mt.costs)
        except Exception as exc:  # noqa: BLE001 - the estimators are a view; never lose the run for them
            log.warning("capability estimators not computed: %s: %s", type(exc).__name__, exc, exc_info=True)
            return ()
        return (capability_rows(self.spec, self.est),)

    def view(self, ev) -> StudyOutput:
        """results/capability_*; a view of the data, never fatal."""
        if self.est is None:
            return StudyOutput()
        try:
            tables = capability_tables(self.spec, self.est, ev.metrics, ev.signals)
        except Exception as exc:  # noqa: BLE001 - the tables are a view; never lose the run for them
            log.warning("capability tables not built: %s: %s", type(exc).__name__, exc, exc_info=True)
            return StudyOutput()
        return StudyOutput(Frames({n: getattr(tables, n) for n in CAPABILITY_TABLES}, skip_empty=True), metrics=capability_mlflow_metrics(tables))
