"""Dataset adapters: benchmark files or hub datasets to :class:`~confgrid.protocols.items.Item`.

Every adapter reads its rows through the Hugging Face ``datasets`` library
(``load_dataset("csv" | "json" | "parquet", data_files=...)`` for a local file,
``load_dataset(<hub name>, <config>, split=...)`` for a hub dataset) and maps the
benchmark's own columns onto the one item schema. Adapters are kept in a
registry (:data:`ADAPTERS`); :func:`load_items` is the entry point.

Definitions follow study 000 (section 3.4 and Appendix A): TruthfulQA, TriviaQA
and MMLU are asked as open questions; an MMLU item is its question text alone,
with the text of the correct option as the reference answer.

Examples
--------
>>> from confgrid.protocols.datasets import BUNDLED, load_items
>>> items = load_items("mmlu", BUNDLED["mmlu"], limit=5, seed=0)
>>> len(items)
5
"""

from __future__ import annotations

import csv
import hashlib
import importlib.resources
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel

from confgrid.protocols.adapter_params import ADAPTER_PARAMS, check_params
from confgrid.protocols.items import Item
from confgrid.protocols.lifeeval import bundled_table_dir
from confgrid.protocols.lifeeval_items import LifeEvalParams, lifeeval_adapter
from confgrid.registry import Registry

__all__ = [
    "ADAPTERS",
    "ADAPTER_PARAMS",
    "BUNDLED",
    "Adapter",
    "check_adapter_params",
    "get_adapter",
    "load_items",
    "register_adapter",
]

#: ``Adapter(source, *, split, dataset_name, hub_config, **mapping) -> list[Item]``.
Adapter = Callable[..., list[Item]]

#: Registered adapters, by name (kind ``"dataset adapter"``). Add one with :func:`register_adapter`.
ADAPTERS: Registry[Adapter] = Registry("dataset adapter")


_LOCAL_BUILDERS = {
    ".csv": "csv",
    ".tsv": "csv",
    ".json": "json",
    ".jsonl": "json",
    ".parquet": "parquet",
    ".pq": "parquet",
}


def _bundled_path(*parts: str) -> str:
    """Filesystem path of a bundled sample (package data of ``confgrid.protocols``)."""
    return str(importlib.resources.files("confgrid.protocols").joinpath("data", *parts))


#: Bundled samples shipped with the package (see ``protocols/data/README.md``):
#: 150 TruthfulQA rows (CSV), 150 TriviaQA rows (flat alias-list JSONL), a
#: directory of 4 MMLU subjects with 38 rows each, and the SSA period life
#: tables of the 2020 Trustees Report that LifeEval is generated from.
BUNDLED: dict[str, str] = {
    "truthfulqa": _bundled_path("truthfulqa", "TruthfulQA_sample150.csv"),
    "triviaqa": _bundled_path("triviaqa", "triviaqa_flashrag_sample150.jsonl"),
    "mmlu": _bundled_path("mmlu"),
    "lifeeval": str(bundled_table_dir()),
}


# ----------------------------------------------------------------------------- registry


def register_adapter(name: str, *, params: type[BaseModel] | None = None) -> Callable[[Adapter], Adapter]:
    """Decorator registering an adapter under ``name`` in :data:`ADAPTERS`.

    Parameters
    ----------
    name : str
        Registry key, used as ``adapter=`` in :func:`load_items` and in grid specs.
    params : pydantic model class or None
        The adapter's parameters (a grid's ``datasets[].params``), checked by
        :func:`check_adapter_params` and passed to the adapter as keyword
        arguments; it should forbid extra keys (kept in :data:`ADAPTER_PARAMS`).
        None: the adapter takes none.

    Returns
    -------
    callable
        The decorator; it returns the adapter unchanged.

    Raises
    ------
    ValueError
        If ``name`` is empty (at once) or already registered (when the
        decorator is applied).
    """
    register = ADAPTERS.register(name)
    if params is None:
        return register

    def decorator(fn: Adapter) -> Adapter:
        out = register(fn)
        ADAPTER_PARAMS[name] = params
        return out

    return decorator


def check_adapter_params(adapter: str, params: Mapping[str, Any] | None, source: str | None = None) -> dict[str, Any]:
    """Validate the ``params`` of a registered adapter (:func:`confgrid.protocols.adapter_params.check_params`).

    Raises
    ------
    UnknownNameError
        If ``adapter`` is not registered.
    ValueError
        Listing every problem of ``params`` (see ``check_params``).
    """
    get_adapter(adapter)
    return check_params(adapter, params, source)


