"""The labelling view (``/label/``) end to end in real Chromium: two raters label models with the
keyboard, each label reaches the store's model database at once, the progress advances and the
agreement card shows the Fleiss kappa that :func:`~orbitscope.ml4ml.agreement.rater_agreement`
computes from the database."""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

from orbitscope.app.labelling_logic import format_kappa
from orbitscope.ml4ml.agreement import rater_agreement
from orbitscope.ml4ml.modeldb import ModelDatabase

from browser import chromium_page, needs_chromium, served, shot, wait_text
from test_app_labelling import build_tiny_zoo

pytestmark = [needs_chromium, pytest.mark.slow]


@pytest.fixture(scope="module")
def zoo_served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path, list[str]]]:
    home = tmp_path_factory.mktemp("labelling-browser")
    ids = build_tiny_zoo(home)
    with served(home) as url:
        yield url, home, ids


def _wait_label(home: Path, model_id: str, rater: str, timeout: float = 30.0) -> str:
    """Poll the database until ``rater``'s rotation label of ``model_id`` is there; return it."""
    db = ModelDatabase(home, create=False)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = [lb for lb in db.labels(source="human", invariance="rotation")
                 if lb.model_id == model_id and lb.labeller == rater]
        if found:
            return found[0].label
        time.sleep(0.1)
    raise AssertionError(f"no label of {model_id} by {rater} in the database after {timeout} s")


def _blur(pg: Any) -> None:
    """Focus back on the page body (keys then go to the shortcuts, not a field)."""
    pg.evaluate("document.activeElement && document.activeElement.blur()")
    assert pg.evaluate("document.activeElement === document.body")


def _enter_rater(pg: Any, name: str) -> None:
    """Clear the name field and type ``name`` key by key (its letters include shortcut keys,
    which must go into the field), then leave the field."""
    field = pg.locator("#rater")
    field.fill("")
    field.press_sequentially(name)
    _blur(pg)
    wait_text(pg, "#progress", rf"^\d+ of 3 labelled by {name} for rotation")


def test_two_raters_label_with_the_keyboard(zoo_served: Any, tmp_path: Path) -> None:
    url, home, ids = zoo_served
    with chromium_page() as pg:
        pg.goto(url + "label/")
        wait_text(pg, "#label-status", "enter your name first")
        assert pg.locator("#model-panel").is_hidden()
        _blur(pg)
        pg.keyboard.press("i")  # no name: nothing happens
        wait_text(pg, "#label-status", "enter your name first")

        _enter_rater(pg, "alice")
        wait_text(pg, "#progress", r"^0 of 3 labelled by alice for rotation$")
        wait_text(pg, "#model-title", rf"^model {ids[0]} · rotation$")
        assert pg.locator("#model-panel").get_attribute("src").startswith("data:image/png;base64,")
        assert pg.locator("#revealed").inner_text() == ""  # blind before labelling
        card = pg.locator("#model-title").locator("xpath=..").inner_text()
        assert "provenance" not in card and "accuracy" not in card and "augment" not in card

        pg.keyboard.press("i")
        assert _wait_label(home, ids[0], "alice") == "invariant"
        wait_text(pg, "#progress", r"^1 of 3 labelled by alice for rotation$")
        wait_text(pg, "#model-title", rf"^model {ids[1]} ")
        pg.keyboard.press("n")
        assert _wait_label(home, ids[1], "alice") == "not-invariant"
        wait_text(pg, "#progress", r"^2 of 3 labelled by alice for rotation$")
        wait_text(pg, "#model-title", rf"^model {ids[2]} ")
        # a key pressed before the next model is shown is dropped: it never labels the model
        # the rater has not seen (nor relabels the one they just labelled)
        pg.keyboard.press("i")
        pg.keyboard.press("n")
        assert _wait_label(home, ids[2], "alice") == "invariant"
        wait_text(pg, "#progress", r"^3 of 3 labelled by alice for rotation · all labelled$")
        wait_text(pg, "#label-status", "all labelled")
        assert pg.locator("#model-panel").is_hidden()
        pg.wait_for_timeout(500)
        assert _wait_label(home, ids[2], "alice") == "invariant"
        wait_text(pg, "#agreement-raters", r"raters: alice$")
        wait_text(pg, "#fleiss-kappa", "needs ≥ 2 raters with common models")

        _enter_rater(pg, "bob")  # 'b' typed into the field must not label anything
        wait_text(pg, "#progress", r"^0 of 3 labelled by bob for rotation$")
        wait_text(pg, "#model-title", rf"^model {ids[0]} ")
        db = ModelDatabase(home, create=False)
        assert sorted((lb.labeller, lb.model_id) for lb in db.labels(source="human")) == [
            ("alice", m) for m in ids]
        pg.keyboard.press("i")
        assert _wait_label(home, ids[0], "bob") == "invariant"
        wait_text(pg, "#progress", r"^1 of 3 labelled by bob for rotation$")
        pg.keyboard.press("b")
        assert _wait_label(home, ids[1], "bob") == "borderline"
        wait_text(pg, "#progress", r"^2 of 3 labelled by bob for rotation$")

        agreement = rater_agreement(db.labels(), "rotation")
        assert agreement.raters == ("alice", "bob") and agreement.n_common == 2
        want = format_kappa(agreement.fleiss)
        assert want == "0.200"  # counts 2 0 0 / 0 1 1: P̄ = 1/2, Pₑ = 3/8
        wait_text(pg, "#fleiss-kappa", f"^{want}$")
        assert pg.locator("tr.agreement-row").count() == 2

        pg.keyboard.press("p")  # back to the model bob just labelled: his own label shows
        wait_text(pg, "#model-title", rf"^model {ids[1]} ")
        wait_text(pg, "#revealed", "^your label: borderline$")  # blind: never the provenance label
        path = shot(pg, tmp_path, "labelling")
        shutil.copy(path, "/tmp/labelling_view.png")

        pg.reload()  # the name is remembered by the browser
        pg.wait_for_function("document.querySelector('#rater') && document.querySelector('#rater').value === 'bob'")
        wait_text(pg, "#progress", r"^2 of 3 labelled by bob for rotation$")
        assert pg.server_errors == []
