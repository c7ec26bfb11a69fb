"""Pools over their lifetime: which models run where and when (a mixin of the executor).

The executor (flows/execute/executor.py) runs one event loop over one state; this part of it decides on the
pools: join Ray and size every model's replica against the cluster (capacity, ``max_replicas``), start pools
largest replica first within ``execution.max_concurrent_models``, grow a pool by elastic replicas where
:func:`~confgrid.flows.execute.pools.grow_replicas` says so, and release a pool (or withdraw a replica not
loaded yet) when its work is done or other models wait for room. The decisions are the pure functions of
flows/execute/pools.py; the methods here apply them to the executor's state (``pools``, ``history``,
``_queues``, ``_pings``, ``_inflight``) and say in the log what waits.
"""

from __future__ import annotations

import logging
import time

from confgrid.flows.execute.pools import (
    CapacityError,
    ModelPool,
    Replica,
    _fmt,
    _placed,
    at_once,
    check_capacity,
    free_per_node,
    grow_replicas,
    max_replicas,
    model_config,
    node_resources,
    start_latency,
    start_order,
)
from confgrid.flows.spec.grid import ModelSpec

__all__ = ["PoolLifecycle", "GROW_EVERY_S", "ELASTIC_PLACE_S"]

log = logging.getLogger("confgrid")

#: Seconds between two decisions on elastic replicas (each reads the nodes' free resources from Ray).
GROW_EVERY_S = 0.5
#: Seconds an elastic replica may wait for Ray to place it before its request is withdrawn (the free resources
#: it was asked for were taken meanwhile; it must not take room a pool waits for later).
ELASTIC_PLACE_S = 10.0


