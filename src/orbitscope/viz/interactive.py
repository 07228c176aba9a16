"""Interactive NERO plots (plotly), rendered from the same :class:`~orbitscope.analysis.nero.NeroData`
as the static figures in :mod:`orbitscope.viz.plot`, so both show the same numbers.

Conventions as in :mod:`orbitscope.viz.plot`: polar angle counter-clockwise (plotly's
``angularaxis.direction = "counterclockwise"``, rotation 0 at the right), heatmaps with the first
orbit dim along x, bands as filled areas between the lower and upper bounds; the mosaic and disk
layouts come from :mod:`orbitscope.viz.mosaic` and :mod:`orbitscope.viz.disk`, the rotation map
(``so3map``) from :mod:`orbitscope.viz.so3_map`. Every trace carries
``meta = {"series": label, "role": ...}`` so tests and the web interface can find it; roles:
``"value"``, ``"band"`` (pointwise), ``"marker"`` and, with whole-orbit statistics
(:func:`orbitscope.analysis.nero.prepare_aggregate`), ``"simultaneous-band"`` (polar and line: one
dashed trace per series, its upper bound, a gap (NaN), then its lower bound), ``"worse"`` and
``"better"`` (markers on the first series where it is significantly worse / better than the
second; heatmaps: on its panel). The heatmap's hover gives each cell's pointwise and
simultaneous intervals; the comparison's verdict and any notes are a caption under the title.
"""

from __future__ import annotations

import html
import textwrap
from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from .colour_scale import colour_scale
from ..analysis.nero import COMPARISON_COLOURS, NeroData, NeroSeries
from .disk import render_disk_plotly
from .mosaic import render_mosaic_plotly
from .so3_map import render_so3_map_plotly

__all__ = ["render_plotly", "figure_html", "caption_height", "CAPTION_WIDTH", "LEGEND_WIDTH"]

#: Characters per caption line under a plotly title (longer lines are wrapped).
CAPTION_WIDTH = 90
#: Characters per line of a band's legend entry (longer names are wrapped).
LEGEND_WIDTH = 60
#: Pixels of top margin per caption line.
_CAPTION_LINE_PX = 16
_SYMBOLS = {"worse": "triangle-down", "better": "triangle-up"}


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
    top = (100 if data.kind in ("disk", "so3map") else 70) + caption_height(data)
    fig.update_layout(title=_title(data), height=height, margin=dict(l=40, r=40, t=top, b=40),
                      legend=dict(orientation="h", y=-0.08))
    if caption_height(data):  # a title of several lines: hung from the top, into the margin made for it
        fig.update_layout(title=dict(yref="container", y=1, yanchor="top", pad=dict(t=24)))
    return fig


def _wrap(text: str, width: int) -> list[str]:
    return textwrap.wrap(text, width, break_on_hyphens=False) or [""]


def _caption(data: NeroData) -> list[str]:
    """The caption (verdict, notes) as wrapped lines."""
    return [part for line in data.caption_lines() for part in _wrap(line, CAPTION_WIDTH)]


def caption_height(data: NeroData) -> int:
    """Pixels the caption under the title adds to the figure's top margin (0 without one)."""
    return _CAPTION_LINE_PX * len(_caption(data))


def _title(data: NeroData) -> str:
    lines = _caption(data)
    return data.title + "".join(f"<br><sup>{html.escape(line)}</sup>" for line in lines)


def _legend(data: NeroData, first: bool, group: str, name: str) -> dict[str, Any]:
    """Legend settings of a band trace: with a simultaneous band, the bands of all series form
    one legend entry per method (shown on the first series); otherwise no entry."""
    if data.simultaneous_method is None:
        return {"showlegend": False}
    return {"showlegend": first, "legendgroup": group, "name": "<br>".join(_wrap(name, LEGEND_WIDTH))}


