"""Selection state of the web interface, and the pure functions that change it.

The interface keeps one :class:`Selection` in the browser (a ``dcc.Store``): the run group, the
compared runs (their order fixes their colours, :data:`orbitscope.analysis.nero.MODEL_COLOURS`), the
metric, the class subset, the embedding method, the colouring statistic, the ranking criterion,
label-free mode, the aggregate plot's toggles (the simultaneous band; the marks of a paired
comparison), the mosaic's cell mode (per-pixel maps or averaged cells), the selected sample (its id, the result's ``sample`` coordinate) and the selected
orbit element (a grid point, ``{dim: value}``). Every view is a function of this state; every
user action is an :class:`Event` that :func:`apply_event` folds into it.

Conventions:
    * Ranks are 1-based (rank 1 = first in the ranking, e.g. the worst sample); a slider at
      ``k`` shows the sample of rank ``k``; the label reads ``"k/N"`` with ``N`` the ranking's length.
    * Elements are snapped to the sampled grid (nearest value per dim) before they are stored;
      a *live point* is any value inside the grid's range (e.g. 37.5°), used for re-evaluation.
    * Everything here is JSON-able or a small frozen value: no data, no Dash.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Mapping, Sequence

import numpy as np

from ..analysis.nero import layout_kind
from ..group import NERO_MOSAIC
from ..group.finite import D4
from ..group.orbits import Orbit, Product, Rotation, orbit_from_spec
from ..group.so3 import NeroSO3

__all__ = [
    "COLOUR_STATS",
    "DISCRETE_UNITS",
    "RANK_BY",
    "Event",
    "LiveDim",
    "OrbitElement",
    "Selection",
    "apply_event",
    "describe_element",
    "discrete_dims",
    "element_from_click",
    "flat_index",
    "live_dims",
    "rank_label",
    "single_element_orbit",
    "snap_element",
    "step_rank",
]

#: Orbit statistics the scatter can be coloured by (names of :func:`orbitscope.analysis.reduce.orbit_statistic`).
COLOUR_STATS = ("mean", "variance")
#: Ranking criteria of the sliders: orbit mean (worst first), orbit variance (most variable
#: first), or the orbit-mean difference to the other model (this model furthest behind first).
RANK_BY = ("worst", "most_variable", "behind_other")


@dataclass(frozen=True)
class Selection:
    """What the user looks at. ``element`` is a tuple of ``(dim, value)`` pairs (hashable).
    ``simultaneous`` and ``compare`` are the aggregate plot's toggles: draw each run's
    simultaneous band; mark where the first of exactly two runs is significantly worse / better
    (view options: the loaded data do not depend on them). ``averaged``: a mosaic draws each
    element's mean instead of its per-pixel map (off: per-pixel maps where the task view has
    them, NERO's default; see :meth:`orbitscope.app.views.TaskView.pixel_mode`)."""

    group: str | None = None
    runs: tuple[str, ...] = ()
    metric: str | None = None
    subset: int | None = None
    method: str = "pca"
    colour: str = "mean"
    rank_by: str = "worst"
    label_free: bool = False
    sample: int | None = None
    element: tuple[tuple[str, float], ...] | None = None
    message: str | None = field(default=None, compare=False)
    simultaneous: bool = False
    compare: bool = False
    averaged: bool = False

    @property
    def element_dict(self) -> dict[str, float] | None:
        return None if self.element is None else dict(self.element)

    def context_key(self) -> tuple[Any, ...]:
        """What the loaded data depends on (not the sample, the element or the view options)."""
        return (self.group, self.runs, self.metric, self.subset, self.label_free)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["runs"] = list(self.runs)
        d["element"] = self.element_dict
        return d

    @classmethod
    def from_dict(cls, data: Any) -> Selection:
        """Rebuild from :meth:`to_dict` output; anything malformed falls back to the default
        (the browser can send arbitrary JSON: nothing here trusts it)."""
        if not isinstance(data, Mapping):
            return cls()
        sel = cls()

        def pick(name: str, check: Any, convert: Any = lambda v: v) -> Any:
            value = data.get(name, getattr(sel, name))
            try:
                return convert(value) if check(value) else getattr(sel, name)
            except (TypeError, ValueError, OverflowError):
                return getattr(sel, name)

        is_str = lambda v: isinstance(v, str) and len(v) <= 200  # noqa: E731
        opt_str = lambda v: v is None or is_str(v)  # noqa: E731
        opt_int = lambda v: v is None or (isinstance(v, (int, float)) and not isinstance(v, bool) and float(v).is_integer())  # noqa: E731
        return cls(
            group=pick("group", opt_str),
            runs=pick("runs", lambda v: isinstance(v, (list, tuple)) and all(is_str(r) for r in v) and len(v) <= 64, tuple),
            metric=pick("metric", opt_str),
            subset=pick("subset", opt_int, lambda v: None if v is None else int(v)),
            method=pick("method", is_str),
            colour=pick("colour", lambda v: v in COLOUR_STATS),
            rank_by=pick("rank_by", lambda v: v in RANK_BY),
            label_free=bool(data.get("label_free", False)),
            sample=pick("sample", opt_int, lambda v: None if v is None else int(v)),
            element=pick("element", lambda v: v is None or isinstance(v, Mapping), _element_tuple),
            message=pick("message", opt_str),
            simultaneous=data.get("simultaneous", False) is True,
            compare=data.get("compare", False) is True,
            averaged=data.get("averaged", False) is True,
        )


