"""The labelling view's logic (``/label/``, :mod:`orbitscope.app.labelling_logic`) without a
browser, on a tiny real model database (three models of a shrunken ``mnist-small-3`` family,
assessed for rotation, brightness and scale), and its Dash wiring through Flask's test client.

Agreement numbers are checked against :func:`~orbitscope.ml4ml.agreement.rater_agreement` and,
for a table built here by hand, against Fleiss' formula worked out independently.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import math
import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from orbitscope.app import AppData, create_app
from orbitscope.app.labelling_logic import (
    LabellingError, agreement_summary, check_invariance, check_model, check_rater, format_kappa, has_zoo_models,
    invariances, next_model, open_database, panel_uri, previous_model, progress, record_label, step,
)
from orbitscope.app.layout import build_layout
from orbitscope.ml4ml import zoo
from orbitscope.ml4ml.agreement import rater_agreement
from orbitscope.ml4ml.modeldb import ModelDatabase
from orbitscope.results.store import Store

INVARIANCES = ["rotation", "brightness", "scale"]


def build_tiny_zoo(home: Path) -> list[str]:
    """Three small models of a shrunken ``mnist-small-3`` family in a new store at ``home``
    (a few seconds); returns their ids in database order."""
    tiny = dataclasses.replace(zoo.FAMILIES["mnist-small-3"], name="tiny3", n_train=200, epochs_choices=(1,),
                               little_data=100, images_per_class=3, test_orbit="rotation:-2:2:1",
                               test_half_range=2.0, accuracy_floor=0.3, anomalies=False)
    report = zoo.build_family(tiny, 3, store=home, workers=1)
    assert not report.failed and len(report.built) == 3
    return [m.model_id for m in ModelDatabase(home, create=False).models()]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    home = tmp_path_factory.mktemp("labelling-zoo")
    return home, build_tiny_zoo(home)


@pytest.fixture()
def zoo_home(built: tuple[Path, list[str]], tmp_path: Path) -> Path:
    """A fresh copy of the built store (the tests write labels); the matrices files it points
    to stay those of the built store, which are only read."""
    home = tmp_path / "store"
    shutil.copytree(built[0], home)
    return home


@pytest.fixture()
def db(zoo_home: Path) -> ModelDatabase:
    found = open_database(zoo_home)
    assert found is not None
    return found


@pytest.fixture()
def ids(built: tuple[Path, list[str]]) -> list[str]:
    return built[1]


def _human(db: ModelDatabase) -> list[tuple[str, str, str, str]]:
    return sorted((lb.model_id, lb.labeller, lb.invariance, lb.label) for lb in db.labels(source="human"))


def test_invariances_rotation_first_and_every_model_in_order(db: ModelDatabase, ids: list[str]) -> None:
    assert invariances(db) == INVARIANCES
    assert ids == ["tiny3-000", "tiny3-001", "tiny3-002"]
    assert [check_invariance(db, inv) for inv in INVARIANCES] == INVARIANCES


def test_next_model_skips_what_this_rater_labelled(db: ModelDatabase, ids: list[str]) -> None:
    assert next_model(db, "alice", "rotation") == ids[0]
    record_label(db, ids[1], "invariant", "alice", "rotation")
    assert next_model(db, "alice", "rotation") == ids[0]
    assert next_model(db, "alice", "rotation", after=ids[0]) == ids[2]  # ids[1] is labelled
    assert next_model(db, "alice", "rotation", after=ids[2]) == ids[0]  # wraps round
    # another rater's labels and this rater's labels of another invariance do not count
    record_label(db, ids[0], "borderline", "bob", "rotation")
    record_label(db, ids[0], "borderline", "alice", "scale")
    assert next_model(db, "alice", "rotation") == ids[0]
    assert next_model(db, "bob", "rotation") == ids[1]
    assert next_model(db, "alice", "scale") == ids[1]
    assert progress(db, "alice", "rotation") == (1, 3)
    for m in (ids[0], ids[2]):
        record_label(db, m, "not-invariant", "alice", "rotation")
    assert next_model(db, "alice", "rotation") is None and progress(db, "alice", "rotation") == (3, 3)


def test_labels_land_in_the_database_with_invariance_and_labeller(db: ModelDatabase, ids: list[str]) -> None:
    screen = step(db, "load", "  alice ", "brightness", None)
    assert screen.model_id == ids[0] and screen.progress == "0 of 3 labelled by alice for brightness"
    assert screen.revealed == "" and not screen.error  # blind: nothing about the model before labelling
    screen = step(db, "invariant", "  alice ", "brightness", screen.model_id)
    assert _human(db) == [(ids[0], "alice", "brightness", "invariant")]
    assert screen.model_id == ids[1] and screen.revealed == ""
    assert screen.progress == "1 of 3 labelled by alice for brightness"
    assert screen.status == f"saved invariant for {ids[0]}"
    # back to the labelled model: now its labels may be shown; relabelling replaces
    back = step(db, "previous", "alice", "brightness", screen.model_id)
    assert back.model_id == ids[0] and back.revealed == "your label: invariant"  # blind: no provenance label
    again = step(db, "borderline", "alice", "brightness", back.model_id)
    assert _human(db) == [(ids[0], "alice", "brightness", "borderline")] and again.model_id == ids[1]
    step(db, "not-invariant", "alice", "brightness", ids[1])
    last = step(db, "invariant", "alice", "brightness", ids[2])
    assert last.model_id is None and "all labelled" in last.progress and last.progress.startswith("3 of 3")
    assert _human(db) == [(ids[0], "alice", "brightness", "borderline"),
                          (ids[1], "alice", "brightness", "not-invariant"),
                          (ids[2], "alice", "brightness", "invariant")]
    assert db.labels(source="human", invariance="rotation") == []
    # at the end, Previous goes to the last model
    assert step(db, "previous", "alice", "brightness", None).model_id == ids[2]


def test_skip_and_previous(db: ModelDatabase, ids: list[str]) -> None:
    assert step(db, "skip", "ann", "rotation", ids[0]).model_id == ids[1]
    assert step(db, "skip", "ann", "rotation", ids[2]).model_id == ids[0]  # wraps round
    first = step(db, "previous", "ann", "rotation", ids[0])
    assert first.model_id == ids[0] and first.status == "this is the first model"
    assert previous_model(db, "rotation", ids[2]) == ids[1]
    for m in ids[:2]:
        record_label(db, m, "invariant", "ann", "rotation")
    only = step(db, "skip", "ann", "rotation", ids[2])
    assert only.model_id == ids[2] and only.status == "no other model left to label"
    assert _human(db) == [(m, "ann", "rotation", "invariant") for m in ids[:2]]  # skipping writes nothing


def test_agreement_rows_are_those_of_rater_agreement(db: ModelDatabase, ids: list[str]) -> None:
    given = {"alice": ["invariant", "invariant", "not-invariant"],
             "bob": ["invariant", "borderline", "not-invariant"],
             "carol": ["borderline", "borderline"]}  # carol labelled two models only
    for rater, labels in given.items():
        for m, label in zip(ids, labels):
            record_label(db, m, label, rater, "rotation")
    summary = agreement_summary(db, "rotation")
    ra = rater_agreement(db.labels(), "rotation")
    assert summary.raters == ra.raters == ("alice", "bob", "carol") and summary.n_common == ra.n_common == 2
    assert summary.fleiss == pytest.approx(ra.fleiss) and summary.fleiss_text == format_kappa(ra.fleiss)
    for row in summary.rows:
        n, share, kappa = ra.against_provenance[row.rater]
        assert row.labelled == len(given[row.rater]) and row.vs_provenance == n
        assert row.share_equal == pytest.approx(share)
        assert row.kappa == pytest.approx(kappa, nan_ok=True)
        # independently: the share of this rater's labels equal to the provenance rule's
        prov = [db.get(m).label("provenance", invariance="rotation") for m in ids[:len(given[row.rater])]]
        assert share == pytest.approx(np.mean([a == b for a, b in zip(given[row.rater], prov)]))
    # nothing of another invariance
    assert agreement_summary(db, "scale").raters == ()


def _fleiss_by_hand(table: list[list[int]]) -> float:
    """Fleiss (1971), written out here: mean per-item agreement against chance agreement."""
    n = sum(table[0])
    items = len(table)
    p_items = [(sum(c * c for c in row) - n) / (n * (n - 1)) for row in table]
    totals = [sum(row[j] for row in table) / (items * n) for j in range(len(table[0]))]
    p_bar, p_e = sum(p_items) / items, sum(p * p for p in totals)
    return (p_bar - p_e) / (1 - p_e)


def test_fleiss_kappa_of_two_raters_on_three_models_by_hand(db: ModelDatabase, ids: list[str]) -> None:
    alice = ["invariant", "invariant", "not-invariant"]
    bob = ["invariant", "borderline", "not-invariant"]
    for m, a, b in zip(ids, alice, bob):
        record_label(db, m, a, "alice", "scale")
        record_label(db, m, b, "bob", "scale")
    summary = agreement_summary(db, "scale")
    # counts per model of (invariant, borderline, not-invariant): 2 0 0 / 1 1 0 / 0 0 2
    table = [[2, 0, 0], [1, 1, 0], [0, 0, 2]]
    assert _fleiss_by_hand(table) == pytest.approx(5 / 11)  # P̄ = 2/3, Pₑ = 14/36
    try:
        from statsmodels.stats.inter_rater import fleiss_kappa
    except ImportError:  # pragma: no cover - statsmodels is a test dependency
        pass
    else:
        assert fleiss_kappa(np.array(table), method="fleiss") == pytest.approx(5 / 11)
    assert summary.n_common == 3 and summary.fleiss == pytest.approx(5 / 11)
    assert summary.fleiss_text == "0.455"


def test_fleiss_needs_two_raters_with_common_models_and_nan_is_a_dash(db: ModelDatabase, ids: list[str]) -> None:
    assert agreement_summary(db, "rotation").fleiss_text == "needs ≥ 2 raters with common models"
    record_label(db, ids[0], "invariant", "alice", "rotation")
    one = agreement_summary(db, "rotation")
    assert one.raters == ("alice",) and one.fleiss_text == "needs ≥ 2 raters with common models"
    record_label(db, ids[1], "invariant", "bob", "rotation")  # two raters, no model in common
    assert agreement_summary(db, "rotation").fleiss_text == "needs ≥ 2 raters with common models"
    record_label(db, ids[0], "invariant", "bob", "rotation")  # in common, all alike: chance agreement 1
    same = agreement_summary(db, "rotation")
    assert same.n_common == 1 and math.isnan(same.fleiss) and same.fleiss_text == "–"
    assert format_kappa(float("nan")) == "–" and format_kappa(0.5) == "0.500"


@pytest.mark.parametrize("name, message", [
    ("", "enter your name first"), ("   ", "enter your name first"), (None, "enter your name first"),
    ("a" * 65, "too long"), ("bob<script>", "letters, digits, spaces"), ("ann\tlee", "letters, digits, spaces"),
    (["alice"], "enter your name first"),
])
def test_bad_rater_names_are_refused(name: object, message: str) -> None:
    with pytest.raises(LabellingError, match=message):
        check_rater(name)


def test_good_rater_names() -> None:
    assert check_rater("  O'Brien-Smith Jr. ") == "O'Brien-Smith Jr."
    assert check_rater("José_2") == "José_2" and check_rater("a" * 64) == "a" * 64


def test_nothing_is_written_without_a_valid_rater(db: ModelDatabase, ids: list[str]) -> None:
    screen = step(db, "invariant", "", "rotation", ids[0])
    assert screen.error and screen.status == "enter your name first" and screen.model_id is None
    with pytest.raises(LabellingError, match="letters"):
        record_label(db, ids[0], "invariant", "x;drop", "rotation")
    assert db.labels(source="human") == []


def test_model_ids_invariances_labels_and_actions_from_the_browser_are_checked(db: ModelDatabase,
                                                                            ids: list[str]) -> None:
    for bad in ("tiny3-999", "../../etc/passwd", {"id": ids[0]}, 3, "", None):
        with pytest.raises(LabellingError, match="unknown model|no model is shown"):
            record_label(db, bad, "invariant", "alice", "rotation")
        with pytest.raises(LabellingError, match="unknown model|no model is shown"):
            step(db, "invariant", "alice", "rotation", bad)
    for bad in ("colour", "", None, ["rotation"], "Rotation"):
        with pytest.raises(LabellingError, match="unknown invariance"):
            check_invariance(db, bad)
        with pytest.raises(LabellingError, match="unknown invariance"):
            step(db, "load", "alice", bad, None)
    with pytest.raises(LabellingError, match="unknown label"):
        record_label(db, ids[0], "maybe", "alice", "rotation")
    with pytest.raises(LabellingError, match="unknown action"):
        step(db, "delete", "alice", "rotation", ids[0])
    assert check_model(db, ids[1], "scale").model_id == ids[1]
    assert db.labels(source="human") == []


def test_panel_is_a_png_data_uri_without_provenance(db: ModelDatabase, ids: list[str]) -> None:
    model = db.get(ids[0])
    uri = panel_uri(model, "scale")
    assert uri.startswith("data:image/png;base64,")
    png = base64.b64decode(uri.split(",", 1)[1])
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000
    assert panel_uri(model, "scale") is uri  # cached
    assert panel_uri(model, "rotation") != uri


def test_a_store_without_zoo_models_is_left_alone(tmp_path: Path) -> None:
    store = Store(tmp_path / "empty")
    assert not has_zoo_models(store) and open_database(store.home) is None
    with sqlite3.connect(store.home / "catalog.sqlite") as con:
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert not any(t.startswith("zoo_") for t in tables)  # opening the view created nothing
    client = create_app(store.home).server.test_client()
    page = client.get("/label/")
    assert page.status_code == 200
    answer = _post(client, _payload("label-invariant", "alice", "rotation", None))
    assert answer.status_code == 200
    assert "orbitscope zoo train --family mnist-small-3 --n 10" in answer.get_data(as_text=True)
    assert "label-link" not in json.dumps(build_layout(AppData(store)).to_plotly_json(), default=str)


# --------------------------------------------------------------------------- the Dash wiring

_OUTPUTS = [("current-model", "data"), ("model-title", "children"), ("model-panel", "src"), ("model-panel", "style"),
            ("revealed", "children"), ("progress", "children"), ("label-status", "children"),
            ("agreement", "children")]
_BUTTONS = ["label-invariant", "label-borderline", "label-not-invariant", "label-skip", "label-previous"]


def _payload(trigger: str, rater: object, invariance: object, current: object, clicks: int = 1) -> dict:
    inputs = [{"id": "rater", "property": "n_blur", "value": 1}, {"id": "rater", "property": "n_submit", "value": 0},
              {"id": "invariance", "property": "value", "value": invariance}]
    inputs += [{"id": b, "property": "n_clicks", "value": clicks if b == trigger else 0} for b in _BUTTONS]
    return {"output": ".." + "...".join(f"{i}.{p}" for i, p in _OUTPUTS) + "..",
            "outputs": [{"id": i, "property": p} for i, p in _OUTPUTS], "inputs": inputs,
            "changedPropIds": [f"{trigger}.n_clicks" if trigger in _BUTTONS
                               else "rater.n_blur" if trigger == "rater" else f"{trigger}.value"],
            "state": [{"id": "rater", "property": "value", "value": rater},
                      {"id": "current-model", "property": "data", "value": current}]}


def _post(client, payload: dict):  # noqa: ANN001, ANN202 - Flask's test client
    return client.post("/label/_dash-update-component", data=json.dumps(payload),
                       content_type="application/json")


def test_mounted_at_label_on_the_interface_server(zoo_home: Path, ids: list[str]) -> None:
    app = create_app(zoo_home)
    client = app.server.test_client()
    index = client.get("/label/").get_data(as_text=True)
    assert "<title>orbitscope · labelling</title>" in index and "/label/assets/labelling.js" in index
    js = client.get("/label/assets/labelling.js")
    assert js.status_code == 200 and b'addEventListener("keydown"' in js.data
    assert client.get("/label").status_code in (301, 302, 308)
    assert client.get("/").status_code == 200 and b"labelling.js" not in client.get("/").data
    assert "label-link" in json.dumps(build_layout(AppData(Store(zoo_home, create=False))).to_plotly_json(),
                                      default=str)

    answer = _post(client, _payload("label-invariant", "alice", "rotation", ids[0]))
    assert answer.status_code == 200
    response = answer.get_json()["response"]
    assert response["current-model"]["data"] == ids[1]
    assert response["model-panel"]["src"].startswith("data:image/png;base64,")
    assert response["progress"]["children"] == "1 of 3 labelled by alice for rotation"
    db = ModelDatabase(zoo_home, create=False)
    assert _human(db) == [(ids[0], "alice", "rotation", "invariant")]
    # what the browser sends is never trusted: a made-up model, invariance or name is a message
    for payload, message in [(_payload("label-invariant", "alice", "rotation", "nope"), "unknown model"),
                             (_payload("label-invariant", "alice", "colour", ids[1]), "unknown invariance"),
                             (_payload("label-invariant", "<b>", "rotation", ids[1]), "letters, digits"),
                             (_payload("label-invariant", "", "rotation", ids[1]), "enter your name first")]:
        answer = _post(client, payload)
        assert answer.status_code == 200 and message in answer.get_data(as_text=True)
    assert _human(db) == [(ids[0], "alice", "rotation", "invariant")]
