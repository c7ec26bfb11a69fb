"""Capability calibration (study 004): confidence rated against the model's expected accuracy on an item.

Pure numpy / pandas / scipy / scikit-learn (no Ray). :mod:`.targets` (the capability and response targets, standard
error against k, their divergence), :mod:`.metrics` (Brier, ECE, Spearman against a continuous target with a paired
item bootstrap), :mod:`.estimators` (isotonic recalibration, linear probes, the uniform baseline), :mod:`.pass_at_k`,
:mod:`.allocation` (inference budget allocation).
"""
