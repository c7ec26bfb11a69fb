"""confgrid: fix the answer, vary the measurement.

The subpackages live in the repository's top-level folders (see pyproject.toml): ``confgrid.flows`` (grid, stages,
store, MLflow, CLI), ``confgrid.actors`` (Ray actors and model backends), ``confgrid.protocols`` (prompts, contexts,
parsing, correctness, aggregation, datasets), ``confgrid.analysis`` (metrics, bootstrap, comparisons) and
``confgrid.cluster`` (cluster configs and job submission). :mod:`confgrid.registry` holds the one registry class
behind every registry of named, pluggable parts; it imports nothing else of the package.
"""

__version__ = "0.1.0"
