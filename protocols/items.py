"""The one item schema every dataset adapter produces.

An item is one question with its gold answers. Adapters (``protocols/datasets.py``, ``protocols/adapters_qa.py``,
``protocols/adapters_mc.py``) map each benchmark's own columns onto this schema; every later stage reads only these
fields.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

import pyarrow as pa

__all__ = ["Item", "ITEM_SCHEMA", "items_to_table", "items_from_table"]


@dataclass(frozen=True)
class Item:
    """One question with its gold answers.

    Attributes
    ----------
    item_id : str
        Identifier, unique within its dataset and stable across runs (the upstream id where the benchmark has one,
        else ``<dataset>-<row>``).
    dataset : str
        Name of the dataset entry in the grid that produced the item.
    question : str
        The question text, as asked (options are never appended here).
    gold_answers : tuple of str
        Every accepted answer. Correctness rules compare against these.
    canonical : str
        The canonical reference answer (TriviaQA ``answer.value``, TruthfulQA best answer, MMLU correct option text,
        else the first gold answer).
    aliases : tuple of str
        Alternative spellings as released (TriviaQA ``aliases`` or the flat alias list); equals ``gold_answers`` where
        a benchmark has no aliases.
    normalized_aliases : tuple of str
        TriviaQA ``normalized_aliases`` where released, else empty.
    incorrect_answers : tuple of str
        Wrong answers listed by the benchmark (TruthfulQA incorrect answers, MMLU wrong options), else empty.
    options : tuple of str
        Multiple-choice options in their listed order, else empty.
    gold_letter : str or None
        Letter of the correct option (``"A"``...), or None without options.
    metadata : dict of str to str
        Anything else worth keeping (subject, category, source row).
    """

    item_id: str
    dataset: str
    question: str
    gold_answers: tuple[str, ...]
    canonical: str
    aliases: tuple[str, ...] = ()
    normalized_aliases: tuple[str, ...] = ()
    incorrect_answers: tuple[str, ...] = ()
    options: tuple[str, ...] = ()
    gold_letter: str | None = None
    metadata: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.item_id:
            raise ValueError("Item.item_id must be a non-empty string")
        if not self.question.strip():
            raise ValueError(f"Item {self.item_id!r}: question is empty")
        if not self.gold_answers:
            raise ValueError(f"Item {self.item_id!r}: gold_answers is empty; every item needs at least one")


ITEM_SCHEMA = pa.schema(
    [
        ("item_id", pa.string()),
        ("dataset", pa.string()),
        ("question", pa.string()),
        ("gold_answers", pa.list_(pa.string())),
        ("canonical", pa.string()),
        ("aliases", pa.list_(pa.string())),
        ("normalized_aliases", pa.list_(pa.string())),
        ("incorrect_answers", pa.list_(pa.string())),
        ("options", pa.list_(pa.string())),
        ("gold_letter", pa.string()),
        ("metadata", pa.string()),  # JSON object
    ]
)


def items_to_table(items: list[Item]) -> pa.Table:
    """Items as an Arrow table with :data:`ITEM_SCHEMA` (metadata as a JSON string)."""
    rows = []
    for it in items:
        d = asdict(it)
        d["metadata"] = json.dumps(it.metadata, sort_keys=True)
        for k in ("gold_answers", "aliases", "normalized_aliases", "incorrect_answers", "options"):
            d[k] = list(d[k])
        rows.append(d)
    return pa.Table.from_pylist(rows, schema=ITEM_SCHEMA)


def items_from_table(table: pa.Table) -> list[Item]:
    """Inverse of :func:`items_to_table`."""
    out = []
    for d in table.to_pylist():
        d["metadata"] = json.loads(d["metadata"] or "{}")
        for k in ("gold_answers", "aliases", "normalized_aliases", "incorrect_answers", "options"):
            d[k] = tuple(d[k] or ())
        out.append(Item(**d))
    return out
