"""Rankings of samples along the orbit: where a model is worst, best, most variable, or where two
models differ most (NERO's linked ranking sliders). Rank 1 comes first; ties go to the lower
sample position and NaN ranks last. Which direction is "worse" depends on the metric: its
metadata says whether lower is better (:meth:`orbitscope.results.OrbitResult.meta`).
"""

from __future__ import annotations

from ..errors import NotFoundError

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from .reduce import as_result, orbit_statistic, orbit_vectors
from ..results.result import OrbitResult, check_same_orbit

__all__ = ["Ranking", "rank_samples", "rank_differences"]


@dataclass(frozen=True, eq=False)
class Ranking:
    """Samples in rank order (rank 1 first) with the score each was ranked by.

    Attributes:
        indices: positions into the ``sample`` dim, rank 1 first.
        scores: the score of each ranked sample (aligned with ``indices``).
        sample: the sample ids (aligned with ``indices``).
        by: the ranking criterion.
        score_name: what ``scores`` are, e.g. ``"orbit mean of correct"``.
        n_total: samples in the result(s), before any ``subset``.
    """

    indices: np.ndarray
    scores: np.ndarray
    sample: np.ndarray
    by: str
    score_name: str
    n_total: int

    def __len__(self) -> int:
        return int(self.indices.shape[0])

    def top(self, k: int) -> np.ndarray:
        """Positions of the first ``k`` ranked samples."""
        return self.indices[: max(int(k), 0)]

    def rank_of(self, position: int) -> int:
        """1-based rank of the sample at ``position`` (for a "k/N" display, N = ``len(self)``)."""
        hits = np.flatnonzero(self.indices == int(position))
        if hits.size == 0:
            raise NotFoundError(f"sample position {position} is not in this ranking (subset of {len(self)})")
        return int(hits[0]) + 1


# --------------------------------------------------------------------------- rankings


def _higher_is_better(result: OrbitResult, variable: str, override: bool | None) -> bool:
    return override if override is not None else not result.meta(variable).lower_is_better


def _subset_positions(n: int, subset: Any) -> np.ndarray:
    if subset is None:
        return np.arange(n)
    sub = np.asarray(subset)
    if sub.dtype == bool:
        if sub.shape != (n,):
            raise ValueError(f"boolean subset must have one entry per sample ({n}), got shape {sub.shape}")
        return np.flatnonzero(sub)
    pos = np.unique(sub.astype(np.int64).reshape(-1))  # sorted: ties then follow position order
    if pos.size and (pos[0] < 0 or pos[-1] >= n):
        raise IndexError(f"subset positions must be in [0, {n}), got {pos[0]}..{pos[-1]}")
    return pos


def _ranked(scores: np.ndarray, descending: bool, positions: np.ndarray, ids: np.ndarray, by: str,
            score_name: str) -> Ranking:
    s = scores[positions]  # positions ascending, stable sort: ties by position; NaN sorts last
    picked = positions[np.argsort(-s if descending else s, kind="stable")]
    return Ranking(picked, scores[picked], ids[picked], by, score_name, int(scores.shape[0]))


def rank_samples(result: OrbitResult | Any, variable: str, by: Literal["worst", "best", "most_variable"] = "worst",
                 subset: Any = None, *, higher_is_better: bool | None = None) -> Ranking:
    """Rank samples by their orbit mean (worst / best first) or orbit variance (most variable first).

    Args:
        result: an :class:`OrbitResult` (or a ``Run``).
        variable: the metric (dims ``sample`` × orbit dims).
        by: ``"worst"``: lowest orbit mean first (highest for lower-is-better metrics such as
            entropy, whose metadata says lower is better); ``"best"``: the reverse; ``"most_variable"``:
            highest orbit variance (ddof = 0) first.
        subset: boolean mask or positions restricting the ranking (e.g. one class); returned
            indices are still positions in the full result.
        higher_is_better: override the metric's orientation.

    Returns:
        A :class:`Ranking`; ties are broken by position (stable), NaN scores rank last.
    """
    res = as_result(result)
    if by not in ("worst", "best", "most_variable"):
        raise ValueError(f"by must be 'worst', 'best' or 'most_variable', got {by!r}")
    positions = _subset_positions(res.n_samples, subset)
    ids = np.asarray(res.data["sample"].values)
    if by == "most_variable":  # per-sample orbit summaries, one stored chunk at a time
        return _ranked(orbit_statistic(res, variable, "variance"), True, positions, ids, by,
                       f"orbit variance of {variable}")
    descending = (by == "best") == _higher_is_better(res, variable, higher_is_better)
    return _ranked(orbit_statistic(res, variable, "mean"), descending, positions, ids, by, f"orbit mean of {variable}")


def rank_differences(result_a: OrbitResult | Any, result_b: OrbitResult | Any, variable: str,
                     by: Literal["a_worse", "b_worse", "abs"] = "abs", subset: Any = None, *,
                     higher_is_better: bool | None = None) -> Ranking:
    """Rank samples by how two models (evaluated on the same samples and orbit) differ.

    Scores, per sample, with ``a`` and ``b`` its orbit vectors:

    * ``"a_worse"``: ``mean(b - a)`` (``mean(a - b)`` for lower-is-better metrics), largest first:
      where model A falls furthest behind B on average over the orbit;
    * ``"b_worse"``: the same with A and B swapped;
    * ``"abs"``: ``mean(|a - b|)``, largest first: where the two orbit curves differ most,
      even when their means agree.

    Raises:
        ValueError: the results do not share sample ids (in order) or orbit elements.

    Returns:
        A :class:`Ranking` over positions (identical in both results); ties by position.
    """
    ra, rb = as_result(result_a), as_result(result_b)
    ids_a, ids_b = np.asarray(ra.data["sample"].values), np.asarray(rb.data["sample"].values)
    if ids_a.shape != ids_b.shape or not np.array_equal(ids_a, ids_b):
        raise ValueError(f"results are not aligned: {ids_a.shape[0]} vs {ids_b.shape[0]} samples with different ids; "
                         "evaluate both models on the same data, or select common samples with "
                         "result.data.sel(sample=...) first")
    check_same_orbit(ra, rb)
    if by not in ("abs", "a_worse", "b_worse"):
        raise ValueError(f"by must be 'a_worse', 'b_worse' or 'abs', got {by!r}")
    sign = 1.0 if _higher_is_better(ra, variable, higher_is_better) else -1.0

    def score(piece: OrbitResult, where: slice) -> np.ndarray:  # per sample, over aligned pieces of A and B
        a = orbit_vectors(piece, variable)
        b = orbit_vectors(rb, variable, np.arange(where.start, where.stop))
        if by == "abs":
            return np.abs(a - b).mean(axis=1)
        worse, better = (a, b) if by == "a_worse" else (b, a)
        return sign * (better - worse).mean(axis=1)

    orbit_vectors(ra, variable, np.empty(0, np.int64))  # checks the variable and its dims
    parts = [score(piece, where) for where, piece in ra.chunks([variable])]
    scores = np.concatenate(parts) if parts else np.empty(0)
    if by == "abs":
        name = f"mean |A - B| of {variable}"
    else:
        name = f"mean {'B - A' if by == 'a_worse' else 'A - B'} of {variable}" + ("" if sign > 0 else " (negated)")
    return _ranked(scores, True, _subset_positions(ra.n_samples, subset), ids_a, by, name)
