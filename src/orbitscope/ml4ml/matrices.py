"""ML4ML variance matrices (Liao, Zhang & Chen, arXiv 2109.12926).

For a one-dimensional orbit with levels ``p_0 < … < p_{n−1}`` (ML4ML: rotation −15…+15° by 1°,
brightness or scale 0.70…1.30 by 0.02, n = 31) and a per-image signal ``s_k(p)`` (the top-1
confidence, the true-class confidence, or a statistic of a layer's activations, see
:mod:`orbitscope.engine.activations`), the variance matrix is

    M[i, j] = sqrt( mean_k (s_k(p_i) − s_k(p_j))² ),

the root-mean-square change of the signal between two levels over the N images ``k``: n × n,
symmetric, zero diagonal, no other normalisation. Images are split by whether the model
classifies them correctly at the identity level (ML4ML's assessor features use the correct split).

Signals are read from an :class:`~orbitscope.results.result.OrbitResult`, so one evaluation (with an
activation probe) gives every matrix. Signal names: result variables (``"top1_confidence"``,
``"confidence"``) or ``"<layer>:<stat>"`` for activation statistics.
"""

from __future__ import annotations

from ..errors import NotFoundError

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from ..results.result import OrbitResult

__all__ = [
    "Split",
    "VarianceMatrices",
    "variance_matrix",
    "ml4ml_signals",
    "read_signals",
    "variance_matrices",
    "identity_level",
    "identity_scale",
]

Split = Literal["correct", "incorrect", "all"]
_SPLITS = ("correct", "incorrect", "all")


def variance_matrix(signal: np.ndarray) -> np.ndarray:
    """``M[i, j] = sqrt(mean_k (S[k, i] − S[k, j])²)`` for a signal array ``S`` of shape (N, n).

    Returns an (n, n) float64 array; all zeros when N = 0.
    """
    s = np.asarray(signal, dtype=np.float64)
    if s.ndim != 2:
        raise ValueError(f"a signal must be (images, levels), got shape {s.shape}")
    if s.shape[0] == 0:
        return np.zeros((s.shape[1], s.shape[1]))
    n = s.shape[1]
    m = np.zeros((n, n))
    for i in range(n - 1):  # exact differences (a Gram-matrix shortcut loses digits for close levels)
        d = s[:, i + 1 :] - s[:, i : i + 1]
        m[i, i + 1 :] = np.sqrt(np.mean(d * d, axis=0))
    return m + m.T


def identity_scale(signal: np.ndarray, identity: int) -> float:
    """The mean absolute value of a signal (N, n) at the identity level: the reference that makes
    an activation matrix relative (``M / identity_scale``; raw activations have model-dependent
    scales). 0 when there are no images."""
    s = np.asarray(signal, dtype=np.float64)
    return float(np.mean(np.abs(s[:, identity]))) if s.shape[0] else 0.0


def identity_level(result: OrbitResult) -> int:
    """Index of the identity element along the result's single orbit dim."""
    dims = result.orbit_dims
    if len(dims) != 1:
        raise ValueError(f"variance matrices need a one-dimensional orbit (levels), got dims {dims}")
    idx = int(result.attrs.get("identity_index", -1))
    if idx < 0:
        raise ValueError("the orbit has no identity element; ML4ML splits images by correctness at the identity")
    return idx


def ml4ml_signals(result: OrbitResult) -> list[str]:
    """ML4ML's five signals: top-1 confidence and the ``max`` and ``max-mean`` statistics of the
    last two probed layers (fewer when the result has fewer layers/statistics)."""
    names = ["top1_confidence"]
    if "activation" in result.data:
        layers = [str(v) for v in result.data.coords["layer"].values][-2:]
        stats = {str(v) for v in result.data.coords["stat"].values}
        names += [f"{layer}:{st}" for layer in layers for st in ("max", "max-mean") if st in stats]
    return names


def read_signals(result: OrbitResult, names: Sequence[str]) -> np.ndarray:
    """Per-image signals, shape (len(names), N, n), levels in the orbit's order."""
    dim = result.orbit_dims[0] if len(result.orbit_dims) == 1 else None
    if dim is None:
        raise ValueError(f"variance matrices need a one-dimensional orbit, got dims {result.orbit_dims}")
    out = []
    for name in names:
        if ":" in name:
            layer, stat = name.rsplit(":", 1)
            if "activation" not in result.data:
                raise ValueError(f"signal {name!r} needs activation statistics: evaluate with activations=[...]")
            da = result.data["activation"]
            layers = [str(v) for v in da.coords["layer"].values]
            stats = [str(v) for v in da.coords["stat"].values]
            if layer not in layers or stat not in stats:
                raise ValueError(f"signal {name!r}: recorded layers {layers}, statistics {stats}")
            values = da.isel(layer=layers.index(layer), stat=stats.index(stat)).transpose("sample", dim).values
        else:
            if name not in result.data:
                raise ValueError(f"signal {name!r} is not a variable of the result (have {list(result.data.data_vars)})")
            values = result.data[name].transpose("sample", dim).values
        out.append(np.asarray(values, dtype=np.float64))
    return np.stack(out) if out else np.zeros((0, result.data.sizes["sample"], result.data.sizes[dim]))


