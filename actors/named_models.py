"""Model names a grid may use instead of a path: the bundled fixture models.

A grid's ``model:`` is a Hugging Face id or a local directory; the names
registered here resolve to directories shipped with the package (package
data ``actors/fixture_model*/``). The fixture models are smoke-test
artefacts: ~1M-parameter Llama models with their own tokenizer, trained on
the bundled questions by the recipe in ``tools/fixture.py`` (not installed).
Their numbers say nothing about real LLMs.

Names live on the one :class:`~confgrid.registry.Registry` (kind ``"named
model"``): an unknown name is not an error here, since any other string is a
path or hub id for ``from_pretrained``.

Examples
--------
>>> resolve_model("confgrid-fixture") == str(FIXTURE_MODEL_DIR)
True
>>> resolve_model("Qwen/Qwen3-8B")
'Qwen/Qwen3-8B'
>>> sorted(NAMED_MODELS.names())
['confgrid-fixture', 'confgrid-fixture-json', 'confgrid-fixture-small']
"""

from __future__ import annotations

import importlib.resources
from pathlib import Path

from confgrid.registry import Registry

__all__ = ["FIXTURE_MODEL_DIR", "FIXTURE_SMALL_MODEL_DIR", "FIXTURE_JSON_MODEL_DIR", "NAMED_MODELS", "resolve_model"]

_ROOT = importlib.resources.files("confgrid.actors")
#: The fixture model (package data ``actors/fixture_model/*``): 60% of the bundled questions taught.
FIXTURE_MODEL_DIR: Path = Path(str(_ROOT / "fixture_model"))
#: The same recipe taught 30% of the questions (``--train-fraction 0.3``): a weaker model whose trained questions
#: are a subset of the fixture's, for comparisons across models of different accuracy (study 001, examples/ace.yaml).
FIXTURE_SMALL_MODEL_DIR: Path = Path(str(_ROOT / "fixture_model_small"))
#: The same recipe with the JSON formats of studies 002 and 003 also taught (``--json-formats``;
#: tools/fixture_json.py): the model of examples/confidencebench.yaml and examples/hard_easy.yaml.
FIXTURE_JSON_MODEL_DIR: Path = Path(str(_ROOT / "fixture_model_json"))

#: Reserved model names of a grid -> the bundled directories.
NAMED_MODELS: Registry[Path] = Registry("named model")
NAMED_MODELS.register("confgrid-fixture", FIXTURE_MODEL_DIR)
NAMED_MODELS.register("confgrid-fixture-small", FIXTURE_SMALL_MODEL_DIR)
NAMED_MODELS.register("confgrid-fixture-json", FIXTURE_JSON_MODEL_DIR)


def resolve_model(model: str) -> str:
    """The path ``from_pretrained`` loads for a grid's ``model:`` value.

    Parameters
    ----------
    model : str
        A registered name (``confgrid-fixture``, ...), a local directory or a Hugging Face id.

    Returns
    -------
    str
        The bundled directory for a registered name; ``model`` unchanged otherwise.
    """
    return str(NAMED_MODELS.get(model)) if model in NAMED_MODELS else model
