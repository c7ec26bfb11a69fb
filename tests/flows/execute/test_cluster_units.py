"""The executor's decisions about lost replicas and nodes, run status and empty tables, without Ray (fakes; fast).

What happens on ``ActorUnavailableError`` (the shards go back in the queue,
the replica leaves the ready set until it answers), on ``ActorDiedError`` with
its node gone (recorded ``lost`` with the node), when the last node that fits
a model is lost (its shards fail naming the node), how many times a shard is
moved, the node count without dead nodes, ``confgrid status`` exit codes and
stale shards, and the schema of empty stage tables.
"""

from __future__ import annotations

import heapq
import json
import logging
from types import SimpleNamespace

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from confgrid.actors.calls import ReplicaInfo, ReplicaReady, ScoreOutput
from confgrid.cli import main as cli_main
from confgrid.flows.execute import liveness, pools, ray_session
from confgrid.flows.execute.capacity import NodeInfo, NodeWatch, lost_nodes, node_line, stranded_models
from confgrid.flows.execute.liveness import actor_verdict, lost_node_tags, requeue_or_fail
from confgrid.flows.execute.pools import ModelPool, Replica
from confgrid.flows.execute.queue import error_text, submit
from confgrid.flows.execute.ray_session import _resources
from confgrid.flows.execute.state import InFlight
from confgrid.flows.plan.shards import ShardRequest
from confgrid.flows.runner import ShardFailures
from confgrid.flows.stages.score import ScoreRow, aggregate_scores
from confgrid.flows.store.run_status import driver_state, run_status
from confgrid.flows.store.run_store import RunStore
from confgrid.flows.store.runlog import trace
from confgrid.flows.tables.assemble import empty_schema, shard_table

ray_exceptions = pytest.importorskip("ray.exceptions")

GRID = {
    "name": "units",
    "models": [{"name": "m", "model": "confgrid-fixture", "replicas": 2}],
    "datasets": [{"name": "triviaqa", "adapter": "triviaqa", "limit": 8}],
    "execution": {"shard_size": 4, "max_retries": 2},
}
W1, W2 = "a" * 56, "b" * 56
GPU2 = {"GPU": 2.0, "CPU": 2.0}


def _unavailable() -> BaseException:
    return ray_exceptions.ActorUnavailableError("connection refused", b"\x00" * 16)


def _died() -> BaseException:
    return ray_exceptions.ActorDiedError()


# -- pure decisions ---------------------------------------------------------------------------


def test_classify_fault():
    assert liveness.classify_fault(_unavailable()) == "unreachable"
    assert liveness.classify_fault(_died()) == "gone"
    assert liveness.classify_fault(RuntimeError("CUDA out of memory")) == "work"
    assert liveness.classify_fault(ray_exceptions.RayTaskError("run", "tb", ValueError("x"))) == "work"


def test_requeue_bound_is_max_retries():
    assert [requeue_or_fail(n, 2) for n in range(4)] == [True, True, False, False]
    assert requeue_or_fail(0, 0) is False  # max_retries 0: never moved


@pytest.mark.parametrize("state,node_alive,want", [
    (None, None, "unknown"), ("DEAD", True, "lost"), ("DEAD", None, "lost"), ("ALIVE", True, "alive"),
    ("ALIVE", None, "alive"), ("ALIVE", False, "restarting"), ("RESTARTING", True, "restarting"),
    ("PENDING_CREATION", None, "restarting")])
def test_actor_verdict(state, node_alive, want):
    assert actor_verdict(state, node_alive) == want


