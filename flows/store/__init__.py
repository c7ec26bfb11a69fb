"""The run folder: the manifest and its shard records, atomic table writes, the run log and the run's
status as `confgrid status` shows it.
"""
