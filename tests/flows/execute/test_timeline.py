"""The replica timeline and the share of GPU-seconds idle while work was queued (flows/execute/timeline.py).

Pure and fast: hand-computed timelines, no Ray. What the executor records into the timeline is checked with
fake replicas at the end (no Ray either).
"""

from __future__ import annotations

import doctest
import heapq
import math
import time

import pytest

from confgrid.actors.calls import ReplicaInfo
from confgrid.flows.execute import pools, timeline
from confgrid.flows.execute.executor import close, record_replicas
from confgrid.flows.execute.pools import ModelPool, Replica
from confgrid.flows.execute.queue import note_queue, submit
from confgrid.flows.execute.timeline import (
    add_span,
    idle_share_of_run,
    idle_while_queued,
    merge_spans,
    note_waiting,
    overlap_seconds,
)

# An 8-GPU cluster, window [100, 160] (60 s, 480 GPU-seconds). Work is queued during [100, 130] and [140, 150].
#   tp4  (4 GPUs): loading [100, 110], computing [110, 125] and [126, 128]
#   one  (1 GPU):  loading [104, 112], computing [112, 132]        (the call runs past the first queued span)
#   dp#0 (1 GPU):  loading [128, 136] (a second load after a restart: [136, 137] touches it), computing [137, 150]
#   dp#1 (1 GPU):  loading [95, 105]  (started before the window: clipped to [100, 105]), computing [] (never ran)
# Busy while queued (Q = [100, 130] u [140, 150], |Q| = 40 s):
#   tp4: [100, 125] u [126, 128] within Q = 25 + 2 = 27 s x 4 GPUs = 108
#   one: [104, 132] within Q = [104, 130] = 26 s x 1 = 26
#   dp#0: [128, 150] within Q = [128, 130] + [140, 150] = 12 s x 1 = 12
#   dp#1: [100, 105] = 5 s x 1 = 5
#   busy while queued = 151 GPU-s; 8 GPUs x 40 s = 320; idle while queued = 169; share = 169 / 480
REPLICAS = [
    {"replica": "tp4#0", "gpus": 4, "loading": [[100, 110]], "computing": [[110, 125], [126, 128]]},
    {"replica": "one#0", "gpus": 1, "loading": [[104, 112]], "computing": [[112, 132]]},
    {"replica": "dp#0", "gpus": 1, "loading": [[128, 136], [136, 137]], "computing": [[137, 150]]},
    {"replica": "dp#1", "gpus": 1, "loading": [[95, 105]], "computing": []},
]
QUEUED = [[100, 130], [140, 150]]


def test_idle_share_of_a_hand_computed_timeline():
    r = idle_while_queued(REPLICAS, QUEUED, gpus=8, start=100, end=160)
    assert r.window_s == 60 and r.gpu_s == 480 and r.queued_s == 40
    assert r.busy_queued_gpu_s == pytest.approx(151)
    assert r.idle_queued_gpu_s == pytest.approx(169)
    assert r.share == pytest.approx(169 / 480)
    # over the whole window: tp4 27 s x 4, one 28, dp#0 22, dp#1 5
    assert r.busy_gpu_s == pytest.approx(108 + 28 + 22 + 5)


def test_an_open_queued_span_runs_to_the_end_of_the_window_and_spans_are_clipped():
    r = idle_while_queued(REPLICAS, [[140, None]], gpus=8, start=100, end=160)
    assert r.queued_s == 20
    # busy within [140, 160]: dp#0 computing [140, 150] only
    assert r.busy_queued_gpu_s == pytest.approx(10) and r.idle_queued_gpu_s == pytest.approx(150)
    assert r.share == pytest.approx(150 / 480)


def test_nothing_queued_means_nothing_idle_while_queued_and_a_fully_busy_cluster_idles_zero():
    assert idle_while_queued(REPLICAS, [], gpus=8, start=100, end=160).share == 0.0
    full = [{"gpus": 2, "loading": [[0, 1]], "computing": [[1, 10]]}]
    r = idle_while_queued(full, [[0, 10]], gpus=2, start=0, end=10)
    assert r.idle_queued_gpu_s == 0.0 and r.share == 0.0
    # loading and computing spans that overlap count once
    twice = [{"gpus": 1, "loading": [[0, 6]], "computing": [[4, 10]]}]
    assert idle_while_queued(twice, [[0, 10]], gpus=1, start=0, end=10).busy_queued_gpu_s == 10.0


def test_undefined_and_invalid_inputs():
    with pytest.warns(RuntimeWarning, match="undefined"):
        assert math.isnan(idle_while_queued([], [[0, 1]], gpus=0, start=0, end=10).share)
    with pytest.warns(RuntimeWarning, match="undefined"):
        assert math.isnan(idle_while_queued([], [], gpus=8, start=5, end=5).share)
    with pytest.raises(ValueError, match="gpus: -1"):
        idle_while_queued([], [], gpus=-1, start=0, end=1)
    with pytest.raises(ValueError, match="end 0 is before start 1"):
        idle_while_queued([], [], gpus=1, start=1, end=0)
    with pytest.raises(ValueError, match=r"replicas\[0\] \(old#0\): no gpus, loading, computing"):
        idle_while_queued([{"replica": "old#0", "load_seconds": 3.0}], [], gpus=1, start=0, end=1)


