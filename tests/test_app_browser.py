"""The web interface end to end in real Chromium (Playwright for Python driving Debian's
``/usr/bin/chromium``): load the page, click a scatter point, step and move the ranking sliders,
select an orbit element, re-evaluate live, switch a model. Screenshots go to the test's
temporary folder (``shots/``).

Every check compares what the page shows with numbers computed here from the store.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pytest

from orbitscope.analysis.ranking import rank_samples
from orbitscope.results.store import Store

from browser import chromium_page, needs_chromium, served as served_app, slot
from test_app_callbacks import ANGLES, build_store

pytestmark = [needs_chromium, pytest.mark.slow]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path, dict[str, str]]]:
    home = tmp_path_factory.mktemp("browser-store")
    ids = build_store(home)
    with served_app(home) as url:
        yield url, home, ids


@pytest.fixture()
def page(served: Any, tmp_path: Path) -> Iterator[Any]:
    with chromium_page() as pg:
        yield pg


def _shot(pg: Any, folder: Path, name: str) -> None:
    folder.mkdir(exist_ok=True)
    pg.screenshot(path=str(folder / f"{name}.png"), full_page=True)


def _wait_text(pg: Any, selector: str, pattern: str) -> str:
    """Wait until the element's text matches ``pattern`` (a regex); return the text."""
    handle = pg.wait_for_function("([sel, pat]) => { const e = document.querySelector(sel);"
                                  " return e && new RegExp(pat).test(e.textContent) && e.textContent; }",
                                  arg=[selector, pattern])
    return handle.json_value()


def _selected_sample(pg: Any) -> int:
    text = _wait_text(pg, "#detail-title", r"^sample \d+")
    return int(re.match(r"sample (\d+)", text).group(1))


def _individual_title(pg: Any, expect: str | None = None) -> str:
    """The individual plot's title; with ``expect``, once it contains that text (the plot
    redraws after the detail panel, so wait for it rather than read it once)."""
    if expect is not None:
        pg.wait_for_function("(want) => { const g = document.querySelector('#individual .js-plotly-plot');"
                             " return g && g.layout && g.layout.title && g.layout.title.text.includes(want); }",
                             arg=expect)
    return pg.evaluate("document.querySelector('#individual .js-plotly-plot').layout.title.text")


def _point_boxes(pg: Any, graph: str, trace: int = 0) -> list[dict[str, float]]:
    """Page-space centres of the points of one trace of a plotly graph (in data order), once
    they stop moving (plotly first draws at a default size, then fits its container)."""
    script = """([graph, trace]) => {
        const t = document.querySelectorAll(graph + ' .scatterlayer .trace')[trace];
        if (!t) return null;  // not drawn yet: try again
        return Array.from(t.querySelectorAll('.points path.point')).map(p => {
            const b = p.getBoundingClientRect(); return {x: b.x + b.width / 2, y: b.y + b.height / 2}; });
    }"""
    boxes = None
    for _ in range(50):
        pg.wait_for_timeout(200)
        now = pg.evaluate(script, [graph, trace])
        if now and now == boxes:
            return now
        boxes = now
    raise AssertionError(f"the points of {graph} did not settle")


