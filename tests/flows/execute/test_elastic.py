"""Elastic replicas (``models[].max_replicas``): the pure decision (flows/execute/capacity.py ``grow_replicas``) by
hand-computed cases, the spec field, and the executor applying it with Ray replaced by fakes.

The run on a real local Ray cluster with declared GPUs is in tests/flows/execute/test_scheduler.py
(``test_elastic_replicas_start_on_idle_gpus_only_for_queued_work``).
"""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest

from confgrid.flows.execute import pools
from confgrid.flows.execute.capacity import Growth, PoolDemand, grow_replicas, max_replicas
from confgrid.flows.execute.pools import ModelPool, Replica, start_latency
from confgrid.flows.execute.queue import submit
from confgrid.flows.plan.grid_plan import model_identity
from confgrid.flows.spec.base import GridSpecError
from confgrid.flows.spec.grid import parse_grid

ONE = {"GPU": 1.0, "CPU": 1.0}
TP4 = {"GPU": 4.0, "CPU": 4.0}


def _d(model, replicas=1, queued=0, need=ONE, most=8, unplaced=0, load_s=5.0, work_s=100.0,
       start_s=0.0, open_slots=0) -> PoolDemand:
    """A pool; by default measured: a load takes 5 s, its queue 100 s on one replica (extra ones pay)."""
    return PoolDemand(model, dict(need), replicas, most, queued, unplaced, load_s, work_s, start_s, open_slots)


# -- the decision, by hand ----------------------------------------------------------------------


def test_second_wave_of_the_8gpu_bench_fills_the_free_gpus_of_worker1():
    # tp4 released worker1; one-a#0 and one-b#0 took 2 of its 4 GPUs; tp2 and dp2 still hold worker2.
    free = {"w1": {"GPU": 2.0, "CPU": 2.0}, "w2": {"GPU": 0.0, "CPU": 0.0}, "head": {"GPU": 0.0, "CPU": 1.0}}
    pools = [_d("one-a", 1, 3), _d("one-b", 1, 3), _d("tp2", 1, 0, need={"GPU": 2.0, "CPU": 2.0}),
             _d("dp2", 2, 1)]
    g = grow_replicas(pools, free, calls_in_flight=2)
    # one-a and one-b tie at 3 calls per replica (input order: one-a first); then one-b has 3 per replica against
    # one-a's 1.5; then neither wants more: 3 calls <= 2 replicas x 2 calls in flight
    assert g == Growth((("one-a", "w1"), ("one-b", "w1")), {})
    assert free["w1"] == {"GPU": 2.0, "CPU": 2.0}  # the input is left as it was


def test_a_model_grows_until_its_replicas_take_its_whole_queue_or_max_replicas():
    free = {"a": {"GPU": 4.0, "CPU": 4.0}, "b": {"GPU": 4.0, "CPU": 4.0}}
    # 9 calls, 2 in flight each: 1 -> 2 (9 > 2), -> 3 (9 > 4), -> 4 (9 > 6), -> 5 (9 > 8), stop (9 <= 10)
    assert [m for m, _ in grow_replicas([_d("m", 1, 9)], free, 2).start] == ["m"] * 4
    assert len(grow_replicas([_d("m", 1, 9, most=3)], free, 2).start) == 2  # max_replicas 3
    assert grow_replicas([_d("m", 3, 9, most=3)], free, 2) == Growth()
    # one call in flight per replica: 10 replicas wanted, 8 GPUs free besides the one it has -> 8 extra, the 10th
    # waits for room
    g = grow_replicas([_d("m", 1, 10, most=20)], free, 1)
    assert len(g.start) == 8 and g.waits == {"m": "no node has {GPU: 1, CPU: 1} free (most free on one node: "
                                                  "{GPU: 0, CPU: 0})"}


def test_no_extra_replica_without_queued_work_beyond_its_replicas():
    free = {"a": {"GPU": 4.0, "CPU": 4.0}}
    assert grow_replicas([_d("m", 1, 2)], free, 2) == Growth()  # 2 calls: its replica takes both
    assert grow_replicas([_d("m", 1, 0)], free, 2) == Growth()
    assert grow_replicas([_d("m", 2, 4)], free, 2) == Growth()


