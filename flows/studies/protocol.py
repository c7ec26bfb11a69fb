"""Study 000 (protocol sensitivity): Tables 2-4 (means over settings), the supplied-answer probe (Table 17), the
answer selection of probe-scored answer sets, and the calibration transfer (flows/evaluate/study_tables.py)."""

from __future__ import annotations

import pandas as pd

from confgrid.flows.evaluate.run_evaluation import Evaluation, primary_group, select
from confgrid.flows.evaluate.study_tables import probe_table, selection_table, study_tables, transfer_tables
from confgrid.flows.store.run_store import Frames
from confgrid.flows.studies import Study, StudyOutput

#: the prefixes of the tables also written as Markdown
_MARKDOWN = ("table", "transfer", "selection")


class ProtocolSensitivity(Study, name="protocol", figures=("gaps", "reliability"),
                          tables=("table2_contexts", "table3_ablation", "table4_axes", "table15_estimators",
                                  "table17_probe", "probe_pairs", "transfer", "transfer_penalties"),
                          title="study 000: verbalized vs token confidence across scoring contexts (Tables 2-4, 17), "
                                "transfer"):

    def view(self, ev: Evaluation) -> StudyOutput:
        """Study 000's tables for this run (flows/evaluate/study_tables.py); a table fails soft, with a log line."""
        spec, units, out = self.spec, self.run.units, {}
        p = primary_group(spec)
        if not ev.metrics.empty and spec.scoring.contexts:  # study 000's tables compare scoring contexts
            out.update(Study.never_fatal("study tables not built", study_tables, ev.kept, p["rule"],
                                         select(ev.metrics, p), select(ev.gaps, p), spec.scoring.contexts,
                                         spec.scoring.aggregations, spec.metrics.names, spec.bootstrap.level) or {})
        for a in spec.answer_sets:
            if a.probes_open_answers:
                sel = selection_table(units, a.id, spec.bootstrap.seed, spec.bootstrap.resamples, spec.bootstrap.level)
                if len(sel):
                    out[f"selection_{a.id}"] = sel
        main = [u for (_m, _d, a), u in units.items() if a == "main" and u.probe_complete]
        probes = [u.probe for u in main if u.probe is not None]
        if spec.probe.enabled and probes:
            out["table17_probe"], out["probe_pairs"] = probe_table(
                pd.concat(probes, ignore_index=True), pd.concat([u.graded for u in main], ignore_index=True),
                spec.probe.resamples, spec.probe.seed, spec.bootstrap.level)
        answers = select(ev.analyzed(), p)
        answers = answers[answers["kind"].isin(["verbalized", "token"])] if len(answers) else answers
        main_frames = {setting: f for setting, f in answers.groupby("setting", sort=False)} if len(answers) else {}
        if {"bare", "guess_slot"} <= set(spec.scoring.contexts) and main_frames:
            pen, ttab = Study.never_fatal("calibration transfer not computed", transfer_tables, main_frames,
                                          "guess_slot", "bare", spec.bootstrap.seed) or (pd.DataFrame(), None)
            if len(pen):
                out["transfer_penalties"], out["transfer"] = pen, ttab
        return StudyOutput(Frames(out, markdown=tuple(n for n, df in out.items()
                                                      if n.startswith(_MARKDOWN) and len(df))))
