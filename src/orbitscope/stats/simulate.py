"""Synthetic orbit results with correlated elements, for validity simulations and power.

Each sample has a latent Gaussian AR(1) process along the orbit, Z_k = ρ Z_{k−1} + √(1 − ρ²) ε_k
(nearby elements are correlated, ρ^|j − k|, as nearby angles are); on a closed orbit
(``circular=True``) the correlation is ρ^(circular distance), built from the exact covariance.
A binary metric is x_k = 1[Z_k < Φ⁻¹(p_k)] (so P[x_k = 1] = p_k exactly); a real metric is
μ_k + σ Z_k.
"""

from __future__ import annotations

import numpy as np
from scipy import stats

__all__ = ["correlated_orbit", "orbit_correlation"]


def orbit_correlation(elements: int, rho: float, *, circular: bool = False) -> np.ndarray:
    """The (K, K) correlation ρ^distance between elements (circular distance on a closed orbit)."""
    if not 0 <= rho < 1:
        raise ValueError(f"rho must be in [0, 1), got {rho}")
    k = np.arange(elements)
    dist = np.abs(k[:, None] - k[None, :])
    if circular:
        dist = np.minimum(dist, elements - dist)
    return rho ** dist


def correlated_orbit(n: int, means: np.ndarray, *, rho: float = 0.8, binary: bool = True, sd: float = 1.0,
                     circular: bool = False, rng: np.random.Generator | int = 0) -> np.ndarray:
    """``(n, K)`` synthetic per-sample values whose column means are ``means`` (probabilities for
    a binary metric), with correlation ρ^distance between the elements' latent values."""
    rng = np.random.default_rng(rng)
    means = np.asarray(means, dtype=np.float64)
    corr = orbit_correlation(means.size, rho, circular=circular)
    # eigen-decomposition (the circular matrix may be only positive semi-definite): clip tiny negatives
    w, v = np.linalg.eigh(corr)
    root = v * np.sqrt(np.clip(w, 0, None))
    z = rng.standard_normal((n, means.size)) @ root.T
    if binary:
        if np.any((means < 0) | (means > 1)):
            raise ValueError("binary means are probabilities in [0, 1]")
        return (z < stats.norm.ppf(means)).astype(np.float64)
    return means + sd * z