def test_pools_waiting_for_resources_or_a_slot_come_first():
    free = {"a": {"GPU": 2.0, "CPU": 2.0}, "b": {"GPU": 2.0, "CPU": 2.0}}
    # tp4's group is not placed (no node has 4 GPUs free): 1-GPU extras would keep it waiting longer
    g = grow_replicas([_d("one", 1, 6), _d("tp4", 1, 6, need=TP4, unplaced=1)], free, 2)
    assert g.start == ()
    why = ("replicas of tp4 (1) are not placed yet (waiting for resources or a worker process); they take free "
           "resources first")
    assert g.waits == {"one": why, "tp4": why}
    g = grow_replicas([_d("one", 1, 6)], free, 2, starting=["late"])
    assert g.start == () and g.waits == {"one": "model(s) late wait to start their pools; they take free "
                                                "resources first"}
    # nothing to say when no model could use another replica anyway
    assert grow_replicas([_d("one", 1, 1), _d("tp4", 1, 0, need=TP4, unplaced=1)], free, 2) == Growth()


def test_an_extra_replica_only_when_the_queue_outlasts_a_load():
    free = {"a": {"GPU": 8.0, "CPU": 8.0}}
    # measured: a load takes 6 s, the queue 3 s (or 6 s) of one replica -> no extra replica
    assert grow_replicas([_d("m", 1, 20, load_s=6.0, work_s=3.0)], free, 2) == Growth()
    assert grow_replicas([_d("m", 1, 20, load_s=6.0, work_s=6.0)], free, 2) == Growth()
    # 20 s of queue: W / r > L for r = 1 (20), 2 (10), 3 (6.7), not 4 (5) -> 3 extra replicas (4 in all), each
    # ending the queue sooner: 20 -> (20 + 6) / 2 = 13 -> (20 + 12) / 3 = 10.7 -> (20 + 18) / 4 = 9.5 s
    assert len(grow_replicas([_d("m", 1, 20, load_s=6.0, work_s=20.0)], free, 2).start) == 3
    # replicas still loading count: with 3 live already, only W / 3 > L is asked
    assert len(grow_replicas([_d("m", 3, 20, load_s=6.0, work_s=20.0)], free, 2).start) == 1
    # not measured yet (no replica loaded, or no call finished): no extra replica
    assert grow_replicas([_d("m", 1, 6, load_s=6.0, work_s=None)], free, 2) == Growth()
    assert grow_replicas([_d("m", 1, 6, load_s=None, work_s=None)], free, 2) == Growth()


def test_the_start_of_a_replica_counts_with_its_load():
    free = {"a": {"GPU": 8.0, "CPU": 8.0}}
    # 60 s of queue, 10 s loads, 9 calls with 1 in flight. Without a start: W / r > 10 for r = 1..5 -> 5 extra
    # replicas; with 10 s to start: W / r > 20 for r = 1 (60), 2 (30), not 3 (20) -> 2 extra replicas
    assert len(grow_replicas([_d("m", 1, 9, load_s=10.0, work_s=60.0)], free, 1).start) == 5
    assert len(grow_replicas([_d("m", 1, 9, load_s=10.0, work_s=60.0, start_s=10.0)], free, 1).start) == 2
    # a start as long as the queue: W / r = 60 is not > 10 + 50 -> none
    assert grow_replicas([_d("m", 1, 9, load_s=10.0, work_s=60.0, start_s=50.0)], free, 1) == Growth()


def test_an_extra_replica_only_while_a_call_is_left_for_it_when_it_is_ready():
    free = {"a": {"GPU": 8.0, "CPU": 8.0}}
    # The 15:21 decision of the schedule_bench run of 4 December 2026: 8 calls (78 s of one replica, 9.75 s each),
    # one replica computing 2 calls and one loading (2 open slots: 2 calls in flight each), ready in 10 + 10 s.
    # W / r pays for 2 extra replicas (39 > 20, 26 > 20); calls left in 20 s: 8 - 2 - 2 x 20 / 9.75 = 1.9, for a
    # first extra only (the run asked for 2, and the second loaded with nothing left to compute)
    p = _d("one-a", 2, 8, load_s=10.0, work_s=78.0, start_s=10.0, open_slots=2)
    assert len(grow_replicas([p], free, 2).start) == 1
    # both replicas computing 2 calls each: 3.9 left, 2 for a first extra and 1.9 for a second
    assert len(grow_replicas([_d("one-a", 2, 8, load_s=10.0, work_s=78.0, start_s=10.0)], free, 2).start) == 2
    # the 15:33 decision of a later run: the loading replica had just become ready and taken no call yet (2 open
    # slots), a third replica loading (2 more), 3 replicas, ready in 6 + 10 s: 8 - 4 - 3 x 16 / 9.75 < 0: none
    late = _d("one-a", 3, 8, load_s=10.0, work_s=78.0, start_s=6.0, open_slots=4)
    assert grow_replicas([late], free, 2) == Growth()
    # ready at once (no start, a load of 0.1 s): every call is still there, rule 2 (8 calls > r x 2) decides: 2
    assert len(grow_replicas([_d("one-a", 2, 8, load_s=0.1, work_s=78.0)], free, 2).start) == 2


