"""Fixtures of the executor's tests: a state record with its plan and store, and no Ray."""

from __future__ import annotations

import pandas as pd
import pytest
from tqdm.auto import tqdm

from confgrid.flows.execute.capacity import NodeWatch
from confgrid.flows.execute.state import ExecState
from confgrid.flows.plan.grid_plan import GridPlan
from confgrid.flows.runner import _load_items
from confgrid.flows.spec.grid import parse_grid
from confgrid.flows.store.run_store import RunStore


@pytest.fixture
def make_state(tmp_path):
    """``make_state(grid, **fields) -> ExecState`` (flows/execute/state.py) for a grid dict: its plan, a store in
    ``tmp_path / "run"``, tables built empty, a silent progress bar and a node table that lists no node."""
    def make(grid: dict, **fields) -> ExecState:
        spec = parse_grid(grid)
        plan = GridPlan(spec, {d.name: _load_items(d) for d in spec.datasets})
        return ExecState(spec=spec, store=RunStore(tmp_path / "run"), plan=plan, build=lambda sh, outs: pd.DataFrame(),
                         nodes=NodeWatch(read=list), bar=tqdm(total=0, disable=True), **fields)

    return make
