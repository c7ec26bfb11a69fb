"""One registry class for the pluggable parts (prompts, contexts, rules, aggregations, adapters, metrics).

Every registry of the project is a :class:`Registry` holding one kind of thing under string names: a duplicate name is
an error naming the kind and the name, and an unknown name raises :class:`UnknownNameError`, whose message names the
kind, the value received and the sorted list of allowed names. The pattern follows lm-evaluation-harness
(``lm_eval/api/registry.py``): one generic class, one instance per kind, thin ``register_x`` / ``get_x`` functions
beside each instance.

The module sits at the package root and imports nothing from ``confgrid``, so both ``confgrid.protocols`` and
``confgrid.analysis`` may use it (analysis must not import protocols).

Examples
--------
>>> rules = Registry("correctness rule")
>>> @rules.register("containment")
... def containment(answer, item):
...     return 1.0
>>> rules.register("exact_match", lambda answer, item: 0.0)  # doctest: +ELLIPSIS
<function <lambda> at ...>
>>> rules.names()
['containment', 'exact_match']
>>> rules.get("contain")
Traceback (most recent call last):
    ...
confgrid.registry.UnknownNameError: unknown correctness rule 'contain'; allowed: containment, exact_match
>>> rules.register("containment", containment)
Traceback (most recent call last):
    ...
ValueError: correctness rule 'containment' is already registered; unregister it first to replace it
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar, overload

__all__ = ["Registry", "UnknownNameError"]

T = TypeVar("T")

_MISSING: Any = object()


class UnknownNameError(KeyError, ValueError):
    """A name that is not registered (both a ``KeyError`` and a ``ValueError``).

    ``str()`` gives the plain message (a bare ``KeyError`` would show its ``repr``), e.g. ``"unknown correctness rule
    'contain'; allowed: alias, containment, exact_match, mc_letter"``. Being a ``KeyError`` keeps ``except KeyError``
    around dictionary-style lookups working; being a ``ValueError`` lets validators (pydantic, argument checks) report
    it as a bad value. The keyword arguments are kept as attributes: ``kind`` (what the registry holds, or None),
    ``value`` (the name asked for) and ``allowed`` (the registered names, sorted, as a tuple).
    """

    def __init__(self, message: str, *, kind: str | None = None, value: Any = None, allowed=()) -> None:
        super().__init__(message)
        self.kind = kind
        self.value = value
        self.allowed = tuple(allowed)

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""

    def __reduce__(self):  # keep the keyword attributes across pickling (Ray ships errors between processes)
        return (type(self), (str(self),), {"kind": self.kind, "value": self.value, "allowed": self.allowed})


class Registry(Generic[T]):
    """Named objects of one kind: a duplicate name raises, an unknown name lists the choices.

    Parameters
    ----------
    kind : str
        What the registry holds, singular, as it reads in a message (``"prompt"``, ``"scoring context"``,
        ``"correctness rule"``, ``"token aggregation"``, ``"dataset adapter"``, ``"metric"``).
    value_type : type, optional
        When given, :meth:`register` rejects objects that are not instances of it (``TypeError``).

    Raises ``ValueError`` if ``kind`` is not a non-empty string.

    Notes
    -----
    Iteration, :meth:`names` and :meth:`items` follow registration order (lookups such as "the first registered
    context with these coordinates" depend on it); error messages list the names sorted. Subscripting
    (``registry[name]``) is :meth:`get`. Not thread-safe: registration happens at import time or while a grid spec is
    parsed, in one thread.

    Examples
    --------
    >>> reg = Registry[int]("answer", value_type=int)
    >>> reg.register("x", 1)
    1
    >>> "x" in reg, len(reg), list(reg), reg["x"]
    (True, 1, ['x'], 1)
    >>> reg.unregister("x")
    1
    >>> len(reg)
    0
    """

    def __init__(self, kind: str, *, value_type: type | None = None) -> None:
        if not isinstance(kind, str) or not kind:
            raise ValueError(f"Registry: kind must be a non-empty string, got {kind!r}")
        self._kind = kind
        self._value_type = value_type
        self._entries: dict[str, T] = {}

    @property
    def kind(self) -> str:
        """What the registry holds, as named in its messages."""
        return self._kind

    # ----------------------------------------------------------------- registration

    @overload
    def register(self, name: str) -> Callable[[T], T]: ...

    @overload
    def register(self, name: str, obj: T) -> T: ...

    def register(self, name: str, obj: T = _MISSING) -> T | Callable[[T], T]:
        """Add ``obj`` under ``name`` and return it; without ``obj``, a decorator doing so for its argument.

        Raises ``ValueError`` if ``name`` is empty or not a string (at once, also in the decorator form) or already
        registered (the message names the kind and the name; the decorator form raises when applied); ``TypeError``
        if ``value_type`` was given and ``obj`` is not an instance of it.
        """
        if not isinstance(name, str) or not name:
            raise ValueError(f"{self._kind} name must be a non-empty string, got {name!r}")
        if obj is _MISSING:

            def decorator(fn: T) -> T:
                return self.register(name, fn)

            return decorator
        if name in self._entries:
            raise ValueError(f"{self._kind} {name!r} is already registered; unregister it first to replace it")
        if self._value_type is not None and not isinstance(obj, self._value_type):
            raise TypeError(
                f"{self._kind} {name!r}: expected a {self._value_type.__name__}, got {type(obj).__name__}"
            )
        self._entries[name] = obj
        return obj

    def unregister(self, name: str, *, missing_ok: bool = False) -> T | None:
        """Remove ``name`` and return what it held (for tests that register temporary entries).

        With ``missing_ok`` an unregistered name returns None; otherwise it raises ``UnknownNameError``.
        """
        if name in self:
            return self._entries.pop(name)
        if missing_ok:
            return None
        raise self._unknown(name)

    # ----------------------------------------------------------------- lookup

    def get(self, name: str) -> T:
        """The object registered under ``name``.

        Raises ``UnknownNameError`` (a ``KeyError`` and a ``ValueError``) if ``name`` is not registered, e.g.
        ``"unknown metric 'f1'; allowed: aurc, auroc, brier, ece"``.
        """
        try:
            return self._entries[name]
        except (KeyError, TypeError):  # TypeError: an unhashable name
            raise self._unknown(name) from None

    def __getitem__(self, name: str) -> T:
        return self.get(name)

    def __contains__(self, name: object) -> bool:
        try:
            return name in self._entries
        except TypeError:  # unhashable
            return False

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._entries))

    def __len__(self) -> int:
        return len(self._entries)

    def names(self) -> list[str]:
        """The registered names, in registration order (``sorted(registry)`` for sorted)."""
        return list(self._entries)

    def items(self) -> list[tuple[str, T]]:
        """``(name, object)`` pairs in registration order (a snapshot; safe to register while iterating)."""
        return list(self._entries.items())

    def __repr__(self) -> str:
        return f"Registry({self._kind!r}, names={self.names()!r})"

    def _unknown(self, name: object) -> UnknownNameError:
        allowed = sorted(self._entries)
        listed = ", ".join(allowed) if allowed else "(none registered)"
        return UnknownNameError(
            f"unknown {self._kind} {name!r}; allowed: {listed}", kind=self._kind, value=name, allowed=allowed
        )
