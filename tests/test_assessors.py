"""ML4ML assessors, formula baselines, the assessor bundle and family-held-out cross-validation."""

import csv
import io

import joblib
import numpy as np
import pytest
import torch

from orbitscope.ml4ml.assess.assessors import (
    ASSESSORS,
    BASELINES,
    AccuracyDropBaseline,
    AllLevelsCorrectBaseline,
    AssessorBundle,
    MatrixCNNAssessor,
    accuracy_drop,
    worst_level_accuracy,
    all_levels_correct_share,
    best_threshold,
    feature_importances,
    stack_matrices,
)
from orbitscope.ml4ml.matrices import variance_matrix
from orbitscope.ml4ml.assess.validation import cross_validate_by_family, family_folds

# --------------------------------------------------------------------------- synthetic databases


def separable_database(n_families=12, per_family=5, n_features=6, informative=2, seed=0):
    """Label = sign of one feature, which stays at least 1 away from 0 (a margin every assessor finds)."""
    rng = np.random.default_rng(seed)
    n = n_families * per_family
    X = rng.normal(size=(n, n_features))
    sign = rng.choice([-1.0, 1.0], size=n)
    X[:, informative] = sign * rng.uniform(1.0, 2.0, size=n)
    y = (sign > 0).astype(int)
    families = np.repeat([f"fam{k:02d}" for k in range(n_families)], per_family)
    return X, y, families


