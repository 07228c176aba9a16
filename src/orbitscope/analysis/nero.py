"""NERO plot data, prepared once and rendered by any view (static or interactive).

NERO (Zhao et al., arXiv 2305.19889): the *individual* NERO plot of a sample x is
N_x(g) = m(f(g·x), g∘y) over the sampled group; the *aggregate* plot is its mean over a dataset
or a subset (e.g. one class). :func:`prepare_aggregate` and :func:`prepare_individual` turn
stored results into a :class:`NeroData` (values, bands, layout, labels, colours, marker);
:mod:`orbitscope.viz.plot` renders it with matplotlib and :mod:`orbitscope.viz.interactive` with plotly,
so both show the same numbers.

Layouts follow the orbit's topology: one ``angle`` dim -> polar; two dims -> heatmap; one other
dim -> line; D4 × time reversal (``("time_reversed", "d4")``) or D4 (``("d4",)``) -> NERO's
mosaic; NERO's SO(3) sample (``("plane", "axis_angle", "rotation_angle")``) -> one polar disk per
plane; a list of 3-D rotations (dim ``("rotation",)``: ``SO3Grid``, ``Octahedral``, any
``Rotation3D``) -> equal-area maps of the rotation axis per band of rotation angle
(``"so3map"``, :mod:`orbitscope.viz.so3_map`), when the rotations are known: the prepare functions
put their quaternions in ``NeroData.info["quaternions"]`` (see :func:`rotation_quaternions`);
without them such a dim stays a line. Values may carry extra dims after the orbit dims (per-pixel
maps ``("y", "x")``), which the mosaic draws inside its cells.

Whole-orbit statistics (:mod:`orbitscope.stats`), on request: ``prepare_aggregate(...,
simultaneous=True)`` adds to each series a *simultaneous* band (sup-t bootstrap, covering every
element at once) beside the *pointwise* one, and ``compare=True`` (two results) marks the
elements where the first model is significantly worse or better than the second, with the
family-wise error over all elements controlled (:func:`orbitscope.stats.paired.compare_values`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import xarray as xr

from ..errors import NotFoundError, SpecError
from ..group.orbits import orbit_from_spec
from ..results.result import OrbitResult, aggregate, check_same_orbit, check_same_samples
from .consensus import consensus_metrics, metric_result
from .dataset_level import dataset_interval, is_dataset_metric
from ..stats.bands import simultaneous_band
from ..stats.paired import compare_values
from ..stats.values import orbit_values

__all__ = [
    "MODEL_COLOURS",
    "COMPARISON_COLOURS",
    "NeroSeries",
    "NeroData",
    "metric_result",
    "metric_label",
    "consensus_metrics",
    "class_subset",
    "sample_classes",
    "sample_groups",
    "check_same_samples",
    "prepare_aggregate",
    "prepare_individual",
    "layout_kind",
    "rotation_quaternions",
    "D4_NAMES",
    "SO3_PLANES",
]

#: Consistent model colours (colour-blind-safe Okabe–Ito order), by position in a comparison.
MODEL_COLOURS = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#F0E442", "#000000"]
#: Marks of a paired comparison on the first model's curve: significantly ``worse`` (drawn as
#: downward triangles) and ``better`` (upward triangles) than the second model.
COMPARISON_COLOURS = {"worse": "#B2182B", "better": "#1B7837"}



@dataclass
class NeroSeries:
    """One model's curve/surface: ``values`` over the orbit shape, an optional pointwise band
    (``lower``, ``upper``: each element's own confidence interval) and an optional simultaneous
    band (``sim_lower``, ``sim_upper``: covers every element at once, see
    :func:`orbitscope.stats.bands.simultaneous_band`); all in the metric's units, in the orbit's
    shape. A simultaneous bound may be infinite where an element has one value only."""

    label: str
    colour: str
    values: np.ndarray
    lower: np.ndarray | None = None
    upper: np.ndarray | None = None
    sim_lower: np.ndarray | None = None
    sim_upper: np.ndarray | None = None

    @property
    def has_band(self) -> bool:
        """Whether the pointwise band is set."""
        return self.lower is not None and self.upper is not None

    @property
    def has_simultaneous_band(self) -> bool:
        """Whether the simultaneous band is set."""
        return self.sim_lower is not None and self.sim_upper is not None


@dataclass
class NeroData:
    """Everything a view needs to draw one NERO plot.

    ``band_method`` names the pointwise band, ``simultaneous_method`` the simultaneous one (None
    when the series have none). Keys of ``info`` that views read: ``lower_is_better``,
    ``quaternions`` (rotation maps), ``comparison`` (``{"worse", "better"}``: boolean arrays in
    the orbit's shape, the elements where the *first* series is significantly worse / better
    than the second; ``"verdict"``: one line; ``"a"``, ``"b"``: the two series' labels) and
    ``notes`` (lines saying what could not be computed); :meth:`caption_lines` collects the
    lines a view shows under its title.
    """

    kind: str  # "polar" | "heatmap" | "line" | "mosaic" | "disk" | "so3map"
    scope: str  # "aggregate" | "individual"
    metric: str
    metric_label: str
    dims: tuple[str, ...]
    coords: dict[str, np.ndarray]
    series: list[NeroSeries]
    value_range: tuple[float, float] | None
    title: str
    band_method: str | None = None
    marker: dict[str, float] | None = None
    info: dict[str, Any] = field(default_factory=dict)
    simultaneous_method: str | None = None

    @property
    def comparison(self) -> dict[str, Any] | None:
        """``info["comparison"]`` (see the class docstring), or None without a comparison."""
        return self.info.get("comparison")

    def caption_lines(self) -> list[str]:
        """The lines a view shows with the plot besides its title: the comparison's verdict and
        the notes on statistics that could not be computed (empty by default)."""
        lines = [self.comparison["verdict"]] if self.comparison else []
        return lines + [str(n) for n in self.info.get("notes", ())]

    def marker_index(self) -> tuple[int, ...] | None:
        """Index of the orbit element nearest to ``marker`` (None if no marker)."""
        if self.marker is None:
            return None
        missing = set(self.dims) - set(self.marker)
        if missing:
            raise ValueError(f"marker must give a value for every orbit dim; missing {sorted(missing)}")
        return tuple(_nearest(d, np.asarray(self.coords[d]), self.marker[d]) for d in self.dims)


#: D4 element names by index ``d`` along a ``d4`` orbit dim (NERO's order); index 8 + d of a
#: ``("time_reversed", "d4")`` orbit is element d time reversed.
D4_NAMES = ("identity", "anti-diagonal flip", "rot90", "horizontal flip", "rot180", "diagonal flip", "rot270",
            "vertical flip")
#: Rotation planes of NERO's SO(3) sample, by the ``plane`` coordinate 0, 1, 2.
SO3_PLANES = ("xy", "xz", "yz")
_MOSAIC_DIMS = {("time_reversed", "d4"), ("d4",)}
_DISK_DIMS = ("plane", "axis_angle", "rotation_angle")
_ROTATION_DIMS = ("rotation",)
#: Orbit dims whose elements may also be named in a marker (name -> position along the dim).
_NAMED = {"d4": D4_NAMES, "plane": SO3_PLANES}


def _coord_values(values: Any) -> np.ndarray:
    """Orbit coordinates as float (numbers, booleans), or as they are (names)."""
    arr = np.asarray(values)
    return arr.astype(float) if arr.dtype.kind in "biuf" else arr


def _nearest(dim: str, coords: np.ndarray, value: Any) -> int:
    """Position along ``dim`` of the element nearest to a marker value (a number, or a name such as
    ``"xz"`` for a plane or ``"rot90"`` for a D4 element)."""
    numeric = coords.dtype.kind in "biuf"
    if isinstance(value, str):
        names = _NAMED.get(dim, ())
        if not numeric and value in coords.tolist():
            return coords.tolist().index(value)
        if value in names:  # positions 0..n-1, which are also the numeric coordinates
            if not numeric:
                return names.index(value)
            value = names.index(value)
        elif dim == "time_reversed" and value.lower() in ("true", "false"):
            value = value.lower() == "true"
        else:
            try:
                value = float(value)
            except ValueError:
                raise ValueError(f"unknown {dim} {value!r} in marker; expected a number"
                                 + (f" or one of {list(names)}" if names else "")) from None
    if not numeric:
        raise ValueError(f"marker for {dim} must be one of {coords.tolist()}, got {value!r}")
    return int(np.argmin(np.abs(coords - float(value))))


def layout_kind(dims: Sequence[str], quaternions: Any = None) -> str:
    """The NERO layout for an orbit's dims; ``quaternions``: the (n, 4) rotations of a
    ``("rotation",)`` dim when known (:func:`rotation_quaternions`), which turn its line into
    the rotation map ``"so3map"``."""
    dims = tuple(dims)
    if dims in _MOSAIC_DIMS:
        return "mosaic"
    if dims == _DISK_DIMS:
        return "disk"
    if dims == _ROTATION_DIMS and quaternions is not None:
        return "so3map"
    if len(dims) == 1:
        return "polar" if dims[0] == "angle" else "line"
    if len(dims) == 2:
        return "heatmap"
    raise ValueError(f"no NERO layout for {len(dims)}-D orbits {tuple(dims)}; select a 1-D or 2-D slice first")


def _orbit_quaternions(result: OrbitResult) -> np.ndarray | None:
    """The quaternions (n, 4) of one result's ``rotation`` dim, from its stored orbit spec, in the
    order of its ``rotation`` coordinates (indices into the orbit); None when they are unknown."""
    if result.orbit_dims != _ROTATION_DIMS:
        return None
    spec = result.attrs.get("orbit")
    try:
        orbit = orbit_from_spec(json.loads(spec) if isinstance(spec, str) else spec)
    except (SpecError, TypeError, ValueError, KeyError, AttributeError):  # absent or not an orbit spec
        return None
    q = getattr(orbit, "quaternions", None)
    if tuple(orbit.dims) != _ROTATION_DIMS or q is None or np.shape(q) != (orbit.size, 4):
        return None
    positions = np.asarray(result.data.coords["rotation"].values, dtype=float)
    if not np.all(np.isfinite(positions)) or np.any(positions != np.round(positions)) or (
            positions.size and (positions.min() < 0 or positions.max() >= orbit.size)):
        return None
    return np.asarray(q, dtype=np.float64)[positions.astype(int)]


def rotation_quaternions(results: OrbitResult | Sequence[OrbitResult]) -> np.ndarray | None:
    """The unit quaternions (n, 4) as (w, x, y, z) of the rotations along the results' one
    ``rotation`` dim, when their orbit is a list of 3-D rotations (``Rotation3D``, ``SO3Grid``,
    ``Octahedral``: an orbit with ``quaternions``); None for any other orbit, or when a result does
    not record its orbit.

    Raises:
        ValueError: the results number the same count of rotations but different ones (their
            values cannot be compared element by element).
    """
    found = [_orbit_quaternions(r) for r in _as_list(results)]
    if not found or any(q is None for q in found):
        return None
    first = found[0]
    for q in found[1:]:
        same = np.abs(np.sum(first * q, axis=1)) if q.shape == first.shape else np.zeros(1)  # q and -q: one rotation
        if not np.all(same > 1 - 1e-9):
            raise ValueError("the results sample different 3-D rotations under the same 'rotation' indices; "
                             "evaluate every model on the same rotations")
    return first


def metric_label(results: OrbitResult | Sequence[OrbitResult], metric: str) -> str:
    """The metric's label with its unit (from the variable's metadata), e.g. ``"entropy (nats)"``."""
    first = results if isinstance(results, OrbitResult) else results[0]
    return first.meta(metric).display


def sample_classes(result: OrbitResult) -> np.ndarray | None:
    """Each sample's class for per-class subsets: the stored ``label`` (classification), else
    the class of the key object, box 0 of ``target_labels`` (detection; -1 for an image without
    boxes); None when the result stores neither."""
    if "label" in result.data:
        return np.asarray(result.data["label"].values)
    if "target_labels" in result.data and result.data["target_labels"].ndim == 2:
        labels = np.asarray(result.data["target_labels"].values)
        if labels.shape[1] and "target_valid" in result.data:
            return np.where(np.asarray(result.data["target_valid"].values)[:, 0] > 0, labels[:, 0], -1)
        return labels[:, 0] if labels.shape[1] else np.full(len(labels), -1)
    return None


def sample_groups(result: OrbitResult) -> dict[str, np.ndarray]:
    """The per-sample groups the data declared (its ``sample_groups``, e.g. ``flow_type``), as
    recorded by the evaluation: ``{name: one label per sample}``; empty when there are none."""
    names = result.attrs.get("sample_groups") or []
    names = json.loads(names) if isinstance(names, str) else names  # results keep lists as JSON text
    return {str(n): np.asarray(result.data[n].values) for n in names
            if n in result.data and result.data[n].dims == ("sample",)}


def class_subset(result: OrbitResult, cls: int) -> np.ndarray:
    """Boolean mask of the samples of class ``cls`` (see :func:`sample_classes`)."""
    classes = sample_classes(result)
    if classes is None:
        raise ValueError("this result has no stored labels (nor target boxes) to split by class; re-run the "
                         "evaluation with orbitscope >= 0.1")
    return np.asarray(classes == cls)


def _labels(results: Sequence[OrbitResult], labels: Sequence[str] | None) -> list[str]:
    if labels is not None:
        if len(labels) != len(results):
            raise ValueError(f"got {len(labels)} labels for {len(results)} results")
        return list(labels)
    names = [str(r.attrs.get("run_name") or r.attrs.get("model_name") or f"model {i}") for i, r in enumerate(results)]
    if len(set(names)) < len(names):  # e.g. two runs of the same class: tell them apart by run id
        names = [f"{n} ({str(r.attrs.get('run_id', i))[:6]})" for i, (n, r) in enumerate(zip(names, results))]
    return names


def _check_dims(results: Sequence[OrbitResult]) -> tuple[str, ...]:
    if not results:
        raise ValueError("nothing to plot: give at least one result")
    for r in results[1:]:
        check_same_orbit(results[0], r)
    return results[0].orbit_dims


def _value_range(bounded: bool, series: list[NeroSeries]) -> tuple[float, float] | None:
    if bounded:
        return (0.0, 1.0)
    arrays = [s.values for s in series] + [s.upper for s in series if s.upper is not None] + [
        s.sim_upper for s in series if s.sim_upper is not None]
    finite = np.concatenate([np.ravel(a)[np.isfinite(np.ravel(a))] for a in arrays])
    if finite.size == 0:
        return None
    lo, hi = float(finite.min()), float(finite.max())
    return (min(0.0, lo), hi if hi > lo else lo + 1.0)


def _as_list(results: OrbitResult | Sequence[OrbitResult]) -> list[OrbitResult]:
    return [results] if isinstance(results, OrbitResult) else list(results)


def prepare_aggregate(
    results: OrbitResult | Sequence[OrbitResult],
    metric: str = "correct",
    *,
    labels: Sequence[str] | None = None,
    subset: Any = None,
    level: float = 0.95,
    marker: dict[str, float] | None = None,
    title: str | None = None,
    simultaneous: bool = False,
    compare: bool = False,
    alpha: float = 0.05,
) -> NeroData:
    """Aggregate NERO plot data: the mean of ``metric`` over samples with a confidence band.

    Args:
        results: models to compare over the same orbit (colours by position).
        metric: a recorded variable, a consensus metric of the task (e.g. ``consensus_agreement``),
            or a dataset-level metric of the task (e.g. ``class_accuracy``, detection's ``ap50``;
            :mod:`orbitscope.analysis.dataset_level`): its values are computed from all samples
            at each element, its band is a percentile bootstrap over samples, and it has no
            simultaneous band or paired comparison (a note says so).
        labels: legend entries (default: run or model names).
        subset: samples to average over: None (all), a class index (``int``, uses the stored
            labels), or a boolean mask / index array.
        level: confidence level of the bands (pointwise: Wilson for binary metrics, Student-t
            for means; simultaneous: the same level over all elements at once).
        marker: a selected orbit element, e.g. ``{"angle": 90}``.
        simultaneous: also compute each series' simultaneous band
            (:func:`orbitscope.stats.bands.simultaneous_band`, same samples and level) into
            ``sim_lower`` / ``sim_upper``, named by ``simultaneous_method``.
        compare: mark where the first result is significantly worse / better than the second
            on the same samples (:func:`orbitscope.stats.paired.compare_values`, exact McNemar
            or paired t per element, Holm across elements) into ``info["comparison"]``.
        alpha: family-wise error of the comparison over all elements.

    When a statistic cannot be computed for this metric (e.g. it has per-pixel dims, or the
    orbit has one element) the plot keeps its pointwise band and ``info["notes"]`` says why.

    Raises:
        ValueError: ``compare`` with a number of results other than two, results on different
            samples, ``alpha`` outside (0, 1), or an empty subset.
    """
    results = _as_list(results)
    if compare:
        if len(results) != 2:
            raise ValueError(f"compare=True marks where one model is significantly worse or better than another: "
                             f"give exactly two results, got {len(results)}")
        if not 0 < alpha < 1:
            raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    dims = _check_dims(results)
    if compare:
        check_same_samples(results)
    names = _labels(results, labels)
    dataset_level = all(is_dataset_metric(res, metric) for res in results)
    series, method, sources = [], None, []
    for i, (res, name) in enumerate(zip(results, names)):
        mres = res if dataset_level else metric_result(res, metric)
        mask = class_subset(mres, subset) if isinstance(subset, (int, np.integer)) else subset
        if mask is not None and np.asarray(mask).dtype == bool and not np.asarray(mask).any():
            present = sample_classes(mres)
            raise ValueError(f"the subset {subset!r} selects no samples (classes present: "
                             f"{sorted(set(present.tolist())) if present is not None else '?'})")
        agg = (dataset_interval(mres, metric, subset=mask, level=level) if dataset_level
               else aggregate(mres, metric, level=level, subset=mask))
        method = agg.attrs["method"]
        series.append(NeroSeries(name, MODEL_COLOURS[i % len(MODEL_COLOURS)], agg["mean"].values,
                                 agg["lower"].values, agg["upper"].values))
        sources.append((mres, mask))
    meta = results[0].meta(metric)
    label = meta.display
    quaternions = rotation_quaternions(results)
    where = f", class {subset}" if isinstance(subset, (int, np.integer)) else ("" if subset is None else ", subset")
    n = int(np.sum(subset)) if subset is not None and np.asarray(subset).dtype == bool else None
    info: dict[str, Any] = {"subset": None if subset is None else str(subset)[:40], "n": n,
                            "lower_is_better": meta.lower_is_better}
    if quaternions is not None:
        info["quaternions"] = quaternions
    notes: list[str] = []
    if dataset_level:
        notes.append(f"dataset-level metric (one value per element from all {agg.attrs['n']} samples): "
                     f"band = {method}")
        if simultaneous or compare:
            notes.append("no simultaneous band or paired comparison for a dataset-level metric (they need "
                         "per-sample values)")
        simultaneous = compare = False
    sim_method = _add_simultaneous_bands(series, sources, metric, level, notes) if simultaneous else None
    if compare:
        comparison = _comparison(sources, metric, alpha, (names[0], names[1]), notes)
        if comparison is not None:
            info["comparison"] = comparison
    if notes:
        info["notes"] = notes
    return NeroData(
        kind=layout_kind(dims, quaternions), scope="aggregate", metric=metric, metric_label=label, dims=dims,
        coords={d: _coord_values(results[0].data.coords[d].values) for d in dims}, series=series,
        value_range=_value_range(meta.bounded, series), title=title or f"aggregate NERO plot: {label}{where}",
        band_method=method, marker=marker, info=info, simultaneous_method=sim_method,
    )


def _add_simultaneous_bands(series: list[NeroSeries], sources: list[tuple[OrbitResult, Any]], metric: str,
                            level: float, notes: list[str]) -> str | None:
    """Fill each series' simultaneous band; its method, or None (and a note) when the metric has none."""
    try:
        bands = [simultaneous_band(mres, metric, level=level, subset=mask) for mres, mask in sources]
    except ValueError as exc:  # extra dims, a per-sample state: no whole-orbit statistic
        notes.append(f"no simultaneous band: {exc}")
        return None
    for s, band in zip(series, bands):
        s.sim_lower, s.sim_upper = band["lower"].values, band["upper"].values
    return str(bands[0].attrs["method"])


def _comparison(sources: list[tuple[OrbitResult, Any]], metric: str, alpha: float, names: tuple[str, str],
                notes: list[str]) -> dict[str, Any] | None:
    """``info["comparison"]`` of the two sources, or None (and a note) when it cannot be computed."""
    try:
        values = [orbit_values(mres, metric, subset=mask) for mres, mask in sources]
        result = compare_values(values[0], values[1], alpha=alpha, names=names)
    except ValueError as exc:
        notes.append(f"no paired comparison: {exc}")
        return None
    return {"worse": values[0].reshape(result.worse), "better": values[0].reshape(result.better),
            "verdict": result.verdict(), "a": names[0], "b": names[1]}


def prepare_individual(
    results: OrbitResult | Sequence[OrbitResult],
    sample: int,
    metric: str = "confidence",
    *,
    labels: Sequence[str] | None = None,
    marker: dict[str, float] | None = None,
    title: str | None = None,
) -> NeroData:
    """Individual NERO plot data of one sample (by its ``sample`` coordinate) for each model."""
    results = _as_list(results)
    dims = _check_dims(results)
    check_same_samples(results)
    if is_dataset_metric(results[0], metric):
        raise ValueError(f"{metric!r} is a dataset-level metric (one value per orbit element from all samples): it "
                         "has no individual plot; draw its aggregate plot, or pick a per-sample metric")
    names = _labels(results, labels)
    series = []
    for i, (res, name) in enumerate(zip(results, names)):
        mres = metric_result(res, metric)
        try:
            da: xr.DataArray = mres.data[metric].sel(sample=sample)
        except KeyError:
            raise NotFoundError(f"sample {sample} is not in run {res.attrs.get('run_id', '?')}") from None
        series.append(NeroSeries(name, MODEL_COLOURS[i % len(MODEL_COLOURS)], da.values.astype(float)))
    meta = results[0].meta(metric)
    label = meta.display
    info: dict[str, Any] = {"sample": int(sample), "lower_is_better": meta.lower_is_better}
    if "label" in results[0].data:
        info["label"] = int(results[0].data["label"].sel(sample=sample))
    quaternions = rotation_quaternions(results)
    if quaternions is not None:
        info["quaternions"] = quaternions
    return NeroData(
        kind=layout_kind(dims, quaternions), scope="individual", metric=metric, metric_label=label, dims=dims,
        coords={d: _coord_values(results[0].data.coords[d].values) for d in dims}, series=series,
        value_range=_value_range(meta.bounded, series),
        title=title or f"individual NERO plot: {label}, sample {sample}"
        + (f" (label {info['label']})" if "label" in info else ""),
        marker=marker, info=info,
    )
