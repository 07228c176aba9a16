"""Selection state of the web interface, and the pure functions that change it.

The interface keeps one :class:`Selection` in the browser (a ``dcc.Store``): the run group, the
compared runs (their order fixes their colours, :data:`orbitscope.analysis.nero.MODEL_COLOURS`), the
metric, the class subset, the embedding method, the colouring statistic, the ranking criterion,
label-free mode, the selected sample (its id, the result's ``sample`` coordinate) and the selected
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

from ..group.orbits import Orbit, orbit_from_spec

__all__ = [
    "COLOUR_STATS",
    "RANK_BY",
    "Event",
    "LiveDim",
    "Selection",
    "apply_event",
    "element_from_click",
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
    """What the user looks at. ``element`` is a tuple of ``(dim, value)`` pairs (hashable)."""

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
        value = float(point[dim])
        if not math.isfinite(value):
            raise ValueError(f"element value for {dim!r} is not finite")
        grid = np.asarray(grid, dtype=np.float64)
        out.append((dim, float(grid[int(np.argmin(np.abs(grid - value)))])))
    return tuple(out)


def element_from_click(click: Any, dims: Sequence[str]) -> dict[str, float] | None:
    """Orbit element of a plotly click on a NERO plot, or None if the click carries none.

    Polar plots report ``theta`` (the ``angle`` dim), line plots ``x``, heatmaps ``x`` and ``y``
    (first and second orbit dim), as :mod:`orbitscope.viz.interactive` draws them.
    """
    try:
        point = click["points"][0]
    except (TypeError, KeyError, IndexError):
        return None
    if not isinstance(point, Mapping):
        return None
    try:
        if len(dims) == 1 and "theta" in point:
            return {dims[0]: float(point["theta"])}
        if len(dims) == 1 and "x" in point:
            return {dims[0]: float(point["x"])}
        if len(dims) == 2 and "x" in point and "y" in point:
            return {dims[0]: float(point["x"]), dims[1]: float(point["y"])}
    except (TypeError, ValueError):
        return None
    return None


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
        except (TypeError, ValueError):
            candidate = None
        if candidate is not None and np.any(shown == candidate):
            sample = candidate
        else:
            message = f"sample {event.value!r} is not among the samples shown"
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
        except (ValueError, TypeError):
            message = f"not an orbit element: {event.value!r}"
    if sample is None or not np.any(shown == sample):
        sample = int(shown[0]) if shown.size else None
    if element is None or set(dict(element)) != set(coords) or snap_element(coords, dict(element)) != element:
        element = snap_element(coords, default_element) if coords else None
    return replace(sel, sample=sample, element=element, message=message)


def _as_int(value: Any, default: int) -> int:
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):
        return default


# --------------------------------------------------------------------------- live elements


@dataclass(frozen=True)
class LiveDim:
    """A continuous control for one orbit dim: ``[low, high]`` by ``step``."""

    dim: str
    low: float
    high: float
    step: float


def live_dims(orbit: Orbit) -> list[LiveDim]:
    """Continuous controls for re-evaluating anywhere in the orbit's range (empty when its
    elements are indices, e.g. a list of 3-D rotations). Angles step by 1°, other dims by
    1/100 of their range."""
    if _has_index_dims(orbit.spec()):
        return []
    out = []
    for dim in orbit.dims:
        grid = np.asarray(orbit.coords[dim], dtype=np.float64)
        low, high = float(grid.min()), float(grid.max())
        step = 1.0 if dim == "angle" else (high - low) / 100 if high > low else 1.0
        out.append(LiveDim(dim, low, high, float(f"{step:.3g}")))
    return out


def _has_index_dims(spec: Mapping[str, Any]) -> bool:
    if spec.get("kind") == "product":
        return any(_has_index_dims(f) for f in spec["factors"])
    return spec.get("kind") == "rotation3d"


def single_element_orbit(orbit: Orbit, point: Mapping[str, float]) -> Orbit:
    """An orbit of the same kind holding one element at ``point`` (any values, not only the
    grid's), e.g. ``Rotation([37.5])``; its ``transforms()`` act like the original's.

    Raises:
        ValueError: a dim is missing, or the orbit's elements are indices (3-D rotations).
    """
    missing = set(orbit.dims) - set(point)
    if missing:
        raise ValueError(f"a live element needs values for {sorted(missing)}")

    def one(spec: Mapping[str, Any]) -> dict[str, Any]:
        kind = spec["kind"]
        if kind == "product":
            return {"kind": "product", "factors": [one(f) for f in spec["factors"]]}
        if kind == "rotation90":
            return {"kind": "rotation", "angle": [float(point["angle"])]}
        if kind == "rotation3d":
            raise ValueError("3-D rotation orbits are lists of rotations: only their sampled elements can be shown")
        return {"kind": kind, **{d: [float(point[d])] for d in spec if d != "kind"}}

    return orbit_from_spec(one(orbit.spec()))
