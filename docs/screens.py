"""Screenshots of the interactive interface for the documentation (docs/guides/interface.md).

Serves the store that ``make demo`` filled (``orbitscope serve`` in this process, on a free
loopback port) and drives Debian's Chromium with Playwright for Python through one view per task:
the classification view (MNIST), a detection run group, the PIV mosaic and NERO's point-cloud
disks; then the ML4ML labelling view (``/label/``) on a three-model zoo built for the purpose in a
temporary store (the demo's store has no zoo). Each page is saved, downscaled to at most 1,400 px
wide, as ``docs/assets/screens/<name>.png``.

Usage (after ``make demo``; needs ``/usr/bin/chromium`` and the ``playwright`` package, which
``make test`` installs; it uses the browser tests' helpers in ``tests/browser.py``)::

    .venv/bin/python docs/screens.py [STORE] [--url URL] [--only NAME ...]

STORE defaults to ``orbitscope-runs``. With ``--url`` the views come from an interface that is
already running on that store (``orbitscope serve --port 8071`` gives ``http://127.0.0.1:8071/``).
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import sys
import tempfile
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any, Iterator

from PIL import Image

# the browser helpers the interface's browser tests use (slot ids, serving a store, waiting for
# text, locating plot points and disk cells)
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from browser import disk_cell_point, plot_point, served, slot, wait_text  # noqa: E402

OUT = Path(__file__).resolve().parent / "assets" / "screens"
CHROMIUM = "/usr/bin/chromium"
MAX_WIDTH = 1400
TIMEOUT_MS = 120_000
#: the run groups, as their names start in the group menu
GROUPS = {
    "detection": "digit-scenes:",
    "piv": "piv-synthetic:",
    "pointcloud": "so3_nero",
}


@contextmanager
def serve(home: Path) -> Iterator[str]:
    """The interface on the store at ``home`` on a free loopback port; yields its URL. The store is
    opened by its folder name from its parent folder, so that the page's header names it as
    ``orbitscope serve`` run next to it would (``store orbitscope-runs``), not by a full path."""
    here = Path.cwd()
    home = home.resolve()
    os.chdir(home.parent)
    try:
        with served(Path(home.name)) as url:
            yield url
    finally:
        os.chdir(here)


@contextmanager
def browser_page() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=[
            "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update"])
        pg = browser.new_page(viewport={"width": 1500, "height": 1200})
        pg.set_default_timeout(TIMEOUT_MS)
        try:
            yield pg
        finally:
            browser.close()


def wait_graph(pg: Any, graph: str, test: str) -> None:
    """Wait until the plotly graph inside ``graph`` has a trace ``t`` for which ``test`` holds."""
    pg.wait_for_function("([g, test]) => { const d = document.querySelector(g + ' .js-plotly-plot');"
                         " return d && d.data && d.data.some(t => eval(test)); }", arg=[graph, test])


def save(pg: Any, name: str) -> Path:
    """A full-page screenshot, downscaled to at most :data:`MAX_WIDTH` px wide and reduced to
    256 colours (a quarter of the bytes; the pages are flat colours and plots)."""
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / f"{name}.png"
    pg.mouse.move(1, 1)  # no hover label
    pg.wait_for_timeout(1500)  # let plotly finish its transitions
    pg.screenshot(path=str(path), full_page=True)
    image = Image.open(path).convert("RGB")
    if image.width > MAX_WIDTH:
        image = image.resize((MAX_WIDTH, round(image.height * MAX_WIDTH / image.width)), Image.LANCZOS)
    image = image.quantize(colors=256, method=Image.Quantize.FASTOCTREE, dither=Image.Dither.NONE)
    image.save(path, optimize=True)
    print(f"{path.relative_to(OUT.parents[2])}: {image.width} × {image.height}, {path.stat().st_size / 1e3:.0f} kB")
    return path


def choose(pg: Any, menu: str, text: str) -> None:
    """Pick the option ``text`` of the drop-down ``menu``."""
    pg.click(menu)
    pg.locator("[role=option]", has_text=text).first.click()


def open_group(pg: Any, url: str, prefix: str) -> None:
    """Load the page and switch to the run group whose name starts with ``prefix``."""
    pg.goto(url)
    wait_text(pg, "#detail-title", r"^sample \d+")
    pg.click("#group")
    pg.locator("[role=option]", has_text=prefix).first.click()
    pg.wait_for_timeout(2000)


def classification(pg: Any, url: str) -> None:
    """MNIST: plain vs rotation-augmented CNN; samples ranked by how much their confidence varies
    over the orbit, the plain CNN's most variable one selected, re-evaluated live at 90°."""
    pg.goto(url)
    wait_text(pg, "#detail-title", r"^sample \d+ · label \d")
    pg.locator("#rank-by").get_by_text("most variable").click()
    pg.wait_for_timeout(3000)
    pg.locator(slot("rank", 0) + " [role=slider]").focus()
    pg.keyboard.press("Home")  # rank 1: the plain CNN's most variable sample
    wait_text(pg, slot("rank-label", 0), r"^1/500$")
    field = pg.locator(slot("live", 0) + " input")
    field.fill("90")
    field.press("Enter")
    wait_text(pg, "#live-title", r"angle 90°$")
    pg.evaluate("document.activeElement && document.activeElement.blur()")
    pg.wait_for_timeout(3000)
    save(pg, "classification")