def _element_tuple(value: Mapping[str, Any] | None) -> tuple[tuple[str, float], ...] | None:
    if value is None:
        return None
    out = tuple((str(k), float(v)) for k, v in value.items())
    if not all(math.isfinite(v) for _, v in out):
        raise ValueError("non-finite element coordinate")
    return out


@dataclass(frozen=True)
class Event:
    """One user action. ``kind``: ``"context"`` (controls changed or first load), ``"sample"``
    (a scatter click: ``value`` = sample id), ``"rank"`` (slider ``index`` moved to rank
    ``value``), ``"step"`` (previous/next on slider ``index``: ``value`` = -1 or +1), or
    ``"element"`` (a click on a NERO plot: ``value`` = ``{dim: value}``)."""

    kind: str
    index: int | None = None
    value: Any = None


def step_rank(k: int | None, delta: int, n: int) -> int:
    """Rank after a previous/next press, clamped to ``[1, n]`` (``k=None`` starts at 1)."""
    if n < 1:
        raise ValueError("cannot step through an empty ranking")
    return int(min(max((1 if k is None else int(k)) + int(delta), 1), n))


def rank_label(k: int | None, n: int) -> str:
    """The "k/N" text of a ranking slider ("–/N" when the sample is not ranked)."""
    return f"{'–' if k is None else k}/{n}"


def snap_element(coords: Mapping[str, np.ndarray], point: Mapping[str, Any]) -> tuple[tuple[str, float], ...]:
    """The grid element nearest to ``point`` (per dim), as ``((dim, value), ...)`` in coords order.

    Raises:
        ValueError: a dim is missing or a value is not a finite number.
    """
    out = []
    for dim, grid in coords.items():
        if dim not in point:
            raise ValueError(f"element needs a value for {dim!r}, got {sorted(point)}")
        try:
            value = float(point[dim])
        except OverflowError:  # an int beyond the float range (JSON allows any size)
            raise ValueError(f"element value for {dim!r} is not finite") from None
        if not math.isfinite(value):
            raise ValueError(f"element value for {dim!r} is not finite")
        grid = np.asarray(grid, dtype=np.float64)
        out.append((dim, float(grid[int(np.argmin(np.abs(grid - value)))])))
    return tuple(out)


