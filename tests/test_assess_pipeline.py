"""From a tiny zoo of real MNIST models to cross-validated assessors and a verdict on a new model."""

import dataclasses

import numpy as np
import pytest
from typer.testing import CliRunner

from orbitscope.ml4ml import zoo
from orbitscope.ml4ml.assess import AssessorBundle, model_features
from orbitscope.ml4ml.assess.pipeline import (
    CANONICAL_MATRICES,
    assess_model,
    assessment_data,
    canonical_matrices,
    compare_assessors,
    fit_assessor,
)
from orbitscope.cli import app
from orbitscope.models.loading import load_model
from orbitscope.ml4ml.modeldb import ModelDatabase

runner = CliRunner()

_BASE = dataclasses.replace(zoo.FAMILIES["mnist-small"], n_train=200, epochs_choices=(1,), little_data=100,
                            images_per_class=3, test_orbit="rotation:-2:2:1", test_half_range=2.0, accuracy_floor=0.3)
FAMILY_A = dataclasses.replace(_BASE, name="tinya")
FAMILY_B = dataclasses.replace(_BASE, name="tinyb")


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    home = tmp_path_factory.mktemp("assess")
    for fam in (FAMILY_A, FAMILY_B):
        assert not zoo.build_family(fam, 4, store=home, workers=1).failed
    db = ModelDatabase(home)
    # human labels (the provenance rule needs accurate models): alternate within each family
    for i, m in enumerate(db.models()):
        db.set_label(m.model_id, "invariant" if i % 2 == 0 else "not-invariant", source="human", labeller="ann")
    db.set_label("tinyb-003", "borderline", source="human", labeller="ann")
    return home


def test_assessment_data_reads_features_images_and_labels(home):
    db = ModelDatabase(home)
    data = assessment_data(db, labels="human", labeller="ann")
    assert data.n_models == 7 and "tinyb-003" not in data.model_ids  # borderline dropped
    assert data.X.shape == (7, 80) and data.images.shape == (7, 5, 5, 5) and np.isfinite(data.X).all()
    assert sorted(set(data.families.tolist())) == ["tinya", "tinyb"] and data.identity == 2
    assert data.y.tolist() == [1 if lb == "invariant" else 0 for lb in data.labels]
    # features equal a direct computation from the stored matrices
    vm = db.get(data.model_ids[2]).load_matrices()
    mats, sigs = canonical_matrices(vm)
    assert list(mats) == list(CANONICAL_MATRICES)
    np.testing.assert_array_equal(mats["last:max"], vm["conv3:max"])
    names, x = model_features(mats, sigs)
    assert names == data.feature_names
    np.testing.assert_allclose(data.X[2], x)
    as_not = assessment_data(db, labels="human", labeller="ann", borderline="not-invariant")
    assert as_not.n_models == 8 and as_not.y[as_not.model_ids.index("tinyb-003")] == 0
    with pytest.raises(ValueError, match="no models with human labels by zed"):
        assessment_data(db, labels="human", labeller="zed")


def test_cross_validation_holds_families_out_and_includes_baselines(home):
    data = assessment_data(ModelDatabase(home), labels="human", labeller="ann")
    report = compare_assessors(data, repeats=2, folds=3, include_cnn=True)
    names = {row["assessor"] for row in report.to_rows()}
    assert {"decision_tree", "random_forest", "adaboost", "logistic_regression", "matrix_cnn",
            "baseline:accuracy_drop", "baseline:worst_level_accuracy", "baseline:all_levels_correct"} <= names
    fams = data.families
    for assignment in np.atleast_2d(report.fold_assignments):
        for fold in set(assignment.tolist()):
            test_fams = set(fams[assignment == fold].tolist())
            train_fams = set(fams[assignment != fold].tolist())
            assert not test_fams & train_fams
    for name in names:
        acc = report.mean(name)
        assert np.isnan(acc) or 0.0 <= acc <= 1.0


def test_fit_and_assess_a_new_model(home, tmp_path):
    data = assessment_data(ModelDatabase(home), labels="human", labeller="ann")
    bundle = fit_assessor(data, "random_forest")
    bundle.save(tmp_path / "rf.joblib")
    bundle = AssessorBundle.load(tmp_path / "rf.joblib")
    member = ModelDatabase(home).get("tinya-001")
    model = load_model(member.weights)
    verdict = assess_model(model, bundle, zoo.test_images(FAMILY_A), orbit=FAMILY_A.test_orbit)
    assert verdict.label in ("invariant", "not-invariant") and 0 <= verdict.probability <= 1
    assert (verdict.label == "invariant") == (verdict.probability >= 0.5)
    # the zoo model's own features: the verdict equals the bundle applied to the stored features
    row = data.model_ids.index("tinya-001")
    expected = bundle.predict_proba(data.X[row][None])[0][list(bundle.classes).index(1)]
    assert verdict.probability == pytest.approx(expected, abs=1e-6)
    assert len(verdict.top_features) == 10 and verdict.top_features[0][1] >= verdict.top_features[-1][1]
    with pytest.raises(ValueError, match="trained on matrices over"):
        assess_model(model, bundle, zoo.test_images(FAMILY_A), orbit="brightness:0.9:1.1:0.1")
    with pytest.raises(ValueError, match="unknown assessor"):
        fit_assessor(data, "svm")


