"""The built documentation site in a real browser: the home page, a tutorial and the API reference
load without console errors, every image loads, and the search works offline.

The site is built into a temporary folder (``mkdocs build --strict``), served by
``python -m http.server`` on a free loopback port and loaded by Playwright for Python driving
Debian's ``/usr/bin/chromium`` (tests/browser.py). Skipped without Chromium or Playwright.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any, Iterator

import pytest

from browser import chromium_page, needs_chromium

pytest.importorskip("playwright.sync_api", reason="Playwright for Python is not installed")

pytestmark = [pytest.mark.slow, needs_chromium]

ROOT = Path(__file__).resolve().parents[1]
PAGES = ["", "tutorials/mnist/", "reference/api/"]


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def site_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    site = tmp_path_factory.mktemp("site")
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)], cwd=ROOT,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"}, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, f"mkdocs build --strict failed:\n{(proc.stdout + proc.stderr)[-6000:]}"
    port = _free_port()
    server = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1",
                               "--directory", str(site)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(url, timeout=2).close()
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise AssertionError("python -m http.server did not answer") from None
                time.sleep(0.2)
        yield url
    finally:
        server.terminate()
        server.wait(timeout=10)


def _external(url: str, site_url: str) -> bool:
    return url.startswith(("http://", "https://")) and not url.startswith(site_url)


@pytest.fixture(scope="module")
def page(site_url: str) -> Iterator[Any]:
    """One Chromium page; ``console_errors`` collects console errors, uncaught exceptions and failed
    requests to the site, ``external`` every request that leaves the site (reported by
    ``test_site_needs_no_internet``, so that its failures are not counted twice)."""
    with chromium_page() as pg:
        pg.console_errors, pg.external = [], []

        def console(msg: Any) -> None:
            url = (msg.location or {}).get("url", "")
            if msg.type == "error" and not _external(url, site_url):
                pg.console_errors.append(f"{msg.text} ({url})")

        def request(req: Any) -> None:
            if _external(req.url, site_url):
                pg.external.append(req.url)

        pg.on("console", console)
        pg.on("pageerror", lambda e: pg.console_errors.append(f"uncaught: {e}"))
        pg.on("request", request)
        pg.on("requestfailed", lambda r: not _external(r.url, site_url) and pg.console_errors.append(
            f"request failed: {r.url} ({r.failure})"))
        yield pg


def _images(pg: Any) -> list[dict[str, Any]]:
    return pg.evaluate("""() => Array.from(document.images).map(img => (
        {src: img.currentSrc || img.src, complete: img.complete, width: img.naturalWidth}))""")


@pytest.mark.parametrize("path", PAGES, ids=[p or "home" for p in PAGES])
def test_page_loads_cleanly(page: Any, site_url: str, path: str) -> None:
    page.console_errors.clear()
    response = page.goto(site_url + path, wait_until="load")
    assert response is not None and response.status == 200, f"{path}: HTTP {response and response.status}"
    page.wait_for_load_state("networkidle")
    # lazily loaded images: bring each into view, then wait for all to settle
    page.evaluate("() => { for (const img of document.images) { img.loading = 'eager'; } }")
    page.wait_for_function("() => Array.from(document.images).every(img => img.complete)")
    broken = [img["src"] for img in _images(page) if img["width"] == 0]
    assert not broken, f"{path}: images that did not load: {broken}"
    assert page.locator("article h1").count() >= 1, f"{path}: no page title"
    assert not page.console_errors, f"{path}: console errors: {page.console_errors}"


def test_site_needs_no_internet(page: Any, site_url: str) -> None:
    """The site works offline: no page asks another host for anything (Material's default Google
    Fonts would: ``theme: font: false`` in mkdocs.yml uses the system fonts instead)."""
    page.external.clear()
    for path in PAGES:
        page.goto(site_url + path, wait_until="load")
        page.wait_for_load_state("networkidle")
    assert not page.external, f"requests that leave the site: {sorted(set(page.external))}"


def test_search_works_offline(page: Any, site_url: str) -> None:
    page.console_errors.clear()
    page.goto(site_url, wait_until="load")
    box = page.locator("input.md-search__input")
    if not box.is_visible():  # narrow windows: the header's search button opens the search box
        page.locator(".md-header__button[for='__search']").click()
    box.wait_for(state="visible")
    box.click()
    box.type("orbit", delay=30)
    results = page.locator(".md-search-result__item")
    results.first.wait_for(state="visible")
    assert results.count() > 0
    meta = page.locator(".md-search-result__meta").inner_text()
    assert "orbit" in page.locator(".md-search-result__list").inner_text().lower(), meta
    # a result leads to a page of the site
    href = results.first.locator("a").first.get_attribute("href")
    assert href and (href.startswith(site_url) or not href.startswith(("http://", "https://"))), href
    assert not page.console_errors, f"console errors while searching: {page.console_errors}"
