"""Accuracy-controlled comparison of calibration across models (study 001, ACE).

Pure numpy / pandas / scipy (no Ray). Entry point :func:`ace_tables`; the layers below it: :mod:`.frame` (input
contract, pairs, matched cells), :mod:`.views` (raw, IA, DA point estimates), :mod:`.candidates` (CA and
self-preference), :mod:`.reversals` (reversals, patterns, correlation), :mod:`.bootstrap` (vectorized paired
bootstrap), :mod:`.tables` (output tables).
"""

from .frame import ACEInputError, ACEWarning, Pair
from .tables import ACETables, ace_tables

__all__ = ["ace_tables", "ACETables", "ACEInputError", "ACEWarning", "Pair"]
