"""What the interface computes per interaction, as plain functions (no Dash callback context).

Each function takes the :class:`~orbitscope.app.data.AppData` and JSON-able values (what the
browser sends) and returns JSON-able values or Dash components; :mod:`orbitscope.app.server`
wires them to the page. None of them raises for bad input: an
:class:`~orbitscope.app.data.AppError` becomes a message (in the status line, or drawn in the
figure's place). Figures are returned as dicts and cached per (data version, selection), so
repeating an interaction costs a cache lookup.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable, Sequence

import numpy as np

from ..viz.interactive import caption_height, render_plotly
from ..analysis.nero import NeroData, metric_label, prepare_aggregate, prepare_individual
from ..analysis.reduce import METHODS
from ..viz.disk import plane_names
from ..viz.reduce_plots import HIGHLIGHT_RING, HIGHLIGHT_SIZE, POINT_SIZE, scatter_plotly
from .data import MAX_MODELS, AppData, AppError, Context, metric_choices
from .state import (
    COLOUR_STATS, RANK_BY, Event, LiveDim, Selection, apply_event, element_from_click, live_dims, rank_label,
    single_element_orbit, snap_element,
)
from .views import DetailRequest, PixelMode, view_for

__all__ = [
    "GroupControls",
    "SelectionUpdate",
    "aggregate_figure",
    "checked",
    "compare_available",
    "group_controls",
    "individual_figure",
    "live_detail",
    "message_figure",
    "metric_controls",
    "parse_controls",
    "pixel_controls",
    "scatter_panels",
    "set_cell_mode",
    "set_toggles",
    "stored_detail",
    "update_selection",
]

N_LIVE = 3  # live-element controls on the page (one per orbit dim; further dims keep the selected value)


def message_figure(message: str, height: int = 320) -> dict[str, Any]:
    """An empty figure that shows ``message`` in its middle."""
    return {"data": [], "layout": {"height": height, "xaxis": {"visible": False}, "yaxis": {"visible": False},
                                   "annotations": [{"text": message, "showarrow": False, "x": 0.5, "y": 0.5,
                                                    "xref": "paper", "yref": "paper", "font": {"size": 13}}],
                                   "template": "plotly_white", "meta": {"message": message}}}


# --------------------------------------------------------------------------- controls


@dataclass(frozen=True)
class GroupControls:
    """Selector contents for one run group."""

    model_options: list[dict[str, Any]]
    models: list[str]
    subset_options: list[dict[str, Any]]
    live: list[LiveDim]
    message: str | None = None


def group_controls(data: AppData, group_key: Any) -> GroupControls:
    """Models (runs with samples; running ones marked), classes and live controls of a group;
    the first two runs with samples are preselected."""
    try:
        group = data.group(group_key)
    except AppError as exc:
        return GroupControls([], [], [{"label": "all samples", "value": "all"}], [], str(exc))
    options = [{"label": r.label, "value": r.run_id, "disabled": r.chunks_done == 0} for r in group.runs]
    usable = [r.run_id for r in group.runs if r.chunks_done > 0]
    subsets, live, message = [{"label": "all samples", "value": "all"}], [], None
    try:
        first = data.result(usable[0]) if usable else None
        if first is not None:
            view = view_for(group.task_kind)
            subsets += [{"label": label, "value": value} for label, value in view.subset_options([first])]
            live = live_dims(first.orbit) if view.supports_live([first]) else []
    except AppError as exc:
        message = str(exc)
    return GroupControls(options, usable[:2], subsets, live, message)


def metric_controls(data: AppData, group_key: Any, runs: Sequence[str], label_free: bool,
                    current: str | None) -> tuple[list[dict[str, str]], str | None, str | None]:
    """``(options, value, message)`` of the metric selector for the selected runs; keeps the
    current metric when it is still available."""
    try:
        view = view_for(data.group(group_key).task_kind)
        results = [data.result(r) for r in runs[:MAX_MODELS]]
        if not results:
            return [], None, None
        options = metric_choices(view, results, label_free)
        if label_free and not view.label_free_available(results):
            return [], None, view.label_free_unavailable(results)
    except AppError as exc:
        return [], None, str(exc)
    values = [v for v, _ in options]
    value = current if current in values else view.default_metric(options, label_free)
    return [{"label": label, "value": v} for v, label in options], value, None


def checked(value: Any) -> bool:
    """Whether a one-option toggle (a ``dcc.Checklist`` with the option ``"on"``) is on: its
    value as the browser sends it (a list), or a bool; anything else is off."""
    return value is True or (isinstance(value, (list, tuple)) and "on" in value)


def compare_available(models: Any) -> bool:
    """Whether the paired comparison can be offered: exactly two distinct runs are selected."""
    runs = [m for m in (models if isinstance(models, (list, tuple)) else []) if isinstance(m, str)]
    return len(set(runs)) == 2 == len(runs)


def parse_controls(group: Any, models: Any, metric: Any, subset: Any, method: Any, colour: Any, rank_by: Any,
                   label_free: Any) -> Selection:
    """The selector values sent by the browser, checked (anything malformed becomes a default
    that the data layer then reports, never an exception)."""
    runs = tuple(m for m in (models if isinstance(models, list) else [models] if models else [])
                 if isinstance(m, str))[:64]
    try:
        cls = None if subset in (None, "all", "") else int(subset)
    except (TypeError, ValueError, OverflowError):  # OverflowError: inf (JSON 1e999)
        cls = None
    if cls is not None and not -2**31 <= cls < 2**31:  # no class has such a number
        cls = None
    return Selection(
        group=group if isinstance(group, str) else None, runs=runs,
        metric=metric if isinstance(metric, str) else None, subset=cls,
        method=method if method in METHODS else "pca", colour=colour if colour in COLOUR_STATS else "mean",
        rank_by=rank_by if rank_by in RANK_BY else "worst",
        label_free=checked(label_free),
    )


# --------------------------------------------------------------------------- selection


@dataclass(frozen=True)
class SelectionUpdate:
    """New selection and the ranking sliders' state (one entry per slot; unused slots: rank 1
    of 1 and an empty label). ``live`` holds new live-slider values (None: leave as is)."""

    selection: dict[str, Any]
    ranks: list[int]
    maxima: list[int]
    labels: list[str]
    live: list[float | None]
    message: str


def _rank_of(ranking: Any, sample: int | None) -> int | None:
    hits = np.flatnonzero(np.asarray(ranking.sample) == sample) if sample is not None else np.empty(0)
    return int(hits[0]) + 1 if hits.size else None


def update_selection(data: AppData, previous: Any, controls: Selection, event: Event) -> SelectionUpdate:
    """Fold a user action into the selection and re-derive the ranking sliders from it.

    The sliders are outputs of the selection, never its owners: each shows the selected sample's
    rank in its model's ranking, so moving one moves the others to the same sample.
    """
    prev = Selection.from_dict(previous)
    # the sample, the element and the aggregate plot's toggles are kept (set by their own events)
    sel = replace(controls, sample=prev.sample, element=prev.element, simultaneous=prev.simultaneous,
                  compare=prev.compare, averaged=prev.averaged)
    empty = ([1] * MAX_MODELS, [1] * MAX_MODELS, [""] * MAX_MODELS, [None] * N_LIVE)
    try:
        ctx = data.context(sel)
        rankings = data.rankings(ctx, sel.rank_by)
    except AppError as exc:
        failed = replace(sel, sample=None, element=None, message=str(exc))
        return SelectionUpdate(failed.to_dict(), *empty, str(exc))
    if event.kind == "element" and isinstance(event.value, dict) and "points" in event.value:
        event = replace(event, value=element_from_click(event.value, ctx.dims, ctx.coords))
    sel = apply_event(sel, event, rankings, ctx.coords, ctx.default_element)
    ranks, maxima, labels = list(empty[0]), list(empty[1]), list(empty[2])
    for i, ranking in enumerate(rankings[:MAX_MODELS]):
        k = _rank_of(ranking, sel.sample)
        ranks[i], maxima[i], labels[i] = k or 1, max(len(ranking), 1), rank_label(k, len(ranking))
    live: list[float | None] = [None] * N_LIVE
    if sel.element != prev.element:  # a new element (or the first): the live slider starts there
        for j, (_, value) in enumerate((sel.element or ())[:N_LIVE]):
            live[j] = value
    return SelectionUpdate(sel.to_dict(), ranks, maxima, labels, live, sel.message or "")


def set_toggles(selection: Any, simultaneous: Any, compare: Any) -> dict[str, Any]:
    """The selection with the aggregate plot's toggles set from their values (see :func:`checked`)."""
    sel = Selection.from_dict(selection)
    return replace(sel, simultaneous=checked(simultaneous), compare=checked(compare)).to_dict()


