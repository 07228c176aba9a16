"""Subsets of built-in datasets: the picked indices and the tag that extends a ``data_id``."""

from __future__ import annotations

import hashlib
from typing import Sequence

import numpy as np

from ..errors import DataError

__all__ = ["subset_tag", "picked_indices"]


def subset_tag(indices: np.ndarray) -> str:
    """``[a:b]`` for a run of consecutive indices, else ``[subset:<count>:<hash>]``."""
    if len(indices) and np.array_equal(indices, np.arange(indices[0], indices[0] + len(indices))):
        return f"[{indices[0]}:{indices[0] + len(indices)}]"
    return f"[subset:{len(indices)}:{hashlib.sha1(indices.astype('<i8').tobytes()).hexdigest()[:10]}]"


def picked_indices(n: int, indices: slice | Sequence[int] | np.ndarray, what: str) -> np.ndarray:
    """``indices`` (a slice, or ints that may be negative) of a set of ``n`` items as int64 in
    ``[0, n)``; DataError naming ``what`` for one out of range."""
    picked = np.arange(n, dtype=np.int64)[indices] if isinstance(indices, slice) else \
        np.asarray(indices, dtype=np.int64).reshape(-1)
    bad = picked[(picked >= n) | (picked < -n)]
    if bad.size:
        raise DataError(f"subset index {int(bad[0])} is out of range for {what} ({n} clouds)")
    return picked % n
