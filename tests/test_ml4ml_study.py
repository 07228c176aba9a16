"""Study files: a model database written to one npz and read back gives the same assessment data
and the same cross-validation; the shipped study holds what the README says it does."""

import dataclasses
import json

import numpy as np
import pytest
from typer.testing import CliRunner

from orbitscope.cli import app
from orbitscope.ml4ml import zoo
from orbitscope.ml4ml.assess.pipeline import assessment_data, compare_assessors, compare_invariances
from orbitscope.ml4ml.modeldb import ModelDatabase
from orbitscope.ml4ml.study import SHIPPED_STUDY, STUDY_FORMAT, Study, export_study

runner = CliRunner()
_TINY = dataclasses.replace(zoo.FAMILIES["mnist-small-3"], n_train=200, epochs_choices=(1,), little_data=100,
                            images_per_class=3, test_orbit="rotation:-2:2:1", test_half_range=2.0,
                            accuracy_floor=0.0, anomalies=False)
INVARIANCES = ("rotation", "brightness", "scale")


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    home = tmp_path_factory.mktemp("study")
    for name in ("sta", "stb"):
        assert not zoo.build_family(dataclasses.replace(_TINY, name=name), 5, store=home, workers=1).failed
    database = ModelDatabase(home)
    database.set_label("sta-001", "invariant", source="human", labeller="ann", invariance="scale")
    return database


@pytest.fixture(scope="module")
def study(db, tmp_path_factory):
    path = export_study(db, tmp_path_factory.mktemp("file") / "s.npz")
    return Study.load(path)


def test_a_study_reads_back_the_assessment_data_of_its_database(db, study):
    assert study.families() == {"sta": 5, "stb": 5}
    assert sorted(study.labels(), key=repr) == sorted(db.labels(), key=repr)
    assert study.get("sta-001").label("human", "ann", "scale") == "invariant"
    for inv in INVARIANCES:
        a, b = assessment_data(db, invariance=inv), assessment_data(study, invariance=inv)
        assert a.model_ids == b.model_ids and a.labels == b.labels and list(a.families) == list(b.families)
        assert a.feature_names == b.feature_names and a.identity == b.identity and a.orbit == b.orbit
        np.testing.assert_array_equal(a.X, b.X)  # features are stored, not recomputed
        for ca, cb in zip(a.correctness, b.correctness, strict=True):
            np.testing.assert_array_equal(ca, cb)
        # matrices are kept as float32 upper triangles
        np.testing.assert_allclose(b.images, a.images, rtol=1e-6, atol=1e-7)
        assert np.array_equal(b.images, np.swapaxes(b.images, -1, -2))
        for m in db.models():
            assert study.get(m.model_id).metrics_for(inv) == m.metrics_for(inv)


def test_cross_validation_of_a_study_equals_that_of_its_database(db, study):
    # every invariance, one repeat of two folds (two fitted splits per assessor: enough for the paired test)
    a = compare_invariances(db, repeats=1, folds=2)
    b = compare_invariances(study, repeats=1, folds=2)
    assert [c.invariance for c in a] == [c.invariance for c in b] == list(INVARIANCES)
    for ca, cb in zip(a, b, strict=True):
        assert ca.report is not None and cb.report is not None, (ca.note, cb.note)
        assert ca.report.to_rows() == cb.report.to_rows() and ca.test_line() == cb.test_line()
    # compare_invariances is compare_assessors per invariance
    assert compare_assessors(assessment_data(study, invariance="scale"), repeats=1, folds=2,
                             include_cnn=False).to_rows() == b[2].report.to_rows()


def test_study_files_refuse_what_they_cannot_read(study, tmp_path):
    with pytest.raises(FileNotFoundError, match="zoo export"):
        Study.load(tmp_path / "missing.npz")
    with np.load(study.path) as f:
        arrays = {k: f[k] for k in f.files}
    meta = json.loads(str(arrays["meta"]))
    meta["format"] = STUDY_FORMAT + 1
    arrays["meta"] = np.array(json.dumps(meta))
    np.savez(tmp_path / "future.npz", **arrays)
    with pytest.raises(ValueError, match="format"):
        Study.load(tmp_path / "future.npz")
    with pytest.raises(ValueError, match="no models"):
        export_study(ModelDatabase(tmp_path / "empty"), tmp_path / "x.npz")


def test_cli_export_and_evaluate_a_study(db, tmp_path):
    out = tmp_path / "cli.npz"
    res = runner.invoke(app, ["zoo", "export", str(out), "--home", str(db.store.home)])
    assert res.exit_code == 0, res.output
    assert "10 models" in res.output and out.is_file()
    ev = runner.invoke(app, ["zoo", "evaluate", "--study", str(out), "--invariance", "all", "--repeats", "1",
                             "--folds", "2", "--no-cnn", "-o", str(tmp_path / "cv.csv")], env={"COLUMNS": "160"})
    assert ev.exit_code == 0, ev.output
    rows = (tmp_path / "cv.csv").read_text().splitlines()
    assert rows[0].startswith("invariance,") and {r.split(",")[0] for r in rows[1:]} == set(INVARIANCES)
    fit = runner.invoke(app, ["zoo", "fit", "--study", str(out), "--invariance", "scale", "-o",
                              str(tmp_path / "a.joblib")])
    assert fit.exit_code == 0 and (tmp_path / "a.joblib").is_file(), fit.output
    # a study's bundle never replaces the store's default one silently
    bare = runner.invoke(app, ["zoo", "fit", "--study", str(out), "--home", str(db.store.home)])
    assert bare.exit_code == 2 and "-o FILE" in bare.output, bare.output


