"""The paired comparison of assessors: Nadeau & Bengio's corrected resampled t-test, against its
closed form and, by simulation, against the plain paired t-test it corrects."""

from __future__ import annotations

import math

import numpy as np
import pytest
import sklearn
from scipy import stats
from sklearn.dummy import DummyClassifier
from sklearn.tree import DecisionTreeClassifier

from orbitscope.ml4ml.assess.validation import corrected_resampled_ttest, cross_validate_by_family


def test_closed_form():
    d = [0.1, 0.2, 0.0, 0.1]
    t, df, p = corrected_resampled_ttest(d, test_fraction=0.5)
    var = np.var(d, ddof=1)
    want = 0.1 / math.sqrt((1 / 4 + 0.5) * var)
    assert t == pytest.approx(want) and df == 3
    assert p == pytest.approx(2 * stats.t.sf(want, 3))
    # without the overlap term it is the plain paired t-test
    plain = stats.ttest_1samp(d, 0.0)
    assert corrected_resampled_ttest(d, test_fraction=1e-12)[0] == pytest.approx(plain.statistic)
    assert corrected_resampled_ttest([0.0, 0.0, 0.0], 0.5) == (0.0, 2, 1.0)
    with pytest.raises(ValueError, match="at least 2 splits"):
        corrected_resampled_ttest([0.1], 0.5)


def _cv(seed: int, informative: bool, dummy: bool = True):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(60, 4))
    y = np.where(X[:, 0] > 0, "inv", "not") if informative else rng.choice(["inv", "not"], size=60)
    fams = np.repeat(np.arange(6), 10)
    estimators = {"a": lambda s: DecisionTreeClassifier(max_depth=2, random_state=s),
                  "b": lambda s: DecisionTreeClassifier(max_depth=2, random_state=s + 1000, splitter="random")}
    if dummy:  # each estimator is built from its own seed on the same folds: a and b do not depend on it
        estimators["dummy"] = lambda s: DummyClassifier(strategy="most_frequent")
    return cross_validate_by_family(X, y, fams, repeats=10, folds=3, seed=seed, make_estimators=estimators)


def test_under_the_null_the_corrected_test_holds_its_level_and_the_plain_one_does_not():
    """Two trees on labels that are noise (both 50 % accurate in expectation): splits share
    training models, so the plain paired t-test over the 30 splits rejects far too often."""
    sims = 100
    corrected = naive = 0
    # 3,000 tree fits: scikit-learn's per-call checks of the (fixed, valid) parameters and of the
    # (finite) features are a third of the time and change no prediction
    with sklearn.config_context(skip_parameter_validation=True, assume_finite=True):
        for seed in range(sims):
            test = _cv(seed, informative=False, dummy=False).paired_test("a", "b")
            corrected += test.p_value < 0.05
            naive += test.naive_p_value < 0.05
    assert corrected / sims <= 0.08
    assert naive / sims >= 0.12 and naive > 2 * max(corrected, 1)


def test_a_real_difference_is_found():
    cv = _cv(0, informative=True)
    test = cv.paired_test("a", "dummy")
    assert test.difference > 0.3 and test.p_value < 0.01 and test.splits == 30
    assert test.test_fraction == pytest.approx(20 / 40)