def test_lost_nodes_and_watch():
    n1, n2 = NodeInfo(W1, "10.0.0.1", True, GPU2), NodeInfo(W2, "10.0.0.2", True, GPU2)
    assert lost_nodes({W1: n1, W2: n2}, [n1, NodeInfo(W2, "10.0.0.2", False, GPU2)]) == [n2]
    assert lost_nodes({W1: n1, W2: n2}, [n1]) == [n2]  # absent counts as lost
    assert lost_nodes({W1: n1}, [n1, n2]) == []  # a new node is not lost
    tables = iter([[n1, n2], [n1, n2], [n1, NodeInfo(W2, "10.0.0.2", False, GPU2)], [n1]])
    w = NodeWatch(read=lambda: next(tables), period=1.0)
    assert w.poll(now=0.0) == []
    assert w.poll(now=0.5) == []  # within the period: the table is not read
    assert w.poll(now=1.0) == []
    assert w.poll(now=2.0) == [n2] and w.lost[W2] == (n2, 2.0)
    assert w.is_alive(W2) is False and w.is_alive(W1) is True and w.is_alive("c" * 56) is None
    assert w.poll(now=3.0) == []  # reported once
    assert [n.node_id for n in w.alive()] == [W1]


def test_stranded_models():
    needs = {"small": (2, {"GPU": 1.0, "CPU": 1.0}, "one GPU"), "tp": (1, {"GPU": 2.0, "CPU": 2.0}, "tp=2"),
             "cpu": (1, {"CPU": 1.0}, "cpu")}
    head = NodeInfo("h" * 56, "10.0.0.9", True, {"GPU": 0.0, "CPU": 2.0})
    one = [head, NodeInfo(W1, "10.0.0.1", True, {"GPU": 1.0, "CPU": 1.0})]
    assert stranded_models(needs, one, ["small", "tp", "cpu"]) == ["tp"]
    assert stranded_models(needs, [head], ["small", "tp", "cpu"]) == ["small", "tp"]
    assert stranded_models(needs, [head], ["cpu"]) == []
    dead = [head, NodeInfo(W1, "10.0.0.1", False, {"GPU": 8.0, "CPU": 8.0})]
    assert stranded_models(needs, dead, ["small"]) == ["small"]  # a dead node fits nothing


def test_node_line():
    assert node_line(NodeInfo(W1, "10.0.0.1", True)) == "node 10.0.0.1 (aaaaaaaa)"
    assert node_line(None, "", "") == "node ? (?)"


# -- the executor with fake replicas ------------------------------------------------------------


class _Plan:
    def on_failed(self, sh):
        return []

    def on_done(self, sh, table):
        return []


@pytest.fixture
def ex(make_state, monkeypatch):
    """A state record with one pool of two ready fake replicas (no Ray), each with two shards in one call."""
    st = make_state(GRID, ray_ready=True, needs={"m": (2, {"GPU": 1.0, "CPU": 1.0}, "one GPU")})
    monkeypatch.setattr(pools, "actor_entry", lambda handle: None)  # the GCS table "cannot be read"
    monkeypatch.setattr(liveness, "actor_entry", lambda handle: None)
    pool = ModelPool(st.spec.models[0], config=None, load=0)
    for i, (nid, ip) in enumerate([(W1, "10.0.0.1"), (W2, "10.0.0.2")]):
        rep = Replica("m", i, 0, handle=SimpleNamespace(), state="ready", node_id=nid, node_ip=ip)
        rep.info = ReplicaInfo(pid=100 + i, host="vm", incarnation=f"inc{i}", load_seconds=1.0, node_id=nid,
                               node_ip=ip)
        pool.replicas.append(rep)
    st.pools["m"] = pool
    st.history.append(pool)
    gen = st.plan.generate_shards()
    assert len(gen) == 2
    submit(st, gen)
    calls = {}
    for rep, sh in zip(pool.replicas, gen, strict=True):
        heapq.heappop(st.queues["m"])  # dispatched
        rec = st.store.begin(sh.stage, sh.label, sh.key)
        rep.inflight += 1
        calls[rep.index] = InFlight(rep, [sh], [rec], rep.info.incarnation)
    pings = []
    monkeypatch.setattr(liveness, "ping", lambda st, rep: pings.append(rep))
    nodes = [NodeInfo(W1, "10.0.0.1", True, GPU2), NodeInfo(W2, "10.0.0.2", True, GPU2),
             NodeInfo("h" * 56, "10.0.0.9", True, {"GPU": 0.0, "CPU": 2.0})]
    st.nodes = NodeWatch(read=lambda: nodes, period=0.0)
    st.nodes.poll(force=True)
    return SimpleNamespace(st=st, pool=pool, gen=gen, calls=calls, pings=pings, nodes=nodes)


