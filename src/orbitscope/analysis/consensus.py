"""Label-free evaluation: NERO's consensus and invariance measures for classifiers.

NERO (arXiv:2305.19889) evaluates a model without labels by building a **consensus** per sample:
map the model's outputs at every orbit element back to the canonical frame with g⁻¹ and average
them, ``c(x) = mean_g g⁻¹∘f(g·x)``, then score each ``f(g·x)`` against ``g∘c(x)`` as if it were
the ground truth. For classification the group acts trivially on labels, so mapping back is the
identity and the consensus is the mean of the class probabilities over the orbit.

.. important::
   Consensus measures **self-consistency, not correctness**. A model that predicts the same
   wrong class at every orbit element agrees perfectly with its consensus (agreement 1, KL 0,
   flip rate 0). Use these measures to find where a model's predictions *change* along an
   orbit; use labels (``correct``, ``confidence``) to find out whether they are right.

Conventions:
    * **Distinct elements.** Orbit samples may list the same group element twice (NERO's
      73-angle grid holds both 0° and 360° so the polar curve closes). Averages over the orbit
      (the consensus itself, ``mean_*`` measures, ``identity_agreement``) count every *distinct*
      element once: two elements are the same when their linear maps, shifts (pixels), gains and
      contrasts agree within ``atol`` (max-norm) and their time-reversal flags agree
      (:func:`orbitscope.group.elements.unique_elements`). Per-element scores are still reported at
      every listed element, duplicates included.
    * The consensus is the plain mean over the distinct sampled elements, so a non-uniform
      sample (denser around 0°) weights those elements more.
    * Probabilities are the task's stored ``probabilities`` (evaluate with
      ``Classification(store_probabilities=True)``); arithmetic is in float64.
    * ``kl_to_consensus`` is KL(p_g ‖ c) = Σ_k p_g,k log(p_g,k / c_k) in nats (terms with
      p_g,k = 0 are 0). This direction is always finite, because c_k >= p_g,k / K for K distinct
      elements, and bounded by log K; its mean over the distinct elements is the generalised
      Jensen–Shannon divergence H(c) − mean_g H(p_g). Rounding can make it a hair below 0; it is
      clipped at 0.
    * ``tv_to_consensus`` is the total variation distance ½ Σ_k |p_g,k − c_k| in [0, 1].
    * The consensus class is ``argmax_k c_k`` (lowest index on ties); a prediction at g is the
      stored ``prediction`` (the task's argmax).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import xarray as xr

from ..group.elements import unique_elements
from ..group.orbits import Orbit, Transforms
from ..results.lazy import RowChunkedArray, lazy_variable
from ..results.metric_lookup import consensus_metrics, metric_result, register_consensus
from ..results.result import OrbitResult, rows_for
from ..tasks.classification import Classification

__all__ = ["consensus_probabilities", "consensus_scores", "with_consensus", "invariance_measures", "adjacent_pairs",
           "consensus_metrics", "metric_result"]

_METHOD = (
    "NERO consensus for classification (arXiv:2305.19889): c(x) = mean of class probabilities over the "
    "distinct orbit elements (labels are invariant, so g^-1 acts as the identity); kl_to_consensus = "
    "KL(p_g || c) in nats; tv_to_consensus = 1/2 sum |p_g - c|. Self-consistency, not correctness."
)


def _as_result(result: OrbitResult | xr.Dataset) -> OrbitResult:
    if isinstance(result, OrbitResult):
        return result
    if isinstance(result, xr.Dataset):
        return OrbitResult(result)
    raise TypeError(f"expected an OrbitResult (run.result), got {type(result).__name__}")


def _orbit_of(result: OrbitResult) -> tuple[Orbit, Transforms]:
    """The result's orbit and its elements, checked against the result's coordinates."""
    try:
        orbit = result.orbit
    except KeyError:
        raise ValueError("the result carries no orbit in its attrs; use the OrbitResult that evaluate() returned") from None
    for d in orbit.dims:
        have = result.data.coords[d].values if d in result.data.dims else np.empty(0)
        if have.shape != orbit.coords[d].shape or not np.allclose(have, orbit.coords[d]):
            raise ValueError(
                f"the result's {d!r} coordinates do not match its orbit {orbit!r} (was it sliced with sel/isel?); "
                "compute consensus measures on the full result"
            )
    return orbit, orbit.transforms()


def _probabilities(result: OrbitResult) -> np.ndarray:
    """(N, K, classes) float64, orbit dims flattened in C order."""
    if "probabilities" not in result.data:
        raise ValueError(
            "the result has no 'probabilities' variable: consensus needs the full class distributions; "
            "evaluate with task=Classification(store_probabilities=True)"
        )
    dims = ("sample", *result.orbit_dims, "class")
    p = result.data["probabilities"].transpose(*dims).values.astype(np.float64)
    return p.reshape(p.shape[0], -1, p.shape[-1])


def _predictions(result: OrbitResult, probs: np.ndarray | None = None) -> np.ndarray:
    """(N, K) int: the stored predictions, else the argmax of the probabilities."""
    if "prediction" in result.data:
        pred = result.data["prediction"].transpose("sample", *result.orbit_dims).values
        return pred.reshape(pred.shape[0], -1).astype(np.int64)
    return (probs if probs is not None else _probabilities(result)).argmax(-1)


def _first_occurrences(t: Transforms, atol: float) -> np.ndarray:
    """Flat indices of the distinct elements (first listed copy of each)."""
    return np.unique(unique_elements(t, atol))


def _consensus(result: OrbitResult, atol: float) -> tuple[np.ndarray, np.ndarray, Transforms]:
    """(probabilities (N, K, classes), consensus (N, classes), elements)."""
    _, t = _orbit_of(result)
    probs = _probabilities(result)
    keep = _first_occurrences(t, atol)
    return probs, probs[:, keep].mean(axis=1), t


def consensus_probabilities(result: OrbitResult, *, atol: float = 1e-6) -> xr.DataArray:
    """Consensus class distribution per sample: the mean of the class probabilities over the
    distinct orbit elements (duplicates such as 0° and 360° counted once).

    Returns:
        float64 DataArray ``(sample, class)``; rows sum to 1 (up to the model's rounding).

    Raises:
        ValueError: the result has no ``probabilities`` (evaluate with
            ``Classification(store_probabilities=True)``).
    """
    result = _as_result(result)
    _, cons, t = _consensus(result, atol)
    coords = {"sample": result.data.coords["sample"].values}
    if "class" in result.data.coords:
        coords["class"] = result.data.coords["class"].values
    return xr.DataArray(cons, dims=("sample", "class"), coords=coords, name="consensus_probabilities",
                        attrs={"description": "mean class probabilities over the distinct orbit elements",
                               "n_distinct_elements": int(len(_first_occurrences(t, atol)))})


def consensus_scores(result: OrbitResult, *, atol: float = 1e-6) -> xr.Dataset:
    """Score the prediction at every orbit element against the sample's consensus.

    Returns:
        Dataset with, over ``(sample, *orbit dims)``: ``consensus_agreement`` (uint8, 1 if the
        prediction at g is the consensus class), ``consensus_confidence`` (probability at g of
        the consensus class), ``kl_to_consensus`` (KL(p_g ‖ c), nats), ``tv_to_consensus``
        (½ Σ|p_g − c|); over ``(sample,)``: ``consensus_class`` (int32); over
        ``(sample, class)``: ``consensus_probabilities``. See the module docstring.
    """
    result = _as_result(result)
    probs, cons, t = _consensus(result, atol)
    n, k, _ = probs.shape
    cls = cons.argmax(-1)
    pred = _predictions(result, probs)
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(probs > 0, probs * (np.log(probs) - np.log(cons)[:, None, :]), 0.0)
    kl = np.maximum(terms.sum(-1), 0.0)
    tv = 0.5 * np.abs(probs - cons[:, None, :]).sum(-1)
    dims = result.orbit_dims
    shape = (n, *(result.data.sizes[d] for d in dims))
    grid = ("sample", *dims)
    coords: dict[str, Any] = {d: result.data.coords[d].values for d in ("sample", *dims)}
    if "class" in result.data.coords:
        coords["class"] = result.data.coords["class"].values
    out = xr.Dataset(
        {
            "consensus_agreement": (grid, (pred == cls[:, None]).astype(np.uint8).reshape(shape)),
            "consensus_confidence": (grid, np.take_along_axis(probs, cls[:, None, None], -1)[..., 0].reshape(shape)),
            "kl_to_consensus": (grid, kl.reshape(shape)),
            "tv_to_consensus": (grid, tv.reshape(shape)),
            "consensus_class": (("sample",), cls.astype(np.int32)),
            "consensus_probabilities": (("sample", "class"), cons),
        },
        coords=coords,
        attrs={"consensus_method": _METHOD, "consensus_distinct_elements": int(len(_first_occurrences(t, atol)))},
    )
    meta = Classification()
    for name in out.data_vars:
        info = meta.variable(str(name))
        if info is not None:
            out[name].attrs.update(info.attrs())
    return out


def with_consensus(result: OrbitResult, *, atol: float = 1e-6) -> OrbitResult:
    """A new :class:`OrbitResult` holding the result's variables plus those of
    :func:`consensus_scores` (so ``aggregate(res, "consensus_agreement")`` and NERO plots work
    on them like on any metric). Attributes are kept, with ``consensus_method`` added.
    The input result is not modified.

    For a stored (lazy) result the consensus variables are lazy too: each stored chunk's scores
    are computed from that chunk's probabilities when first read, so aggregates stream and a
    selection computes only the chunks it touches.
    """
    result = _as_result(result)
    if result.source is not None:
        return _lazy_consensus(result, atol)
    scores = consensus_scores(result, atol=atol)
    ds = result.data.copy()
    for name, var in scores.data_vars.items():
        ds[name] = var
    ds.attrs = {**result.data.attrs, **scores.attrs}
    return OrbitResult(ds)


_CONSENSUS_INPUTS = ("probabilities", "prediction")


def _lazy_consensus(result: OrbitResult, atol: float) -> OrbitResult:
    assert result.source is not None
    needed = [v for v in _CONSENSUS_INPUTS if v in result.data]
    if "probabilities" not in needed:
        _probabilities(result)  # raises the explanatory error
    per_sample = int(np.prod([n for d, n in result.data["probabilities"].sizes.items() if d != "sample"]))
    bounds = result.source.bounds.split(rows_for(per_sample))  # a bounded working set per piece
    memo: dict[int, xr.Dataset] = {}

    def scores_of(i: int) -> xr.Dataset:
        if i not in memo:
            memo.clear()  # keep one chunk: the variables of a pass read the same one in turn
            piece = result.data[needed].isel(sample=slice(int(bounds.starts[i]), int(bounds.stops[i]))).load()
            memo[i] = consensus_scores(OrbitResult(piece), atol=atol)
        return memo[i]

    first = scores_of(0) if len(bounds) else consensus_scores(OrbitResult(result.data[needed].load()), atol=atol)
    ds = result.data.copy(deep=False)
    for name, var in first.data_vars.items():
        dims = ("sample", *[d for d in var.dims if d != "sample"])
        shape = (bounds.n, *(var.sizes[d] for d in dims[1:]))
        arr = RowChunkedArray(shape, var.dtype, bounds, lambda i, n=str(name), d=dims: scores_of(i)[n].transpose(*d).values)
        ds[name] = xr.Variable(dims, lazy_variable(arr), attrs=var.attrs)
    ds.attrs = {**result.data.attrs, **first.attrs}
    return OrbitResult(ds, result.source.derived(f"consensus:atol={atol!r}", bounds))


def adjacent_pairs(orbit: Orbit, *, atol: float = 1e-6) -> dict[str, tuple[np.ndarray, np.ndarray, bool]]:
    """Neighbouring orbit elements along each orbit dim, as flat (C-order) index pairs.

    Along a dim of length n the pairs are (i, i+1) for i < n − 1, at every index of the other
    dims. The dim **wraps around** (adds the pair (n − 1, 0)) when n >= 3, its last element is
    not its first (no duplicate end such as 0° and 360°), and one more step equal to the last
    one, ``(g_{n-1} ∘ g_{n-2}⁻¹) ∘ g_{n-1}``, returns to the first element within ``atol``
    (checked at index 0 of the other dims). So ``Rotation(range(0, 360, 30))`` and
    ``Rotation90()`` wrap, ``Rotation(range(0, 361, 30))`` (0° and 360° both listed) and
    ``Rotation(range(-15, 16))``, shifts and scales do not.

    Returns:
        ``{dim: (first indices, second indices, wraps)}``.
    """
    t = orbit.transforms()
    shape = orbit.shape
    flat = np.arange(orbit.size).reshape(shape)
    out: dict[str, tuple[np.ndarray, np.ndarray, bool]] = {}
    for axis, dim in enumerate(orbit.dims):
        n = shape[axis]
        line = np.moveaxis(flat, axis, 0)  # (n, *others)
        a, b = line[:-1].ravel(), line[1:].ravel()
        wraps = False
        if n >= 3:
            g = t[line.reshape(n, -1)[:, 0]]
            nxt = g[n - 1].compose(g[n - 2].inverse()).compose(g[n - 1])
            wraps = not g[n - 1].allclose(g[0], atol) and nxt.allclose(g[0], atol)
        if wraps:
            a, b = np.concatenate([a, line[-1].ravel()]), np.concatenate([b, line[0].ravel()])
        out[dim] = (a, b, wraps)
    return out


def invariance_measures(result: OrbitResult, *, atol: float = 1e-6) -> xr.Dataset:
    """Per-sample, label-free summaries of how predictions change along the orbit.

    Variables (dim ``sample``; all in [0, 1] except the KL):

    * ``flip_rate``: fraction of neighbouring element pairs (see :func:`adjacent_pairs`, pooled
      over all orbit dims) whose predictions differ; for orbits with several dims also
      ``flip_rate_<dim>`` per dim.
    * ``identity_agreement``: among the distinct elements other than the identity (a duplicate
      of the identity, e.g. 360°, is not counted), the fraction whose prediction equals the
      prediction at the identity.
    * ``consensus_agreement_rate``, ``mean_kl_to_consensus`` (nats), ``mean_tv_to_consensus``:
      means over the distinct elements of the per-element scores of :func:`consensus_scores`.

    ``attrs`` hold the dataset-level means (``dataset_<variable>``, e.g. ``dataset_flip_rate``), the number of distinct elements
    and of neighbour pairs, and the dims that wrap around. Self-consistency, not correctness: a
    model that is invariant but wrong scores perfectly.

    Raises:
        ValueError: no ``probabilities`` in the result; the orbit has no identity element, or
            fewer than two distinct elements, or no neighbouring pairs.
    """
    result = _as_result(result)
    orbit, t = _orbit_of(result)
    rep = unique_elements(t, atol)
    keep = np.unique(rep)
    ident = orbit.identity_index()
    if ident is None:
        raise ValueError(
            f"the orbit {orbit!r} does not contain the identity element, so 'identity_agreement' is undefined; "
            "include it (e.g. angle 0, shift (0, 0), scale 1) in the orbit"
        )
    others = keep[rep[keep] != rep[ident]]
    if others.size == 0:
        raise ValueError("the orbit has fewer than two distinct elements: nothing to compare")
    pairs = adjacent_pairs(orbit, atol=atol)
    if sum(len(a) for a, _, _ in pairs.values()) == 0:
        raise ValueError(f"the orbit {orbit!r} has no neighbouring elements (every dim has length 1)")
    if "probabilities" not in result.data:
        _probabilities(result)  # raises the explanatory error
    needed = [v for v in _CONSENSUS_INPUTS if v in result.data]
    if result.n_samples == 0:
        raise ValueError("the result has no samples: nothing to measure")
    parts = [_invariance_of(piece, orbit, keep, others, ident, pairs, atol)
             for _, piece in result.chunks(needed)]  # per sample: one stored chunk at a time
    data = {name: (("sample",), np.concatenate([p[name] for p in parts])) for name in parts[0]}
    attrs: dict[str, Any] = {f"dataset_{name}": float(np.nanmean(v)) for name, (_, v) in data.items()}
    attrs.update(
        n_samples=int(result.n_samples),
        n_distinct_elements=int(keep.size),
        n_neighbour_pairs=int(sum(len(a) for a, _, _ in pairs.values())),
        wrapped_dims=json.dumps([d for d, (_, _, w) in pairs.items() if w]),
        note="label-free: measures self-consistency along the orbit, not correctness",
    )
    return xr.Dataset(data, coords={"sample": result.data.coords["sample"].values}, attrs=attrs)


def _invariance_of(piece: OrbitResult, orbit: Orbit, keep: np.ndarray, others: np.ndarray, ident: int,
                   pairs: dict[str, tuple[np.ndarray, np.ndarray, bool]], atol: float) -> dict[str, np.ndarray]:
    """The per-sample measures of :func:`invariance_measures` for the samples of ``piece``."""
    scores = consensus_scores(piece, atol=atol)
    pred = _predictions(piece)
    data: dict[str, np.ndarray] = {}
    flips = {d: pred[:, a] != pred[:, b] for d, (a, b, _) in pairs.items()}
    data["flip_rate"] = np.concatenate(list(flips.values()), axis=1).mean(1)
    if len(orbit.dims) > 1:
        for d, f in flips.items():
            data[f"flip_rate_{d}"] = f.mean(1) if f.shape[1] else np.full(len(pred), np.nan)
    data["identity_agreement"] = (pred[:, others] == pred[:, [ident]]).mean(1)
    for src, dst in (("consensus_agreement", "consensus_agreement_rate"), ("kl_to_consensus", "mean_kl_to_consensus"),
                     ("tv_to_consensus", "mean_tv_to_consensus")):
        vals = scores[src].transpose("sample", *piece.orbit_dims).values.astype(np.float64)
        data[dst] = vals.reshape(len(vals), -1)[:, keep].mean(1)
    return data


# the metric lookup (results.metric_lookup, below stats) adds consensus variables through this
register_consensus(with_consensus)
