"""Studies 002 and 003: calibration summaries, refusals, repeated runs, the hard-easy effect
(flows/evaluate/calibration_tables.py)."""

from __future__ import annotations

from confgrid.flows.evaluate.calibration_tables import CALIBRATION_TABLES, calibration_tables
from confgrid.flows.store.run_store import Frames
from confgrid.flows.studies import Study, StudyOutput


class CalibrationSummary(Study, name="calibration", tables=CALIBRATION_TABLES, figures=("hard_easy",),
                         title="studies 002 and 003: overconfidence, Brier, refusals, runs, hard-easy slope"):
    def view(self, ev) -> StudyOutput:
        """results/calibration, refusals, runs, hard_easy; a view of the data, never fatal."""
        tables = self.never_fatal("calibration tables not built", calibration_tables, self.spec, self.run.units,
                                  ev.analyzed(), ev.units)
        return StudyOutput() if tables is None else StudyOutput(Frames(tables, skip_empty=True))