def test_linked_views_in_chromium(served: Any, page: Any, tmp_path: Path) -> None:
    url, home, ids = served
    shots = tmp_path / "shots"
    store = Store(home, create=False)
    ref, cen = store.load(ids["ref-cnn"]), store.load(ids["centroid"])
    rankings = [rank_samples(ref, "confidence", "worst"), rank_samples(cen, "confidence", "worst")]

    page.goto(url)
    first = _selected_sample(page)
    assert first == rankings[0].sample[0]  # the worst sample of the first model
    _wait_text(page, slot("rank-label", 0), r"^1/60$")
    _shot(page, shots, "1-loaded")

    # click an isolated point of the first scatter: that sample is selected everywhere
    boxes = _point_boxes(page, slot("scatter", 0))
    xy = np.array([[b["x"], b["y"]] for b in boxes])
    dist = np.linalg.norm(xy[:, None] - xy[None], axis=-1) + np.eye(len(xy)) * 1e9
    dist[first] = 0  # not the current sample
    target = int(np.argmax(dist.min(axis=1)))  # sample ids are 0..59 in point order
    page.mouse.click(*xy[target])
    _wait_text(page, "#detail-title", rf"^sample {target} · label {int(ref.label.sel(sample=target))}")
    assert f"sample {target}:" in _individual_title(page, f"sample {target}:")
    k = rankings[0].rank_of(target)
    _wait_text(page, slot("rank-label", 0), rf"^{k}/60$")
    _wait_text(page, slot("rank-label", 1), rf"^{rankings[1].rank_of(target)}/60$")  # linked slider
    _shot(page, shots, "2-scatter-click")

    # next ▶ on the first slider: the next sample of its ranking; the other slider follows
    page.click(slot("next", 0))
    nxt = int(rankings[0].sample[k]) if k < 60 else target
    _wait_text(page, "#detail-title", rf"^sample {nxt} ")
    _wait_text(page, slot("rank-label", 1), rf"^{rankings[1].rank_of(nxt)}/60$")

    # move the second slider with the mouse: whatever rank it lands on, everything agrees
    before = rankings[1].rank_of(nxt)
    track = page.locator(slot("rank", 1) + " .dash-slider-track").bounding_box()
    page.mouse.click(track["x"] + (0.2 if before > 30 else 0.8) * track["width"], track["y"] + track["height"] / 2)
    k1 = int(_wait_text(page, slot("rank-label", 1), rf"^(?!{before}/)\d+/60$").split("/")[0])
    assert abs(k1 - before) > 10
    moved = int(rankings[1].sample[k1 - 1])
    _wait_text(page, "#detail-title", rf"^sample {moved} ")
    _wait_text(page, slot("rank-label", 0), rf"^{rankings[0].rank_of(moved)}/60$")
    _shot(page, shots, "3-sliders")

    # click an element of the individual NERO plot: the point of either curve furthest from all
    # others (0° and 360° coincide, so not those)
    curves = [_point_boxes(page, "#individual", trace=t) for t in (0, 1)]  # value traces, then markers
    xy = np.array([[b["x"], b["y"]] for c in curves for b in c])
    dist = np.linalg.norm(xy[:, None] - xy[None], axis=-1) + np.eye(len(xy)) * 1e9
    n = len(ANGLES)
    score = dist.min(axis=1)
    score[[0, n - 1, n, 2 * n - 1]] = -1
    best = int(np.argmax(score))
    angle = float(list(ANGLES)[best % n])
    page.mouse.click(*xy[best])
    _wait_text(page, "#detail-title", rf"· angle {angle:g}°$")
    _wait_text(page, "#live-title", rf"angle {angle:g}°$")  # the live slider jumps to the element
    assert page.locator("#detail-image").get_attribute("src").startswith("data:image/png;base64,")
    _shot(page, shots, "4-element")

    # live re-evaluation at an angle between grid points, by dragging the live slider
    live = page.locator(slot("live", 0) + " .dash-slider-track").bounding_box()
    page.mouse.click(live["x"] + 0.13 * live["width"], live["y"] + live["height"] / 2)
    text = _wait_text(page, "#live-title", rf"angle (?!{angle:g}°)\d+°$")
    assert int(text.split()[-1][:-1]) % 30, "the live slider picks angles between the grid's"
    assert page.locator("#live-bars").count() == 1
    assert "centroid: model not loadable: stored values only" in page.inner_text("#detail-live")
    _shot(page, shots, "5-live")

    # switch the second model: centroid out, tiny in
    page.click("#models")
    page.locator("[role=option]", has_text="centroid").click()
    page.locator("[role=option]", has_text="tiny").click()
    page.keyboard.press("Escape")
    _wait_text(page, slot("panel-title", 1), r"^tiny$")
    page.wait_for_function("() => document.querySelector('#aggregate .js-plotly-plot').data"
                           ".some(t => t.name === 'tiny')")
    tiny = rank_samples(store.load(ids["tiny"]), "confidence", "worst")
    _wait_text(page, slot("rank-label", 1), rf"^{tiny.rank_of(_selected_sample(page))}/60$")
    _shot(page, shots, "6-switched")
    assert not page.server_errors  # type: ignore[attr-defined]
    assert len(list(shots.glob("*.png"))) == 6


