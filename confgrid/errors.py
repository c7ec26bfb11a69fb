"""Exceptions that cross process boundaries (Ray, multiprocessing) with their fields.

Python pickles an exception as ``cls(*exc.args)`` plus its ``__dict__``. An exception whose ``__init__`` takes other
arguments than its message (the package's ``ApiRequestError(message, status, attempts)``,
``CapacityError(problems)``...) then fails to unpickle: Ray wraps it in an ``UnserializableException`` and the driver
loses the type and the fields. :class:`FieldsPickle` makes an exception rebuild itself without calling ``__init__``:
``args`` and every attribute come back as they were.

Imports nothing else of the package (actors/ and flows/ both use it).
"""

from __future__ import annotations

from typing import Any

__all__ = ["FieldsPickle"]


def _rebuild(cls: type, args: tuple[Any, ...], state: dict[str, Any]) -> BaseException:
    """An instance of exception class ``cls`` with ``args`` and attributes ``state``, without ``__init__``."""
    obj = cls.__new__(cls)
    obj.args = args
    obj.__dict__.update(state)
    return obj


class FieldsPickle:
    """Mixin for an exception class: pickling keeps the class, ``args`` and every attribute.

    Put it first among the bases (``class E(FieldsPickle, ValueError)``). The traceback, ``__cause__`` and
    ``__context__`` are not pickled (as for any exception); attributes must be picklable themselves.
    """

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), tuple(self.args), dict(self.__dict__)))  # type: ignore[attr-defined]