#: The mosaic's cell modes: (value, label); per-pixel maps first (NERO's default).
CELL_MODES = (("maps", " per-pixel maps"), ("averaged", " averaged"))


def set_cell_mode(selection: Any, mode: Any) -> dict[str, Any]:
    """The selection with the mosaic's cell mode set from the toggle's value: ``"averaged"``
    draws each element's mean, anything else its per-pixel map where the view has one."""
    return replace(Selection.from_dict(selection), averaged=mode == "averaged").to_dict()


def pixel_controls(data: AppData, group_key: Any, runs: Any, metric: Any) -> tuple[PixelMode, list[dict[str, Any]]]:
    """The mosaic's cell-mode toggle for the selected runs and metric: the view's
    :class:`~orbitscope.app.views.PixelMode` (shown or not; the map, or a note saying why there
    is none and how to record it) and the toggle's options (per-pixel disabled without a map)."""
    try:
        view = view_for(data.group(group_key).task_kind)
        ids = [r for r in (runs if isinstance(runs, (list, tuple)) else []) if isinstance(r, str)][:MAX_MODELS]
        mode = view.pixel_mode([data.result(r) for r in ids], metric if isinstance(metric, str) else None)
    except (AppError, KeyError, ValueError, TypeError):
        mode = PixelMode()
    options = [{"label": label, "value": value, "disabled": value == "maps" and mode.variable is None}
               for value, label in CELL_MODES]
    return mode, options