def _band_legends(data: NeroData, first: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    """Legend settings of the pointwise and the simultaneous band traces."""
    return (_legend(data, first, "pointwise-band", f"pointwise: {data.band_method or '95% interval'}"),
            _legend(data, first, "simultaneous-band", f"{data.simultaneous_method} (dashed)"))


def _gapped(s: NeroSeries) -> np.ndarray:
    """The simultaneous band as one curve: upper bound, a gap, lower bound (infinite: gaps)."""
    out = np.concatenate([np.asarray(s.sim_upper, dtype=float), [np.nan], np.asarray(s.sim_lower, dtype=float)])
    return np.where(np.isfinite(out), out, np.nan)


def _gap_coords(x: np.ndarray) -> np.ndarray:
    """The coordinates of :func:`_gapped`: the orbit's twice, with its first coordinate at the gap."""
    x = np.asarray(x)
    return np.concatenate([x, x[:1], x])


def _marks(data: NeroData, x: np.ndarray, y: np.ndarray, polar: bool) -> list[Any]:
    """The comparison's worse / better markers at flat positions of ``x``, ``y``."""
    comparison = data.comparison
    if not comparison or not data.series:
        return []
    out = []
    for role, symbol in _SYMBOLS.items():
        at = np.asarray(comparison[role], dtype=bool).ravel()
        style = dict(mode="markers", name=f"{comparison['a']} significantly {role} than {comparison['b']}",
                     marker=dict(symbol=symbol, color=COMPARISON_COLOURS[role], size=11,
                                 line=dict(color="white", width=1)),
                     meta={"series": data.series[0].label, "role": role})
        if polar:
            out.append(go.Scatterpolar(r=y[at], theta=x[at], **style,
                                       hovertemplate=f"angle %{{theta:.0f}}°<br>{role} (significant)<extra></extra>"))
        else:
            out.append(go.Scatter(x=x[at], y=y[at], **style, hovertemplate=f"{role} (significant)<extra></extra>"))
    return out


def _polar(data: NeroData) -> go.Figure:
    fig = go.Figure()
    theta = data.coords["angle"]
    for i, s in enumerate(data.series):
        point, sim = _band_legends(data, i == 0)
        if s.lower is not None and s.upper is not None:
            fig.add_trace(go.Scatterpolar(
                r=np.concatenate([s.upper, s.lower[::-1]]), theta=np.concatenate([theta, theta[::-1]]),
                fill="toself", fillcolor=_rgba(s.colour, 0.2), line=dict(width=0), hoverinfo="skip",
                meta={"series": s.label, "role": "band"}, **point))
        if s.has_simultaneous_band:
            fig.add_trace(go.Scatterpolar(
                r=_gapped(s), theta=_gap_coords(theta), mode="lines",
                line=dict(color=s.colour, width=1.2, dash="dash"),
                meta={"series": s.label, "role": "simultaneous-band"},
                hovertemplate=f"{s.label}<br>angle %{{theta:.0f}}°<br>simultaneous bound %{{r:.3f}}<extra></extra>",
                **sim))
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
    if data.series:
        for trace in _marks(data, np.asarray(theta), np.asarray(data.series[0].values, dtype=float), polar=True):
            fig.add_trace(trace)
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
    for i, s in enumerate(data.series):
        point, sim = _band_legends(data, i == 0)
        if s.lower is not None and s.upper is not None:
            fig.add_trace(go.Scatter(x=np.concatenate([x, x[::-1]]), y=np.concatenate([s.upper, s.lower[::-1]]),
                                     fill="toself", fillcolor=_rgba(s.colour, 0.2), line=dict(width=0),
                                     hoverinfo="skip", meta={"series": s.label, "role": "band"}, **point))
        if s.has_simultaneous_band:
            fig.add_trace(go.Scatter(x=_gap_coords(x), y=_gapped(s), mode="lines",
                                     line=dict(color=s.colour, width=1.2, dash="dash"),
                                     meta={"series": s.label, "role": "simultaneous-band"},
                                     hovertemplate=f"{s.label}<br>{dim} %{{x}}<br>simultaneous bound %{{y:.3f}}"
                                                   "<extra></extra>", **sim))
        fig.add_trace(go.Scatter(x=x, y=s.values, mode="lines+markers", name=s.label,
                                 line=dict(color=s.colour, width=2), meta={"series": s.label, "role": "value"}))
    if data.series:
        for trace in _marks(data, np.asarray(x), np.asarray(data.series[0].values, dtype=float), polar=False):
            fig.add_trace(trace)
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
        band, columns = "", []
        if s.lower is not None and s.upper is not None:  # the interval of every cell, in the hover
            columns += [s.lower, s.upper]
            band = f"<br>{data.band_method or '95 % interval'} [%{{customdata[0]:.3f}}, %{{customdata[1]:.3f}}]"
        if s.has_simultaneous_band:
            k = len(columns)
            columns += [s.sim_lower, s.sim_upper]
            band += (f"<br>{html.escape(data.simultaneous_method or 'simultaneous band')} "
                     f"[%{{customdata[{k}]:.3f}}, %{{customdata[{k + 1}]:.3f}}]")
        custom = np.stack([np.asarray(c).T for c in columns], -1) if columns else None
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
    if data.series:  # on the first model's panel
        gx, gy = np.meshgrid(np.asarray(data.coords[xd]), np.asarray(data.coords[yd]), indexing="ij")
        for trace in _marks(data, gx.ravel(), gy.ravel(), polar=False):
            fig.add_trace(trace, row=1, col=1)
    return fig


def figure_html(fig: go.Figure, *, include_plotlyjs: bool | str = False, div_id: str | None = None) -> str:
    """An HTML fragment for the figure (``include_plotlyjs=True`` embeds plotly.js, offline)."""
    return fig.to_html(full_html=False, include_plotlyjs=include_plotlyjs, div_id=div_id,
                       config={"displaylogo": False, "responsive": True})
