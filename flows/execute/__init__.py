"""The executor: runs a plan's shards on Ray, model-major; the only part of flows/ that holds Ray actors.

Every model gets a pool of replicas; pools of different models run at once as far as the cluster allows
(``execution.max_concurrent_models``), asked for largest replica first. A replica keeps its model loaded for the
model's whole chain; a pool with nothing left to do is released, or kept while cross-model work may still come
and no other model waits for room, so a model loads at most twice per run. A replica takes several shards per
engine call (``models[].prompts_per_call``) and ``execution.calls_in_flight`` calls at a time; the shard stays
the unit of storage, keys, manifest and failure. A failed call fails its shards; a call whose replica is
unreachable or gone puts them back in the queue.

One state record (state.py ``ExecState``) is passed explicitly; each module owns the fields it writes (the
modules: docs/design.md). Ray is imported inside the functions that talk to it (``import ray  # lazy``): a run
whose shards are all stored, and the commands that only read a run, never load it.
"""
