"""The Dash application: wires :mod:`.callbacks` to the page of :mod:`.layout`, and serves it.

Every callback here is a thin adapter: it turns what the browser sent into an
:class:`~orbitscope.app.state.Event` or plain values, calls a function of :mod:`.callbacks`, and
maps the answer back. A failure that is not an :class:`~orbitscope.app.data.AppError` is logged
with its traceback and shown as "internal error", never propagated: one bad request does not
stop the server or the page.
"""

from __future__ import annotations

import functools
import logging
import os
from typing import Any, Callable, Iterable

import dash
from dash import ALL, Input, Output, State, html, no_update

from ..results.store import Store
from . import callbacks as cb
from .data import MAX_MODELS, AppData
from .labelling import mount_labelling
from .lee_page import mount_lee_page
from .layout import (
    AGGREGATE, CELLS, CELLS_NOTE, CELLS_ROW, COLOUR, COMPARE, COMPARE_ROW, DETAIL_LIVE, DETAIL_STORED, GROUP, INDIVIDUAL, LABEL_FREE, METHOD, METRIC,
    MODELS, RANK_BY, SELECTION, SIMULTANEOUS, STATUS, SUBSET, build_layout,
)
from .state import Event
from .views import VIEWS, list_views

__all__ = ["create_app", "serve", "bind_warning", "loopback_hosts", "make_server"]

logger = logging.getLogger(__name__)

_HIDDEN, _SHOWN = {"display": "none"}, {"display": "block"}
_EVENT_TYPES = {"scatter", "rank", "prev", "next"}


#: Largest request body the server reads (callback requests are a few kB); larger: 413.
MAX_CONTENT_LENGTH = 4 * 1024 * 1024
_LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]")


def _shaped(value: Any) -> Any:
    """``value`` (a fallback answer) fitted to the outputs the current request asks for: a
    wildcard (``ALL``) output needs a list with one entry per matched component, so a bare
    ``no_update`` or a list of the wrong length there is padded with / cut to ``no_update``
    entries. Only multi-output answers (tuples) are fitted; outside a request ``value`` is
    returned as is."""
    if not isinstance(value, tuple):
        return value
    try:
        specs = dash.callback_context.outputs_list
    except Exception:  # noqa: BLE001 - no request context (called directly)
        return value
    if not isinstance(specs, list):
        return value

    def fit(items: Any, n: int) -> list[Any]:
        items = list(items) if isinstance(items, (list, tuple)) else [items] * n
        return (items + [no_update] * n)[:n]

    values = fit(value, len(specs))
    return tuple(fit(v, len(spec)) if isinstance(spec, list) else v for v, spec in zip(values, specs))


