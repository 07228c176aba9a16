"""The executor interface (what :mod:`.executors` and :mod:`.ray_executor` implement)."""

from __future__ import annotations

import traceback
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, TypeVar

__all__ = ["Executor", "JobFailure"]

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


@dataclass(frozen=True)
class JobFailure:
    """A job that raised where it ran, returned as a value so that one failing job does not stop
    an executor's other jobs (sweep chunks, certification shards): the error's type name, message
    and traceback."""

    kind: str
    message: str
    detail: str

    @classmethod
    def of(cls, exc: BaseException) -> "JobFailure":
        """The failure of ``exc`` (call inside its ``except`` block, for the traceback)."""
        return cls(type(exc).__name__, str(exc), traceback.format_exc(limit=8))
