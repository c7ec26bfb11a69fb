"""LifeEval items, the dataset adapter ``lifeeval`` and the correctness rule ``lifeeval`` (study 002, 4.5 and F.6).

The life-table arithmetic (distribution of the age at death, windows, MAS) is in :mod:`confgrid.protocols.lifeeval`;
this module turns it into :class:`~confgrid.protocols.items.Item` records and grades answers.

* Items: sex x minimum age x radius (default 2 x 101 x 4 = 808), asked in confgrid's wording of Appendix F.6
  (:func:`generate_items`).
* Adapter ``lifeeval`` (registered in :mod:`confgrid.protocols.datasets`): ``source`` is a folder of SSA
  ``PerLifeTables_<sex>_*.csv`` files (the bundled one by default); its parameters (:class:`LifeEvalParams`) come from
  a grid's ``datasets[].params``.
* Rule ``lifeeval`` (registered in :mod:`confgrid.protocols.correctness`): the true probability of the answer's
  integer guess, a graded correctness in [0, 1] (:func:`score_answer`).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Annotated, Literal, NamedTuple

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, StrictInt, ValidationInfo, field_validator, model_validator

from confgrid.protocols.items import Item
from confgrid.protocols.lifeeval import (
    DEFAULT_MIN_AGES,
    DEFAULT_RADII,
    SEXES,
    Window,
    death_distribution,
    item_rows,
    load_table,
    resolve_table_dir,
    true_probability,
)

__all__ = ["AgeParse", "LifeEvalParams", "generate_items", "lifeeval_adapter", "parse_age", "score_answer"]

_SEX_WORDS = {"M": ("male", "he"), "F": ("female", "she")}


# ----------------------------------------------------------------------------- items


def _question(sex: str, min_age: int, radius: int) -> str:
    noun, pron = _SEX_WORDS[sex]
    years = "year" if min_age == 1 else "years"
    within = "1 year" if radius == 1 else f"{radius} years"
    return (f"Given that an American {noun} has lived at least {min_age} {years}, estimate how old {pron} will be "
            f"when {pron} dies. How certain are you that your answer is within {within} of the true value?")


def generate_items(year: int, *, window: Window = "inclusive", sexes: Sequence[str] = SEXES,
                   min_ages: Sequence[int] = DEFAULT_MIN_AGES, radii: Sequence[int] = DEFAULT_RADII,
                   table_dir: str | Path | None = None, dataset_name: str = "lifeeval") -> list[Item]:
    """LifeEval items (study 002 section 4.5; wording after Appendix F.6).

    Question: "Given that an American male has lived at least 25 years, estimate how old he will be when he dies. How
    certain are you that your answer is within 5 years of the true value?" (``year``/``years`` agree with the number;
    "female"/"she" for F). ``item_id`` = ``lifeeval-<sex>-<min_age>-r<radius>``, the same for every year and window
    (the question does not depend on them, so generations are reused across years). ``gold_answers`` = ``canonical`` =
    ``aliases`` = ``(str(best_guess),)``. Metadata (strings): ``sex``, ``min_age``, ``radius``, ``year``, ``window``,
    ``best_guess``, ``mas`` (``repr`` of the float, exact round trip), ``category`` (``"radius 5"``), ``table``
    (``"bundled"`` or the absolute table folder), read by :func:`score_answer`.

    The item grid is ``sexes x min_ages x radii``, in this order (sex outermost, radius innermost); ``table_dir`` is a
    folder of SSA-format tables (None: the bundled 2020 Trustees Report table). Raises ``ValueError`` as
    :func:`confgrid.protocols.lifeeval.item_rows` (year outside the table, unknown sex or window, minimum age outside
    the table, radius < 1).
    """
    resolved = resolve_table_dir(table_dir)
    table = "bundled" if resolved == resolve_table_dir(None) else resolved
    items = []
    for row in item_rows(year, window=window, sexes=sexes, min_ages=min_ages, radii=radii, table_dir=resolved):
        gold = str(row.best_guess)
        items.append(Item(
            item_id=f"lifeeval-{row.sex}-{row.min_age}-r{row.radius}",
            dataset=dataset_name,
            question=_question(row.sex, row.min_age, row.radius),
            gold_answers=(gold,),
            canonical=gold,
            aliases=(gold,),
            metadata={"sex": row.sex, "min_age": str(row.min_age), "radius": str(row.radius), "year": str(int(year)),
                      "window": window, "best_guess": gold, "mas": repr(row.mas),
                      "category": f"radius {row.radius}", "table": table},
        ))
    return items


# ----------------------------------------------------------------------------- adapter


class LifeEvalParams(BaseModel):
    """Parameters of the ``lifeeval`` dataset adapter: a grid's ``datasets[].params``.

    Validated with the table folder as context (``model_validate(params, context={"source": folder})``): the year must
    be in the table and the minimum ages within its ages. Without a ``source`` only types and ranges are checked.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    year: StrictInt = Field(description="Calendar year of the period life table (bundled: 1900-2095).")
    window: Literal["inclusive", "official"] = Field(
        "inclusive", description="'inclusive': |D - g| <= r (2r + 1 ages); 'official': floor(g - r) <= D < g + r (2r ages).")
    sexes: tuple[Literal["M", "F"], ...] = Field(SEXES, min_length=1, description="Sexes asked about, in order.")
    min_ages: tuple[Annotated[StrictInt, Field(ge=0)], ...] = Field(
        DEFAULT_MIN_AGES, min_length=1, description="Minimum ages (years), at most the table's last age (119).")
    radii: tuple[Annotated[StrictInt, Field(ge=1)], ...] = Field(
        DEFAULT_RADII, min_length=1, description="Radii in years, each >= 1.")

    @field_validator("sexes", "min_ages", "radii")
    @classmethod
    def _distinct(cls, v: tuple, info: ValidationInfo) -> tuple:
        if len(set(v)) != len(v):
            raise ValueError(f"{info.field_name} must be distinct; received {list(v)}")
        return v

    @model_validator(mode="after")
    def _in_table(self, info: ValidationInfo) -> LifeEvalParams:
        source = (info.context or {}).get("source")
        if source is None:
            return self
        if not Path(source).expanduser().is_dir():
            raise ValueError(f"path {str(source)!r} is not a folder of PerLifeTables_<sex>_*.csv life tables")
        for sex in self.sexes:
            try:
                table = load_table(self.year, sex, source)
            except OSError as exc:
                raise ValueError(str(exc)) from None
            over = [a for a in self.min_ages if a > table.last_age]
            if over:
                raise ValueError(f"min_ages {over} exceed the table's last age {table.last_age}")
        return self