def element_from_click(click: Any, dims: Sequence[str],
                       coords: Mapping[str, np.ndarray] | None = None) -> dict[str, float] | None:
    """Orbit element of a plotly click on a NERO plot, or None if the click carries none.

    As :mod:`orbitscope.viz.interactive` draws them: polar plots report ``theta`` (the ``angle``
    dim), line plots ``x``, heatmaps ``x`` and ``y`` (first and second orbit dim). With the
    orbit's ``coords``: mosaic cells (D4, D4 × time reversal) are read from the cell under ``x``,
    ``y`` (cell (r, c) spans [c, c + 1] × [r, r + 1]), or from their ``customdata`` (the flat
    element index); disk cells (NeroSO3) from ``customdata`` = (axis angle, rotation angle, flat
    element index), the index being added by the web interface; rotation maps of a ``rotation``
    dim (:mod:`orbitscope.viz.so3_map`) from ``customdata``: the rotation's position alone (a
    cell) or first (a marker: position, angle, axis), read before ``x`` (a map coordinate there).
    """
    try:
        point = click["points"][0]
    except (TypeError, KeyError, IndexError):
        return None
    if not isinstance(point, Mapping):
        return None
    dims = tuple(dims)
    try:
        kind = layout_kind(dims)
    except ValueError:
        kind = None
    try:
        if kind in ("mosaic", "disk"):
            if coords is None:
                return None
            flat = _mosaic_element(point, dims) if kind == "mosaic" else _disk_element(point)
            return None if flat is None else _element_at(coords, dims, flat)
        if dims == ("rotation",) and point.get("customdata") is not None:  # a rotation map: x is no index
            flat = _rotation_position(point["customdata"])
            if flat is None:
                return None
            return _element_at(coords, dims, flat) if coords is not None else {dims[0]: float(flat)}
        if len(dims) == 1 and "theta" in point:
            return {dims[0]: float(point["theta"])}
        if len(dims) == 1 and "x" in point:
            return {dims[0]: float(point["x"])}
        if len(dims) == 2 and "x" in point and "y" in point:
            return {dims[0]: float(point["x"]), dims[1]: float(point["y"])}
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    return None


def _mosaic_element(point: Mapping[str, Any], dims: tuple[str, ...]) -> int | None:
    grid = np.array([row[1:3] for row in NERO_MOSAIC] if dims == ("d4",) else NERO_MOSAIC, dtype=int)
    if "x" in point and "y" in point:
        x, y = float(point["x"]), float(point["y"])
        if math.isfinite(x) and math.isfinite(y):
            r, c = math.floor(y), math.floor(x)
            if 0 <= r < grid.shape[0] and 0 <= c < grid.shape[1]:
                return int(grid[r, c])
    data = point.get("customdata")
    if isinstance(data, (int, float)) and not isinstance(data, bool) and float(data).is_integer():
        return int(data)
    return None


def _disk_element(point: Mapping[str, Any]) -> int | None:
    data = point.get("customdata")
    if isinstance(data, (list, tuple)) and len(data) == 3 and float(data[2]).is_integer():
        return int(data[2])
    return None


def _rotation_position(data: Any) -> int | None:
    """The rotation's position in a rotation map's ``customdata``: a whole number >= 0, alone or
    first in a list (off-map cells hold -1: no element)."""
    if isinstance(data, (list, tuple)) and data:
        data = data[0]
    if isinstance(data, (int, float)) and not isinstance(data, bool) and math.isfinite(data) and \
            float(data).is_integer() and data >= 0:
        return int(data)
    return None


def _element_at(coords: Mapping[str, np.ndarray], dims: Sequence[str], flat: int) -> dict[str, float] | None:
    shape = tuple(len(coords[d]) for d in dims)
    if not 0 <= flat < int(np.prod(shape)):
        return None
    return {d: float(np.asarray(coords[d])[i]) for d, i in zip(dims, np.unravel_index(flat, shape))}


def _sample_ids(ranking: Any) -> np.ndarray:
    return np.asarray(ranking.sample)


