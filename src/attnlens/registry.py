"""One registry idiom for every concept that varies: explanation methods (their scorers on their cards), tasks,
data layouts, data sources, corpus generators, model families and architectures.

A :class:`Registry` holds the things of one kind by name, in registration order. Each thing is registered once, in
the module that defines it (``REGISTRY.register(Method(...))``, ``@REMOVALS.register("delete")``); a second
registration of a name is a programming error. Asking for a name nobody registered is bad input: one
:class:`UnknownName` line that names the config field and every registered choice. A leaf: it imports nothing
of attnlens but the error type, so registries of plain data stay free of torch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Generic, TypeVar, overload

from attnlens.errors import InputError

T = TypeVar("T")


class UnknownName(InputError, LookupError):
    """A name no registry entry has: ``<where>: <field>: expected one of the <kind> [...], got 'x'`` (an
    :class:`InputError`, so a rule prints it as one line)."""


class Registry(Generic[T]):
    """The things of one kind, by name, in registration order.

    Args:
        kind: what the things are, as an error names them (``"explanation methods"``).
        field: the config key (or file field) that names one (``"explanations.methods"``).
        name_of: how a registered thing names itself where :meth:`register` is given none (default: its ``name``).
    """

    def __init__(self, kind: str, field: str, name_of: Callable[[T], str] | None = None) -> None:
        self.kind = kind
        self.field = field
        self._name_of = name_of or (lambda item: item.name)
        self._items: dict[str, T] = {}

    @overload
    def register(self, item: T, name: str | None = None) -> T: ...

    @overload
    def register(self, item: str) -> Callable[[T], T]: ...

    def register(self, item, name=None):
        """Add ``item`` under ``name`` (default: its own name) and return it; ``register("name")`` as a decorator
        adds the decorated function under that name.

        Raises:
            ValueError: the name is registered already.
        """
        if isinstance(item, str) and name is None:
            return lambda fn: self.register(fn, item)
        key = self._name_of(item) if name is None else name
        if key in self._items:
            raise ValueError(f"{key!r} is already registered among the {self.kind}")
        self._items[key] = item
        return item

    def unregister(self, name: str) -> None:
        """Remove ``name`` (a test's own entry, after the test)."""
        del self._items[name]

    def get(self, name: str, where: str = "config") -> T:
        """The thing registered as ``name``.

        Raises:
            UnknownName: ``name`` is not registered; the line names ``where``, the field and the choices.
        """
        if name not in self._items:
            raise UnknownName(where, self.field, f"expected one of the {self.kind} {self.names()}, got {name!r}")
        return self._items[name]

    def names(self) -> list[str]:
        """The registered names, in registration order."""
        return list(self._items)

    def values(self) -> list[T]:
        return list(self._items.values())

    def items(self) -> list[tuple[str, T]]:
        return list(self._items.items())

    def __getitem__(self, name: str) -> T:
        return self.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._items))

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}: {self.names()})"
