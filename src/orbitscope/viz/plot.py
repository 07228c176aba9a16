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

Whole-orbit statistics (see :func:`orbitscope.analysis.nero.prepare_aggregate`): in the polar and
line layouts the pointwise band is filled and the simultaneous band is drawn as dashed outline
curves in the series' colour (a ``LineCollection`` with gid ``"simultaneous-band"``); a paired
comparison marks the first series' curve where it is significantly worse (downward triangles,
gid ``"worse"``) or better (upward triangles, gid ``"better"``); heatmaps mark the first
model's cells the same way. A figure legend under the plot names the band methods and the marks
(the axes legend keeps one entry per model), and the comparison's verdict and any notes on
statistics that could not be computed are the figure's caption (every layout).
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any, Sequence

import numpy as np
from matplotlib.collections import LineCollection
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from .colour_scale import cell_edges, colour_scale
from ..analysis.nero import (COMPARISON_COLOURS, MODEL_COLOURS, NeroData, layout_kind, prepare_aggregate,
                             prepare_individual, rotation_quaternions)
from ..results.result import OrbitResult
from .disk import render_disk
from .mosaic import render_mosaic
from .so3_map import render_so3_map

__all__ = ["render", "nero_plot", "individual_plot", "save_figure", "MODEL_COLOURS", "SIMULTANEOUS_LAYOUTS"]

#: Layouts whose static figure draws the simultaneous band (the others show it only in the
#: interactive heatmap's hover, or not at all).
SIMULTANEOUS_LAYOUTS = ("polar", "line")
#: Layouts that mark a paired comparison on the first model's curve or panel.
_MARKED_LAYOUTS = ("polar", "line", "heatmap")
#: Layouts that already write their own caption under the panels (``supxlabel``): theirs stays,
#: and the verdict and notes go under the title instead.
_OWN_CAPTION = ("disk", "so3map")
_SIM_STYLE: dict[str, Any] = {"linestyles": (0, (4, 2)), "linewidths": 1.1}
_MARKS = {"worse": "v", "better": "^"}


def render(data: NeroData) -> Figure:
    """Draw prepared NERO data as a matplotlib figure; the comparison's verdict and the data's
    notes (:meth:`~orbitscope.analysis.nero.NeroData.caption_lines`) are its caption."""
    fig = {"polar": _polar, "line": _line, "heatmap": _heatmaps, "mosaic": render_mosaic,
           "disk": render_disk, "so3map": render_so3_map}[data.kind](data)
    width = max(40, int(fig.get_figwidth() * 15))  # characters of 8 pt text across the figure
    caption = "\n".join(textwrap.fill(line, width, break_on_hyphens=False) for line in data.caption_lines())
    if data.kind in _OWN_CAPTION:  # the verdict and notes under the title, in a smaller title font
        style: dict[str, Any] = {"fontsize": "medium"} if caption else {}
        fig.suptitle(f"{data.title}\n{caption}" if caption else data.title, **style)
    else:
        fig.suptitle(data.title)
        _key(fig, data, caption, width)
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
    simultaneous: bool = True,
    compare: bool = False,
    alpha: float = 0.05,
) -> Figure:
    """Aggregate NERO plot of one or more results (see :func:`orbitscope.analysis.nero.prepare_aggregate`).

    Args:
        level: confidence level of the bands (pointwise, and simultaneous over all elements).
        band: draw the bands; False draws the mean curves only (no band of either kind).
        simultaneous: draw the simultaneous band beside the pointwise one, in the layouts
            that show it (:data:`SIMULTANEOUS_LAYOUTS`; not computed for the others).
        compare: with exactly two results, mark where the first is significantly worse /
            better than the second (family-wise error ``alpha`` over all elements) and put the
            verdict in the caption.
    """
    seq = [results] if isinstance(results, OrbitResult) else list(results)
    try:
        drawn = bool(seq) and layout_kind(seq[0].orbit_dims, rotation_quaternions(seq)) in SIMULTANEOUS_LAYOUTS
    except ValueError:  # no layout, different rotations: prepare_aggregate says so
        drawn = False
    data = prepare_aggregate(seq, variable, labels=labels, subset=subset, level=level, marker=marker, title=title,
                             simultaneous=simultaneous and band and drawn, compare=compare, alpha=alpha)
    if not band:
        for s in data.series:
            s.lower = s.upper = s.sim_lower = s.sim_upper = None
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
    _simultaneous_bands(ax, data, theta)
    _comparison_marks(ax, data, theta)
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
    xs = np.asarray(x, dtype=float) if np.asarray(x).dtype.kind in "biuf" else np.arange(len(x), dtype=float)
    _simultaneous_bands(ax, data, xs)  # names along x: matplotlib puts them at 0, 1, ...
    _comparison_marks(ax, data, xs)
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


