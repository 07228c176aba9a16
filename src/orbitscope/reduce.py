"""Dimension reduction of per-sample orbit vectors (NERO's "dimension reduction" view).

NERO (arXiv 2305.19889) represents every sample by its **orbit vector**, the metric values along
the orbit (MNIST rotation: 73 correctness or confidence values), embeds those vectors in 2-D
(PCA, ICA, Isomap, t-SNE or UMAP) and colours the points by an orbit statistic (mean, variance),
so that clusters of samples that fail in the same way stand out. Two rankings drive the linked
view: samples where one model is worst, and samples where two models differ most.

Conventions:
    * Orbit vector of a sample = ``result[variable]`` over all orbit elements, orbit dims taken in
      ``result.orbit_dims`` order and flattened in **C order** (last orbit dim varies fastest), as
      float64. Column ``j`` is orbit element ``np.unravel_index(j, orbit_shape)``.
    * Rows follow the result's ``sample`` dim. Functions that return indices return **positions**
      (0-based, into the ``sample`` dim), never sample ids; :class:`Embedding` and
      :class:`Ranking` also carry the matching sample ids (``sample``).
    * No standardisation by default: the values of one metric share a scale across orbit elements,
      and rescaling each element would inflate elements where nearly every sample agrees.
      ``standardize=True`` z-scores each element (constant elements stay 0).
    * Degenerate inputs never crash: identical vectors (a perfectly invariant model: all ones)
      embed at the origin; components beyond the data's rank are 0. Nonlinear methods (Isomap,
      t-SNE, UMAP) embed the *distinct* vectors and place duplicates on their representative
      (``dedupe``), since identical vectors carry no neighbourhood structure; two distinct vectors
      are placed at ±distance/2 on the first axis. Parameters that must be below the number of
      vectors (t-SNE perplexity, neighbour counts) are clamped and recorded in ``params`` and
      ``notes``. Fewer than 3 samples or any NaN/inf raises :class:`ValueError`.
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass, field
from typing import Any, Literal, Sequence

import numpy as np

from .result import OrbitResult

__all__ = [
    "METHODS",
    "Embedding",
    "Ranking",
    "embed",
    "embed_models",
    "orbit_statistic",
    "orbit_vectors",
    "rank_differences",
    "rank_samples",
    "reducible_variables",
]

logger = logging.getLogger(__name__)

Method = Literal["pca", "ica", "isomap", "tsne", "umap"]
#: The embedding methods :func:`embed` knows.
METHODS: tuple[str, ...] = ("pca", "ica", "isomap", "tsne", "umap")
_NONLINEAR = {"isomap", "tsne", "umap"}
_LABELS = {"pca": "PCA", "ica": "ICA", "isomap": "Isomap", "tsne": "t-SNE", "umap": "UMAP"}

#: Variables for which a *lower* value is better (used to orient "worst"/"best" rankings).
LOWER_IS_BETTER: frozenset[str] = frozenset(
    {"entropy", "error", "loss", "mse", "rmse", "mae", "aee", "epe", "consensus_error"}
)


@dataclass(frozen=True, eq=False)
class Embedding:
    """Low-dimensional coordinates of orbit vectors.

    Attributes:
        coords: (n_samples, n_components) float64, rows in sample order.
        method: one of :data:`METHODS`.
        params: the parameters actually used (after clamping), incl. ``seed`` and
            ``n_components``; requested values that were changed are kept as ``<name>_requested``.
        sample: (n_samples,) sample ids (the result's ``sample`` coordinate).
        explained_variance_ratio: PCA only: (n_components,) share of total variance per axis.
        variable: the metric embedded, when known.
        source: the run id or model name the vectors came from, when known.
        notes: human-readable remarks on degenerate input, clamping and solver warnings.
    """

    coords: np.ndarray
    method: str
    params: dict[str, Any]
    sample: np.ndarray
    explained_variance_ratio: np.ndarray | None = None
    variable: str | None = None
    source: str | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def n_samples(self) -> int:
        return int(self.coords.shape[0])

    @property
    def label(self) -> str:
        """Display name of the method, e.g. ``"t-SNE"``."""
        return _LABELS.get(self.method, self.method)


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
            raise KeyError(f"sample position {position} is not in this ranking (subset of {len(self)})")
        return int(hits[0]) + 1


# ---------------------------------------------------------------------------------------------
# orbit vectors and statistics
# ---------------------------------------------------------------------------------------------


def _as_result(obj: Any) -> OrbitResult:
    """Accept an :class:`OrbitResult` or anything holding one as ``.result`` (a ``Run``)."""
    if isinstance(obj, OrbitResult):
        return obj
    inner = getattr(obj, "result", None)
    if isinstance(inner, OrbitResult):
        return inner
    raise TypeError(f"expected an OrbitResult or a Run, got {type(obj).__name__}")


def reducible_variables(result: OrbitResult | Any) -> list[str]:
    """Names of the variables with dims exactly ``sample`` × orbit dims (any order)."""
    res = _as_result(result)
    want = {"sample", *res.orbit_dims}
    return sorted(str(k) for k, v in res.data.data_vars.items() if set(v.dims) == want and len(v.dims) == len(want))


def orbit_vectors(result: OrbitResult | Any, variable: str) -> np.ndarray:
    """Each sample's values of ``variable`` along the orbit, as rows.

    Args:
        result: an :class:`OrbitResult` (or a ``Run``).
        variable: a variable with dims ``sample`` × orbit dims, e.g. ``"correct"``,
            ``"confidence"`` or ``"consensus_agreement"``.

    Returns:
        (n_samples, n_elements) float64; orbit dims in ``result.orbit_dims`` order, flattened in C
        order (last dim fastest), whatever order the dataset stores them in.

    Raises:
        KeyError: no such variable. ValueError: the variable has other dims (e.g. class
        probabilities): select or reduce them first.
    """
    res = _as_result(result)
    if variable not in res.data.data_vars:
        raise KeyError(f"no variable {variable!r} in this result; it has {sorted(map(str, res.data.data_vars))}")
    da = res.data[variable]
    dims = ("sample", *res.orbit_dims)
    if set(da.dims) != set(dims) or len(da.dims) != len(dims):
        raise ValueError(
            f"variable {variable!r} has dims {da.dims}; orbit vectors need exactly {dims}. Select or reduce "
            f"the extra dims first (e.g. result.data[{variable!r}].isel(<dim>=0)); reducible variables: "
            f"{reducible_variables(res)}"
        )
    values = np.asarray(da.transpose(*dims).values, dtype=np.float64)
    return values.reshape(values.shape[0], -1)


_STATS = {"mean": np.mean, "variance": np.var, "std": np.std, "min": np.min, "max": np.max}


def orbit_statistic(
    result: OrbitResult | Any, variable: str, stat: Literal["mean", "variance", "std", "min", "max"] = "mean"
) -> np.ndarray:
    """Per-sample statistic of ``variable`` over the orbit, for colouring points.

    ``variance`` and ``std`` are population values (ddof = 0): the orbit sample is the whole
    grid, not a draw from it. A sample with any NaN value gets NaN.

    Returns:
        (n_samples,) float64 in sample order.
    """
    if stat not in _STATS:
        raise ValueError(f"stat must be one of {sorted(_STATS)}, got {stat!r}")
    return _STATS[stat](orbit_vectors(result, variable), axis=1)


# ---------------------------------------------------------------------------------------------
# embedding
# ---------------------------------------------------------------------------------------------


def _run_captured(fit: Any, notes: list[str]) -> np.ndarray:
    """Call ``fit()``, turning solver warnings into notes and log records instead of stderr noise."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = fit()
    for w in caught:
        msg = f"{w.category.__name__}: {w.message}"
        if msg not in notes:
            notes.append(msg)
            logger.warning("dimension reduction: %s", msg)
    return np.asarray(out, dtype=np.float64)


def _pad(coords: np.ndarray, n_components: int) -> np.ndarray:
    out = np.zeros((coords.shape[0], n_components))
    out[:, : coords.shape[1]] = coords
    return out


def _fit_pca(x: np.ndarray, k: int, seed: int, kw: dict[str, Any], params: dict, notes: list) -> tuple:
    from sklearn.decomposition import PCA

    k_fit = min(k, *x.shape)
    pca = PCA(n_components=k_fit, random_state=seed, **kw)
    coords = _run_captured(lambda: pca.fit_transform(x), notes)
    return _pad(coords, k), _pad(pca.explained_variance_ratio_[None], k)[0]


def _fit_ica(x: np.ndarray, k: int, seed: int, kw: dict[str, Any], params: dict, notes: list) -> tuple:
    from sklearn.decomposition import FastICA

    rank = int(np.linalg.matrix_rank(x - x.mean(axis=0)))
    k_fit = min(k, rank)
    if k_fit < k:
        notes.append(f"data has rank {rank}: ICA found {k_fit} component(s); the rest are 0")
    kw = {"max_iter": 1000, "whiten": "unit-variance", **kw}
    params.update(kw)
    ica = FastICA(n_components=k_fit, random_state=seed, **kw)
    return _pad(_run_captured(lambda: ica.fit_transform(x), notes), k), None


def _clamp(params: dict, notes: list, name: str, value: float, limit: float, why: str) -> float:
    if value > limit:
        params[f"{name}_requested"] = value
        notes.append(f"{name} clamped from {value:g} to {limit:g} ({why})")
        value = limit
    params[name] = value
    return value


def _fit_isomap(x: np.ndarray, k: int, seed: int, kw: dict[str, Any], params: dict, notes: list) -> tuple:
    from sklearn.manifold import Isomap

    n = x.shape[0]
    kw = dict(kw)
    nn = _clamp(params, notes, "n_neighbors", int(kw.pop("n_neighbors", 5)), n - 1, f"must be < {n} vectors")
    # dense eigensolver: exact and seed-free (ARPACK would draw its start vector from the global RNG)
    kw.setdefault("eigen_solver", "dense" if n <= 2000 else "auto")
    params["eigen_solver"] = kw["eigen_solver"]
    k_fit = min(k, n - 1)
    iso = Isomap(n_neighbors=nn, n_components=k_fit, **kw)
    return _pad(_run_captured(lambda: iso.fit_transform(x), notes), k), None


def _fit_tsne(x: np.ndarray, k: int, seed: int, kw: dict[str, Any], params: dict, notes: list) -> tuple:
    from sklearn.manifold import TSNE

    n = x.shape[0]
    kw = dict(kw)
    # sklearn's neighbour search uses 3·perplexity neighbours; beyond n − 1 it cannot be met
    perplexity = _clamp(params, notes, "perplexity", float(kw.pop("perplexity", 30.0)), (n - 1) / 3,
                        f"t-SNE needs perplexity <= (n - 1) / 3 for {n} vectors")
    if k >= 4:
        kw.setdefault("method", "exact")  # Barnes-Hut supports at most 3 components
    params.update(kw)
    tsne = TSNE(n_components=k, perplexity=perplexity, random_state=seed, **kw)
    return _run_captured(lambda: tsne.fit_transform(x), notes), None


def _fit_umap(x: np.ndarray, k: int, seed: int, kw: dict[str, Any], params: dict, notes: list) -> tuple:
    import umap  # slow first import (numba): only when asked for

    n = x.shape[0]
    kw = dict(kw)
    nn = _clamp(params, notes, "n_neighbors", int(kw.pop("n_neighbors", 15)), max(n - 1, 2), f"must be < {n} vectors")
    if n <= k + 1 and kw.get("init", "spectral") == "spectral":
        kw["init"] = "random"
        notes.append(f"spectral initialisation needs more than {k + 1} vectors: used init='random'")
    kw.setdefault("n_jobs", 1)  # a fixed random_state forces single-threading anyway
    params.update(kw)
    reducer = umap.UMAP(n_components=k, n_neighbors=nn, random_state=seed, **kw)
    return _run_captured(lambda: reducer.fit_transform(x), notes), None


_FITTERS = {"pca": _fit_pca, "ica": _fit_ica, "isomap": _fit_isomap, "tsne": _fit_tsne, "umap": _fit_umap}


def _resolve_source(
    source: np.ndarray | OrbitResult | Any, variable: str | None, sample: Sequence[Any] | None
) -> tuple[np.ndarray, np.ndarray, str | None, str | None]:
    if isinstance(source, np.ndarray) or (isinstance(source, (list, tuple)) and not hasattr(source, "result")):
        x = np.asarray(source, dtype=np.float64)
        ids = np.arange(x.shape[0]) if sample is None else np.asarray(sample)
        return x, ids, variable, None
    res = _as_result(source)
    if variable is None:
        raise ValueError(f"embedding a result needs a variable, one of {reducible_variables(res)}")
    ids = np.asarray(res.data["sample"].values)
    src = res.attrs.get("run_id") or res.attrs.get("model_name")
    return orbit_vectors(res, variable), ids, variable, (str(src) if src is not None else None)


def embed(
    source: np.ndarray | OrbitResult | Any,
    variable: str | None = None,
    method: Method = "pca",
    n_components: int = 2,
    seed: int = 0,
    *,
    standardize: bool = False,
    dedupe: bool = True,
    sample: Sequence[Any] | None = None,
    **kwargs: Any,
) -> Embedding:
    """Embed orbit vectors in ``n_components`` dimensions.

    Args:
        source: (n_samples, n_elements) vectors, or an :class:`OrbitResult` / ``Run`` together
            with ``variable`` (see :func:`orbit_vectors`).
        variable: the metric to embed when ``source`` is a result.
        method: ``"pca"`` (sklearn PCA), ``"ica"`` (FastICA, unit-variance whitening, up to 1,000
            iterations), ``"isomap"`` (5 neighbours), ``"tsne"`` (perplexity 30, PCA init) or
            ``"umap"`` (umap-learn, 15 neighbours); see the module conventions for clamping.
        n_components: output dimensions (2 for a scatter plot).
        seed: ``random_state`` of the method; the same seed gives the same coordinates.
        standardize: z-score each orbit element first (off by default, see module docstring).
        dedupe: for Isomap, t-SNE and UMAP, embed distinct vectors only (duplicates coincide).
        sample: sample ids when ``source`` is an array (default ``0..n-1``).
        **kwargs: passed to the estimator (e.g. ``perplexity=10``, ``init="random"``,
            ``min_dist=0.5``).

    Returns:
        An :class:`Embedding`; coordinates in the vectors' row order.

    Raises:
        ValueError: unknown method, fewer than 3 samples, no orbit elements, NaN or inf values.
    """
    if method not in _FITTERS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    if int(n_components) != n_components or n_components < 1:
        raise ValueError(f"n_components must be a positive integer, got {n_components!r}")
    k = int(n_components)
    x, ids, variable, src = _resolve_source(source, variable, sample)
    if x.ndim != 2:
        raise ValueError(f"orbit vectors must be 2-D (n_samples, n_elements), got shape {x.shape}")
    n = x.shape[0]
    if n < 3:
        raise ValueError(f"dimension reduction needs at least 3 samples, got {n}; evaluate more samples")
    if x.shape[1] == 0:
        raise ValueError("orbit vectors are empty (0 orbit elements)")
    if ids.shape != (n,):
        raise ValueError(f"got {ids.shape[0] if ids.ndim else 1} sample ids for {n} vectors")
    bad = ~np.isfinite(x).all(axis=1)
    if bad.any():
        raise ValueError(
            f"{int(bad.sum())} of {n} orbit vectors contain NaN or inf (first at positions "
            f"{np.flatnonzero(bad)[:5].tolist()}); select the finite samples before embedding"
        )
    if standardize:
        sd = x.std(axis=0)
        x = (x - x.mean(axis=0)) / np.where(sd > 0, sd, 1.0)
    params: dict[str, Any] = {"n_components": k, "seed": seed, "standardize": standardize}
    notes: list[str] = []
    evr: np.ndarray | None = None
    uniq, inverse = np.unique(x, axis=0, return_inverse=True)
    inverse = inverse.reshape(-1)
    if uniq.shape[0] == 1:
        notes.append("all orbit vectors are identical: every sample embeds at the origin")
        coords = np.zeros((n, k))
        evr = np.zeros(k) if method == "pca" else None
    elif method in _NONLINEAR and dedupe:
        params.update(dedupe=True, n_unique=int(uniq.shape[0]))
        if uniq.shape[0] < n:
            notes.append(f"{n - uniq.shape[0]} duplicate vectors placed on their representative")
        if uniq.shape[0] == 2:
            notes.append("only 2 distinct orbit vectors: placed at ±distance/2 on the first axis")
            half = float(np.linalg.norm(uniq[1] - uniq[0])) / 2
            base = np.zeros((2, k))
            base[:, 0] = [-half, half]
        else:
            base, _ = _FITTERS[method](uniq, k, seed, kwargs, params, notes)
        coords = base[inverse]
    else:
        coords, evr = _FITTERS[method](x, k, seed, kwargs, params, notes)
    for key, value in kwargs.items():
        params.setdefault(key, value)
    return Embedding(np.ascontiguousarray(coords, dtype=np.float64), method, params, ids, evr, variable, src,
                     tuple(notes))


def embed_models(
    results: Sequence[OrbitResult | Any],
    variable: str,
    method: Method = "pca",
    seed: int = 0,
    *,
    n_components: int = 2,
    joint: bool = False,
    **kwargs: Any,
) -> list[Embedding]:
    """One embedding per model, all with the same method and parameters.

    Args:
        results: results (or runs) of the models to compare.
        variable, method, seed, n_components, kwargs: as for :func:`embed`.
        joint: fit one embedding on the stacked vectors of all models and split it, so that the
            models' coordinates share axes (the models must share orbit elements). By default each
            model is embedded on its own, as in NERO.

    Returns:
        Embeddings in the order of ``results``.
    """
    resolved = [_as_result(r) for r in results]
    if not resolved:
        raise ValueError("embed_models needs at least one result")
    if not joint:
        return [embed(r, variable, method, n_components, seed, **kwargs) for r in resolved]
    dims = resolved[0].orbit_dims
    for r in resolved[1:]:
        _check_same_orbit(resolved[0], r, dims)
    vectors = [orbit_vectors(r, variable) for r in resolved]
    ids = np.concatenate([np.asarray(r.data["sample"].values) for r in resolved])
    stacked = embed(np.concatenate(vectors), variable, method, n_components, seed, sample=ids, **kwargs)
    out, start = [], 0
    for r, v in zip(resolved, vectors):
        stop = start + v.shape[0]
        src = r.attrs.get("run_id") or r.attrs.get("model_name")
        out.append(Embedding(stacked.coords[start:stop].copy(), method, {**stacked.params, "joint": True},
                             ids[start:stop], stacked.explained_variance_ratio, variable,
                             str(src) if src is not None else None, stacked.notes))
        start = stop
    return out


# ---------------------------------------------------------------------------------------------
# rankings
# ---------------------------------------------------------------------------------------------


def _higher_is_better(variable: str, override: bool | None) -> bool:
    return override if override is not None else variable.lower() not in LOWER_IS_BETTER


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
    s = scores[positions]
    order = np.argsort(-s if descending else s, kind="stable")  # stable: ties by position; NaN last
    picked = positions[order]
    return Ranking(picked, scores[picked], ids[picked], by, score_name, int(scores.shape[0]))


def rank_samples(
    result: OrbitResult | Any,
    variable: str,
    by: Literal["worst", "best", "most_variable"] = "worst",
    subset: Any = None,
    *,
    higher_is_better: bool | None = None,
) -> Ranking:
    """Rank samples by their orbit mean (worst / best first) or orbit variance (most variable first).

    Args:
        result: an :class:`OrbitResult` (or a ``Run``).
        variable: the metric (dims ``sample`` × orbit dims).
        by: ``"worst"``: lowest orbit mean first (highest for lower-is-better metrics such as
            entropy, see :data:`LOWER_IS_BETTER`); ``"best"``: the reverse; ``"most_variable"``:
            highest orbit variance (ddof = 0) first.
        subset: boolean mask or positions restricting the ranking (e.g. one class); returned
            indices are still positions in the full result.
        higher_is_better: override the metric's orientation.

    Returns:
        A :class:`Ranking`; ties are broken by position (stable), NaN scores rank last.
    """
    res = _as_result(result)
    vectors = orbit_vectors(res, variable)
    positions = _subset_positions(vectors.shape[0], subset)
    ids = np.asarray(res.data["sample"].values)
    if by == "most_variable":
        return _ranked(vectors.var(axis=1), True, positions, ids, by, f"orbit variance of {variable}")
    if by not in ("worst", "best"):
        raise ValueError(f"by must be 'worst', 'best' or 'most_variable', got {by!r}")
    higher = _higher_is_better(variable, higher_is_better)
    descending = (by == "best") == higher
    return _ranked(vectors.mean(axis=1), descending, positions, ids, by, f"orbit mean of {variable}")


def _check_same_orbit(a: OrbitResult, b: OrbitResult, dims: tuple[str, ...]) -> None:
    if b.orbit_dims != dims:
        raise ValueError(f"results have different orbit dims: {dims} vs {b.orbit_dims}")
    for d in dims:
        ca, cb = np.asarray(a.data[d].values), np.asarray(b.data[d].values)
        if ca.shape != cb.shape or not np.array_equal(ca, cb):
            raise ValueError(f"results sample different orbit elements along {d!r}; evaluate both on the same orbit")


def rank_differences(
    result_a: OrbitResult | Any,
    result_b: OrbitResult | Any,
    variable: str,
    by: Literal["a_worse", "b_worse", "abs"] = "abs",
    subset: Any = None,
    *,
    higher_is_better: bool | None = None,
) -> Ranking:
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
    ra, rb = _as_result(result_a), _as_result(result_b)
    ids_a, ids_b = np.asarray(ra.data["sample"].values), np.asarray(rb.data["sample"].values)
    if ids_a.shape != ids_b.shape or not np.array_equal(ids_a, ids_b):
        raise ValueError(
            f"results are not aligned: {ids_a.shape[0]} vs {ids_b.shape[0]} samples with different ids; "
            "evaluate both models on the same data, or select common samples with "
            "result.data.sel(sample=...) first"
        )
    _check_same_orbit(ra, rb, ra.orbit_dims)
    a, b = orbit_vectors(ra, variable), orbit_vectors(rb, variable)
    if by == "abs":
        scores, name = np.abs(a - b).mean(axis=1), f"mean |A - B| of {variable}"
    elif by in ("a_worse", "b_worse"):
        sign = 1.0 if _higher_is_better(variable, higher_is_better) else -1.0
        worse, better = (a, b) if by == "a_worse" else (b, a)
        scores = sign * (better - worse).mean(axis=1)
        name = f"mean {'B - A' if by == 'a_worse' else 'A - B'} of {variable}" + ("" if sign > 0 else " (negated)")
    else:
        raise ValueError(f"by must be 'a_worse', 'b_worse' or 'abs', got {by!r}")
    return _ranked(scores, True, _subset_positions(a.shape[0], subset), ids_a, by, name)
