"""Shared pieces of the browser tests: the interface served on loopback and a Chromium page
(Playwright for Python driving Debian's ``/usr/bin/chromium``)."""

from __future__ import annotations

import json
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import pytest

from orbitscope.app import create_app, make_server

CHROMIUM = Path("/usr/bin/chromium")
#: skip marker for modules that need Chromium (``make test`` installs it as root)
needs_chromium = pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian chromium is not installed at "
                                    "/usr/bin/chromium (make test installs it as root: apt-get install -y chromium)")
TIMEOUT_MS = 30_000


def slot(kind: str, i: int) -> str:
    """CSS selector of a Dash pattern-matching component ``{"index": i, "type": kind}``."""
    return "[id='" + json.dumps({"index": i, "type": kind}, separators=(",", ":")) + "']"


@contextmanager
def served(home: Path) -> Iterator[str]:
    """The interface on the store at ``home``, on a free loopback port; yields its URL."""
    server = make_server(create_app(home), "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/"
    finally:
        server.shutdown()
        thread.join(timeout=10)


@contextmanager
def chromium_page() -> Iterator[Any]:
    """A headless Chromium page (1500 × 1200) that records HTTP 5xx answers in ``server_errors``."""
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=[
            "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update"])
        pg = browser.new_page(viewport={"width": 1500, "height": 1200})
        pg.set_default_timeout(TIMEOUT_MS)
        pg.server_errors = []
        pg.on("response", lambda r: r.status >= 500 and pg.server_errors.append(f"{r.status} {r.url}"))
        try:
            yield pg
        finally:
            browser.close()


def shot(pg: Any, folder: Path, name: str) -> Path:
    """A full-page screenshot ``<folder>/<name>.png``, copied to ``$ORBITSCOPE_SCREENSHOT_DIR``
    when that is set."""
    import os
    import shutil

    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.png"
    pg.screenshot(path=str(path), full_page=True)
    extra = os.environ.get("ORBITSCOPE_SCREENSHOT_DIR")
    if extra:
        Path(extra).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, Path(extra) / path.name)
    return path


def wait_text(pg: Any, selector: str, pattern: str) -> str:
    """Wait until the element's text matches ``pattern`` (a regex); return the text."""
    handle = pg.wait_for_function("([sel, pat]) => { const e = document.querySelector(sel);"
                                  " return e && new RegExp(pat).test(e.textContent) && e.textContent; }",
                                  arg=[selector, pattern])
    return handle.json_value()


def plot_point(pg: Any, graph: str, x: float, y: float) -> tuple[float, float]:
    """Page coordinates of the data point (x, y) in the first subplot of the plotly graph inside
    ``graph``, once it stops moving (plotly first draws at a default size, then fits its container)."""
    script = """([graph, x, y]) => {
        const gd = document.querySelector(graph + ' .js-plotly-plot');
        if (!gd || !gd._fullLayout || !gd._fullLayout.xaxis) return null;
        const xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis, r = gd.getBoundingClientRect();
        return [r.left + xa._offset + xa.d2p(x), r.top + ya._offset + ya.d2p(y)];
    }"""
    last = None
    for _ in range(50):
        pg.wait_for_timeout(200)
        now = pg.evaluate(script, [graph, x, y])
        if now and now == last:
            return now[0], now[1]
        last = now
    raise AssertionError(f"{graph} did not settle")


def trace_metas(pg: Any, graph: str) -> list[dict[str, Any]]:
    """The ``meta`` of every trace of the plotly graph inside ``graph`` (roles, boxes, ...)."""
    return pg.evaluate("(g) => document.querySelector(g + ' .js-plotly-plot').data.map(t => t.meta || {})", graph)


def disk_cell_point(pg: Any, series: str, plane: str, phi: float, psi: float) -> tuple[float, float]:
    """Page coordinates of a point inside the disk cell (φ, ψ) of ``series``'s ``plane`` disk of
    the aggregate plot (a point in the cell's drawn wedge), once the plot stops moving."""
    script = """([series, plane, phi, psi]) => {
        const gd = document.querySelector('#aggregate .js-plotly-plot');
        if (!gd || !gd.data) return null;
        const ti = gd.data.findIndex(t => t.type === 'barpolar' && t.meta && t.meta.series === series
                                        && t.meta.plane === plane);
        if (ti < 0) return null;
        const k = gd.data[ti].customdata.findIndex(c => c[0] === phi && c[1] === psi);
        const group = [...gd.querySelectorAll('g.trace.bars')].find(g => g.__data__ && g.__data__[0]
                                                                         && g.__data__[0].trace.index === ti);
        const path = group && [...group.querySelectorAll('path')].find(p => p.__data__ && p.__data__.i === k);
        if (!path) return null;
        const box = path.getBBox(), ctm = path.getScreenCTM();
        const tries = [];
        for (let i = 1; i < 10; i++) for (let j = 1; j < 10; j++) tries.push([i / 10, j / 10]);
        tries.sort((a, b) => Math.hypot(a[0] - .5, a[1] - .5) - Math.hypot(b[0] - .5, b[1] - .5));
        for (const [fx, fy] of tries) {
            const p = new DOMPoint(box.x + fx * box.width, box.y + fy * box.height);
            if (path.isPointInFill(p)) { const s = p.matrixTransform(ctm); return [s.x, s.y]; }
        }
        return null;
    }"""
    last = None
    for _ in range(50):
        pg.wait_for_timeout(200)
        now = pg.evaluate(script, [series, plane, phi, psi])
        if now and last and max(abs(a - b) for a, b in zip(now, last)) < 0.5:
            return now[0], now[1]
        last = now
    raise AssertionError("the disk did not settle")
