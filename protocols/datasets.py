"""Dataset adapters: benchmark files or hub datasets to :class:`~confgrid.protocols.items.Item`.

The entry point is :func:`load_items`. Adapters are kept in a registry (:data:`ADAPTERS`); importing this module
registers every built-in one:

* answer text (``protocols/adapters_qa.py``): ``truthfulqa``, ``triviaqa``, ``simpleqa``, ``gsm8k`` (a numeric
  answer), ``halueval_qa`` (rate a given answer), ``custom`` (a user's file with a column mapping);
* options (``protocols/adapters_mc.py``): ``mmlu``, ``mmlu_pro``, ``agieval_lsat_ar``, ``agieval_sat_en``, ``boolq``
  (True/False).

Every adapter reads its rows through the Hugging Face ``datasets`` library (``protocols/dataset_io.py``) and maps the
benchmark's own columns onto the one item schema; every item carries ``metadata["category"]``. Definitions follow
study 000 (section 3.4 and Appendix A: TruthfulQA, TriviaQA and MMLU asked as open questions), study 002 (sections
4.1-4.4 and Appendix F: BoolQ, LSAT-AR, SAT-EN, HaluEval QA), study 003 (MMLU-Pro) and study 004 (SimpleQA, GSM8K).

Examples
--------
>>> from confgrid.protocols.datasets import BUNDLED, load_items
>>> items = load_items("mmlu", BUNDLED["mmlu"], limit=5, seed=0)
>>> len(items)
5
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from confgrid.protocols import adapters_mc, adapters_qa  # noqa: F401 - registers their adapters on import
from confgrid.protocols.adapter_params import ADAPTER_PARAMS, check_params
from confgrid.protocols.correctness import GIVEN_ANSWER_KEY
from confgrid.protocols.dataset_io import ADAPTERS, Adapter, bundled_path, get_adapter, register_adapter
from confgrid.protocols.items import Item
from confgrid.registry import Registry
from confgrid.protocols.lifeeval import bundled_table_dir
from confgrid.protocols.lifeeval_items import LifeEvalParams, lifeeval_adapter

__all__ = [
    "registered_adapters",
    "check_adapter_params",
    "BUNDLED",
    "LIMIT_STRATA",
    "load_items",
]

#: Bundled samples shipped with the package (provenance, licenses and the sampling rule in
#: ``protocols/data/README.md``): 150 TruthfulQA rows (CSV), 150 TriviaQA rows (flat alias-list JSONL), a directory of
#: 4 MMLU subjects with 38 rows each, 150 BoolQ, 150 LSAT-AR, 100 SAT-EN, 150 HaluEval QA, 150 MMLU-Pro and 200 GSM8K
#: rows (JSON Lines), 200 SimpleQA rows (CSV).
BUNDLED: dict[str, str] = {
    "truthfulqa": bundled_path("truthfulqa", "TruthfulQA_sample150.csv"),
    "triviaqa": bundled_path("triviaqa", "triviaqa_flashrag_sample150.jsonl"),
    "mmlu": bundled_path("mmlu"),
    "boolq": bundled_path("boolq", "boolq_val_sample150.jsonl"),
    "agieval_lsat_ar": bundled_path("agieval", "lsat-ar_sample150.jsonl"),
    "agieval_sat_en": bundled_path("agieval", "sat-en_sample100.jsonl"),
    "halueval_qa": bundled_path("halueval", "qa_one-turn_sample150.jsonl"),
    "mmlu_pro": bundled_path("mmlu_pro", "mmlu_pro_test_sample150.jsonl"),
    "simpleqa": bundled_path("simpleqa", "simple_qa_test_sample200.csv"),
    "gsm8k": bundled_path("gsm8k", "gsm8k_test_sample200.jsonl"),
    "lifeeval": str(bundled_table_dir()),  # the SSA period life tables LifeEval is generated from
}

#: Adapters whose ``limit`` draw is stratified, by the metadata key it is stratified on: ``halueval_qa`` keeps its
#: right / hallucinated answers half and half (``given_answer_correct``).
LIMIT_STRATA: dict[str, str] = {"halueval_qa": GIVEN_ANSWER_KEY}

# LifeEval (study 002 section 4.5): generated from a life table, see protocols/lifeeval_items.py
register_adapter("lifeeval", params=LifeEvalParams)(lifeeval_adapter)


def registered_adapters() -> "Registry[Adapter]":
    """The dataset adapter registry with every built-in adapter registered (and any a user registered since).

    Read the registry through this function, not as ``protocols.dataset_io.ADAPTERS``: that module alone holds only
    the adapters whose modules happen to have been imported; this module imports them all and registers ``lifeeval``.
    """
    return ADAPTERS


def check_adapter_params(adapter: str, params: Mapping[str, Any] | None, source: str | None = None) -> dict[str, Any]:
    """Validate the ``params`` of a registered adapter (:func:`confgrid.protocols.adapter_params.check_params`).

    Raises :class:`~confgrid.registry.UnknownNameError` if ``adapter`` is not registered, ``ValueError`` listing every
    problem of ``params``.
    """
    get_adapter(adapter)
    return check_params(adapter, params, source)


def _stratified_draw(labels: list[str], limit: int, rng: np.random.Generator) -> np.ndarray:
    """``limit`` indices, every stratum keeping its share, in draw order; nested like a plain draw.

    Each stratum (sorted label order) is shuffled by one permutation of the generator, in label order. Step ``t = 1, 2,
    ...`` takes the next item of the stratum furthest below its share (the largest ``t * size / n - taken``; ties: label
    order), so every prefix holds each stratum within one item of ``limit * size / n``.
    """
    n = len(labels)
    strata = sorted(set(labels))
    members = {s: np.asarray([i for i, lab in enumerate(labels) if lab == s]) for s in strata}
    order = {s: members[s][rng.permutation(members[s].size)] for s in strata}
    size = np.array([members[s].size for s in strata], dtype=np.float64)
    taken = np.zeros(len(strata), dtype=np.int64)
    out = np.empty(int(limit), dtype=np.int64)
    for t in range(1, int(limit) + 1):
        deficit = t * size / n - taken
        j = int(np.argmax(deficit))  # the first of the largest: label order on ties
        out[t - 1] = order[strata[j]][taken[j]]
        taken[j] += 1
    return out


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
        Registered adapter name (:data:`ADAPTERS`): ``truthfulqa``, ``triviaqa``, ``simpleqa``, ``gsm8k``, ``mmlu``,
        ``mmlu_pro``, ``agieval_lsat_ar``, ``agieval_sat_en``, ``boolq``, ``halueval_qa``, ``custom``, ``lifeeval``.
    path_or_name : str or path-like or None
        A local file (or, for ``mmlu``, a directory), or a hub dataset name (e.g. ``"trivia_qa"``; needs network).
        None uses the bundled sample (:data:`BUNDLED`) where the adapter has one.
    split : str or None
        Hub split (adapter default when None: ``validation`` for TriviaQA, TruthfulQA and BoolQ, ``test`` for MMLU,
        MMLU-Pro, AGIEval, SimpleQA and GSM8K, ``data`` for HaluEval QA). Ignored for local files, which are one
        split.
    limit : int or None
        Number of items to keep (>= 1), drawn without replacement with ``np.random.default_rng(seed)``, **in draw
        order** (the first ``limit`` of one seeded permutation). Draws are nested: a larger ``limit`` keeps every item
        of a smaller one in the same order, so the generate shards of the smaller run are shards of the larger one,
        and are reused. For an adapter in :data:`LIMIT_STRATA` (``halueval_qa``) the draw is stratified on that
        metadata key: every prefix keeps each stratum within one item of its share (a half-and-half file stays half
        and half, the odd item going to the first label in sorted order, ``"0"``), nested too. None or a value >= the
        number of items keeps all, in file order.
    seed : int, default 0
        Seed of the subset draw.
    dataset_name : str or None
        Value of ``Item.dataset`` (the grid's dataset entry); default the adapter name.
    hub_config : str or None
        Hub configuration name (adapter default when None, e.g. ``rc.nocontext``).
    params : mapping or None
        Parameters of an adapter that takes them (a grid's ``datasets[].params``; ``lifeeval``:
        ``{"year": 2020, "window": "inclusive", ...}``), checked with :func:`check_adapter_params` against the source
        and passed as keyword arguments. Adapters without parameters reject any.
    **mapping
        Column mapping for ``custom`` (see :func:`custom`); other adapters reject it (``TypeError``).

    Raises
    ------
    KeyError
        Unknown adapter (choices listed), or a missing column.
    FileNotFoundError
        If ``path_or_name`` names a file that does not exist.
    ValueError
        If ``limit`` < 1, or the dataset yields no items, or ``path_or_name`` is None for an adapter without a bundled
        sample, or ``params`` is invalid for the adapter (every problem named).
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
        rng = np.random.default_rng(seed)
        key = LIMIT_STRATA.get(adapter)
        if key is None:  # the first limit of one seeded permutation: draws are nested
            keep = rng.permutation(len(items))[: int(limit)]
        else:
            keep = _stratified_draw([it.metadata.get(key, "") for it in items], int(limit), rng)
        items = [items[int(k)] for k in keep]
    return items
