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

from ..errors import NotFoundError

import logging
import warnings
from dataclasses import dataclass, field
from typing import Any, Literal, Sequence

import numpy as np

from ..results.result import OrbitResult, check_same_orbit

__all__ = ["METHODS", "MAX_EMBED_SAMPLES", "MAX_EMBED_VALUES", "as_result", "Embedding", "embed", "embed_models", "orbit_statistic",
           "orbit_vectors", "reducible_variables", "subsample_positions"]

logger = logging.getLogger(__name__)

Method = Literal["pca", "ica", "isomap", "tsne", "umap"]
#: The embedding methods :func:`embed` knows.
METHODS: tuple[str, ...] = ("pca", "ica", "isomap", "tsne", "umap")
_NONLINEAR = {"isomap", "tsne", "umap"}
_LABELS = {"pca": "PCA", "ica": "ICA", "isomap": "Isomap", "tsne": "t-SNE", "umap": "UMAP"}

#: Variables for which a *lower* value is better (used to orient "worst"/"best" rankings).


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
        notes: human-readable remarks on degenerate input, clamping, subsampling and solver warnings.
        positions: see below.
    """

    coords: np.ndarray
    method: str
    params: dict[str, Any]
    sample: np.ndarray
    explained_variance_ratio: np.ndarray | None = None
    variable: str | None = None
    source: str | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)
    #: positions (into the source's ``sample`` dim) of the embedded rows when the vectors were
    #: subsampled (see ``max_samples`` of :func:`embed`); None when every sample is embedded
    positions: np.ndarray | None = None

    @property
    def subsampled(self) -> bool:
        return self.positions is not None

    def rows_of(self, values: np.ndarray) -> np.ndarray:
        """Per-sample ``values`` of the source (one per sample) restricted to the embedded rows."""
        values = np.asarray(values)
        return values if self.positions is None else values[self.positions]

    @property
    def n_samples(self) -> int:
        return int(self.coords.shape[0])

    @property
    def label(self) -> str:
        """Display name of the method, e.g. ``"t-SNE"``."""
        return _LABELS.get(self.method, self.method)


# --------------------------------------------------------------------------- orbit vectors


def as_result(obj: Any) -> OrbitResult:
    """Accept an :class:`OrbitResult` or anything holding one as ``.result`` (a ``Run``)."""
    if isinstance(obj, OrbitResult):
        return obj
    inner = getattr(obj, "result", None)
    if isinstance(inner, OrbitResult):
        return inner
    raise TypeError(f"expected an OrbitResult or a Run, got {type(obj).__name__}")


def reducible_variables(result: OrbitResult | Any) -> list[str]:
    """Names of the variables with dims exactly ``sample`` × orbit dims (any order)."""
    res = as_result(result)
    want = {"sample", *res.orbit_dims}
    return sorted(str(k) for k, v in res.data.data_vars.items() if set(v.dims) == want and len(v.dims) == len(want))


def orbit_vectors(result: OrbitResult | Any, variable: str, positions: np.ndarray | None = None) -> np.ndarray:
    """Each sample's values of ``variable`` along the orbit, as rows (of the samples at
    ``positions`` only, when given: a stored result then reads just those).

    ``result`` is an :class:`OrbitResult` (or a ``Run``); ``variable`` any variable with dims
    ``sample`` × orbit dims (``correct``, ``confidence``, ``consensus_agreement`` …).

    Returns:
        (n_samples, n_elements) float64; orbit dims in ``result.orbit_dims`` order, flattened in C
        order (last dim fastest), whatever order the dataset stores them in.

    Raises:
        KeyError: no such variable. ValueError: it has other dims too (e.g. class): select first.
    """
    res = as_result(result)
    if variable not in res.data.data_vars:
        raise NotFoundError(f"no variable {variable!r} in this result; it has {sorted(map(str, res.data.data_vars))}")
    da = res.data[variable]
    dims = ("sample", *res.orbit_dims)
    if set(da.dims) != set(dims) or len(da.dims) != len(dims):
        raise ValueError(f"variable {variable!r} has dims {da.dims}; orbit vectors need exactly {dims}. Select or "
                         f"reduce the extra dims first (e.g. .isel(<dim>=0)); usable: {reducible_variables(res)}")
    if positions is not None:
        da = da.isel(sample=np.asarray(positions, dtype=np.int64))
    values = np.asarray(da.transpose(*dims).values, dtype=np.float64)
    return values.reshape(values.shape[0], int(np.prod(values.shape[1:])))


_STATS = {"mean": np.mean, "variance": np.var, "std": np.std, "min": np.min, "max": np.max}


def orbit_statistic(result: OrbitResult | Any, variable: str,
                    stat: Literal["mean", "variance", "std", "min", "max"] = "mean") -> np.ndarray:
    """Per-sample statistic of ``variable`` over the orbit, for colouring points.

    ``variance`` and ``std`` are population values (ddof = 0): the orbit sample is the whole
    grid, not a draw from it. A sample with any NaN value gets NaN. Returns (n_samples,) float64.
    """
    if stat not in _STATS:
        raise ValueError(f"stat must be one of {sorted(_STATS)}, got {stat!r}")
    res = as_result(result)
    orbit_vectors(res, variable, positions=np.empty(0, np.int64))  # checks the variable and its dims
    return res.per_sample([variable], lambda piece: _STATS[stat](orbit_vectors(piece, variable), axis=1),
                          key=f"orbit-{stat}:{variable}")


# --------------------------------------------------------------------------- embedding


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

    # Whiten here (PCA to unit variance) rather than in FastICA: sklearn fixes eigenvector signs
    # with sign(u[0]), which zeroes a component when the first orbit element is constant (common:
    # the identity is often right for every sample) and then fails on NaN.
    n = x.shape[0]
    u, s, _ = np.linalg.svd(x - x.mean(axis=0), full_matrices=False)
    rank = int(np.sum(s > s[0] * max(x.shape) * np.finfo(np.float64).eps))
    k_fit = min(k, rank)
    if k_fit < k:
        notes.append(f"data has rank {rank}: ICA found {k_fit} component(s); the rest are 0")
    white = u[:, :k_fit] * np.sqrt(n)  # uncorrelated columns with unit variance (ddof = 0)
    kw = {"max_iter": 1000, **kw}
    params.update(kw, whiten="unit-variance (PCA, before FastICA)")
    ica = FastICA(whiten=False, random_state=seed, **kw)
    return _pad(_run_captured(lambda: ica.fit_transform(white), notes), k), None


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
    from threadpoolctl import threadpool_limits

    n = x.shape[0]
    kw = dict(kw)
    # sklearn searches 3·perplexity neighbours, so cap at (n − 1) / 3 as openTSNE does; below 1 the
    # optimisation degenerates (slow Barnes-Hut, huge coordinates), so never clamp under 1
    perplexity = _clamp(params, notes, "perplexity", float(kw.pop("perplexity", 30.0)), max((n - 1) / 3, 1.0),
                        f"t-SNE needs perplexity <= max((n - 1) / 3, 1) for {n} vectors")
    if k >= 4:
        kw.setdefault("method", "exact")  # Barnes-Hut supports at most 3 components
    params.update(kw)
    tsne = TSNE(n_components=k, perplexity=perplexity, random_state=seed, **kw)
    # Small inputs: one OpenMP thread. Each of the ~1,000 gradient steps is a tiny parallel region
    # whose barrier stalls for a scheduler slice on a busy machine (0.1 s became 10 s); the
    # per-point gradients do not depend on the thread count, so the result is the same.
    with threadpool_limits(limits=1 if n < 2000 else None, user_api="openmp"):
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


def _source_name(res: OrbitResult) -> str | None:
    src = res.attrs.get("run_id") or res.attrs.get("model_name")
    return None if src is None else str(src)


#: Vectors above which :func:`embed` fits a seeded random subsample (and says so in its notes).
MAX_EMBED_SAMPLES = 5000
#: ... and at most this many values in all (samples × orbit elements; 32 MB of float64), so dense
#: orbits (NERO's 2,847 rotations) keep the embedding's memory bounded too.
MAX_EMBED_VALUES = 4_000_000


def subsample_positions(n: int, max_samples: int | None, seed: int, n_elements: int = 1) -> np.ndarray | None:
    """Sorted positions of a seeded uniform subsample of at most ``max_samples`` of ``n`` samples
    (fewer for long vectors: at most :data:`MAX_EMBED_VALUES` values of ``n_elements`` each), or
    None when all are kept."""
    if max_samples is None:
        return None
    if max_samples < 3:
        raise ValueError(f"max_samples must be at least 3, got {max_samples}")
    keep = max(3, min(int(max_samples), MAX_EMBED_VALUES // max(int(n_elements), 1)))
    if n <= keep:
        return None
    return np.sort(np.random.default_rng(seed).choice(n, size=keep, replace=False))


def _n_elements(res: OrbitResult) -> int:
    return int(np.prod([res.data.sizes[d] for d in res.orbit_dims]))


def _resolve_source(source: np.ndarray | OrbitResult | Any, variable: str | None, sample: Sequence[Any] | None,
                    max_samples: int | None, seed: int
                    ) -> tuple[np.ndarray, np.ndarray, str | None, str | None, np.ndarray | None]:
    if isinstance(source, (np.ndarray, list, tuple)):
        x = np.asarray(source, dtype=np.float64)
        ids = np.arange(x.shape[0]) if sample is None else np.asarray(sample)
        keep = subsample_positions(x.shape[0], max_samples, seed, x.shape[1]) if x.ndim == 2 else None
        if keep is not None and ids.shape == (x.shape[0],):
            x, ids = x[keep], ids[keep]
        return x, ids, variable, None, keep
    res = as_result(source)
    if variable is None:
        raise ValueError(f"embedding a result needs a variable, one of {reducible_variables(res)}")
    keep = subsample_positions(res.n_samples, max_samples, seed, _n_elements(res))
    ids = np.asarray(res.data["sample"].values)
    return (orbit_vectors(res, variable, keep), ids if keep is None else ids[keep], variable, _source_name(res), keep)


def embed(source: np.ndarray | OrbitResult | Any, variable: str | None = None, method: Method = "pca",
          n_components: int = 2, seed: int = 0, *, standardize: bool = False, dedupe: bool = True,
          sample: Sequence[Any] | None = None, max_samples: int | None = MAX_EMBED_SAMPLES,
          **kwargs: Any) -> Embedding:
    """Embed orbit vectors in ``n_components`` dimensions.

    Args:
        source: (n_samples, n_elements) vectors, or an :class:`OrbitResult` / ``Run`` together
            with ``variable`` (see :func:`orbit_vectors`).
        variable: the metric to embed when ``source`` is a result.
        method: ``"pca"`` (sklearn PCA), ``"ica"`` (FastICA on our own unit-variance PCA
            whitening, so no ``whiten`` keyword; up to 1,000 iterations), ``"isomap"`` (5
            neighbours, dense eigensolver up to 2,000 vectors), ``"tsne"`` (perplexity 30, PCA
            init) or ``"umap"`` (umap-learn, 15 neighbours); clamping: see the module docstring.
        n_components: output dimensions (2 for a scatter plot).
        seed: ``random_state`` of the method; the same seed gives the same coordinates.
        standardize: z-score each orbit element first (off by default, see module docstring).
        dedupe: for Isomap, t-SNE and UMAP, embed distinct vectors only (duplicates coincide).
        sample: sample ids when ``source`` is an array (default ``0..n-1``).
        max_samples: above this many vectors (or :data:`MAX_EMBED_VALUES` values in all), embed
            a seeded uniform random subsample (``seed``), so memory and time stay bounded on
            large runs and dense orbits; the embedding's ``positions`` says which rows were kept
            and its ``notes`` say so. None: all.
        **kwargs: passed to the estimator (``perplexity=10``, ``init="random"``, ``min_dist=0.5`` …).

    Returns:
        An :class:`Embedding`, rows in the vectors' order.

    Raises:
        ValueError: unknown method, fewer than 3 samples, no orbit elements, NaN or inf values.
    """
    if method not in _FITTERS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    if int(n_components) != n_components or n_components < 1:
        raise ValueError(f"n_components must be a positive integer, got {n_components!r}")
    k = int(n_components)
    x, ids, variable, src, keep = _resolve_source(source, variable, sample, max_samples, seed)
    if x.ndim != 2 or x.shape[1] == 0:
        raise ValueError(f"orbit vectors must be 2-D (n_samples, n_elements >= 1), got shape {x.shape}")
    n = x.shape[0]
    if n < 3:
        raise ValueError(f"dimension reduction needs at least 3 samples, got {n}; evaluate more samples")
    if ids.shape != (n,):
        raise ValueError(f"got {ids.shape[0] if ids.ndim else 1} sample ids for {n} vectors")
    bad = ~np.isfinite(x).all(axis=1)
    if bad.any():
        raise ValueError(f"{int(bad.sum())} of {n} orbit vectors contain NaN or inf (first at positions "
                         f"{np.flatnonzero(bad)[:5].tolist()}); select the finite samples before embedding")
    if standardize:
        sd = x.std(axis=0)
        x = (x - x.mean(axis=0)) / np.where(sd > 0, sd, 1.0)
    params: dict[str, Any] = {"n_components": k, "seed": seed, "standardize": standardize}
    notes: list[str] = []
    if keep is not None:
        total = source.shape[0] if isinstance(source, np.ndarray) else as_result(source).n_samples
        params.update(max_samples=int(max_samples), n_total=int(total))  # type: ignore[arg-type]
        notes.append(f"subsampled: {n:,} of {total:,} samples (seeded uniform, seed {seed})")
    evr: np.ndarray | None = None
    if not np.any(x != x[0]):
        notes.append("all orbit vectors are identical: every sample embeds at the origin")
        coords = np.zeros((n, k))
        evr = np.zeros(k) if method == "pca" else None
    elif method in _NONLINEAR and dedupe:
        uniq, inverse = np.unique(x, axis=0, return_inverse=True)
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
        coords = base[inverse.reshape(-1)]
    else:
        coords, evr = _FITTERS[method](x, k, seed, kwargs, params, notes)
    for key, value in kwargs.items():
        params.setdefault(key, value)
    return Embedding(np.ascontiguousarray(coords, dtype=np.float64), method, params, ids, evr, variable, src,
                     tuple(notes), keep)


def embed_models(results: Sequence[OrbitResult | Any], variable: str, method: Method = "pca", seed: int = 0, *,
                 n_components: int = 2, joint: bool = False, max_samples: int | None = MAX_EMBED_SAMPLES,
                 **kwargs: Any) -> list[Embedding]:
    """One embedding per model, all with the same method and parameters.

    Args:
        results: results (or runs) of the models to compare.
        variable: as for :func:`embed`.
        method: as for :func:`embed`.
        seed: as for :func:`embed`.
        n_components: as for :func:`embed`.
        **kwargs: as for :func:`embed`.
        joint: fit one embedding on the stacked vectors of all models and split it, so that the
            models' coordinates share axes (the models must share orbit elements). By default each
            model is embedded on its own, as in NERO.

    Returns:
        Embeddings in the order of ``results``.
    """
    resolved = [as_result(r) for r in results]
    if not resolved:
        raise ValueError("embed_models needs at least one result")
    if not joint:
        return [embed(r, variable, method, n_components, seed, max_samples=max_samples, **kwargs) for r in resolved]
    for r in resolved[1:]:
        check_same_orbit(resolved[0], r)
    keeps = [subsample_positions(r.n_samples, max_samples, seed, _n_elements(r)) for r in resolved]
    vectors = [orbit_vectors(r, variable, keep) for r, keep in zip(resolved, keeps)]
    own_ids = [np.asarray(r.data["sample"].values) for r in resolved]
    ids = np.concatenate([i if keep is None else i[keep] for i, keep in zip(own_ids, keeps)])
    stacked = embed(np.concatenate(vectors), variable, method, n_components, seed, sample=ids, max_samples=None,
                    **kwargs)
    notes = stacked.notes + tuple(f"subsampled: {k.size:,} of {r.n_samples:,} samples of model {i} (seeded uniform, "
                                  f"seed {seed})" for i, (r, k) in enumerate(zip(resolved, keeps)) if k is not None)
    stops = np.cumsum([v.shape[0] for v in vectors])
    return [Embedding(stacked.coords[stop - v.shape[0]:stop].copy(), method, {**stacked.params, "joint": True},
                      ids[stop - v.shape[0]:stop], stacked.explained_variance_ratio, variable, _source_name(r),
                      notes, keep) for r, v, stop, keep in zip(resolved, vectors, stops, keeps)]
