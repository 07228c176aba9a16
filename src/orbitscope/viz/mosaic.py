"""NERO's mosaic layout for D4 × time reversal (PIV): a 4×4 grid of cells, one per group element.

Orbit dims ``("time_reversed", "d4")`` (shape (2, 8)): element index i = 8·time_reversed + d
(C order), d in NERO's D4 order (:data:`~orbitscope.analysis.nero.D4_NAMES`). The cells, row by
row, are the element indices of :data:`NERO_MOSAIC`: the middle two columns hold the 8 D4
elements, each time-reversed copy sits beside its partner in the outer columns. A ``("d4",)``
orbit draws only the middle two columns (a 4×2 grid).

Each model gets one grid (side by side), all with one colour scale
(:func:`~orbitscope.viz.colour_scale.colour_scale`: for errors NERO's reversed viridis, low error
bright, over the 0th–80th percentile of all models' values, pixels of maps included), stated in
the figure's caption. A cell is a flat colour with the letter "F" moved by its element (NERO's
averaged mode) when the values have no extra dims (aggregate: the mean; individual: the sample's
value), or the cell's per-pixel map when they carry two extra dims (y, x) after the orbit dims
(NERO's default PIV view; row 0 at the top, as images are displayed). A selected element
(``marker``) gets a red frame.

:func:`render_mosaic` draws with matplotlib, :func:`render_mosaic_plotly` with plotly; both place
cell (r, c) in the square [c, c + 1] × [r, r + 1] of data coordinates, y down.
"""

from __future__ import annotations

import warnings
from typing import Any, Sequence

import numpy as np
from matplotlib import colormaps
from matplotlib.cm import ScalarMappable
from matplotlib.colors import ListedColormap, Normalize
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from ..analysis.nero import D4_NAMES, NeroData
from ..group import NERO_MOSAIC  # NERO's 4×4 mosaic, row by row: the element index shown in each cell
from .colour_scale import colour_scale

__all__ = ["NERO_MOSAIC", "D4_MOSAIC", "SHORT_NAMES", "F_GLYPH", "element_glyph", "element_name", "mosaic_cells", "element_values",
           "cell_extent", "glyph_outline", "render_mosaic", "render_mosaic_plotly", "PLOTLY_MAP_SIDE"]

#: The middle two columns: the mosaic of a plain D4 orbit.
D4_MOSAIC = tuple(row[1:3] for row in NERO_MOSAIC)
#: Short D4 element names for cell labels (same order as ``D4_NAMES``).
SHORT_NAMES = ("id", "anti-diag", "rot90", "h-flip", "rot180", "diag", "rot270", "v-flip")

_SHAPES = {("time_reversed", "d4"): (2, 8), ("d4",): (8,)}
_PAD = 0.04  # gap around a cell's content (data units; a cell is 1 × 1)
_LABEL = 0.2  # strip at the top of a map cell for its label


#: the letter "F" (7 × 5, row 0 at the top): no symmetry of the square maps it to itself, so
#: its transformed copy shows which element a cell is
F_GLYPH = np.array([[1, 1, 1, 1, 1],
                    [1, 0, 0, 0, 0],
                    [1, 1, 1, 1, 0],
                    [1, 0, 0, 0, 0],
                    [1, 0, 0, 0, 0],
                    [1, 0, 0, 0, 0],
                    [1, 0, 0, 0, 0]], dtype=bool)


def element_glyph(index: int) -> np.ndarray:
    """The letter "F" moved by element ``index`` (0..15) as an image is moved (the same action
    the engine applies to inputs, on a 7 × 7 canvas, row 0 at the top); time reversal does not
    move pixels, so elements 8..15 give the glyphs of 0..7 (their cells say "(T)")."""
    import torch

    from ..group.parse import parse_orbit
    from ..kinds.base import get_kind

    canvas = np.zeros((7, 7), dtype=np.float32)
    canvas[:, 1:6] = F_GLYPH
    t = parse_orbit("d4xt").transforms()[[int(index) % 16]]
    moved = get_kind("image").act(torch.from_numpy(canvas)[None, None], t, layout="paired", interpolation="nearest")
    return moved[0, 0].numpy() > 0.5


def element_name(index: int, short: bool = False) -> str:
    """Name of element ``index`` (0..15): the D4 element, "(time reversed)" / "(T)" from 8 on."""
    d, reversed_ = int(index) % 8, int(index) >= 8
    if short:
        return SHORT_NAMES[d] + (" (T)" if reversed_ else "")
    return D4_NAMES[d] + (" (time reversed)" if reversed_ else "")