def lifeeval_adapter(source: str, *, split: str = "test", dataset_name: str = "lifeeval",
                     hub_config: str | None = None, year: int, window: Window = "inclusive",
                     sexes: Sequence[str] = SEXES, min_ages: Sequence[int] = DEFAULT_MIN_AGES,
                     radii: Sequence[int] = DEFAULT_RADII) -> list[Item]:
    """The dataset adapter ``lifeeval``: LifeEval items from a folder of period life tables.

    ``source`` is a folder of ``PerLifeTables_<sex>_*.csv`` files in the SSA format (the bundled one,
    ``protocols/data/ssa_life_tables``, by default; ``FileNotFoundError`` if it is not a folder); ``split`` and
    ``hub_config`` are ignored (a life table has no splits); the rest are :class:`LifeEvalParams`, passed by
    :func:`confgrid.protocols.datasets.load_items` from ``params``. Raises ``ValueError`` as :func:`generate_items`.
    """
    path = Path(source).expanduser()
    if not path.is_dir():
        raise FileNotFoundError(f"path={source!r}: the lifeeval adapter reads a folder of PerLifeTables_<sex>_*.csv "
                                "files (path: bundled for the SSA 2020 Trustees Report table)")
    return generate_items(year, window=window, sexes=tuple(sexes), min_ages=tuple(min_ages), radii=tuple(radii),
                          table_dir=path, dataset_name=dataset_name)


# ----------------------------------------------------------------------------- grading

_NUMBER = re.compile(r"\d+(?:\.\d+)?")


class AgeParse(NamedTuple):
    """An age read from an answer: ``age`` (int, None unless ``status == "ok"``) and ``status``.

    ``status``: ``"ok"``, ``"no_number"`` or ``"several_numbers"``.
    """

    age: int | None
    status: str


def parse_age(answer: str | None) -> AgeParse:
    """Read the guessed age at death from an answer text (never raises).

    The answer must hold exactly one number: ASCII digits with an optional decimal part (``"78"``, ``"78 years"``,
    ``"**78**"``, ``"about 78."``, ``"78.0"``). A decimal rounds to the nearest integer, halves up (``"78.5"`` -> 79,
    ``"78.4"`` -> 78). A sign is ignored (``"-5"`` reads 5). No number (``"old age"``, ``""``, None) gives
    ``"no_number"``; two or more (``"75-80"``, ``"between 75 and 80"``, ``"1,000"``, ``"1e5"``) give
    ``"several_numbers"``: a range is not an integer guess.

    Examples
    --------
    >>> parse_age("About 78.5 years.")
    AgeParse(age=79, status='ok')
    >>> parse_age("75-80")
    AgeParse(age=None, status='several_numbers')
    """
    found = _NUMBER.findall(answer or "")
    if not found:
        return AgeParse(None, "no_number")
    if len(found) > 1:
        return AgeParse(None, "several_numbers")
    return AgeParse(int(Decimal(found[0]).quantize(Decimal(1), rounding=ROUND_HALF_UP)), "ok")


_RULE_KEYS = ("sex", "min_age", "radius", "year", "window")


@functools.lru_cache(maxsize=4096)
def _item_distribution(table: str, year: int, sex: str, min_age: int) -> np.ndarray:
    t = load_table(year, sex, None if table == "bundled" else table)
    dist = death_distribution(t.q, min_age)
    dist.setflags(write=False)
    return dist


def score_answer(answer: str | None, item: Item) -> float:
    """The correctness rule ``lifeeval``: the true probability of the answer's guess.

    ``P(D in window(guess, radius) | D >= min_age)`` in [0, 1] for the age :func:`parse_age` reads from ``answer``
    (graded correctness; the item's ``best_guess`` scores its ``mas`` exactly); 0.0 when no single number can be read;
    NaN for an item without LifeEval metadata (``sex``, ``min_age``, ``radius``, ``year``, ``window``, optionally
    ``table``; see :func:`generate_items`).

    Raises ``ValueError`` if the metadata is present but malformed (non-integer year, age or radius; a year the table
    does not cover; an unknown window).
    """
    meta = item.metadata
    if not all(k in meta for k in _RULE_KEYS):
        return float("nan")
    parsed = parse_age(answer)
    if parsed.age is None:
        return 0.0
    try:
        year, min_age, radius = int(meta["year"]), int(meta["min_age"]), int(meta["radius"])
    except ValueError:
        raise ValueError(f"item {item.item_id!r}: LifeEval metadata year/min_age/radius must be integers; received "
                         f"{meta['year']!r}/{meta['min_age']!r}/{meta['radius']!r}") from None
    dist = _item_distribution(meta.get("table", "bundled"), year, meta["sex"], min_age)
    return true_probability(dist, parsed.age, radius, meta["window"])  # type: ignore[arg-type]