def _fault(e, index, exc):
    f = e.calls[index]
    f.replica.inflight -= 1
    liveness.on_replica_fault(e.st, f, error_text(exc), liveness.classify_fault(exc))
    return f


def test_unreachable_replica_puts_its_shards_back_and_leaves_the_ready_set(ex, caplog):
    caplog.set_level(logging.WARNING, "confgrid")
    f = _fault(ex, 1, _unavailable())
    rep0, rep1 = ex.pool.replicas
    assert rep1.state == "unreachable" and ex.pool.ready() == [rep0] and ex.pool.alive()
    queued = [q.shard.key for q in ex.st.queues["m"]]
    assert queued == [f.shards[0].key]
    assert f.records[0].status == "pending" and "unreachable" in f.records[0].error
    assert not ex.st.failed
    assert "1 shard(s) of its call put back in the queue" in caplog.text and "10.0.0.2" in caplog.text
    # still unreachable: the probe sees nothing it can read and pings nothing; no failure either
    ex.st.probe_at[id(rep1)] = 0.0
    liveness.probe_unreachable(ex.st)
    assert ex.pings == [] and rep1.state == "unreachable"


def test_a_replica_that_answers_again_is_ready_and_its_restart_counted(ex):
    _fault(ex, 1, _unavailable())
    rep1 = ex.pool.replicas[1]
    ready = ReplicaReady(replica=ReplicaInfo(pid=999, host="vm", incarnation="new", load_seconds=2.5, node_id=W1,
                                             node_ip="10.0.0.1"), provenance={})
    liveness._on_back(ex.st, rep1, ready)
    assert rep1.state == "ready" and rep1.restarts == 1 and rep1.loads == 1 and ex.st.counters.restarts == 1
    assert (rep1.node_id, rep1.node_ip) == (W1, "10.0.0.1")  # restarted on the surviving node
    same = ReplicaReady(replica=rep1.info, provenance={})
    _fault(ex, 1, _unavailable())
    liveness._on_back(ex.st, rep1, same)  # the same process answers: no restart
    assert rep1.restarts == 1 and rep1.state == "ready"


def test_a_shard_is_moved_at_most_max_retries_times(ex):
    sh = ex.gen[1]
    ex.st.moves[sh.key] = 2  # max_retries = 2 moves used up
    f = _fault(ex, 1, _unavailable())
    assert [x["key"] for x in ex.st.failed] == [sh.key]
    assert "lost 2 time(s) with this shard" in f.records[0].error
    assert not ex.st.queues["m"]


def test_replica_gone_with_its_node_is_lost_and_the_other_finishes(ex, caplog):
    caplog.set_level(logging.ERROR, "confgrid")
    ex.nodes[1] = NodeInfo(W2, "10.0.0.2", False, GPU2)
    liveness.watch_nodes(ex.st)
    assert "Ray node 10.0.0.2 (bbbbbbbb) was lost" in caplog.text and "m#1" in caplog.text
    assert "m" not in ex.st.dead_reason  # the other worker still fits a replica
    _fault(ex, 1, _died())
    rep0, rep1 = ex.pool.replicas
    assert rep1.state == "lost" and rep1.lost_at is not None
    rec = rep1.record()
    assert rec["state"] == "lost" and rec["node_ip"] == "10.0.0.2" and rec["node_id"] == W2 and rec["error"]
    assert len(ex.st.queues["m"]) == 1 and not ex.st.failed and ex.pool.alive()