def correctness_database(n_models=24, n_images=40, n_levels=7, seed=0):
    """Invariant models keep 95 % accuracy at every level; the others fall to 40 % at the ends."""
    rng = np.random.default_rng(seed)
    y = np.array(["invariant", "not invariant"] * (n_models // 2))
    dist = np.abs(np.arange(n_levels) - n_levels // 2) / (n_levels // 2)
    C = []
    for label in y:
        p = np.full(n_levels, 0.95) if label == "invariant" else 0.95 - 0.55 * dist
        C.append(rng.random((n_images, n_levels)) < p)
    return C, y


def matrix_images(n_models=40, n=9, seed=0):
    """Two matrices per model; class 1 has a signal changing twice as fast with the level (channel 0);
    channel 1 is noise of random scale."""
    rng = np.random.default_rng(seed)
    p = np.linspace(-1, 1, n)
    y = np.arange(n_models) % 2
    images = []
    for label in y:
        slope = rng.uniform(1.0, 1.5) * (2.0 if label else 1.0)
        s0 = slope * rng.uniform(0.5, 1.0, size=(20, 1)) * p + 0.05 * rng.normal(size=(20, n))
        s1 = rng.uniform(0.1, 3.0) * rng.normal(size=(20, n))
        images.append(stack_matrices({"conf": variance_matrix(s0), "act": variance_matrix(s1)}))
    return np.stack(images), y


# --------------------------------------------------------------------------- feature assessors


@pytest.mark.parametrize("name", sorted(ASSESSORS))
def test_feature_assessors_learn_and_are_deterministic(name):
    X, y, _ = separable_database()
    est = ASSESSORS[name](3).fit(X[:40], y[:40])
    assert np.mean(est.predict(X[40:]) == y[40:]) == 1.0
    again = ASSESSORS[name](3).fit(X[:40], y[:40])
    np.testing.assert_array_equal(est.predict_proba(X[40:]), again.predict_proba(X[40:]))


def test_forest_importances_sum_to_one_and_find_the_informative_feature():
    X, y, _ = separable_database(informative=4)
    names = [f"f{k}" for k in range(X.shape[1])]
    ranked = feature_importances(ASSESSORS["random_forest"](0).fit(X, y), names)
    assert sum(v for _, v in ranked) == pytest.approx(1.0)
    assert ranked[0][0] == "f4"
    assert [v for _, v in ranked] == sorted((v for _, v in ranked), reverse=True)


def test_logistic_importances_are_normalised_standardised_coefficients():
    X, y, _ = separable_database(informative=1)
    X[:, 1] *= 1000.0  # raw units must not matter: the pipeline standardises
    fitted = ASSESSORS["logistic_regression"](0).fit(X, y)
    ranked = feature_importances(fitted, [f"f{k}" for k in range(X.shape[1])])
    assert ranked[0][0] == "f1"
    coef = np.abs(fitted[-1].coef_[0])
    assert dict(ranked)["f0"] == pytest.approx(coef[0] / coef.sum())
    assert sum(v for _, v in ranked) == pytest.approx(1.0)


def test_importances_errors():
    X, y, _ = separable_database()
    with pytest.raises(ValueError, match="6 features"):
        feature_importances(ASSESSORS["decision_tree"](0).fit(X, y), ["a", "b"])
    C, yc = correctness_database(n_models=6)
    with pytest.raises(TypeError, match="no per-feature importances"):
        feature_importances(AccuracyDropBaseline().fit(C, yc), ["score"])


# --------------------------------------------------------------------------- matrix CNN


def test_matrix_cnn_learns_is_deterministic_and_leaves_the_global_rng_alone():
    images, y = matrix_images(n_models=48)
    state = torch.get_rng_state()
    cnn = MatrixCNNAssessor(epochs=20, seed=1).fit(images[:32], y[:32])
    assert torch.equal(state, torch.get_rng_state())
    assert np.mean(cnn.predict(images[32:]) == y[32:]) >= 0.9
    proba = cnn.predict_proba(images[32:])
    assert proba.shape == (16, 2) and np.allclose(proba.sum(axis=1), 1.0)
    again = MatrixCNNAssessor(epochs=20, seed=1).fit(images[:32], y[:32])
    np.testing.assert_array_equal(proba, again.predict_proba(images[32:]))
    other = MatrixCNNAssessor(epochs=2, seed=2).fit(images[:32], y[:32])
    assert not np.array_equal(proba, other.predict_proba(images[32:]))


def test_matrix_cnn_takes_any_matrix_size_and_checks_inputs():
    for n in (5, 12):
        images, y = matrix_images(n_models=8, n=n)
        cnn = MatrixCNNAssessor(epochs=2, channels=4).fit(images, y)
        assert cnn.predict_proba(images).shape == (8, 2)
    with pytest.raises(ValueError, match="fitted on 2 matrices"):
        cnn.predict(images[:, :1])
    with pytest.raises(ValueError, match="n_models, n_matrices, n, n"):
        cnn.fit(images[0], y)
    with pytest.raises(ValueError, match="single class"):
        MatrixCNNAssessor().fit(images, np.zeros(8))
    with pytest.raises(RuntimeError, match="not fitted"):
        MatrixCNNAssessor().predict_proba(images)


def test_stack_matrices_order_and_errors():
    a, b = np.zeros((3, 3)), np.ones((3, 3))
    np.testing.assert_array_equal(stack_matrices({"a": a, "b": b}, ["b", "a"]), np.stack([b, a]))
    with pytest.raises(ValueError, match="no entry"):
        stack_matrices({"a": a}, ["a", "c"])
    with pytest.raises(ValueError, match="same size"):
        stack_matrices({"a": a, "b": np.zeros((4, 4))})


# --------------------------------------------------------------------------- formula baselines

# 4 images x 5 levels, identity at index 2; accuracy per level [1/4, 3/4, 1, 1, 3/4]
C_HAND = np.array(
    [
        [0, 1, 1, 1, 1],
        [0, 1, 1, 1, 0],
        [0, 1, 1, 1, 1],
        [1, 0, 1, 1, 1],
    ],
    dtype=bool,
)


def test_baseline_scores_by_hand():
    assert accuracy_drop(C_HAND) == pytest.approx(1 - 1 / 4)
    assert accuracy_drop(C_HAND, window=1) == pytest.approx(1 - 3 / 4)  # levels 1..3
    assert accuracy_drop(C_HAND, identity_index=1, window=1) == pytest.approx(3 / 4 - 1 / 4)
    assert all_levels_correct_share(C_HAND) == 0.0  # every image misses some level
    assert all_levels_correct_share(C_HAND, window=1) == pytest.approx(3 / 4)  # only image 3 misses level 1
    assert all_levels_correct_share(C_HAND.astype(int), identity_index=1, window=1) == 0.0
    # level accuracies 1/4, 3/4, 1, 1, 3/4
    assert worst_level_accuracy(C_HAND) == pytest.approx(1 / 4)
    assert worst_level_accuracy(C_HAND, window=1) == pytest.approx(3 / 4)  # levels 1..3
    assert worst_level_accuracy(C_HAND, identity_index=1, window=1) == pytest.approx(1 / 4)  # levels 0..2
    with pytest.raises(ValueError, match="no centre level"):
        accuracy_drop(C_HAND[:, :4])
    with pytest.raises(ValueError, match="at most 2"):
        accuracy_drop(C_HAND, window=3)


def test_best_threshold_tie_break_by_hand():
    # direction +1: accuracies at -inf, 1.5, 2.5, 3.5, inf = 2/4, 3/4, 2/4, 3/4, 2/4 -> first max, 1.5
    assert best_threshold([1, 2, 3, 4], [0, 1, 0, 1]) == (1, 1.5, 0.75)
    # only "score < 2.5" separates these labels
    assert best_threshold([1, 2, 3, 4], [1, 1, 0, 0]) == (-1, 2.5, 1.0)
    # one label only: the constant rule at -inf (direction +1, everything class 1)
    assert best_threshold([3, 1, 2], [1, 1, 1]) == (1, -np.inf, 1.0)


def test_best_threshold_equals_brute_force_search():
    rng = np.random.default_rng(5)
    for trial in range(30):
        n = int(rng.integers(2, 25))
        scores = rng.integers(0, 6, size=n).astype(float)  # many ties
        y = rng.integers(0, 2, size=n)
        d, t, acc = best_threshold(scores, y)
        # every rule "d * (s - t) > 0" for t on a grid finer than the score spacing, and +-inf
        grid = np.concatenate([[-np.inf], np.arange(-1.0, 7.0, 0.25), [np.inf]])
        brute = [(np.mean((dd * (scores - tt) > 0) == y), dd, tt) for dd in (1, -1) for tt in grid]
        assert acc == pytest.approx(max(b[0] for b in brute)), trial
        assert np.mean((d * (scores - t) > 0) == y) == pytest.approx(acc)
        # documented tie-break over the candidate set (-inf, midpoints of distinct scores, +inf)
        u = np.unique(scores)
        cands = [-np.inf, *((u[:-1] + u[1:]) / 2), np.inf]
        first = next((dd, tt) for dd in (1, -1) for tt in cands if np.mean((dd * (scores - tt) > 0) == y) == acc)
        assert (d, t) == first, trial


@pytest.mark.parametrize("cls", [AccuracyDropBaseline, AllLevelsCorrectBaseline])
def test_threshold_baselines_learn_the_brute_force_threshold(cls):
    C, y = correctness_database()
    base = cls().fit(C[:16], y[:16])
    scores = base.score_models(C[:16])
    assert (base.direction_, base.threshold_, base.train_accuracy_) == best_threshold(scores, y[:16] == "not invariant")
    assert base.train_accuracy_ == 1.0
    assert np.mean(base.predict(C[16:]) == y[16:]) >= 0.85
    proba = base.predict_proba(C[16:])
    assert set(np.unique(proba)) <= {0.0, 1.0}
    np.testing.assert_array_equal(base.classes_[proba.argmax(1)], base.predict(C[16:]))
    # a larger accuracy drop means "not invariant"; a larger all-correct share means "invariant"
    assert base.direction_ == (1 if cls is AccuracyDropBaseline else -1)


def test_threshold_baselines_need_two_classes():
    C, y = correctness_database(n_models=4)
    with pytest.raises(ValueError, match="exactly two classes"):
        AccuracyDropBaseline().fit(C, np.array(["a", "b", "c", "a"]))
    with pytest.raises(RuntimeError, match="not fitted"):
        AccuracyDropBaseline().predict(C)


# --------------------------------------------------------------------------- bundle


def test_bundle_round_trip_features(tmp_path):
    X, y, _ = separable_database()
    names = [f"top1_confidence/f{k}" for k in range(X.shape[1])]
    bundle = AssessorBundle.train(
        ASSESSORS["random_forest"](0), X[:40], y[:40], feature_names=names, label_source="sign of f2",
        matrix_names=["top1_confidence"], orbit_spec={"group": "rotation", "levels": list(range(-15, 16))},
    )
    assert bundle.feature_stats[names[2]]["min"] == pytest.approx(X[:40, 2].min())
    assert bundle.feature_stats[names[0]]["std"] == pytest.approx(X[:40, 0].std())
    path = tmp_path / "assessor.joblib"
    bundle.save(path)
    loaded = AssessorBundle.load(path)
    np.testing.assert_array_equal(loaded.predict_proba(X[40:]), bundle.predict_proba(X[40:]))
    assert loaded.feature_names == names and loaded.orbit_spec == bundle.orbit_spec
    assert loaded.label_source == "sign of f2" and loaded.classes == [0, 1]
    assert "scikit-learn" in loaded.versions
    far = X[0].copy()
    far[3] = 100.0
    assert loaded.out_of_range(far) == [names[3]]
    with pytest.raises(ValueError, match="in the order of feature_names"):
        loaded.predict(X[:, :3])


def test_bundle_round_trip_cnn_and_foreign_files(tmp_path):
    images, y = matrix_images(n_models=12, n=7)
    bundle = AssessorBundle.train(MatrixCNNAssessor(epochs=3), images, y, feature_names=["conf", "act"],
                                  label_source="slope", matrix_names=["conf", "act"], orbit_spec="rotation:-3:3:1")
    assert bundle.input_kind == "images" and set(bundle.feature_stats) == {"conf", "act"}
    bundle.save(tmp_path / "cnn.joblib")
    loaded = AssessorBundle.load(tmp_path / "cnn.joblib")
    np.testing.assert_array_equal(loaded.predict_proba(images), bundle.predict_proba(images))
    joblib.dump([1, 2, 3], tmp_path / "other.joblib")
    with pytest.raises(ValueError, match="joblib pickle.*trust=True"):  # not written by orbitscope: refused
        AssessorBundle.load(tmp_path / "other.joblib")
    with pytest.raises(ValueError, match="not an orbitscope assessor bundle"):
        AssessorBundle.load(tmp_path / "other.joblib", trust=True)


# --------------------------------------------------------------------------- family cross-validation


def test_family_folds_keep_families_whole_and_balance_folds():
    families = np.repeat(np.arange(10), [3, 3, 3, 3, 3, 6, 6, 2, 2, 1])
    assign = family_folds(families, folds=3, repeats=6, seed=1)
    assert assign.shape == (6, families.size)
    for r in range(6):
        for f in np.unique(families):
            assert len(set(assign[r, families == f])) == 1  # a family sits in one fold
        sizes = np.bincount(assign[r], minlength=3)
        assert sizes.min() > 0 and sizes.max() - sizes.min() <= 6
    assert len({tuple(a) for a in assign}) > 1  # repeats differ
    np.testing.assert_array_equal(assign, family_folds(families, folds=3, repeats=6, seed=1))
    with pytest.raises(ValueError, match="at least two families"):
        family_folds(np.zeros(5), folds=3)


def test_cv_perfect_when_the_label_is_a_function_of_one_feature():
    X, y, families = separable_database()
    report = cross_validate_by_family(X, y, families, make_estimators=ASSESSORS, repeats=3, folds=3, seed=0)
    for name in ASSESSORS:
        assert report.mean(name) == 1.0 and report.min(name) == 1.0, name
    assert report.folds == 3 and not report.leave_one_family_out and report.n_families == 12


def test_cv_near_chance_for_random_labels():
    rng = np.random.default_rng(4)
    X = rng.normal(size=(90, 5))
    y = rng.integers(0, 2, size=90)
    families = np.repeat(np.arange(18), 5)
    makers = {k: ASSESSORS[k] for k in ("decision_tree", "logistic_regression")}
    report = cross_validate_by_family(X, y, families, make_estimators=makers, repeats=5, seed=2)
    for name in makers:
        assert abs(report.mean(name) - 0.5) < 0.15, (name, report.mean(name))


def test_cv_never_tests_a_family_it_trained_on():
    X, y, families = separable_database(n_families=7, per_family=4)
    seen = []

    def on_fold(repeat, fold, train_idx, test_idx):
        seen.append((repeat, fold, train_idx.copy(), test_idx.copy()))

    report = cross_validate_by_family(X, y, families, make_estimators={"tree": ASSESSORS["decision_tree"]},
                                      repeats=4, folds=3, seed=5, on_fold=on_fold)
    assert len(seen) == 4 * 3
    for repeat in range(4):
        tested = []
        for r, fold, train_idx, test_idx in seen:
            if r != repeat:
                continue
            assert set(families[train_idx]).isdisjoint(families[test_idx])  # brute-force leakage check
            assert sorted(np.concatenate([train_idx, test_idx])) == list(range(len(y)))
            np.testing.assert_array_equal(np.flatnonzero(report.fold_assignments[r] == fold), test_idx)
            tested.extend(test_idx)
        assert sorted(tested) == list(range(len(y)))  # each model tested once per repeat
    preds = report.predictions["tree"]
    for r in range(4):
        assert report.accuracies["tree"][r] == pytest.approx(np.mean(preds[r].astype(int) == y))


def test_cv_leave_one_family_out_and_single_class_folds():
    X, y, families = separable_database(n_families=12)
    two = np.where(np.arange(len(y)) < 30, "A", "B")
    report = cross_validate_by_family(X, y, two, make_estimators={"tree": ASSESSORS["decision_tree"]}, repeats=2)
    assert report.leave_one_family_out and report.folds == 2 and report.skipped_folds["tree"] == 0
    # label = family: every training set holds one label only -> every fold skipped, no accuracy
    report = cross_validate_by_family(X, (two == "A").astype(int), two,
                                      make_estimators={"tree": ASSESSORS["decision_tree"]}, repeats=2)
    assert report.skipped_folds["tree"] == 4 and np.isnan(report.mean("tree"))
    assert np.all(report.predictions["tree"] == None)  # noqa: E711  (object array of None)


def test_cv_mixes_features_images_and_correctness_estimators():
    images, y = matrix_images(n_models=24, n=7)
    C, y_c = correctness_database(n_models=24)
    y_c = (y_c == "not invariant").astype(int)
    families = np.repeat(np.arange(8), 3)
    X = images.reshape(24, -1)[:, :10]
    makers = {
        "tree": ASSESSORS["decision_tree"],
        "cnn": lambda seed: MatrixCNNAssessor(epochs=5, channels=4, seed=seed),
        **BASELINES,
    }
    with pytest.raises(ValueError, match="'cnn' consumes images: pass images="):
        cross_validate_by_family(X, y_c, families, make_estimators=makers, correctness=C)
    report = cross_validate_by_family(X, y_c, families, make_estimators=makers, repeats=2,
                                      images=images, correctness=C)
    assert report.input_kinds == {"tree": "features", "cnn": "images", "accuracy_drop": "correctness",
                                  "worst_level_accuracy": "correctness", "all_levels_correct": "correctness"}
    assert report.mean("accuracy_drop") >= 0.9
    table = report.table()
    for name in makers:
        assert name in table
    rows = report.to_rows()
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
    assert buf.getvalue().count("\n") == 1 + len(makers)
    assert rows[0]["n_models"] == 24 and rows[0]["repeats"] == 2 and rows[0]["folds"] == 3


def test_cv_input_errors():
    X, y, families = separable_database()
    with pytest.raises(ValueError, match="one entry per model"):
        cross_validate_by_family(X, y, families[:-1], make_estimators=ASSESSORS)
    Xn = X.copy()
    Xn[0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        cross_validate_by_family(Xn, y, families, make_estimators=ASSESSORS)
    with pytest.raises(ValueError, match="consumes features: pass X="):
        cross_validate_by_family(None, y, families, make_estimators=ASSESSORS)
