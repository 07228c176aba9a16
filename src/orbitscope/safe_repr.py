"""Bounded renderings of user values for error messages.

``f"... got {value!r}"`` is a trap when ``value`` comes from a user's file: a YAML file of a few
hundred bytes can hold a list whose ``repr`` is gigabytes long (aliases repeat what they point
to: the "billion laughs"), a string can be megabytes, and an integer of a hundred thousand digits
makes ``repr`` raise. :func:`short_repr` renders any value as ``repr`` would, but stops after
``limit`` characters, visits at most about ``limit`` items of a container, and goes at most
:data:`SHORT_REPR_DEPTH` levels deep, so its cost is bounded whatever the value.
:func:`short_text` bounds a text already made (e.g. the message of a nested error).
"""

from __future__ import annotations

import datetime
import decimal
import fractions
from pathlib import PurePath
from typing import Any

__all__ = ["SHORT_REPR_LIMIT", "SHORT_REPR_DEPTH", "short_repr", "short_text"]

#: Default bound on the characters of :func:`short_repr` and :func:`short_text`.
SHORT_REPR_LIMIT = 200
#: How many levels of nested containers :func:`short_repr` shows before writing ``…``.
SHORT_REPR_DEPTH = 6

_ELLIPSIS = "…"
# scalars whose repr is short and cheap whatever their value (ints and strings are bounded apart)
_PLAIN = (float, complex, bool, type(None), datetime.date, datetime.time, datetime.timedelta, decimal.Decimal,
          fractions.Fraction, PurePath)
_BRACKETS = {list: ("[", "]"), tuple: ("(", ")"), set: ("{", "}"), frozenset: ("frozenset({", "})")}


class _Full(Exception):
    """The budget of characters is spent."""


class _Writer:
    def __init__(self, limit: int) -> None:
        self.parts: list[str] = []
        self.left = limit

    def put(self, text: str) -> None:
        if len(text) > self.left:
            self.parts.append(text[: max(self.left, 0)])
            self.left = -1
            raise _Full
        self.parts.append(text)
        self.left -= len(text)

    def value(self, value: Any, depth: int, path: set[int]) -> None:
        if isinstance(value, str):
            cut = value[: self.left + 1]  # never copies more than the budget
            self.put(repr(cut) if len(cut) == len(value) else repr(cut)[:-1])
            return
        if isinstance(value, (bytes, bytearray)):
            cut = bytes(value[: self.left + 1])
            self.put(repr(cut) if len(cut) == len(value) else repr(cut)[:-1])
            return
        if isinstance(value, int) and not isinstance(value, bool):
            bits = value.bit_length()
            self.put(repr(int(value)) if bits <= 1024 else f"<an integer of {bits} bits>")
            return
        if isinstance(value, _PLAIN):
            self.put(repr(value))
            return
        if isinstance(value, dict) or any(isinstance(value, t) for t in _BRACKETS):
            self.container(value, depth, path)
            return
        shape, dtype = getattr(value, "shape", None), getattr(value, "dtype", None)
        if isinstance(shape, tuple) and len(shape) == 0 and type(value).__module__ == "numpy" \
                and getattr(dtype, "kind", None) in ("b", "i", "u", "f", "c", "m", "M"):
            self.put(repr(value))  # a numpy number: short, like a number
            return
        if isinstance(shape, tuple) and dtype is not None:  # an array or tensor: its shape, not its values
            self.put(f"<{type(value).__name__} of shape {tuple(shape)} and dtype {dtype}>")
            return
        # an object of another type: its type only (its __repr__ could cost anything)
        self.put(f"<{type(value).__name__}>")

    def container(self, value: Any, depth: int, path: set[int]) -> None:
        if isinstance(value, dict):
            opening, closing = "{", "}"
        else:
            opening, closing = next(b for t, b in _BRACKETS.items() if isinstance(value, t))
        if id(value) in path:  # a structure that holds itself (possible with YAML anchors)
            self.put(opening + "..." + closing)
            return
        if depth >= SHORT_REPR_DEPTH:
            self.put(opening + _ELLIPSIS + closing)
            return
        path.add(id(value))
        self.put(opening)
        items = iter(value.items()) if isinstance(value, dict) else iter(value)
        for k, item in enumerate(items):
            if k:
                self.put(", ")
            if isinstance(value, dict):
                key, item = item
                self.value(key, depth + 1, path)
                self.put(": ")
            self.value(item, depth + 1, path)
        if isinstance(value, tuple) and len(value) == 1:
            self.put(",")
        self.put(closing)
        path.discard(id(value))


def short_repr(value: Any, limit: int = SHORT_REPR_LIMIT) -> str:
    """``repr(value)`` cut to at most ``limit`` characters (plus ``…`` when cut), at a bounded cost.

    Strings, bytes, numbers, ``None``, dates, paths, lists, tuples, sets and dicts read as their
    ``repr``; containers deeper than :data:`SHORT_REPR_DEPTH` levels show as ``[…]``, a container
    that holds itself as ``[...]``, an integer of more than 1024 bits by its size, an array or
    tensor by its shape and dtype, and any other object by its type name (its own ``__repr__`` is
    not called). The work done is proportional to ``limit``, never to the size of ``value``.

    Args:
        value: any value, typically one read from a user's file or command line.
        limit: the most characters to keep (at least 1).

    Returns:
        The text, at most ``limit + 1`` characters long.
    """
    writer = _Writer(max(int(limit), 1))
    try:
        writer.value(value, 0, set())
    except _Full:
        return "".join(writer.parts) + _ELLIPSIS
    except RecursionError:  # pragma: no cover - the depth bound keeps the recursion short
        return f"<{type(value).__name__}>"
    return "".join(writer.parts)


def short_text(text: str, limit: int = SHORT_REPR_LIMIT * 2) -> str:
    """``text`` cut to at most ``limit`` characters (plus ``…`` when cut), on one line (newlines
    become spaces), e.g. the message of a nested error quoted in another one.

    Args:
        text: the text.
        limit: the most characters to keep (at least 1).

    Returns:
        The text, at most ``limit + 1`` characters long, without line breaks.
    """
    limit = max(int(limit), 1)
    cut = str(text)[: limit + 1].replace("\r\n", " ").replace("\n", " ").replace("\r", " ")
    return cut if len(cut) <= limit else cut[:limit] + _ELLIPSIS
