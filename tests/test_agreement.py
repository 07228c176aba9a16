"""Rater agreement against statsmodels (Fleiss) and scikit-learn (Cohen)."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import cohen_kappa_score
from statsmodels.stats.inter_rater import fleiss_kappa as sm_fleiss

from orbitscope.ml4ml.agreement import cohen_kappa, fleiss_kappa, rater_agreement
from orbitscope.ml4ml.modeldb import LABELS, Label


def test_fleiss_kappa_matches_statsmodels():
    rng = np.random.default_rng(0)
    for _ in range(20):
        raters = int(rng.integers(2, 6))
        table = np.stack([rng.multinomial(raters, rng.dirichlet(np.ones(3))) for _ in range(int(rng.integers(3, 40)))])
        if np.isclose(((table.sum(0) / table.sum()) ** 2).sum(), 1.0):
            continue
        assert fleiss_kappa(table) == pytest.approx(sm_fleiss(table, method="fleiss"))
    # Fleiss (1971)'s perfect agreement and the wrong shapes
    assert fleiss_kappa([[3, 0, 0], [0, 3, 0], [0, 0, 3]]) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="same number"):
        fleiss_kappa([[2, 0, 0], [1, 1, 1]])


def test_cohen_kappa_matches_scikit_learn():
    rng = np.random.default_rng(1)
    a = rng.choice(LABELS, size=50).tolist()
    b = [x if rng.random() < 0.6 else rng.choice(LABELS) for x in a]
    assert cohen_kappa(a, b) == pytest.approx(cohen_kappa_score(a, b))


def test_rater_agreement_among_raters_and_against_provenance():
    labels = [Label(f"m{i}", "provenance", "rule:v2", lab) for i, lab in enumerate(["invariant", "not-invariant"] * 3)]
    ann = ["invariant", "not-invariant", "invariant", "invariant", "invariant", "not-invariant"]
    bob = ["invariant", "not-invariant", "invariant", "not-invariant", "borderline", "not-invariant"]
    labels += [Label(f"m{i}", "human", "ann", lab) for i, lab in enumerate(ann)]
    labels += [Label(f"m{i}", "human", "bob", lab) for i, lab in enumerate(bob[:5])]  # bob skipped m5
    labels += [Label("m0", "human", "ann", "not-invariant", invariance="scale")]  # another invariance
    agree = rater_agreement(labels)
    assert agree.raters == ("ann", "bob") and agree.n_common == 5
    table = np.array([[sum(x[i] == c for x in (ann, bob)) for c in LABELS] for i in range(5)])
    assert agree.fleiss == pytest.approx(sm_fleiss(table, method="fleiss"))
    n, share, kappa = agree.against_provenance["bob"]
    rule = ["invariant", "not-invariant"] * 3
    assert n == 5 and share == pytest.approx(np.mean([x == y for x, y in zip(bob[:5], rule[:5])]))
    assert kappa == pytest.approx(cohen_kappa_score(bob[:5], rule[:5]))
    assert rater_agreement(labels, "scale").raters == ("ann",)
