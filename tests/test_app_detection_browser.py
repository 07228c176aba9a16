"""The detection view end to end in real Chromium (Playwright for Python driving Debian's
``/usr/bin/chromium``): switch to the detection run group, click a heat-map cell, read the detail
panel (boxes on the context image, the table of top predictions), re-evaluate live at a shift
between grid points.

Store: a small classification run (so that the detection group has to be chosen) and the
detection store of :mod:`test_app_detection`. Screenshots go to the test's temporary folder
(``shots/``) and, when ``ORBITSCOPE_SCREENSHOT_DIR`` is set, to that folder too.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pytest

import orbitscope as osc
from orbitscope.results.store import Store

from browser import chromium_page, needs_chromium, plot_point, served as served_app, shot, slot, trace_metas, wait_text
from helpers import TinyNet
from test_app_detection import OFFSET, build_detection_store

pytestmark = [needs_chromium, pytest.mark.slow]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path, dict[str, str]]]:
    home = tmp_path_factory.mktemp("detection-browser-store")
    digits = osc.mnist_subset("test").stratified(1)  # first in the store: the page opens on this group
    osc.evaluate(TinyNet().eval(), digits, osc.Rotation([0, 90]), store=home, name="tiny", model_name="tiny")
    ids = build_detection_store(home)
    with served_app(home) as url:
        yield url, home, ids


@pytest.fixture()
def page(served: Any) -> Iterator[Any]:
    with chromium_page() as pg:
        yield pg






def _drawn(pg: Any, graph: str) -> dict[str, int]:
    """What plotly drew: the image, line traces, the dimming shape, legend entries."""
    return pg.evaluate("""(g) => { const gd = document.querySelector(g + ' .js-plotly-plot');
        return {images: gd.querySelectorAll('.imagelayer image, .layer-subplot image, image').length,
                lines: gd.querySelectorAll('.scatterlayer .trace .js-line').length,
                shapes: gd.querySelectorAll('.shapelayer path').length,
                legend: gd.querySelectorAll('.legend .traces').length}; }""", graph)


def _table_rows(pg: Any, table: str) -> list[list[str]]:
    return pg.evaluate("(t) => Array.from(document.querySelectorAll(t + ' tr')).map("
                       "r => Array.from(r.children).map(c => c.textContent))", table)


def test_detection_view_in_chromium(served: Any, page: Any, tmp_path: Path) -> None:
    url, home, ids = served
    shots = tmp_path / "shots"
    store = Store(home, create=False)
    gt = store.load(ids["bright-box"]).target_boxes.values[:, 0].astype(float)

    page.goto(url)
    wait_text(page, "#detail-title", r"^sample \d+ · label \d")  # the classification group first
    page.click("#group")
    page.locator("[role=option]", has_text="bright-boxes").click()
    wait_text(page, slot("panel-title", 1), r"^centre-biased$")
    title = wait_text(page, "#detail-title", r"^sample \d+ · 1 object \(class \d\) · tx 0, ty 0$")
    sample = int(re.match(r"sample (\d+)", title).group(1))
    page.wait_for_function("() => { const g = document.querySelector('#aggregate .js-plotly-plot');"
                           " return g && g.data && g.data.some(t => t.type === 'heatmap'); }")
    _, top = plot_point(page, "#aggregate", 0, -8)
    _, bottom = plot_point(page, "#aggregate", 0, 8)
    assert top < bottom  # +ty is drawn downwards, as in the image

    # click the heat-map cell (tx 4, ty -8) of the first model: that shift is selected everywhere
    page.mouse.click(*plot_point(page, "#aggregate", 4, -8))
    wait_text(page, "#detail-title", rf"^sample {sample} · 1 object \(class \d\) · tx 4, ty -8$")
    wait_text(page, "#live-title", r"tx 4, ty -8$")  # the live sliders jump to the shift
    page.wait_for_selector("#detail-table-0 tbody tr")
    rows = _table_rows(page, "#detail-table-0")
    assert rows == [["rank", "class", "confidence", "IoU (GT)", "IoU (consensus)"], ["1", "1", "0.900", "1.000", "1.000"]]
    assert _table_rows(page, "#detail-table-1")[0] == ["rank", "class", "confidence", "IoU (GT)"]
    metas = trace_metas(page, "#detail-boxes-0")
    assert [m.get("role") for m in metas] == ["image", "fov", "gt", "consensus", "prediction"]
    fov, truth, cons, pred = metas[1:]
    np.testing.assert_allclose(fov["polygon"][0], [OFFSET[0] - 4, OFFSET[1] + 8])
    for box in (truth, cons, pred):  # the equivariant detector: its box in the context is the truth
        np.testing.assert_allclose(box["box"], gt[sample], atol=1e-4)
    drawn = _drawn(page, "#detail-boxes-0")
    assert drawn["images"] >= 1 and drawn["lines"] == 4 and drawn["shapes"] >= 1 and drawn["legend"] == 4
    shot(page, shots, "detection-1-cell")

    # live re-evaluation between the grid's shifts (step 4), typed into the live tx control (whole
    # pixels): the equivariant detector's box drawn in the context is again the truth, IoU 1
    field = page.locator(slot("live", 0) + " input")
    field.fill("3")
    wait_text(page, "#live-title", r"· tx 3, ty -8$")
    page.wait_for_function("() => { const g = document.querySelector('#live-boxes-0 .js-plotly-plot');"
                           " return g && g.data && g.data.some(t => t.meta && t.meta.role === 'prediction'); }")
    live = {m.get("role"): m for m in trace_metas(page, "#live-boxes-0")}
    np.testing.assert_allclose(live["fov"]["polygon"][0], [OFFSET[0] - 3, OFFSET[1] + 8], atol=1e-6)
    np.testing.assert_allclose(live["prediction"]["box"], gt[sample], atol=1e-4)
    head, row = _table_rows(page, "#live-table-0")
    assert head == ["rank", "class", "confidence", "IoU (GT)", "IoU (consensus)"] and row[:3] == ["1", "1", "0.900"]
    assert float(row[3]) == pytest.approx(1.0, abs=1e-3)
    assert "centre-biased: model not loadable: stored values only" in page.inner_text("#detail-live")
    shot(page, shots, "detection-2-live")
    assert not page.server_errors  # type: ignore[attr-defined]
    assert len(list(shots.glob("*.png"))) == 2
