"""One metric of a result as a matrix of samples × orbit elements, the input of every
whole-orbit statistic (:mod:`orbitscope.stats`).

Orbit elements are flattened in the result's order (C order over its orbit dims), so element
``k`` of a statistic is ``np.unravel_index(k, shape)`` of the orbit; :meth:`OrbitValues.where`
names it. Values are float64 with NaN where the metric is undefined (e.g. a detection metric on
a view without objects).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import NotFoundError
from ..results.metric_lookup import metric_result

__all__ = ["OrbitValues", "orbit_values", "element_noun", "element_representatives", "result_name"]


@dataclass(frozen=True)
class OrbitValues:
    """A metric over samples × orbit elements, with what a statistic needs to read it.

    Attributes:
        values: ``(n_samples, n_elements)`` float64, NaN where undefined.
        metric: the variable's name; ``label`` its display name with unit.
        binary: whether values are 0/1 (accuracy-like: exact binomial bands, McNemar).
        lower_is_better: errors, losses: a *drop* in quality is then an increase in value.
        dims, shape, coords: the orbit's dims, sizes and coordinates per dim.
        identity: the flat index of the identity element, or None when the orbit has none.
        samples: the samples' ids (the result's ``sample`` coordinate).
        representative: per element, the first element equal to it as a group element (0° and
            360° are one element), or None when the orbit's elements are not known.
    """

    values: np.ndarray
    metric: str
    label: str
    binary: bool
    lower_is_better: bool
    dims: tuple[str, ...]
    shape: tuple[int, ...]
    coords: dict[str, np.ndarray]
    identity: int | None
    samples: np.ndarray
    representative: np.ndarray | None = None

    @property
    def n_samples(self) -> int:
        return int(self.values.shape[0])

    @property
    def n_elements(self) -> int:
        return int(self.values.shape[1])

    def where(self, k: int) -> dict[str, Any]:
        """The coordinates of flat element ``k``, e.g. ``{"angle": 90.0}``."""
        idx = np.unravel_index(int(k), self.shape)
        out: dict[str, Any] = {}
        for d, j in zip(self.dims, idx):
            v = self.coords[d][j]
            out[d] = v.item() if hasattr(v, "item") else v
        return out

    def where_text(self, k: int) -> str:
        """:meth:`where` as text, e.g. ``"angle 90"``."""
        return ", ".join(f"{d} {v:g}" if isinstance(v, (int, float)) and not isinstance(v, bool) else f"{d} {v}"
                         for d, v in self.where(k).items())

    def quality(self) -> np.ndarray:
        """The values oriented so that higher is better (negated for lower-is-better metrics)."""
        return -self.values if self.lower_is_better else self.values

    def reference(self) -> tuple[int, bool]:
        """The element drops are measured from, chosen without looking at the values: the
        identity, else the orbit's first element; and whether it is the identity."""
        return (self.identity, True) if self.identity is not None else (0, False)

    def same_as(self, k: int) -> np.ndarray:
        """Boolean mask of the elements that are the same group element as element ``k``
        (``k`` itself, and e.g. 360° for 0°)."""
        if self.representative is None:
            mask = np.zeros(self.n_elements, bool)
            mask[k] = True
            return mask
        return np.asarray(self.representative) == self.representative[k]

    def reshape(self, flat: np.ndarray) -> np.ndarray:
        """A per-element vector back in the orbit's shape."""
        return np.asarray(flat).reshape(self.shape)


def result_name(result: Any, fallback: str) -> str:
    """How verdicts and reasons call a result: its run name, else its model name, else ``fallback``."""
    attrs = result.attrs
    return str(attrs.get("run_name") or attrs.get("model_name") or fallback)


def element_noun(dims: tuple[str, ...], count: int | None = None) -> str:
    """How to call orbit elements in a sentence: ``"angles"`` for a rotation, else ``"orbit elements"``."""
    names = {("angle",): "angle", ("shift",): "shift", ("scale",): "scale", ("brightness",): "brightness level",
             ("rotation",): "rotation", ("d4",): "D4 element"}
    noun = names.get(tuple(dims), "orbit element")
    return noun if count == 1 else noun + "s"


def orbit_values(result: Any, metric: str | None = None, *, subset: Any = None) -> OrbitValues:
    """The per-sample values of ``metric`` (default: the result's primary metric) over the orbit.

    Args:
        result: an :class:`~orbitscope.results.OrbitResult` (stored or in memory).
        metric: a variable recorded over the orbit (one value per sample and element), or a
            consensus metric of its task.
        subset: optional boolean mask or positions over samples.

    Raises:
        NotFoundError: no such metric; ValueError: the metric has extra dims (e.g. per-pixel
            maps) or is a per-sample state.
    """
    from ..results.result import subset_mask

    metric = metric or result.primary_metric()
    res = metric_result(result, metric)
    if metric not in res.data:
        raise NotFoundError(f"no variable {metric!r} in this result")
    dims = res.orbit_dims
    da = res.data[metric]
    if tuple(d for d in da.dims if d != "sample") != tuple(dims):
        extra = [d for d in da.dims if d != "sample" and d not in dims]
        raise ValueError(f"{metric!r} has dims {tuple(da.dims)}: whole-orbit statistics need one value per sample and "
                         f"orbit element; reduce its extra dims {extra} first (e.g. choose a scalar metric)")
    meta = res.meta(metric)
    if meta.kind == "state":
        raise ValueError(f"{metric!r} is a per-sample state, not a metric; choose a metric such as "
                         f"{res.primary_metric()!r}")
    parts = [piece.data[metric].transpose("sample", *dims).values.reshape(piece.n_samples, -1)
             for _, piece in res.chunks([metric])]
    shape = tuple(int(res.data.sizes[d]) for d in dims)
    values = (np.concatenate(parts) if parts else np.empty((0, int(np.prod(shape))))).astype(np.float64)
    mask = subset_mask(res.n_samples, subset)
    samples = np.asarray(res.data["sample"].values)
    if mask is not None:
        values, samples = values[mask], samples[mask]
    ident = res.attrs.get("identity_index")
    identity = int(ident) if ident is not None and int(ident) >= 0 else None
    return OrbitValues(values=values, metric=metric, label=meta.display, binary=meta.kind == "binary",
                       lower_is_better=bool(meta.lower_is_better), dims=tuple(dims), shape=shape,
                       coords={d: np.asarray(res.data.coords[d].values) for d in dims}, identity=identity,
                       samples=samples, representative=element_representatives(res, values.shape[1]))


def element_representatives(result: Any, n_elements: int) -> np.ndarray | None:
    """Per element of the result's orbit, the first element equal to it
    (:func:`~orbitscope.group.elements.unique_elements`), or None when the stored orbit cannot
    be rebuilt or does not match the result's elements."""
    from ..group.elements import unique_elements

    try:
        transforms = result.orbit.transforms()
        if len(transforms) != n_elements:
            return None
        return unique_elements(transforms)
    except Exception:  # noqa: BLE001 - any orbit we cannot rebuild: elements are then taken as distinct
        return None