def mosaic_cells(dims: Sequence[str]) -> np.ndarray:
    """The grid of element indices for orbit dims ``dims`` (4×4, or 4×2 for a plain D4 orbit)."""
    dims = tuple(dims)
    if dims not in _SHAPES:
        raise ValueError(f"the mosaic needs orbit dims ('time_reversed', 'd4') or ('d4',), got {dims}")
    return np.array(NERO_MOSAIC if len(dims) == 2 else D4_MOSAIC, dtype=int)


def element_values(values: Any, dims: Sequence[str]) -> np.ndarray:
    """Values by element index: shape (16 or 8,) for one value per element, or (16 or 8, y, x)
    for per-pixel maps."""
    shape = _SHAPES.get(tuple(dims))
    v = np.asarray(values, dtype=float)
    if shape is None or v.shape[: len(shape)] != shape:
        raise ValueError(f"mosaic values must have orbit shape {shape} over {tuple(dims)}, got {v.shape}")
    extra = v.shape[len(shape):]
    if len(extra) not in (0, 2):
        raise ValueError(f"a mosaic cell shows one value or a (y, x) map; got extra dims of shape {extra}")
    return v.reshape(int(np.prod(shape)), *extra)


def cell_extent(r: int, c: int, map_shape: tuple[int, int] | None = None) -> tuple[float, float, float, float]:
    """(left, right, top, bottom) of cell (r, c)'s content in data coordinates (y down): the whole
    cell less a small gap for a flat cell; for a map, the largest box of the map's aspect ratio
    below the label strip, centred."""
    if map_shape is None:
        return c + _PAD, c + 1 - _PAD, r + _PAD, r + 1 - _PAD
    h, w = map_shape
    room_w, room_h = 1 - 2 * _PAD, 1 - _PAD - _LABEL
    s = min(room_w / w, room_h / h)
    x0 = c + 0.5 - s * w / 2
    y0 = r + _LABEL + (room_h - s * h) / 2
    return x0, x0 + s * w, y0, y0 + s * h


def _marked_cell(data: NeroData, grid: np.ndarray) -> tuple[int, int, int] | None:
    idx = data.marker_index()
    if idx is None:
        return None
    e = int(np.ravel_multi_index(idx, _SHAPES[tuple(data.dims)]))
    r, c = np.argwhere(grid == e)[0]
    return e, int(r), int(c)


def _text_colour(rgba: Sequence[float]) -> str:
    return "black" if 0.299 * rgba[0] + 0.587 * rgba[1] + 0.114 * rgba[2] > 0.5 else "white"


def render_mosaic(data: NeroData) -> Figure:
    """Matplotlib mosaic: one axes per model; every cell one ``AxesImage`` (gid ``"element i"``)
    with its value (1×1) or map, at :func:`cell_extent`."""
    grid = mosaic_cells(data.dims)
    nr, nc = grid.shape
    scale = colour_scale(data)
    per_model = [element_values(s.values, data.dims) for s in data.series]
    maps = per_model[0].ndim == 3
    n = len(data.series)
    size = 1.3 if maps else 0.95
    fig = Figure(figsize=(n * nc * size + 1.6, nr * size + 1.1), layout="constrained")
    axes = fig.subplots(1, n, squeeze=False)[0]
    norm, cmap = Normalize(scale.lo, scale.hi), colormaps[scale.cmap]
    marked = _marked_cell(data, grid)
    for ax, s, vals in zip(axes, data.series, per_model):
        for r in range(nr):
            for c in range(nc):
                e = int(grid[r, c])
                name = element_name(e, short=True)
                if maps:
                    left, right, top, bottom = cell_extent(r, c, vals[e].shape)
                    image = vals[e]
                else:
                    left, right, top, bottom = cell_extent(r, c)
                    image = np.array([[vals[e]]])
                im = ax.imshow(image, cmap=cmap, norm=norm, extent=(left, right, bottom, top), origin="upper",
                               interpolation="nearest", aspect="auto")
                im.set_gid(f"element {e}")
                if maps:
                    ax.text(c + 0.5, r + (_LABEL + _PAD) / 2, name, ha="center", va="center", fontsize=6.5)
                else:
                    colour = _text_colour(cmap(norm(vals[e]))) if np.isfinite(vals[e]) else "black"
                    ax.text(c + 0.5, r + 0.62, f"{name}\n{vals[e]:.3g}", ha="center", va="center", fontsize=7,
                            color=colour)
                    glyph = np.ma.masked_where(~element_glyph(e), np.ones((7, 7)))  # the element, readable
                    g = ax.imshow(glyph, cmap=ListedColormap([colour]), vmin=0, vmax=1, interpolation="nearest",
                                  extent=(c + 0.38, c + 0.62, r + 0.36, r + 0.12), aspect="auto")
                    g.set_gid(f"glyph {e}")
        if marked is not None:
            _, r, c = marked
            ax.add_patch(Rectangle((c + _PAD / 2, r + _PAD / 2), 1 - _PAD, 1 - _PAD, fill=False, ec="red", lw=2.2))
        ax.set_xlim(0, nc)
        ax.set_ylim(nr, 0)
        ax.set_aspect("equal")
        ax.set_xticks([])
        ax.set_yticks([])
        for spine in ax.spines.values():
            spine.set_visible(False)
        ax.set_title(s.label, fontsize=10)
        if nc == 4:
            ax.set_xlabel("middle: D4 · outer: time reversed (T)" + ("" if maps else " · F: the element"), fontsize=7)
    fig.colorbar(ScalarMappable(norm=norm, cmap=cmap), ax=list(axes), label=data.metric_label, shrink=0.85)
    fig.supxlabel(scale.rule, fontsize=7, color="#444")
    return fig