def test_start_latency_by_hand():
    assert start_latency([]) == 0.0
    assert start_latency([Replica("m", 0, 0, requested_at=100.0)]) == 0.0  # no load begun yet
    waited = Replica("m", 0, 0, requested_at=100.0, loading=[[160.0, 170.0]])  # 60 s waiting for resources
    at_once = Replica("n", 0, 0, requested_at=100.0, loading=[[107.5, 117.5], [300.0, 310.0]])  # restarted later
    assert start_latency([waited, at_once]) == 7.5  # the least: the replica placed at once; the first load counts
    # the replica's clock a little behind the driver's: clipped at 0
    assert start_latency([Replica("m", 0, 0, requested_at=100.0, loading=[[99.9, 105.0]])]) == 0.0
    # extra replicas are asked for on free resources: their median counts, the others' no longer do
    extra = [Replica("m", i, 0, requested_at=200.0, loading=[[200.0 + s, 210.0 + s]], elastic=True)
             for i, s in enumerate((12.0, 5.0, 15.0, 9.0), 1)]
    assert start_latency([waited, at_once, *extra[:3]]) == 12.0
    assert start_latency([waited, at_once, *extra]) == 10.5  # (9 + 12) / 2


def test_longest_queue_per_replica_first_on_the_best_fitting_node():
    free = {"big": {"GPU": 3.0, "CPU": 3.0}, "small": {"GPU": 1.0, "CPU": 1.0}}
    # best fit: the node with the fewest free GPUs that holds the replica
    assert grow_replicas([_d("m", 1, 3)], free, 2).start == (("m", "small"),)
    # one GPU for two models: 10 calls on 1 replica go before 4 on 1 replica
    one_free = {"n": {"GPU": 1.0, "CPU": 1.0}}
    g = grow_replicas([_d("short", 1, 4), _d("long", 1, 10)], one_free, 2)
    assert g.start == (("long", "n"),)
    full = "no node has {GPU: 1, CPU: 1} free (most free on one node: {GPU: 0, CPU: 0})"
    assert g.waits == {"short": full, "long": full}  # long: 10 calls > 2 replicas x 2, it could use a third
    # a TP-4 replica fits only a node with 4 GPUs free, whatever the total
    assert grow_replicas([_d("tp4", 1, 5, need=TP4)], {"a": {"GPU": 3.0, "CPU": 4.0}, "b": {"GPU": 3.0, "CPU": 4.0}},
                         2).start == ()
    assert grow_replicas([_d("tp4", 1, 5, need=TP4)], {"a": {"GPU": 4.0, "CPU": 4.0}}, 2).start == (("tp4", "a"),)
    # CPU-only replicas (a cluster without GPUs: the CPUs of one node)
    assert grow_replicas([_d("c", 1, 5, need={"CPU": 8.0})], {"a": {"CPU": 8.0}, "b": {"CPU": 4.0}}, 2).start == (
        ("c", "a"),)


def test_grow_replicas_rejects_no_calls_in_flight():
    with pytest.raises(ValueError, match=r"calls_in_flight: 0; allowed: >= 1"):
        grow_replicas([_d("m", 1, 3)], {}, 0)


def test_max_replicas_resolution():
    nodes = [{"GPU": 4.0, "CPU": 4.0}, {"GPU": 4.0, "CPU": 4.0}, {"GPU": 0.0, "CPU": 1.0}]
    assert max_replicas(None, 2, ONE, nodes) == 2
    assert max_replicas("auto", 1, ONE, nodes) == 8
    assert max_replicas("auto", 1, TP4, nodes) == 2
    assert max_replicas("auto", 3, TP4, nodes) == 3  # never fewer than replicas
    assert max_replicas(5, 2, ONE, nodes) == 5


# -- the spec field -----------------------------------------------------------------------------


