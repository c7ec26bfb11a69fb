"""The ``confgrid`` command line (:mod:`confgrid.cli.main`) and a submitted job's entrypoint (:mod:`confgrid.cli.job`).

The top of the dependency order: the CLI may import every other package (flows, report, cluster); nothing imports it.
"""