def _downsample(m: np.ndarray, max_side: int) -> np.ndarray:
    """Block means (NaN-aware) so that neither side exceeds ``max_side`` pixels."""
    h, w = m.shape
    k = int(np.ceil(max(h, w) / max_side)) if max_side else 1
    if k <= 1:
        return m
    hp, wp = -(-h // k) * k, -(-w // k) * k
    padded = np.full((hp, wp), np.nan)
    padded[:h, :w] = m
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN blocks stay NaN
        return np.nanmean(padded.reshape(hp // k, k, wp // k, k), axis=(1, 3))


def glyph_outline(index: int, left: float, top: float, pixel: float) -> tuple[list[float | None], list[float | None]]:
    """The letter "F" moved by element ``index`` (:func:`element_glyph`) as closed rectangles,
    one per run of set pixels in a row, for a plotly scatter with ``fill="toself"``: x and y
    lists (y down) with None between the rectangles; glyph pixel (i, j) spans
    [left + j·pixel, left + (j + 1)·pixel] × [top + i·pixel, top + (i + 1)·pixel]."""
    xs: list[float | None] = []
    ys: list[float | None] = []
    for i, row in enumerate(element_glyph(index)):
        j = 0
        while j < len(row):
            if not row[j]:
                j += 1
                continue
            k = j
            while k < len(row) and row[k]:
                k += 1
            x0, x1, y0, y1 = left + j * pixel, left + k * pixel, top + i * pixel, top + (i + 1) * pixel
            xs += [x0, x1, x1, x0, x0, None]
            ys += [y0, y0, y1, y1, y0, None]
            j = k
    return xs, ys


#: Most pixels a side of a map cell in the plotly mosaic (block means; the interface's cells are
#: about 50 screen pixels wide, and two models' 16 maps of 64 × 64 would be ~1.8 MB of JSON).
PLOTLY_MAP_SIDE = 32


def render_mosaic_plotly(data: NeroData, *, max_side: int = PLOTLY_MAP_SIDE) -> Any:
    """Plotly mosaic: one subplot per model, one shared ``coloraxis``. Flat cells: one heatmap
    per model (``meta["elements"]`` = the grid of element indices, ``z`` row by row) and the
    moved letters "F" (scatter traces, ``meta["role"] == "glyph"``, black or white against the
    cell's colour); maps: one heatmap per cell (``meta["element"]``, ``meta["cell"]``),
    block-averaged to at most ``max_side`` pixels a side to keep the page small (the colour
    range is taken from the full maps). A marker is a
    closed red line (``meta["role"] == "marker"``). The colour rule
    (:attr:`~orbitscope.viz.colour_scale.ColourScale.rule`) is an annotation under the plots
    (``name="colour-rule"``)."""
    from plotly import graph_objects as go
    from plotly.subplots import make_subplots

    grid = mosaic_cells(data.dims)
    nr, nc = grid.shape
    scale = colour_scale(data)
    per_model = [element_values(s.values, data.dims) for s in data.series]
    maps = per_model[0].ndim == 3
    n = len(data.series)
    fig = make_subplots(rows=1, cols=n, subplot_titles=[s.label for s in data.series], horizontal_spacing=0.04)
    names = [[element_name(int(e), short=True) for e in row] for row in grid]
    marked = _marked_cell(data, grid)
    for i, (s, vals) in enumerate(zip(data.series, per_model), start=1):
        if maps:
            for r in range(nr):
                for c in range(nc):
                    e = int(grid[r, c])
                    left, right, top, bottom = cell_extent(r, c, vals[e].shape)
                    z = _downsample(vals[e], max_side)
                    dx, dy = (right - left) / z.shape[1], (bottom - top) / z.shape[0]
                    fig.add_trace(go.Heatmap(
                        z=z, x0=left + dx / 2, dx=dx, y0=top + dy / 2, dy=dy, coloraxis="coloraxis",
                        meta={"series": s.label, "role": "value", "element": e, "cell": [r, c]},
                        hovertemplate=f"{element_name(e)}<br>{data.metric_label} %{{z:.4g}}<extra>{s.label}</extra>"),
                        row=1, col=i)
            fig.add_trace(go.Scatter(
                x=[c + 0.5 for r in range(nr) for c in range(nc)],
                y=[r + (_LABEL + _PAD) / 2 for r in range(nr) for c in range(nc)],
                text=[names[r][c] for r in range(nr) for c in range(nc)], mode="text", textfont=dict(size=9),
                hoverinfo="skip", showlegend=False, meta={"series": s.label, "role": "label"}), row=1, col=i)
        else:
            z = vals[grid]
            fig.add_trace(go.Heatmap(
                z=z, x=np.arange(nc) + 0.5, y=np.arange(nr) + 0.5, xgap=3, ygap=3, coloraxis="coloraxis",
                text=names, texttemplate="%{text}<br>%{z:.3g}", customdata=grid,
                meta={"series": s.label, "role": "value", "elements": grid.tolist()},
                hovertemplate=f"%{{text}}<br>{data.metric_label} %{{z:.4g}}<extra>{s.label}</extra>"),
                row=1, col=i)
            norm, cmap = Normalize(scale.lo, scale.hi), colormaps[scale.cmap]
            glyphs: dict[str, tuple[list[Any], list[Any]]] = {}
            for r in range(nr):
                for c in range(nc):
                    e = int(grid[r, c])
                    colour = _text_colour(cmap(norm(vals[e]))) if np.isfinite(vals[e]) else "black"
                    gx, gy = glyph_outline(e, c + 0.4, r + 0.1, 0.2 / 7)
                    glyphs.setdefault(colour, ([], []))[0].extend(gx)
                    glyphs[colour][1].extend(gy)
            for colour, (gx, gy) in glyphs.items():
                fig.add_trace(go.Scatter(x=gx, y=gy, mode="lines", fill="toself", fillcolor=colour,
                                         line=dict(width=0, color=colour), hoverinfo="skip", showlegend=False,
                                         meta={"series": s.label, "role": "glyph"}), row=1, col=i)
        if marked is not None:
            e, r, c = marked
            x0, x1, y0, y1 = c + _PAD / 2, c + 1 - _PAD / 2, r + _PAD / 2, r + 1 - _PAD / 2
            fig.add_trace(go.Scatter(x=[x0, x1, x1, x0, x0], y=[y0, y0, y1, y1, y0], mode="lines",
                                     line=dict(color="red", width=3), hoverinfo="skip", showlegend=False,
                                     meta={"series": s.label, "role": "marker", "element": e}), row=1, col=i)
        axis = dict(showgrid=False, zeroline=False, showticklabels=False)
        fig.update_xaxes(range=[0, nc], constrain="domain", **axis, row=1, col=i)
        fig.update_yaxes(range=[nr, 0], scaleanchor=f"x{i if i > 1 else ''}", constrain="domain", **axis,
                         row=1, col=i)
    fig.update_layout(coloraxis=dict(colorscale=scale.plotly_scale, reversescale=scale.reverse, cmin=scale.lo,
                                     cmax=scale.hi, colorbar=dict(title=dict(text=data.metric_label))),
                      plot_bgcolor="white")
    fig.add_annotation(text=scale.rule, name="colour-rule", xref="paper", yref="paper", x=1.0, y=0.0,
                       xanchor="right", yanchor="top", yshift=-2, showarrow=False, font=dict(size=10, color="#444"))
    return fig