def _simultaneous_bands(ax: Any, data: NeroData, x: np.ndarray) -> None:
    """Each series' simultaneous band as two dashed curves (lower, upper) in its colour; an
    infinite bound (an element with one value) leaves a gap."""
    for s in data.series:
        if not s.has_simultaneous_band:
            continue
        segments = [np.column_stack([x, np.where(np.isfinite(b), b, np.nan)])
                    for b in (np.asarray(s.sim_lower, dtype=float), np.asarray(s.sim_upper, dtype=float))]
        ax.add_collection(LineCollection(segments, colors=s.colour, gid="simultaneous-band", **_SIM_STYLE),
                          autolim=False)


def _comparison_marks(ax: Any, data: NeroData, x: np.ndarray) -> None:
    """Triangles on the first series' curve where it is significantly worse / better than the second."""
    comparison = data.comparison
    if not comparison or not data.series:
        return
    values = np.asarray(data.series[0].values, dtype=float)
    for role, symbol in _MARKS.items():
        at = np.asarray(comparison[role], dtype=bool)
        ax.plot(x[at], values[at], symbol, ls="none", color=COMPARISON_COLOURS[role], ms=8, mec="white", mew=0.6,
                gid=role, label=f"_{role}", zorder=4)


def _key(fig: Figure, data: NeroData, caption: str, width: int) -> None:
    """A figure legend under the plot, titled by the caption (verdict, notes), naming the band
    methods (when a simultaneous band is drawn, so that the two can be told apart) and the
    comparison marks; nothing when there is neither."""
    handles: list[Any] = []
    names: list[str] = []
    if data.kind in SIMULTANEOUS_LAYOUTS and any(s.has_simultaneous_band for s in data.series):
        if any(s.has_band for s in data.series):
            handles.append(Patch(facecolor="0.45", alpha=0.3, lw=0))
            names.append(f"pointwise: {data.band_method or '95% interval'}")
        handles.append(Line2D([], [], color="0.3", lw=1.1, ls=(0, (4, 2))))
        names.append(data.simultaneous_method or "simultaneous band")
    comparison = data.comparison
    if comparison and data.kind in _MARKED_LAYOUTS:
        for role, symbol in _MARKS.items():
            handles.append(Line2D([], [], marker=symbol, ls="none", color=COMPARISON_COLOURS[role], ms=8))
            names.append(f"{comparison['a']} significantly {role} than {comparison['b']}")
    if not handles and not caption:
        return
    names = [textwrap.fill(n, width - 8, break_on_hyphens=False) for n in names]  # room for the handle
    lines = sum(n.count("\n") + 1 for n in names) + (caption.count("\n") + 1 if caption else 0)
    fig.set_figheight(fig.get_figheight() + 0.16 * lines)  # the plot keeps its size above the key
    key = fig.legend(handles, names, loc="outside lower center", fontsize=8, title=caption or None,
                     title_fontsize=8, alignment="left", frameon=False)
    key.set_gid("key")


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
    comparison = data.comparison
    if comparison:  # on the first model's panel, at the cells where it differs significantly
        for role, symbol in _MARKS.items():
            i, j = np.nonzero(np.asarray(comparison[role], dtype=bool))
            axes[0].plot(np.asarray(data.coords[xd])[i], np.asarray(data.coords[yd])[j], symbol, ls="none",
                         color=COMPARISON_COLOURS[role], ms=7, mec="white", mew=0.6, gid=role)
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
