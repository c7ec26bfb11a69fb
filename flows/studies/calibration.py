"""Studies 002 and 003: calibration summaries, refusals, repeated runs, the hard-easy effect
(flows/evaluate/calibration_tables.py)."""

from __future__ import annotations

import logging

from confgrid.flows.evaluate.calibration_tables import CALIBRATION_TABLES, calibration_tables
from confgrid.flows.store.run_store import Frames
from confgrid.flows.studies import Study, StudyOutput, register_study

log = logging.getLogger("confgrid")


@register_study
class CalibrationSummary(Study):
    name = "calibration"
    title = "studies 002 and 003: overconfidence, Brier, refusals, runs, hard-easy slope"
    tables = CALIBRATION_TABLES
    figures = ("hard_easy",)

    def view(self, ev) -> StudyOutput:
        """results/calibration, refusals, runs, hard_easy; a view of the data, never fatal."""
        try:
            tables = calibration_tables(self.spec, self.run.units, ev.analyzed(), ev.units)
        except Exception as exc:  # noqa: BLE001 - the tables are a view; never lose the run for them
            log.warning("calibration tables not built: %s: %s", type(exc).__name__, exc)
            return StudyOutput()
        return StudyOutput(Frames({n: getattr(tables, n) for n in CALIBRATION_TABLES}, skip_empty=True))
