"""Views of dimension-reduction embeddings: static (matplotlib) and interactive (plotly) scatters.

Both views are drawn from the same :class:`ScatterData` (see :func:`prepare_scatter`), so the web
interface and the paper figures show identical points, colours and highlights. Nothing here
computes beyond :mod:`orbitscope.analysis.reduce`: pass colours from e.g.
:func:`orbitscope.analysis.reduce.orbit_statistic` and highlights from a
:class:`orbitscope.analysis.reduce.Ranking`.

Conventions: point ``i`` is row ``i`` of ``embedding.coords`` (the result's sample order);
``highlight`` takes **positions** (row numbers), not sample ids; hover text and annotations show
sample ids. Only the first two components are drawn (a 1-component embedding is drawn at y = 0).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np
from matplotlib.figure import Figure

from ..analysis.reduce import Embedding

if TYPE_CHECKING:  # plotly is imported lazily: the static view must not need it
    import plotly.graph_objects as go

__all__ = ["ScatterData", "prepare_scatter", "scatter_figure", "scatter_plotly"]

_HIGHLIGHT_COLOUR = "#D55E00"  # Okabe-Ito vermillion: visible on viridis
#: Interactive scatter marker sizes (px): every point, a highlighted point, and its ring width.
POINT_SIZE, HIGHLIGHT_SIZE, HIGHLIGHT_RING = 8.0, 14.0, 3.0
_MAX_ANNOTATIONS = 10


@dataclass(frozen=True, eq=False)
class ScatterData:
    """Everything a scatter view draws, as plain arrays.

    Attributes:
        x, y: (n,) point coordinates (first two embedding components).
        colour: (n,) float64 colour values (NaN allowed: drawn in the colour map's "bad" colour).
        sample: (n,) sample ids.
        highlight: positions of highlighted points, in the order given.
        colour_range: (low, high) of the colour scale.
        x_label, y_label, colour_label, title: texts.
    """

    x: np.ndarray
    y: np.ndarray
    colour: np.ndarray
    sample: np.ndarray
    highlight: np.ndarray
    colour_range: tuple[float, float]
    x_label: str
    y_label: str
    colour_label: str
    title: str


def _axis_label(embedding: Embedding, i: int) -> str:
    if embedding.method == "pca":
        name = f"PC{i + 1}"
        evr = embedding.explained_variance_ratio
        if evr is not None and i < len(evr):
            name += f" ({100 * float(evr[i]):.1f}% of variance)"
        return name
    if embedding.method == "ica":
        return f"IC{i + 1}"
    return f"{embedding.label} {i + 1}"


def prepare_scatter(
    embedding: Embedding,
    colour_values: Sequence[float] | np.ndarray,
    colour_label: str,
    title: str,
    highlight: int | Sequence[int] | None = None,
    colour_range: tuple[float, float] | None = None,
) -> ScatterData:
    """Validate and collect the arrays both scatter views draw.

    Args:
        embedding: from :func:`orbitscope.analysis.reduce.embed`.
        colour_values: one value per point, e.g. the orbit mean of a metric.
        colour_label: colour bar title, e.g. ``"mean accuracy over the orbit"``.
        title: figure title.
        highlight: position(s) of points to mark (e.g. the selected sample or a ranking's top k).
        colour_range: fixed (low, high) colour scale; default the finite range of the values
            (widened by ±0.5 when all are equal).
    """
    coords = np.asarray(embedding.coords, dtype=np.float64)
    n = coords.shape[0]
    colour = np.asarray(colour_values, dtype=np.float64).reshape(-1)
    if colour.shape != (n,):
        raise ValueError(f"need one colour value per point: got {colour.shape[0]} values for {n} points")
    hl = np.atleast_1d(np.asarray([] if highlight is None else highlight, dtype=np.int64)).reshape(-1)
    if hl.size and (hl.min() < 0 or hl.max() >= n):
        raise IndexError(f"highlight positions must be in [0, {n}), got {hl.tolist()[:10]}")
    if colour_range is None:
        finite = colour[np.isfinite(colour)]
        low, high = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
        if low == high:
            low, high = low - 0.5, high + 0.5
        colour_range = (low, high)
    x = coords[:, 0].copy()
    y = coords[:, 1].copy() if coords.shape[1] > 1 else np.zeros(n)
    y_label = _axis_label(embedding, 1) if coords.shape[1] > 1 else ""
    return ScatterData(x, y, colour, np.asarray(embedding.sample), hl, (float(colour_range[0]), float(colour_range[1])),
                       _axis_label(embedding, 0), y_label, colour_label, title)


def scatter_figure(
    embedding: Embedding,
    colour_values: Sequence[float] | np.ndarray,
    colour_label: str,
    title: str,
    highlight: int | Sequence[int] | None = None,
    *,
    colour_range: tuple[float, float] | None = None,
    cmap: str = "viridis",
    figsize: tuple[float, float] = (5.6, 4.8),
) -> Figure:
    """Static scatter of an embedding (one ``PathCollection``), coloured, with a colour bar.

    Highlighted points are ringed in vermillion (drawn above all points) and labelled with their
    sample ids (the first 10). See :func:`prepare_scatter` for the arguments.
    """
    d = prepare_scatter(embedding, colour_values, colour_label, title, highlight, colour_range)
    fig = Figure(figsize=figsize, layout="constrained")
    ax = fig.add_subplot()
    points = ax.scatter(d.x, d.y, c=d.colour, cmap=cmap, vmin=d.colour_range[0], vmax=d.colour_range[1],
                        s=16, linewidths=0, plotnonfinite=True)
    fig.colorbar(points, ax=ax, label=d.colour_label)
    if d.highlight.size:
        ax.plot(d.x[d.highlight], d.y[d.highlight], linestyle="none", marker="o", markersize=11,
                markerfacecolor="none", markeredgecolor=_HIGHLIGHT_COLOUR, markeredgewidth=2, zorder=3)
        for i in d.highlight[:_MAX_ANNOTATIONS]:
            ax.annotate(str(d.sample[i]), (d.x[i], d.y[i]), xytext=(6, 6), textcoords="offset points",
                        fontsize=8, color=_HIGHLIGHT_COLOUR)
    ax.set_xlabel(d.x_label)
    ax.set_ylabel(d.y_label)
    ax.set_title(d.title)
    ax.grid(alpha=0.2)
    return fig


def scatter_plotly(
    embedding: Embedding,
    colour_values: Sequence[float] | np.ndarray,
    colour_label: str,
    title: str,
    highlight: int | Sequence[int] | None = None,
    customdata: Sequence[Any] | np.ndarray | None = None,
    *,
    colour_range: tuple[float, float] | None = None,
    colorscale: str = "Viridis",
) -> go.Figure:
    """Interactive scatter of an embedding: one ``scatter`` trace, hover shows sample id and colour.

    Args:
        customdata: per-point data returned by click/hover events (default: the sample ids); a
            2-D array puts its first column in the hover text.
        Others: see :func:`prepare_scatter`. Highlighted points get a thick vermillion outline and
            a larger marker within the same trace, plus an annotation with their sample id.
    """
    import plotly.graph_objects as go

    d = prepare_scatter(embedding, colour_values, colour_label, title, highlight, colour_range)
    n = d.x.shape[0]
    custom = d.sample if customdata is None else np.asarray(customdata)
    if custom.shape[0] != n:
        raise ValueError(f"customdata needs one entry per point: got {custom.shape[0]} for {n} points")
    size = np.full(n, POINT_SIZE)
    width = np.zeros(n)
    size[d.highlight] = HIGHLIGHT_SIZE
    width[d.highlight] = HIGHLIGHT_RING
    ref = "%{customdata[0]}" if custom.ndim > 1 else "%{customdata}"
    trace = go.Scatter(
        x=d.x, y=d.y, mode="markers", customdata=custom.tolist(),  # plain lists: plotly.js cannot read int64 typed arrays
        marker={"color": d.colour, "colorscale": colorscale, "cmin": d.colour_range[0], "cmax": d.colour_range[1],
                "size": size, "line": {"width": width, "color": _HIGHLIGHT_COLOUR},
                "colorbar": {"title": {"text": d.colour_label}}, "showscale": True},
        hovertemplate=f"sample {ref}<br>{d.colour_label}: %{{marker.color:.3g}}<extra></extra>",
        name=embedding.label,
    )
    fig = go.Figure(trace)
    for i in d.highlight[:_MAX_ANNOTATIONS]:
        fig.add_annotation(x=float(d.x[i]), y=float(d.y[i]), text=str(d.sample[i]), showarrow=True,
                           arrowcolor=_HIGHLIGHT_COLOUR, font={"color": _HIGHLIGHT_COLOUR})
    fig.update_layout(title={"text": d.title}, xaxis_title=d.x_label, yaxis_title=d.y_label,
                      template="plotly_white", clickmode="event+select", hovermode="closest")
    return fig