def _guarded(fallback: Callable[..., Any]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Log unexpected exceptions and answer ``fallback(message)`` instead of failing; the
    fallback is fitted to the request's outputs (see :func:`_shaped`), so it is always a valid
    Dash answer."""

    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def guarded(*args: Any) -> Any:
            try:
                return fn(*args)
            except Exception as exc:  # noqa: BLE001 - the server must keep serving
                logger.exception("callback %s failed", fn.__name__)
                return _shaped(fallback(f"internal error in {fn.__name__}: {type(exc).__name__} (see the server log)"))

        return guarded

    return wrap


def _slot(values: Any, i: int) -> Any:
    """``values[i]`` of a wildcard input (None when the browser sent no such entry)."""
    return values[i] if isinstance(values, (list, tuple)) and i < len(values) else None


def _event(triggered: list[dict[str, Any]], triggered_id: Any, inputs: dict[str, Any]) -> Event:
    """The user action behind a call of the selection callback (``"context"`` when the
    selectors changed, on first load, or when several inputs changed at once)."""
    if len(triggered) != 1 or triggered_id is None:
        return Event("context")
    if isinstance(triggered_id, dict) and triggered_id.get("type") in _EVENT_TYPES:
        kind, i = triggered_id["type"], triggered_id.get("index")
        if not isinstance(i, int) or not 0 <= i < MAX_MODELS:
            return Event("context")
        if kind == "scatter":
            click = _slot(inputs.get("scatter"), i)
            try:
                return Event("sample", i, click["points"][0]["customdata"])
            except (TypeError, KeyError, IndexError):
                return Event("context")
        if kind == "rank":
            return Event("rank", i, _slot(inputs.get("rank"), i))
        return Event("step", i, -1 if kind == "prev" else 1)
    if isinstance(triggered_id, str) and triggered_id in (INDIVIDUAL, AGGREGATE):
        return Event("element", None, inputs.get(triggered_id))
    return Event("context")


def register_callbacks(app: dash.Dash, data: AppData) -> None:
    """Attach the interface's callbacks to ``app``."""
    slots = [Output({"type": k, "index": ALL}, p) for k, p in (("rank", "value"), ("rank", "max"),
                                                               ("rank-label", "children"))]

    @app.callback(
        Output(MODELS, "options"), Output(MODELS, "value"), Output(SUBSET, "options"), Output(SUBSET, "value"),
        Output({"type": "live-row", "index": ALL}, "style"), Output({"type": "live-label", "index": ALL}, "children"),
        Output({"type": "live", "index": ALL}, "min"), Output({"type": "live", "index": ALL}, "max"),
        Output({"type": "live", "index": ALL}, "step"), Output({"type": "live", "index": ALL}, "marks"),
        Output({"type": "live", "index": ALL}, "allow_direct_input"),
        Input(GROUP, "value"),
    )
    @_guarded(lambda msg: (no_update,) * 11)
    def on_group(group: Any) -> tuple[Any, ...]:
        c = cb.group_controls(data, group)
        live = c.live[: cb.N_LIVE] + [None] * (cb.N_LIVE - len(c.live[: cb.N_LIVE]))
        return (c.model_options, c.models, c.subset_options, "all",
                [_SHOWN if d else _HIDDEN for d in live],
                [(f"live {d.dim} (sampled elements)" if d.discrete else f"live {d.dim}") if d else "" for d in live],
                [d.low if d else 0 for d in live], [d.high if d else 1 for d in live],
                [d.step if d else 1 for d in live], [d.marks() if d else None for d in live],
                [not d.discrete if d else True for d in live])  # a discrete dim: choose a mark, type nothing

    @app.callback(Output(METRIC, "options"), Output(METRIC, "value"),
                  Input(MODELS, "value"), Input(LABEL_FREE, "value"), State(GROUP, "value"), State(METRIC, "value"))
    @_guarded(lambda msg: ([], None))
    def on_models(models: Any, label_free: Any, group: Any, metric: Any) -> tuple[Any, Any]:
        runs = [m for m in (models or []) if isinstance(m, str)]
        options, value, _ = cb.metric_controls(data, group, runs, bool(label_free), metric)
        return options, value

    @app.callback(
        Output(SELECTION, "data"), *slots,
        Output({"type": "live", "index": ALL}, "value"), Output(STATUS, "children"),
        Input({"type": "scatter", "index": ALL}, "clickData"), Input({"type": "rank", "index": ALL}, "value"),
        Input({"type": "prev", "index": ALL}, "n_clicks"), Input({"type": "next", "index": ALL}, "n_clicks"),
        Input(INDIVIDUAL, "clickData"), Input(AGGREGATE, "clickData"),
        Input(GROUP, "value"), Input(MODELS, "value"), Input(METRIC, "value"), Input(SUBSET, "value"),
        Input(METHOD, "value"), Input(COLOUR, "value"), Input(RANK_BY, "value"), Input(LABEL_FREE, "value"),
        State(SELECTION, "data"),
    )
    @_guarded(lambda msg: (no_update,) * 5 + (msg,))
    def on_event(scatter: Any, rank: Any, prev: Any, nxt: Any, individual: Any, aggregate: Any, group: Any,
                 models: Any, metric: Any, subset: Any, method: Any, colour: Any, rank_by: Any, label_free: Any,
                 selection: Any) -> tuple[Any, ...]:
        ctx = dash.callback_context
        event = _event(list(ctx.triggered), ctx.triggered_id,
                       {"scatter": scatter, "rank": rank, INDIVIDUAL: individual, AGGREGATE: aggregate})
        logger.debug("event %s (triggered by %s)", event, [t.get("prop_id") for t in ctx.triggered])
        controls = cb.parse_controls(group, models, metric, subset, method, colour, rank_by, label_free)
        up = cb.update_selection(data, selection, controls, event)
        live = [no_update if v is None else v for v in up.live]
        return up.selection, up.ranks, up.maxima, up.labels, live, up.message

    @app.callback(Output(SELECTION, "data", allow_duplicate=True), Input(SIMULTANEOUS, "value"),
                  Input(COMPARE, "value"), State(SELECTION, "data"), prevent_initial_call=True)
    @_guarded(lambda msg: no_update)
    def on_toggles(simultaneous: Any, compare: Any, selection: Any) -> Any:
        if not isinstance(selection, dict):  # the page has not sent its first selection yet
            return no_update
        return cb.set_toggles(selection, simultaneous, compare)

    @app.callback(Output(SELECTION, "data", allow_duplicate=True), Input(CELLS, "value"), State(SELECTION, "data"),
                  prevent_initial_call=True)
    @_guarded(lambda msg: no_update)
    def on_cell_mode(mode: Any, selection: Any) -> Any:
        if not isinstance(selection, dict):  # the page has not sent its first selection yet
            return no_update
        return cb.set_cell_mode(selection, mode)

    @app.callback(Output(CELLS_ROW, "style"), Output(CELLS_ROW, "title"), Output(CELLS, "options"),
                  Output(CELLS_NOTE, "children"), Input(MODELS, "value"), Input(METRIC, "value"), State(GROUP, "value"))
    @_guarded(lambda msg: (no_update,) * 4)
    def on_cell_modes(models: Any, metric: Any, group: Any) -> tuple[Any, ...]:
        mode, options = cb.pixel_controls(data, group, models, metric)
        return _SHOWN if mode.shown else _HIDDEN, mode.note, options, mode.note if mode.variable is None else ""

    @app.callback(Output(AGGREGATE, "figure"), Input(SELECTION, "data"))
    @_guarded(cb.message_figure)
    def on_aggregate(selection: Any) -> Any:
        return cb.aggregate_figure(data, selection)

    @app.callback(Output(COMPARE_ROW, "style"), Input(MODELS, "value"))
    @_guarded(lambda msg: no_update)
    def on_compare_available(models: Any) -> Any:
        return _SHOWN if cb.compare_available(models) else _HIDDEN

    @app.callback(Output({"type": "scatter", "index": ALL}, "figure"),
                  Output({"type": "panel", "index": ALL}, "style"),
                  Output({"type": "panel-title", "index": ALL}, "children"), Input(SELECTION, "data"))
    @_guarded(lambda msg: ([cb.message_figure(msg)] * MAX_MODELS, [no_update] * MAX_MODELS, [""] * MAX_MODELS))
    def on_scatter(selection: Any) -> tuple[Any, Any, Any]:
        panels = cb.scatter_panels(data, selection)
        styles = [{"display": "block" if shown else "none", "borderTop": f"4px solid {_colour(i)}"}
                  for i, (_, _, shown) in enumerate(panels)]
        return [p[0] for p in panels], styles, [p[1] for p in panels]

    @app.callback(Output(INDIVIDUAL, "figure"), Input(SELECTION, "data"))
    @_guarded(cb.message_figure)
    def on_individual(selection: Any) -> Any:
        return cb.individual_figure(data, selection)

    @app.callback(Output(DETAIL_STORED, "children"), Input(SELECTION, "data"))
    @_guarded(lambda msg: [html.P(msg, id="detail-title")])
    def on_detail(selection: Any) -> Any:
        return cb.stored_detail(data, selection)

    @app.callback(Output(DETAIL_LIVE, "children"), Input(SELECTION, "data"),
                  Input({"type": "live", "index": ALL}, "value"))
    @_guarded(lambda msg: [html.P(msg, id="live-title")])
    def on_live(selection: Any, live: Any) -> Any:
        return cb.live_detail(data, selection, live or [])


def _colour(i: int) -> str:
    from ..analysis.nero import MODEL_COLOURS

    return MODEL_COLOURS[i % len(MODEL_COLOURS)]


def create_app(home: str | os.PathLike[str] | None = None, *, data: AppData | None = None) -> dash.Dash:
    """The Dash app on the store at ``home`` (which must exist: it is never created), with the
    labelling view (:mod:`.labelling`) mounted at ``/label/`` on the same server.

    Raises:
        orbitscope.results.store.StoreError: no store at ``home``.
    """
    data = data or AppData(Store(home, create=False))
    app = dash.Dash(__name__, title="orbitscope", update_title=None, serve_locally=True)
    app.layout = lambda: build_layout(data)
    register_callbacks(app, data)
    for kind in list_views():  # the views' own controls (e.g. the point-cloud view's free rotation)
        VIEWS.get(kind).register_callbacks(app, data)
    app.server.config["orbitscope_data"] = data
    mount_labelling(app, data.home)  # /label/: records human labels in the store's model database
    mount_lee_page(app, data)  # /lee/: the store's LEE runs
    _install_guards(app)
    return app


def _install_guards(app: dash.Dash) -> None:
    """Request-level defences of the Flask server under ``app`` (idempotent):

    * bodies over :data:`MAX_CONTENT_LENGTH` are refused (413);
    * when ``config["ORBITSCOPE_ALLOWED_HOSTS"]`` is set (see :func:`make_server`), a request
      whose Host header is not in it gets 403: a page on another site that rebinds its DNS name
      to 127.0.0.1 cannot read the store through the user's browser;
    * an exception while answering a callback request (a malformed body, outputs the page does
      not have) is logged and answered 400 with a short message, never 500 with a traceback;
    * a request for a file under ``/_dash-component-suites/`` that Dash refuses (a path leaving
      the package, ``../``, or one it does not list) is answered 404, not 500.
    """
    import flask
    from werkzeug.exceptions import HTTPException

    server = app.server
    if server.config.get("orbitscope_guarded"):
        return
    server.config["orbitscope_guarded"] = True
    if server.config.get("MAX_CONTENT_LENGTH") is None:  # Flask's default: None (no limit)
        server.config["MAX_CONTENT_LENGTH"] = MAX_CONTENT_LENGTH
    server.config.setdefault("ORBITSCOPE_ALLOWED_HOSTS", None)

    @server.before_request
    def _check_request() -> Any:
        limit = server.config.get("MAX_CONTENT_LENGTH")
        if limit is not None and (flask.request.content_length or 0) > limit:  # refused before it is read
            return flask.Response(f"request too large (at most {limit} bytes)\n", status=413, mimetype="text/plain")
        allowed = server.config.get("ORBITSCOPE_ALLOWED_HOSTS")
        if allowed is not None and (flask.request.host or "").lower() not in allowed:
            logger.warning("refused a request for host %r (allowed: %s)", flask.request.host[:80], sorted(allowed))
            return flask.Response("forbidden host: open the interface at the address the server printed\n",
                                  status=403, mimetype="text/plain")
        return None

    @server.errorhandler(Exception)
    def _failed(exc: Exception) -> Any:
        if isinstance(exc, HTTPException):  # 404, 405, 413 ...: as werkzeug answers them
            return exc
        if "/_dash-component-suites/" in flask.request.path:  # a file Dash does not serve (e.g. '../' in the path)
            logger.info("refused a request for %s: %s", flask.request.path[:200], type(exc).__name__)
            return flask.Response("not found\n", status=404, mimetype="text/plain")
        # the message may quote the (large) request: cut it; the traceback at debug level
        logger.error("request %s %s failed: %s: %s", flask.request.method, flask.request.path[:200],
                     type(exc).__name__, str(exc)[:300])
        logger.debug("traceback of the failed request", exc_info=exc)
        if flask.request.path.endswith("/_dash-update-component"):
            return flask.jsonify(message=f"malformed callback request ({type(exc).__name__})"), 400
        return flask.Response("internal error (see the server log)\n", status=500, mimetype="text/plain")


def loopback_hosts(host: str, port: int) -> frozenset[str] | None:
    """The Host header values a server bound to ``host``:``port`` accepts by default: the
    loopback names with the port when ``host`` is a loopback address, else None (no check)."""
    if bind_warning(host) is not None:
        return None
    names = {*_LOOPBACK_NAMES, f"[{host}]" if ":" in host else host}
    return frozenset({f"{n}:{port}" for n in names} | (names if port == 80 else set()))


def bind_warning(host: str) -> str | None:
    """A warning when ``host`` makes the server reachable from other machines."""
    if host in ("0.0.0.0", "::", "", "*"):
        where = f"{host or '*'} (all interfaces)"
    elif host.startswith("127.") or host in ("localhost", "::1"):
        return None
    else:
        where = host
    return (f"serving on {where}: anyone who can reach this machine can read every run in the store "
            "and record labels in its model database (there is no authentication); bind 127.0.0.1 unless you mean it")


def make_server(app: dash.Dash, host: str = "127.0.0.1", port: int = 8050, *,
                allowed_hosts: Iterable[str] | None | str = "auto") -> Any:
    """A threaded WSGI server for ``app`` (``serve_forever()`` to run, ``shutdown()`` to stop).

    Args:
        allowed_hosts: Host header values to accept (others get 403). ``"auto"``: the loopback
            names (localhost, 127.0.0.1, [::1]) with the bound port when ``host`` is a loopback
            address, no check otherwise (the user bound another host on purpose); None: no check.
    """
    from werkzeug.serving import make_server as wsgi_server

    warning = bind_warning(host)
    if warning:
        logger.warning(warning)
    _install_guards(app)
    server = wsgi_server(host, port, app.server, threaded=True)
    if allowed_hosts == "auto":
        allowed = loopback_hosts(host, server.server_port)  # the real port when port=0
    elif allowed_hosts is None:
        allowed = None
    else:
        allowed = frozenset(h.lower() for h in allowed_hosts)
    app.server.config["ORBITSCOPE_ALLOWED_HOSTS"] = allowed
    return server


def serve(home: str | os.PathLike[str] | None = None, *, host: str = "127.0.0.1", port: int = 8050,
          allowed_hosts: Iterable[str] | None | str = "auto") -> None:
    """Serve the interface until interrupted (Ctrl-C); ``allowed_hosts`` as in :func:`make_server`.

    The NERO interface at ``/`` only reads the store. The labelling view at ``/label/`` records
    human invariance labels (source ``"human"``) in the store's model database; nothing else
    is written."""
    import torch
    from threadpoolctl import threadpool_limits

    # requests handle small arrays (one image, 500 × 73 matrices): one thread each is fastest and
    # leaves the other cores to the user's own jobs
    torch.set_num_threads(1)
    threadpool_limits(1)
    server = make_server(create_app(home), host, port, allowed_hosts=allowed_hosts)
    logger.info("orbitscope interface on http://%s:%d/ (Ctrl-C to stop)", "localhost" if host in ("127.0.0.1", "::1") else host, port)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
