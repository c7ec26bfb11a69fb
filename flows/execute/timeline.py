"""Replica timelines in the manifest, and the GPU-seconds left idle while work was queued (pure: no Ray).

What the executor records for each invocation (``manifest.json``, ``meta``):

``replicas[i].gpus``
    GPUs one replica reserves (N for a tensor-parallel replica of N; 0 without GPUs or for an API model).
``replicas[i].loading``
    ``[[start, end], ...]``: each model load (1 + Ray restarts), measured inside the replica.
``replicas[i].computing``
    ``[[start, end], ...]``: its engine calls, measured inside the replica; calls closer than
    :data:`MERGE_GAP_S` are one span; calls that raised are not in it.
``queued``
    ``[[start, end], ...]``: when at least one planned shard waited in the driver's queues (an ``end`` of
    ``null``: a span still open when the manifest was written).
``cluster``
    ``{"GPU": g, "CPU": c}``: what the cluster declared when the executor joined it.
``invocations[-1].started_at`` / ``ended_at``
    The executor's run: from its first shard submitted to its last pool released.

Times are ``time.time()`` seconds: the replicas' spans on their node's clock, the queue's on the driver's.
:func:`idle_while_queued` turns these into the share of the cluster's GPU-seconds that no replica used while
work was waiting.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

__all__ = ["MERGE_GAP_S", "IdleShare", "add_span", "note_waiting", "merge_spans", "overlap_seconds", "idle_while_queued",
           "idle_share_of_run"]

#: Engine calls of one replica closer than this many seconds are recorded as one computing span.
MERGE_GAP_S = 0.01


def add_span(spans: list[list[float]], start: float, end: float, gap: float = MERGE_GAP_S) -> None:
    """Append ``[start, end]`` to ``spans`` (in place), extending the last span instead when the new one starts
    at most ``gap`` seconds after it ends. Times are rounded to milliseconds. Raises ValueError if ``end < start``.
    """
    if end < start:
        raise ValueError(f"span: end {end!r} is before start {start!r}; allowed: end >= start")
    start, end = round(start, 3), round(end, 3)
    if spans and spans[-1][1] is not None and spans[-1][0] <= start <= spans[-1][1] + gap:
        spans[-1][1] = max(spans[-1][1], end)
    else:
        spans.append([start, end])


def note_waiting(spans: list[list[float | None]], waiting: bool, now: float, gap: float = MERGE_GAP_S) -> None:
    """Keep ``spans`` (in place) as the spans during which something waited: open a span (end None) when waiting
    starts, close the open one when it stops; a span reopened within ``gap`` seconds of its end continues it.
    ``now`` is rounded to milliseconds."""
    now = round(now, 3)
    is_open = bool(spans) and spans[-1][1] is None
    if waiting and not is_open:
        if spans and now - spans[-1][1] <= gap:
            spans[-1][1] = None  # reopened at once: one span
        else:
            spans.append([now, None])
    elif not waiting and is_open:
        spans[-1][1] = now


def merge_spans(spans: Sequence[Sequence[float | None]], lo: float, hi: float) -> list[tuple[float, float]]:
    """The union of ``spans`` clipped to ``[lo, hi]``: sorted, disjoint ``(start, end)`` pairs.

    An ``end`` of None stands for ``hi`` (a span still open). Empty spans are dropped.
    """
    clipped = sorted((max(float(s), lo), min(hi if e is None else float(e), hi)) for s, e in spans)
    out: list[tuple[float, float]] = []
    for s, e in clipped:
        if e <= s:
            continue
        if out and s <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((s, e))
    return out


def overlap_seconds(a: Sequence[tuple[float, float]], b: Sequence[tuple[float, float]]) -> float:
    """Seconds covered by both of two sorted, disjoint span lists (:func:`merge_spans` output)."""
    i = j = 0
    total = 0.0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if hi > lo:
            total += hi - lo
        if a[i][1] <= b[j][1]:
            i += 1
        else:
            j += 1
    return total


@dataclass(frozen=True)
class IdleShare:
    """GPU-seconds of a run window, and how many of them were idle while work was queued."""

    window_s: float  # wall seconds of the window (the executor's run)
    gpus: float  # GPUs the cluster declared
    gpu_s: float  # gpus * window_s
    queued_s: float  # seconds during which at least one shard was queued
    busy_gpu_s: float  # GPU-seconds of replicas loading or computing
    busy_queued_gpu_s: float  # the same, only while some shard was queued
    idle_queued_gpu_s: float  # gpus * queued_s - busy_queued_gpu_s
    share: float  # idle_queued_gpu_s / gpu_s in [0, 1], lower is better; NaN when gpu_s is 0


def idle_while_queued(replicas: Sequence[Mapping[str, Any]], queued: Sequence[Sequence[float | None]],
                      gpus: float, start: float, end: float) -> IdleShare:
    """The share of a window's GPU-seconds left idle while some shard was queued.

    With ``G`` the declared GPUs, ``Q`` the times in ``[start, end]`` when at least one shard was queued, and ``b(t)``
    the GPUs of the replicas that are loading or computing at time ``t`` (each replica counts its ``gpus`` while
    inside one of its ``loading`` or ``computing`` spans)::

        idle = integral over Q of (G - b(t)) dt
             = G x |Q|  -  sum over replicas of gpus x |(loading U computing) n Q|
        share = idle / (G x (end - start))

    A GPU reserved by a replica between calls or starting its process counts as idle, as does a free GPU;
    times when nothing is queued count in the denominator only. ``replicas`` and ``queued`` are ``meta.replicas``
    and ``meta.queued`` (an open ``end`` read as ``end``); spans are clipped to the window. ``share`` is NaN (with
    a ``RuntimeWarning``) when ``gpus * (end - start)`` is 0.

    Raises
    ------
    ValueError
        If ``gpus`` is negative, ``end < start``, or a replica lacks ``gpus``, ``loading`` or ``computing`` (a
        manifest written before these were recorded).

    Examples
    --------
    Two 1-GPU replicas in a 10 s window, work queued during the first 6 s:

    >>> reps = [{"gpus": 1, "loading": [[0, 2]], "computing": [[2, 5]]},
    ...         {"gpus": 1, "loading": [[1, 3]], "computing": [[3, 4], [7, 9]]}]
    >>> r = idle_while_queued(reps, [[0, 6]], gpus=2, start=0, end=10)
    >>> r.busy_queued_gpu_s, r.idle_queued_gpu_s, r.share   # 5 + 3 busy of 2 x 6 while queued
    (8.0, 4.0, 0.2)
    """
    if gpus < 0:
        raise ValueError(f"gpus: {gpus!r}; allowed: >= 0 (the GPUs the cluster declares)")
    if end < start:
        raise ValueError(f"window: end {end!r} is before start {start!r}; allowed: end >= start")
    q = merge_spans(queued, start, end)
    queued_s = sum(e - s for s, e in q)
    busy = busy_q = 0.0
    for i, r in enumerate(replicas):
        missing = [k for k in ("gpus", "loading", "computing") if k not in r]
        if missing:
            raise ValueError(f"replicas[{i}] ({r.get('replica', '?')}): no {', '.join(missing)}; allowed: a "
                             "manifest whose replicas record their timeline (gpus, loading, computing)")
        g = float(r["gpus"] or 0.0)
        spans = merge_spans(list(r["loading"]) + list(r["computing"]), start, end)
        busy += g * sum(e - s for s, e in spans)
        busy_q += g * overlap_seconds(spans, q)
    window = end - start
    gpu_s = gpus * window
    idle = gpus * queued_s - busy_q
    if gpu_s > 0:
        share = idle / gpu_s
    else:
        warnings.warn(f"idle share undefined: {gpus:g} GPUs x {window:g} s = 0 GPU-seconds; returning NaN",
                      RuntimeWarning, stacklevel=2)
        share = math.nan
    return IdleShare(window_s=window, gpus=float(gpus), gpu_s=gpu_s, queued_s=queued_s, busy_gpu_s=busy,
                     busy_queued_gpu_s=busy_q, idle_queued_gpu_s=idle, share=share)


def idle_share_of_run(meta: Mapping[str, Any], gpus: float | None = None) -> IdleShare:
    """:func:`idle_while_queued` of a run's last invocation (its ``started_at`` to ``ended_at``), from
    ``manifest.json``'s ``meta``; ``gpus`` defaults to ``meta.cluster.GPU``.

    Raises ValueError if the manifest has no finished invocation, no ``queued`` record, or (without ``gpus``) no
    ``cluster``.
    """
    inv = (meta.get("invocations") or [{}])[-1]
    if inv.get("started_at") is None or inv.get("ended_at") is None:
        raise ValueError("meta.invocations: no finished invocation (started_at and ended_at); allowed: the manifest "
                         "of a run whose executor ended")
    if "queued" not in meta:
        raise ValueError("meta.queued: missing; allowed: a manifest written by an executor that records its queue")
    if gpus is None:
        if "GPU" not in (meta.get("cluster") or {}):
            raise ValueError("meta.cluster.GPU: missing; pass gpus= (the GPUs the cluster declared)")
        gpus = float(meta["cluster"]["GPU"])
    return idle_while_queued(meta.get("replicas") or [], meta["queued"], gpus, inv["started_at"], inv["ended_at"])
