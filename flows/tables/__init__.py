"""The stage tables of a run (generations, graded, scores, signals) assembled from stored shards, and the
one long signal table every producer appends to.
"""
