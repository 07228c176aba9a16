"""The labelling view: a second Dash app at ``/label/`` on the interface's Flask server, where
people record human invariance labels of the zoo models (what ``orbitscope zoo label`` does in
the terminal).

One model at a time, blind (its id and variance matrices only); buttons or the keys i / b / n /
s / p (``labelling_assets/labelling.js``) label it invariant, borderline or not invariant, skip
it, or go back one model. Each label is saved at once in the store's model database (source
``"human"``, labeller = the rater's name) and the view moves to the next model the rater has
not labelled; an agreement card (Fleiss' kappa among raters, each rater against provenance)
follows every label. This is the interface's only write. The callbacks are thin adapters of
:mod:`.labelling_logic`; a refused request is a message in the status line, an unexpected
failure is logged and shown as "internal error".
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import dash
from dash import Input, Output, State, dcc, html, no_update

from ..ml4ml.modeldb import LABELS, ModelDatabase
from .labelling_logic import (
    BUILD_HINT, MAX_RATER_LENGTH, AgreementSummary, LabellingError, Screen, agreement_summary, check_invariance,
    check_model, format_kappa, invariances, open_database, panel_uri, step,
)

__all__ = ["LABEL_PATH", "BUTTONS", "create_labelling_app", "mount_labelling", "register_labelling_callbacks"]

logger = logging.getLogger(__name__)

#: Where the labelling view is served.
LABEL_PATH = "/label/"
ASSETS = Path(__file__).with_name("labelling_assets")

RATER, INVARIANCE, CURRENT, STATUS = "rater", "invariance", "current-model", "label-status"
TITLE, PANEL, REVEALED, PROGRESS, AGREEMENT = "model-title", "model-panel", "revealed", "progress", "agreement"
#: button id -> (action, caption); the keys of labelling.js click these ids
BUTTONS = {
    "label-invariant": ("invariant", "Invariant (i)"),
    "label-borderline": ("borderline", "Borderline (b)"),
    "label-not-invariant": ("not-invariant", "Not invariant (n)"),
    "label-skip": ("skip", "Skip (s)"),
    "label-previous": ("previous", "Previous (p)"),
}
assert {a for a, _ in BUTTONS.values()} >= set(LABELS)

_CARD = {"border": "1px solid #e3e3e3", "borderRadius": "6px", "padding": "8px", "background": "white",
         "marginBottom": "8px"}
_FIELD = {"fontSize": "12px", "color": "#555", "display": "block", "marginBottom": "2px"}
_CELL = {"padding": "2px 10px", "textAlign": "right", "borderBottom": "1px solid #eee"}


def _layout(home: Path) -> html.Div:
    """The page (built per page load: models trained since appear on reload)."""
    try:
        db = open_database(home)
        options = invariances(db) if db is not None else []
        problem = None if options else f"no zoo models in the store {home}: {BUILD_HINT}, then reload"
    except Exception as exc:  # noqa: BLE001 - a broken store is a message, not a blank page
        logger.exception("the labelling view could not open the model database")
        options, problem = [], f"the model database could not be opened: {type(exc).__name__}: {exc}"
    buttons = [html.Button(caption, id=bid, n_clicks=0, style={"padding": "6px 12px"})
               for bid, (_, caption) in BUTTONS.items()]
    controls = html.Div([
        html.Div([html.Label("your name (stored with each label)", htmlFor=RATER, style=_FIELD),
                  dcc.Input(id=RATER, type="text", value="", maxLength=MAX_RATER_LENGTH, placeholder="rater name",
                            persistence=True, persistence_type="local",
                            style={"width": "220px"})]),
        html.Div([html.Label("invariance", style=_FIELD),
                  dcc.Dropdown(id=INVARIANCE, options=[{"label": o, "value": o} for o in options],
                               value=options[0] if options else None, clearable=False, style={"width": "200px"})]),
        html.Div(id=PROGRESS, style={"fontFamily": "monospace", "fontSize": "13px"}),
        html.Div(problem or "", id=STATUS, style={"marginLeft": "auto", "fontSize": "13px", "color": "#B00020"}),
    ], style={**_CARD, "display": "flex", "gap": "16px", "alignItems": "flex-end", "flexWrap": "wrap"})
    model = html.Div([
        html.Div(id=TITLE, style={"fontWeight": "600", "fontSize": "14px"}),
        html.Img(id=PANEL, alt="variance matrices of the model", style={"display": "none"}),
        html.Div(id=REVEALED, style={"fontSize": "13px", "color": "#333", "minHeight": "18px"}),
        html.Div(buttons, style={"display": "flex", "gap": "8px", "marginTop": "8px"}),
        html.Div("keys: i invariant · b borderline · n not invariant · s skip · p previous "
                 "(not while typing in a field)", style={"fontSize": "12px", "color": "#777", "marginTop": "4px"}),
    ], style=_CARD)
    header = html.Div([
        html.Span("orbitscope", style={"fontWeight": "700", "fontSize": "20px"}),
        html.Span(f" · labelling · store {home}", style={"color": "#666"}),
        html.A("← NERO interface", href="/", style={"marginLeft": "auto", "fontSize": "13px"}),
    ], style={"display": "flex", "alignItems": "baseline", "gap": "8px", "marginBottom": "6px"})
    return html.Div([dcc.Store(id=CURRENT, data=None), header, controls, model,
                     html.Div(id=AGREEMENT, style=_CARD)],
                    style={"fontFamily": "system-ui, -apple-system, Segoe UI, Roboto, sans-serif", "padding": "10px",
                           "background": "#f7f7f8", "minHeight": "100vh"})


def _agreement_card(summary: AgreementSummary) -> list[Any]:
    """The agreement card: Fleiss' kappa, then one row per rater."""
    head = html.Tr([html.Th(h, style=_CELL) for h in ("rater", "labelled", "vs provenance: models",
                                                       "share equal", "Cohen's κ")])
    rows = [html.Tr([html.Td(r.rater, style={**_CELL, "textAlign": "left"}), html.Td(str(r.labelled), style=_CELL),
                     html.Td(str(r.vs_provenance), style=_CELL), html.Td(format_kappa(r.share_equal), style=_CELL),
                     html.Td(format_kappa(r.kappa), style=_CELL)], className="agreement-row")
            for r in summary.rows]
    raters = ", ".join(summary.raters) or "none yet"
    return [
        html.Div(f"agreement on {summary.invariance}", style={"fontWeight": "600"}),
        html.Div(f"raters: {raters}", id="agreement-raters", style={"fontSize": "13px"}),
        html.Div([html.Span(f"Fleiss' κ among raters over the {summary.n_common} models all of them labelled: "),
                  html.Span(summary.fleiss_text, id="fleiss-kappa", style={"fontFamily": "monospace"})],
                 style={"fontSize": "13px"}),
        html.Table([html.Thead(head), html.Tbody(rows)], style={"borderCollapse": "collapse", "fontSize": "13px",
                                                               "marginTop": "4px"}),
    ]


