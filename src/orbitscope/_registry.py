"""One registry mechanism for every pluggable thing (orbits, kinds, tasks, data specs, models,
perturbation samplers, sequential tests, interface views, executors).

A :class:`Registry` maps names to factories. ``register`` adds one (also usable as a class
decorator), ``get`` returns it (a :class:`~orbitscope.errors.NotFoundError` listing the known
names otherwise), ``names``/``list`` enumerate them (optionally filtered), and ``from_spec`` builds
an object from a spec dict ``{key: name, **kwargs}`` (a :class:`~orbitscope.errors.SpecError` for an
unknown name) by calling the factory's ``from_spec`` when it
has one, else the factory with the remaining keys.
"""

from __future__ import annotations

from typing import Any, Callable, Generic, Iterator, TypeVar

from .errors import NotFoundError, SpecError

__all__ = ["Registry"]

T = TypeVar("T")


class Registry(Generic[T]):
    """Named factories of one sort of thing.

    Args:
        what: what the entries are, for messages (e.g. ``"orbit kind"``).
        key: the spec key holding the name (e.g. ``"kind"``, ``"arch"``).
    """

    def __init__(self, what: str, key: str = "kind") -> None:
        self.what = what
        self.key = key
        self._entries: dict[str, T] = {}

    def register(self, name: str, entry: T | None = None, *, replace: bool = False) -> Any:
        """Register ``entry`` under ``name``; without ``entry``, return a decorator that does."""
        if not isinstance(name, str) or not name:
            raise SpecError(f"a {self.what} name must be a non-empty string, got {name!r}")

        def add(obj: T) -> T:
            if name in self._entries and not replace and self._entries[name] is not obj:
                raise SpecError(f"{self.what} {name!r} is already registered; pass replace=True to override it")
            self._entries[name] = obj
            return obj

        return add if entry is None else add(entry)

    def get(self, name: str) -> T:
        """The entry registered as ``name``."""
        try:
            return self._entries[name]
        except (KeyError, TypeError):
            raise NotFoundError(f"unknown {self.what} {name!r}; known: {', '.join(self.names()) or '(none)'}") from None

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._entries))

    def __len__(self) -> int:
        return len(self._entries)

    def names(self, where: Callable[[str, T], bool] | None = None) -> list[str]:
        """Sorted names, optionally only those for which ``where(name, entry)`` is true."""
        return [n for n in sorted(self._entries) if where is None or where(n, self._entries[n])]

    def list(self, where: Callable[[str, T], bool] | None = None) -> list[tuple[str, T]]:
        """Sorted ``(name, entry)`` pairs, optionally filtered like :meth:`names`."""
        return [(n, self._entries[n]) for n in self.names(where)]

    def from_spec(self, spec: dict[str, Any]) -> Any:
        """Build an object from ``{self.key: name, **kwargs}``."""
        if not isinstance(spec, dict) or self.key not in spec:
            raise SpecError(f"a {self.what} spec must be a dict with a {self.key!r} key, got {spec!r}")
        if spec[self.key] not in self._entries:
            raise SpecError(f"unknown {self.what} {spec[self.key]!r}; known: {', '.join(self.names()) or '(none)'}")
        entry: Any = self._entries[spec[self.key]]
        if hasattr(entry, "from_spec"):
            return entry.from_spec(spec)
        kwargs = {k: v for k, v in spec.items() if k != self.key}
        try:
            return entry(**kwargs)
        except TypeError as exc:  # a TypeError still: the arguments, not the spec's syntax, are wrong
            raise TypeError(f"bad arguments for {self.what} {spec[self.key]!r}: {exc}") from exc
