"""LifeEval: age-at-death questions scored against a period life table (study 002, section 4.5, Appendix F.6).

A LifeEval item asks: given that an American of sex ``s`` has lived at least ``a`` years, at what (integer) age will
they die, and how likely is the true age at death within ``r`` years of that guess? The truth is a distribution, not
one answer: the score of a guess ``g`` is the probability, under the life table, that the age at death lies in the
window around ``g``. The largest such probability over guesses is the item's Maximum Achievable Score (MAS); study 002
uses ``1 - MAS`` as the item's difficulty (section 4.5).

Conventions (each one a choice a reader could make differently):

* **Ages and q_x.** The table lists ``q_x`` for consecutive integer ages ``x = 0..X`` (``X = 119`` in the SSA tables):
  the probability that a person alive at exact age ``x`` dies before exact age ``x + 1``. The age at death ``D`` is
  the integer age in completed years at death ("dies at 78" = dies between exact ages 78 and 79), so
  ``P(D = x | D >= x) = q_x``.
* **Conditional distribution.** For a minimum age ``a``: ``S_a(x) = P(D >= x | D >= a) = prod_{i=a}^{x-1} (1 - q_i)``
  (``S_a(a) = 1``), ``P(D = x | D >= a) = S_a(x) q_x`` for ``a <= x < X``, and ``0`` for ``x < a``.
* **Last age.** Deaths at ages the table does not list fall at its last age: ``P(D = X | D >= a) = S_a(X)`` whatever
  ``q_X`` says, so the distribution sums to 1.
* **Windows.** ``"inclusive"`` (the default): ``|D - g| <= r``, the ``2r + 1`` ages ``g - r .. g + r``.
  ``"official"``: the window of the study's released code (``compute_prob`` in ``combine.py`` of
  github.com/NoamMichael/Comparing-Confidence-in-LLMs: ``lo = floor(g - r)``, ``hi = ceil(g + r)`` exclusive), i.e.
  the ``2r`` ages ``g - r .. g + r - 1`` for an integer guess (not centred on the guess). Ages of the window outside
  ``a..X`` carry no mass. Both windows use the last-age convention above (that code sums ``S_a(x) q_x`` up to the last
  age and does not add the mass beyond it), and guesses are integers here (the rule rounds first).
* **MAS and best guess.** MAS is the largest true probability over integer guesses; the best guess is the smallest
  guess attaining it (exact float equality; windows that cover the same ages of ``a..X`` sum the same numbers and tie
  exactly). The search runs over ``a..X``: a guess below ``a`` (above ``X``) covers a subset of what ``a`` (``X``)
  covers, so it never scores higher, and MAS is the maximum over all integers.
* **Years.** The bundled table is the SSA period life table of the 2020 Trustees Report
  (``protocols/data/ssa_life_tables``): historical 1900-2017 (``*_Hist_*``), projected 2018-2095 under the
  intermediate assumptions (``*_Alt2_*``). A year is one row block of one file; no interpolation.

The items, the dataset adapter ``lifeeval`` and the correctness rule ``lifeeval`` are in
:mod:`confgrid.protocols.lifeeval_items`.

Examples
--------
>>> import numpy as np
>>> q = np.array([0.5, 0.5, 0.5])          # ages 0, 1, 2 (the last age absorbs the rest)
>>> death_distribution(q, 0).tolist()      # P(D=0), P(D=1), P(D=2)
[0.5, 0.25, 0.25]
>>> true_probability(death_distribution(q, 0), guess=1, radius=1)
1.0
>>> true_probability(death_distribution(q, 0), guess=1, radius=1, window="official")  # ages 0..1
0.75
>>> best_guess(death_distribution(q, 1), radius=1, min_age=1)  # ages 1, 2 each 0.5
BestGuess(guess=1, mas=1.0)
"""

from __future__ import annotations

import csv
import functools
import importlib.resources
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, NamedTuple

import numpy as np

