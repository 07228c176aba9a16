"""Uniform-grid view of 3-D rotation samples: equal-area maps of the rotation axis, one map per
band of rotation angle.

For orbits whose one dim is ``rotation`` (an index into a list of 3-D rotations:
:class:`~orbitscope.group.so3.SO3Grid`, :class:`~orbitscope.group.so3.Octahedral`, any
:class:`~orbitscope.group.orbits.Rotation3D`), the rotations come with the data as unit
quaternions (``NeroData.info["quaternions"]``, (n, 4) as (w, x, y, z), filled by
:func:`~orbitscope.analysis.nero.prepare_aggregate`). Each rotation is drawn by its axis and angle:

* **axis and angle**: with the sign of ``q`` chosen so that ``w >= 0``, the angle is
  ``θ = 2 atan2(|v|, w)`` in [0°, 180°] and the axis ``v / |v|`` (``v = (x, y, z)``); the
  identity (θ = 0) has no axis and is put at ``+x``, the centre of the map. At θ = 180° exactly,
  ``q`` and ``-q`` both have ``w = 0``: axis ``a`` and ``-a`` are the same rotation, and the axis
  whose first non-zero component of (z, y, x) is positive is taken. Near 180° the two halves of
  the sphere meet: a rotation by 179° about ``a`` is close to one by 179° about ``-a``, so the last
  band's map is read modulo the antipode.
* **bands**: the angles are split into bands, one column each, the identity's band first. By
  default: one band per distinct angle when the sample has at most :data:`MAX_EXACT_BANDS` of
  them (finite groups: the octahedral group gives 0°, 90°, 120°, 180°); otherwise equal bands of
  180°/k for the largest k <= 4 that leaves every band at least :data:`MIN_PER_BAND` rotations
  (a uniform sample holds few small turns: of 512, about 13 lie below 45°). ``info["angle_bands"]``
  may give a count or the edges (degrees) instead.
* **map**: the axis directions on the sphere, drawn by the **Hammer projection** of the whole
  sphere (equal-area, a 2:1 ellipse with half-axes 2√2 and √2; longitude ``atan2(y, x)``,
  latitude ``asin(z)``): ``+x`` at the centre, ``+y`` to the right, ``-y`` to the left, ``+z``
  at the top, ``-z`` at the bottom, ``-x`` on the left and right ends. Equal areas on the sphere
  stay equal on the map, so a uniform sample looks uniform.
* **cells**: every point of a map shows the value of the band's rotation whose axis is nearest
  (a Voronoi cell on the sphere), up to the band's mean spacing ``√(4π / count)``
  (at most 60°) from it, so gaps in the sample stay blank; a small dot marks each rotation's own
  axis. One colour scale for every panel and every model
  (:func:`~orbitscope.viz.colour_scale.colour_scale`). Rows = models, columns = bands.

:func:`render_so3_map` draws with matplotlib (per panel an image of the cells and a scatter of the
rotations, gid ``"<model>/<band>"``), :func:`render_so3_map_plotly` with plotly (per panel a
``Heatmap`` of the cells, role ``"cells"``, and a ``Scatter`` of the rotations, role ``"value"``;
``customdata`` is the rotation's position along the ``rotation`` dim, first in each marker's
``[position, θ, axis x, axis y, axis z]`` and alone in each cell, so a click names the element).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
from matplotlib import colormaps, patheffects
from matplotlib.cm import ScalarMappable
from matplotlib.colors import Normalize
from matplotlib.figure import Figure
from scipy.spatial import cKDTree

from ..analysis.nero import NeroData
from .colour_scale import colour_scale

__all__ = [
    "HAMMER_HALF_WIDTH",
    "HAMMER_HALF_HEIGHT",
    "MAX_EXACT_BANDS",
    "MIN_PER_BAND",
    "MAX_BANDS",
    "MAX_CELL_RADIUS",
    "RASTER_WIDTH",
    "PLOTLY_RASTER_WIDTH",
    "AngleBands",
    "SO3MapLayout",
    "axis_angle",
    "hammer",
    "hammer_inverse",
    "angle_bands",
    "so3_map_layout",
    "cell_raster",
    "render_so3_map",
    "render_so3_map_plotly",
]

#: Half-axes of the Hammer ellipse (x: 2√2, y: √2); its area 4π is the sphere's.
HAMMER_HALF_WIDTH = 2.0 * np.sqrt(2.0)
HAMMER_HALF_HEIGHT = np.sqrt(2.0)
#: Most distinct angles that get one band each (finite groups).
MAX_EXACT_BANDS = 6
#: Fewest rotations per band when choosing the number of equal-width bands.
MIN_PER_BAND = 8
#: Largest number of equal-width bands chosen by default.
MAX_BANDS = 4
#: Cells reach this many times a band's mean axis spacing √(4π / count) from their rotation's axis …
_CELL_REACH = 1.0
#: … and never more than this (degrees).
MAX_CELL_RADIUS = 60.0
#: Width in pixels of a map's raster of cells for matplotlib (print) …
RASTER_WIDTH = 400
#: … and for plotly (kept small: the figure is sent to browsers).
PLOTLY_RASTER_WIDTH = 96
_DIMS = ("rotation",)
_ANGLE_DECIMALS = 6  # angles equal to this many decimals of a degree are one angle
_HALF_TURN_W = 1e-12  # |w| below this: a half turn (θ = 180°), where q and -q meet


# --------------------------------------------------------------------------- geometry


def axis_angle(quaternions: Any) -> tuple[np.ndarray, np.ndarray]:
    """Axis (n, 3), unit vectors, and angle (n,) in degrees in [0, 180] of unit quaternions
    (n, 4) as (w, x, y, z); see the module docstring for the identity and half turns.

    Raises:
        ValueError: not (n, 4), or a quaternion that is zero or not finite.
    """
    q = np.asarray(quaternions, dtype=np.float64)
    if q.ndim != 2 or q.shape[1] != 4:
        raise ValueError(f"quaternions must have shape (n, 4) as (w, x, y, z), got {q.shape}")
    norm = np.linalg.norm(q, axis=1, keepdims=True)
    if not np.all(np.isfinite(q)) or np.any(norm == 0):
        raise ValueError("quaternions must be finite and non-zero")
    q = q / norm
    q = np.where(q[:, :1] < 0, -q, q)  # w >= 0: the turn is at most 180°
    half_turn = np.abs(q[:, 0]) < _HALF_TURN_W
    q[half_turn, 0] = 0.0
    v = q[:, 1:]
    s = np.linalg.norm(v, axis=1)
    angle = np.degrees(2.0 * np.arctan2(s, q[:, 0]))
    axes = np.tile([1.0, 0.0, 0.0], (len(q), 1))  # the identity: +x, the centre of the map
    turning = s > 0
    axes[turning] = v[turning] / s[turning, None]
    # a half turn about a is one about -a: take the axis whose first non-zero of (z, y, x) is > 0
    z, y, x = axes[:, 2], axes[:, 1], axes[:, 0]
    key = np.where(np.abs(z) > _HALF_TURN_W, z, np.where(np.abs(y) > _HALF_TURN_W, y, x))
    axes[half_turn & (key < 0)] *= -1.0
    return axes, np.clip(angle, 0.0, 180.0)


def hammer(axes: Any) -> np.ndarray:
    """Hammer equal-area projection of directions (n, 3) -> map points (n, 2).

    Longitude ``λ = atan2(y, x)``, latitude ``φ = asin(z)``;
    ``X = 2√2 cos φ sin(λ/2) / D``, ``Y = √2 sin φ / D`` with ``D = √(1 + cos φ cos(λ/2))``.
    """
    a = np.asarray(axes, dtype=np.float64).reshape(-1, 3)
    a = a / np.linalg.norm(a, axis=1, keepdims=True)
    lon = np.arctan2(a[:, 1], a[:, 0])
    lat = np.arcsin(np.clip(a[:, 2], -1.0, 1.0))
    d = np.sqrt(1.0 + np.cos(lat) * np.cos(lon / 2.0))
    return np.stack([HAMMER_HALF_WIDTH * np.cos(lat) * np.sin(lon / 2.0) / d, HAMMER_HALF_HEIGHT * np.sin(lat) / d],
                    axis=1)


def hammer_inverse(points: Any) -> tuple[np.ndarray, np.ndarray]:
    """Directions (m, 3) of map points (m, 2), and whether each point lies on the map (inside
    the ellipse; the direction of a point outside is meaningless)."""
    p = np.asarray(points, dtype=np.float64).reshape(-1, 2)
    x, y = p[:, 0], p[:, 1]
    inside = (x / HAMMER_HALF_WIDTH) ** 2 + (y / HAMMER_HALF_HEIGHT) ** 2 <= 1.0
    t = np.sqrt(np.clip(1.0 - (x / 4.0) ** 2 - (y / 2.0) ** 2, 0.0, None))
    lon = 2.0 * np.arctan2(t * x, 2.0 * (2.0 * t**2 - 1.0))
    lat = np.arcsin(np.clip(t * y, -1.0, 1.0))
    return np.stack([np.cos(lat) * np.cos(lon), np.cos(lat) * np.sin(lon), np.sin(lat)], axis=1), inside


# --------------------------------------------------------------------------- bands


@dataclass(frozen=True)
class AngleBands:
    """Bands of rotation angle: band k holds ``edges[k] <= θ < edges[k + 1]`` (the last band
    includes its upper edge). ``exact``: one band per distinct sampled angle (labelled by it)."""

    edges: np.ndarray
    exact: bool
    labels: tuple[str, ...]

    def __len__(self) -> int:
        return len(self.edges) - 1

    def index(self, angles: Any) -> np.ndarray:
        """The band of each angle (degrees)."""
        return np.searchsorted(self.edges[1:-1], np.asarray(angles, dtype=np.float64), side="right")


def _range_label(lo: float, hi: float) -> str:
    return f"θ {lo:g}–{hi:g}°"


def _equal_bands(k: int) -> AngleBands:
    edges = np.linspace(0.0, 180.0, k + 1)
    return AngleBands(edges, False, tuple(_range_label(a, b) for a, b in zip(edges[:-1], edges[1:])))


def angle_bands(angles: Any, bands: int | Sequence[float] | None = None) -> AngleBands:
    """The bands of rotation angle for a sample with these ``angles`` (degrees): ``bands`` =
    a count (equal widths over [0°, 180°]), the edges, or None for the default (module docstring).

    Raises:
        ValueError: a count below 1, or edges that do not rise strictly or do not cover the angles.
    """
    theta = np.asarray(angles, dtype=np.float64).ravel()
    if bands is None:
        distinct = np.unique(np.round(theta, _ANGLE_DECIMALS))
        if 0 < len(distinct) <= MAX_EXACT_BANDS:
            mid = (distinct[1:] + distinct[:-1]) / 2.0
            edges = np.concatenate([[min(0.0, distinct[0])], mid, [max(180.0, distinct[-1])]])
            return AngleBands(edges, True, tuple(f"θ = {a:g}°" for a in distinct))
        for k in range(MAX_BANDS, 1, -1):
            candidate = _equal_bands(k)
            if np.bincount(candidate.index(theta), minlength=k).min() >= MIN_PER_BAND:
                return candidate
        return _equal_bands(1)
    if isinstance(bands, (int, np.integer)) and not isinstance(bands, bool):
        if bands < 1:
            raise ValueError(f"the number of angle bands must be >= 1, got {bands}")
        return _equal_bands(int(bands))
    edges = np.asarray(bands, dtype=np.float64).ravel()
    if len(edges) < 2 or not np.all(np.diff(edges) > 0) or not np.all(np.isfinite(edges)):
        raise ValueError(f"angle band edges must be at least two strictly rising numbers, got {edges.tolist()}")
    if theta.size and (theta.min() < edges[0] or theta.max() > edges[-1]):
        raise ValueError(f"angle band edges {edges.tolist()} do not cover the rotation angles "
                         f"{theta.min():g}–{theta.max():g}°")
    return AngleBands(edges, False, tuple(_range_label(a, b) for a, b in zip(edges[:-1], edges[1:])))


# --------------------------------------------------------------------------- layout


@dataclass(frozen=True)
class SO3MapLayout:
    """Where each rotation (by its position along the ``rotation`` dim) is drawn: ``axes`` (n, 3)
    and ``angles`` (n,) degrees (:func:`axis_angle`), ``xy`` (n, 2) its point on the map
    (:func:`hammer`), ``band`` (n,) its column in ``bands``."""

    axes: np.ndarray
    angles: np.ndarray
    xy: np.ndarray
    band: np.ndarray
    bands: AngleBands

    def members(self, k: int) -> np.ndarray:
        """Positions of the rotations in band ``k``, in order."""
        return np.flatnonzero(self.band == k)

    def cell_radius(self, k: int) -> float:
        """How far (radians) the cells of band ``k`` reach from their rotation's axis."""
        count = max(int(np.sum(self.band == k)), 1)
        return float(min(_CELL_REACH * np.sqrt(4.0 * np.pi / count), np.radians(MAX_CELL_RADIUS)))


