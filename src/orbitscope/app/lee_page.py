"""The interface's LEE page (``/lee/``): every LEE run in the store, grouped by data and task, with
the LEE table (mean per generator with its interval, the top layer) and each model's layer-share
bar chart per generator, as the reports show them (:func:`orbitscope.viz.lee_plots.lee_report_section`).
Read-only, like the rest of the interface; a link in the main page's header leads here when the
store holds LEE runs."""

from __future__ import annotations

import html
from typing import Any

import dash

from ..lie.run import is_lee_run
from ..lie.summary import lee_rows
from ..results.store import RunRecord
from ..viz.lee_plots import lee_report_section
from ..viz.report import REPORT_CSS
from .data import AppData

__all__ = ["LEE_PATH", "lee_page_html", "mount_lee_page", "lee_records"]

#: where the page is served
LEE_PATH = "/lee/"


def lee_records(data: AppData) -> list[RunRecord]:
    """The store's complete LEE runs, in order of creation."""
    return [r for r in data.catalog().values() if is_lee_run(r) and r.complete]


def lee_page_html(data: AppData) -> str:
    """The whole page (see the module docstring)."""
    groups: dict[tuple[str, str], list[RunRecord]] = {}
    for rec in lee_records(data):
        groups.setdefault((rec.data_id, str(rec.task.get("kind"))), []).append(rec)
    parts = [f"<h1>Lie derivative (LEE) runs in {html.escape(str(data.home))}</h1>",
             "<p class='note'><a href='/'>← NERO interface</a></p>"]
    if not groups:
        parts.append("<p>No LEE runs yet: run <code>orbitscope lee --model … --data …</code> or the demo.</p>")
    for (data_id, task), records in groups.items():
        results = [data.store.load(r.run_id) for r in records]
        labels = [str(r.attrs.get("model_name") or r.name) for r in records]
        rows = [row for res, label in zip(results, labels) for row in lee_rows(res, label)]
        parts.append(lee_report_section(results, rows, labels=labels,
                                        title=f"{task} on {data_id} ({results[0].n_samples} samples)"))
    return (f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>orbitscope · LEE</title>"
            f"<style>{REPORT_CSS}</style></head><body>{''.join(parts)}</body></html>")


def mount_lee_page(main_app: dash.Dash, data: AppData) -> None:
    """Serve :func:`lee_page_html` at :data:`LEE_PATH` on ``main_app``'s Flask server."""
    import flask

    def page() -> Any:
        return flask.Response(lee_page_html(data), mimetype="text/html")

    main_app.server.add_url_rule(LEE_PATH, endpoint="orbitscope_lee", view_func=page)
    main_app.server.add_url_rule(LEE_PATH.rstrip("/"), endpoint="orbitscope_lee_redirect",
                                 view_func=lambda: flask.redirect(LEE_PATH))
