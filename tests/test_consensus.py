"""Tests for orbitscope.analysis.consensus (label-free NERO consensus and invariance measures).

Every quantity is compared with an independent numpy/scipy computation written here on a real
evaluation (30 MNIST digits × Rotation(0..360 by 30°), whose grid lists 0° and 360° both).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from scipy.special import rel_entr
from torch import nn

from orbitscope import Classification, Rotation, Rotation90, Translation, aggregate, evaluate
from orbitscope.analysis.consensus import (
    adjacent_pairs,
    consensus_probabilities,
    consensus_scores,
    invariance_measures,
    with_consensus,
)
from orbitscope.data.datasets import mnist_subset
from orbitscope.models.equivariant import P4CNN, symmetrize
from orbitscope.results.result import OrbitResult

from helpers import CentroidNet




@pytest.fixture(scope="module")
def setup() -> dict:
    train, test = mnist_subset("train"), mnist_subset("test")
    x = train.images.astype(np.float32) / 255.0
    model = CentroidNet(np.stack([x[train.labels == c].mean(0) for c in range(10)]), scale=0.2).eval()
    images = torch.from_numpy(test.images[:30, None].astype(np.float32) / 255.0)
    labels = torch.as_tensor(test.labels[:30])
    task = Classification(store_probabilities=True)
    run360 = evaluate(model, (images, labels), Rotation(range(0, 361, 30)), task)
    run330 = evaluate(model, (images, labels), Rotation(range(0, 360, 30)), task)
    return {"model": model, "images": images, "labels": labels, "r360": run360.result, "r330": run330.result}


def _probs(result: OrbitResult) -> np.ndarray:
    return result.data["probabilities"].transpose("sample", "angle", "class").values.astype(np.float64)


def test_consensus_matches_numpy_with_deduplication(setup: dict) -> None:
    res = setup["r360"]
    p = _probs(res)
    assert p.shape == (30, 13, 10)
    expected = p[:, :12].mean(1)  # 0°..330°: 360° is 0° again and is counted once
    cons = consensus_probabilities(res)
    assert cons.dims == ("sample", "class") and cons.attrs["n_distinct_elements"] == 12
    np.testing.assert_allclose(cons.values, expected, atol=1e-12)
    assert np.abs(p.mean(1) - expected).max() > 1e-4  # a naive mean over all 13 differs
    # the same consensus from a grid without the duplicate end
    np.testing.assert_allclose(consensus_probabilities(setup["r330"]).values, expected, atol=1e-7)


def test_consensus_scores_match_numpy(setup: dict) -> None:
    res = setup["r360"]
    p = _probs(res)
    c = p[:, :12].mean(1)
    cls = c.argmax(1)
    pred = p.argmax(2)
    assert np.array_equal(pred, res.data["prediction"].values)
    sc = consensus_scores(res)
    assert sc["consensus_agreement"].dims == ("sample", "angle") and sc["consensus_agreement"].dtype == np.uint8
    np.testing.assert_array_equal(sc["consensus_class"].values, cls)
    np.testing.assert_array_equal(sc["consensus_agreement"].values, (pred == cls[:, None]).astype(np.uint8))
    np.testing.assert_allclose(sc["consensus_confidence"].values, p[np.arange(30), :, cls], atol=1e-12)
    kl = np.array([[rel_entr(p[i, g], c[i]).sum() for g in range(13)] for i in range(30)])
    np.testing.assert_allclose(sc["kl_to_consensus"].values, np.maximum(kl, 0), atol=1e-9)
    tv = np.array([[0.5 * sum(abs(p[i, g, k] - c[i, k]) for k in range(10)) for g in range(13)] for i in range(30)])
    np.testing.assert_allclose(sc["tv_to_consensus"].values, tv, atol=1e-9)
    # the rotation-sensitive model disagrees with its consensus somewhere
    assert sc["consensus_agreement"].values.min() == 0 and kl.max() > 0.05
    # generalised Jensen-Shannon identity: mean_g KL(p_g || c) = H(c) - mean_g H(p_g)
    ent = lambda q: -(q * np.log(np.where(q > 0, q, 1))).sum(-1)  # noqa: E731
    np.testing.assert_allclose(kl[:, :12].mean(1), ent(c) - ent(p[:, :12]).mean(1), atol=1e-9)


def test_invariance_measures_match_numpy(setup: dict) -> None:
    res = setup["r360"]
    p = _probs(res)
    pred = p.argmax(2)
    c = p[:, :12].mean(1)
    m = invariance_measures(res)
    assert set(m.data_vars) == {"flip_rate", "identity_agreement", "consensus_agreement_rate",
                                "mean_kl_to_consensus", "mean_tv_to_consensus"}
    # 0..360: 12 neighbour pairs (0-30, ..., 330-360), no wrap-around (360 already closes the circle)
    np.testing.assert_allclose(m["flip_rate"].values, (pred[:, 1:] != pred[:, :-1]).mean(1))
    # identity agreement over the 11 distinct non-identity elements 30°..330°
    np.testing.assert_allclose(m["identity_agreement"].values, (pred[:, 1:12] == pred[:, :1]).mean(1))
    np.testing.assert_allclose(m["consensus_agreement_rate"].values, (pred[:, :12] == c.argmax(1)[:, None]).mean(1))
    kl = (rel_entr(p[:, :12], c[:, None]).sum(-1)).mean(1)
    np.testing.assert_allclose(m["mean_kl_to_consensus"].values, kl, atol=1e-9)
    np.testing.assert_allclose(m["mean_tv_to_consensus"].values, 0.5 * np.abs(p[:, :12] - c[:, None]).sum(-1).mean(1), atol=1e-9)
    assert m.attrs["n_distinct_elements"] == 12 and m.attrs["n_neighbour_pairs"] == 12 * 30 // 30
    assert json.loads(m.attrs["wrapped_dims"]) == []
    assert m.attrs["dataset_flip_rate"] == pytest.approx(m["flip_rate"].values.mean())
    assert 0 < m.attrs["dataset_flip_rate"] < 1
    # 0..330: the circle closes by wrapping 330 -> 0 (12 pairs again)
    m330 = invariance_measures(setup["r330"])
    p330 = _probs(setup["r330"]).argmax(2)
    np.testing.assert_allclose(m330["flip_rate"].values, (p330 != np.roll(p330, -1, axis=1)).mean(1))
    assert json.loads(m330.attrs["wrapped_dims"]) == ["angle"]
    np.testing.assert_allclose(m330["identity_agreement"].values, m["identity_agreement"].values)


def test_adjacent_pairs_rules() -> None:
    assert adjacent_pairs(Rotation90())["angle"][2] is True
    assert adjacent_pairs(Rotation(range(0, 361, 90)))["angle"][2] is False
    assert adjacent_pairs(Rotation(range(-15, 16, 5)))["angle"][2] is False
    a, b, w = adjacent_pairs(Rotation(range(0, 360, 120)))["angle"]
    assert w and list(zip(a, b)) == [(0, 1), (1, 2), (2, 0)]
    pairs = adjacent_pairs(Translation([-2, 0, 2], [-1, 1]))  # shape (tx 3, ty 2), C order
    assert list(zip(*pairs["tx"][:2])) == [(0, 2), (1, 3), (2, 4), (3, 5)] and not pairs["tx"][2]
    assert list(zip(*pairs["ty"][:2])) == [(0, 1), (2, 3), (4, 5)]


def test_two_dim_orbit_flip_rates(setup: dict) -> None:
    run = evaluate(setup["model"], (setup["images"][:10], setup["labels"][:10]), Translation([-3, 0, 3]),
                   Classification(store_probabilities=True))
    m = invariance_measures(run.result)
    pred = run.result.data["prediction"].transpose("sample", "tx", "ty").values
    ftx, fty = pred[:, 1:] != pred[:, :-1], pred[:, :, 1:] != pred[:, :, :-1]
    np.testing.assert_allclose(m["flip_rate_tx"].values, ftx.reshape(10, -1).mean(1))
    np.testing.assert_allclose(m["flip_rate_ty"].values, fty.reshape(10, -1).mean(1))
    np.testing.assert_allclose(m["flip_rate"].values, (ftx.reshape(10, -1).sum(1) + fty.reshape(10, -1).sum(1)) / 12)
    others = [i for i in range(9) if i != 4]  # identity is (tx 0, ty 0) = flat index 4
    np.testing.assert_allclose(m["identity_agreement"].values, (pred.reshape(10, 9)[:, others] == pred[:, 1, 1:2]).mean(1))


@pytest.mark.parametrize("kind", ["symmetrized", "p4cnn"])
def test_exactly_invariant_models_score_perfectly(setup: dict, kind: str) -> None:
    torch.manual_seed(0)
    if kind == "symmetrized":
        model, orbit = symmetrize(setup["model"], Rotation90()), Rotation90()
    else:
        model, orbit = P4CNN().eval(), Rotation(range(0, 361, 90))
    run = evaluate(model, (setup["images"], setup["labels"]), orbit, Classification(store_probabilities=True))
    sc = consensus_scores(run.result)
    assert sc["consensus_agreement"].values.all()
    assert sc["kl_to_consensus"].values.max() < 1e-6 and sc["tv_to_consensus"].values.max() < 1e-5
    m = invariance_measures(run.result)
    assert (m["flip_rate"].values == 0).all() and (m["identity_agreement"].values == 1).all()
    assert m.attrs["dataset_mean_kl_to_consensus"] < 1e-6


def test_invariant_but_wrong_model_scores_perfectly(setup: dict) -> None:
    """Consensus is self-consistency, not correctness."""

    class AlwaysThree(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.zeros(len(x), 10).index_fill_(1, torch.tensor([3]), 5.0)

    run = evaluate(AlwaysThree(), (setup["images"], setup["labels"]), Rotation(range(0, 361, 45)),
                   Classification(store_probabilities=True))
    m = invariance_measures(run.result)
    assert m.attrs["dataset_consensus_agreement_rate"] == 1 and m.attrs["dataset_flip_rate"] == 0
    assert run.result.data["correct"].values.mean() < 0.2


def test_with_consensus_keeps_result_and_attrs(setup: dict) -> None:
    res = setup["r360"]
    before = set(res.data.data_vars)
    out = with_consensus(res)
    assert isinstance(out, OrbitResult) and set(res.data.data_vars) == before  # input untouched
    assert {"consensus_agreement", "consensus_confidence", "kl_to_consensus", "tv_to_consensus",
            "consensus_class"} <= set(out.data.data_vars)
    assert out.attrs["model_hash"] == res.attrs["model_hash"] and "self-consistency" in out.attrs["consensus_method"].lower()
    assert out.orbit_dims == ("angle",)
    agg = aggregate(out, "consensus_agreement")
    np.testing.assert_allclose(agg["mean"].values, consensus_scores(res)["consensus_agreement"].values.mean(0))


def test_errors(setup: dict) -> None:
    plain = evaluate(setup["model"], (setup["images"][:4], setup["labels"][:4]), Rotation90(), Classification())
    for fn in (consensus_probabilities, consensus_scores, with_consensus, invariance_measures):
        with pytest.raises(ValueError, match=r"store_probabilities=True"):
            fn(plain.result)
    no_identity = evaluate(setup["model"], (setup["images"][:4], setup["labels"][:4]), Rotation([10, 20, 30]),
                           Classification(store_probabilities=True))
    assert consensus_scores(no_identity.result)["consensus_agreement"].shape == (4, 3)
    with pytest.raises(ValueError, match="identity"):
        invariance_measures(no_identity.result)
    sliced = OrbitResult(setup["r360"].data.isel(angle=slice(0, 5)))
    with pytest.raises(ValueError, match="sliced"):
        consensus_scores(sliced)
    with pytest.raises(TypeError):
        consensus_scores(np.zeros(3))  # type: ignore[arg-type]