__all__ = [
    "DEFAULT_RADII",
    "DEFAULT_MIN_AGES",
    "SEXES",
    "WINDOWS",
    "BestGuess",
    "LifeTable",
    "LifeEvalRow",
    "best_guess",
    "bundled_table_dir",
    "death_distribution",
    "item_rows",
    "load_table",
    "resolve_table_dir",
    "table_years",
    "true_probability",
    "window_ages",
    "window_probabilities",
]

#: Sexes of the SSA tables (file names ``PerLifeTables_<sex>_*.csv``).
SEXES: tuple[str, ...] = ("M", "F")
#: Radii of study 002 section 4.5 (years).
DEFAULT_RADII: tuple[int, ...] = (1, 5, 10, 20)
#: Minimum ages of the item set: 0..100.
DEFAULT_MIN_AGES: tuple[int, ...] = tuple(range(101))
#: Window conventions (see the module docstring).
WINDOWS: tuple[str, ...] = ("inclusive", "official")
Window = Literal["inclusive", "official"]

_HEADER = ("Year", "x", "q(x)")


def bundled_table_dir() -> Path:
    """Folder of the bundled SSA period life tables (package data of ``confgrid.protocols``)."""
    return Path(str(importlib.resources.files("confgrid.protocols").joinpath("data", "ssa_life_tables")))


# ----------------------------------------------------------------------------- tables


@dataclass(frozen=True)
class LifeTable:
    """One period life table: one calendar year, one sex.

    Attributes
    ----------
    year : int
    sex : str
        ``"M"`` or ``"F"``.
    q : numpy.ndarray, shape (X + 1,), float64
        ``q[x]`` = probability that a person alive at exact age ``x`` dies before ``x + 1``, in [0, 1], for ages
        ``x = 0..X``.
    source : str
        File name the rows came from.
    """

    year: int
    sex: str
    q: np.ndarray
    source: str

    @property
    def last_age(self) -> int:
        """The last listed age ``X`` (it absorbs every later death)."""
        return len(self.q) - 1


def _read_file(path: Path) -> dict[int, np.ndarray]:
    """``{year: q array}`` of one SSA CSV (preamble lines, then a ``Year,x,q(x),...`` header)."""
    with open(path, newline="", encoding="utf-8-sig") as f:
        rows = list(csv.reader(f))
    start = next((i for i, r in enumerate(rows) if tuple(c.strip() for c in r[:3]) == _HEADER), None)
    if start is None:
        raise ValueError(f"life table {path.name!r}: no header line starting with {','.join(_HEADER)}")
    ages: dict[int, dict[int, float]] = {}
    for n, r in enumerate(rows[start + 1 :], start=start + 2):
        if not r or not "".join(r).strip():
            continue
        try:
            year, x, q = int(r[0]), int(r[1]), float(r[2])
        except (ValueError, IndexError):
            raise ValueError(f"life table {path.name!r} line {n}: expected integer Year, integer x and a number "
                             f"q(x); received {r[:3]}") from None
        if not 0.0 <= q <= 1.0:
            raise ValueError(f"life table {path.name!r} line {n}: q(x)={q!r} (year {year}, age {x}); allowed: [0, 1]")
        if x in ages.setdefault(year, {}):
            raise ValueError(f"life table {path.name!r} line {n}: age {x} of year {year} listed twice")
        ages[year][x] = q
    out = {}
    for year, by_age in ages.items():
        if sorted(by_age) != list(range(len(by_age))):
            raise ValueError(f"life table {path.name!r} year {year}: ages must run 0, 1, 2, ... without gaps; "
                             f"received {min(by_age)}..{max(by_age)} with {len(by_age)} ages")
        arr = np.array([by_age[x] for x in range(len(by_age))], dtype=np.float64)
        arr.setflags(write=False)
        out[year] = arr
    return out