def so3_map_layout(data: NeroData) -> SO3MapLayout:
    """The layout of ``data``'s rotations (dim ``rotation``, quaternions in ``info``).

    Raises:
        ValueError: other dims, or no (n, 4) quaternions for the n rotations.
    """
    if tuple(data.dims) != _DIMS:
        raise ValueError(f"the rotation map needs orbit dims {_DIMS}, got {tuple(data.dims)}")
    n = len(data.coords["rotation"])
    q = data.info.get("quaternions")
    if q is None or np.shape(q) != (n, 4):
        raise ValueError(f"the rotation map needs info['quaternions'] of shape ({n}, 4), got "
                         f"{None if q is None else np.shape(q)}")
    axes, angles = axis_angle(q)
    bands = angle_bands(angles, data.info.get("angle_bands"))
    return SO3MapLayout(axes, angles, hammer(axes), bands.index(angles), bands)


def _pixel_centres(width: int) -> tuple[np.ndarray, np.ndarray]:
    """Pixel centres (x: ``width``, y: ``width // 2``) of a raster over the map's bounding box."""
    height = max(width // 2, 1)
    xe = np.linspace(-HAMMER_HALF_WIDTH, HAMMER_HALF_WIDTH, width + 1)
    ye = np.linspace(-HAMMER_HALF_HEIGHT, HAMMER_HALF_HEIGHT, height + 1)
    return (xe[1:] + xe[:-1]) / 2.0, (ye[1:] + ye[:-1]) / 2.0


def cell_raster(layout: SO3MapLayout, k: int, width: int = RASTER_WIDTH) -> np.ndarray:
    """The cells of band ``k`` on a raster (``width // 2``, ``width``), row 0 at the bottom
    (y = -√2): each pixel holds the position of the band's rotation whose axis is nearest to the
    pixel's direction, or -1 off the map or beyond the cells' reach (:meth:`SO3MapLayout.cell_radius`).
    A pixel whose centre lies just outside the ellipse but which still overlaps it takes the
    direction of the nearest rim point, so every rotation's own pixel is filled."""
    xc, yc = _pixel_centres(width)
    gx, gy = np.meshgrid(xc, yc)
    points = np.stack([gx.ravel(), gy.ravel()], axis=1)
    r = np.hypot(points[:, 0] / HAMMER_HALF_WIDTH, points[:, 1] / HAMMER_HALF_HEIGHT)  # 1 on the rim
    half_pixel = np.hypot(1.0 / width, 1.0 / max(width // 2, 1))  # half a pixel's diagonal, in rim units
    inside = r <= 1.0 + half_pixel
    points[inside & (r > 1.0)] /= r[inside & (r > 1.0), None] * (1.0 + 1e-12)
    directions, _ = hammer_inverse(points)
    out = np.full(gx.size, -1, dtype=np.int64)
    members = layout.members(k)
    if members.size and inside.any():
        chord, nearest = cKDTree(layout.axes[members]).query(directions[inside])
        reach = 2.0 * np.sin(layout.cell_radius(k) / 2.0)  # the chord of the reach angle
        out[np.flatnonzero(inside)[chord <= reach]] = members[nearest[chord <= reach]]
    return out.reshape(gx.shape)


def _values(data: NeroData, values: Any) -> np.ndarray:
    v = np.asarray(values, dtype=float)
    n = len(data.coords["rotation"])
    if v.shape != (n,):
        raise ValueError(f"rotation-map values must have shape ({n},) over {_DIMS}, got {v.shape}")
    return v


def _marked(data: NeroData) -> int | None:
    idx = data.marker_index()
    return None if idx is None else int(idx[0])


def _panel_title(data: NeroData, layout: SO3MapLayout, label: str, k: int) -> str:
    text = f"{layout.bands.labels[k]} ({len(layout.members(k))})"
    return f"{label}: {text}" if len(data.series) > 1 else text


# --------------------------------------------------------------------------- graticule


def _graticule(points: int = 90) -> list[np.ndarray]:
    """Map lines (each (m, 2)): the outline, meridians every 60° and parallels at 0°, ±30°, ±60°,
    each of about ``points`` points (the outline and parallels twice as many)."""
    t = np.linspace(0.0, 2.0 * np.pi, 2 * points + 1)
    lines = [np.stack([HAMMER_HALF_WIDTH * np.cos(t), HAMMER_HALF_HEIGHT * np.sin(t)], axis=1)]
    lat = np.radians(np.linspace(-90.0, 90.0, points + 1))
    for lon in np.radians([-120.0, -60.0, 0.0, 60.0, 120.0]):
        lines.append(hammer(np.stack([np.cos(lat) * np.cos(lon), np.cos(lat) * np.sin(lon), np.sin(lat)], axis=1)))
    lon = np.radians(np.linspace(-179.999, 179.999, 2 * points + 1))
    for phi in np.radians([-60.0, -30.0, 0.0, 30.0, 60.0]):
        lines.append(hammer(np.stack([np.cos(phi) * np.cos(lon), np.cos(phi) * np.sin(lon),
                                      np.full_like(lon, np.sin(phi))], axis=1)))
    return lines


#: Where the coordinate axes fall on the map, and their names.
_AXIS_LABELS = (("+x", (1.0, 0.0, 0.0)), ("+y", (0.0, 1.0, 0.0)), ("−y", (0.0, -1.0, 0.0)),
                ("+z", (0.0, 0.0, 1.0)), ("−z", (0.0, 0.0, -1.0)))


def _axis_label_points() -> list[tuple[str, float, float]]:
    out = []
    for name, direction in _AXIS_LABELS:
        x, y = hammer([direction])[0]
        y += 0.16 if name == "+z" else -0.16 if name == "−z" else 0.0
        out.append((name, float(x), float(y)))
    out += [("−x", -HAMMER_HALF_WIDTH - 0.22, 0.0), ("−x", HAMMER_HALF_WIDTH + 0.22, 0.0)]
    return out


_CAPTION = ("Hammer equal-area map of each rotation's axis (+x centre, +y right, +z top, −x at the ends); "
            "columns: bands of rotation angle θ (number of rotations); each cell: the rotation with the nearest "
            "axis, a dot at its own axis; at θ = 180° axis a and −a are the same rotation")


# --------------------------------------------------------------------------- matplotlib


def _dot_size(count: int) -> float:
    """Scatter marker area (points²) of a band's rotations: larger when they are few."""
    return float(np.clip(600.0 / max(count, 1), 3.0, 30.0))


def render_so3_map(data: NeroData) -> Figure:
    """Matplotlib rotation maps: rows = models, columns = angle bands (see the module docstring)."""
    layout = so3_map_layout(data)
    scale = colour_scale(data)
    norm, cmap = Normalize(scale.lo, scale.hi), colormaps[scale.cmap]
    m, b = len(data.series), len(layout.bands)
    fig = Figure(figsize=(3.0 * b + 1.3, 1.75 * m + 1.0), layout="constrained")
    axes = fig.subplots(m, b, squeeze=False)
    rasters = [cell_raster(layout, k) for k in range(b)]
    lines, labels = _graticule(), _axis_label_points()
    marked = _marked(data)
    extent = (-HAMMER_HALF_WIDTH, HAMMER_HALF_WIDTH, -HAMMER_HALF_HEIGHT, HAMMER_HALF_HEIGHT)
    for row, s in enumerate(data.series):
        vals = _values(data, s.values)
        for k in range(b):
            ax = axes[row, k]
            cells = rasters[k]
            image = np.where(cells >= 0, vals[np.clip(cells, 0, None)], np.nan)
            ax.imshow(image, extent=extent, origin="lower", cmap=cmap, norm=norm, interpolation="nearest",
                      aspect="equal").set_gid(f"{s.label}/{k}/cells")
            for i, line in enumerate(lines):
                ax.plot(line[:, 0], line[:, 1], color="0.25" if i == 0 else "0.45", lw=0.8 if i == 0 else 0.35,
                        alpha=1.0 if i == 0 else 0.5, zorder=2)
            members = layout.members(k)
            dots = ax.scatter(layout.xy[members, 0], layout.xy[members, 1], c=vals[members], cmap=cmap, norm=norm,
                              s=_dot_size(len(members)), edgecolors="0.15", linewidths=0.3, zorder=3)
            dots.set_gid(f"{s.label}/{k}")
            if marked is not None and layout.band[marked] == k:
                ax.plot([layout.xy[marked, 0]], [layout.xy[marked, 1]], "o", mfc="none", mec="red", ms=9, mew=1.8,
                        zorder=5)
            if row == 0:
                for name, x, y in labels:
                    ax.text(x, y, name, fontsize=6, color="0.15", ha="center", va="center", zorder=4,
                            path_effects=[patheffects.withStroke(linewidth=1.8, foreground="white")])
            ax.set_xlim(-HAMMER_HALF_WIDTH - 0.4, HAMMER_HALF_WIDTH + 0.4)
            ax.set_ylim(-HAMMER_HALF_HEIGHT - 0.3, HAMMER_HALF_HEIGHT + 0.3)
            ax.set_aspect("equal")
            ax.set_axis_off()
            ax.set_title(_panel_title(data, layout, s.label, k), fontsize=9)
    fig.colorbar(ScalarMappable(norm, cmap), ax=axes.ravel().tolist(), label=data.metric_label, shrink=0.85)
    fig.supxlabel(_CAPTION, fontsize=7, color="0.3", wrap=True)
    return fig


# --------------------------------------------------------------------------- plotly

_PLOTLY_CAPTION = ("Hammer equal-area map of the rotation axis (+x centre, +y right, +z top)<br>"
                   "columns: bands of rotation angle θ; cell: the rotation with the nearest axis<br>"
                   "at θ = 180° axis a and −a are the same rotation")


#: Fraction of the plot area's height kept below the maps for the caption.
_CAPTION_ROOM = 0.12


def _marker_px(count: int) -> float:
    """Marker diameter (px) of a band's rotations: larger when they are few, small enough for a
    narrow card (the cells carry the colour)."""
    return float(np.clip(28.0 / np.sqrt(max(count, 1)), 2.0, 8.0))


def render_so3_map_plotly(data: NeroData) -> Any:
    """Plotly rotation maps: per (model, band) a ``Heatmap`` of the cells (``customdata`` = the
    rotation's position, -1 off the map) and a ``Scatter`` of the rotations (``customdata`` =
    ``[position, θ, axis x, axis y, axis z]``), on a shared ``coloraxis``; ``meta`` =
    ``{"series", "role": "cells" | "value" | "marker" | "grid" | "label", "band"}``. Arrays are sent as
    float32 / int16 (the figure goes to browsers: about 60 kB a panel)."""
    from plotly import graph_objects as go
    from plotly.subplots import make_subplots

    layout = so3_map_layout(data)
    scale = colour_scale(data)
    m, b = len(data.series), len(layout.bands)
    # band titles once over the columns and model names beside the rows: readable in narrow cards
    titles = [f"{label}<br>({len(layout.members(k))} rotations)" for k, label in enumerate(layout.bands.labels)]
    fig = make_subplots(rows=m, cols=b, column_titles=titles, horizontal_spacing=0.015,
                        vertical_spacing=0.04 if m > 1 else 0.0)
    xc, yc = _pixel_centres(PLOTLY_RASTER_WIDTH)
    rasters = [cell_raster(layout, k, PLOTLY_RASTER_WIDTH) for k in range(b)]
    lines = _graticule(36)
    grid_x = np.concatenate([np.append(line[:, 0], np.nan) for line in lines]).astype(np.float32)
    grid_y = np.concatenate([np.append(line[:, 1], np.nan) for line in lines]).astype(np.float32)
    index_type = np.int16 if len(data.coords["rotation"]) <= np.iinfo(np.int16).max else np.int32
    marked = _marked(data)
    for row, s in enumerate(data.series, start=1):
        vals = _values(data, s.values)
        for k in range(b):
            col = k + 1
            cells = rasters[k]
            z = np.where(cells >= 0, vals[np.clip(cells, 0, None)], np.nan).astype(np.float32)
            meta = {"series": s.label, "band": k}
            fig.add_trace(go.Heatmap(
                x=xc.astype(np.float32), y=yc.astype(np.float32), z=z, customdata=cells.astype(index_type), coloraxis="coloraxis", hoverongaps=False,
                meta={**meta, "role": "cells"},
                hovertemplate=f"rotation %{{customdata}}<br>{data.metric_label} %{{z:.4g}}<extra>{s.label}</extra>"),
                row=row, col=col)
            fig.add_trace(go.Scatter(x=grid_x, y=grid_y, mode="lines", line=dict(color="rgba(60,60,60,0.45)", width=0.6),
                                     hoverinfo="skip", showlegend=False, meta={**meta, "role": "grid"}),
                          row=row, col=col)
            if row == 1:
                names = _axis_label_points()
                fig.add_trace(go.Scatter(x=[x for _, x, _ in names], y=[y for _, _, y in names],
                                         text=[name for name, _, _ in names], mode="text", hoverinfo="skip",
                                         textfont=dict(size=9, color="#333"), showlegend=False,
                                         meta={**meta, "role": "label"}), row=row, col=col)
            members = layout.members(k)
            custom = np.column_stack([members, layout.angles[members], layout.axes[members]]).astype(np.float32)
            fig.add_trace(go.Scatter(
                x=layout.xy[members, 0].astype(np.float32), y=layout.xy[members, 1].astype(np.float32),
                mode="markers", customdata=custom,
                marker=dict(color=vals[members], coloraxis="coloraxis", size=_marker_px(len(members)),
                            line=dict(color="rgba(30,30,30,0.6)", width=0.5)),
                showlegend=False, meta={**meta, "role": "value"},
                hovertemplate=("rotation %{customdata[0]:.0f}<br>angle %{customdata[1]:.1f}°<br>axis "
                               "(%{customdata[2]:.2f}, %{customdata[3]:.2f}, %{customdata[4]:.2f})"
                               f"<br>{data.metric_label} %{{marker.color:.4g}}<extra>{s.label}</extra>")),
                row=row, col=col)
            if marked is not None and layout.band[marked] == k:
                fig.add_trace(go.Scatter(
                    x=[layout.xy[marked, 0]], y=[layout.xy[marked, 1]], mode="markers",
                    marker=dict(color="rgba(0,0,0,0)", size=13, line=dict(color="red", width=2)), hoverinfo="skip",
                    showlegend=False, meta={**meta, "role": "marker", "rotation": marked}), row=row, col=col)
    fig.update_xaxes(visible=False, range=[-HAMMER_HALF_WIDTH - 0.35, HAMMER_HALF_WIDTH + 0.35])
    fig.update_yaxes(visible=False, range=[-HAMMER_HALF_HEIGHT - 0.25, HAMMER_HALF_HEIGHT + 0.25])
    for trace in fig.data:  # each panel keeps the ellipse's 2:1 shape
        if (trace.meta or {}).get("role") == "cells":
            fig.layout["yaxis" + trace.yaxis[1:]].scaleanchor = trace.xaxis
    fig.update_layout(coloraxis=dict(colorscale=scale.plotly_scale, reversescale=scale.reverse, cmin=scale.lo,
                                     cmax=scale.hi, colorbar=dict(title=dict(text=data.metric_label), thickness=14)),
                      plot_bgcolor="white")
    fig.update_annotations(font_size=11)  # the column titles
    for name in [k for k in fig.layout if k.startswith("yaxis")]:  # room below the maps for the caption,
        low, high = fig.layout[name].domain  # whatever margins the caller sets
        fig.layout[name].domain = [_CAPTION_ROOM + (1 - _CAPTION_ROOM) * low, _CAPTION_ROOM + (1 - _CAPTION_ROOM) * high]
    if m > 1:
        for row, s in enumerate(data.series, start=1):
            low, high = fig.get_subplot(row, 1).yaxis.domain
            fig.add_annotation(text=s.label, xref="paper", yref="paper", x=0.0, y=(low + high) / 2, xanchor="right",
                               textangle=-90, showarrow=False, font=dict(size=11))
    fig.add_annotation(text=_PLOTLY_CAPTION, xref="paper", yref="paper", x=0.5, y=_CAPTION_ROOM, yanchor="top",
                       showarrow=False, font=dict(size=8, color="#555"))
    return fig
