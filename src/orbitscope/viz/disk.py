"""NERO's disk layout for its SO(3) sample (point clouds): one filled polar disk per rotation plane.

Orbit dims ``("plane", "axis_angle", "rotation_angle")``: plane 0, 1, 2 = xy, xz, yz
(:data:`~orbitscope.analysis.nero.SO3_PLANES`); the rotation axis lies in the plane at the polar
angle ``axis_angle`` (degrees, counter-clockwise from the right); the radius is the rotation
angle about that axis (degrees, centre = identity, rim = 180°). Rows = models, columns = planes.

Unlike NERO's dotted 51×51 raster, the disk is filled: each sample point owns the polar cell
between the midpoints to its neighbours (the first ring is a small disk around the identity,
clipped to [0°, 180°]). A closing axis angle (360° after 0°: the same axis) is not drawn twice;
the 0° value is shown. One colour scale for all disks
(:func:`~orbitscope.viz.colour_scale.colour_scale`); a selected element (``marker``) is a dot in
its plane's disks.

:func:`render_disk` draws with matplotlib (one ``QuadMesh`` per disk, gid ``"<model>/<plane>"``),
:func:`render_disk_plotly` with plotly (one ``Barpolar`` per disk, one bar per cell).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from matplotlib import colormaps
from matplotlib.colors import Normalize
from matplotlib.figure import Figure

from ..analysis.nero import SO3_PLANES, NeroData
from .colour_scale import cell_edges, colour_scale

__all__ = ["DiskGrid", "disk_grid", "plane_names", "render_disk", "render_disk_plotly"]

_DIMS = ("plane", "axis_angle", "rotation_angle")
_MAX_ROTATION = 180.0


@dataclass(frozen=True)
class DiskGrid:
    """Cells of one disk: ``keep`` = the axis-angle positions drawn (a closing 360° dropped),
    ``theta``/``theta_edges`` their centres/edges (degrees), ``radius``/``radius_edges`` likewise
    for the rotation angle."""

    keep: np.ndarray
    theta: np.ndarray
    theta_edges: np.ndarray
    radius: np.ndarray
    radius_edges: np.ndarray


def disk_grid(data: NeroData) -> DiskGrid:
    """The polar cells of ``data``'s disks (see the module docstring)."""
    if tuple(data.dims) != _DIMS:
        raise ValueError(f"the disk needs orbit dims {_DIMS}, got {tuple(data.dims)}")
    phi = np.asarray(data.coords["axis_angle"], dtype=float)
    psi = np.asarray(data.coords["rotation_angle"], dtype=float)
    keep = np.arange(len(phi))
    if len(phi) > 2 and np.isclose((phi[-1] - phi[0]) % 360.0, 0.0):  # 360° closes the circle at 0°
        keep = keep[:-1]
        c = phi[keep]
        wrap = (c[-1] + c[0] + 360.0) / 2  # the edge between the last axis and the first, once round
        theta_edges = np.concatenate([[wrap - 360.0], (c[1:] + c[:-1]) / 2, [wrap]])
    elif len(phi) == 1:
        theta_edges = phi[0] + np.array([-180.0, 180.0])
    else:
        theta_edges = cell_edges(phi)
    radius_edges = np.clip(cell_edges(psi), 0.0, _MAX_ROTATION)
    return DiskGrid(keep, phi[keep], theta_edges, psi, radius_edges)


def plane_names(data: NeroData) -> list[str]:
    """Plane labels: "xy", "xz", "yz" for coordinates 0, 1, 2 (otherwise the coordinate)."""
    out = []
    for p in np.asarray(data.coords["plane"]).tolist():
        if isinstance(p, str):
            out.append(p)
        elif float(p).is_integer() and 0 <= int(p) < len(SO3_PLANES):
            out.append(SO3_PLANES[int(p)])
        else:
            out.append(str(p))
    return out


def _disk_values(data: NeroData, values: Any, grid: DiskGrid) -> np.ndarray:
    v = np.asarray(values, dtype=float)
    shape = (len(data.coords["plane"]), len(data.coords["axis_angle"]), len(data.coords["rotation_angle"]))
    if v.shape != shape:
        raise ValueError(f"disk values must have shape {shape} over {_DIMS}, got {v.shape}")
    return v[:, grid.keep, :]