def _with_note(nero: NeroData, note: str | None) -> NeroData:
    """``nero`` with ``note`` added to the lines of its caption (none: unchanged)."""
    if note:
        nero.info["notes"] = [*nero.info.get("notes", ()), note]
    return nero


def _context_of(data: AppData, selection: Any) -> tuple[Selection, Context]:
    sel = Selection.from_dict(selection)
    if sel.message and sel.sample is None:
        raise AppError(sel.message)
    ctx = data.context(sel)
    if sel.sample is None or sel.element is None:
        raise AppError("no sample selected")
    # the selection comes back from the browser: a sample or element that update_selection
    # would not have chosen (edited, stale) is reported, never looked up
    if not np.any(np.asarray(ctx.shown) == sel.sample):
        raise AppError(f"sample {str(sel.sample)[:40]} is not among the samples shown: select another")
    try:
        on_grid = set(dict(sel.element)) == set(ctx.coords) and dict(snap_element(ctx.coords, dict(sel.element))) == dict(sel.element)
    except (TypeError, ValueError, OverflowError):
        on_grid = False
    if not on_grid:
        raise AppError("the selected element is not on the orbit grid: click a plot to select another")
    return sel, ctx


# --------------------------------------------------------------------------- figures


def _metric_label(ctx: Context) -> str:
    return metric_label(ctx.results, ctx.metric) if ctx.results else str(ctx.metric)