def _grid(**model) -> dict:
    return {"name": "e", "models": [dict({"name": "m", "model": "confgrid-fixture"}, **model)],
            "datasets": [{"name": "triviaqa", "adapter": "triviaqa", "limit": 4}]}


def test_max_replicas_field():
    assert parse_grid(_grid()).models[0].max_replicas is None
    assert parse_grid(_grid(max_replicas="auto")).models[0].max_replicas == "auto"
    assert parse_grid(_grid(replicas=2, max_replicas=2)).models[0].max_replicas == 2
    with pytest.raises(GridSpecError, match=r"max_replicas=1: allowed an integer from replicas \(2\) to 1024, "
                                            r"'auto' or null"):
        parse_grid(_grid(replicas=2, max_replicas=1))
    with pytest.raises(GridSpecError, match=r"max_replicas=2000"):
        parse_grid(_grid(max_replicas=2000))
    with pytest.raises(GridSpecError, match=r"max_replicas"):
        parse_grid(_grid(max_replicas=True))
    with pytest.raises(GridSpecError, match=r"max_replicas"):
        parse_grid(_grid(max_replicas="all"))


def test_max_replicas_is_not_for_api_models():
    api = {"backend": "openai", "api": {"base_url": "http://127.0.0.1:9/v1"}}
    grid = _grid(**api, max_replicas="auto")
    grid["scoring"] = {"contexts": []}
    with pytest.raises(GridSpecError, match=r"max_replicas='auto' is for models that run on the cluster's GPUs or "
                                            r"CPUs \(received backend 'openai'"):
        parse_grid(grid)
    grid["models"][0]["max_replicas"] = 1
    assert parse_grid(grid).models[0].max_replicas == 1


def test_max_replicas_is_not_in_any_shard_key():
    a, b = parse_grid(_grid()).models[0], parse_grid(_grid(max_replicas="auto")).models[0]
    assert model_identity(a) == model_identity(b)


# -- the executor applies the decision (Ray replaced) -------------------------------------------


def _executor(make_state, monkeypatch, free, placed):
    """A state record whose pools and Ray are fakes: ``free`` is what free_per_node returns, ``placed`` maps a
    replica name to what the actor table says (True placed, False waiting for resources)."""
    grid = {"name": "units", "datasets": [{"name": "triviaqa", "adapter": "triviaqa", "limit": 16}],
            "models": [{"name": "el", "model": "confgrid-fixture", "max_replicas": 3},
                       {"name": "fixed", "model": "confgrid-fixture", "chat_template": False}],
            "execution": {"shard_size": 2}}
    e = make_state(grid, ray_ready=True, cluster={"GPU": 8.0, "CPU": 8.0}, max_replicas={"el": 3, "fixed": 1},
                   needs={"el": (1, dict(ONE), "one GPU"), "fixed": (1, dict(ONE), "one GPU")})
    asked = []

    def start(pool, cluster_resources=None):
        pool.replicas = [Replica(pool.name, r, pool.load, handle=SimpleNamespace(name=f"{pool.name}#{r}"))
                         for r in range(pool.spec.replicas)]
        return pool.replicas

    def add(pool, cluster_resources=None):
        rep = Replica(pool.name, len(pool.replicas), pool.load, elastic=True)
        rep.handle = SimpleNamespace(name=rep.name)
        pool.replicas.append(rep)
        asked.append(rep.name)
        return rep

    monkeypatch.setattr(ModelPool, "start", start)
    monkeypatch.setattr(ModelPool, "add_replica", add)
    monkeypatch.setattr(pools, "ping", lambda st, rep: None)
    monkeypatch.setattr(pools, "free_per_node", lambda: free)
    monkeypatch.setattr(pools, "placed", lambda h: placed.get(h.name, True))
    monkeypatch.setattr(ModelPool, "stop_replica", lambda self, rep, state="released": setattr(rep, "state", state))
    return e, asked