def test_calls_in_flight_on_a_lost_node_are_given_up_and_their_shards_queued(ex):
    """Ray keeps a call to a lost node's actor queued until the actor restarts (maybe never): the executor gives
    it up when the node is lost, instead of waiting on it."""
    for i, f in ex.calls.items():
        ex.st.inflight[f"ref{i}"] = f
    ex.nodes[1] = NodeInfo(W2, "10.0.0.2", False, GPU2)
    liveness.watch_nodes(ex.st)
    assert list(ex.st.inflight) == ["ref0"]
    rep1 = ex.pool.replicas[1]
    assert rep1.state == "unreachable" and rep1.inflight == 0
    assert [q.shard.key for q in ex.st.queues["m"]] == [ex.gen[1].key]
    assert "node 10.0.0.2 (bbbbbbbb) was lost" in ex.calls[1].records[0].error
    assert not ex.st.failed and "m" not in ex.st.dead_reason
    pools.release(ex.st, ex.pool, "its work is done")  # released while still unreachable: recorded lost
    assert rep1.state == "lost" and rep1.lost_at is not None and ex.pool.replicas[0].state == "released"


def test_last_fitting_node_lost_fails_the_model_naming_the_node(ex):
    _fault(ex, 1, _unavailable())  # one shard queued again
    ex.nodes[0] = NodeInfo(W1, "10.0.0.1", False, GPU2)
    ex.nodes[1] = NodeInfo(W2, "10.0.0.2", False, GPU2)
    liveness.watch_nodes(ex.st)
    reason = ex.st.dead_reason["m"]
    assert "was lost and no node left fits a replica of model 'm'" in reason and "GPU: 1" in reason
    assert [x["key"] for x in ex.st.failed] == [ex.gen[1].key]
    assert "node 10.0.0." in ex.st.failed[0]["error"]
    # the call still in flight on the other replica returns gone: its shard fails with the same reason
    _fault(ex, 0, _died())
    assert len(ex.st.failed) == 2 and ex.st.failed[1]["error"] == reason


def test_waiting_for_nodes_keeps_the_model(ex):
    ex.st.spec.execution.__dict__["wait_for_nodes"] = True
    ex.nodes[0] = NodeInfo(W1, "10.0.0.1", False, GPU2)
    ex.nodes[1] = NodeInfo(W2, "10.0.0.2", False, GPU2)
    liveness.watch_nodes(ex.st)
    assert "m" not in ex.st.dead_reason and not ex.st.failed


def test_ray_session_counts_alive_nodes_only():
    fake = SimpleNamespace(nodes=lambda: [{"Alive": True}, {"Alive": False}, {"Alive": True}],
                           cluster_resources=lambda: {"CPU": 4.0, "GPU": 2.0})
    assert _resources(fake) == "2 node(s), 4 CPU, 2 GPU"


# -- run status --------------------------------------------------------------------------------


def _manifest(statuses, invocation):
    return {"meta": {"invocations": [invocation] if invocation else []},
            "shards": [{"stage": "generate", "setting": f"m/d#{i}", "key": f"k{i}", "status": s, "attempts": 1}
                       for i, s in enumerate(statuses)]}


@pytest.mark.parametrize("inv,alive,want", [
    (None, True, "unknown"), ({"ended_at": 1.0, "driver_pid": 5, "driver_host": "h"}, True, "ended"),
    ({"driver_pid": 5, "driver_host": "h"}, True, "running"), ({"driver_pid": 5, "driver_host": "h"}, False, "gone"),
    ({"driver_pid": 5, "driver_host": "other"}, False, "unknown"), ({"started_at": 1.0}, False, "unknown")])
def test_driver_state(inv, alive, want):
    assert driver_state(inv, "h", lambda pid: alive) == want


def test_run_status_exit_codes():
    live = {"driver_pid": 5, "driver_host": "h"}
    assert run_status(_manifest(["done", "done"], {**live, "ended_at": 2.0}), "h").exit_code == 0
    st = run_status(_manifest(["done", "failed"], {**live, "ended_at": 2.0}), "h")
    assert (st.exit_code, st.failed, st.counts) == (1, 1, {"done": 1, "failed": 1})
    running = run_status(_manifest(["done", "running"], live), "h", lambda pid: True)
    assert running.exit_code == 0 and running.counts == {"done": 1, "running": 1}
    gone = run_status(_manifest(["done", "running"], live), "h", lambda pid: False)
    assert gone.exit_code == 1 and gone.stale == ["generate m/d#1"] and gone.counts == {"done": 1, "stale": 1}
    assert "gone without ending the run" in gone.driver_line


