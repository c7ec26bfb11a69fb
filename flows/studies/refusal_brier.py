"""Study 003's refusal-aware Brier score, as a view of any run (ConfidenceBench, section 3: "Unparseable responses and
explicit refusals are scored as 25% confidence with a randomly selected answer rather than being excluded").

Per unit of the one signal table and verbalized signal, every item the answer set asked counts: an answered item (a
usable row) adds ``(p - y)^2``; an item without a usable verbalized value (a refusal, an unparseable reply, no stated
confidence) is scored at the calibrated-random confidence ``p0 = 1/k`` of its ``k`` options with a uniformly random
answer, whose expected squared error is ``p0 (1 - p0)`` (0.1875 at k = 4, the study's baseline). An item without
options (an open answer) has ``p0 = 0``: a refusal there is a confident "no" that is wrong, squared error 0, so the
refusal rate beside it says how much of the score is abstention. Every term is in [0, 1]; lower is better. Point
estimates only.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from confgrid.analysis.signals import UNIT_COLUMNS, usable
from confgrid.flows.evaluate.calibration_tables import item_columns
from confgrid.flows.store.run_store import Frames
from confgrid.flows.studies import Study, StudyOutput
from confgrid.flows.tracking import keyed_metrics

#: ``results/refusal_brier`` columns
COLUMNS = [*UNIT_COLUMNS, "signal", "n", "n_refused", "refusal_rate", "brier_answered", "brier", "baseline"]


def refusal_brier(signals: pd.DataFrame, n_options: pd.DataFrame) -> pd.DataFrame:
    """The refusal-aware Brier score of every verbalized signal of every unit (module docstring): :data:`COLUMNS`,
    ``brier_answered`` NaN for a unit with no answered item.

    ``signals``: the one signal table (its verbalized rows graded for correctness are read); ``n_options``: columns
    dataset, item_id, n_options (int >= 0; 0 for an open answer).
    """
    v = signals[(signals["kind"] == "verbalized") & (signals["target_kind"] == "correct")] if len(signals) else signals
    if v.empty:
        return pd.DataFrame(columns=COLUMNS)
    v = v.merge(n_options, on=["dataset", "item_id"], how="left")
    k = v["n_options"].fillna(0).to_numpy(np.float64)
    p0 = np.divide(1.0, k, out=np.zeros_like(k), where=k > 0)
    answered = usable(v).to_numpy()
    err = np.where(answered, (v["confidence"].to_numpy(np.float64) - v["target"].to_numpy(np.float64)) ** 2,
                   p0 * (1 - p0))
    v = v.assign(_err=np.where(answered, err, np.nan), _all=err, _refused=~answered, _base=p0 * (1 - p0))
    g = v.groupby([*UNIT_COLUMNS, "signal"], sort=False)
    out = pd.DataFrame({"n": g.size(), "n_refused": g["_refused"].sum(), "brier_answered": g["_err"].mean(),
                        "brier": g["_all"].mean(), "baseline": g["_base"].mean()}).reset_index()
    out["refusal_rate"] = out["n_refused"] / out["n"]
    return out[COLUMNS]


class RefusalAwareBrier(Study, name="refusal_brier", tables=("refusal_brier",),
                        title="study 003: Brier score with refusals scored at chance instead of dropped, on any "
                              "dataset"):

    def view(self, ev) -> StudyOutput:
        table = refusal_brier(ev.signals, item_columns(self.run.units, ())[["dataset", "item_id", "n_options"]])
        return StudyOutput(Frames({"refusal_brier": table}),
                           metrics=keyed_metrics(table, lambda r: ("refusal_brier", r.setting, r.answer_set,
                                                                   r.parse_policy, r.refusal, r.rule, r.signal),
                                                 {"point": "brier"}))
