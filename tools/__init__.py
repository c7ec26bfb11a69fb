"""Development tools that are not part of the installed package.

``tools.fixture`` (with ``fixture_methods`` and ``fixture_json``) is the recipe that builds and trains the
bundled fixture models in ``actors/fixture_model*/``; run it from the repository root with
``python -m tools.fixture --out actors/fixture_model``. The runtime only needs the trained directories, which
:mod:`confgrid.actors.named_models` resolves by name.
"""
