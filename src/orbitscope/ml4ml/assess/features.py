"""The 16 ML4ML features of a variance matrix (Liao, Zhang, Chen, "ML4ML: automated invariance
testing for machine learning models", arXiv 2109.12926).

Convention:
    ``M`` is a float (n, n) variance matrix, rows and columns indexed by transformation level in
    increasing order p_0 < … < p_{n-1}, equally spaced and symmetric about the identity
    (p_{n-1-i} = -p_i, identity at the centre index when n is odd), with
    ``M[i, j] = sqrt(mean_k (s_k(p_i) - s_k(p_j))**2)`` over the N images k: symmetric,
    non-negative, zero diagonal, in the signal's units. ``S`` is the (N, n) per-image signal it
    was computed from. ML4ML *renders* the matrix with its rows flipped, ``M' = M[::-1, :]`` (as
    the authors' code does); every feature here is defined on ``M`` itself except the asymmetry,
    which is defined (as in the paper) on ``M'``. Feature names follow the authors' code: their
    "vertical" differences run along a row of ``M`` and their "horizontal" ones along a column.

Features, in :data:`FEATURE_NAMES` order (m = mean off-diagonal value = ``M.sum() / (n*n - n)``).
The paper's list (sensitivity, mean, mean of squares, std, share above 0.15, discontinuity,
asymmetry, mean and std of three gradient directions, their overall average) makes 14; the
authors' public code reaches 16 with a within-line std ("wstd") of the vertical and horizontal
differences, and so do we:

=================  ==============================================================================
``sensitivity``    Σ_ij |M − M_r| where M_r is recomputed from a random 90 % of the images
                   (``round(0.9 N)``, at least 1, drawn without replacement), averaged over
                   ``resamples`` seeded draws. NaN when no signal is given.
``mean``           mean of all n² cells, *including* the zero diagonal, so it is ``(n-1)/n · m``
                   (ML4ML's code averages a matrix whose diagonal was first filled, see below).
``mean_sq``        mean of the squares of all n² cells.
``std``            population standard deviation of all n² cells.
``frac_above``     share of the n² cells strictly greater than ``threshold`` (0.15 by default,
                   ML4ML's value for top-1 confidence).
``discontinuity``  D = (1/m) Σ_{k=1}^{n-1} ((n-k)/n) · std(diag_k(M)): on each diagonal of
                   constant level gap k (``np.diagonal(M, k)``, n-k cells) the population std of
                   its cells, weighted by its length / n. 0 when M depends on the gap only.
``asymmetry``      A = mean_{i>j} |M'[i, j] − M'[j, i]| / m on the flipped matrix M'. Because M
                   is symmetric this is the mean of |M[a, b] − M[n-1-a, n-1-b]| over the cells
                   below the anti-diagonal of M: the change between levels (p_a, p_b) against the
                   change between (−p_a, −p_b), i.e. changes toward +p against changes toward
                   −p. 0 when the signal is symmetric in ±p. (Flipping columns instead of rows
                   gives the transpose of M', and the same A.)
``grad_v_mean``    ML4ML's vertical differences V[i, j] = M[i, j+1] − M[i, j] on the closed upper
``grad_v_std``     triangle (0 ≤ i ≤ j ≤ n-2): the change when the *upper* level moves one step
                   further up (toward +p), widening the gap. Mean and population std of the
                   n(n-1)/2 signed values.
``grad_v_wstd``    mean over columns j = 1…n-2 of the std of V[0…j, j].
``grad_h_mean``    ML4ML's horizontal differences H[i, j] = M[i-1, j] − M[i, j] (1 ≤ i ≤ j ≤ n-1):
``grad_h_std``     the change when the *lower* level moves one step further down (toward −p).
                   Mean and population std of the n(n-1)/2 signed values.
``grad_h_wstd``    mean over rows i = 1…n-2 of the std of H[i, i…n-1] (rows with one value skipped).
``grad_d_mean``    diagonal differences G[i, j] = M[i-1, j+1] − M[i, j] (1 ≤ i ≤ j ≤ n-2): both
``grad_d_std``     levels move one step apart. Mean and population std of the (n-1)(n-2)/2 values.
``grad_overall``   (mean|V| + mean|H| + mean|G|) / 3: the average steepness of the three directions.
=================  ==============================================================================

Reversing the level order (p → −p, i.e. ``S[:, ::-1]``) swaps the ``grad_v_*`` and ``grad_h_*``
features and leaves every other feature unchanged; scaling the signal by c > 0 scales
``sensitivity``, ``mean``, ``std`` and the gradients by c and ``mean_sq`` by c², and leaves the
discontinuity and asymmetry unchanged.

Degenerate matrices: an all-zero matrix (m = 0, e.g. a constant signal) has every feature 0 (the
ratios D and A are defined as 0 there, not NaN).

Differences from the authors' code (which we do not reuse), each deliberate:

* they fill the diagonal and the central 3×3 block in place with neighbouring values before
  computing the features (a CIFAR 32×32 quirk: ±1° rotations equal the identity), so their mean,
  std, discontinuity (whose sum then includes the filled main diagonal) and gradients all see the
  filled matrix; we keep the zero diagonal and fill nothing;
* their gradients skip some central rows/columns asymmetrically (levels 0°/−1° in one direction,
  0°/+1° in the other); we skip none;
* their diagonal-gradient scores were computed from the vertical differences (a slip); ours use
  the diagonal ones;
* their overall gradient score averaged a ratio mean/std per direction, which is infinite for
  perfectly uniform differences (a signal linear in p); ours averages the mean absolute
  differences.

With the first two steps switched off in their code (and the names as above), the other 14
features equal theirs to ≤ 5e-11 (``reference/seeds.md``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from ..matrices import variance_matrix

__all__ = [
    "FEATURE_NAMES",
    "matrix_features",
    "model_features",
    "sensitivity",
]

FEATURE_NAMES: tuple[str, ...] = (
    "sensitivity",
    "mean",
    "mean_sq",
    "std",
    "frac_above",
    "discontinuity",
    "asymmetry",
    "grad_v_mean",
    "grad_v_std",
    "grad_v_wstd",
    "grad_h_mean",
    "grad_h_std",
    "grad_h_wstd",
    "grad_d_mean",
    "grad_d_std",
    "grad_overall",
)
"""The 16 per-matrix features, in vector order (definitions in the module docstring)."""

_MIN_LEVELS = 3


# --------------------------------------------------------------------------- input checks


def _check_matrix(M: np.ndarray, what: str = "variance matrix") -> np.ndarray:
    M = np.asarray(M, dtype=np.float64)
    if M.ndim != 2 or M.shape[0] != M.shape[1]:
        raise ValueError(f"{what} must be a square (n, n) array, got shape {M.shape}")
    n = M.shape[0]
    if n < _MIN_LEVELS:
        raise ValueError(f"{what} has {n} levels; the ML4ML features need at least {_MIN_LEVELS}")
    if not np.all(np.isfinite(M)):
        raise ValueError(f"{what} contains NaN or inf; recompute it from finite signals")
    scale = max(float(np.abs(M).max()), 1.0)
    tol = 1e-9 * scale
    if M.min() < -tol:
        raise ValueError(f"{what} has negative cells (min {M.min():.3g}); pass an RMS-change matrix")
    if np.abs(np.diagonal(M)).max() > tol:
        raise ValueError(f"{what} must have a zero diagonal (M[i, i] = 0); got max |M[i, i]| = "
                         f"{np.abs(np.diagonal(M)).max():.3g}")
    if np.abs(M - M.T).max() > 1e-7 * scale:
        raise ValueError(f"{what} must be symmetric (M[i, j] = M[j, i]); got max |M - M.T| = "
                         f"{np.abs(M - M.T).max():.3g}")
    return M


def _check_signal(signal: np.ndarray, n: int, what: str = "signal") -> np.ndarray:
    S = np.asarray(signal, dtype=np.float64)
    if S.ndim != 2 or S.shape[1] != n:
        raise ValueError(f"{what} must have shape (N images, {n} levels), got {S.shape}")
    if S.shape[0] < 1:
        raise ValueError(f"{what} has no images (an empty split?); sensitivity needs at least one image")
    if not np.all(np.isfinite(S)):
        raise ValueError(f"{what} contains NaN or inf")
    return S


# --------------------------------------------------------------------------- sensitivity


def _subset_size(n_images: int, fraction: float) -> int:
    return max(1, int(np.floor(fraction * n_images + 0.5)))


def sensitivity(
    M: np.ndarray,
    signal: np.ndarray,
    *,
    fraction: float = 0.9,
    resamples: int = 5,
    seed: int = 0,
    subsets: Sequence[Sequence[int]] | None = None,
) -> float:
    """ML4ML sensitivity: how much the matrix moves when 10 % of the images are left out.

    ``mean over resamples of Σ_ij |M[i, j] − M_r[i, j]|`` with ``M_r`` the variance matrix
    (:func:`orbitscope.ml4ml.matrices.variance_matrix`) of a random subset of ``round(fraction · N)`` images (at least one). The subsets are drawn as
    ``rng = np.random.default_rng(seed)`` then, ``resamples`` times,
    ``rng.choice(N, size=k, replace=False)``; so the same seed picks the same images for every
    matrix of a model. Pass ``subsets`` to fix the index sets yourself (``resamples``/``seed``
    are then ignored). One image (N = 1) gives 0.

    Args:
        M: (n, n) variance matrix computed from ``signal``.
        signal: (N, n) per-image signal.
        fraction: share of the images kept in each resample, in (0, 1].
        resamples: number of random subsets averaged (ML4ML used one).
        seed: seed of the subset draws.
        subsets: explicit image index sets, one per resample.

    Raises:
        ValueError: if ``signal`` does not reproduce ``M`` (wrong signal for this matrix).
    """
    M = _check_matrix(M)
    S = _check_signal(signal, M.shape[0])
    full = variance_matrix(S)
    if not np.allclose(full, M, rtol=1e-6, atol=1e-7 * max(float(M.max()), 1e-12)):
        raise ValueError(
            "signal does not reproduce the variance matrix (max difference "
            f"{np.abs(full - M).max():.3g}); pass the (N, n) signal the matrix was computed from "
            "(same images, same level order)"
        )
    n_images = S.shape[0]
    if subsets is None:
        if not 0.0 < fraction <= 1.0:
            raise ValueError(f"fraction must be in (0, 1], got {fraction}")
        if resamples < 1:
            raise ValueError(f"resamples must be >= 1, got {resamples}")
        k = _subset_size(n_images, fraction)
        rng = np.random.default_rng(seed)
        subsets = [rng.choice(n_images, size=k, replace=False) for _ in range(resamples)]
    if len(subsets) == 0:
        raise ValueError("subsets is empty; give at least one index set")
    totals = []
    for idx in subsets:
        idx = np.asarray(idx, dtype=np.int64)
        if idx.ndim != 1 or idx.size == 0 or idx.min() < 0 or idx.max() >= n_images:
            raise ValueError(f"each subset must be a non-empty list of image indices in [0, {n_images})")
        totals.append(float(np.abs(M - variance_matrix(S[idx])).sum()))
    return float(np.mean(totals))


# --------------------------------------------------------------------------- gradients


def _gradient_sets(M: np.ndarray) -> tuple[np.ndarray, list[np.ndarray], np.ndarray, list[np.ndarray], np.ndarray]:
    """Signed differences on the closed upper triangle: V and its rows, H and its columns, G."""
    n = M.shape[0]
    v_rows = [M[i - 1, i:] - M[i, i:] for i in range(1, n)]  # V[i, j], j = i…n-1
    h_cols = [M[: j + 1, j + 1] - M[: j + 1, j] for j in range(n - 1)]  # H[i, j], i = 0…j
    g = [M[i - 1, j + 1] - M[i, j] for i in range(1, n - 1) for j in range(i, n - 1)]
    return (np.concatenate(v_rows), v_rows, np.concatenate(h_cols), h_cols, np.asarray(g, dtype=np.float64))


def _mean_line_std(lines: list[np.ndarray]) -> float:
    stds = [float(np.std(line)) for line in lines if line.size >= 2]
    return float(np.mean(stds)) if stds else 0.0


def _ratio(num: float, den: float) -> float:
    return float(num / den) if den > 0 else 0.0


# --------------------------------------------------------------------------- features


def matrix_features(
    M: np.ndarray,
    *,
    signal: np.ndarray | None = None,
    threshold: float = 0.15,
    resamples: int = 5,
    seed: int = 0,
) -> dict[str, float]:
    """The 16 ML4ML features of one variance matrix.

    Args:
        M: (n, n) variance matrix, n ≥ 3 (conventions in the module docstring).
        signal: the (N, n) per-image signal ``M`` was computed from; needed only for
            ``sensitivity``, which is NaN without it.
        threshold: cell value above which a cell counts in ``frac_above`` (signal units; 0.15
            suits top-1 confidence, activation statistics may need their own).
        resamples: random 90 % subsets averaged for ``sensitivity``.
        seed: seed of those subsets.

    Returns:
        ``{name: value}`` for every name in :data:`FEATURE_NAMES`, in that order.
    """
    M = _check_matrix(M)
    n = M.shape[0]
    sens = float("nan") if signal is None else sensitivity(M, signal, resamples=resamples, seed=seed)

    m_off = M.sum() / (n * n - n)
    disc = sum(((n - k) / n) * float(np.std(np.diagonal(M, k))) for k in range(1, n))
    flipped = M[::-1, :]
    lower = np.tril_indices(n, k=-1)
    asym = float(np.mean(np.abs(flipped[lower] - flipped.T[lower])))

    v, v_rows, h, h_cols, g = _gradient_sets(M)
    return {
        "sensitivity": sens,
        "mean": float(M.mean()),
        "mean_sq": float(np.mean(M * M)),
        "std": float(M.std()),
        "frac_above": float(np.mean(M > threshold)),
        "discontinuity": _ratio(disc, m_off),
        "asymmetry": _ratio(asym, m_off),
        # named as in ML4ML's code: its "vertical" differences run along a row of M
        "grad_v_mean": float(h.mean()),
        "grad_v_std": float(h.std()),
        "grad_v_wstd": _mean_line_std(h_cols),
        "grad_h_mean": float(v.mean()),
        "grad_h_std": float(v.std()),
        "grad_h_wstd": _mean_line_std(v_rows),
        "grad_d_mean": float(g.mean()),
        "grad_d_std": float(g.std()),
        "grad_overall": float((np.abs(v).mean() + np.abs(h).mean() + np.abs(g).mean()) / 3.0),
    }


def model_features(
    matrices: Mapping[str, np.ndarray],
    signals: Mapping[str, np.ndarray] | None = None,
    *,
    threshold: float | Mapping[str, float] = 0.15,
    resamples: int = 5,
    seed: int = 0,
) -> tuple[list[str], np.ndarray]:
    """One model's feature vector: the 16 features of each of its named matrices.

    Args:
        matrices: ``{matrix name: (n, n) variance matrix}``, e.g. ``"top1_confidence"``,
            ``"conv2:max"``. The vector follows this mapping's order, so build every model's
            mapping in the same order (or compare the returned names).
        signals: ``{matrix name: (N, n) signal}`` with an entry for every matrix, or None (all
            ``…/sensitivity`` entries are then NaN: drop those columns before training).
        threshold: ``frac_above`` threshold, one for all matrices or one per matrix name.
        resamples: random subsets averaged for ``sensitivity``.
        seed: seed of those subsets (the same for every matrix, so the same images are left out).

    Returns:
        ``(names, vector)``: names ``"<matrix>/<feature>"`` and a float64 vector of length
        16 × number of matrices.

    Example::

        vm = orbitscope.ml4ml.matrices.variance_matrices(result)        # correct split, ML4ML signals
        names, x = model_features(vm.as_dict(), vm.signal_dict())
    """
    if len(matrices) == 0:
        raise ValueError("matrices is empty; pass at least one named variance matrix")
    names: list[str] = []
    values: list[float] = []
    for name, M in matrices.items():
        if "/" in name:
            raise ValueError(f"matrix name {name!r} contains '/', which separates matrix and feature names")
        signal = None
        if signals is not None:
            if name not in signals:
                raise ValueError(f"signals has no entry for matrix {name!r}; give a signal for every "
                                 "matrix, or signals=None to skip the sensitivity feature")
            signal = signals[name]
        if isinstance(threshold, Mapping):
            if name not in threshold:
                raise ValueError(f"threshold has no entry for matrix {name!r}; give one per matrix or a single float")
            thr = float(threshold[name])
        else:
            thr = float(threshold)
        try:
            feats = matrix_features(M, signal=signal, threshold=thr, resamples=resamples, seed=seed)
        except ValueError as err:
            raise ValueError(f"matrix {name!r}: {err}") from None
        for fname in FEATURE_NAMES:
            names.append(f"{name}/{fname}")
            values.append(feats[fname])
    return names, np.asarray(values, dtype=np.float64)