def get_adapter(name: str) -> Adapter:
    """The adapter registered under ``name``.

    Parameters
    ----------
    name : str

    Returns
    -------
    callable
        ``adapter(source, *, split, dataset_name, hub_config, **mapping) -> list[Item]``.

    Raises
    ------
    UnknownNameError
        (a ``KeyError`` and a ``ValueError``) if no adapter has that name,
        e.g. ``"unknown dataset adapter 'squad'; allowed: custom, lifeeval,
        mmlu, triviaqa, truthfulqa"``.
    """
    return ADAPTERS.get(name)


# ----------------------------------------------------------------------------- loading rows


def _looks_like_path(source: str) -> bool:
    """True for strings meant as a local path; False for hub names (``trivia_qa``, ``cais/mmlu``)."""
    p = Path(source)
    return (
        p.is_absolute()
        or source.startswith((".", "~"))
        or p.suffix.lower() in _LOCAL_BUILDERS
        or source.endswith(("/", os.sep))
        or source.replace(os.sep, "/").count("/") > 1
    )


def _csv_header(path: Path) -> list[str]:
    delimiter = "\t" if path.suffix.lower() == ".tsv" else ","
    with open(path, newline="", encoding="utf-8-sig") as f:
        return next(csv.reader(f, delimiter=delimiter), [])