def _render(db: ModelDatabase, invariance: str, screen: Screen) -> tuple[Any, ...]:
    """The callback's outputs for ``screen``."""
    if screen.model_id is None:
        title, src, style = "", None, {"display": "none"}
    else:
        model = check_model(db, screen.model_id, invariance)
        title, src = f"model {model.model_id} · {invariance}", panel_uri(model, invariance)
        style = {"display": "block", "maxWidth": "100%", "marginTop": "4px"}
    colour = "#B00020" if screen.error else "#2E7D32"
    return (screen.model_id, title, src, style, screen.revealed, screen.progress,
            html.Span(screen.status, style={"color": colour}), _agreement_card(agreement_summary(db, invariance)))


def _refused(message: str, current: Any = no_update) -> tuple[Any, ...]:
    return (current, *(no_update,) * 5, html.Span(message, style={"color": "#B00020"}), no_update)


def register_labelling_callbacks(app: dash.Dash, home: Path) -> None:
    """Attach the view's one callback: every control and button -> :func:`.labelling_logic.step`."""

    @app.callback(
        Output(CURRENT, "data"), Output(TITLE, "children"), Output(PANEL, "src"), Output(PANEL, "style"),
        Output(REVEALED, "children"), Output(PROGRESS, "children"), Output(STATUS, "children"),
        Output(AGREEMENT, "children"),
        # The name counts when the rater leaves the field or presses Enter (n_blur / n_submit), read
        # as State. Not dcc.Input(debounce=True): in Dash 4.4 that mode restores the caret in a
        # setTimeout after each keystroke, so a key typed before the timeout fires lands at the
        # old caret position ("alice" typed quickly became "aliec").
        Input(RATER, "n_blur"), Input(RATER, "n_submit"), Input(INVARIANCE, "value"),
        *[Input(bid, "n_clicks") for bid in BUTTONS],
        State(RATER, "value"), State(CURRENT, "data"),
    )
    def on_label(_blurs: Any, _submits: Any, invariance: Any, *rest: Any) -> tuple[Any, ...]:
        rater, current = rest[-2], rest[-1]
        trigger = dash.callback_context.triggered_id
        action = BUTTONS[trigger][0] if isinstance(trigger, str) and trigger in BUTTONS else "load"
        try:
            db = open_database(home)
            if db is None:
                return _refused(f"no zoo models in the store {home}: {BUILD_HINT}", None)
            invariance = check_invariance(db, invariance)
            return _render(db, invariance, step(db, action, rater, invariance, current))
        except LabellingError as exc:
            return _refused(str(exc))
        except Exception as exc:  # noqa: BLE001 - the server must keep serving
            logger.exception("labelling callback failed (action %s)", action)
            return _refused(f"internal error: {type(exc).__name__} (see the server log)")


def create_labelling_app(server: Any, home: str | os.PathLike[str]) -> dash.Dash:
    """The labelling Dash app at :data:`LABEL_PATH` on the Flask ``server``, for the store at ``home``."""
    home = Path(home)
    app = dash.Dash(__name__, server=server, url_base_pathname=LABEL_PATH, serve_locally=True,
                    assets_folder=str(ASSETS), title="orbitscope · labelling", update_title=None)
    app.layout = lambda: _layout(home)
    register_labelling_callbacks(app, home)
    return app


def mount_labelling(main_app: dash.Dash, home: str | os.PathLike[str]) -> dash.Dash:
    """Mount the labelling view on ``main_app``'s server (see :func:`create_labelling_app`)."""
    import flask

    labelling = create_labelling_app(main_app.server, home)
    # "/label" (no slash) would otherwise fall to the main app's catch-all route
    main_app.server.add_url_rule(LABEL_PATH.rstrip("/"), endpoint="orbitscope_label_redirect",
                                 view_func=lambda: flask.redirect(LABEL_PATH))
    main_app.server.config["orbitscope_labelling"] = labelling
    return labelling
