"""The paired bootstrap of many settings spread over CPU workers with Ray Data.

The in-process path is :func:`confgrid.analysis.bootstrap.paired_bootstrap`. This module computes the same numbers,
bit for bit, on a Ray cluster:

* one Dataset row per ``(setting, chunk index)``; the row carries only the two keys, never resample indices;
* each setting's ``(S, n)`` confidence and correctness matrices go into the Ray object store once (``ray.put``); every
  task reads them from its node's shared memory (zero copy, one transfer per node), not from the rows;
* the rows, ordered by setting then chunk, are cut into about ``TASKS_PER_WORKER * num_workers`` contiguous blocks;
  ``map_batches`` (stateless Ray tasks, one CPU each, one block per batch) evaluates each block's chunks with
  :func:`~confgrid.analysis.bootstrap.bootstrap_chunks`, which regenerates every chunk's index matrix with
  :func:`~confgrid.analysis.bootstrap.chunk_indices` (seeded by ``SeedSequence([seed, chunk])``, so it does not depend
  on which worker draws it or how chunks are grouped into tasks) and runs the kernel the in-process path runs (BLAS
  pinned to one thread in both);
* the ``(S, M, b)`` values come back as raw float64 bytes (no conversion that could round) and are written into each
  setting's ``(S, M, B)`` array at the chunk's offset.

Spreading over a cluster: ``num_workers`` caps how many chunk tasks run at once
(``TaskPoolStrategy(size=num_workers)``); every task asks for one CPU, so Ray's scheduler places them on any node with
a free CPU (the head node and every CPU worker node of ``ray start`` / the autoscaler / KubeRay), and an autoscaling
cluster grows towards ``num_workers`` CPUs. ``None`` uses every CPU the cluster reports when the stage starts. Memory
per worker is bounded by a small multiple of ``chunk_size * n * 8`` bytes plus the setting's arrays; the driver holds
only the final ``(S, M, B)`` results.

Ray is imported lazily, so importing this module (and ``use_ray=False``) needs no cluster.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from confgrid.analysis.bootstrap import BootstrapResult, bootstrap_chunks, paired_bootstrap
from confgrid.analysis.evaluation import bootstrap_unit
from confgrid.analysis.resampling import DEFAULT_CHUNK_SIZE, n_chunks
from confgrid.analysis.clusters import cluster_codes
from confgrid.flows.execute.ray_session import init_ray

__all__ = ["SettingInput", "bootstrap_settings_ray", "bootstrap_units", "ensure_ray"]


@dataclass(frozen=True)
class SettingInput:
    """One setting's inputs (a plain 4-tuple in this order works too): ``confidence`` (S, n) in [0, 1], one row per
    signal on the same ``n`` items; ``correct`` (S, n) or (n,) shared by all signals; ``signal_names`` (``S``, stored
    on the result); ``seed`` (non-negative, e.g. :func:`~confgrid.analysis.bootstrap.setting_seed`). Optional, as in
    :func:`~confgrid.analysis.bootstrap.paired_bootstrap`: ``groups`` (n,) cluster labels (None: row level),
    ``masks`` (S, n) bool supports (None: every item), ``reweight`` per signal (distribution-aligned); and this
    setting's own ``metrics`` and ``n_resamples`` (None: the job's).
    """

    confidence: Any
    correct: Any
    signal_names: Sequence[str] | None
    seed: int
    groups: Any = None
    masks: Any = None
    metrics: Sequence[str] | None = None
    reweight: Sequence[Any] | None = None
    n_resamples: int | None = None


def ensure_ray() -> None:
    """Start a local Ray instance unless one is running (``RAY_ADDRESS`` joins a cluster)."""
    init_ray(None)


def _chunk_task(batch: dict[str, np.ndarray], refs: Mapping[str, Any], chunk_size: int,
                n_bins: int) -> dict[str, np.ndarray]:
    """Ray Data UDF: evaluate the ``(setting, chunk)`` rows of one batch.

    Rows of one setting are evaluated together by :func:`~confgrid.analysis.bootstrap.bootstrap_chunks` (the setting's
    arrays fetched and its signals sorted once per batch); every chunk's values are the ones the in-process path
    computes for it.
    """
    import ray

    by_key: dict[str, list[int]] = {}
    for key, c in zip(batch["key"], batch["chunk"], strict=True):
        by_key.setdefault(str(key), []).append(int(c))
    settings, chunks, shapes, values = [], [], [], []
    for key, cs in by_key.items():
        conf, corr, seed, groups, masks, metrics, reweight, n_resamples = ray.get(refs[key])
        outs = bootstrap_chunks(conf, corr, metrics, n_resamples, seed, cs, chunk_size=chunk_size, n_bins=n_bins,
                                groups=groups, masks=masks, reweight=reweight)
        for c, out in zip(cs, outs, strict=True):
            settings.append(key)
            chunks.append(c)
            shapes.append(np.asarray(out.shape, dtype=np.int64))
            values.append(np.ascontiguousarray(out, dtype=np.float64).tobytes())
    return {"key": np.asarray(settings, dtype=object), "chunk": np.asarray(chunks, dtype=np.int64),
            "shape": np.stack(shapes) if shapes else np.zeros((0, 3), dtype=np.int64),
            "values": np.asarray(values, dtype=object)}


#: Ray tasks per worker slot: each task evaluates a contiguous run of (setting, chunk) rows, so Ray Data's per-task
#: overhead is paid once per worker (benchmarks/RESULTS.md, bootstrap_bench, measures 1 against 8)
TASKS_PER_WORKER = 1


def _as_input(name: str, value) -> SettingInput:
    if isinstance(value, SettingInput):
        return value
    try:
        conf, corr, names, seed, *rest = value
        if len(rest) > 2:
            raise ValueError
    except (TypeError, ValueError):
        raise ValueError(f"settings[{name!r}] must be (confidence (S, n), correct (S, n) or (n,), signal_names, seed[, "
                         f"groups[, masks]]); got {type(value).__name__}") from None
    return SettingInput(conf, corr, names, seed, *rest)


def bootstrap_settings_ray(settings: Mapping[str, Any], metrics: Sequence[str], n_resamples: int, n_bins: int = 10,
                           chunk_size: int = DEFAULT_CHUNK_SIZE, num_workers: int | None = None
                           ) -> dict[str, BootstrapResult]:
    """Paired bootstrap of every setting, resample chunks spread with Ray Data.

    Parameters
    ----------
    settings : mapping of str to SettingInput or 4- to 6-tuple
        ``name -> (confidence, correct, signal_names, seed[, groups[, masks]])`` (:class:`SettingInput`); ``S`` and
        ``n`` may differ between settings.
    metrics : list of str
        Registered metric names (analysis/registry.py) of every setting without its own.
    n_resamples : int
        ``B`` per setting without its own (need not be a multiple of ``chunk_size``).
    n_bins : int, default=10
        ECE bins.
    chunk_size : int, default=1000
        Resamples per Dataset row (a task evaluates a contiguous run of about ``rows / (TASKS_PER_WORKER *
        num_workers)`` rows); part of the draw, as in :func:`paired_bootstrap`.
    num_workers : int, optional
        Most chunk tasks running at once, one CPU each, on any node; ``None``: every CPU of the cluster.

    Returns
    -------
    dict of str to BootstrapResult
        Same keys and order as ``settings``; ``point`` and ``resamples`` bit-identical to ``paired_bootstrap`` of each
        setting with the same arguments (``nan`` where a metric is undefined on a resample).

    Raises
    ------
    ValueError
        For invalid inputs or metric names, before any Ray work (the message names the setting).
    """
    if num_workers is not None and int(num_workers) < 1:
        raise ValueError(f"num_workers must be >= 1 or None, got {num_workers}")
    if int(n_resamples) < 1:
        raise ValueError(f"n_resamples must be >= 1, got {n_resamples}")
    if int(chunk_size) < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    inputs = {str(k): _as_input(str(k), v) for k, v in settings.items()}
    if len(inputs) != len(settings):
        raise ValueError("setting names must stay unique as strings")

    # Validate and compute point estimates on the driver with the in-process
    # code itself (one resample of one row costs O(n)), so both paths agree on
    # checks, warnings and point estimates by construction.
    results: dict[str, BootstrapResult] = {}
    arrays: dict[str, tuple[np.ndarray, np.ndarray, int]] = {}
    for name, inp in inputs.items():
        mets = list(inp.metrics) if inp.metrics else list(metrics)
        B = int(inp.n_resamples) if inp.n_resamples is not None else int(n_resamples)
        if B < 1:
            raise ValueError(f"setting {name!r}: n_resamples must be >= 1, got {inp.n_resamples}")
        try:
            head = paired_bootstrap(inp.confidence, inp.correct, mets, n_resamples=1, seed=inp.seed,
                                    chunk_size=1, n_bins=n_bins, signal_names=inp.signal_names, groups=inp.groups,
                                    masks=inp.masks, reweight=inp.reweight)
        except ValueError as exc:
            raise ValueError(f"setting {name!r}: {exc}") from None
        conf = np.asarray(inp.confidence, dtype=np.float64)
        conf = conf[None, :] if conf.ndim == 1 else conf
        corr = np.broadcast_to(np.asarray(inp.correct, dtype=np.float64), conf.shape)
        S, n = conf.shape
        results[name] = BootstrapResult(head.point, np.full((S, len(head.metrics), B), np.nan), head.metrics,
                                        head.signal_names, B, int(inp.seed), int(chunk_size), int(n_bins),
                                        n_clusters=head.n_clusters)
        if n > 0:  # no rows: every resample is nan, as in paired_bootstrap
            # the int64 cluster codes travel (same clusters, same order as the labels)
            groups = None if inp.groups is None else cluster_codes(inp.groups, n).codes
            masks = None if inp.masks is None else np.ascontiguousarray(inp.masks, dtype=bool)
            arrays[name] = (np.ascontiguousarray(conf), np.ascontiguousarray(corr), int(inp.seed), groups, masks,
                            list(head.metrics), None if inp.reweight is None else list(inp.reweight), B)
    if not arrays:
        return results

    import ray
    import ray.data

    ensure_ray()
    refs = {name: ray.put(a) for name, a in arrays.items()}  # once per setting
    rows = [{"key": name, "chunk": c} for name, a in arrays.items() for c in range(n_chunks(a[-1], chunk_size))]
    workers = int(num_workers) if num_workers is not None else max(1, int(ray.cluster_resources().get("CPU", 1)))
    workers = min(workers, len(rows))

    n_tasks = min(len(rows), workers * TASKS_PER_WORKER)
    # Ray Data reserves part of a small cluster's CPUs for other operators; this stage is the only one
    ctx = ray.data.DataContext.get_current()
    saved = (ctx.op_resource_reservation_enabled, ctx.enable_progress_bars)
    ctx.op_resource_reservation_enabled, ctx.enable_progress_bars = False, False
    ds = ray.data.from_items(rows, override_num_blocks=n_tasks).map_batches(
        _chunk_task, fn_kwargs=dict(refs=refs, chunk_size=int(chunk_size), n_bins=int(n_bins)), batch_size=None,
        batch_format="numpy", num_cpus=1, compute=ray.data.TaskPoolStrategy(size=workers))
    seen: set[tuple[str, int]] = set()
    try:
        for batch in ds.iter_batches(batch_size=None, batch_format="numpy"):
            for key, c, shape, raw in zip(batch["key"], batch["chunk"], batch["shape"], batch["values"], strict=True):
                key, c = str(key), int(c)
                vals = np.frombuffer(raw, dtype=np.float64).reshape(tuple(int(x) for x in shape))
                start = c * int(chunk_size)
                results[key].resamples[:, :, start : start + vals.shape[2]] = vals
                seen.add((key, c))
    finally:
        ctx.op_resource_reservation_enabled, ctx.enable_progress_bars = saved
    del refs
    missing = {(r["key"], r["chunk"]) for r in rows} - seen
    if missing:
        raise RuntimeError(f"Ray Data returned no values for {len(missing)} (setting, chunk) rows, e.g. "
                           f"{sorted(missing)[:3]}")
    return results


def bootstrap_units(units: Sequence[Any], metrics: Sequence[str], n_resamples: int, n_bins: int = 10,
                    use_ray: bool = False, num_workers: int | None = None,
                    chunk_size: int = DEFAULT_CHUNK_SIZE) -> list[BootstrapResult]:
    """The paired bootstrap of every unit of the one evaluator (:class:`~confgrid.analysis.evaluation.UnitPlan`).

    ``use_ray``: every unit's resample chunks in **one** Ray Data job (:func:`bootstrap_settings_ray`), else in
    process; the numbers are bit-identical. A unit with its own metrics (``UnitPlan.metrics``) is evaluated under
    them, the others under ``metrics``; likewise its own resample count (``UnitPlan.n_resamples``, e.g. a comparison's
    ``bootstrap``) and its distribution-aligned cells (``UnitPlan.reweight``). Returns one result per unit, in order,
    whose signals are the unit's cells (``cell_names``).
    """
    if not units:
        return []
    if not use_ray:
        return [bootstrap_unit(u, metrics, n_resamples, n_bins, chunk_size) for u in units]
    out = bootstrap_settings_ray(
        {str(i): SettingInput(u.confidence, u.target, u.cell_names, u.seed, u.groups, u.masks,
                              tuple(u.metrics) or None, u.reweight, u.n_resamples)
         for i, u in enumerate(units)}, metrics, n_resamples, n_bins=n_bins, chunk_size=chunk_size,
        num_workers=num_workers)
    return [out[str(i)] for i in range(len(units))]
