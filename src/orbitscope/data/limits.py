"""Upper bounds on what one dataset may allocate, checked before allocating.

Generated datasets (``meshes:``, ``piv-synthetic:``, ``modelnet:``, :func:`~orbitscope.data.scenes.digit_scenes`)
and array files (``npz:``) estimate the bytes they will hold (or need at once while making one item)
from their size parameters, and refuse with one line when the estimate is over the limit, instead of
trying the allocation and failing with a MemoryError (or swapping) later. Two limits, each read from
an environment variable when set (so the command line and Python share them):

* ``ORBITSCOPE_MAX_DATA_BYTES`` (default :data:`MAX_DATA_BYTES`, 4 GiB): the estimated bytes of
  one dataset's arrays, or of making one of its items;
* ``ORBITSCOPE_MAX_DATA_ITEMS`` (default :data:`MAX_DATA_ITEMS`, 10,000,000): the number of items
  (samples) of a generated dataset.

Byte values accept a plain integer or a number with a unit: ``8G``, ``8GiB``, ``500M``, ``1.5T``
(binary units: K = 1024 bytes). Raise a limit for one command with e.g.
``ORBITSCOPE_MAX_DATA_BYTES=64G orbitscope evaluate ...``.
"""

from __future__ import annotations

import math
import os
import re

from ..errors import DataError, SpecError

__all__ = ["MAX_DATA_BYTES", "MAX_DATA_ITEMS", "MAX_DATA_BYTES_ENV", "MAX_DATA_ITEMS_ENV", "data_byte_limit",
           "data_item_limit", "check_data_bytes", "check_data_items", "format_bytes"]

#: Default bound on the estimated bytes of one dataset's arrays or of making one item (4 GiB).
MAX_DATA_BYTES = 4 * 2**30
#: Default bound on the number of items of a generated dataset.
MAX_DATA_ITEMS = 10_000_000
#: Environment variable overriding :data:`MAX_DATA_BYTES` (bytes, or a number with K/M/G/T).
MAX_DATA_BYTES_ENV = "ORBITSCOPE_MAX_DATA_BYTES"
#: Environment variable overriding :data:`MAX_DATA_ITEMS` (an integer).
MAX_DATA_ITEMS_ENV = "ORBITSCOPE_MAX_DATA_ITEMS"

_UNITS = {"": 1, "b": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}
_BYTES = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([kmgt]?)(?:i?b)?\s*", re.IGNORECASE)


def format_bytes(n: float) -> str:
    """``n`` bytes as a short human-readable size in binary units, e.g. ``"33.5 GiB"``."""
    if not math.isfinite(n):
        return "an unbounded number of bytes"
    if n >= 2**50:
        return f"{n / 2**40:.3g} TiB"
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:,.1f} {unit}"
    return f"{int(n)} bytes"


def data_byte_limit() -> int:
    """The byte bound in force: ``$ORBITSCOPE_MAX_DATA_BYTES`` when set, else :data:`MAX_DATA_BYTES`.

    Raises:
        SpecError: the variable is set to something other than a positive size.
    """
    raw = os.environ.get(MAX_DATA_BYTES_ENV, "").strip()
    if not raw:
        return MAX_DATA_BYTES
    m = _BYTES.fullmatch(raw)
    value = float(m.group(1)) * _UNITS[m.group(2).lower()] if m else 0.0
    if not (m and math.isfinite(value) and value >= 1):
        raise SpecError(f"${MAX_DATA_BYTES_ENV}={raw[:40]!r} is not a size; write bytes or a number with a unit, "
                        "e.g. 8G or 500M")
    return int(value)


def data_item_limit() -> int:
    """The item bound in force: ``$ORBITSCOPE_MAX_DATA_ITEMS`` when set, else :data:`MAX_DATA_ITEMS`.

    Raises:
        SpecError: the variable is set to something other than a positive integer.
    """
    raw = os.environ.get(MAX_DATA_ITEMS_ENV, "").strip().replace("_", "")
    if not raw:
        return MAX_DATA_ITEMS
    if not (raw.isascii() and raw.isdigit() and int(raw) >= 1):
        raise SpecError(f"${MAX_DATA_ITEMS_ENV}={raw[:40]!r} is not a positive integer")
    return int(raw)


def check_data_bytes(parameters: str, nbytes: float, what: str, lower: str) -> None:
    """Refuse a dataset whose estimated allocation ``nbytes`` is over :func:`data_byte_limit`.

    Args:
        parameters: the size parameters and their values, for the message, e.g. ``"points=300000000"``.
        nbytes: the estimate, in bytes (``inf`` or NaN are refused).
        what: what the bytes are for, e.g. ``"the clouds (n × classes × points × 3 float32)"``.
        lower: what to lower, e.g. ``"use fewer points or clouds"``.

    Raises:
        DataError: over the limit; says the estimate, the limit and how to raise it.
    """
    limit = data_byte_limit()
    if math.isfinite(nbytes) and nbytes <= limit:
        return
    if len(parameters) > 160:
        parameters = parameters[:157] + "..."
    if math.isfinite(nbytes) and nbytes < 2**50:
        need, raise_to = f"≈ {format_bytes(nbytes)}", f"{MAX_DATA_BYTES_ENV}={math.ceil(nbytes / 2**30)}G"
    else:
        need, raise_to = "more than 1 PiB", MAX_DATA_BYTES_ENV  # no value worth suggesting
    raise DataError(f"{parameters}: {need} needed for {what}, over the data limit of {format_bytes(limit)}; {lower}, "
                    f"or raise the limit with the environment variable {raise_to}")


def check_data_items(parameters: str, count: int, lower: str) -> None:
    """Refuse a generated dataset of more than :func:`data_item_limit` items.

    Args:
        parameters: the parameters that set the count and their values, e.g. ``"n=1000000000000"``.
        count: the number of items they give.
        lower: what to lower, e.g. ``"use a smaller n"``.

    Raises:
        DataError: over the limit; says the count, the limit and how to raise it.
    """
    limit = data_item_limit()
    if count <= limit:
        return
    if len(parameters) > 160:
        parameters = parameters[:157] + "..."
    raise DataError(f"{parameters} gives {count:,} items, over the data limit of {limit:,}; {lower}, or raise "
                    f"the limit with the environment variable {MAX_DATA_ITEMS_ENV}")