def test_executor_starts_extra_replicas_only_for_queued_work_on_free_gpus(make_state, monkeypatch, caplog):
    free = {"w1": {"GPU": 2.0, "CPU": 2.0}}
    placed = {"fixed#0": True}
    e, asked = _executor(make_state, monkeypatch, free, placed)
    submit(e, e.plan.generate_shards())
    assert len(e.queues["el"]) == 8  # 16 items in shards of 2
    pools.start_pools(e)
    pools.grow_pools(e)
    assert asked == []  # el#0 has not loaded nor finished a call: nothing says an extra replica would pay
    el0 = e.pools["el"].replicas[0]
    el0.state, el0.loads, el0.load_seconds = "ready", 1, 5.0  # started in 1 s, loaded in 5 s, computing 2 calls
    el0.inflight = 2
    el0.loading = [[el0.requested_at + 1.0, el0.requested_at + 6.0]]
    el0.busy_seconds, el0.requests = 1.0, 1  # 1 request per busy second: its 16 queued requests take 16 s: W / r
    # > 1 + 5 s for r = 1 (16), 2 (8), not 3 (5.3): max_replicas 3 takes 2 extra replicas
    placed["fixed#0"] = False  # the fixed model's replica waits for resources: it comes first
    e.grow_at = 0.0
    with caplog.at_level(logging.INFO, "confgrid"):
        pools.grow_pools(e)
    assert asked == []
    assert ("model el: 8 call(s) queued for 1 replica(s) (max_replicas 3); an extra replica waits: replicas of "
            "fixed (1) are not placed yet (waiting for resources or a worker process); they take free resources "
            "first") in caplog.text
    placed["fixed#0"] = True  # placed: the 2 free GPUs may now go to el, up to max_replicas 3
    e.grow_at = 0.0
    with caplog.at_level(logging.INFO, "confgrid"):
        pools.grow_pools(e)
    assert asked == ["el#1", "el#2"]
    assert ("model el: extra replica el#1 asked for (max_replicas 3): 8 call(s) queued for 1 replica(s), 16 s of one "
            "replica's work against 1 s to start and 5 s to load; {GPU: 1, CPU: 1} free on node w1") in caplog.text
    assert [r.elastic for r in e.pools["el"].replicas] == [False, True, True]
    assert [r.record()["elastic"] for r in e.pools["el"].replicas] == [False, True, True]
    e.grow_at = 0.0
    pools.grow_pools(e)
    assert asked == ["el#1", "el#2"]  # max_replicas reached
    # an extra replica Ray did not place within ELASTIC_PLACE_S is withdrawn (its free GPU was taken)
    placed["el#2"] = False
    free["w1"] = {"GPU": 0.0, "CPU": 0.0}
    e.pools["el"].replicas[2].requested_at -= 11
    e.grow_at = 0.0
    with caplog.at_level(logging.INFO, "confgrid"):
        pools.grow_pools(e)
    assert e.pools["el"].replicas[2].state == "released"
    assert "replica el#2: extra replica not placed within 10 s" in caplog.text
    # the queue drained to what its replicas take at once: no extra replica although GPUs are free
    free["w1"] = {"GPU": 4.0, "CPU": 4.0}
    full = list(e.queues["el"])
    e.queues["el"] = full[:4]
    e.grow_at = 0.0
    pools.grow_pools(e)
    assert asked == ["el#1", "el#2"]
    # more queued than its replicas take, but not long enough: 10 requests at 1 per second = 10 s, split over the
    # 2 live replicas 5 s, not more than a load
    e.queues["el"] = full[:5]
    e.grow_at = 0.0
    pools.grow_pools(e)
    assert asked == ["el#1", "el#2"]
    # 15 s: 7.5 s per replica > 1 + 5 s, a third would pay, but no call is left for it when it is ready: el#1, still
    # loading, takes 2 of the 5 calls at once, and in 6 s el#0 and el#1 take a call every 3 s each
    el0.busy_seconds = 1.5
    e.grow_at = 0.0
    pools.grow_pools(e)
    assert asked == ["el#1", "el#2"]
    el0.busy_seconds = 3.0  # 30 s, 6 s a call: el#1 takes 2 and in 6 s they take 2 more: 1 is left for a third
    e.grow_at = 0.0
    pools.grow_pools(e)
    assert asked == ["el#1", "el#2", "el#3"]


@pytest.mark.parametrize("value", ["many", True, 1.5])
def test_max_replicas_of_the_wrong_kind_is_one_clear_error(value):
    with pytest.raises(GridSpecError, match=r"models\[0\]\.max_replicas: max_replicas=.*allowed an integer") as e:
        parse_grid({"models": [{"name": "m", "model": "confgrid-fixture", "max_replicas": value}],
                    "datasets": [{"name": "d", "adapter": "triviaqa"}]})
    assert "literal" not in str(e.value) and "1 problem(s)" in str(e.value)