def _run_dir(tmp_path, manifest):
    out = tmp_path / "run"
    out.mkdir()
    (out / "grid.yaml").write_text("name: x\n")
    (out / "manifest.json").write_text(json.dumps(manifest))
    return out


def test_status_command_exit_codes(tmp_path, monkeypatch):
    import socket

    from typer.testing import CliRunner

    runner = CliRunner()
    dead = {"driver_pid": 2 ** 22 + 12345, "driver_host": socket.gethostname(), "address": "10.0.0.9:6379"}
    out = _run_dir(tmp_path, _manifest(["done", "running"], dead))
    res = runner.invoke(cli_main.app, ["status", str(out)])
    assert res.exit_code == 1, res.output
    assert "stale (driver gone)" in res.output and "--address 10.0.0.9:6379" in res.output
    assert runner.invoke(cli_main.app, ["status", str(out), "--json"]).exit_code == 1
    (out / "manifest.json").write_text(json.dumps(_manifest(["done"], {**dead, "ended_at": 1.0})))
    assert runner.invoke(cli_main.app, ["status", str(out)]).exit_code == 0

    for state, code in (("FAILED", 1), ("STOPPED", 1), ("SUCCEEDED", 0), ("RUNNING", 0)):
        monkeypatch.setattr(cli_main, "job_status", lambda address, job, s=state: s)
        res = runner.invoke(cli_main.app, ["status", "--job", "raysubmit_1", "--address", "http://127.0.0.1:1"])
        assert (res.exit_code, res.output.strip()) == (code, state)


def test_resubmit_hint_carries_the_address():
    fail = [{"stage": "score", "setting": "m/d", "key": "k" * 16, "error": "e"}]
    assert "confgrid resubmit /o --failed --address 10.0.0.9:6379" in str(ShardFailures(fail, "/o", None,
                                                                                        "10.0.0.9:6379"))
    assert str(ShardFailures(fail, "/o")).endswith("confgrid resubmit /o --failed")


# -- empty tables ----------------------------------------------------------------------------


def test_empty_stage_tables_keep_their_schema(tmp_path):
    store = RunStore(tmp_path / "run")
    path = store.write_table("scores", [], empty_schema("scores", ("geometric_mean", "min_probability"), ("containment",)))
    t = pq.read_table(path)
    assert t.num_rows == 0 and t.column("token_score").type == pa.float64()
    assert "token_score__min_probability" in t.column_names
    # the columns are those a real score shard has after aggregation, in the same order
    plan = SimpleNamespace(models={"m": SimpleNamespace(backend="transformers", dtype="float32")})
    sh = ShardRequest("score", "m", "d", "main", 0, "key", (ScoreRow("i1", "q", "", " ", "Paris"),), context="bare")
    out = ScoreOutput(logprobs=(-0.5, -0.25), answer_token_ids=(7, 8), context_tokens=12)
    rows = aggregate_scores(shard_table(plan, sh, (out,)), ("geometric_mean", "min_probability"))
    assert list(rows.columns) == t.column_names
    assert pa.Table.from_pandas(rows, preserve_index=False).cast(t.schema).num_rows == 1
    for stage in ("generations", "graded", "probe"):
        assert empty_schema(stage, (), ("containment",)).names
    assert "correct_containment" in empty_schema("graded", (), ("containment",)).names
    with pytest.raises(ValueError, match="stage 'signals'; allowed: generations, graded, scores, probe"):
        empty_schema("signals")
    assert store.write_table("x", []).exists() and pq.read_table(store.table_path("x")).num_columns == 0


