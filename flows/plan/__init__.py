"""The plan: what to compute for a grid, as a pure function of the spec (shards, their keys, the progress total); no
Ray.
"""
