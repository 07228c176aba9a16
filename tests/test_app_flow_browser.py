"""The flow (PIV) view end to end in real Chromium (Playwright for Python driving Debian's
``/usr/bin/chromium``): switch to the flow run group, see NERO's 4×4 mosaic of per-pixel EPE
maps (the default), click inside a cell's map, read the detail panel (the transformed pair, the
moved consensus flows, the EPE maps), re-evaluate live at another element with the live
controls; switch the mosaic to averaged cells and click one.

Store: a small classification run (so that the flow group has to be chosen) and the flow store of
:mod:`test_app_flow`. Screenshots go to the test's temporary folder (``shots/``) and, when
``ORBITSCOPE_SCREENSHOT_DIR`` is set, to that folder too.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pytest

import orbitscope as osc
from orbitscope.group import NERO_MOSAIC

from browser import chromium_page, needs_chromium, plot_point, served as served_app, shot, slot, trace_metas, wait_text
from helpers import TinyNet
from test_app_flow import build_flow_store

pytestmark = [needs_chromium, pytest.mark.slow]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path, dict[str, str], np.ndarray]]:
    home = tmp_path_factory.mktemp("flow-browser-store")
    digits = osc.mnist_subset("test").stratified(1)  # first in the store: the page opens on this group
    osc.evaluate(TinyNet().eval(), digits, osc.Rotation([0, 90]), store=home, name="tiny", model_name="tiny")
    ids, uv = build_flow_store(home)
    with served_app(home) as url:
        yield url, home, ids, uv


@pytest.fixture()
def page(served: Any) -> Iterator[Any]:
    with chromium_page() as pg:
        yield pg






def _drawn_images(pg: Any, graph: str) -> int:
    return pg.evaluate("(g) => document.querySelector(g + ' .js-plotly-plot').querySelectorAll('image').length", graph)


def _wait_graph(pg: Any, graph: str, role: str) -> None:
    pg.wait_for_function("([g, role]) => { const d = document.querySelector(g + ' .js-plotly-plot');"
                         " return d && d.data && d.data.some(t => t.meta && t.meta.role === role); }",
                         arg=[graph, role])


def _wait_marker(pg: Any, graph: str, element: int) -> None:
    """Wait until every marker of the plot inside ``graph`` frames ``element`` (the plot redraws
    after the detail panel's title changes)."""
    pg.wait_for_function("([g, e]) => { const d = document.querySelector(g + ' .js-plotly-plot');"
                         " if (!d || !d.data) return false;"
                         " const m = d.data.filter(t => t.meta && t.meta.role === 'marker');"
                         " return m.length > 0 && m.every(t => t.meta.element === e); }",
                         arg=[graph, element])


def _closed_form(uv: np.ndarray, element: int) -> np.ndarray:
    u, v = uv
    by_d = {0: (u, v), 1: (-v, -u), 2: (v, -u), 3: (-u, v), 4: (-u, -v), 5: (v, u), 6: (-v, u), 7: (u, -v)}
    out = np.array(by_d[element % 8], dtype=float)
    return -out if element >= 8 else out


def test_flow_view_in_chromium(served: Any, page: Any, tmp_path: Path) -> None:
    url, home, ids, uv = served
    shots = tmp_path / "shots"
    page.goto(url)
    wait_text(page, "#detail-title", r"^sample \d+ · label \d")  # the classification group first
    page.click("#group")
    page.locator("[role=option]", has_text="shift-pairs").click()
    wait_text(page, slot("panel-title", 1), r"^ramp$")
    title = wait_text(page, "#detail-title", r"^sample \d+ · time forward, identity$")
    sample = int(re.match(r"sample (\d+)", title).group(1))
    page.wait_for_function("() => { const g = document.querySelector('#aggregate .js-plotly-plot');"
                           " return g && g.data && g.data.some(t => t.type === 'heatmap'); }")
    # NERO's default: per-pixel maps, one heatmap per cell and model, at the cells of the 4×4 mosaic
    cells = [m for m in trace_metas(page, "#aggregate") if m.get("role") == "value"]
    assert len(cells) == 32 and all(m["element"] == NERO_MOSAIC[m["cell"][0]][m["cell"][1]] for m in cells)
    assert page.locator("#mosaic-cells-row").is_visible()  # the toggle, shown for these runs
    assert "0th–80th percentile of all models' values" in page.inner_text("#aggregate")
    assert page.locator("#aggregate .hm image, #aggregate .heatmaplayer image").count() >= 32 or \
        _drawn_images(page, "#aggregate") >= 32
    shot(page, shots, "flow-0-maps")

    # click inside the map of element 10 (time reversed, rot90): row 0, column 0
    element = 10
    r, c = np.argwhere(np.array(NERO_MOSAIC) == element)[0]
    page.mouse.click(*plot_point(page, "#aggregate", c + 0.5, r + 0.6))
    wait_text(page, "#detail-title", rf"^sample {sample} · time reversed, rot90$")
    _wait_marker(page, "#aggregate", element)
    marks = [m for m in trace_metas(page, "#aggregate") if m.get("role") == "marker"]
    assert marks and all(m["element"] == element for m in marks)
    wait_text(page, "#live-title", r"· time reversed, rot90$")  # the live controls jump to the element
    for k in (0, 1):
        page.wait_for_selector(f"#detail-pair-{k}")
        assert page.locator(f"#detail-pair-{k}").get_attribute("src").startswith("data:image/png;base64,")
    assert "ground truth (moved)" in page.inner_text("#detail-gt")  # the stored truth, drawn
    want = _closed_form(uv[sample], element)
    for i in (0, 1):
        _wait_graph(page, f"#detail-consensus-{i}", "quiver")
        metas = {m.get("role"): m for m in trace_metas(page, f"#detail-consensus-{i}")}
        assert set(metas) >= {"wheel", "quiver", "arrow-base"}
        if i == 0:  # the exact estimator's consensus: the truth, moved by the element
            np.testing.assert_allclose(metas["quiver"]["u"], want[0], atol=1e-5)
            np.testing.assert_allclose(metas["quiver"]["v"], want[1], atol=1e-5)
        assert _drawn_images(page, f"#detail-consensus-{i}") >= 1
        _wait_graph(page, f"#detail-epe-{i}", "epe-map")
        assert page.locator(f"#detail-epe-{i} .heatmaplayer image, #detail-epe-{i} .hm image").count() >= 1 or \
            _drawn_images(page, f"#detail-epe-{i}") >= 1
        assert re.search(r"EPE \d\.\d{3} px · RMSE", page.inner_text(f"#detail-metrics-{i}"))
    _wait_graph(page, "#live-flow-0", "quiver")
    shot(page, shots, "flow-1-cell")

    # live re-evaluation at another element: the d4 control (8 named marks) moved from rot90 two
    # steps on, to rot180, with the keyboard (time still reversed)
    assert page.locator(slot("live", 1)).get_by_text("rot180", exact=True).count() == 1
    thumb = page.locator(slot("live", 1) + " [role=slider]")
    thumb.focus()
    thumb.press("ArrowRight")
    thumb.press("ArrowRight")
    wait_text(page, "#live-title", r"· time reversed, rot180$")
    page.wait_for_function("() => { const g = document.querySelector('#live-flow-0 .js-plotly-plot');"
                           " return g && g.layout && g.layout.meta && g.data.some(t => t.meta && t.meta.role === 'quiver'"
                           " && Math.abs(t.meta.u[0] - (%r)) < 1e-4 && Math.abs(t.meta.v[0] - (%r)) < 1e-4); }"
                           % tuple(float(x) for x in _closed_form(uv[sample], 12)))
    live = {m.get("role"): m for m in trace_metas(page, "#live-flow-0")}
    want = _closed_form(uv[sample], 12)
    np.testing.assert_allclose(live["quiver"]["u"], want[0], atol=1e-5)
    np.testing.assert_allclose(live["quiver"]["v"], want[1], atol=1e-5)
    assert "EPE vs consensus 0.000 px" in page.inner_text("#live-metrics-0")
    _wait_graph(page, "#live-epe-1", "epe-map")
    assert page.locator("#live-pair-0").count() == 1 and page.locator("#live-pair-1").count() == 1
    # the stored panel still shows the clicked element
    assert page.inner_text("#detail-title").endswith("time reversed, rot90")
    shot(page, shots, "flow-2-live")

    # the averaged toggle: one mean per cell (NERO's transformed F in each), a click still selects
    page.get_by_label("averaged").check()
    page.wait_for_function("() => { const g = document.querySelector('#aggregate .js-plotly-plot');"
                           " return g && g.data && g.data.some(t => t.meta && t.meta.role === 'glyph'); }")
    flat = [m for m in trace_metas(page, "#aggregate") if m.get("role") == "value"]
    assert len(flat) == 2 and all(m["elements"] == [list(r) for r in NERO_MOSAIC] for m in flat)
    r, c = np.argwhere(np.array(NERO_MOSAIC) == 7)[0]
    page.mouse.click(*plot_point(page, "#aggregate", c + 0.5, r + 0.75))
    wait_text(page, "#detail-title", rf"^sample {sample} · time forward, vflip$")
    page.get_by_label("per-pixel maps").check()
    page.wait_for_function("() => { const g = document.querySelector('#aggregate .js-plotly-plot');"
                           " return g && g.data && g.data.filter(t => t.meta && t.meta.cell).length === 32; }")
    assert not page.server_errors  # type: ignore[attr-defined]
    assert len(list(shots.glob("*.png"))) == 3
