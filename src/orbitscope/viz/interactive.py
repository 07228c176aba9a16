"""Interactive NERO plots (plotly), rendered from the same :class:`~orbitscope.analysis.nero.NeroData`
as the static figures in :mod:`orbitscope.viz.plot`, so both show the same numbers.

Conventions as in :mod:`orbitscope.viz.plot`: polar angle counter-clockwise (plotly's
``angularaxis.direction = "counterclockwise"``, rotation 0 at the right), heatmaps with the first
orbit dim along x, bands as filled areas between the lower and upper bounds; the mosaic and disk
layouts come from :mod:`orbitscope.viz.mosaic` and :mod:`orbitscope.viz.disk`, the rotation map
(``so3map``) from :mod:`orbitscope.viz.so3_map`. Every trace carries
``meta = {"series": label, "role": "value" | "band" | "marker"}`` so tests and the web interface
can find it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from .colour_scale import colour_scale
from ..analysis.nero import NeroData
from .disk import render_disk_plotly
from .mosaic import render_mosaic_plotly
from .so3_map import render_so3_map_plotly

__all__ = ["render_plotly", "figure_html"]


def _rgba(hex_colour: str, alpha: float) -> str:
    h = hex_colour.lstrip("#")
    r, g, b = (int(h[i : i + 2], 16) for i in (0, 2, 4))
    return f"rgba({r},{g},{b},{alpha})"


def render_plotly(data: NeroData, *, height: int | None = None) -> go.Figure:
    """Draw prepared NERO data as a plotly figure (default height 480 px; disks: 300 px a model;
    rotation maps: 210 px a model)."""
    fig = {"polar": _polar, "line": _line, "heatmap": _heatmaps, "mosaic": render_mosaic_plotly,
           "disk": render_disk_plotly, "so3map": render_so3_map_plotly}[data.kind](data)
    if height is None:
        height = {"disk": 300 * len(data.series) + 120, "so3map": 210 * len(data.series) + 170}.get(data.kind, 480)
    fig.update_layout(title=data.title, height=height,
                      margin=dict(l=40, r=40, t=100 if data.kind in ("disk", "so3map") else 70, b=40),
                      legend=dict(orientation="h", y=-0.08))
    return fig


def _polar(data: NeroData) -> go.Figure:
    fig = go.Figure()
    theta = data.coords["angle"]
    for s in data.series:
        if s.lower is not None and s.upper is not None:
            fig.add_trace(go.Scatterpolar(
                r=np.concatenate([s.upper, s.lower[::-1]]), theta=np.concatenate([theta, theta[::-1]]),
                fill="toself", fillcolor=_rgba(s.colour, 0.2), line=dict(width=0), hoverinfo="skip",
                showlegend=False, meta={"series": s.label, "role": "band"}))
        fig.add_trace(go.Scatterpolar(
            r=s.values, theta=theta, mode="lines", name=s.label, line=dict(color=s.colour, width=2),
            meta={"series": s.label, "role": "value"},
            hovertemplate=f"{s.label}<br>angle %{{theta:.0f}}°<br>{data.metric_label} %{{r:.3f}}<extra></extra>"))
    idx = data.marker_index()
    if idx is not None:
        for s in data.series:
            fig.add_trace(go.Scatterpolar(r=[s.values[idx]], theta=[theta[idx[0]]], mode="markers",
                                          marker=dict(color=s.colour, size=10, line=dict(color="white", width=1)),
                                          showlegend=False, meta={"series": s.label, "role": "marker"}))
    radial: dict[str, Any] = dict(range=list(data.value_range)) if data.value_range else {}
    if data.value_range == (0.0, 1.0):
        radial["tickvals"] = [0.2, 0.4, 0.6, 0.8]
    fig.update_layout(polar=dict(radialaxis=radial, angularaxis=dict(direction="counterclockwise", rotation=0,
                                                                      dtick=45)))
    return fig


def _line(data: NeroData) -> go.Figure:
    fig = go.Figure()
    (dim,) = data.dims
    x = data.coords[dim]
    for s in data.series:
        if s.lower is not None and s.upper is not None:
            fig.add_trace(go.Scatter(x=np.concatenate([x, x[::-1]]), y=np.concatenate([s.upper, s.lower[::-1]]),
                                     fill="toself", fillcolor=_rgba(s.colour, 0.2), line=dict(width=0),
                                     hoverinfo="skip", showlegend=False, meta={"series": s.label, "role": "band"}))
        fig.add_trace(go.Scatter(x=x, y=s.values, mode="lines+markers", name=s.label,
                                 line=dict(color=s.colour, width=2), meta={"series": s.label, "role": "value"}))
    idx = data.marker_index()
    if idx is not None:
        fig.add_vline(x=float(x[idx[0]]), line_dash="dash", line_color="grey")
    fig.update_xaxes(title=dim)
    fig.update_yaxes(title=data.metric_label, range=list(data.value_range) if data.value_range else None)
    return fig


def _heatmaps(data: NeroData) -> go.Figure:
    xd, yd = data.dims
    n = len(data.series)
    fig = make_subplots(rows=1, cols=n, subplot_titles=[s.label for s in data.series], horizontal_spacing=0.08)
    scale = colour_scale(data)  # shared by the models; reversed (low = bright) for errors, as NERO
    idx = data.marker_index()
    for i, s in enumerate(data.series, start=1):
        band, custom = "", None
        if s.lower is not None and s.upper is not None:  # the interval of every cell, in the hover
            custom = np.stack([np.asarray(s.lower).T, np.asarray(s.upper).T], -1)
            band = f"<br>{data.band_method or '95 % interval'} [%{{customdata[0]:.3f}}, %{{customdata[1]:.3f}}]"
        fig.add_trace(go.Heatmap(
            x=data.coords[xd], y=data.coords[yd], z=np.asarray(s.values).T, zmin=scale.lo, zmax=scale.hi,
            colorscale="Viridis", reversescale=scale.reverse, customdata=custom,
            showscale=i == n, colorbar=dict(title=data.metric_label), meta={"series": s.label, "role": "value"},
            hovertemplate=f"{xd} %{{x}}<br>{yd} %{{y}}<br>{data.metric_label} %{{z:.3f}}{band}<extra>{s.label}</extra>"),
            row=1, col=i)
        if idx is not None:
            fig.add_trace(go.Scatter(x=[data.coords[xd][idx[0]]], y=[data.coords[yd][idx[1]]], mode="markers",
                                     marker=dict(symbol="x", color="red", size=12), showlegend=False,
                                     meta={"series": s.label, "role": "marker"}), row=1, col=i)
        fig.update_xaxes(title=xd, row=1, col=i)
        fig.update_yaxes(title=yd, autorange="reversed" if yd == "ty" else True, row=1, col=i)
    return fig


def figure_html(fig: go.Figure, *, include_plotlyjs: bool | str = False, div_id: str | None = None) -> str:
    """An HTML fragment for the figure (``include_plotlyjs=True`` embeds plotly.js, offline)."""
    return fig.to_html(full_html=False, include_plotlyjs=include_plotlyjs, div_id=div_id,
                       config={"displaylogo": False, "responsive": True})