def _nero_figure(data: AppData, selection: Any, scope: str, prepare: Callable[[Selection, Context], NeroData],
                 options: tuple[Any, ...] = ()) -> dict[str, Any]:
    """A NERO plot of the current selection, drawn by :func:`orbitscope.viz.interactive.render_plotly`
    and cached per (data, sample, element, view ``options``); a message figure when nothing can be drawn."""
    try:
        sel, ctx = _context_of(data, selection)
    except AppError as exc:
        return message_figure(str(exc), 420)

    def draw() -> dict[str, Any]:
        nero = prepare(sel, ctx)
        disk = nero.kind == "disk"  # one row of three disks per model: taller, room for the plane titles
        fig = render_plotly(nero, height=max(420, 180 * len(nero.series) + 140) if disk else 420)
        if disk:
            _tag_disk_elements(fig, nero)
            fig.update_annotations(font_size=10)  # "<model>: <plane> plane" titles side by side in a narrow card
        if nero.kind == "line":
            _name_discrete_ticks(fig, ctx)
        if scope == "individual":  # points to click on
            fig.update_traces(selector=lambda t: (t.meta or {}).get("role") == "value" and getattr(t, "mode", None) == "lines",
                              mode="lines+markers", marker={"size": 5})
        top = (100 if disk else 60) + caption_height(nero)  # room for the verdict and notes under the title
        fig.update_layout(uirevision=str(ctx.key), margin=dict(l=30, r=30, t=top, b=30))
        return fig.to_dict()

    sample = sel.sample if scope == "individual" else None
    return data.memo((f"fig-{scope}", ctx.key, sample, sel.element, options), draw)


def _name_discrete_ticks(fig: Any, ctx: Context) -> None:
    """Name the sampled values on the x axis of a line plot over a discrete dim (e.g. a flip:
    "no flip", "left-right flip"), instead of numbering a continuous axis."""
    (dim,) = ctx.dims
    control = next((d for d in live_dims(ctx.results[0].orbit) if d.dim == dim), None)
    if control is not None and control.discrete and len(control.values or ()) <= 16:
        fig.update_xaxes(tickmode="array", tickvals=list(control.values or ()), ticktext=list(control.labels or ()))


def _tag_disk_elements(fig: Any, nero: NeroData) -> None:
    """Append each disk cell's flat orbit index to its ``customdata`` (axis angle, rotation angle),
    so that a click names the element (a click point does not say which plane's disk it hit)."""
    coords = {d: np.asarray(nero.coords[d], dtype=np.float64) for d in nero.dims}
    shape = tuple(len(coords[d]) for d in nero.dims)
    planes = plane_names(nero)
    for trace in fig.data:
        meta = trace.meta if isinstance(trace.meta, dict) else {}
        if meta.get("role") != "value" or meta.get("plane") not in planes or trace.customdata is None:
            continue
        cells = np.asarray(trace.customdata, dtype=np.float64).reshape(-1, 2)
        a = np.abs(coords["axis_angle"][None, :] - cells[:, :1]).argmin(axis=1)
        r = np.abs(coords["rotation_angle"][None, :] - cells[:, 1:]).argmin(axis=1)
        p = np.full(len(cells), planes.index(meta["plane"]))
        flat = np.ravel_multi_index((p, a, r), shape)
        trace.customdata = np.column_stack([cells, flat]).tolist()


def aggregate_figure(data: AppData, selection: Any) -> dict[str, Any]:
    """Aggregate NERO plot of the compared runs over the shown samples, with pointwise confidence
    bands and the selected element marked.

    With the selection's toggles (:func:`set_toggles`): ``simultaneous`` adds each run's
    simultaneous band (covering every element at once); ``compare``, with exactly two runs,
    marks where the first is significantly worse / better than the second (family-wise error
    5 % over the orbit) and gives the verdict under the title (ignored for any other number of
    runs). A mosaic's cells are the per-pixel maps the view has for the metric (the mean over
    the shown samples of each element's map) unless the selection is ``averaged``
    (:func:`set_cell_mode`); the caption says which."""
    sel0 = Selection.from_dict(selection)
    sim, paired = sel0.simultaneous, sel0.compare

    def prepare(sel: Selection, ctx: Context) -> NeroData:
        where = "" if sel.subset is None else f", class {sel.subset}" + (" (consensus)" if sel.label_free else "")
        variable, note = ctx.view.pixel_mode(ctx.results, ctx.metric).drawn(ctx.metric, sel.averaged)  # a mosaic's maps
        nero = prepare_aggregate(list(ctx.results), variable, labels=ctx.names, subset=ctx.mask,
                                 marker=sel.element_dict,
                                 title=f"aggregate: {_metric_label(ctx)}{where} (n = {ctx.positions.size})",
                                 simultaneous=sim, compare=paired and len(ctx.results) == 2)
        return _with_note(nero, note)

    return _nero_figure(data, selection, "aggregate", prepare, (sim, paired, sel0.averaged))