@dataclass
class VarianceMatrices:
    """The variance matrices of one model on one orbit and image split.

    Attributes:
        names: signal names, one per matrix.
        levels: the orbit coordinate of each level (n,), increasing.
        level_dim: the orbit dim's name (e.g. ``"angle"``, ``"factor"``).
        matrices: (len(names), n, n) float64.
        signals: the per-image signals they were computed from, (len(names), N, n).
        correct: correctness at every level of *all* evaluated images, whatever the split,
            (N_all, n) bool (for formula baselines such as the accuracy drop).
        identity: index of the identity level.
        split: which images: ``"correct"`` / ``"incorrect"`` at the identity, or ``"all"``.
        samples: the result's sample ids of the N images.
        attrs: provenance (model name/id, orbit spec, data id, run id).
    """

    names: list[str]
    levels: np.ndarray
    level_dim: str
    matrices: np.ndarray
    signals: np.ndarray
    correct: np.ndarray
    identity: int
    split: str
    samples: np.ndarray
    attrs: dict[str, Any] = field(default_factory=dict)

    def __getitem__(self, name: str) -> np.ndarray:
        try:
            return self.matrices[self.names.index(name)]
        except ValueError:
            raise NotFoundError(f"no matrix {name!r}; have {self.names}") from None

    @property
    def n_images(self) -> int:
        return int(self.signals.shape[1])

    def as_dict(self) -> dict[str, np.ndarray]:
        return {n: self.matrices[i] for i, n in enumerate(self.names)}

    def signal_dict(self) -> dict[str, np.ndarray]:
        return {n: self.signals[i] for i, n in enumerate(self.names)}

    def save(self, path: str | Path) -> None:
        """Write to a ``.npz`` file (arrays plus JSON metadata; no pickles)."""
        meta = {"names": self.names, "level_dim": self.level_dim, "identity": self.identity,
                "split": self.split, "attrs": self.attrs}
        path = Path(path)
        tmp = path.with_name(path.name + ".tmp.npz")
        np.savez_compressed(tmp, levels=self.levels, matrices=self.matrices, signals=self.signals,
                            correct=self.correct, samples=self.samples, meta=np.array(json.dumps(meta)))
        tmp.replace(path)

    @classmethod
    def load(cls, path: str | Path) -> VarianceMatrices:
        with np.load(path, allow_pickle=False) as f:
            meta = json.loads(str(f["meta"]))
            return cls(names=list(meta["names"]), levels=f["levels"], level_dim=meta["level_dim"],
                       matrices=f["matrices"], signals=f["signals"], correct=f["correct"].astype(bool),
                       identity=int(meta["identity"]), split=meta["split"], samples=f["samples"],
                       attrs=dict(meta["attrs"]))


def variance_matrices(
    result: OrbitResult, signals: Sequence[str] | None = None, *, split: Split = "correct"
) -> VarianceMatrices:
    """Variance matrices of ``result`` (a run over a one-dimensional orbit with an identity).

    Args:
        result: an evaluation, with activation statistics if activation signals are asked for.
        signals: signal names (default :func:`ml4ml_signals`).
        split: images correct at the identity (ML4ML's choice for assessor features), incorrect,
            or all.
    """
    if split not in _SPLITS:
        raise ValueError(f"split must be one of {_SPLITS}, got {split!r}")
    idx = identity_level(result)
    dim = result.orbit_dims[0]
    names = list(signals) if signals is not None else ml4ml_signals(result)
    levels = np.asarray(result.data[dim].values, dtype=np.float64)
    if np.any(np.diff(levels) <= 0):
        raise ValueError(f"orbit levels must increase along {dim!r}; got {levels}")
    correct_all = np.asarray(result.data["correct"].transpose("sample", dim).values, dtype=bool)
    keep = {"correct": correct_all[:, idx], "incorrect": ~correct_all[:, idx],
            "all": np.ones(len(correct_all), bool)}[split]
    sig = read_signals(result, names)[:, keep]
    mats = np.stack([variance_matrix(s) for s in sig]) if names else np.zeros((0, len(levels), len(levels)))
    attrs = {k: result.attrs.get(k) for k in ("model_name", "model_id", "orbit", "data_id", "run_id") if k in result.attrs}
    return VarianceMatrices(names=names, levels=levels, level_dim=dim, matrices=mats, signals=sig,
                            correct=correct_all, identity=idx, split=split,
                            samples=np.asarray(result.data["sample"].values)[keep], attrs=attrs)