class PoolLifecycle:
    """Starting, growing and releasing the executor's model pools (mixed into
    :class:`~confgrid.flows.execute.executor.Executor`, whose state it reads and changes)."""

    def _ensure_ray(self) -> None:
        if self._ray_ready:
            return
        from confgrid.actors.model_actor import replica_resources
        from confgrid.flows.execute.ray_session import init_ray

        init_ray(self.address)
        import ray

        nodes = node_resources()
        # GPUs: does the cluster have any; CPUs: what one node offers (a CPU replica reserves one node's CPUs)
        total = ray.cluster_resources()
        self._cluster = {"GPU": float(total.get("GPU", 0.0)), "CPU": max((n["CPU"] for n in nodes), default=1.0)}
        # what the cluster declares, for the timeline's GPU-seconds (flows/execute/timeline.py)
        self.store.meta["cluster"] = {"GPU": float(total.get("GPU", 0.0)), "CPU": float(total.get("CPU", 0.0)),
                                      "nodes": len(nodes)}
        if self._invocation is not None:
            self._invocation["cluster"] = self.store.meta["cluster"]
        self._needs = {}
        for m in self.spec.models:
            rr = replica_resources(model_config(m, self.spec), self._cluster)
            self._needs[m.name] = (m.replicas, rr.per_node, rr.note)
            self._max_replicas[m.name] = max_replicas(m.max_replicas, m.replicas, rr.per_node, nodes)
        problems = check_capacity(self._needs, nodes)
        if problems and not self.spec.execution.wait_for_nodes:
            raise CapacityError(problems)
        for p in problems:
            log.warning("%s; waiting for the autoscaler to add such a node (execution.wait_for_nodes)", p)
        for name, (n, need, _) in self._needs.items():
            fit = at_once(need, nodes)
            if 0 < fit < n:
                log.info("model %s: %d replicas of %s, the cluster holds %d at once; the rest start as room frees "
                         "up", name, n, _fmt(need), fit)
            if self._max_replicas[name] > n:
                log.info("model %s: up to %d replicas (max_replicas %s): extra replicas start on free resources "
                         "while its queue holds more calls than its replicas take", name, self._max_replicas[name],
                         self.models[name].max_replicas)
            elif self.models[name].max_replicas is not None:
                log.info("model %s: max_replicas %s allows no extra replica: the cluster holds %d of %s at once and "
                         "the model has %d", name, self.models[name].max_replicas, fit, _fmt(need), n)
        self._ray_ready = True

    def _api_cache(self, m: ModelSpec) -> str | None:
        """An API model's answer cache: ``<run dir>/api_cache`` (created here, so a replica can tell it reaches it)."""
        if m.backend != "openai":
            return None
        from confgrid.actors.api_cache import CACHE_DIR

        path = self.store.root / CACHE_DIR
        path.mkdir(parents=True, exist_ok=True)
        return str(path)

    def _alive_pools(self) -> list[ModelPool]:
        return [p for p in self.pools.values() if not p.released]

    def _start_pools(self) -> None:
        limit = self.spec.execution.max_concurrent_models
        pending = [name for name in self.models if self._queues[name] and name not in self.pools]
        if not pending:
            return
        self._ensure_ray()
        # largest replica first (first-fit decreasing): small replicas asked for first can fragment the nodes
        for name in start_order({name: self._needs[name] for name in pending}):
            alive = self._alive_pools()
            if limit is not None and len(alive) >= limit:
                self._say(f"limit:{name}", f"model {name}: waits for a free slot (execution.max_concurrent_models="
                          f"{limit}; running: {', '.join(p.name for p in alive)})")
                continue
            m = self.models[name]
            load = sum(1 for p in self.history if p.name == name)
            pool = ModelPool(m, model_config(m, self.spec, self._api_cache(m)), load)
            try:
                pool.start(self._cluster)
            except Exception as exc:  # noqa: BLE001 - e.g. a placement group that can never be created
                self._model_dead(name, f"could not start replicas of model {name!r}: {type(exc).__name__}: {exc}")
                continue
            self.pools[name] = pool
            self.history.append(pool)
            for rep in pool.replicas:
                self._ping(rep)
            need = self._needs[name][1]
            log.info("model %s: %d %s replica(s) of %s requested%s", name, m.replicas, m.backend, _fmt(need),
                     f" (load {load + 1} of this model in the run)" if load else "")

    def _grow_pools(self) -> None:
        """Elastic replicas: ask for the extra replicas pools.py ``grow_replicas`` decides on, every
        GROW_EVERY_S; withdraw an extra one Ray has not placed within ELASTIC_PLACE_S; log what waits."""
        now = time.time()
        if now < self._grow_at:
            return
        self._grow_at = now + GROW_EVERY_S
        for pool in self._alive_pools():
            for rep in pool.waiting():
                if rep.elastic and now - rep.requested_at >= ELASTIC_PLACE_S and _placed(rep.handle) is False:
                    self._cancel_waiting(pool, rep, f"extra replica not placed within {ELASTIC_PLACE_S:.0f} s (the "
                                         "free resources it was asked for were taken meanwhile)")
        pools = [p for p in self._alive_pools() if self._queues[p.name]
                 and self._max_replicas.get(p.name, 0) > len(p.live())]
        if not pools:
            return
        demands, queued = {}, {}
        start_s = start_latency([r for p in self.history for r in p.replicas])
        for pool in self._alive_pools():
            queued[pool.name] = self._queued_calls(pool.name)
            demands[pool.name] = pool.demand(self._needs[pool.name][1], self._max_replicas[pool.name],
                                             *queued[pool.name], unplaced=len(pool.unplaced()), start_s=start_s,
                                             calls_in_flight=self.spec.execution.calls_in_flight)
        starting = [m for m, q in self._queues.items() if q and m not in self.pools and m not in self._dead_reason]
        growth = grow_replicas(list(demands.values()), free_per_node(), self.spec.execution.calls_in_flight,
                               starting)
        for name, node in growth.start:
            pool, d = self.pools[name], demands[name]
            live = len(pool.live())
            rep = pool.add_replica(self._cluster)
            self._ping(rep)
            log.info("model %s: extra replica %s asked for (max_replicas %d): %d call(s) queued for %d replica(s), "
                     "%.0f s of one replica's work against %.0f s to start and %.0f s to load; %s free on node %s",
                     name, rep.name, self._max_replicas[name], queued[name][0], live, d.work_s or 0.0, d.start_s,
                     d.load_s or 0.0, _fmt(self._needs[name][1]), node[:8])
        for name, why in growth.waits.items():
            self._say(f"grow:{name}", f"model {name}: {queued[name][0]} call(s) queued for "
                      f"{len(self.pools[name].live())} replica(s) (max_replicas {self._max_replicas[name]}); an extra "
                      f"replica waits: {why}")

    def _release(self, pool: ModelPool, why: str) -> None:
        if pool.released:
            return
        for ref, rep in list(self._pings.items()):
            if rep in pool.replicas:
                del self._pings[ref]
        self._settle_unreachable(pool)
        pool.release()
        self.pools.pop(pool.name, None)
        if any(r.loads for r in pool.replicas):
            log.info("model %s: released (%s)", pool.name, why)

    def _others_wait(self, name: str) -> bool:
        """Another model has queued work and no room: no pool yet, or no loaded replica and one that Ray has
        not placed for lack of resources (a replica placed and loading needs no room from anyone)."""
        for other, q in self._queues.items():
            if other == name or not q:
                continue
            pool = self.pools.get(other)
            if pool is None:
                return True
            if not pool.ready() and any(_placed(r.handle) is not True for r in pool.waiting()):
                return True
        return False

    def _release_idle(self) -> None:
        for pool in self._alive_pools():
            name = pool.name
            busy = any(f.replica.model == name for f in self._inflight.values())
            if self._queues[name] or busy:
                continue
            for rep in pool.waiting():  # nothing left to give a replica that is not loaded yet
                self._cancel_waiting(pool, rep)
            if self._plan.expects_work(name) and not self._others_wait(name):
                self._say(f"keep:{name}", f"model {name}: stays loaded; it has cross-model work to come "
                          f"({'; '.join(self._plan.waiting_for()) or 'answers of other models'})")
                continue
            self._release(pool, "its work is done" if not self._plan.expects_work(name)
                          else "other models wait for room; it is reloaded for its cross-model work")

    def _cancel_waiting(self, pool: ModelPool, rep: Replica,
                        why: str = "not needed any more (no work left for it)") -> None:
        for ref, r in list(self._pings.items()):
            if r is rep:
                del self._pings[ref]
        pool.stop_replica(rep)
        log.info("replica %s: %s; request withdrawn (%s)", rep.name, why,
                 {"loading": "it was loading its model", "waiting": "it was waiting for resources"}.get(
                     rep.withdrawn or "", "loading or waiting for resources"))
