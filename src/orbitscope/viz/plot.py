"""Static NERO plots (matplotlib ``Figure`` objects, no pyplot state: safe headless).

Renders :class:`~orbitscope.analysis.nero.NeroData` (see :mod:`orbitscope.analysis.nero` for the definitions):

* ``polar``: polar angle = rotation angle (counter-clockwise, as images are displayed), radius =
  metric, rings at 0.2 … 0.8 for [0, 1] metrics, one closed curve per model with its band;
* ``heatmap``: one panel per model, first orbit dim along x, second along y (+y down for image
  shifts), viridis, shared colour range ([0, 1] for probabilities);
* ``line``: metric against the orbit parameter, with bands;
* ``mosaic`` (D4 × time reversal) and ``disk`` (NERO's SO(3) sample): see
  :mod:`orbitscope.viz.mosaic` and :mod:`orbitscope.viz.disk`;
* ``so3map`` (a list of 3-D rotations, e.g. ``SO3Grid``): equal-area maps of the rotation axis per
  band of rotation angle, see :mod:`orbitscope.viz.so3_map`.

A selected orbit element (``marker``) is drawn as a radial line / cross / vertical line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np
from matplotlib.figure import Figure

from .colour_scale import cell_edges, colour_scale
from ..analysis.nero import MODEL_COLOURS, NeroData, prepare_aggregate, prepare_individual
from ..results.result import OrbitResult
from .disk import render_disk
from .mosaic import render_mosaic
from .so3_map import render_so3_map

__all__ = ["render", "nero_plot", "individual_plot", "save_figure", "MODEL_COLOURS"]


def render(data: NeroData) -> Figure:
    """Draw prepared NERO data as a matplotlib figure."""
    fig = {"polar": _polar, "line": _line, "heatmap": _heatmaps, "mosaic": render_mosaic,
           "disk": render_disk, "so3map": render_so3_map}[data.kind](data)
    fig.suptitle(data.title)
    return fig


def nero_plot(
    results: OrbitResult | Sequence[OrbitResult],
    variable: str = "correct",
    *,
    labels: Sequence[str] | None = None,
    title: str | None = None,
    level: float = 0.95,
    band: bool = True,
    subset: Any = None,
    marker: dict[str, float] | None = None,
) -> Figure:
    """Aggregate NERO plot of one or more results (see :func:`orbitscope.analysis.nero.prepare_aggregate`)."""
    data = prepare_aggregate(results, variable, labels=labels, subset=subset, level=level, marker=marker, title=title)
    if not band:
        for s in data.series:
            s.lower = s.upper = None
    return render(data)


def individual_plot(
    results: OrbitResult | Sequence[OrbitResult],
    sample: int,
    variable: str = "confidence",
    *,
    labels: Sequence[str] | None = None,
    marker: dict[str, float] | None = None,
    title: str | None = None,
) -> Figure:
    """Individual NERO plot of one sample (see :func:`orbitscope.analysis.nero.prepare_individual`)."""
    return render(prepare_individual(results, sample, variable, labels=labels, marker=marker, title=title))


def _polar(data: NeroData) -> Figure:
    fig = Figure(figsize=(6.4, 6.4), layout="constrained")
    ax = fig.add_subplot(projection="polar")
    theta = np.deg2rad(data.coords["angle"])
    for s in data.series:
        ax.plot(theta, s.values, color=s.colour, lw=2, label=s.label)
        if s.lower is not None and s.upper is not None:
            ax.fill_between(theta, s.lower, s.upper, color=s.colour, alpha=0.2, lw=0)
    if data.value_range is not None:
        ax.set_ylim(*data.value_range)
        if data.value_range == (0.0, 1.0):
            ax.set_rticks([0.2, 0.4, 0.6, 0.8])
    ax.set_rlabel_position(100)
    ax.set_thetagrids(range(0, 360, 45))
    idx = data.marker_index()
    if idx is not None:
        t = theta[idx[0]]
        ax.plot([t, t], list(ax.get_ylim()), color="0.3", lw=1, ls="--")
        for s in data.series:
            ax.plot([t], [s.values[idx]], "o", color=s.colour, ms=7, mec="white")
    ax.set_title(f"{data.metric_label} vs rotation angle (°, counter-clockwise)", fontsize=10, pad=14)
    ax.legend(loc="lower left", bbox_to_anchor=(-0.1, -0.12), fontsize=9, frameon=False)
    return fig


def _line(data: NeroData) -> Figure:
    fig = Figure(figsize=(6.4, 4.0), layout="constrained")
    ax = fig.add_subplot()
    (dim,) = data.dims
    x = data.coords[dim]
    for s in data.series:
        ax.plot(x, s.values, color=s.colour, lw=2, marker="o", ms=3, label=s.label)
        if s.lower is not None and s.upper is not None:
            ax.fill_between(x, s.lower, s.upper, color=s.colour, alpha=0.2, lw=0)
    idx = data.marker_index()
    if idx is not None:
        ax.axvline(x[idx[0]], color="0.3", lw=1, ls="--")
    if data.value_range is not None:
        ax.set_ylim(*data.value_range)
    ax.set_xlabel(dim)
    ax.set_ylabel(data.metric_label)
    ax.grid(alpha=0.3)
    ax.legend(frameon=False)
    return fig


def _heatmaps(data: NeroData) -> Figure:
    """One panel per model; with bands, a second row shows each cell's interval half-width."""
    n = len(data.series)
    bands = all(s.lower is not None and s.upper is not None for s in data.series)
    fig = Figure(figsize=(4.2 * n + 1.0, 7.6 if bands else 4.0), layout="constrained")
    grid = fig.subplots(2 if bands else 1, n, squeeze=False)
    axes = grid[0]
    xd, yd = data.dims
    if bands:
        half = [(np.asarray(s.upper) - np.asarray(s.lower)).T / 2 for s in data.series]
        half = [np.where(np.isfinite(h), h, np.nan) for h in half]  # one sample: no interval (blank)
        top = max(float(np.nanmax(h)) if np.isfinite(h).any() else 0.0 for h in half) or 1.0
        for ax, s, h in zip(grid[1], data.series, half):
            band_image = ax.pcolormesh(cell_edges(data.coords[xd]), cell_edges(data.coords[yd]), h, cmap="Greys",
                                       vmin=0, vmax=top)
            ax.set_xlabel(xd)
            ax.set_ylabel(yd)
            ax.set_title(f"{s.label}: interval half-width", fontsize=9)
            if yd == "ty":
                ax.invert_yaxis()
        fig.colorbar(band_image, ax=list(grid[1]), label=f"± ({data.band_method or '95 % interval'})")
    scale = colour_scale(data)  # shared by the models; reversed (low = bright) for errors, as NERO
    image = None
    idx = data.marker_index()
    for ax, s in zip(axes, data.series):
        image = ax.pcolormesh(cell_edges(data.coords[xd]), cell_edges(data.coords[yd]), np.asarray(s.values).T,
                              cmap=scale.cmap, vmin=scale.lo, vmax=scale.hi)
        if idx is not None:
            ax.plot([data.coords[xd][idx[0]]], [data.coords[yd][idx[1]]], marker="x", color="red", ms=10, mew=2)
        ax.set_xlabel(xd)
        ax.set_ylabel(yd)
        ax.set_title(s.label, fontsize=10)
        if yd == "ty":
            ax.invert_yaxis()
    fig.colorbar(image, ax=list(axes), label=data.metric_label)
    return fig


def save_figure(fig: Figure, path: str | Path, dpi: int = 150) -> Path:
    """Save a figure (format from the extension: .png, .pdf, .svg); creates parent folders."""
    p = Path(path)
    if p.suffix.lower() not in (".png", ".pdf", ".svg"):
        raise ValueError(f"figure path must end in .png, .pdf or .svg, got {p.name!r}")
    p.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(p, dpi=dpi)
    return p