def apply_event(sel: Selection, event: Event, rankings: Sequence[Any], coords: Mapping[str, np.ndarray],
                default_element: Mapping[str, float]) -> Selection:
    """Fold one event into the selection.

    Args:
        sel: the current selection (its controls already updated).
        event: the user action.
        rankings: one :class:`orbitscope.analysis.ranking.Ranking` per compared run, over the samples
            currently shown (all, or the class subset); rank 1 first.
        coords: the orbit grid, ``{dim: values}``.
        default_element: the element selected when none is (e.g. the identity).

    Returns:
        The new selection; a sample that is no longer shown (other class, other runs) is
        replaced by rank 1 of the first run, an element off the grid by the default element.
    """
    shown = _sample_ids(rankings[0]) if rankings else np.empty(0, dtype=np.int64)
    sample, element, message = sel.sample, sel.element, None
    if event.kind == "sample":
        try:
            candidate = int(event.value)
        except (TypeError, ValueError, OverflowError):  # OverflowError: inf (JSON 1e999)
            candidate = None
        if candidate is not None and np.any(shown == candidate):
            sample = candidate
        else:
            message = f"sample {_short(event.value)} is not among the samples shown"
    elif event.kind in ("rank", "step") and event.index is not None and 0 <= event.index < len(rankings):
        ids = _sample_ids(rankings[event.index])
        if ids.size:
            if event.kind == "rank":
                k = step_rank(_as_int(event.value, 1), 0, ids.size)
            else:
                current = np.flatnonzero(ids == sample) if sample is not None else np.empty(0)
                k = step_rank(int(current[0]) + 1 if current.size else None, _as_int(event.value, 0), ids.size)
            sample = int(ids[k - 1])
    elif event.kind == "element" and isinstance(event.value, Mapping):
        try:
            element = snap_element(coords, event.value)
        except (ValueError, TypeError, OverflowError):
            message = f"not an orbit element: {_short(event.value)}"
    if sample is None or not np.any(shown == sample):
        sample = int(shown[0]) if shown.size else None
    if element is None or set(dict(element)) != set(coords) or snap_element(coords, dict(element)) != element:
        element = snap_element(coords, default_element) if coords else None
    return replace(sel, sample=sample, element=element, message=message)


def _short(value: Any, limit: int = 80) -> str:
    """``repr(value)`` cut to ``limit`` characters (values come from the browser: any size)."""
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - e.g. an int too long to print
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _as_int(value: Any, default: int) -> int:
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):
        return default


# --------------------------------------------------------------------------- orbit elements

#: Units of orbit dims whose coordinates number (or flag) elements: nothing lies between two of
#: their values (a flip, a D4 element, time reversal, an SO(3) sample's plane, a list of 3-D
#: rotations), so they are chosen from the sampled values only.
DISCRETE_UNITS = ("index", "flag")
#: Most values a discrete live control labels one by one (more: only its ends are labelled).
MAX_MARKS = 16
#: most marks of a slider that are all labelled (D4's eight names fit)
MAX_LABELLED = 8


class OrbitElement(Orbit):
    """One sampled element of ``orbit``, chosen by its flat (C-order) index: same dims, each with
    the one chosen coordinate; ``transforms()`` is that element of ``orbit.transforms()``.

    For orbits whose elements cannot be rebuilt at other parameter values (finite groups, lists
    of rotations, NERO's SO(3) sample). Not registered: its spec names the orbit and the index,
    for display and hashing only.
    """

    kind = "element"

    def __init__(self, orbit: Orbit, index: int) -> None:
        if not 0 <= int(index) < orbit.size:
            raise ValueError(f"element index {index} is outside the orbit's {orbit.size} elements")
        self.orbit, self.index = orbit, int(index)
        self.dims, self.units = tuple(orbit.dims), tuple(orbit.units)
        position = np.unravel_index(self.index, orbit.shape)
        self.coords = {d: np.asarray(orbit.coords[d])[[i]] for d, i in zip(orbit.dims, position)}
        self._transforms = orbit.transforms()[[self.index]]

    def transforms(self) -> Any:
        return self._transforms

    def spec(self) -> dict[str, Any]:
        return {"kind": self.kind, "orbit": self.orbit.spec(), "index": self.index}

    def __repr__(self) -> str:
        return f"OrbitElement({self.orbit!r}, {self.index})"


