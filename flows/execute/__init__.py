"""The executor: runs a plan's shards on Ray (model pools and replicas, liveness of replicas and nodes,
the Ray session); the only part of flows/ that holds Ray actors.
"""
