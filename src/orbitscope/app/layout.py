"""The page: selectors, then NERO's levels side by side (aggregate → dimension reduction →
individual → detail). Task-agnostic: the detail panels are filled by the group's
:class:`~orbitscope.app.views.TaskView`.

Component ids are module constants (tests and the browser test use them); per-model components
use pattern-matching ids ``{"type": ..., "index": i}`` for the comparison slots ``0 …
MAX_MODELS - 1``, which all exist from the start and are hidden when unused, so the callback
graph never changes shape.
"""

from __future__ import annotations

from typing import Any

from dash import dcc, html

from ..analysis.reduce import METHODS
from .data import MAX_MODELS, AppData, AppError
from .callbacks import CELL_MODES, N_LIVE
from ..lie.run import is_lee_run
from .labelling_logic import has_zoo_models

__all__ = ["build_layout", "slot_id", "aggregate_options", "mosaic_options"]

GROUP, MODELS, METRIC, SUBSET = "group", "models", "metric", "subset"
METHOD, COLOUR, RANK_BY, LABEL_FREE = "method", "colour", "rank-by", "label-free"
SIMULTANEOUS, COMPARE, COMPARE_ROW = "simultaneous", "compare", "compare-row"
CELLS, CELLS_ROW, CELLS_NOTE = "mosaic-cells", "mosaic-cells-row", "mosaic-cells-note"
STATUS, SELECTION, AGGREGATE, INDIVIDUAL = "status", "selection", "aggregate", "individual"
DETAIL_STORED, DETAIL_LIVE = "detail-stored", "detail-live"

_CARD = {"border": "1px solid #e3e3e3", "borderRadius": "6px", "padding": "8px", "background": "white"}
_LABEL = {"fontSize": "12px", "color": "#555", "display": "block", "marginBottom": "2px"}
# a spinner only for slow updates (a cold t-SNE/UMAP embedding), over content that stays visible
_LOADING: dict[str, Any] = {"type": "circle", "delay_show": 400, "overlay_style": {"visibility": "visible", "opacity": 0.6}}
_METHOD_LABELS = {"pca": "PCA", "ica": "ICA", "isomap": "Isomap", "tsne": "t-SNE", "umap": "UMAP"}


def slot_id(kind: str, index: int) -> dict[str, Any]:
    """Pattern-matching id of a per-model (or per-live-dim) component."""
    return {"type": kind, "index": index}


def _field(label: str, control: Any, width: str) -> html.Div:
    return html.Div([html.Label(label, style=_LABEL), control], style={"width": width, "minWidth": "120px"})


def _selectors(data: AppData) -> tuple[html.Div, str | None]:
    try:
        groups = data.groups()
        problem = None if groups else f"no runs in the store {data.home} yet: evaluate a model first"
    except AppError as exc:
        groups, problem = [], str(exc)
    group_options = [{"label": g.label, "value": g.key} for g in groups]
    row = html.Div([
        _field("run group (data · orbit)", dcc.Dropdown(id=GROUP, options=group_options,
                                                        value=groups[0].key if groups else None, clearable=False),
               "26%"),
        _field(f"models to compare (up to {MAX_MODELS}; order = colour)",
               dcc.Dropdown(id=MODELS, options=[], value=[], multi=True), "30%"),
        _field("metric", dcc.Dropdown(id=METRIC, options=[], value=None, clearable=False), "13%"),
        _field("class subset", dcc.Dropdown(id=SUBSET, options=[{"label": "all samples", "value": "all"}],
                                            value="all", clearable=False), "9%"),
        _field("label-free", dcc.Checklist(id=LABEL_FREE, options=[{"label": " consensus", "value": "on"}],
                                           value=[]), "8%"),
    ], style={"display": "flex", "gap": "10px", "alignItems": "flex-end", "flexWrap": "wrap"})
    return row, problem


def aggregate_options() -> html.Div:
    """The aggregate plot's toggles (both off at first): the simultaneous band, and (shown only
    while exactly two models are compared) the marks of significant differences."""
    compare = html.Div(dcc.Checklist(id=COMPARE, options=[{"label": " mark significant differences", "value": "on"}],
                                     value=[], inline=True), id=COMPARE_ROW, style={"display": "none"})
    return html.Div([
        dcc.Checklist(id=SIMULTANEOUS, options=[{"label": " simultaneous band", "value": "on"}], value=[], inline=True),
        compare,
    ], style={"display": "flex", "gap": "14px"})


def mosaic_options() -> html.Div:
    """The mosaic's cell mode, hidden until the compared runs' view offers per-pixel maps
    (:meth:`~orbitscope.app.views.TaskView.pixel_mode`; e.g. flow runs over D4 × time
    reversal): per-pixel maps (NERO's default) or each element's mean; the note says why the
    maps are off (the tooltip too)."""
    return html.Div(_field("mosaic cells", html.Div([
        dcc.RadioItems(id=CELLS, options=[{"label": label, "value": value} for value, label in CELL_MODES],
                       value=CELL_MODES[0][0], inline=True, inputStyle={"marginLeft": "8px"}),
        html.Div(id=CELLS_NOTE, style={"fontSize": "11px", "color": "#666", "maxWidth": "420px"}),
    ]), "auto"), id=CELLS_ROW, style={"display": "none"})