def render_disk(data: NeroData) -> Figure:
    """Matplotlib disks: rows = models, columns = planes, polar pcolormesh cells."""
    grid = disk_grid(data)
    planes = plane_names(data)
    scale = colour_scale(data)
    norm, cmap = Normalize(scale.lo, scale.hi), colormaps[scale.cmap]
    n, p = len(data.series), len(planes)
    fig = Figure(figsize=(3.1 * p + 1.2, 3.1 * n + 0.7), layout="constrained")
    axes = fig.subplots(n, p, squeeze=False, subplot_kw=dict(projection="polar"))
    idx = data.marker_index()
    mesh = None
    for row, s in enumerate(data.series):
        vals = _disk_values(data, s.values, grid)
        for col, plane in enumerate(planes):
            ax = axes[row, col]
            mesh = ax.pcolormesh(np.deg2rad(grid.theta_edges), grid.radius_edges, vals[col].T, cmap=cmap, norm=norm,
                                 shading="flat")
            mesh.set_gid(f"{s.label}/{plane}")
            if idx is not None and idx[0] == col:
                phi = float(data.coords["axis_angle"][idx[1]])
                psi = float(data.coords["rotation_angle"][idx[2]])
                ax.plot([np.deg2rad(phi)], [psi], "o", color="red", ms=7, mec="white", mew=1.2, zorder=5)
            ax.set_ylim(0, _MAX_ROTATION)
            ax.set_rticks([45, 90, 135])
            ax.set_rlabel_position(100)
            ax.tick_params(labelsize=7)
            ax.set_thetagrids(range(0, 360, 45))
            ax.grid(alpha=0.25)
            ax.set_title(f"{s.label}: {plane} plane" if n > 1 else f"{plane} plane", fontsize=9)
    fig.colorbar(mesh, ax=axes.ravel().tolist(), label=data.metric_label, shrink=0.8)
    fig.supxlabel("polar angle: rotation axis in the plane (°); radius: rotation angle (°, centre = identity, "
                  "rim = 180°)", fontsize=8, color="0.3")
    return fig


def render_disk_plotly(data: NeroData) -> Any:
    """Plotly disks: one ``Barpolar`` per (model, plane), one bar per cell (``base`` = inner
    radius, ``r`` = ring width, ``theta``/``width`` = the cell's angular centre/extent), shared
    ``coloraxis``; ``customdata`` per bar = (axis angle, rotation angle); ``meta`` =
    ``{"series", "role": "value" | "marker", "plane"}``."""
    from plotly import graph_objects as go
    from plotly.subplots import make_subplots

    grid = disk_grid(data)
    planes = plane_names(data)
    scale = colour_scale(data)
    n, p = len(data.series), len(planes)
    titles = [f"{s.label}: {plane} plane" if n > 1 else f"{plane} plane" for s in data.series for plane in planes]
    fig = make_subplots(rows=n, cols=p, specs=[[{"type": "polar"}] * p for _ in range(n)], subplot_titles=titles,
                        horizontal_spacing=0.06, vertical_spacing=0.12 if n > 1 else 0.0)
    theta_c = (grid.theta_edges[:-1] + grid.theta_edges[1:]) / 2
    width = np.diff(grid.theta_edges)
    base = grid.radius_edges[:-1]
    ring = np.diff(grid.radius_edges)
    na, nr = len(grid.theta), len(grid.radius)
    a_idx, r_idx = np.meshgrid(np.arange(na), np.arange(nr), indexing="ij")
    a_idx, r_idx = a_idx.ravel(), r_idx.ravel()
    custom = np.stack([grid.theta[a_idx], grid.radius[r_idx]], axis=1)
    idx = data.marker_index()
    for row, s in enumerate(data.series, start=1):
        vals = _disk_values(data, s.values, grid)
        for col, plane in enumerate(planes, start=1):
            colour = vals[col - 1][a_idx, r_idx]
            fig.add_trace(go.Barpolar(
                r=ring[r_idx], base=base[r_idx], theta=theta_c[a_idx], width=width[a_idx],
                marker=dict(color=colour, coloraxis="coloraxis",  # outline in the fill colour: no seams
                            line=dict(color=colour, coloraxis="coloraxis", width=0.6)),
                customdata=custom, showlegend=False, meta={"series": s.label, "role": "value", "plane": plane},
                hovertemplate=(f"{plane} plane<br>axis %{{customdata[0]:.0f}}°<br>rotation %{{customdata[1]:.0f}}°"
                               f"<br>{data.metric_label} %{{marker.color:.4g}}<extra>{s.label}</extra>")),
                row=row, col=col)
            if idx is not None and idx[0] == col - 1:
                fig.add_trace(go.Scatterpolar(
                    r=[float(data.coords["rotation_angle"][idx[2]])], theta=[float(data.coords["axis_angle"][idx[1]])],
                    mode="markers", marker=dict(color="red", size=9, line=dict(color="white", width=1)),
                    showlegend=False, meta={"series": s.label, "role": "marker", "plane": plane}), row=row, col=col)
    polar = dict(bargap=0, radialaxis=dict(range=[0, _MAX_ROTATION], tickvals=[45, 90, 135], tickfont=dict(size=9)),
                 angularaxis=dict(direction="counterclockwise", rotation=0, dtick=45, tickfont=dict(size=9)))
    fig.update_polars(**polar)
    fig.update_annotations(yshift=16)  # subplot titles clear of the 90° tick label
    fig.update_layout(coloraxis=dict(colorscale=scale.plotly_scale, reversescale=scale.reverse, cmin=scale.lo,
                                     cmax=scale.hi, colorbar=dict(title=dict(text=data.metric_label))))
    return fig