def _factors(orbit: Orbit) -> list[Orbit]:
    """The orbit's factors (itself unless it is a :class:`Product`), in dim order."""
    if isinstance(orbit, Product):
        return _factors(orbit.a) + _factors(orbit.b)
    return [orbit]


def _units(orbit: Orbit) -> tuple[str, ...]:
    units = tuple(orbit.units)
    return units if len(units) == len(orbit.dims) else tuple("" for _ in orbit.dims)


def _rebuildable(orbit: Orbit) -> bool:
    """Whether the (non-product) orbit can be rebuilt holding any parameter values: its spec
    is its coordinates (``{"kind", dim: [values]}``, e.g. Rotation, Scale, Translation) and no dim
    numbers elements."""
    if any(u in DISCRETE_UNITS for u in _units(orbit)):
        return False
    if isinstance(orbit, Rotation):  # also Rotation90: any angle is a rotation
        return True
    spec = orbit.spec()
    return set(spec) == {"kind", *orbit.dims} and all(isinstance(spec[d], list) for d in orbit.dims)


def discrete_dims(orbit: Orbit) -> tuple[str, ...]:
    """Dims of ``orbit`` whose values can only be the sampled ones: dims that number elements
    (units ``index`` or ``flag``: flip, d4, time_reversed, plane, rotation indices) and every dim
    of a factor that cannot be rebuilt at other values (e.g. NeroSO3's axis and rotation angles)."""
    return tuple(d for f in _factors(orbit) if not _rebuildable(f) for d in f.dims)


def _value_label(factor: Orbit, dim: str, unit: str, value: float) -> str:
    """A readable name of one value of one dim (D4 elements by name, flags as words)."""
    i = round(value)
    whole = math.isclose(value, i)
    if dim == "d4" and whole and 0 <= i < len(D4.NAMES):
        return D4.NAMES[i]
    if dim == "flip" and whole and i in (0, 1):
        return ("no flip", "top-bottom flip" if getattr(factor, "axis", "x") == "y" else "left-right flip")[i]
    if dim == "time_reversed" and whole and i in (0, 1):
        return ("time forward", "time reversed")[i]
    if dim == "plane" and whole and 0 <= i < len(NeroSO3.PLANES):
        return f"{NeroSO3.PLANES[i]} plane"
    return f"{dim} {value:g}{'°' if unit == 'degrees' else ''}"


def describe_element(orbit: Orbit, element: Mapping[str, float]) -> str:
    """The element ``{dim: value}`` in words, e.g. ``"angle 37.5°"`` or ``"time reversed, rot90"``."""
    parts = []
    for factor in _factors(orbit):
        for dim, unit in zip(factor.dims, _units(factor)):
            if dim in element:
                parts.append(_value_label(factor, dim, unit, float(element[dim])))
    return ", ".join(parts)


