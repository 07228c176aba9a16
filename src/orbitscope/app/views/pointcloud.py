"""The point-cloud view (NERO's point-cloud case study): does the class survive a 3-D rotation?

Runs of :class:`~orbitscope.tasks.PointCloudClassification` (task kind ``"pointcloud"``) are
evaluated over samples of SO(3): NERO's axis–angle sample :class:`~orbitscope.group.so3.NeroSO3`
(dims plane, axis_angle, rotation_angle, drawn by the shell as one disk per plane; a click on a
cell selects that element), :class:`~orbitscope.group.so3.SO3Grid`, the octahedral group, or any
other list of rotations (dim ``rotation``).

Metrics, class subsets and label-free mode are the classification view's
(:class:`~orbitscope.app.views.classification.ClassificationView`, subclassed here): subsets by
the stored ``label`` (in label-free mode by the first compared model's consensus class), metrics
that need labels hidden in label-free mode. The default metric is NERO's individual score,
``nero_score`` (the true-class logit min–max normalised over the classes of each prediction: 1
exactly where the prediction is right), when every compared run recorded it (runs of models
that return logits, by default), else the true-class ``confidence``.

Detail panel for the selected sample at the selected element:

* the **rotated cloud** as a 3-D scatter: the stored cloud (``input_points``, kept by runs
  evaluated with ``store_inputs=True``) moved by the element's rotation ``p -> R p`` (the
  ``points`` kind's action), coloured by each point's height z in the stored cloud (so one can see
  where "up" went), with the unrotated cloud as faint grey points and the rotation axis as a line;
  equal aspect ratio and axes fixed to [-1, 1] (or the cloud's largest norm, when larger), so
  a rotation moves the points and never the axes;
* the **rotation** in words: angle (degrees) about a unit axis, the axis as azimuth / elevation,
  and NERO's (plane, axis angle, rotation angle) coordinates (the element's own for a NeroSO3
  run; otherwise the planes holding the axis, if any);
* **class-probability bars** of every compared model at that element (stored ``probabilities``;
  runs evaluated without them show the stored prediction and true-class confidence, with a note).

Live panel: re-runs every model whose weights are in the store's model cache on the stored cloud
rotated by **any** rotation: an axis given by its azimuth (degrees from +x towards +y) and
elevation (degrees above the xy plane), and a rotation angle 0–180° about it (right-handed:
``q = (cos ψ/2, sin ψ/2 · axis)``, the same rotation as
``scipy.spatial.transform.Rotation.from_rotvec(ψ · axis)``). The controls start at the element
chosen with the shell's live controls (sampled elements) and show the rotated cloud and each
loadable model's class probabilities; models without weights in the store are named.

The axis and angle controls live inside the live panel, so their callback is not one of the
shell's: :meth:`PointCloudView.register_callbacks` (called by
:func:`orbitscope.app.create_app` for every registered view) attaches it with
:func:`install_live_callback`. Its component ids are pattern-matching ids
(:func:`live_control_id`), so pages without this panel are not affected.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import torch
import xarray as xr
from dash import MATCH, Input, Output, State, dcc, html
from scipy.spatial.transform import Rotation as ScipyRotation
from torch import nn

from ...engine.model_call import ModelCall
from ...group.elements import Transforms, quaternion_to_matrix
from ...group.orbits import Orbit, Rotation3D
from ...group.so3 import NeroSO3
from ...kinds.points import transform_points
from ...results.result import OrbitResult
from ...tasks import Classification, PointCloudClassification
from ..state import OrbitElement, describe_element, flat_index
from . import DetailRequest, register_view
from .classification import ClassificationView

__all__ = [
    "AxisAngle",
    "LIVE_CONTROLS",
    "LiveData",
    "PointCloudView",
    "axis_angle",
    "axis_from_angles",
    "cloud_figure",
    "element_axis_angle",
    "free_rotation",
    "install_live_callback",
    "live_control_id",
    "live_rotation_detail",
    "nero_axis",
    "nero_coordinates",
    "probability_figure",
    "rotated_cloud",
    "stored_cloud",
]

logger = logging.getLogger(__name__)

#: The live controls: name -> (label, low, high, step), degrees.
LIVE_CONTROLS: dict[str, tuple[str, float, float, float]] = {
    "azimuth": ("axis azimuth (°, +x → +y)", -180.0, 180.0, 1.0),
    "elevation": ("axis elevation (° above xy)", -90.0, 90.0, 1.0),
    "angle": ("rotation angle (°)", 0.0, 180.0, 1.0),
}
_HELP = {"azimuth": "direction of the rotation axis in the xy plane: degrees from +x towards +y",
         "elevation": "tilt of the rotation axis: degrees above the xy plane (+90: along +z)",
         "angle": "turn about the axis, right-handed (counter-clockwise seen from the axis tip)"}
_MARKS = {"azimuth": (-180, -90, 0, 90, 180), "elevation": (-90, -45, 0, 45, 90), "angle": (0, 45, 90, 135, 180)}
#: pattern-matching id types of the live panel's own components
_ID_TYPES = {"azimuth": "pointcloud-azimuth", "elevation": "pointcloud-elevation", "angle": "pointcloud-angle",
             "result": "pointcloud-live-result", "context": "pointcloud-live-context"}
_NO_POINTS = "this run did not store its point clouds: re-run it with store_inputs=True to see and rotate them"
_NO_PROBABILITIES = "class probabilities were not stored (evaluate with store_probabilities=True, or --probabilities)"
_NOTE = {"fontSize": "11px", "color": "#666", "margin": "2px 0"}
_TEXT = {"fontSize": "12px", "color": "#333", "margin": "0 0 4px 0", "lineHeight": "1.45"}
_CLOUD_WIDTH = "360px"
_CLOUD_HEIGHT = 340
_GREY = "#9e9e9e"
_AXIS_COLOUR = "#d62728"
_COLOUR_RE = re.compile(r"^#[0-9A-Fa-f]{6}$")
#: most compared runs the live callback accepts from the browser
_MAX_RUNS = 8


def live_control_id(name: str, index: int = 0) -> dict[str, Any]:
    """Pattern-matching id of one of the live panel's components: ``"azimuth"``,
    ``"elevation"``, ``"angle"`` (the sliders), ``"result"`` (what they update) or ``"context"``
    (the runs and sample the panel is about)."""
    return {"type": _ID_TYPES[name], "index": index}


# --------------------------------------------------------------------------- rotations


def axis_from_angles(azimuth: float, elevation: float) -> np.ndarray:
    """The unit axis (3,) at ``azimuth`` degrees from +x towards +y and ``elevation`` degrees
    above the xy plane: ``(cos e cos a, cos e sin a, sin e)``."""
    a, e = math.radians(float(azimuth)), math.radians(float(elevation))
    return np.array([math.cos(e) * math.cos(a), math.cos(e) * math.sin(a), math.sin(e)])


def nero_axis(plane: int, axis_angle: float) -> np.ndarray:
    """NERO's axis (3,) of plane ``plane`` (0, 1, 2 = xy, xz, yz) at in-plane angle φ degrees:
    xy ``(cos φ, sin φ, 0)``, xz ``(cos φ, 0, -sin φ)``, yz ``(0, cos φ, sin φ)``
    (:class:`~orbitscope.group.so3.NeroSO3`'s convention)."""
    c, s = math.cos(math.radians(axis_angle)), math.sin(math.radians(axis_angle))
    axes = {0: (c, s, 0.0), 1: (c, 0.0, -s), 2: (0.0, c, s)}
    if int(plane) not in axes:
        raise ValueError(f"NERO planes are 0, 1, 2 ({', '.join(NeroSO3.PLANES)}), got {plane!r}")
    return np.array(axes[int(plane)])


@dataclass(frozen=True)
class AxisAngle:
    """A rotation by ``angle`` degrees (0 … 180) about the unit ``axis``, right-handed (counter-
    clockwise seen from the axis tip); for the identity (angle 0) the axis is only a direction
    (e.g. NERO's axis of a ψ = 0 element), kept so that controls can start there."""

    axis: tuple[float, float, float]
    angle: float

    @property
    def azimuth(self) -> float:
        """Degrees from +x towards +y, in (-180, 180] (0 for an axis along ±z)."""
        x, y, _ = self.axis
        return 0.0 if math.hypot(x, y) < 1e-12 else math.degrees(math.atan2(y, x))

    @property
    def elevation(self) -> float:
        """Degrees above the xy plane, in [-90, 90]."""
        return math.degrees(math.asin(min(max(self.axis[2], -1.0), 1.0)))

    def quaternion(self) -> np.ndarray:
        """(w, x, y, z) = ``(cos ψ/2, sin ψ/2 · axis)``."""
        half = math.radians(self.angle) / 2
        return np.array([math.cos(half), *(math.sin(half) * np.asarray(self.axis))])

    def matrix(self) -> np.ndarray:
        """The rotation matrix (3, 3): a point p goes to ``R @ p``."""
        return quaternion_to_matrix(self.quaternion())

    def short(self) -> str:
        """E.g. ``"45° about azimuth 0°, elevation -60°"``."""
        return f"{self.angle:.4g}° about azimuth {self.azimuth:.4g}°, elevation {self.elevation:.4g}°"


def axis_angle(azimuth: Any, elevation: Any, angle: Any) -> AxisAngle:
    """The rotation by ``angle`` degrees about the axis at ``azimuth`` / ``elevation`` degrees
    (:func:`axis_from_angles`); an angle outside [0, 180] is brought there (ψ and 360° − ψ about
    the opposite axis are the same rotation).

    Raises:
        ValueError: a value is missing or not a finite number.
    """
    values = []
    for name, value in (("azimuth", azimuth), ("elevation", elevation), ("angle", angle)):
        try:
            v = float(value)
        except (TypeError, ValueError, OverflowError):
            raise ValueError(f"the rotation's {name} must be a number of degrees, got {str(value)[:40]!r}") from None
        if not math.isfinite(v):
            raise ValueError(f"the rotation's {name} must be finite, got {v}")
        values.append(v)
    az, el, psi = values
    el = min(max(el, -90.0), 90.0)
    axis = axis_from_angles(az, el)
    psi = psi % 360.0
    if psi > 180.0:
        psi, axis = 360.0 - psi, -axis
    return AxisAngle(tuple(float(c) for c in axis), float(psi))  # type: ignore[arg-type]


def free_rotation(azimuth: Any, elevation: Any, angle: Any) -> Rotation3D:
    """The one-element orbit (dim ``rotation``) of :func:`axis_angle`'s rotation, built from its
    quaternion: ``transforms().linear[0]`` equals ``Rotation.from_rotvec(ψ · axis).as_matrix()``."""
    return Rotation3D(axis_angle(azimuth, elevation, angle).quaternion()[None])


def _from_quaternion(q: np.ndarray, fallback_axis: np.ndarray | None) -> AxisAngle:
    w, v = float(q[0]), np.asarray(q[1:], dtype=np.float64)
    if w < 0:  # q and -q are the same rotation: take the turn of at most 180°
        w, v = -w, -v
    norm = float(np.linalg.norm(v))
    if norm < 1e-12:
        axis = fallback_axis if fallback_axis is not None else np.array([0.0, 0.0, 1.0])
        return AxisAngle(tuple(float(c) for c in axis / np.linalg.norm(axis)), 0.0)  # type: ignore[arg-type]
    angle = math.degrees(2 * math.atan2(norm, w))
    return AxisAngle(tuple(float(c) for c in v / norm), angle)  # type: ignore[arg-type]


def element_axis_angle(orbit: Orbit, index: int = 0) -> AxisAngle:
    """Axis and angle of element ``index`` of ``orbit`` (an orbit of 3-D rotations, or an
    :class:`~orbitscope.app.state.OrbitElement` of one): from its quaternion when the orbit keeps
    them (NeroSO3, SO3Grid, Octahedral, …; NERO's identity elements keep their plane's axis),
    else from its matrix (planar elements act on clouds as rotations about z).

    Raises:
        ValueError: the element is not a rotation about the origin (a flip, a scale, a shift).
    """
    if isinstance(orbit, OrbitElement):
        return element_axis_angle(orbit.orbit, orbit.index)
    q = getattr(orbit, "quaternions", None)
    if q is not None and np.shape(q) == (orbit.size, 4):
        fallback = None
        if isinstance(orbit, NeroSO3):
            p, a, _ = np.unravel_index(int(index), orbit.shape)
            fallback = nero_axis(int(p), float(orbit.coords["axis_angle"][a]))
        return _from_quaternion(np.asarray(q[int(index)], dtype=np.float64), fallback)
    linear, shift = orbit.transforms().embedded(3)  # planar elements: rotations about z
    m = np.asarray(linear[int(index)], dtype=np.float64)
    if not np.allclose(m @ m.T, np.eye(3), atol=1e-6) or np.linalg.det(m) < 0 or np.abs(shift[int(index)]).max() > 0:
        raise ValueError(f"element {index} of {orbit!r} is not a rotation about the origin")
    rotvec = ScipyRotation.from_matrix(m).as_rotvec()
    angle = float(np.linalg.norm(rotvec))
    axis = rotvec / angle if angle > 1e-12 else np.array([0.0, 0.0, 1.0])
    return AxisAngle(tuple(float(c) for c in axis), math.degrees(angle))  # type: ignore[arg-type]


def nero_coordinates(rotation: AxisAngle, tol: float = 1e-6) -> list[tuple[str, float, float]]:
    """NERO's ``(plane, axis angle φ, rotation angle ψ)`` of ``rotation``: one entry per
    coordinate plane holding its axis (none for an axis off the three planes, two for an axis along
    a coordinate axis), φ in [0, 360), ψ = the angle (in [0, 180])."""
    x, y, z = rotation.axis
    out = []
    for name, off, phi in (("xy", z, math.atan2(y, x)), ("xz", y, math.atan2(-z, x)), ("yz", x, math.atan2(z, y))):
        if abs(off) <= tol:
            out.append((name, round(math.degrees(phi) % 360.0, 9) % 360.0, float(rotation.angle)))
    return out


# --------------------------------------------------------------------------- data


def stored_cloud(result: OrbitResult, sample: int) -> np.ndarray:
    """The stored (untransformed) cloud (N, 3) float32 of ``sample``.

    Raises:
        ValueError: the run did not store its clouds (evaluate with ``store_inputs=True``).
    """
    if "input_points" not in result.data:
        raise ValueError(_NO_POINTS)
    return np.asarray(result.data["input_points"].sel(sample=sample).values, dtype=np.float32)


def _transforms(element: Orbit | Transforms) -> Transforms:
    t = element.transforms() if isinstance(element, Orbit) else element
    if len(t) != 1:
        raise ValueError(f"one rotation is needed, got {len(t)}")
    return t


def rotated_cloud(result: OrbitResult, sample: int, element: Orbit | Transforms) -> np.ndarray:
    """The stored cloud of ``sample`` moved by the one element ``element`` (a one-element orbit
    or its transforms) with the ``points`` kind's action ``p -> R p``: (N, 3) float32, as the
    model saw it."""
    x = torch.from_numpy(stored_cloud(result, sample))[None]
    with torch.no_grad():
        out = transform_points(x, _transforms(element), layout="paired")
    return out[0].numpy()


def _task(result: OrbitResult) -> Classification:
    """The run's task with probabilities on (its own class, so its output reading is kept)."""
    try:
        task = result.task()
    except (ValueError, TypeError, KeyError):
        task = None
    if not isinstance(task, Classification):
        task = PointCloudClassification()
    return dataclasses.replace(task, store_probabilities=True)


def _element_values(res: OrbitResult, element: Mapping[str, float]) -> xr.Dataset:
    """The run's variables at the grid element (nearest value per dim)."""
    positions = {d: int(np.argmin(np.abs(res.data[d].values - float(element[d])))) for d in res.orbit_dims}
    return res.data.isel(positions)


def _classes(res: OrbitResult, n: int) -> np.ndarray:
    return res.data["class"].values if "class" in res.data.coords else np.arange(n)


def _sample_in(res: OrbitResult, sample: int) -> bool:
    return bool(np.any(np.asarray(res.data["sample"].values) == sample))


# --------------------------------------------------------------------------- figures


def _extent(points: np.ndarray) -> float:
    """Half-width of the fixed axes: 1 for clouds inside the unit ball (normalised as NERO did),
    else a little more than the largest norm (a rotation never changes it)."""
    top = float(np.linalg.norm(points, axis=1).max()) if len(points) else 0.0
    return 1.0 if top <= 1.0 + 1e-5 else float(math.ceil(top * 105) / 100)


def cloud_figure(points: np.ndarray, original: np.ndarray | None, rotation: AxisAngle | None, title: str,
                 height: int = _CLOUD_HEIGHT) -> dict[str, Any]:
    """A rotated cloud as a plotly 3-D scatter (a plain dict).

    Traces (``meta.role``): ``"original"`` (the unrotated cloud, faint grey; when given),
    ``"cloud"`` (``points``, coloured by the height z of each point in ``original``, else in
    ``points``, over its range), ``"axis"`` (the rotation axis through the origin; when
    ``rotation`` is given).
    Equal aspect ratio; the three axes fixed to [-e, e] with e = 1 for clouds in the unit ball
    (:func:`_extent` of the original cloud), so a rotation moves the points only.
    """
    pts = np.asarray(points, dtype=np.float64)
    ref = pts if original is None else np.asarray(original, dtype=np.float64)
    e = _extent(ref)
    height_z = ref[:, 2]
    low, high = (float(height_z.min()), float(height_z.max())) if len(ref) else (-e, e)
    if high - low < 1e-9:
        low, high = low - 1.0, high + 1.0
    data: list[dict[str, Any]] = []
    if original is not None:
        data.append({"type": "scatter3d", "mode": "markers", "name": "stored (unrotated)",
                     "x": ref[:, 0].tolist(), "y": ref[:, 1].tolist(), "z": ref[:, 2].tolist(),
                     "marker": {"size": 2.6, "color": _GREY, "opacity": 0.35}, "hoverinfo": "skip",
                     "meta": {"role": "original"}})
    data.append({"type": "scatter3d", "mode": "markers", "name": "rotated",
                 "x": pts[:, 0].tolist(), "y": pts[:, 1].tolist(), "z": pts[:, 2].tolist(),
                 "customdata": list(range(len(pts))),
                 "marker": {"size": 3.8, "color": height_z.tolist(), "colorscale": "Viridis", "cmin": low,
                            "cmax": high, "opacity": 0.95, "line": {"width": 0}},
                 "hovertemplate": "point %{customdata}<br>x %{x:.3f}, y %{y:.3f}, z %{z:.3f}<extra></extra>",
                 "meta": {"role": "cloud", "n_points": len(pts),
                          "matrix": None if rotation is None else rotation.matrix().tolist()}})
    if rotation is not None:
        a = np.asarray(rotation.axis) * e
        data.append({"type": "scatter3d", "mode": "lines+text", "name": f"axis ({rotation.angle:.4g}°)",
                     "x": [-a[0], 0.0, a[0]], "y": [-a[1], 0.0, a[1]], "z": [-a[2], 0.0, a[2]],
                     "text": ["", "", "axis"], "textposition": "top center",
                     "textfont": {"color": _AXIS_COLOUR, "size": 10},
                     "line": {"color": _AXIS_COLOUR, "width": 4, "dash": "dash"}, "hoverinfo": "skip",
                     "meta": {"role": "axis", "axis": list(rotation.axis), "angle": rotation.angle}})
    ticks = [-e, 0.0, e]
    axis = {"range": [-e, e], "autorange": False, "showspikes": False, "tickvals": ticks,
            "ticktext": [f"{v:g}" for v in ticks], "tickfont": {"size": 9}, "backgroundcolor": "#fafafa",
            "showbackground": True, "gridcolor": "#dcdcdc", "zerolinecolor": "#b0b0b0"}
    layout = {"height": height, "margin": {"l": 0, "r": 0, "t": 24, "b": 0}, "template": "plotly_white",
              "title": {"text": title, "font": {"size": 12}, "x": 0.5, "xanchor": "center", "y": 0.985},
              "showlegend": True, "legend": {"orientation": "h", "x": 0.0, "y": 0.0, "font": {"size": 10},
                                             "bgcolor": "rgba(255,255,255,0.6)"},
              "scene": {"aspectmode": "cube", "dragmode": "turntable",
                        "domain": {"x": [0, 1], "y": [0.06, 1]},
                        "xaxis": {**axis, "title": {"text": "x"}}, "yaxis": {**axis, "title": {"text": "y"}},
                        "zaxis": {**axis, "title": {"text": "z"}},
                        "camera": {"eye": {"x": 1.12, "y": -1.33, "z": 0.72}, "up": {"x": 0, "y": 0, "z": 1}}},
              "uirevision": "pointcloud", "meta": {"role": "pointcloud", "extent": e}}
    return {"data": data, "layout": layout}


def probability_figure(classes: Sequence[Any], probs: Sequence[np.ndarray | None], names: Sequence[str],
                       colours: Sequence[str], marked: tuple[int, str] | None, title: str) -> dict[str, Any]:
    """Grouped class-probability bars, one colour per model (models with ``None`` left out), as a
    plain plotly dict; ``marked`` = (class, why) gets a pointer (the label, or the consensus class).
    Each bar trace's ``meta``: ``{"series": name, "role": "probabilities"}``."""
    x = [str(c) for c in classes]
    data = [{"type": "bar", "x": x, "y": [float(v) for v in np.asarray(p, dtype=np.float64)], "name": name,
             "marker": {"color": colour}, "meta": {"series": name, "role": "probabilities"},
             "hovertemplate": "class %{x}: %{y:.3f}<extra>" + name + "</extra>"}
            for p, name, colour in zip(probs, names, colours) if p is not None]
    annotations = [] if marked is None else [{
        "x": str(marked[0]), "y": 1.0, "text": f"▼ {marked[1]}", "showarrow": False, "yshift": 8,
        "font": {"color": "#333", "size": 11}}]
    layout = {"title": {"text": title, "font": {"size": 12}}, "barmode": "group", "height": 230,
              "margin": {"l": 44, "r": 10, "t": 40, "b": 30}, "template": "plotly_white",
              "yaxis": {"range": [0, 1.08], "title": {"text": "probability"}},
              "xaxis": {"type": "category", "title": {"text": "class", "standoff": 2}},
              "showlegend": True, "legend": {"orientation": "h", "y": -0.25}, "annotations": annotations,
              "meta": {"role": "class-bars"}}
    return {"data": data, "layout": layout}


def _graph(id_: str, fig: dict[str, Any], width: str | None = None) -> Any:
    style = {"height": f"{fig['layout']['height']}px"}
    if width:
        style["width"] = width
    return dcc.Graph(id=id_, figure=fig, config={"displayModeBar": False}, style=style)


def _nero_text(coords: Sequence[tuple[str, float, float]]) -> str:
    if not coords:
        return "NERO coordinates: none (the axis lies in none of the xy, xz, yz planes)"
    return "NERO coordinates: " + " = ".join(f"{p} plane, axis angle {phi:.4g}°, rotation angle {psi:.4g}°"
                                             for p, phi, psi in coords)


def _rotation_text(rotation: AxisAngle | None, nero: Sequence[tuple[str, float, float]], id_: str,
                   problem: str | None = None) -> Any:
    if rotation is None:
        return html.Div(problem or "not a rotation", id=id_, style=_TEXT)
    x, y, z = rotation.axis
    lines = [f"rotation {rotation.angle:.4g}° about axis ({x:+.3f}, {y:+.3f}, {z:+.3f})"
             + (" (identity)" if rotation.angle < 1e-9 else ""),
             f"axis azimuth {rotation.azimuth:.4g}°, elevation {rotation.elevation:.4g}°",
             _nero_text(nero)]
    return html.Div([html.Div(line) for line in lines], id=id_, style=_TEXT)


def _described(orbit: Orbit, index: int) -> tuple[AxisAngle | None, list[tuple[str, float, float]], str | None]:
    """Axis and angle, NERO coordinates, and the problem (None: a rotation) of an element."""
    try:
        rotation = element_axis_angle(orbit, index)
    except ValueError as exc:
        return None, [], f"{exc}: no axis and angle to show"
    return rotation, _nero_of(orbit, index, rotation), None


def _nero_of(orbit: Orbit, index: int, rotation: AxisAngle) -> list[tuple[str, float, float]]:
    """NERO coordinates of element ``index``: its own for a NeroSO3 orbit, else computed."""
    if isinstance(orbit, OrbitElement):
        return _nero_of(orbit.orbit, orbit.index, rotation)
    if isinstance(orbit, NeroSO3):
        p, a, r = np.unravel_index(int(index), orbit.shape)
        return [(NeroSO3.PLANES[int(p)], float(orbit.coords["axis_angle"][a]), float(orbit.coords["rotation_angle"][r]))]
    return nero_coordinates(rotation)


# --------------------------------------------------------------------------- the view


@register_view
class PointCloudView(ClassificationView):
    """See the module docstring. Selectors (metrics, class subsets, label-free mode) are the
    classification view's."""

    kind = "pointcloud"

    def default_metric(self, options: Sequence[tuple[str, str]], label_free: bool) -> str | None:
        """NERO's individual score (``nero_score``: the true-class logit min–max normalised over
        the classes of each prediction) when every compared run recorded it and labels are in
        use; otherwise the classification view's default (``confidence``, ...)."""
        if not label_free and "nero_score" in (v for v, _ in options):
            return "nero_score"
        return super().default_metric(options, label_free)

    @classmethod
    def register_callbacks(cls, app: Any, data: Any) -> None:
        install_live_callback(app, data)

    # -- detail ---------------------------------------------------------------------------------
    def stored_detail(self, req: DetailRequest, metric: str | None) -> list[Any]:
        res = req.results[0]
        flat = flat_index(res.orbit, req.element)
        where = describe_element(res.orbit, req.element)
        rotation, nero, problem = _described(res.orbit, flat)
        t = res.orbit.transforms()[[flat]]
        source = next((r for r in req.results if "input_points" in r.data), None)
        if source is None:
            cloud: Any = html.P(_NO_POINTS, id="detail-cloud", className="note",
                                style={**_NOTE, "width": _CLOUD_WIDTH})
        else:
            fig = cloud_figure(rotated_cloud(source, req.sample, t), stored_cloud(source, req.sample), rotation,
                               "rotated cloud (colour: stored height z)")
            cloud = _graph("detail-cloud", fig, _CLOUD_WIDTH)
        probs: list[np.ndarray | None] = []
        missing: list[Any] = []
        for r, name in zip(req.results, req.names):
            point = _element_values(r, req.element).sel(sample=req.sample)
            if "probabilities" in point:
                probs.append(np.asarray(point["probabilities"].values, dtype=np.float64))
                continue
            probs.append(None)
            prediction = f"predicts class {int(point['prediction'])}" if "prediction" in point else "no prediction"
            confidence = (f", true-class confidence {float(point['confidence']):.3f}"
                          if "confidence" in point and not req.label_free else "")
            missing.append(html.Li(f"{name}: {prediction}{confidence}"))
        body: list[Any] = [_rotation_text(rotation, nero, "detail-rotation", problem)]
        if any(p is not None for p in probs):
            n = next(len(p) for p in probs if p is not None)
            fig = probability_figure(_classes(res, n), probs, req.names, req.colours, self._marked_class(req, res),
                                     f"stored class probabilities · {where}")
            body.append(_graph("detail-bars", fig))
            if missing:
                body.append(html.Div([html.P(_NO_PROBABILITIES + " for:", className="note", style=_NOTE),
                                      html.Ul(missing, style=_TEXT)], id="detail-stored-values"))
        else:
            body.append(html.Div([html.P(_NO_PROBABILITIES, className="note", style=_NOTE),
                                  html.Ul(missing, style=_TEXT)], id="detail-bars"))
        return [html.H4(f"{self._heading(req, res)} · {where}", id="detail-title"),
                html.Div([cloud, html.Div(body, style={"flex": "1", "minWidth": "260px"})],
                         style={"display": "flex", "gap": "12px", "alignItems": "flex-start"})]

    # -- live -----------------------------------------------------------------------------------
    def supports_live(self, results: Sequence[OrbitResult]) -> bool:
        return bool(results) and all("input_points" in r.data for r in results)

    def live_unavailable(self, results: Sequence[OrbitResult]) -> str:
        return "live re-evaluation needs the stored point clouds: re-run with store_inputs=True"

    def evaluate_live(self, model: nn.Module, result: OrbitResult, sample: int, element: Orbit) -> np.ndarray:
        """Class probabilities (classes,) of ``model`` on the stored cloud of ``sample`` rotated by
        the one element of ``element`` (any one-element orbit of 3-D rotations: a sampled element,
        or :func:`free_rotation`), read and normalised as the run did."""
        x = torch.from_numpy(rotated_cloud(result, sample, element))[None]
        norm = result.attrs.get("normalize")
        task = _task(result)
        call = ModelCall(model, read=task.read_outputs, normalize=json.loads(norm) if norm else None,
                         what="the rotated point cloud")
        with call.evaluating():
            out = call(x)
        label = int(result.data["label"].sel(sample=sample)) if "label" in result.data else 0
        label = label if 0 <= label < out.shape[-1] else 0
        return task.score(out, torch.tensor([label]))["probabilities"][0].double().numpy()

    def rotation_panel(self, req: DetailRequest, rotation: AxisAngle | None,
                       nero: Sequence[tuple[str, float, float]], where: str, problem: str | None = None) -> list[Any]:
        """The live result for ``req.live_transform`` (whose axis and angle are ``rotation``; None
        with ``problem`` for an element that is not a rotation): its description, the rotated
        cloud, and the class probabilities of every loadable model (``req.live_outputs``; None:
        not loadable, named in a note)."""
        source = next((r for r in req.results if "input_points" in r.data), None)
        t = req.live_transform
        if t is None or source is None:
            text = "choose a rotation with the live controls" if source is not None else self.live_unavailable(req.results)
            return [html.P(text, id="live-rotation", className="note")]
        fig = cloud_figure(rotated_cloud(source, req.sample, t), stored_cloud(source, req.sample), rotation,
                           "rotated cloud (live)")
        outputs = list(req.live_outputs or [None] * len(req.results))
        notes = [html.P(f"{name}: no weights for this model in the store's model cache (<store>/models, "
                        "saved with orbitscope.save_model): not re-evaluated, stored values only",
                        className="note", style=_NOTE) for name, out in zip(req.names, outputs) if out is None]
        body: list[Any] = [_rotation_text(rotation, nero, "live-rotation", problem)]
        if any(o is not None for o in outputs):
            n = next(len(o) for o in outputs if o is not None)
            bars = probability_figure(_classes(req.results[0], n), outputs, req.names, req.colours,
                                      self._marked_class(req, req.results[0]), f"live class probabilities · {where}")
            body.append(_graph("live-bars", bars))
        else:
            body.append(html.P("no compared model can be re-evaluated: none has its weights in the store",
                               id="live-bars", className="note", style=_NOTE))
        body += notes
        return [html.Div([_graph("live-cloud", fig, _CLOUD_WIDTH), html.Div(body, style={"flex": "1", "minWidth": "260px"})],
                         style={"display": "flex", "gap": "12px", "alignItems": "flex-start"})]

    def live_detail(self, req: DetailRequest) -> list[Any]:
        res = req.results[0]
        point = dict(req.live_point or {})
        start = describe_element(res.orbit, point)
        parts: list[Any] = [html.H4(f"live re-evaluation at any rotation · from {start}", id="live-title")]
        if req.live_transform is None:
            return parts + [html.P("choose an element with the live controls")]
        rotation, nero, problem = _described(req.live_transform, 0)
        context = {"runs": list(req.run_ids), "names": list(req.names), "colours": list(req.colours),
                   "sample": int(req.sample), "label_free": bool(req.label_free)}
        panel = self.rotation_panel(req, rotation, nero, start, problem)
        return parts + [_controls(rotation or AxisAngle((0.0, 0.0, 1.0), 0.0)),
                        dcc.Store(id=live_control_id("context"), data=context),
                        html.Div(panel, id=live_control_id("result"))]


def _controls(start: AxisAngle) -> Any:
    """The axis (azimuth, elevation) and angle sliders, at ``start``: one row each, wide enough for
    the slider's box to type an exact value into."""
    values = {"azimuth": start.azimuth, "elevation": start.elevation, "angle": start.angle}
    rows = []
    for name, (label, low, high, step) in LIVE_CONTROLS.items():
        marks = {m: f"{m}°" for m in _MARKS[name]}
        rows.append(html.Div([
            html.Span(label, title=_HELP[name], style={"fontSize": "12px", "color": "#555", "flex": "0 0 170px",
                                                       "whiteSpace": "nowrap"}),
            html.Div(dcc.Slider(id=live_control_id(name), min=low, max=high, step=step, value=round(values[name], 1),
                                marks=marks, updatemode="drag", allow_direct_input=True),
                     style={"flex": "1", "minWidth": "260px"}),
        ], style={"display": "flex", "alignItems": "center", "gap": "8px", "marginBottom": "6px"}))
    return html.Div(rows, id="live-controls", style={"margin": "4px 0 8px 0"})


# --------------------------------------------------------------------------- live callback


class LiveData(Protocol):
    """What the live callback needs of :class:`~orbitscope.app.data.AppData`."""

    def result(self, run_id: str, *, consensus: bool = False) -> OrbitResult: ...

    def model(self, run_id: str) -> nn.Module | None: ...

    def memo(self, key: Any, compute: Callable[[], Any]) -> Any: ...


@dataclass(frozen=True)
class _LiveContext:
    runs: tuple[str, ...]
    names: tuple[str, ...]
    colours: tuple[str, ...]
    sample: int
    label_free: bool


def _live_context(raw: Any) -> _LiveContext:
    """The panel's context as the browser sent it back, checked (ValueError when malformed)."""
    if not isinstance(raw, Mapping):
        raise ValueError("the live panel lost its context: select a sample again")
    runs, names, colours = raw.get("runs"), raw.get("names"), raw.get("colours")
    if not (isinstance(runs, list) and 0 < len(runs) <= _MAX_RUNS and all(isinstance(r, str) and len(r) <= 200
                                                                          for r in runs)):
        raise ValueError("the live panel names no runs: select the models again")
    names = names if isinstance(names, list) and len(names) == len(runs) else list(runs)
    colours = colours if isinstance(colours, list) and len(colours) == len(runs) else ["#444444"] * len(runs)
    sample = raw.get("sample")
    if isinstance(sample, bool) or not isinstance(sample, (int, float)) or not float(sample).is_integer() \
            or not -2**62 < sample < 2**62:
        raise ValueError("the live panel names no sample: select a sample again")
    return _LiveContext(tuple(runs), tuple(str(n)[:200] for n in names),
                        tuple(c if isinstance(c, str) and _COLOUR_RE.match(c) else "#444444" for c in colours),
                        int(sample), raw.get("label_free") is True)


def live_rotation_detail(data: LiveData, context: Any, azimuth: Any, elevation: Any, angle: Any) -> list[Any]:
    """The live result (:meth:`PointCloudView.rotation_panel`) at the rotation by ``angle``
    degrees about the axis at ``azimuth`` / ``elevation`` degrees, for the runs and sample of
    ``context`` (the live panel's ``dcc.Store``): every model loadable from the store's model cache
    re-run on the stored cloud rotated that way. Cached per (runs, sample, rotation).

    Raises:
        ValueError: malformed context or angles, unknown runs (the store's AppError), a sample the
            runs do not hold.
    """
    ctx = _live_context(context)
    rotation = axis_angle(azimuth, elevation, angle)
    view = PointCloudView()
    results = [data.result(r, consensus=ctx.label_free and i == 0) for i, r in enumerate(ctx.runs)]
    if not all(_sample_in(r, ctx.sample) for r in results):
        raise ValueError(f"sample {ctx.sample} is not held by every compared run: select another")
    if not view.supports_live(results):
        raise ValueError(view.live_unavailable(results))
    models = [data.model(r) for r in ctx.runs]
    key = ("pointcloud-live", ctx, tuple(round(v, 9) for v in (*rotation.axis, rotation.angle)),
           tuple(m is not None for m in models))

    def render() -> list[Any]:
        element = Rotation3D(rotation.quaternion()[None])
        outputs = [None if m is None else view.evaluate_live(m, res, ctx.sample, element)
                   for m, res in zip(models, results)]
        req = DetailRequest(results=results, run_ids=ctx.runs, names=ctx.names, colours=ctx.colours,
                            sample=ctx.sample, element={}, label_free=ctx.label_free,
                            live_point={"azimuth": rotation.azimuth, "elevation": rotation.elevation,
                                        "angle": rotation.angle},
                            live_transform=element, live_outputs=outputs)
        return view.rotation_panel(req, rotation, nero_coordinates(rotation), rotation.short())

    return data.memo(key, render)


def install_live_callback(app: Any, data: Any) -> None:
    """Attach the live panel's callback (axis and angle sliders -> :func:`live_rotation_detail`)
    to the Dash ``app`` serving ``data`` (its :class:`~orbitscope.app.data.AppData`), once; it
    never raises (errors become a message in the panel)."""
    config = app.server.config
    if config.get("orbitscope_pointcloud_live"):
        return
    config["orbitscope_pointcloud_live"] = True

    @app.callback(Output(live_control_id("result", MATCH), "children"),
                  Input(live_control_id("azimuth", MATCH), "value"),
                  Input(live_control_id("elevation", MATCH), "value"),
                  Input(live_control_id("angle", MATCH), "value"),
                  State(live_control_id("context", MATCH), "data"), prevent_initial_call=True)
    def on_pointcloud_rotation(azimuth: Any, elevation: Any, angle: Any, context: Any) -> list[Any]:
        try:
            return live_rotation_detail(data, context, azimuth, elevation, angle)
        except ValueError as exc:  # the store's AppError is a ValueError: a message for the user
            return [html.P(str(exc), id="live-rotation", className="note")]
        except Exception as exc:  # noqa: BLE001 - the server must keep serving
            logger.exception("the point-cloud live callback failed")
            return [html.P(f"internal error in the point-cloud live panel: {type(exc).__name__} (see the server log)",
                           id="live-rotation", className="note")]