def test_raylet_messages_go_to_the_run_log(monkeypatch, caplog):
    from ray._private import worker as ray_worker

    printed, traced = [], []
    monkeypatch.setattr(ray_worker, "print_to_stdstream", lambda data, ignore_prefix=False: printed.append(data))
    caplog.set_level(logging.DEBUG)
    handler = logging.Handler()
    handler.emit = lambda record: traced.append(record.getMessage())
    monkeypatch.setattr(trace, "handlers", [handler])  # the run log's handlers, restored after the test
    ray_session._route_ray_errors()
    ray_session._route_ray_errors()  # idempotent: not wrapped twice
    dump = ("Raylet is terminated. Termination is unexpected. Possible reasons include: (1) SIGKILL\n"
            "    [state-dump] NodeManager.ScheduleAndGrantLeases - 1 total")
    ray_worker.print_to_stdstream({"lines": [dump], "pid": "raylet", "is_err": False}, ignore_prefix=False)
    assert printed == []
    console = [r for r in caplog.records if r.name == "confgrid"]
    assert [r.getMessage() for r in console] == [
        "Ray: Raylet is terminated. (Ray's own message in confgrid.log)"]
    assert any("[state-dump]" in m for m in traced)
    other = {"lines": ["hello"], "pid": 123, "is_err": False}
    ray_worker.print_to_stdstream(other, ignore_prefix=False)
    assert printed == [other]


def test_lost_node_tags_name_each_lost_replica_and_its_node():
    def rep(i, state, ip="", node=""):
        return Replica(model="fx", index=i, load=0, state=state, node_ip=ip, node_id=node)

    assert lost_node_tags([rep(0, "released", "10.0.0.1"), rep(1, "dead", "10.0.0.2")]) == {}
    tags = lost_node_tags([rep(0, "lost", "10.0.0.2"), rep(1, "released", "10.0.0.1"), rep(2, "lost", "10.0.0.2"),
                           rep(3, "lost", "", "abc123")])
    assert tags == {"confgrid.lost_nodes": "10.0.0.2, abc123",
                    "confgrid.lost_replicas": "fx#0@10.0.0.2, fx#2@10.0.0.2, fx#3@abc123"}


def test_pools_are_asked_for_largest_replica_first_and_the_limit_keeps_the_rest_waiting(make_state, monkeypatch,
                                                                                          caplog):
    """The executor asks Ray for the pools in capacity.py ``start_order`` (largest replica first), not in grid order;
    under ``max_concurrent_models`` that order decides which models start first. Ray is replaced by a recorder."""
    grid = dict(GRID, models=[{"name": "one", "model": "confgrid-fixture"},
                              {"name": "dp2", "model": "confgrid-fixture", "chat_template": False, "replicas": 2},
                              {"name": "tp4", "model": "confgrid-fixture", "backend": "vllm",
                               "tensor_parallel_size": 4}],
                execution={"shard_size": 4, "max_concurrent_models": 2})
    e = make_state(grid, ray_ready=True, cluster={"GPU": 8.0, "CPU": 4.0},
                   needs={"one": (1, {"GPU": 1.0, "CPU": 1.0}, "one GPU"),
                          "dp2": (2, {"GPU": 1.0, "CPU": 1.0}, "one GPU"),
                          "tp4": (1, {"GPU": 4.0, "CPU": 4.0}, "tensor_parallel_size=4, STRICT_PACK")})
    asked = []

    def start(pool, cluster_resources=None):
        asked.append(pool.name)
        pool.replicas = [Replica(pool.name, r, pool.load, handle=SimpleNamespace()) for r in range(pool.spec.replicas)]
        return pool.replicas

    monkeypatch.setattr(ModelPool, "start", start)
    monkeypatch.setattr(pools, "ping", lambda st, rep: None)
    submit(e, e.plan.generate_shards())
    assert all(e.queues[m] for m in ("one", "dp2", "tp4"))
    with caplog.at_level(logging.INFO, "confgrid"):
        pools.start_pools(e)
    assert asked == ["tp4", "dp2"]  # grid order would have asked for one and dp2, tp4 waiting for the slot
    assert "model one: waits for a free slot (execution.max_concurrent_models=2; running: tp4, dp2)" in caplog.text
    e.queues["tp4"] = []  # tp4's work done (as if dispatched and finished): its slot goes to the model left
    pools.release(e, e.pools["tp4"], "its work is done")
    pools.start_pools(e)
    assert asked == ["tp4", "dp2", "one"]