def _scatter_slot(i: int) -> html.Div:
    button = {"padding": "2px 8px", "fontSize": "12px"}
    return html.Div(id=slot_id("panel", i), style={**_CARD, "display": "none"}, children=[
        html.Div(id=slot_id("panel-title", i), style={"fontWeight": "600", "fontSize": "13px"}),
        dcc.Graph(id=slot_id("scatter", i), config={"displaylogo": False}, style={"height": "300px"}),
        html.Div([
            html.Button("◀ prev", id=slot_id("prev", i), n_clicks=0, style=button, title="worse sample"),
            html.Div(dcc.Slider(id=slot_id("rank", i), min=1, max=1, step=1, value=1, marks=None,
                                tooltip={"placement": "bottom"}), style={"flex": "1"}),
            html.Button("next ▶", id=slot_id("next", i), n_clicks=0, style=button, title="better sample"),
            html.Span(id=slot_id("rank-label", i), style={"fontFamily": "monospace", "minWidth": "64px"}),
        ], style={"display": "flex", "alignItems": "center", "gap": "6px"}),
    ])


def _live_slot(j: int) -> html.Div:
    """One live control: a continuous slider, or (marks set, no typed input) a choice among the
    sampled elements of a discrete dim; filled per run group by the server."""
    return html.Div(id=slot_id("live-row", j), style={"display": "none"}, children=[
        html.Span(id=slot_id("live-label", j), style={"fontSize": "12px", "color": "#555"}),
        html.Div(dcc.Slider(id=slot_id("live", j), min=0, max=1, step=1, value=0, marks=None, updatemode="drag"),
                 style={"padding": "0 28px 0 18px"}),  # room for the end marks' labels
    ])


def _has_lee_runs(data: AppData) -> bool:
    try:
        return any(is_lee_run(r) for r in data.catalog().values())
    except AppError:
        return False


def build_layout(data: AppData) -> html.Div:
    """The whole page (built per page load, so new runs appear on reload)."""
    selectors, problem = _selectors(data)
    view_options = html.Div([
        _field("dimension reduction", dcc.RadioItems(
            id=METHOD, options=[{"label": f" {_METHOD_LABELS.get(m, m)}", "value": m} for m in METHODS],
            value="pca", inline=True, inputStyle={"marginLeft": "8px"}), "auto"),
        _field("colour points by orbit", dcc.RadioItems(
            id=COLOUR, options=[{"label": " mean", "value": "mean"}, {"label": " variance", "value": "variance"}],
            value="mean", inline=True, inputStyle={"marginLeft": "8px"}), "auto"),
        _field("rank samples by", dcc.RadioItems(
            id=RANK_BY, options=[{"label": " worst orbit mean", "value": "worst"},
                                 {"label": " most variable", "value": "most_variable"},
                                 {"label": " furthest behind the other model", "value": "behind_other"}],
            value="worst", inline=True, inputStyle={"marginLeft": "8px"}), "auto"),
        _field("aggregate plot (whole-orbit statistics)", aggregate_options(), "auto"),
        mosaic_options(),
    ], style={"display": "flex", "gap": "24px", "marginTop": "6px", "flexWrap": "wrap"})
    header = html.Div([
        html.Span("orbitscope", style={"fontWeight": "700", "fontSize": "20px"}),
        html.Span(f" · NERO interface · store {data.home}", style={"color": "#666"}),
        *([html.A("label models →", id="label-link", href="/label/", style={"fontSize": "13px"})]
          if has_zoo_models(data.store) else []),
        *([html.A("Lie derivative (LEE) →", id="lee-link", href="/lee/", style={"fontSize": "13px"})]
          if _has_lee_runs(data) else []),
        html.Div(problem or "", id=STATUS, style={"color": "#B00020", "marginLeft": "auto", "fontSize": "13px"}),
    ], style={"display": "flex", "alignItems": "baseline", "gap": "8px", "marginBottom": "6px"})
    aggregate = html.Div(dcc.Graph(id=AGGREGATE, config={"displaylogo": False}), style=_CARD)
    scatters = html.Div([_scatter_slot(i) for i in range(MAX_MODELS)],
                        style={"display": "grid", "gridTemplateColumns": "repeat(2, minmax(0, 1fr))", "gap": "8px"})
    individual = html.Div(dcc.Graph(id=INDIVIDUAL, config={"displaylogo": False}), style=_CARD)
    detail = html.Div([
        dcc.Loading(html.Div(id=DETAIL_STORED), **_LOADING),
        html.Hr(style={"margin": "6px 0"}),
        *[_live_slot(j) for j in range(N_LIVE)],
        html.Div(id=DETAIL_LIVE),
    ], style=_CARD)
    return html.Div([
        dcc.Store(id=SELECTION, data=None),
        header,
        html.Div([selectors, view_options], style={**_CARD, "marginBottom": "8px"}),
        html.Div([aggregate, dcc.Loading(scatters, **_LOADING)],
                 style={"display": "grid", "gridTemplateColumns": "minmax(0, 2fr) minmax(0, 3fr)", "gap": "8px"}),
        html.Div([individual, detail], style={"display": "grid", "gap": "8px", "marginTop": "8px",
                                              "gridTemplateColumns": "minmax(0, 2fr) minmax(0, 3fr)"}),
    ], style={"fontFamily": "system-ui, -apple-system, Segoe UI, Roboto, sans-serif", "padding": "10px",
              "background": "#f7f7f8", "minHeight": "100vh"})