def _aggregate_traces(pg: Any, role: str) -> list[dict[str, Any]]:
    """The aggregate figure's traces of one role, as the page holds them: series, values and
    angles (arrays that plotly.js keeps as base64 typed-array specs are decoded)."""
    return pg.evaluate("""(role) => {
        const types = {f8: Float64Array, f4: Float32Array, i4: Int32Array, i2: Int16Array, i1: Int8Array,
                       u4: Uint32Array, u2: Uint16Array, u1: Uint8Array};
        const numbers = (v) => {
            if (v && v.bdata !== undefined) {
                const bin = atob(v.bdata), bytes = new Uint8Array(bin.length);
                for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
                return Array.from(new types[v.dtype](bytes.buffer));
            }
            return Array.from(v || []);
        };
        return document.querySelector('#aggregate .js-plotly-plot').data
            .filter(t => (t.meta || {}).role === role)
            .map(t => ({series: t.meta.series, r: numbers(t.r), theta: numbers(t.theta)}));
    }""", role)


def _wait_role(pg: Any, role: str) -> None:
    pg.wait_for_function("(role) => { const g = document.querySelector('#aggregate .js-plotly-plot');"
                         " return g && g.data && g.data.some(t => (t.meta || {}).role === role); }", arg=role)


def test_whole_orbit_statistics_toggles_in_chromium(served: Any, page: Any) -> None:
    from orbitscope.stats import compare_models, simultaneous_band

    url, home, ids = served
    store = Store(home, create=False)
    runs = {name: store.load(ids[name]) for name in ("ref-cnn", "centroid")}  # the two preselected models
    page.goto(url)
    _selected_sample(page)
    _wait_role(page, "value")
    assert not _aggregate_traces(page, "simultaneous-band")  # off by default

    page.check("#simultaneous input[type=checkbox]")
    _wait_role(page, "simultaneous-band")
    drawn = {t["series"]: t for t in _aggregate_traces(page, "simultaneous-band")}
    assert set(drawn) == set(runs)
    for name, res in runs.items():
        band = simultaneous_band(res, "confidence")
        expected = np.concatenate([band["upper"].values, [np.nan], band["lower"].values])
        np.testing.assert_allclose(np.asarray(drawn[name]["r"], dtype=float), expected, rtol=1e-9)
    assert "simultaneous 95% band" in page.text_content("#aggregate .legend")  # drawn in the legend

    # two models compared: the second toggle is offered and marks the significant differences
    assert page.locator("#compare-row").is_visible()
    page.check("#compare input[type=checkbox]")
    _wait_role(page, "worse")
    comparison = compare_models(runs["ref-cnn"], runs["centroid"], "confidence", names=("ref-cnn", "centroid"))
    assert comparison.worse.any()  # ref-cnn is behind the centroid model at some angles
    (worse,) = _aggregate_traces(page, "worse")
    np.testing.assert_allclose(worse["theta"], np.asarray(list(ANGLES), dtype=float)[comparison.worse])
    title = page.evaluate("document.querySelector('#aggregate .js-plotly-plot').layout.title.text")
    assert " ".join(comparison.verdict().split()) in " ".join(re.sub(r"<[^>]+>", " ", title).split())
    assert not page.server_errors  # type: ignore[attr-defined]
