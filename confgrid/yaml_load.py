"""YAML reading for every file confgrid reads (grids, prompt and context files): a repeated key is an error.

PyYAML's ``safe_load`` keeps the last of two equal keys silently (``resamples: 200`` then ``resamples: 7`` runs 7).
:func:`safe_load` here is ``yaml.safe_load`` with one change: a key repeated in one mapping raises.
"""

from __future__ import annotations

from typing import IO, Any

import yaml

__all__ = ["DuplicateKeyError", "safe_load"]


class DuplicateKeyError(yaml.constructor.ConstructorError):
    """A mapping repeats a key; the message names the key and both lines."""


class _UniqueKeyLoader(yaml.SafeLoader):
    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            line = key_node.start_mark.line + 1
            try:
                first = seen.get(key)
            except TypeError:  # an unhashable key: let the base class report it
                continue
            if first is not None:
                raise DuplicateKeyError(None, None, f"duplicate key {key!r} at line {line} (first at line {first}); "
                                        "each key may appear once in a mapping", key_node.start_mark)
            seen[key] = line
        return super().construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _UniqueKeyLoader.construct_mapping)


def safe_load(stream: str | bytes | IO[str] | IO[bytes]) -> Any:
    """``yaml.safe_load`` that rejects repeated keys: ``DuplicateKeyError`` (a subclass of ``yaml.YAMLError``, so
    code that reports YAML errors reports it too) if a mapping repeats a key, ``yaml.YAMLError`` for any other."""
    return yaml.load(stream, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
