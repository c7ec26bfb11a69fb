"""The model stages, one file each, registered on import (see flows/stages/base.py and CONTRIBUTING.md "Adding a stage").

Import a name from the module that defines it (``confgrid.flows.stages.base`` for the registry); importing any
of them imports this package first, which registers every stage.
"""

from confgrid.flows.stages import generate, grade, score, probe, hidden, next_token, rate, sample  # noqa: F401
