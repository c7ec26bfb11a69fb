"""The executor: runs a plan's shards on Ray, model-major; the only part of flows/ that holds Ray actors (how it
schedules pools, replicas and calls: docs/guides/cluster.md).

One state record (state.py ``ExecState``) is passed explicitly; each module owns the fields it writes (the
modules: docs/design.md). Ray is imported inside the functions that talk to it (``import ray  # lazy``): a run
whose shards are all stored, and the commands that only read a run, never load it.
"""
