"""Parameters of dataset adapters: a grid's ``datasets[].params``, checked before anything is loaded.

An adapter that takes parameters declares them as a pydantic model (``extra="forbid"``) when it is registered
(:func:`confgrid.protocols.datasets.register_adapter` with ``params=``); the model is kept in :data:`ADAPTER_PARAMS`.
Every other adapter takes none, and any parameter given to it is an error. The grid (flows/spec/grid.py) and
:func:`confgrid.protocols.datasets.load_items` both check through :func:`check_params`, so a typo fails at grid
validation with the allowed names listed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ValidationError

from confgrid.registry import Registry

__all__ = ["ADAPTER_PARAMS", "check_params"]

#: The parameter model of each adapter that takes ``params``, by adapter name (the one Registry class).
ADAPTER_PARAMS: Registry[type[BaseModel]] = Registry("adapter parameter model")


def check_params(adapter: str, params: Mapping[str, Any] | None, source: str | None = None) -> dict[str, Any]:
    """Validate the ``params`` of a dataset adapter; return them coerced (the keys given, as JSON values).

    Parameters
    ----------
    adapter : str
        Adapter name (its model is looked up in :data:`ADAPTER_PARAMS`).
    params : mapping or None
        Parameter names to values.
    source : str or None
        The dataset's path, given to the model as validation context (``context={"source": source}``): ``lifeeval``
        checks the year against that table. None: types and ranges only.

    Returns
    -------
    dict
        The given parameters after validation, as JSON values (lists for tuples). The adapter's defaults are not
        added: a grid keeps what it said, and the adapter applies its defaults to the rest.

    Raises
    ------
    ValueError
        One message listing every problem: an unknown parameter name (with the allowed names), a wrong type or range
        (the parameter and the value received), a missing required parameter, a check of the model against ``source``;
        or any parameter at all for an adapter that takes none.
    """
    given = dict(params or {})
    model = ADAPTER_PARAMS.get(adapter) if adapter in ADAPTER_PARAMS else None
    if model is None:
        if given:
            raise ValueError(f"adapter {adapter!r} takes no params; received {sorted(given)} (adapters with params: "
                             f"{', '.join(sorted(ADAPTER_PARAMS)) or 'none'})")
        return {}
    try:
        valid = model.model_validate(given, context={"source": source})
    except ValidationError as exc:
        allowed = ", ".join(sorted(model.model_fields))
        problems = []
        for e in exc.errors():
            where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in e["loc"]).lstrip(".")
            msg = e["msg"].removeprefix("Value error, ")
            if e["type"] == "extra_forbidden":
                msg = f"unknown parameter; allowed: {allowed}"
            elif e["type"] not in ("missing", "value_error"):  # a value_error message names its value itself
                msg += f" (received {e['input']!r})"
            problems.append(f"{where}: {msg}" if where else msg)
        raise ValueError(f"params of adapter {adapter!r}: " + "; ".join(problems)) from None
    return valid.model_dump(mode="json", exclude_unset=True)