def individual_figure(data: AppData, selection: Any) -> dict[str, Any]:
    """Individual NERO plot of the selected sample for every compared run; clicking a point
    selects that orbit element."""

    def prepare(sel: Selection, ctx: Context) -> NeroData:
        label = metric_label(ctx.results, ctx.sample_metric)
        note = f" ({_metric_label(ctx)} is dataset-level: no per-sample values)" if ctx.dataset_level else ""
        variable, cells = ctx.view.pixel_mode(ctx.results, ctx.sample_metric).drawn(ctx.sample_metric, sel.averaged)
        return _with_note(prepare_individual(list(ctx.results), int(sel.sample), variable, labels=ctx.names,  # type: ignore[arg-type]
                                             marker=sel.element_dict,
                                             title=f"sample {sel.sample}: {label}{note} (click to select an element)"),
                          cells)

    return _nero_figure(data, selection, "individual", prepare, (Selection.from_dict(selection).averaged,))


def scatter_panels(data: AppData, selection: Any) -> list[tuple[dict[str, Any], str, bool]]:
    """Per slot: (scatter figure, title, visible). Run ``i`` fills slot ``i``; the selected
    sample is highlighted; points carry their sample ids (click -> select)."""
    sel = Selection.from_dict(selection)
    out: list[tuple[dict[str, Any], str, bool]] = [(message_figure("", 300), "", False)] * MAX_MODELS
    try:
        ctx = data.context(sel)
    except AppError as exc:
        return [(message_figure(str(exc), 300), "", i < max(len(sel.runs), 1)) for i in range(MAX_MODELS)]
    for i in range(len(ctx.run_ids)):
        title = f"{ctx.names[i]}"
        try:
            fig = _scatter(data, ctx, sel, i)
        except AppError as exc:
            fig = message_figure(str(exc), 300)
        out[i] = (fig, title, True)
    return out


def _scatter(data: AppData, ctx: Context, sel: Selection, i: int) -> dict[str, Any]:
    base = data.memo(("fig-scatter-base", ctx.key, i, sel.method, sel.colour), lambda: _scatter_base(data, ctx, sel, i))
    drawn = np.asarray(base["data"][0]["customdata"])  # the embedded samples (a subsample of large runs)
    hits = np.flatnonzero(drawn == sel.sample) if sel.sample is not None else np.empty(0, dtype=int)
    return _highlighted(base, int(hits[0]), int(sel.sample)) if hits.size else base  # type: ignore[arg-type]


def _scatter_base(data: AppData, ctx: Context, sel: Selection, i: int) -> dict[str, Any]:
    """The scatter without a highlight (built once per embedding and colouring)."""
    emb = data.embedding(ctx, i, sel.method)
    colour = emb.rows_of(data.statistic(ctx, i, sel.colour))
    sub = f" ({emb.n_samples:,} of {ctx.positions.size:,}, subsampled)" if emb.subsampled else ""
    fig = scatter_plotly(emb, colour, f"orbit {sel.colour}", f"{emb.label} of {_metric_label(ctx)} orbits{sub}")
    fig.update_layout(clickmode="event", height=300, margin=dict(l=40, r=10, t=40, b=35),
                      uirevision=str((ctx.key, sel.method)), title={"font": {"size": 13, "color": ctx.colours[i]}})
    out = fig.to_dict()
    # sample ids as a JSON list: plotly.js has no int64 arrays, and dcc.Graph's clickData reads
    # customdata by index from the figure as sent
    out["data"][0]["customdata"] = [int(s) for s in emb.sample]
    out["data"][0]["x"], out["data"][0]["y"] = emb.coords[:, 0].tolist(), (
        emb.coords[:, 1].tolist() if emb.coords.shape[1] > 1 else [0.0] * emb.n_samples)
    return out