def test_cli_evaluate_fit_and_assess(home, tmp_path):
    ev = runner.invoke(app, ["zoo", "evaluate", "--labels", "human:ann", "--repeats", "1", "--no-cnn",
                             "--home", str(home), "-o", str(tmp_path / "cv.csv")], env={"COLUMNS": "160"})
    assert ev.exit_code == 0, ev.output
    assert "baseline:accuracy_drop" in ev.output and "importance" in ev.output, ev.output
    assert "corrected resampled t-test" in ev.output, ev.output
    assert (tmp_path / "cv.csv").read_text().count("\n") >= 7
    fit = runner.invoke(app, ["zoo", "fit", "--labels", "human:ann", "--home", str(home)])
    assert fit.exit_code == 0, fit.output
    assert (home / "zoo" / "assessors" / "default.joblib").is_file()
    weights = ModelDatabase(home).get("tinyb-000").weights
    out = tmp_path / "panel.png"
    res = runner.invoke(app, ["assess", weights, "--per-class", "3", "--home", str(home), "-o", str(out)],
                        env={"COLUMNS": "160"})
    assert res.exit_code == 0, res.output
    assert "verdict:" in res.output and "probability invariant" in res.output and out.stat().st_size > 5000
    none = runner.invoke(app, ["assess", weights, "--assessor", str(tmp_path / "missing.joblib")])
    assert none.exit_code == 2 and "no assessor" in none.output
    bad = runner.invoke(app, ["zoo", "evaluate", "--labels", "crowd", "--home", str(home)])
    assert bad.exit_code == 2 and "--labels" in bad.output


def test_ml4ml_demo_end_to_end(tmp_path):
    from orbitscope.demos.ml4ml import run_ml4ml_demo
    from orbitscope.training.recipes import TrainRecipe

    fams = tuple(dataclasses.replace(f, name=f.name + "d", accuracy_floor=0.0) for f in (FAMILY_A, FAMILY_B))
    judged = {"upright": TrainRecipe(name="j-up", arch=FAMILY_A.arch, n_train=200, epochs=1, batch_size=64)}
    messages: list[str] = []
    res = run_ml4ml_demo(tmp_path / "home", tmp_path / "out", study=None, per_family=4, repeats=1, families=fams,
                         judged=judged, judged_family=fams[0], workers=1, status=messages.append)
    assert res.n_models >= 4 and any("family-held-out" in m for m in messages)
    for name in ("cv.csv", "verdicts.csv", "importances.csv", "matrices_upright_rotation.png"):
        assert (tmp_path / "out" / name).stat().st_size > 50, name
    (v,) = res.verdicts  # rotation-only families: one verdict, for rotation
    assert v["model"] == "upright" and v["invariance"] == "rotation" and v["trained with"] == "none"
    assert v["verdict"] in ("invariant", "not-invariant") and 0 <= v["probability invariant"] <= 1
    assert "brightness: not assessed" in res.cv_table
    assert {r["assessor"] for r in res.cv_rows} >= {"random_forest", "baseline:accuracy_drop"}


def test_an_estimator_that_cannot_be_fitted_on_a_fold_predicts_its_majority():
    import numpy as np
    from sklearn.tree import DecisionTreeClassifier

    from orbitscope.ml4ml.assess.validation import cross_validate_by_family

    class Refuses:
        def fit(self, X, y):
            raise ValueError("ensemble is worse than random")

    rng = np.random.default_rng(0)
    X = rng.normal(size=(12, 3))
    y = np.array(["invariant", "not-invariant"] * 6)
    fams = np.repeat(["a", "b", "c"], 4)
    cv = cross_validate_by_family(X, y, fams, repeats=2, folds=3,
                                  make_estimators={"tree": lambda s: DecisionTreeClassifier(random_state=s),
                                                   "refuses": lambda s: Refuses()})
    assert cv.fallback_folds == {"tree": 0, "refuses": 6}
    # the fallback predicts each training fold's most common label: here always a tie broken alike
    assert set(cv.predictions["refuses"].ravel()) <= {"invariant", "not-invariant"}
    assert np.isfinite(cv.accuracies["refuses"]).all()