def detection(pg: Any, url: str) -> None:
    """The digit scenes: the two centre detectors' heat maps, the cell (tx 8, ty -8) selected."""
    open_group(pg, url, GROUPS["detection"])
    wait_text(pg, slot("panel-title", 1), r"^centre-detector-jitter100$")
    wait_text(pg, "#detail-title", r"· tx 0, ty 0$")
    choose(pg, "#metric", "confidence × IoU")
    pg.wait_for_timeout(2000)
    wait_graph(pg, "#aggregate", "t.type === 'heatmap'")
    pg.mouse.click(*plot_point(pg, "#aggregate", 8, -8))
    wait_text(pg, "#detail-title", r"· tx 8, ty -8$")
    pg.wait_for_selector("#detail-table-0 tbody tr")
    wait_graph(pg, "#detail-boxes-0", "t.meta && t.meta.role === 'prediction'")
    save(pg, "detection")


def piv(pg: Any, url: str) -> None:
    """The synthetic PIV pairs: the 4×4 mosaics, the cell of element 10 (time reversed, rot90)."""
    open_group(pg, url, GROUPS["piv"])
    wait_text(pg, slot("panel-title", 1), r"^flow-cnn")
    wait_text(pg, "#detail-title", r"· time forward, identity$")
    wait_graph(pg, "#aggregate", "t.type === 'heatmap'")
    pg.mouse.click(*plot_point(pg, "#aggregate", 0.5, 0.5))  # row 0, column 0 of NERO's mosaic: element 10
    wait_text(pg, "#detail-title", r"· time reversed, rot90$")
    pg.wait_for_selector("#detail-pair-1")
    pg.wait_for_timeout(3000)
    save(pg, "piv")


def pointcloud(pg: Any, url: str) -> None:
    """NERO's SO(3) sample: the disks of PointNet plain and augmented; the cloud on which the plain
    PointNet is furthest behind the augmented one, at a cell of the plain PointNet's xz disk
    (axis angle 120°, rotation angle 90°): the cloud in 3-D."""
    open_group(pg, url, GROUPS["pointcloud"])
    wait_text(pg, slot("panel-title", 1), r"^pointnet")
    wait_text(pg, "#detail-title", r"rotation_angle 0°$")
    choose(pg, "#metric", "accuracy")
    pg.wait_for_timeout(2000)
    pg.locator("#rank-by").get_by_text("furthest behind the other model").click()
    pg.wait_for_timeout(3000)
    pg.locator(slot("rank", 0) + " [role=slider]").focus()
    pg.keyboard.press("Home")  # rank 1: the cloud on which the plain PointNet is furthest behind
    wait_text(pg, slot("rank-label", 0), r"^1/200$")
    pg.evaluate("document.activeElement && document.activeElement.blur()")
    pg.wait_for_timeout(2000)
    wait_graph(pg, "#aggregate", "t.type === 'barpolar'")
    pg.mouse.click(*disk_cell_point(pg, "pointnet-nero", "xz", 120.0, 90.0))
    wait_text(pg, "#detail-title", r"xz plane, axis_angle 120°, rotation_angle 90°$")
    wait_graph(pg, "#detail-cloud", "t.meta && t.meta.role === 'cloud'")
    pg.wait_for_timeout(3000)
    save(pg, "pointcloud")


def tiny_zoo(home: Path) -> None:
    """Three small models of ML4ML's ``mnist-small-3`` family, shrunk to build in about a minute
    (four epochs, 20 test images per class, no anomalies), in a new store at ``home``."""
    from orbitscope.ml4ml import zoo

    family = dataclasses.replace(zoo.FAMILIES["mnist-small-3"], name="docs-zoo", epochs_choices=(4,),
                                 images_per_class=20, anomalies=False)
    report = zoo.build_family(family, 3, store=home, workers=1)
    if report.failed or len(report.built) != 3:
        raise RuntimeError(f"the zoo did not build: {report}")


def labelling(pg: Any, url: str) -> None:
    """The ML4ML labelling view: a rater's name entered, the first model's matrix panels."""
    pg.goto(url + "label/")
    wait_text(pg, "#label-status", "enter your name first")
    field = pg.locator("#rater")
    field.fill("")
    field.press_sequentially("ada")
    pg.evaluate("document.activeElement && document.activeElement.blur()")
    wait_text(pg, "#progress", r"^\d+ of 3 labelled by ada for rotation")
    wait_text(pg, "#model-title", r"^model ")
    pg.set_viewport_size({"width": 1500, "height": 640})  # the page is short: no empty space below
    pg.wait_for_timeout(1500)
    save(pg, "labelling")


VIEWS = {"classification": classification, "detection": detection, "piv": piv, "pointcloud": pointcloud}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("store", nargs="?", default="orbitscope-runs", help="the demo's store")
    parser.add_argument("--url", help="an interface already serving that store (then STORE is not opened)")
    parser.add_argument("--only", nargs="*", choices=[*VIEWS, "labelling"], help="these views only")
    args = parser.parse_args()
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no line per request
    names = args.only or [*VIEWS, "labelling"]
    store_views = [n for n in names if n in VIEWS]
    if store_views:
        with nullcontext(args.url) if args.url else serve(Path(args.store)) as url:
            with browser_page() as pg:
                for name in store_views:
                    VIEWS[name](pg, url)
    if "labelling" in names:
        with tempfile.TemporaryDirectory(prefix="orbitscope-docs-") as tmp:
            zoo_home = Path(tmp) / "zoo-runs"
            tiny_zoo(zoo_home)
            with serve(zoo_home) as url, browser_page() as pg:
                labelling(pg, url)


if __name__ == "__main__":
    main()
