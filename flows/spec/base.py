"""The building blocks of every grid section (flows/spec/grid.py): the strict base model, name checks, the error."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, WithJsonSchema

from confgrid.actors.backends import BACKENDS
from confgrid.analysis.conventions import CONVENTIONS
from confgrid.analysis.registry import METRICS
from confgrid.errors import FieldsPickle
from confgrid.protocols.aggregation import AGGREGATIONS
from confgrid.protocols.contexts import CONTEXTS
from confgrid.protocols.correctness import RULES
from confgrid.protocols.datasets import registered_adapters
from confgrid.protocols.item_formats import ITEM_FORMATS
from confgrid.protocols.prompts import PROMPTS

__all__ = ["LABEL_PATTERN", "GridSpecError", "Backend", "Adapter", "Prompt", "Rule", "Rules", "Contexts",
           "DistinctContexts", "Aggregations", "Conventions", "ItemFormatName"]


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


def _section(spec: type[_Spec], description: str) -> Any:
    """A grid section's field: its defaults unless given."""
    return Field(default_factory=spec, description=description)


def _choices_error(kind: str, value: str, choices: list[str] | tuple[str, ...]) -> ValueError:
    return ValueError(f"unknown {kind} {value!r}; allowed: {', '.join(sorted(choices))}")


def _registry(kind: str) -> Any:
    """The :class:`~confgrid.registry.Registry` a grid name is checked against.

    ``kind`` is the registry's own :attr:`~confgrid.registry.Registry.kind`, so :func:`_choices_error` reads like the
    registry's :class:`~confgrid.registry.UnknownNameError`.
    """
    if kind == "dataset adapter":
        return registered_adapters()
    return {"backend": BACKENDS, "prompt": PROMPTS, "scoring context": CONTEXTS, "correctness rule": RULES,
            "token aggregation": AGGREGATIONS, "ECE convention": CONVENTIONS,
            "item format": ITEM_FORMATS}.get(kind, METRICS)


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


def _names(kind: str, distinct: bool = False) -> AfterValidator:
    """The check of a field whose value names entries of the ``kind`` registry (:func:`_known`)."""
    return AfterValidator(lambda v: _known(kind, v, distinct=distinct))


#: Field types checked against a registry (an unknown name lists the allowed ones).
Backend = Annotated[str, _names("backend")]
Adapter = Annotated[str, _names("dataset adapter")]
Prompt = Annotated[str, _names("prompt")]
Rule = Annotated[str, _names("correctness rule")]
Rules = Annotated[tuple[str, ...], _names("correctness rule")]
Contexts = Annotated[tuple[str, ...], _names("scoring context")]
DistinctContexts = Annotated[tuple[str, ...], _names("scoring context", distinct=True)]
Aggregations = Annotated[tuple[str, ...], _names("token aggregation", distinct=True)]
Conventions = Annotated[tuple[str, ...], _names("ECE convention", distinct=True)]
#: An item format; the schema lists the registered ones (a closed choice an editor can check).
ItemFormatName = Annotated[str, _names("item format"), WithJsonSchema({"enum": ITEM_FORMATS.names(), "type": "string"})]
