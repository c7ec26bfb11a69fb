"""Early stopping's record: why each setting stopped (flows/evaluate/rounds.py)."""

from __future__ import annotations

from confgrid.flows.evaluate.rounds import stopping_table
from confgrid.flows.store.run_store import Frames
from confgrid.flows.studies import Study, StudyOutput


class StopReasons(Study, name="stop_reasons", tables=("stopping",),
                  title="execution.stopping: per setting, the rounds run and why it stopped"):

    def view(self, ev) -> StudyOutput:
        """results/stopping, with its header alone without early stopping (it replaces an earlier run's reasons in the
        same folder)."""
        return StudyOutput(Frames({"stopping": stopping_table(self.run.rounds)}))
