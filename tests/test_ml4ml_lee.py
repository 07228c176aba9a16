"""LEE as an ML4ML feature set: the summary features, and the assessor comparison machinery on the
shipped study with planted LEE features whose information is known."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from orbitscope.ml4ml.assess.pipeline import assessment_data
from orbitscope.ml4ml.lee_features import (LEE_FEATURES, compare_feature_sets, lee_feature_vector,
                                           model_lee_features, read_zoo_lee)
from orbitscope.ml4ml.study import SHIPPED_STUDY, Study
from orbitscope.models.reference import SmallCNN


def test_lee_feature_vector_is_the_log_of_its_statistics():
    lee = np.array([1e-4, 1e-2, 1.0, 0.0, 10.0])
    correct = np.array([True, False, True, True, False])
    got = lee_feature_vector(lee, correct)
    floored = np.maximum(lee, 1e-12)
    np.testing.assert_allclose(got, np.log10([floored.mean(), np.median(floored), np.quantile(floored, 0.9),
                                              floored[correct].mean()]))
    assert np.isnan(lee_feature_vector(lee, np.zeros(5, bool))[3])


def test_model_lee_features_on_digits():
    import orbitscope as osc

    torch.manual_seed(0)
    data = osc.mnist_subset("test").stratified(2)
    features = model_lee_features(SmallCNN().eval(), data, "rotation")
    assert features.shape == (len(LEE_FEATURES),) and np.isfinite(features[:3]).all()
    with pytest.raises(ValueError, match="invariance"):
        model_lee_features(SmallCNN().eval(), data, "twist")


def planted(tmp_path, informative: bool):
    """A LEE file for the study's rotation-labelled models: features = label + noise (informative)
    or pure noise."""
    study = Study.load(SHIPPED_STUDY)
    data = assessment_data(study, invariance="rotation")
    rng = np.random.default_rng(0)
    signal = (1 - data.y)[:, None] * 3.0 if informative else 0.0
    values = (signal + rng.normal(size=(data.n_models, len(LEE_FEATURES))))[:, None, :]
    meta = {"format": 1, "features": list(LEE_FEATURES), "invariances": ["rotation"], "model_ids": data.model_ids,
            "families": data.families.tolist()}
    path = tmp_path / "lee.npz"
    np.savez_compressed(path, meta=np.array(json.dumps(meta)), features=values)
    return study, path


@pytest.mark.parametrize("informative", [True, False])
def test_compare_feature_sets_detects_planted_information(tmp_path, informative):
    study, path = planted(tmp_path, informative)
    meta, values = read_zoo_lee(path)
    assert values.shape[1:] == (1, len(LEE_FEATURES))
    cmp = compare_feature_sets(study, path, "rotation", assessors=("logistic_regression",), repeats=2)
    lee, matrices = cmp.report.mean("logistic_regression (LEE)"), cmp.report.mean("logistic_regression (matrices)")
    if informative:  # 3 standard deviations of separation: nearly perfect
        assert lee > 0.9
    else:  # noise: about the majority rate at best
        assert lee < cmp.report.majority + 0.1
    test = cmp.tests[0]
    assert test.a == "logistic_regression (LEE)" and test.b == "logistic_regression (matrices)"
    assert np.isclose(test.difference, np.mean(cmp.report.fold_accuracies(test.a) - cmp.report.fold_accuracies(test.b)))
    assert {r["estimator"] for r in cmp.rows()} >= {"logistic_regression (both)", f"{test.a} − {test.b}"}
    assert matrices > 0.5