@functools.lru_cache(maxsize=16)
def _sex_tables(table_dir: str, sex: str) -> dict[int, tuple[np.ndarray, str]]:
    """``{year: (q, file name)}`` over every ``PerLifeTables_<sex>_*.csv`` of ``table_dir`` (cached)."""
    files = sorted(Path(table_dir).glob(f"PerLifeTables_{sex}_*.csv"))
    if not files:
        raise FileNotFoundError(f"life table folder {table_dir!r}: no PerLifeTables_{sex}_*.csv file")
    out: dict[int, tuple[np.ndarray, str]] = {}
    for f in files:
        for year, q in _read_file(f).items():
            if year in out:
                raise ValueError(f"life table folder {table_dir!r}: year {year} ({sex}) is in both "
                                 f"{out[year][1]!r} and {f.name!r}")
            out[year] = (q, f.name)
    return out


def resolve_table_dir(table_dir: str | Path | None) -> str:
    """The absolute folder of a life table: ``table_dir`` resolved, or the bundled one for None."""
    return str((Path(table_dir).expanduser() if table_dir is not None else bundled_table_dir()).resolve())


def _check_sex(sex: str) -> None:
    if sex not in SEXES:
        raise ValueError(f"sex={sex!r}; allowed: {', '.join(SEXES)}")


def table_years(sex: str = "M", table_dir: str | Path | None = None) -> dict[str, tuple[int, int]]:
    """The years each file of a table folder covers, ``{file name: (first, last)}``.

    Raises ``ValueError`` for an unknown ``sex`` or a malformed file, ``FileNotFoundError`` if the folder has no
    ``PerLifeTables_<sex>_*.csv``.
    """
    _check_sex(sex)
    spans: dict[str, list[int]] = {}
    for year, (_, name) in _sex_tables(resolve_table_dir(table_dir), sex).items():
        spans.setdefault(name, []).append(year)
    return {name: (min(ys), max(ys)) for name, ys in sorted(spans.items(), key=lambda kv: min(kv[1]))}


def load_table(year: int, sex: str, table_dir: str | Path | None = None) -> LifeTable:
    """The life table of one calendar year and sex (``"M"``, ``"F"``).

    Bundled years: 1900-2017 historical, 2018-2095 projected. ``table_dir``: a folder of ``PerLifeTables_<sex>_*.csv``
    files in the SSA format; None is the bundled 2020 Trustees Report table.

    Raises ``ValueError`` on an unknown ``sex``, a year the table does not cover (the message names the year and each
    file's range), or a malformed table file; ``FileNotFoundError`` if the folder holds no table of that sex.
    """
    _check_sex(sex)
    if isinstance(year, bool) or not isinstance(year, (int, np.integer)):
        raise ValueError(f"year={year!r}: expected an integer calendar year")
    tables = _sex_tables(resolve_table_dir(table_dir), sex)
    if int(year) not in tables:
        spans = table_years(sex, table_dir)
        ranges = "; ".join(f"{a}-{b} ({name})" for name, (a, b) in spans.items())
        lo, hi = min(a for a, _ in spans.values()), max(b for _, b in spans.values())
        raise ValueError(f"year={year!r}: the life table covers {ranges}; allowed: {lo}-{hi}")
    q, name = tables[int(year)]
    return LifeTable(year=int(year), sex=sex, q=q, source=name)


# ----------------------------------------------------------------------------- probabilities