def _highlighted(base: dict[str, Any], position: int, sample: int) -> dict[str, Any]:
    """``base`` with one point marked the way :func:`orbitscope.viz.reduce_plots.scatter_plotly`
    marks highlights (larger, ringed, annotated with its sample id), without rebuilding it."""
    trace = dict(base["data"][0])
    n = len(trace["customdata"])
    size, width = [POINT_SIZE] * n, [0.0] * n
    size[position], width[position] = HIGHLIGHT_SIZE, HIGHLIGHT_RING
    ring = trace["marker"]["line"]["color"]
    trace["marker"] = {**trace["marker"], "size": size, "line": {"width": width, "color": ring}}
    note = {"x": trace["x"][position], "y": trace["y"][position], "text": str(sample), "showarrow": True,
            "arrowcolor": ring, "font": {"color": ring}}
    return {"data": [trace, *base["data"][1:]], "layout": {**base["layout"], "annotations": [note]}}


# --------------------------------------------------------------------------- detail


def _request(ctx: Context, sel: Selection, **extra: Any) -> DetailRequest:
    return DetailRequest(results=ctx.results, run_ids=ctx.run_ids, names=ctx.names, colours=ctx.colours,
                         sample=int(sel.sample), element=sel.element_dict or {}, label_free=sel.label_free,  # type: ignore[arg-type]
                         **extra)


def stored_detail(data: AppData, selection: Any) -> list[Any]:
    """The view's detail panel at the selected sample and element, from stored values."""
    from dash import html

    try:
        sel, ctx = _context_of(data, selection)
    except AppError as exc:
        return [html.P(str(exc), id="detail-title")]
    return data.memo(("detail", ctx.key, sel.sample, sel.element),
                     lambda: ctx.view.stored_detail(_request(ctx, sel), ctx.sample_metric))


def live_detail(data: AppData, selection: Any, live_values: Sequence[Any]) -> list[Any]:
    """The view's live panel: each loadable model re-run at the live point (any value in the
    orbit's range); models without weights in the store are named as not loadable."""
    from dash import html

    try:
        sel, ctx = _context_of(data, selection)
        if not ctx.view.supports_live(ctx.results):
            return [html.P(ctx.view.live_unavailable(ctx.results), id="live-title")]
        dims = live_dims(ctx.results[0].orbit)
        if not dims:
            return [html.P("this orbit has no elements to re-evaluate", id="live-title")]
        values = live_values if isinstance(live_values, (list, tuple)) else []  # the browser may send anything
        point = _live_point(dims, values, sel.element_dict or {})
        element = single_element_orbit(ctx.results[0].orbit, point)
    except (AppError, ValueError) as exc:
        return [html.P(str(exc), id="live-title")]
    models = [data.model(run_id) for run_id in ctx.run_ids]

    def render() -> list[Any]:
        outputs = [None if model is None else ctx.view.evaluate_live(model, res, int(sel.sample), element)  # type: ignore[arg-type]
                   for model, res in zip(models, ctx.results)]
        return ctx.view.live_detail(_request(ctx, sel, live_point=point, live_transform=element, live_outputs=outputs))

    loadable = tuple(m is not None for m in models)
    return data.memo(("live", ctx.key, sel.sample, tuple(sorted(point.items())), loadable), render)


def _live_point(dims: Sequence[LiveDim], values: Sequence[Any], fallback: dict[str, float]) -> dict[str, float]:
    """The live point: control ``j`` gives dim ``j`` (dims past the controls keep the selected
    element's value), clamped to the range and, for a discrete dim, snapped to a sampled value."""
    point = {}
    for j, d in enumerate(dims):
        raw = values[j] if j < len(values) and j < N_LIVE else None
        try:
            value = float(raw) if raw is not None else float(fallback[d.dim])
        except (TypeError, ValueError, KeyError, OverflowError):
            value = float(fallback.get(d.dim, d.low))
        if not np.isfinite(value):
            value = d.low
        point[d.dim] = d.snap(value)
    return point