# -- the shipped study ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def shipped():
    if not SHIPPED_STUDY.is_file():
        pytest.fail(f"the shipped study {SHIPPED_STUDY} is missing; regenerate it with 'make study'")
    return Study.load()


def test_the_shipped_study_has_the_papers_scope(shipped):
    models = shipped.models()
    assert len(models) == 208
    archs = {m.provenance["architecture"]["arch"] for m in models}
    assert archs == {"small_cnn", "vgg_bn", "small_resnet"}
    assert {m.provenance["data"] for m in models} == {"mnist-subset", "fashion-mnist"}
    assert len(shipped.families()) == 8 and set(shipped.families().values()) == {26}
    for m in models:
        assert m.invariances == list(INVARIANCES)
        for inv in INVARIANCES:
            rec = m.records[inv]
            assert rec.correct.shape == (1000, 31) and rec.matrices.shape == (5, 31, 31)
            assert m.label("provenance", invariance=inv) is not None
    # ML4ML's anomalies are recorded as provenance, and every augmentation kind occurs for every test
    for key in ("noise_images", "leakage", "fgsm_eps"):
        assert any(m.provenance[key] for m in models), key
    assert any(m.provenance["ordered_batches"] for m in models)
    assert any(m.provenance["pretrain_data"] for m in models)
    assert any(m.provenance["label_noise"] for m in models) and any(m.provenance["class_imbalance"] for m in models)
    for inv in INVARIANCES:
        kinds = {m.provenance["relations"][inv] for m in models}
        assert kinds == {"none", "narrower", "matched", "wider", "gap"}, (inv, kinds)


@pytest.mark.slow  # the cross-validation of every assessor on the 208 models of the shipped study
def test_the_demo_on_the_shipped_study(shipped, tmp_path):
    from orbitscope.demos.ml4ml import run_ml4ml_demo
    from orbitscope.training.recipes import TrainRecipe

    judged = {"quick": TrainRecipe(name="j-quick", arch=zoo.FAMILIES["mnist-small-3"].arch, n_train=200, epochs=1,
                                   batch_size=64)}
    # the judged model is assessed over the study's own orbits (the family's; an assessor refuses
    # others) on 5 test images per class instead of the family's 100: the verdicts, panels and
    # tables are made the same way, at a twentieth of the evaluation
    judged_family = dataclasses.replace(zoo.FAMILIES["mnist-small-3"], images_per_class=5)
    res = run_ml4ml_demo(tmp_path / "home", tmp_path / "out", repeats=1, judged=judged, judged_family=judged_family)
    assert res.n_models == len(shipped.models())
    assert {r["invariance"] for r in res.cv_rows} == set(INVARIANCES)
    assert {t["invariance"] for t in res.tests} == set(INVARIANCES)
    assert [v["invariance"] for v in res.verdicts] == list(INVARIANCES)
    for inv in INVARIANCES:
        assert (tmp_path / "out" / f"matrices_quick_{inv}.png").stat().st_size > 5000
    assert (tmp_path / "out" / "paired_tests.csv").read_text().count("\n") == 4
    assert {r["invariance"] for r in res.importances} == set(INVARIANCES)


def _synthetic_matrices(scale: float, seed: int = 0):
    """Variance matrices of made-up signals (top-1 confidence and two layers' max / max-mean), the
    activation signals multiplied by ``scale``."""
    from orbitscope.ml4ml.matrices import VarianceMatrices, variance_matrix

    rng = np.random.default_rng(seed)
    names = ["top1_confidence", "conv2:max", "conv2:max-mean", "conv3:max", "conv3:max-mean"]
    levels = np.linspace(-3, 3, 7)
    sig = rng.uniform(0.5, 1.0, size=(5, 40, 7)) + 0.1 * np.abs(levels)
    sig[1:] *= scale
    return VarianceMatrices(names=names, levels=levels, level_dim="angle",
                            matrices=np.stack([variance_matrix(s) for s in sig]), signals=sig,
                            correct=np.ones((40, 7), bool), identity=3, split="correct", samples=np.arange(40))


def test_relative_features_do_not_depend_on_the_activation_scale():
    from orbitscope.ml4ml.assess.pipeline import RELATIVE, AssessmentRecord
    from orbitscope.ml4ml.matrices import identity_scale

    a, b = (AssessmentRecord.from_matrices(_synthetic_matrices(c)) for c in (1.0, 37.0))
    np.testing.assert_allclose(a.relative_features, b.relative_features, rtol=1e-9)
    assert not np.allclose(a.features, b.features)  # the raw activation features scale with it
    # the relative "mean" is the raw mean over the signal's mean |value| at the identity
    vm = _synthetic_matrices(5.0)
    rec = AssessmentRecord.from_matrices(vm)
    raw = rec.features[rec.feature_names.index("last:max/mean")]
    rel = rec.relative_features[rec.relative_names.index(RELATIVE + "last:max/mean")]
    assert rel == pytest.approx(raw / identity_scale(vm.signals[3], 3))
    # confidence features are shared; "both" appends only the relative activation features
    names, x = rec.feature_set("both")
    assert len(names) == 80 + 64 == len(set(names)) == x.size
    assert rec.feature_set("relative")[0][:16] == rec.feature_names[:16]
    with pytest.raises(ValueError, match="features must be one of"):
        rec.feature_set("normalised")


def test_a_study_keeps_the_relative_features(db, study):
    for features in ("relative", "both"):
        a = assessment_data(db, invariance="brightness", features=features)
        b = assessment_data(study, invariance="brightness", features=features)
        assert a.feature_names == b.feature_names
        np.testing.assert_array_equal(a.X, b.X)
