"""The confidence methods' metrics beside their protocol (results/methods) and the expected accuracy of the sampled
methods (results/expected_accuracy, study 004 Figure 2)."""

from __future__ import annotations

import pandas as pd

from confgrid.analysis.signals import UNIT_COLUMNS
from confgrid.flows.evaluate.run_evaluation import Evaluation
from confgrid.flows.spec.grid import GridSpec
from confgrid.flows.store.run_store import Frames
from confgrid.flows.studies import Study, StudyOutput


class MethodMetrics(Study, name="method_metrics", tables=("methods", "expected_accuracy"),
                    title="every confidence method's metrics with its protocol; expected accuracy of the sampled "
                          "methods"):

    def view(self, ev) -> StudyOutput:
        return StudyOutput(Frames({"methods": methods_view(self.spec, ev),
                                   "expected_accuracy": expected_accuracy_summary(self.run.methods.targets)}))


#: The protocol columns of a method signal shown beside its metrics (results/methods).
METHOD_PROTOCOL = ("template", "k", "temperature", "top_p", "top_k", "seed", "merge", "renormalize")


def methods_view(spec: GridSpec, ev: Evaluation) -> pd.DataFrame:
    """``results/methods``: the metrics of every confidence-method signal of the main answer set under the first parse
    and refusal policies, with the method's protocol (a view of ``results/metrics``; the paired gaps against
    verbalized are in ``results/gaps``, the rows left out by status in ``results/dropped``)."""
    m = ev.metrics
    if m.empty:
        return pd.DataFrame()
    keep = (~m["kind"].isin(["verbalized", "token"]) & (m["answer_set"] == "main")
            & (m["parse_policy"] == spec.parsing.policies[0]) & (m["refusal"] == spec.parsing.refusal[0]))
    view = m[keep]
    if view.empty:
        return pd.DataFrame()
    proto = ev.signals.drop_duplicates([*UNIT_COLUMNS, "signal"])[[*UNIT_COLUMNS, "signal", *METHOD_PROTOCOL]]
    return view.merge(proto, on=[*UNIT_COLUMNS, "signal"], how="left").reset_index(drop=True)


def expected_accuracy_summary(targets: pd.DataFrame) -> pd.DataFrame:
    """Per (model, dataset, method): items, mean expected accuracy, share of items strictly between 0 and 1 (where
    response and capability calibration differ, study 004 Figure 2), mean standard error."""
    if targets.empty:
        return pd.DataFrame()
    g = targets.groupby(["model", "dataset", "method"], sort=False)
    return pd.DataFrame({
        "items": g.size(), "k": g["k"].first(), "mean_expected_accuracy": g["expected_accuracy"].mean(),
        "share_between_0_and_1": g["expected_accuracy"].apply(lambda x: float(((x > 0) & (x < 1)).mean())),
        "mean_se": g["se"].mean(), "unparsed_samples": g["n_unparsed"].sum(),
    }).reset_index()


