"""Validated parameter grids for orbits: finite numbers, inclusive ranges, and a size limit."""

from __future__ import annotations

import math
from typing import Any, Iterable

import numpy as np

from ..errors import SpecError

__all__ = ["MAX_ORBIT_SIZE", "check_size", "finite_number", "as_grid", "inclusive_range"]

#: Most elements an orbit built from a spec (string or dict) may have; larger grids are refused
#: (a SpecError with the count) rather than exhausting memory.
MAX_ORBIT_SIZE = 10_000_000


def check_size(count: int, what: str, hint: str = "use a coarser step or a smaller range") -> None:
    """Refuse (SpecError) an orbit of more than :data:`MAX_ORBIT_SIZE` elements."""
    if count > MAX_ORBIT_SIZE:
        raise SpecError(f"{what} would have {count:,} elements, more than the {MAX_ORBIT_SIZE:,} allowed; {hint}")


def finite_number(value: Any, name: str) -> float:
    """``value`` as a finite float, else a SpecError naming it."""
    try:
        out = float(value)
    except (TypeError, ValueError):
        raise SpecError(f"{name} must be a number, got {value!r}") from None
    if not math.isfinite(out):
        raise SpecError(f"{name} must be a finite number, got {value!r}")
    return out


def as_grid(values: Iterable[float] | np.ndarray, name: str) -> np.ndarray:
    try:
        arr = np.asarray(list(values) if not isinstance(values, np.ndarray) else values, dtype=np.float64).ravel()
    except (TypeError, ValueError):
        raise SpecError(f"{name} must be numbers, got {values!r}") from None
    if arr.size == 0:
        raise SpecError(f"{name} must contain at least one value")
    if not np.all(np.isfinite(arr)):
        bad = arr[~np.isfinite(arr)]
        raise SpecError(f"{name} must be finite numbers, got {float(bad[0])} among {arr.size} values")
    return arr


def inclusive_range(start: float, stop: float, step: float, what: str = "grid") -> np.ndarray:
    """``start, start + step, ..., stop`` (stop included when on the grid), refusing NaN, infinite
    bounds and grids of more than :data:`MAX_ORBIT_SIZE` values (SpecError naming the value)."""
    start = finite_number(start, f"{what}: START")
    stop = finite_number(stop, f"{what}: STOP")
    step = finite_number(step, f"{what}: STEP")
    if step <= 0:
        raise SpecError(f"{what}: STEP must be > 0, got {step:g}")
    if stop < start:
        raise SpecError(f"{what}: STOP ({stop:g}) must be >= START ({start:g})")
    n = int(math.floor((stop - start) / step + 1e-9)) + 1
    check_size(n, what)
    return np.round(start + step * np.arange(n), 10)


# ---------------------------------------------------------------------------------------------
# Orbits
# ---------------------------------------------------------------------------------------------
