"""Early stopping's section of the report: why each setting stopped (the ``stop_reasons`` study,
flows/studies/stopping.py; results/stopping)."""

from __future__ import annotations

from .html import _table
from .registry import register_section
from .run_tables import RunTables

__all__ = ["stopping"]


@register_section("stop_reasons", "Early stopping: why each setting stopped", anchor="stopping", shows=("stopping",))
def stopping(tables: RunTables) -> str:
    """Per setting, why it stopped, after how many rounds and items, and the numbers that decided; nothing (no
    section) without early stopping."""
    stopping = tables.get("stopping")
    if stopping is None or not len(stopping):
        return ""
    cols = [c for c in ("model", "dataset", "reason", "rounds", "items", "items_total", "n_gaps", "n_resolved",
                        "detail") if c in stopping]
    return (_table(stopping[cols], 500, "results/stopping.parquet")
            + '<p class="note">resolved: every conclusion gap of the setting has an interval excluding 0; '
            "budget_insufficient: the sample-size planner needs more items than the setting has to resolve an "
            "unresolved gap at its observed size; exhausted: every item ran; failed: a shard of the setting failed. "
            "The results above are computed on the items that ran (results/stopping.csv has the deciding gap, "
            "n_required and budget; docs, \"Stopping a setting once its conclusions are resolved\").</p>")
