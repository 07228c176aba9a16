"""One-pass, numerically stable accumulators for aggregates computed chunk by chunk.

:class:`Moments` keeps, per cell (an orbit element, or a group × element), the number of finite
values ``n``, their ``total`` (exact for 0/1 values: a count), their ``mean`` and the sum of
squared deviations ``m2``. Each chunk is summarised on its own (two passes over the chunk's
values, which are in memory) and merged with the running summary by the pairwise update of
Chan, Golub & LeVeque (1979, "Updating formulae and a pairwise algorithm for computing sample
variances"):

    n = n_a + n_b,  δ = mean_b − mean_a,  mean = mean_a + δ · n_b / n,
    m2 = m2_a + m2_b + δ² · n_a · n_b / n

which avoids the cancellation of the textbook sum-of-squares formula. For a single chunk the
numbers equal numpy's ``nanmean`` / ``nanstd(ddof=1)`` bit for bit; across chunks they agree to
float rounding. NaN values (undefined metrics) are skipped, as ``nanmean`` does.
"""

from __future__ import annotations

import io
from dataclasses import dataclass

import numpy as np

__all__ = ["Moments", "GroupedMoments", "CachedArray"]


@dataclass
class CachedArray:
    """One array, in the form the aggregate cache keeps (e.g. a per-sample orbit statistic)."""

    values: np.ndarray

    def to_bytes(self) -> bytes:
        buf = io.BytesIO()
        np.save(buf, np.asarray(self.values), allow_pickle=False)
        return buf.getvalue()

    @classmethod
    def from_bytes(cls, raw: bytes) -> "CachedArray":
        return cls(np.load(io.BytesIO(raw), allow_pickle=False))


@dataclass
class Moments:
    """Running count, total, mean and squared-deviation sum per cell (any shape)."""

    n: np.ndarray
    total: np.ndarray
    mean: np.ndarray
    m2: np.ndarray

    @classmethod
    def empty(cls, shape: tuple[int, ...]) -> "Moments":
        return cls(np.zeros(shape, np.int64), np.zeros(shape), np.zeros(shape), np.zeros(shape))

    @classmethod
    def of(cls, values: np.ndarray) -> "Moments":
        """The summary of one chunk: ``values`` of shape (samples, *cells)."""
        v = np.asarray(values, dtype=np.float64)
        finite = ~np.isnan(v)
        n = finite.sum(axis=0).astype(np.int64)
        total = np.nansum(v, axis=0) if v.shape[0] else np.zeros(v.shape[1:])
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = np.where(n > 0, total / np.maximum(n, 1), 0.0)
            m2 = np.nansum((v - mean) ** 2, axis=0) if v.shape[0] else np.zeros(v.shape[1:])
        return cls(n, total, mean, m2)

    def merge(self, other: "Moments") -> "Moments":
        """The summary of both (Chan et al.'s pairwise update)."""
        n = self.n + other.n
        with np.errstate(invalid="ignore", divide="ignore"):
            safe = np.maximum(n, 1)
            delta = other.mean - self.mean
            mean = np.where(self.n == 0, other.mean, np.where(other.n == 0, self.mean,
                                                               self.mean + delta * (other.n / safe)))
            m2 = self.m2 + other.m2 + np.where((self.n > 0) & (other.n > 0),
                                               delta * delta * (self.n * (other.n / safe)), 0.0)
        return Moments(n, self.total + other.total, mean, m2)

    def update(self, values: np.ndarray) -> "Moments":
        """Merge one more chunk of values (samples, *cells)."""
        return self.merge(Moments.of(values))

    def variance(self, ddof: int = 1) -> np.ndarray:
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(self.n > ddof, self.m2 / (self.n - ddof), np.nan)

    def mean_or_nan(self) -> np.ndarray:
        return np.where(self.n > 0, self.mean, np.nan)

    # -- caching ------------------------------------------------------------------------------
    def to_bytes(self) -> bytes:
        buf = io.BytesIO()
        np.savez(buf, n=self.n, total=self.total, mean=self.mean, m2=self.m2)
        return buf.getvalue()

    @classmethod
    def from_bytes(cls, raw: bytes) -> "Moments":
        with np.load(io.BytesIO(raw), allow_pickle=False) as f:
            return cls(f["n"], f["total"], f["mean"], f["m2"])


@dataclass
class GroupedMoments:
    """:class:`Moments` per group (e.g. per class label): ``groups`` sorted, ``moments`` with a
    leading group axis."""

    groups: np.ndarray
    moments: Moments
    sizes: np.ndarray  # samples per group

    @classmethod
    def accumulate(cls, chunks: "list[tuple[np.ndarray, np.ndarray]] | object",
                   shape: tuple[int, ...] = ()) -> "GroupedMoments":
        """From an iterable of ``(values (samples, *cells), group of each sample)`` chunks whose
        cells have ``shape``."""
        found: dict[object, Moments] = {}
        sizes: dict[object, int] = {}
        for values, groups in chunks:  # type: ignore[attr-defined]
            values = np.asarray(values)
            groups = np.asarray(groups)
            for g in np.unique(groups):
                rows = values[groups == g]
                part = Moments.of(rows)
                key = g.item() if hasattr(g, "item") else g
                found[key] = found[key].merge(part) if key in found else part
                sizes[key] = sizes.get(key, 0) + len(rows)
        keys = sorted(found)
        if not keys:
            return cls(np.empty(0), Moments.empty((0, *shape)), np.zeros(0, np.int64))
        stack = [found[k] for k in keys]
        return cls(np.asarray(keys), Moments(np.stack([m.n for m in stack]), np.stack([m.total for m in stack]),
                                             np.stack([m.mean for m in stack]), np.stack([m.m2 for m in stack])),
                   np.asarray([sizes[k] for k in keys], dtype=np.int64))

    def to_bytes(self) -> bytes:
        buf = io.BytesIO()
        m = self.moments
        np.savez(buf, groups=self.groups, n=m.n, total=m.total, mean=m.mean, m2=m.m2, sizes=self.sizes)
        return buf.getvalue()

    @classmethod
    def from_bytes(cls, raw: bytes) -> "GroupedMoments":
        with np.load(io.BytesIO(raw), allow_pickle=False) as f:
            return cls(f["groups"], Moments(f["n"], f["total"], f["mean"], f["m2"]), f["sizes"])