def test_idle_share_of_run_reads_the_manifest_meta():
    meta = {"replicas": REPLICAS, "queued": QUEUED, "cluster": {"GPU": 8.0, "CPU": 9.0},
            "invocations": [{"started_at": 1.0, "ended_at": 2.0}, {"started_at": 100.0, "ended_at": 160.0}]}
    assert idle_share_of_run(meta).share == pytest.approx(169 / 480)
    assert idle_share_of_run(meta, gpus=16).gpu_s == 960
    with pytest.raises(ValueError, match="meta.cluster.GPU"):
        idle_share_of_run({**meta, "cluster": {}})
    with pytest.raises(ValueError, match="meta.queued"):
        idle_share_of_run({k: v for k, v in meta.items() if k != "queued"})
    with pytest.raises(ValueError, match="no finished invocation"):
        idle_share_of_run({**meta, "invocations": [{"started_at": 1.0}]})


def test_span_helpers():
    spans: list[list[float]] = []
    add_span(spans, 1.0, 2.0)
    add_span(spans, 2.005, 3.0)  # within 10 ms of the last end: extends it
    add_span(spans, 3.5, 4.0)
    add_span(spans, 3.6, 3.7)  # inside the last span: nothing new
    assert spans == [[1.0, 3.0], [3.5, 4.0]]
    add_span(spans, 4.0, 4.5, gap=0.0)  # touching counts as one span even without a gap
    assert spans == [[1.0, 3.0], [3.5, 4.5]]
    with pytest.raises(ValueError, match="end 1 is before start 2"):
        add_span(spans, 2, 1)
    assert merge_spans([[5, 7], [0, 2], [1, 3], [6, None], [9, 9]], 0.5, 8) == [(0.5, 3), (5, 8)]
    assert overlap_seconds([(0, 2), (5, 8)], [(1, 6)]) == 2.0


def test_doctests():
    assert doctest.testmod(timeline, raise_on_error=False).failed == 0


def test_the_executor_records_the_timeline(make_state):
    """Fake replicas (no Ray): a load and an engine call become spans on the replica, and the queue's spans
    open when a shard is queued and close when the last one leaves."""
    e = make_state({"name": "t", "models": [{"name": "m", "model": "confgrid-fixture"}],
                    "datasets": [{"name": "triviaqa", "adapter": "triviaqa", "limit": 8}],
                    "execution": {"shard_size": 4}})
    record_replicas(e)
    submit(e, e.plan.generate_shards())
    assert len(e.queue_spans) == 1 and e.queue_spans[0][1] is None  # open
    heapq.heappop(e.queues["m"])
    note_queue(e)
    assert e.queue_spans[0][1] is None  # one shard still waits
    heapq.heappop(e.queues["m"])
    note_queue(e)
    assert e.queue_spans[0][1] is not None  # closed: nothing waits
    rep = Replica("m", 0, 0, gpus=1.0)
    rep.loaded(ReplicaInfo(pid=1, host="h", incarnation="i", load_seconds=2.0, load_started=50.0), seen_at=99.0)
    rep.loaded(ReplicaInfo(pid=2, host="h", incarnation="j", load_seconds=1.5), seen_at=80.0)  # no start sent
    assert rep.loads == 2 and rep.load_seconds == 3.5 and rep.loading == [[50.0, 52.0], [78.5, 80.0]]
    rec = rep.record()
    assert rec["gpus"] == 1.0 and rec["loading"] == [[50.0, 52.0], [78.5, 80.0]] and rec["computing"] == []
    close(e)
    meta = e.store.meta
    assert meta["queued"] == [list(x) for x in e.queue_spans]
    inv = meta["invocations"][-1]
    ms = 0.001  # spans are rounded to milliseconds
    assert inv["started_at"] - ms <= meta["queued"][0][0] <= meta["queued"][0][1] <= inv["ended_at"] + ms
    assert inv["ended_at"] <= time.time()


def test_a_replica_withdrawn_before_it_loaded_says_whether_it_was_loading(make_state, monkeypatch):
    """The request for a replica whose model's work is done is withdrawn; the manifest says whether Ray had
    placed it (a load cut short) or it still waited for resources (no Ray: the placement is faked)."""
    e = make_state({"name": "t", "models": [{"name": "m", "model": "confgrid-fixture", "replicas": 3}],
                    "datasets": [{"name": "triviaqa", "adapter": "triviaqa", "limit": 8}]})
    pool = ModelPool(e.spec.models[0], config=None, load=0)
    pool.replicas = [Replica("m", i, 0, handle=i) for i in range(3)]
    monkeypatch.setattr(pools, "placed", lambda handle: {0: True, 1: False, 2: None}[handle])
    for rep in pool.replicas[:2]:
        pools.cancel_waiting(e, pool, rep)
    pool.replicas.append(Replica("m", 3, 0, handle=2, state="ready", loads=1))
    pool.release()  # the end of the run (Ray not running here): the replica still waiting is withdrawn too
    assert [r.record()["withdrawn"] for r in pool.replicas] == ["loading", "waiting", "unknown", None]
    assert [r.state for r in pool.replicas] == ["released"] * 4


def test_note_waiting_opens_closes_and_joins_spans():
    spans: list = []
    note_waiting(spans, False, 1.0)
    assert spans == []  # nothing waits: no span
    note_waiting(spans, True, 1.0)
    note_waiting(spans, True, 1.5)  # still waiting: the same open span
    assert spans == [[1.0, None]]
    note_waiting(spans, False, 2.0)
    assert spans == [[1.0, 2.0]]
    note_waiting(spans, True, 2.005)  # reopened within the gap (10 ms): the span continues
    assert spans == [[1.0, None]]
    note_waiting(spans, False, 3.0)
    note_waiting(spans, True, 4.0)  # a later wait: a new span
    note_waiting(spans, False, 4.25)
    assert spans == [[1.0, 3.0], [4.0, 4.25]]