def death_distribution(q: np.ndarray, min_age: int) -> np.ndarray:
    """``P(D = x | D >= min_age)`` for ``x = 0..X`` from the ``q_x`` of a life table.

    Parameters
    ----------
    q : array_like, shape (X + 1,), float
        ``q[x]`` in [0, 1] for consecutive ages ``0..X``.
    min_age : int
        ``a`` in ``0..X``: the person is known to have lived at least ``a`` years.

    Returns
    -------
    numpy.ndarray, shape (X + 1,), float64
        Zero below ``a``; ``S_a(x) q_x`` for ``a <= x < X``; ``S_a(X)`` at the last age (it absorbs all remaining
        mass); sums to 1 up to rounding.

    Raises
    ------
    ValueError
        If ``q`` is not 1-D and non-empty with values in [0, 1], or ``min_age`` is not an integer in ``0..X``.
    """
    q = np.asarray(q, dtype=np.float64)
    if q.ndim != 1 or q.size == 0 or not np.all((q >= 0.0) & (q <= 1.0)):
        raise ValueError(f"q: expected a non-empty 1-D array of probabilities in [0, 1] (shape {q.shape})")
    last = q.size - 1
    if isinstance(min_age, bool) or not isinstance(min_age, (int, np.integer)) or not 0 <= min_age <= last:
        raise ValueError(f"min_age={min_age!r}: expected an integer age in 0..{last} (the table's ages)")
    a = int(min_age)
    surv = np.concatenate(([1.0], np.cumprod(1.0 - q[a:last])))  # S_a(a), ..., S_a(X)
    p = np.zeros(q.size)
    p[a:last] = surv[:-1] * q[a:last]
    p[last] = surv[-1]
    return p


def window_ages(guess: int, radius: int, window: Window = "inclusive") -> tuple[int, int]:
    """The ages ``lo..hi`` (both included) counted as "within ``radius`` of ``guess``".

    ``"inclusive"``: ``guess - radius .. guess + radius`` (2r + 1 ages); ``"official"``:
    ``floor(guess - radius) .. guess + radius - 1``, i.e. ``floor(g - r) <= D < g + r`` (2r ages).

    Raises ``ValueError`` if ``guess`` is not an integer, ``radius`` not an integer >= 1, or ``window`` unknown.
    """
    if isinstance(guess, bool) or not isinstance(guess, (int, np.integer)):
        raise ValueError(f"guess={guess!r}: expected an integer age")
    if isinstance(radius, bool) or not isinstance(radius, (int, np.integer)) or radius < 1:
        raise ValueError(f"radius={radius!r}: expected an integer number of years >= 1")
    if window == "inclusive":
        return int(guess) - int(radius), int(guess) + int(radius)
    if window == "official":
        return int(guess) - int(radius), int(guess) + int(radius) - 1
    raise ValueError(f"window={window!r}; allowed: {', '.join(WINDOWS)}")


def true_probability(dist: np.ndarray, guess: int, radius: int, window: Window = "inclusive") -> float:
    """``P(D in window(guess, radius))``: the true probability, in [0, 1], that a guess is within the radius.

    ``dist`` is ``P(D = x | D >= a)``, shape ``(X + 1,)`` (:func:`death_distribution`); ``guess`` any integer (ages
    outside ``0..X`` carry no mass); ``radius`` >= 1 years; ``window`` as :func:`window_ages`. Computed as a
    difference of prefix sums, like :func:`window_probabilities` (bit-identical to it for ``g`` in ``0..X``; absolute
    rounding error about 1e-16, clipped to [0, 1] so a window holding every age reads 1.0, not 1.0000000000000002).
    """
    lo, hi = window_ages(guess, radius, window)
    dist = np.asarray(dist, dtype=np.float64)
    lo, hi = max(lo, 0), min(hi, dist.size - 1)
    if lo > hi:
        return 0.0
    c = _prefix(dist)
    return float(np.clip(c[hi + 1] - c[lo], 0.0, 1.0))


def _prefix(dist: np.ndarray) -> np.ndarray:
    """``c[k] = sum(dist[:k])``, ``k = 0..X+1``. Zeros below ``a`` keep ``c`` exactly 0 there, so windows
    covering the same ages with mass give bit-identical differences (exact ties for :func:`best_guess`)."""
    return np.concatenate(([0.0], np.cumsum(dist)))


