"""Reproduce study 002's published ECE (Table 1) from the authors' per-item outputs, under each bin closure.

The authors (NoamMichael/Comparing-Confidence-in-LLMs, MIT) publish per-item stated confidence and correctness
of 11 models on BoolQ, SciQ, SAT-EN, LSAT-AR, HaluEval and LifeEval, and the table their R notebook exports
(``R/2analyze.Rmd``: the items all 11 models answered, ``cut(stated_confidence, breaks = 10)``, ECE over the
bins). This script applies the same item filter and computes ECE with confgrid's estimator under every closure
(:data:`confgrid.analysis.metrics.CLOSURES`), then counts the cells that match the published value.

Usage (paths from a checkout of that repository; nothing is downloaded)::

    python benchmarks/closure_study002.py --evals MISC/llm-confidence-correct.csv \\
        --life-eval R/processed/life_eval.csv --table MISC/table1-info.csv [--out cells.csv]

The numbers measured on its commit 560aae77 are in benchmarks/RESULTS.md (2026-12-02).
"""

from __future__ import annotations

import argparse

import numpy as np
import pandas as pd

from confgrid.analysis.metrics import CLOSURES, ece, edge_counts

QSETS = {"boolq_valid": "BoolQ", "lsat_ar_test": "LSAT", "sat_en": "SAT", "sciq_test": "SciQ",
         "halu_eval_qa": "HaluEval", "life_eval": "LifeEval"}
LLMS = {"Meta-Llama-3.1-70B-Instruct": "Llama-70B", "Meta-Llama-3.1-8B-Instruct": "Llama-8B",
        "claude-3-7-sonnet-20250219": "Claude-Sonnet-3.7", "claude-3-haiku-20240307": "Claude-Haiku-3",
        "claude-sonnet-4-20250514": "Claude-Sonnet-4", "deepseek-r1": "DeepSeek-R1", "deepseek-v3": "DeepSeek-V3",
        "gpt-4o": "GPT-4o", "o3-2025-04-16": "GPT-o3", "gemini-2.5-flash": "Gemini-2.5-Flash",
        "gemini-2.5-pro": "Gemini-2.5-Pro"}


def common_items(evals: str, life_eval: str | None) -> pd.DataFrame:
    """The authors' rows on the items every model answered (``R/2analyze.Rmd``, "a common set of questions")."""
    ev = pd.read_csv(evals)
    ev["correct"] = ev["correct"].astype(float)
    parts = [ev[["llm", "qset", "question_id", "stated_confidence", "correct"]]]
    if life_eval:
        le = pd.read_csv(life_eval).rename(columns={"prob": "correct"})
        parts.append(le[["llm", "qset", "question_id", "stated_confidence", "correct"]])
    df = pd.concat(parts, ignore_index=True)
    df["question_id"] = df["question_id"].astype(str)
    df["qset"], df["llm"] = df["qset"].map(QSETS), df["llm"].map(LLMS)
    n = df.groupby(["qset", "question_id"])["llm"].transform("size")
    return df[n == len(LLMS)].reset_index(drop=True)


def cells(df: pd.DataFrame, table: pd.DataFrame) -> pd.DataFrame:
    """Per (question set, model): items, ECE under each closure, the published ECE, edge shares."""
    pub = table.set_index(["qset", "llm"])
    rows = []
    for (q, m), g in df.groupby(["qset", "llm"]):
        c, y = g["stated_confidence"].to_numpy(float), g["correct"].to_numpy(float)
        on, inner = edge_counts(c, 10)
        row = {"qset": q, "llm": m, "n": c.size, "published": pub.at[(q, m), "ece"] if (q, m) in pub.index else np.nan,
               "published_n": pub.at[(q, m), "num_tot"] if (q, m) in pub.index else np.nan,
               "on_edge": on / c.size, "on_inner_edge": inner / c.size}
        row.update({f"ece_{cl}": ece(c, y, 10, cl) for cl in CLOSURES})
        rows.append(row)
    return pd.DataFrame(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--evals", required=True)
    ap.add_argument("--life-eval")
    ap.add_argument("--table", required=True)
    ap.add_argument("--out")
    a = ap.parse_args()
    r = cells(common_items(a.evals, a.life_eval), pd.read_csv(a.table))
    if a.out:
        r.to_csv(a.out, index=False)
    print(f"{len(r)} cells, {int(r['n'].sum())} answers; {np.average(r['on_edge'], weights=r['n']):.1%} of the "
          f"confidences on an edge of the 10 bins ({np.average(r['on_inner_edge'], weights=r['n']):.1%} on an inner "
          "edge)")
    for label, sub in (("all cells", r), ("without LifeEval", r[r["qset"] != "LifeEval"])):
        for cl in CLOSURES:
            d = (sub[f"ece_{cl}"] - sub["published"]).abs()
            print(f"{label:17s} {cl:12s}: {int((d < 1e-12).sum()):2d}/{len(sub)} match (|diff| < 1e-12), "
                  f"{int((d > 0.005).sum()):2d} differ by > 0.005, max |diff| {d.max():.2e}")


if __name__ == "__main__":
    main()
