"""The dataset adapter registry and the row readers every adapter shares.

An adapter maps one benchmark's rows onto :class:`~confgrid.protocols.items.Item`. Rows come through the Hugging Face
``datasets`` library (:func:`load_rows`). The adapters live in ``protocols/adapters_qa.py`` and
``protocols/adapters_mc.py``; read the registry through :func:`confgrid.protocols.datasets.registered_adapters`
(imported from here alone, it holds only the adapters whose modules were imported).
"""

from __future__ import annotations

import csv
import hashlib
import importlib.resources
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from confgrid.protocols.adapter_params import ADAPTER_PARAMS
from confgrid.protocols.items import Item
from confgrid.registry import Registry

__all__ = [
    "ADAPTERS",
    "Adapter",
    "bundled_path",
    "dedup",
    "get_adapter",
    "hash_id",
    "load_local",
    "load_rows",
    "no_mapping",
    "register_adapter",
    "require_columns",
    "row_adapter",
    "split_answers",
    "unique_ids",
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


def bundled_path(*parts: str) -> str:
    """Filesystem path of a bundled sample: ``confgrid/protocols/data/<parts...>`` (package data)."""
    return str(importlib.resources.files("confgrid.protocols").joinpath("data", *parts))


# ----------------------------------------------------------------------------- registry


def register_adapter(name: str, *, params: Any = None) -> Callable[[Adapter], Adapter]:
    """Decorator registering an adapter under ``name`` (the ``adapter`` of ``load_items`` and of grid specs).

    ``params``: the adapter's parameters as a pydantic model class that forbids extra keys (a grid's
    ``datasets[].params``, kept in :data:`confgrid.protocols.adapter_params.ADAPTER_PARAMS`, checked by
    :func:`confgrid.protocols.datasets.check_adapter_params` and passed to the adapter as keyword arguments); None:
    the adapter takes none. Raises ``ValueError`` if ``name`` is empty (at once) or already registered (when applied).
    """
    register = ADAPTERS.register(name)
    if params is None:
        return register

    def decorator(fn: Adapter) -> Adapter:
        out = register(fn)
        ADAPTER_PARAMS.register(name, params)
        return out

    return decorator


def row_adapter(name: str, *, split: str, hub_config: str | None = None,
                prepare: Callable[[list[dict[str, Any]], str], list[dict[str, Any]]] | None = None,
                ) -> Callable[[Callable[..., Item]], Adapter]:
    """Decorator registering, as the adapter ``name``, a function that maps one row to an item.

    The function is ``item(row, index, where, dataset_name) -> Item`` (``where``, for error messages: ``"<name>
    '<source>'"``). The adapter, ``adapter(source, *, split=split, dataset_name=name, hub_config=None)``, reads the
    rows (:func:`load_rows`; ``hub_config`` None: the one given here), passes them through ``prepare(rows, where)``
    when given (what needs every row at once), maps them in file order and makes the ids unique (:func:`unique_ids`);
    a column mapping raises ``TypeError`` (:func:`no_mapping`). It keeps the function's name and docstring.
    """
    default_split, default_config = split, hub_config

    def decorator(item: Callable[..., Item]) -> Adapter:
        def adapter(source: str, *, split: str = default_split, dataset_name: str = name,
                    hub_config: str | None = None, **mapping: Any) -> list[Item]:
            no_mapping(name, mapping)
            rows = load_rows(source, split, hub_config or default_config)
            where = f"{name} {source!r}"
            if prepare is not None:
                rows = prepare(rows, where)
            return unique_ids([item(r, i, where, dataset_name) for i, r in enumerate(rows)])

        adapter.__name__ = adapter.__qualname__ = item.__name__
        adapter.__module__, adapter.__doc__ = item.__module__, item.__doc__
        return ADAPTERS.register(name)(adapter)

    return decorator


#: The adapter registered under a name (:meth:`~confgrid.registry.Registry.get`).
get_adapter = ADAPTERS.get


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


def load_local(path: Path, *, header: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """Rows of one local CSV / TSV / JSON / JSON Lines / Parquet file, through ``datasets``, in file order.

    The builder follows the suffix (``.csv``/``.tsv`` CSV, ``.json``/``.jsonl`` JSON: a JSON list of objects or one
    object per line, whatever the suffix; ``.parquet``/``.pq`` Parquet); another suffix raises ``ValueError``. CSV
    cells are read as strings with no NA conversion (an answer "None" stays "None"); a UTF-8 byte-order mark is
    removed from the first column name. An empty file has no rows. ``header``: column names of a headerless CSV
    (MMLU's ``question,A,B,C,D,answer``).
    """
    import datasets  # lazy: Hugging Face datasets takes seconds to import; bundled samples never need it

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
        kwargs.update(column_names=names, header=None if header is not None else 0)
    on = datasets.is_progress_bar_enabled()
    datasets.disable_progress_bars()  # a local file's "Generating train split" bars are noise in every log
    try:
        ds = datasets.load_dataset(builder, data_files=str(path), split="train", **kwargs)
    finally:
        if on:
            datasets.enable_progress_bars()
    return [dict(r) for r in ds]


def load_rows(source: str, split: str, hub_config: str | None, **local_kwargs: Any) -> list[dict[str, Any]]:
    """Rows from a local file (:func:`load_local`), or from a hub dataset when ``source`` is not a path.

    Parameters
    ----------
    source : str
        A local file, or a Hugging Face hub name (``"google/boolq"``; needs network or a warm local cache).
    split : str
        Hub split; ignored for a local file (one file is one split).
    hub_config : str or None
        Hub configuration name.
    **local_kwargs
        Passed to :func:`load_local` (``header=``).

    Raises
    ------
    ValueError
        If ``source`` is a directory.
    FileNotFoundError
        If ``source`` looks like a path (absolute, ``./``, a file suffix) and does not exist, or loading it as a hub
        dataset fails (the message carries the hub's error).
    """
    path = Path(source).expanduser()
    if path.is_file():
        return load_local(path, **local_kwargs)
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


# ----------------------------------------------------------------------------- row helpers


def require_columns(row: Mapping[str, Any], columns: Iterable[str], where: str) -> None:
    """Raise ``KeyError`` naming the first of ``columns`` missing from ``row``.

    ``where`` names the adapter and the file (``"boolq '/data/val.jsonl'"``); the message also lists the columns
    found, e.g. ``"boolq 'x.jsonl': missing required column 'passage'; columns found: ['idx', 'question']"``.
    """
    missing = [c for c in columns if c not in row]
    if missing:
        raise KeyError(f"{where}: missing required column {missing[0]!r}; columns found: {sorted(row)}")


def split_answers(value: Any, sep: str) -> tuple[str, ...]:
    """A list cell, or a ``sep``-joined string (``sep=""``: kept whole), as a tuple of stripped non-empty strings."""
    if value is None:
        return ()
    if isinstance(value, str):
        parts: Iterable[Any] = value.split(sep) if sep else [value]
    else:
        parts = value
    return tuple(s for s in (str(p).strip() for p in parts if p is not None) if s)


def dedup(values: Iterable[str]) -> tuple[str, ...]:
    """The non-empty ``values``, duplicates removed, first occurrences in order."""
    return tuple(dict.fromkeys(v for v in values if v))


def hash_id(prefix: str, *parts: str) -> str:
    """``"<prefix>-<first 10 hex digits of sha1(parts joined by U+001F)>"``: an id stable under subsetting."""
    digest = hashlib.sha1("\x1f".join(parts).encode("utf-8")).hexdigest()[:10]
    return f"{prefix}-{digest}"


def unique_ids(items: list[Item]) -> list[Item]:
    """Suffix repeated ids (``-2``, ``-3``...) in file order, so every id is unique."""
    seen: dict[str, int] = {}
    out = []
    for it in items:
        n = seen.get(it.item_id, 0) + 1
        seen[it.item_id] = n
        out.append(it if n == 1 else replace(it, item_id=f"{it.item_id}-{n}"))
    return out


def no_mapping(adapter: str, mapping: Mapping[str, Any]) -> None:
    """Raise ``TypeError`` if a column mapping was given to an adapter whose columns are fixed."""
    if mapping:
        raise TypeError(
            f"adapter={adapter!r} takes no column mapping; got unexpected keyword(s) {sorted(mapping)} "
            "(column mappings are for adapter='custom')"
        )
