"""Method stage ``hidden``: the last prompt token's hidden states, the features of linear probes (study 004).

Rows: ``MethodRow``; engine call ``hidden_states``; table ``tables/hidden_states.parquet`` (layers, hidden_size,
states flattened (n_layers * hidden_size,) float32, mean_state, prompt_tokens); no signal rows of its own (the
capability study fits its probes on them).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from confgrid.actors.calls import CallParams
from confgrid.flows.stages.base import Stage, prompted, register_stage
from confgrid.flows.stages.method_base import CapabilityRole, MethodReader, method_columns, register_reader

__all__: list[str] = []


def _table(plan: Any, shard: Any, outputs: tuple[Any, ...]) -> pd.DataFrame:
    return pd.DataFrame({**method_columns(shard), "layers": [list(o.layers) for o in outputs],
                         "hidden_size": [int(o.states.shape[1]) for o in outputs],
                         "states": [np.ascontiguousarray(o.states, dtype=np.float32).ravel() for o in outputs],
                         "mean_state": [np.asarray(o.states, dtype=np.float32).mean(axis=0) for o in outputs],
                         "prompt_tokens": [o.prompt_tokens for o in outputs]})


def _method_call(method: Any, spec: Any, n_letters: int) -> tuple[dict[str, Any], CallParams]:
    layers = tuple(method.layers) if method.layers is not None else None
    return ({"layers": list(layers) if layers is not None else "all"},
            CallParams(max_new_tokens=1, top_logprobs=method.top_logprobs, layers=layers))


register_stage(Stage("hidden", "hidden_states", request=prompted, table=_table, method_call=_method_call,
                     fields=("layers",), backends=("transformers",)))
register_reader(MethodReader("features", "hidden",
                             lambda plan, method, model, dataset, table, out: out["hidden"].append(table),
                             signals=(), rated=None, capability=CapabilityRole("probe", probe=True)))
