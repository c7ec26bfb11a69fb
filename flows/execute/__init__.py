"""The executor: runs a plan's shards on Ray, model-major; the only part of flows/ that holds Ray actors.

Every model gets a pool of replicas; pools of different models run at once as far as the cluster allows
(``execution.max_concurrent_models`` bounds them), asked for largest replica first. A replica keeps its model
loaded for the model's whole chain (generate, then parse and grade on the driver, then its own answers' scores
and probes); a pool with nothing left to do is released, or kept while cross-model work may still come and no
other model waits for room, so a model loads at most twice per run. A replica takes several shards per engine
call (``models[].prompts_per_call``) and ``execution.calls_in_flight`` calls at a time; the shard stays the unit
of storage, keys, manifest and failure. A failed call fails its shards; a call whose replica is unreachable or
gone puts them back in the queue.

Layout: one state record, passed explicitly; each module owns the fields it writes.

=============  ===================================================================================================
state.py       :class:`~confgrid.flows.execute.state.ExecState`: the inputs, the queue, the calls and pings in
               flight, the pools, the node table and the outcomes the runner reads
executor.py    :func:`~confgrid.flows.execute.executor.execute`: the event loop, an engine call's answer, the
               manifest's replicas, the log of what waits
queue.py       the shards: submit (reuse, twins, skip), pack into engine calls, dispatch, store or fail
pools.py       the replicas (:class:`~confgrid.flows.execute.pools.Replica`, ``ModelPool``) and their life cycle:
               start, grow (elastic replicas), release, a model with no replica left
capacity.py    the pure decisions on pools and nodes: the capacity check, the start order, elastic growth,
               the models a lost node strands; the node table (which nodes were lost since the last look)
liveness.py    unreachable replicas, engines that died, lost nodes: requeue, probe, restart counts, fail fast
timeline.py    the replicas' timeline and the GPU-seconds idle while work was queued (pure)
ray_session.py the private local cluster, or a checked address
=============  ===================================================================================================

Ray is imported inside the functions that talk to it (``import ray  # lazy``): a run whose shards are all
stored, and the commands that only read a run, never load it.
"""
