"""``confgrid analyze`` on outputs of several models: the accuracy-controlled comparison (study 001, ACE).

An input with a ``model`` column (one row per model, setting, item, signal) is compared across models: the setting is
the dataset, the signal the confidence method. Candidate ratings for the CA view come from a second file
(``--candidates``) with the columns of analysis/ace/candidates.py ``RATING_COLUMNS`` (dataset, item_id, candidate,
surface, producers, label, rater, method, signal); without it CA is skipped with a message.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import pandas as pd

from confgrid.analysis.ace.frame import ACEInputError
from confgrid.analysis.ace.tables import ace_tables
from confgrid.flows.analyze.read import AnalyzeInputError
from confgrid.flows.evaluate.ace import ace_frames
from confgrid.flows.store.run_store import write_frames

__all__ = ["DEFAULT_VIEWS", "read_candidates", "compare_models"]

#: Views of an analysis with a model column (ca is added when candidate ratings are given).
DEFAULT_VIEWS = ("raw", "ia", "da")


def read_candidates(path: str | Path) -> pd.DataFrame:
    """Read a candidate-ratings file (CSV, JSONL or Parquet); ``producers`` may be ``a|b`` text."""
    path = Path(path)
    if not path.is_file():
        raise AnalyzeInputError(f"--candidates {str(path)!r}: no such file")
    suffix = path.suffix.lower()
    if suffix == ".csv":
        df = pd.read_csv(path, dtype={"item_id": str})
    elif suffix in (".jsonl", ".ndjson"):
        df = pd.read_json(path, lines=True, dtype={"item_id": str})
    elif suffix in (".parquet", ".pq"):
        df = pd.read_parquet(path)
    else:
        raise AnalyzeInputError(f"--candidates {str(path)!r}: unsupported extension {suffix!r}; use .csv, .jsonl "
                                "or .parquet")
    return df


def compare_models(rows: pd.DataFrame, out_dir: Path, *, views: Sequence[str] | None, pairs, candidates,
                   n_resamples: int, seed: int, n_bins: int, ia_strata: int | None = None):
    """Run the comparison on checked input rows with ``model`` and ``dataset`` (``InputRows.objects``); write
    ``OUT/ace_*``. Returns the ACETables, None if fewer than two models; AnalyzeInputError (the ACE layer's message)
    for a bad pair, view or candidate table."""
    if rows["model"].nunique() < 2:
        return None
    ace_in = pd.DataFrame({"model": rows["model"], "dataset": rows["dataset"], "method": rows["signal"],
                           "item_id": rows["item_id"], "signal": rows["confidence"], "correct": rows["correct"]})
    views = list(views) if views is not None else [*DEFAULT_VIEWS, *(["ca"] if candidates is not None else [])]
    try:
        tables = ace_tables(ace_in, candidates if "ca" in views else None, pairs=pairs, views=views,
                            n_bootstrap=n_resamples, seed=seed, n_bins=n_bins, ia_strata=ia_strata)
    except ACEInputError as exc:
        raise AnalyzeInputError(f"comparison across models: {exc}") from None
    write_frames(ace_frames(tables), out_dir)
    return tables