@dataclass(frozen=True)
class LiveDim:
    """The live control of one orbit dim: a continuous range ``[low, high]`` by ``step``, or, when
    ``values`` is set, a choice among those values only (named by ``labels``; ``step`` is their
    spacing when uniform, else None: only the marks can be chosen)."""

    dim: str
    low: float
    high: float
    step: float | None
    values: tuple[float, ...] | None = None
    labels: tuple[str, ...] | None = None

    @property
    def discrete(self) -> bool:
        return self.values is not None

    def snap(self, value: float) -> float:
        """``value`` clamped to the range, and for a discrete dim the nearest allowed value."""
        value = float(min(max(float(value), self.low), self.high))
        if self.values is not None:
            grid = np.asarray(self.values)
            value = float(grid[int(np.argmin(np.abs(grid - value)))])
        return value

    def marks(self) -> dict[float | int, str] | None:
        """Slider marks: every value of a discrete dim with its label (only the ends when there are
        more than :data:`MAX_MARKS` of uniform spacing); None for a continuous dim."""
        if self.values is None:
            return None
        labels = self.labels or tuple(f"{v:g}" for v in self.values)
        n = len(self.values)
        keep = range(n) if n <= MAX_MARKS or self.step is None else (0, n - 1)
        # every mark is a stop; beyond MAX_LABELLED marks only about five carry their label
        every = 1 if n <= MAX_LABELLED else -(-(n - 1) // 4)
        shown = {i for i in range(n) if i % every == 0} | {n - 1}
        if n > MAX_MARKS:
            shown = {0, n - 1}
        return {_mark_key(self.values[i]): (labels[i] if i in shown else "") for i in keep}


def _mark_key(value: float) -> float | int:
    return int(value) if float(value).is_integer() else float(value)


def live_dims(orbit: Orbit) -> list[LiveDim]:
    """One live control per orbit dim, in dim order. Dims of factors that can be rebuilt at any
    value (angles, scales, shifts …) are continuous: angles step by 1°, shifts over 10 px or more
    by 1 px, other dims by 1/100 of their range. The others (:func:`discrete_dims`) choose among the sampled values."""
    out = []
    for factor in _factors(orbit):
        free = _rebuildable(factor)
        for dim, unit in zip(factor.dims, _units(factor)):
            grid = np.asarray(factor.coords[dim], dtype=np.float64)
            low, high = float(grid.min()), float(grid.max())
            if free:
                pixels = dim in ("tx", "ty") and high - low >= 10  # whole pixels on a wide shift range
                step = 1.0 if dim == "angle" or pixels else (high - low) / 100 if high > low else 1.0
                out.append(LiveDim(dim, low, high, float(f"{step:.3g}")))
                continue
            values = np.unique(grid)
            gaps = np.diff(values)
            uniform = gaps.size == 0 or np.allclose(gaps, gaps[0], rtol=1e-9, atol=1e-12)
            step = (float(gaps[0]) if gaps.size else 1.0) if uniform else None
            out.append(LiveDim(dim, low, high, step, tuple(float(v) for v in values),
                               tuple(_value_label(factor, dim, unit, float(v)) for v in values)))
    return out


def flat_index(orbit: Orbit, point: Mapping[str, float]) -> int:
    """Flat (C-order) index of the sampled element nearest to ``point`` (per dim)."""
    position = tuple(int(np.argmin(np.abs(np.asarray(orbit.coords[d], dtype=np.float64) - float(point[d]))))
                     for d in orbit.dims)
    return int(np.ravel_multi_index(position, orbit.shape))


def single_element_orbit(orbit: Orbit, point: Mapping[str, float]) -> Orbit:
    """An orbit holding the one element at ``point``, whose ``transforms()`` act like the
    original's: for a factor that can be rebuilt at any value, that factor at ``point`` (any value,
    e.g. ``Rotation([37.5])``); otherwise the sampled element nearest to ``point``
    (:class:`OrbitElement`, e.g. D4's rot90). Products are built factor by factor.

    Raises:
        ValueError: a dim is missing or a value is not a finite number.
    """
    missing = set(orbit.dims) - set(point)
    if missing:
        raise ValueError(f"a live element needs values for {sorted(missing)}")
    if not all(math.isfinite(float(point[d])) for d in orbit.dims):
        raise ValueError("a live element needs finite values")
    if isinstance(orbit, Product):
        return Product(single_element_orbit(orbit.a, point), single_element_orbit(orbit.b, point))
    if _rebuildable(orbit):
        if isinstance(orbit, Rotation):
            return Rotation([float(point["angle"])])
        return orbit_from_spec({"kind": orbit.kind, **{d: [float(point[d])] for d in orbit.dims}})
    return OrbitElement(orbit, flat_index(orbit, point))
