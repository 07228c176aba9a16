"""The point-cloud view end to end in real Chromium (Playwright for Python driving Debian's
``/usr/bin/chromium``): switch to the point-cloud runs over NERO's SO(3) sample, click a cell of a
disk, read the detail panel (the rotated cloud in 3-D, the stored class bars), then turn the
cloud with the live axis and angle controls and read the live re-evaluation.

Store: a small classification run (so that the point-cloud group has to be chosen) and the store
of :mod:`test_app_pointcloud`. Screenshots go to the test's temporary folder (``shots/``) and,
when ``ORBITSCOPE_SCREENSHOT_DIR`` is set, to that folder too.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy.spatial.transform import Rotation as R

import orbitscope as osc
from orbitscope.results.store import Store

from browser import chromium_page, disk_cell_point, needs_chromium, served as served_app, shot, slot, wait_text
from helpers import TinyNet
from test_app_pointcloud import StoredPointNet, build_pointcloud_store, nero_rotation, probabilities

pytestmark = [needs_chromium, pytest.mark.slow]

#: the disk cell clicked: net-a's xz disk, axis angle 120°, rotation angle 90°
PLANE, PHI, PSI = 1, 120.0, 90.0
WHERE = f"xz plane, axis_angle {PHI:g}°, rotation_angle {PSI:g}°"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path, dict[tuple[str, str], str]]]:
    home = tmp_path_factory.mktemp("pointcloud-browser-store")
    digits = osc.mnist_subset("test").stratified(1)  # first in the store: the page opens on this group
    osc.evaluate(TinyNet().eval(), digits, osc.Rotation([0, 90]), store=home, name="tiny", model_name="tiny")
    ids = build_pointcloud_store(home)
    with served_app(home) as url:
        yield url, home, ids


@pytest.fixture()
def page(served: Any) -> Iterator[Any]:
    with chromium_page() as pg:
        yield pg


def _traces(pg: Any, graph: str) -> list[dict[str, Any]]:
    """type, meta, x/y/z of every trace of the plotly graph inside ``graph``."""
    return pg.evaluate("(g) => document.querySelector(g + ' .js-plotly-plot').data.map(t => ({type: t.type,"
                       " meta: t.meta || {}, x: t.x, y: t.y, z: t.z}))", graph)


def _cloud(pg: Any, graph: str) -> np.ndarray:
    (trace,) = [t for t in _traces(pg, graph) if t["meta"].get("role") == "cloud"]
    return np.stack([trace["x"], trace["y"], trace["z"]], axis=-1).astype(np.float64)


def _bars(pg: Any, graph: str) -> dict[str, np.ndarray]:
    return {t["meta"]["series"]: np.asarray(t["y"], dtype=np.float64) for t in _traces(pg, graph) if t["type"] == "bar"}


def _wait_graph(pg: Any, graph: str, role: str) -> None:
    pg.wait_for_function("([g, role]) => { const d = document.querySelector(g + ' .js-plotly-plot');"
                         " return d && d.data && d.data.some(t => t.meta && t.meta.role === role); }",
                         arg=[graph, role])


def _slider_value(pg: Any, name: str) -> float:
    return float(pg.locator(slot(f"pointcloud-{name}", 0) + " [role=slider]").get_attribute("aria-valuenow"))


def test_pointcloud_view_in_chromium(served: Any, page: Any, tmp_path: Path) -> None:
    url, home, ids = served
    store = Store(home, create=False)
    shots = tmp_path / "shots"
    page.goto(url)
    wait_text(page, "#detail-title", r"^sample \d+ · label \d")  # the classification group first
    page.click("#group")
    page.locator("[role=option]", has_text="so3_nero").click()
    wait_text(page, slot("panel-title", 1), r"^net-b-so3_nero$")
    title = wait_text(page, "#detail-title", r"^sample \d+ · label \d · xy plane, axis_angle 0°, rotation_angle 0°$")
    sample = int(re.match(r"sample (\d+)", title).group(1))
    page.wait_for_function("() => { const g = document.querySelector('#aggregate .js-plotly-plot');"
                           " return g && g.data && g.data.filter(t => t.type === 'barpolar').length === 6; }")

    # click the xz disk's cell (120°, 90°) of net-a
    page.mouse.click(*disk_cell_point(page, "net-a-so3_nero", "xz", PHI, PSI))
    wait_text(page, "#detail-title", rf"^sample {sample} · label {sample % 3} · {WHERE}$")
    wait_text(page, "#live-title", rf"^live re-evaluation at any rotation · from {WHERE}$")  # the live controls follow
    cloud = store.load(ids[("so3_nero", "net-a")]).data["input_points"].sel(sample=sample).values.astype(np.float64)
    rotation = nero_rotation(PLANE, PHI, PSI)
    _wait_graph(page, "#detail-cloud", "cloud")
    np.testing.assert_allclose(_cloud(page, "#detail-cloud"), rotation.apply(cloud), atol=2e-6)
    scene = page.evaluate("() => { const s = document.querySelector('#detail-cloud .js-plotly-plot')._fullLayout.scene;"
                          " return {aspectmode: s.aspectmode, ranges: ['xaxis', 'yaxis', 'zaxis'].map(a => s[a].range)}; }")
    assert scene == {"aspectmode": "cube", "ranges": [[-1, 1]] * 3}
    assert page.locator("#detail-cloud canvas").count() >= 1  # drawn with WebGL
    text = page.inner_text("#detail-rotation")
    assert f"rotation {PSI:g}° about axis (-0.500, +0.000, -0.866)" in text
    assert "axis azimuth 180°, elevation -60°" in text
    assert f"NERO coordinates: xz plane, axis angle {PHI:g}°, rotation angle {PSI:g}°" in text
    _wait_graph(page, "#detail-bars", "probabilities")
    bars = _bars(page, "#detail-bars")
    assert list(bars) == ["net-a-so3_nero", "net-b-so3_nero"]
    for model in ("net-a", "net-b"):
        stored = store.load(ids[("so3_nero", model)]).probabilities.sel(
            sample=sample, plane=PLANE, axis_angle=PHI, rotation_angle=PSI).values
        np.testing.assert_allclose(bars[f"{model}-so3_nero"], stored, rtol=1e-6)
    # the live panel starts at the clicked element: azimuth 180°, elevation -60°, angle 90°
    assert (_slider_value(page, "azimuth"), _slider_value(page, "elevation"), _slider_value(page, "angle")) == (
        180.0, -60.0, 90.0)
    _wait_graph(page, "#live-bars", "probabilities")
    np.testing.assert_allclose(_bars(page, "#live-bars")["net-a-so3_nero"],
                               store.load(ids[("so3_nero", "net-a")]).probabilities.sel(
                                   sample=sample, plane=PLANE, axis_angle=PHI, rotation_angle=PSI).values, atol=1e-5)
    assert "net-b-so3_nero: no weights for this model" in page.inner_text(slot("pointcloud-live-result", 0))
    shot(page, shots, "pointcloud-1-cell")

    # live: type an angle of 33°, tilt the axis up by 5° with the keyboard (elevation -55°: still in the xz
    # plane, at axis angle 125°), then turn it by -10° in azimuth (170°: out of every NERO plane)
    box = page.locator(slot("pointcloud-angle", 0) + " input")
    box.fill("33")
    box.press("Enter")
    wait_text(page, "#live-rotation", r"^rotation 33° about axis")
    thumb = page.locator(slot("pointcloud-elevation", 0) + " [role=slider]")
    thumb.focus()
    for _ in range(5):
        thumb.press("ArrowRight")
    wait_text(page, "#live-rotation", r"elevation -55°NERO coordinates: xz plane, axis angle 125°, rotation angle 33°$")
    shot(page, shots, "pointcloud-2-live")
    thumb = page.locator(slot("pointcloud-azimuth", 0) + " [role=slider]")
    thumb.focus()
    for _ in range(10):
        thumb.press("ArrowLeft")
    wait_text(page, "#live-rotation", r"^rotation 33° about axis.*azimuth 170°, elevation -55°NERO coordinates: none")
    azimuth, elevation, angle = (_slider_value(page, n) for n in ("azimuth", "elevation", "angle"))
    assert (azimuth, elevation, angle) == (170.0, -55.0, 33.0)
    a, e = math.radians(azimuth), math.radians(elevation)
    live = R.from_rotvec(math.radians(angle) * np.array([math.cos(e) * math.cos(a), math.cos(e) * math.sin(a),
                                                           math.sin(e)]))
    page.wait_for_function("() => { const g = document.querySelector('#live-bars .js-plotly-plot');"
                           " return g && g.layout && g.layout.title.text.includes('azimuth 170°'); }")
    np.testing.assert_allclose(_bars(page, "#live-bars")["net-a-so3_nero"],
                               probabilities(StoredPointNet(0), live.apply(cloud)), atol=2e-5)
    np.testing.assert_allclose(_cloud(page, "#live-cloud"), live.apply(cloud), atol=2e-6)
    # the stored panel still shows the clicked element
    assert page.inner_text("#detail-title").endswith(WHERE)
    shot(page, shots, "pointcloud-3-live-off-plane")
    assert not page.server_errors  # type: ignore[attr-defined]
    assert len(list(shots.glob("*.png"))) == 3