def window_probabilities(dist: np.ndarray, radius: int, window: Window = "inclusive") -> np.ndarray:
    """True probability of every guess ``g = 0..X`` at once, shape ``(X + 1,)``, float64, each clipped to [0, 1].

    Entry ``g`` is ``P(D in window(g, radius))``; windows that cover the same ages with mass give bit-identical
    values.
    """
    dist = np.asarray(dist, dtype=np.float64)
    g = np.arange(dist.size)
    lo, hi = window_ages(0, radius, window)  # offsets of the window around a guess
    c = _prefix(dist)
    lo_i = np.clip(g + lo, 0, dist.size)
    hi_i = np.clip(g + hi + 1, 0, dist.size)
    return np.clip(np.where(hi_i > lo_i, c[hi_i] - c[lo_i], 0.0), 0.0, 1.0)


class BestGuess(NamedTuple):
    """The best integer guess of an item and its Maximum Achievable Score (probability in [0, 1])."""

    guess: int
    mas: float


def best_guess(dist: np.ndarray, radius: int, min_age: int, window: Window = "inclusive") -> BestGuess:
    """MAS and the smallest guess in ``min_age..X`` that attains it (study 002 section 4.5).

    ``dist`` is ``P(D = x | D >= min_age)``, shape ``(X + 1,)``; ``radius`` >= 1 years. The search runs over
    ``min_age..X`` (the module docstring says why MAS is the maximum over every integer).
    """
    probs = window_probabilities(dist, radius, window)[int(min_age) :]
    k = int(np.argmax(probs))  # first maximum = smallest guess on exact ties
    return BestGuess(guess=int(min_age) + k, mas=float(probs[k]))


# ----------------------------------------------------------------------------- the item set


@dataclass(frozen=True)
class LifeEvalRow:
    """One LifeEval item as numbers: sex, minimum age, radius, best guess and MAS (in [0, 1])."""

    sex: str
    min_age: int
    radius: int
    best_guess: int
    mas: float


def _check_values(name: str, values: Sequence[int], lo: int, hi: int | None) -> tuple[int, ...]:
    vals = tuple(values)
    bad = [v for v in vals if isinstance(v, bool) or not isinstance(v, (int, np.integer))
           or v < lo or (hi is not None and v > hi)]
    if not vals or bad or len(set(vals)) != len(vals):
        what = f"integers in {lo}..{hi}" if hi is not None else f"integers >= {lo}"
        raise ValueError(f"{name}={list(vals)!r}: expected distinct {what}, at least one"
                         + (f" (bad: {bad})" if bad else ""))
    return tuple(int(v) for v in vals)


def item_rows(year: int, *, window: Window = "inclusive", sexes: Sequence[str] = SEXES,
              min_ages: Sequence[int] = DEFAULT_MIN_AGES, radii: Sequence[int] = DEFAULT_RADII,
              table_dir: str | Path | None = None) -> list[LifeEvalRow]:
    """The LifeEval item set as rows, in order sex x min_age x radius (the orders given).

    Defaults give 2 x 101 x 4 = 808 items. Raises ``ValueError`` for a year outside the table, an unknown sex or
    window, a minimum age outside the table's ages, or a radius < 1 (each message names the value).
    """
    if window not in WINDOWS:
        raise ValueError(f"window={window!r}; allowed: {', '.join(WINDOWS)}")
    for s in sexes:
        _check_sex(s)
    if not sexes or len(set(sexes)) != len(sexes):
        raise ValueError(f"sexes={list(sexes)!r}: expected distinct values of {', '.join(SEXES)}, at least one")
    radii = _check_values("radii", radii, 1, None)
    rows = []
    for s in sexes:
        table = load_table(year, s, table_dir)
        ages = _check_values("min_ages", min_ages, 0, table.last_age)
        for a in ages:
            dist = death_distribution(table.q, a)
            for r in radii:
                g, mas = best_guess(dist, r, a, window)
                rows.append(LifeEvalRow(sex=s, min_age=a, radius=r, best_guess=g, mas=mas))
    return rows
