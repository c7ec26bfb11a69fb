"""The building blocks of every grid section (flows/spec/grid.py): the strict base model, name checks, the error.

Split from flows/spec/grid.py so that the sections can live in more than one file
(flows/spec/methods.py) without an import cycle.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from confgrid.actors.backends import BACKENDS
from confgrid.analysis.conventions import CONVENTIONS
from confgrid.analysis.registry import METRICS
from confgrid.errors import FieldsPickle
from confgrid.protocols.aggregation import AGGREGATIONS
from confgrid.protocols.contexts import CONTEXTS
from confgrid.protocols.correctness import RULES
from confgrid.protocols.datasets import registered_adapters
from confgrid.protocols.prompts import PROMPTS

__all__ = ["LABEL_PATTERN", "GridSpecError"]


#: Names are labels (models, datasets, answer sets, the grid): they become folder names, MLflow run names and
#: table values, so no path separators, no leading dot.
LABEL_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"


class GridSpecError(FieldsPickle, ValueError):
    """An invalid grid. ``problems`` lists one ``(field, message)`` per error."""

    def __init__(self, problems: list[tuple[str, str]], source: str = "grid") -> None:
        self.problems = problems
        lines = [f"invalid {source}: {len(problems)} problem(s)"]
        lines += [f"  - {field}: {msg}" for field, msg in problems]
        super().__init__("\n".join(lines))


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, str_strip_whitespace=True)


def _choices_error(kind: str, value: str, choices: list[str] | tuple[str, ...]) -> ValueError:
    return ValueError(f"unknown {kind} {value!r}; allowed: {', '.join(sorted(choices))}")


def _registry(kind: str) -> Any:
    """The :class:`~confgrid.registry.Registry` a grid name is checked against.

    ``kind`` is the registry's own :attr:`~confgrid.registry.Registry.kind`, so
    :func:`_choices_error` reads like the registry's :class:`~confgrid.registry.UnknownNameError`.
    """
    if kind == "dataset adapter":
        return registered_adapters()
    return {"backend": BACKENDS, "prompt": PROMPTS, "scoring context": CONTEXTS, "correctness rule": RULES,
            "token aggregation": AGGREGATIONS, "ECE convention": CONVENTIONS}.get(kind, METRICS)


def _known(kind: str, values, *, distinct: bool = False):
    """Check every name in ``values`` (a str, a sequence or None) against its registry; return ``values``.

    Raises
    ------
    ValueError
        Naming the unknown value and listing the allowed ones, or a repeated value when ``distinct``.
    """
    names = [values] if isinstance(values, str) else list(values or ())
    reg = _registry(kind)
    for v in names:
        if v not in reg:
            raise _choices_error(kind, v, reg.names())
    if distinct and len(set(names)) != len(names):
        raise ValueError(f"{kind}s must be distinct; received {names}")
    return values
