"""Model databases over three invariances (ML4ML's rotation, brightness and scale): independent
augmentation draws per transformation, matrices and provenance labels per invariance, and
stores from before labels had an invariance."""

from __future__ import annotations

import dataclasses
import sqlite3
from collections import Counter

import numpy as np
import pytest

from orbitscope.ml4ml import zoo
from orbitscope.ml4ml.assess.pipeline import assessment_data
from orbitscope.ml4ml.modeldb import ModelDatabase
from orbitscope.results.store import Store


def test_members_draw_each_invariance_independently_and_balanced() -> None:
    fam = zoo.FAMILIES["mnist-small-3"]
    assert fam.invariances == ("rotation", "brightness", "scale") and fam.images_per_class == 100
    provs = [zoo.provenance(fam, zoo.member_recipe(fam, i)) for i in range(60)]
    for inv in fam.invariances:
        kinds = [p["relations"][inv] for p in provs]
        for b in range(0, 60, 5):  # every block of five members has each kind once
            assert sorted(kinds[b:b + 5]) == sorted(["none", "narrower", "matched", "wider", "gap"]), (inv, b)
    rot, bri, sca = ([p["relations"][inv] for p in provs] for inv in fam.invariances)
    assert rot != bri and bri != sca  # drawn independently
    for p in provs:
        lo, hi = p["brightness_range"]
        assert p["relations"]["brightness"] == zoo.offset_relation((lo, hi), 0.3) and hi <= 0.9
    counts = Counter(k for p in provs for k in ("noise_images", "leakage", "ordered_batches", "fgsm_eps",
                                                "pretrain_data") if p[k])
    assert set(counts) == {"noise_images", "leakage", "ordered_batches", "fgsm_eps", "pretrain_data"}
    assert sum(counts.values()) < 40  # the exception: 25 expected (5 kinds × 60 members / 12)
    # the rotation-only families are as before: no per-invariance fields in their provenance
    assert "relations" not in zoo.provenance(zoo.FAMILIES["mnist-small"], zoo.member_recipe("mnist-small", 0))
    assert len([f for f in zoo.FAMILIES.values() if f.invariances == fam.invariances]) == 8  # 4 archs × 2 datasets


def test_a_three_invariance_member_records_matrices_and_labels_per_invariance(tmp_path) -> None:
    tiny = dataclasses.replace(zoo.FAMILIES["mnist-small-3"], name="tiny3", n_train=200, epochs_choices=(1,),
                               little_data=100, images_per_class=3, test_orbit="rotation:-2:2:1",
                               test_half_range=2.0, accuracy_floor=0.3, anomalies=False)
    report = zoo.build_family(tiny, 3, store=tmp_path, workers=1)
    assert not report.failed and len(report.built) == 3
    db = ModelDatabase(tmp_path)
    for m in db.models():
        assert m.invariances == ["rotation", "brightness", "scale"]
        for inv in m.invariances:
            vm = m.load_matrices(inv)
            assert vm.attrs.get("invariance", "rotation") == inv and vm.names == list(zoo.ZOO_SIGNALS)
            want = zoo.provenance_label(m.provenance, m.metrics, tiny.accuracy_floor, inv)
            assert m.label("provenance", invariance=inv) == want
        assert len(m.load_matrices("brightness").levels) == 31
        np.testing.assert_allclose(m.load_matrices("scale").levels, np.round(np.arange(0.7, 1.3001, 0.02), 2))
        assert m.metrics_for("scale")["n_images"] == m.metrics["n_images"]
    data = assessment_data(db, invariance="scale", borderline="invariant")
    assert data.n_models == 3 and data.orbit == "scale:0.7:1.3:0.02"


def test_a_store_from_before_invariances_is_migrated(tmp_path) -> None:
    store = Store(tmp_path)
    with sqlite3.connect(store.home / "catalog.sqlite") as con:
        con.execute("CREATE TABLE zoo_labels (model_id TEXT NOT NULL, source TEXT NOT NULL, labeller TEXT NOT NULL, "
                    "label TEXT NOT NULL, note TEXT NOT NULL, created REAL NOT NULL, "
                    "PRIMARY KEY (model_id, source, labeller))")
        con.execute("INSERT INTO zoo_labels VALUES ('m-000', 'human', 'ann', 'invariant', '', 1.0)")
    db = ModelDatabase(tmp_path)
    (label,) = db.labels()
    assert (label.model_id, label.labeller, label.label, label.invariance) == ("m-000", "ann", "invariant", "rotation")
    assert ModelDatabase(tmp_path).labels() == [label]  # opening again changes nothing


@pytest.mark.slow  # ten zoo members, then two family-held-out cross-validations per invariance
def test_cross_validation_per_invariance_from_the_api_and_the_cli(tmp_path) -> None:
    from typer.testing import CliRunner

    from orbitscope.cli import app
    from orbitscope.ml4ml.assess.pipeline import compare_invariances

    for name, base in (("tinya", "mnist-small-3"), ("tinyb", "mnist-vgg-3")):
        fam = dataclasses.replace(zoo.FAMILIES[base], name=name, n_train=200, epochs_choices=(1,), little_data=100,
                                  images_per_class=2, test_orbit="rotation:-2:2:1", test_half_range=2.0,
                                  accuracy_floor=0.0, anomalies=False)
        assert not zoo.build_family(fam, 5, store=tmp_path, workers=1).failed
    db = ModelDatabase(tmp_path)
    # one repeat of two folds (each family held out once): two splits, the fewest the paired test takes
    results = compare_invariances(db, repeats=1, borderline="invariant")
    assert [c.invariance for c in results] == ["rotation", "brightness", "scale"]
    for c in results:
        assert c.report is not None and c.data.n_models == 10, c.note
        assert c.report.n_families == 2 and "baseline:accuracy_drop" in c.report.names
        assert c.test is not None, c.note
        assert c.test.b.startswith("baseline:") and not c.test.a.startswith("baseline:") and c.test.splits == 2
    out = CliRunner().invoke(app, ["zoo", "evaluate", "--invariance", "all", "--repeats", "1", "--no-cnn",
                                   "--borderline", "invariant", "--home", str(tmp_path), "-o", str(tmp_path / "cv.csv")],
                             env={"COLUMNS": "160"})
    assert out.exit_code == 0, out.output
    assert all(inv in out.output for inv in ("rotation", "brightness", "scale"))
    rows = (tmp_path / "cv.csv").read_text().splitlines()
    assert rows[0].startswith("invariance,") and {r.split(",")[0] for r in rows[1:]} == {"rotation", "brightness",
                                                                                            "scale"}
