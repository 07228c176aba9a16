"""The executor interface (what :mod:`.executors` and :mod:`.ray_executor` implement)."""

from __future__ import annotations

from typing import Any, Callable, Iterable, Iterator, TypeVar

__all__ = ["Executor"]

J = TypeVar("J")
R = TypeVar("R")


class Executor:
    """Runs ``fn(job, context)`` for each job; yields ``(job, result)`` pairs."""

    name: str = ""
    #: sends contexts to other machines by reference (:func:`orbitscope.engine.shipping.ship`)
    ships_by_reference: bool = False

    def map(self, fn: Callable[[Any, Any], R], jobs: Iterable[J], context: Any = None) -> Iterator[tuple[J, R]]:
        raise NotImplementedError  # pragma: no cover

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"