def _load_local(path: Path, *, header: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """Rows of one local CSV / JSON(L) / Parquet file, through ``datasets``.

    CSV cells are read as strings with no NA conversion (an answer "None" stays
    "None"); a UTF-8 byte-order mark is removed from the first column name.
    ``header`` gives column names for a headerless CSV.
    """
    import datasets

    builder = _LOCAL_BUILDERS.get(path.suffix.lower())
    if builder is None:
        raise ValueError(
            f"path={str(path)!r}: unsupported file type {path.suffix!r}; allowed: {sorted(_LOCAL_BUILDERS)}"
        )
    with open(path, "rb") as f:
        head = f.read(4096)
    if not head.strip():
        return []  # an empty file has no rows (datasets cannot infer its schema)
    kwargs: dict[str, Any] = {}
    if builder == "csv":
        names = list(header) if header is not None else [c.lstrip("\ufeff") for c in _csv_header(path)]
        kwargs = {
            "keep_default_na": False,
            "features": datasets.Features({c: datasets.Value("string") for c in names}),
            "encoding": "utf-8-sig",
        }
        if path.suffix.lower() == ".tsv":
            kwargs["sep"] = "\t"
        if header is not None:
            kwargs.update(column_names=list(header), header=None)
        else:
            kwargs.update(column_names=names, header=0)
    ds = datasets.load_dataset(builder, data_files=str(path), split="train", **kwargs)
    return [dict(r) for r in ds]


def _load_rows(source: str, split: str, hub_config: str | None, **local_kwargs: Any) -> list[dict[str, Any]]:
    """Rows from a local file, or from a hub dataset when ``source`` is not a path."""
    path = Path(source).expanduser()
    if path.is_file():
        return _load_local(path, **local_kwargs)
    if path.exists():
        raise ValueError(f"path={source!r} is a directory; this adapter reads one file")
    if _looks_like_path(source):
        raise FileNotFoundError(f"path={source!r}: no such file")
    import datasets  # hub name: needs network (or a warm local cache)

    try:
        ds = datasets.load_dataset(source, hub_config, split=split)
    except Exception as exc:
        raise FileNotFoundError(
            f"path_or_name={source!r} is not a local file, and loading it as a Hugging Face hub dataset "
            f"(config={hub_config!r}, split={split!r}) failed: {type(exc).__name__}: {exc}"
        ) from exc
    return [dict(r) for r in ds]


def _require(row: Mapping[str, Any], columns: Iterable[str], where: str) -> None:
    missing = [c for c in columns if c not in row]
    if missing:
        raise KeyError(f"{where}: missing required column {missing[0]!r}; columns found: {sorted(row)}")


def _split_answers(value: Any, sep: str) -> tuple[str, ...]:
    """A list cell or a ``sep``-joined string as a tuple of stripped non-empty strings."""
    if value is None:
        return ()
    if isinstance(value, str):
        parts: Iterable[Any] = value.split(sep) if sep else [value]
    else:
        parts = value
    return tuple(s for s in (str(p).strip() for p in parts if p is not None) if s)


def _dedup(values: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(v for v in values if v))


def _hash_id(prefix: str, *parts: str) -> str:
    digest = hashlib.sha1("\x1f".join(parts).encode("utf-8")).hexdigest()[:10]
    return f"{prefix}-{digest}"


def _unique_ids(items: list[Item]) -> list[Item]:
    """Suffix repeated ids (``-2``, ``-3``...) in file order, so every id is unique."""
    from dataclasses import replace

    seen: dict[str, int] = {}
    out = []
    for it in items:
        n = seen.get(it.item_id, 0) + 1
        seen[it.item_id] = n
        out.append(it if n == 1 else replace(it, item_id=f"{it.item_id}-{n}"))
    return out


def _no_mapping(adapter: str, mapping: Mapping[str, Any]) -> None:
    if mapping:
        raise TypeError(
            f"adapter={adapter!r} takes no column mapping; got unexpected keyword(s) {sorted(mapping)} "
            "(column mappings are for adapter='custom')"
        )


# ----------------------------------------------------------------------------- adapters


@register_adapter("truthfulqa")
def truthfulqa(
    source: str,
    *,
    split: str = "validation",
    dataset_name: str = "truthfulqa",
    hub_config: str | None = None,
    **mapping: Any,
) -> list[Item]:
    """TruthfulQA generation set (Lin, Hilton and Evans 2022).

    Reads the released ``TruthfulQA.csv`` (columns Type, Category, Question,
    Best Answer, Correct Answers, Incorrect Answers, Source; answers joined by
    ``"; "``; a leading UTF-8 BOM is fine) or the hub schema of ``truthful_qa``,
    config ``generation`` (``question``, ``best_answer``, ``correct_answers``
    list, ...).

    Mapping (study 000 section 3.4): ``canonical`` = best answer;
    ``gold_answers`` = best answer, then the correct answers (deduplicated,
    order kept); ``aliases`` = ``gold_answers``; ``incorrect_answers`` from the
    incorrect answers; ``item_id`` = ``truthfulqa-<first 10 hex of sha1(question)>``,
    stable under subsetting; metadata: type, category, source, row.

    Raises
    ------
    FileNotFoundError
        If ``source`` names a file that does not exist.
    KeyError
        If a required column is missing.
    """
    _no_mapping("truthfulqa", mapping)
    rows = _load_rows(source, split, hub_config or "generation")
    items = []
    for i, r in enumerate(rows):
        if "Question" in r or "question" not in r:  # released CSV
            _require(r, ["Question", "Best Answer", "Correct Answers"], f"truthfulqa {source!r}")
            q, best = r["Question"], (r["Best Answer"] or "").strip()
            correct = _split_answers(r["Correct Answers"], ";")
            incorrect = _split_answers(r.get("Incorrect Answers"), ";")
            meta = {"type": r.get("Type") or "", "category": r.get("Category") or "", "source": r.get("Source") or ""}
        else:  # hub schema
            _require(r, ["question", "best_answer", "correct_answers"], f"truthfulqa {source!r}")
            q, best = r["question"], (r["best_answer"] or "").strip()
            correct = _split_answers(r["correct_answers"], ";")
            incorrect = _split_answers(r.get("incorrect_answers"), ";")
            meta = {"type": r.get("type") or "", "category": r.get("category") or "", "source": r.get("source") or ""}
        gold = _dedup([best, *correct])
        meta["row"] = str(i)
        items.append(
            Item(
                item_id=_hash_id("truthfulqa", q),
                dataset=dataset_name,
                question=q,
                gold_answers=gold,
                canonical=best or (gold[0] if gold else ""),
                aliases=gold,
                incorrect_answers=incorrect,
                metadata=meta,
            )
        )
    return _unique_ids(items)


_TRIVIAQA_HIDDEN = {"", "<unk>"}


@register_adapter("triviaqa")
def triviaqa(
    source: str,
    *,
    split: str = "validation",
    dataset_name: str = "triviaqa",
    hub_config: str | None = None,
    **mapping: Any,
) -> list[Item]:
    """TriviaQA (Joshi et al. 2017), hub schema or flat alias-list form.

    Two row forms are accepted, detected per row:

    * the Hugging Face ``trivia_qa`` schema (default config ``rc.nocontext``):
      ``question``, ``question_id``, ``answer`` = {``value``, ``aliases``,
      ``normalized_aliases``, ``normalized_value``, ...}. ``canonical`` =
      ``answer.value``; ``aliases`` = ``answer.aliases`` as released;
      ``normalized_aliases`` = ``answer.normalized_aliases``; ``gold_answers`` =
      value then aliases (deduplicated, order kept); ``item_id`` = ``question_id``.
    * the flat form (FlashRAG, the bundled sample): ``id``, ``question``,
      ``golden_answers`` (alias list). ``canonical`` = first alias;
      ``aliases`` = ``gold_answers`` = the list; ``normalized_aliases`` empty.

    Raises
    ------
    FileNotFoundError
        If ``source`` names a file that does not exist.
    KeyError
        If a row has neither ``answer`` nor ``golden_answers``, or no question.
    ValueError
        If a row has no answer (the hub's test split hides its answers; use
        ``split="validation"``).
    """
    _no_mapping("triviaqa", mapping)
    rows = _load_rows(source, split, hub_config or "rc.nocontext")
    items = []
    for i, r in enumerate(rows):
        _require(r, ["question"], f"triviaqa {source!r}")
        if "answer" in r and isinstance(r["answer"], Mapping):
            ans = r["answer"]
            value = (ans.get("value") or "").strip()
            aliases = _split_answers(ans.get("aliases"), "")
            norm = _split_answers(ans.get("normalized_aliases"), "")
            if value in _TRIVIAQA_HIDDEN and not aliases:
                raise ValueError(
                    f"triviaqa {source!r} row {i}: answer.value={ans.get('value')!r} and no aliases; "
                    "the answers of this split are hidden (the hub's test split is; use split='validation')"
                )
            gold = _dedup([value, *aliases]) if value not in _TRIVIAQA_HIDDEN else _dedup(aliases)
            item_id = str(r.get("question_id") or f"{dataset_name}-{i}")
            canonical = value if value not in _TRIVIAQA_HIDDEN else gold[0]
        elif "golden_answers" in r:
            aliases = _split_answers(r["golden_answers"], "")
            norm = ()
            gold = _dedup(aliases)
            if not gold:
                raise ValueError(f"triviaqa {source!r} row {i}: golden_answers is empty; every item needs an answer")
            item_id = str(r.get("id") or f"{dataset_name}-{i}")
            canonical = gold[0]
        else:
            raise KeyError(
                f"triviaqa {source!r}: missing required column 'answer' (hub schema) or 'golden_answers' "
                f"(flat form); columns found: {sorted(r)}"
            )
        items.append(
            Item(
                item_id=item_id,
                dataset=dataset_name,
                question=r["question"],
                gold_answers=gold,
                canonical=canonical,
                aliases=aliases,
                normalized_aliases=norm,
                metadata={"row": str(i)},
            )
        )
    return _unique_ids(items)


_MMLU_COLUMNS = ("question", "A", "B", "C", "D", "answer")
_LETTERS = "ABCD"


def _mmlu_item(r: Mapping[str, Any], i: int, subject: str, dataset_name: str, where: str) -> Item:
    if "choices" in r:  # hub schema (cais/mmlu): choices list, answer int 0-3
        options = tuple(str(c) for c in r["choices"])
        ans = r["answer"]
        letter = _LETTERS[int(ans)] if not isinstance(ans, str) or ans.isdigit() else ans.strip().upper()
        subject = r.get("subject") or subject
    else:
        options = tuple(str(r[k]) for k in _LETTERS)
        letter = (r["answer"] or "").strip().upper()
    if letter not in _LETTERS[: len(options)]:
        raise ValueError(f"mmlu {where} row {i}: answer={r['answer']!r}; allowed: letters {list(_LETTERS[:len(options)])}")
    k = _LETTERS.index(letter)
    correct = options[k]
    return Item(
        item_id=_hash_id(f"mmlu-{subject}" if subject else "mmlu", r["question"], *options),
        dataset=dataset_name,
        question=r["question"],
        gold_answers=(correct,),
        canonical=correct,
        aliases=(correct,),
        incorrect_answers=tuple(o for j, o in enumerate(options) if j != k),
        options=options,
        gold_letter=letter,
        metadata={"subject": subject, "row": str(i)},
    )


@register_adapter("mmlu")
def mmlu(
    source: str,
    *,
    split: str = "test",
    dataset_name: str = "mmlu",
    hub_config: str | None = None,
    **mapping: Any,
) -> list[Item]:
    """MMLU (Hendrycks et al. 2021), asked as an open question.

    ``source`` is one headerless CSV (``question,A,B,C,D,answer``), a directory
    of ``<subject>_test.csv`` files (read in sorted file-name order; the subject
    comes from the file name), or a hub name with the ``cais/mmlu`` schema
    (``question``, ``subject``, ``choices``, ``answer`` index; config ``all``).

    Mapping (study 000 section 3.4): ``question`` = the question text alone,
    options NOT appended; ``canonical`` = text of the correct option;
    ``gold_answers`` = (that text,); ``incorrect_answers`` = the other option
    texts; ``options`` and ``gold_letter`` kept for the multiple-choice format;
    ``item_id`` = ``mmlu-<subject>-<first 10 hex of sha1(question, options)>``.

    Raises
    ------
    FileNotFoundError
        If ``source`` names a file or directory that does not exist, or a
        directory without ``*_test.csv`` (or ``*.csv``) files.
    ValueError
        If an answer is not one of the option letters.
    """
    _no_mapping("mmlu", mapping)
    path = Path(source).expanduser()
    items: list[Item] = []
    if path.is_dir():
        files = sorted(path.glob("*_test.csv")) or sorted(path.glob("*.csv"))
        if not files:
            raise FileNotFoundError(f"path={source!r}: directory has no <subject>_test.csv files")
        for f in files:
            subject = f.stem[: -len("_test")] if f.stem.endswith("_test") else f.stem
            rows = _load_local(f, header=_MMLU_COLUMNS)
            items += [_mmlu_item(r, i, subject, dataset_name, repr(str(f))) for i, r in enumerate(rows)]
    else:
        is_csv = path.suffix.lower() == ".csv"
        rows = _load_rows(source, split, hub_config or "all", **({"header": _MMLU_COLUMNS} if is_csv else {}))
        subject = ""
        if is_csv:
            subject = path.stem[: -len("_test")] if path.stem.endswith("_test") else path.stem
        for i, r in enumerate(rows):
            if "choices" not in r:
                _require(r, _MMLU_COLUMNS, f"mmlu {source!r}")
            else:
                _require(r, ["question", "answer"], f"mmlu {source!r}")
            items.append(_mmlu_item(r, i, subject, dataset_name, repr(source)))
    return _unique_ids(items)


@register_adapter("custom")
def custom(
    source: str,
    *,
    split: str = "train",
    dataset_name: str = "custom",
    hub_config: str | None = None,
    question_column: str = "question",
    answer_column: str | Sequence[str] = "answer",
    answer_separator: str = ";",
    id_column: str | None = None,
    aliases_column: str | None = None,
    canonical_column: str | None = None,
) -> list[Item]:
    """A user's own JSONL / JSON / CSV / Parquet file (or hub dataset) with a column mapping.

    Parameters
    ----------
    source : str
        Path of a ``.jsonl``/``.json``/``.csv``/``.tsv``/``.parquet`` file, or a hub name.
    question_column : str, default "question"
        Column holding the question text.
    answer_column : str or sequence of str, default "answer"
        Column(s) holding accepted answers. Each cell is a list, or a string
        split on ``answer_separator``. With several columns their answers are
        concatenated in column order (deduplicated).
    answer_separator : str, default ";"
        Separator of answers packed in one string cell; ``""`` keeps the cell whole.
    id_column : str or None
        Column holding item ids; None gives ``<dataset_name>-<row index>``.
    aliases_column : str or None
        Column of alternative spellings (list or separator-joined); added to
        ``gold_answers`` after the answers and stored in ``aliases``.
    canonical_column : str or None
        Column of the canonical answer; None uses the first answer.

    Raises
    ------
    KeyError
        If a mapped column is missing (named, with the columns found).
    ValueError
        If a row has no answer.
    """
    answer_columns = [answer_column] if isinstance(answer_column, str) else list(answer_column)
    if not answer_columns:
        raise ValueError("answer_column=[]: give at least one answer column")
    rows = _load_rows(source, split, hub_config)
    required = [question_column, *answer_columns]
    required += [c for c in (id_column, aliases_column, canonical_column) if c]
    items = []
    for i, r in enumerate(rows):
        _require(r, required, f"custom {source!r}")
        answers = [a for c in answer_columns for a in _split_answers(r[c], answer_separator)]
        aliases = _split_answers(r[aliases_column], answer_separator) if aliases_column else ()
        gold = _dedup([*answers, *aliases])
        if not gold:
            raise ValueError(f"custom {source!r} row {i}: no answer in column(s) {answer_columns}")
        canonical = str(r[canonical_column]).strip() if canonical_column and r[canonical_column] else gold[0]
        q = r[question_column]
        items.append(
            Item(
                item_id=str(r[id_column]) if id_column else f"{dataset_name}-{i}",
                dataset=dataset_name,
                question="" if q is None else str(q),
                gold_answers=gold if canonical in gold else (canonical, *gold),
                canonical=canonical,
                aliases=aliases or gold,
                metadata={"row": str(i)},
            )
        )
    return _unique_ids(items)


# LifeEval (study 002 section 4.5): generated from a life table, see protocols/lifeeval_items.py
register_adapter("lifeeval", params=LifeEvalParams)(lifeeval_adapter)


# ----------------------------------------------------------------------------- entry point


def load_items(
    adapter: str,
    path_or_name: str | os.PathLike[str] | None = None,
    split: str | None = None,
    limit: int | None = None,
    seed: int = 0,
    dataset_name: str | None = None,
    *,
    hub_config: str | None = None,
    params: Mapping[str, Any] | None = None,
    **mapping: Any,
) -> list[Item]:
    """Load a dataset as items, optionally a seeded random subset.

    Parameters
    ----------
    adapter : str
        Registered adapter name (:data:`ADAPTERS`): ``truthfulqa``, ``triviaqa``,
        ``mmlu``, ``custom``, ``lifeeval``.
    path_or_name : str or path-like or None
        A local file (or, for ``mmlu``, a directory), or a hub dataset name
        (e.g. ``"trivia_qa"``; needs network). None uses the bundled sample
        (:data:`BUNDLED`) where the adapter has one.
    split : str or None
        Hub split (adapter default when None: ``validation`` for TriviaQA and
        TruthfulQA, ``test`` for MMLU). Ignored for local files, which are one split.
    limit : int or None
        Number of items to keep, drawn without replacement with
        ``np.random.default_rng(seed)`` and kept in file order. None or a value
        >= the number of items keeps all. Must be >= 1.
    seed : int, default 0
        Seed of the subset draw.
    dataset_name : str or None
        Value of ``Item.dataset`` (the grid's dataset entry); default the adapter name.
    hub_config : str or None
        Hub configuration name (adapter default when None, e.g. ``rc.nocontext``).
    params : mapping or None
        Parameters of an adapter that takes them (a grid's ``datasets[].params``;
        ``lifeeval``: ``{"year": 2020, "window": "inclusive", ...}``), checked
        with :func:`check_adapter_params` against the source and passed as
        keyword arguments. Adapters without parameters reject any.
    **mapping
        Column mapping for ``custom`` (see :func:`custom`); other adapters reject it.

    Returns
    -------
    list of Item

    Raises
    ------
    KeyError
        Unknown adapter (choices listed), or a missing column.
    FileNotFoundError
        If ``path_or_name`` names a file that does not exist.
    ValueError
        If ``limit`` < 1, or the dataset yields no items, or ``path_or_name`` is
        None for an adapter without a bundled sample, or ``params`` is invalid
        for the adapter (every problem named, see :func:`check_adapter_params`).
    TypeError
        If a column mapping is given to an adapter that takes none.
    """
    fn = get_adapter(adapter)
    if limit is not None and (isinstance(limit, bool) or int(limit) != limit or limit < 1):
        raise ValueError(f"limit={limit!r}: must be a positive integer or None (all items)")
    if path_or_name is None:
        if adapter not in BUNDLED:
            raise ValueError(f"path_or_name=None: adapter {adapter!r} has no bundled sample; bundled: {sorted(BUNDLED)}")
        path_or_name = BUNDLED[adapter]
    source = os.fspath(path_or_name)
    if mapping and adapter in ADAPTER_PARAMS:
        raise TypeError(f"adapter={adapter!r} takes its parameters as params={{...}}; got unexpected keyword(s) "
                        f"{sorted(mapping)}")
    checked = check_adapter_params(adapter, params, source)
    kwargs: dict[str, Any] = {"dataset_name": dataset_name or adapter, "hub_config": hub_config, **checked, **mapping}
    if split is not None:
        kwargs["split"] = split
    items = fn(source, **kwargs)
    if not items:
        raise ValueError(f"adapter={adapter!r}, path_or_name={source!r}: no items (the file has no rows)")
    if limit is not None and limit < len(items):
        keep = np.sort(np.random.default_rng(seed).choice(len(items), size=int(limit), replace=False))
        items = [items[int(k)] for k in keep]
    return items
