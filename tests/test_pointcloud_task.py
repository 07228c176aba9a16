"""Point-cloud classification over 3-D rotation samples, against plain loops with scipy's
rotations; uniform random rotations against the Haar measure; NERO's orbit min-max."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats
from scipy.spatial.transform import Rotation
from torch import nn

import orbitscope as osc
from orbitscope.errors import SpecError
from orbitscope.group.parse import parse_orbit
from orbitscope.group.so3 import NeroSO3, RandomSO3, random_quaternions
from orbitscope.tasks import PointCloudClassification, orbit_minmax
from orbitscope.tasks.base import task_from_spec

from helpers import decided


class CountingMLP(nn.Module):
    """A fixed MLP on flattened clouds that counts the clouds it has seen."""

    def __init__(self, points: int, classes: int = 3) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(3 * points, 16), nn.Tanh(), nn.Linear(16, classes))
        self.seen = 0

    def forward(self, p: torch.Tensor) -> torch.Tensor:
        self.seen += len(p)
        return self.net(p)


def _clouds(n: int = 4, points: int = 20) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1)
    return rng.normal(size=(n, points, 3)).astype(np.float32), np.arange(n) % 3


def _scipy(quaternions: np.ndarray) -> Rotation:
    q = np.asarray(quaternions)
    return Rotation.from_quat(np.c_[q[:, 1:], q[:, :1]])  # scipy is scalar-last


def test_nero_sample_scores_match_a_loop_over_scipy_rotations_and_runs_each_rotation_once() -> None:
    clouds, labels = _clouds()
    model = CountingMLP(clouds.shape[1]).eval()
    orbit = NeroSO3()
    res = osc.evaluate(model, (clouds, labels), orbit, PointCloudClassification(store_logit=True)).result
    distinct = len(np.unique(np.round(_scipy(orbit.quaternions).as_matrix().reshape(-1, 9), 8), axis=0))
    assert distinct == 2416 and model.seen == len(clouds) * distinct  # not 2,847 × n
    mats = _scipy(orbit.quaternions).as_matrix()
    with torch.no_grad():
        logits = np.stack([model.net(torch.from_numpy(np.einsum("ij,bnj->bni", m, clouds).astype(np.float32))).numpy()
                           for m in mats], 1)  # (n, 2847, classes)
    probs = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    want_conf = probs[np.arange(len(clouds)), :, labels]
    got = res.data["confidence"].values.reshape(len(clouds), -1)
    np.testing.assert_allclose(got, want_conf, atol=2e-6)
    np.testing.assert_allclose(res.data["true_logit"].values.reshape(len(clouds), -1),
                               logits[np.arange(len(clouds)), :, labels], atol=2e-5)
    # predictions exactly wherever the reference's top two logits are further apart than the two
    # computations' rounding (the rotation matrices differ in the last bits): near-ties could go either way
    clear = decided(logits, 1e-4)
    assert clear.mean() > 0.99
    np.testing.assert_array_equal(res.data["prediction"].values.reshape(len(clouds), -1)[clear],
                                  logits.argmax(-1)[clear])
    np.testing.assert_array_equal(res.data["input_points"].values, clouds)  # stored by default for small clouds


def test_consensus_over_a_repeating_sample_weighs_each_rotation_once() -> None:
    """The consensus is the mean of the probabilities over the *distinct* rotations."""
    clouds, labels = _clouds()
    model = CountingMLP(clouds.shape[1]).eval()
    orbit = NeroSO3(axis_step=90, angle_step=90)  # 3 × 5 × 3 = 45 elements, many repeated
    res = osc.evaluate(model, (clouds, labels), orbit, PointCloudClassification(), consensus=True).result
    mats = _scipy(orbit.quaternions).as_matrix()
    _, first = np.unique(np.round(mats.reshape(-1, 9), 8), axis=0, return_index=True)
    with torch.no_grad():
        probs = np.stack([torch.softmax(model.net(torch.from_numpy(np.einsum("ij,bnj->bni", mats[k], clouds)
                                                                   .astype(np.float32))), -1).numpy()
                          for k in sorted(first)], 1)
    consensus = probs.mean(1).argmax(-1)
    pred = res.data["prediction"].values.reshape(len(clouds), -1)
    np.testing.assert_array_equal(res.data["consensus_agreement"].values.reshape(len(clouds), -1),
                                  (pred == consensus[:, None]).astype(np.uint8))


def test_random_rotations_are_haar_uniform_and_seeded() -> None:
    q = random_quaternions(4000, seed=7)
    np.testing.assert_allclose(np.linalg.norm(q, axis=1), 1.0, atol=1e-12)
    np.testing.assert_array_equal(q, random_quaternions(4000, seed=7))
    assert not np.allclose(q[:10], random_quaternions(10, seed=8))
    angle = _scipy(q).magnitude()  # in [0, π]
    haar_cdf = lambda t: (t - np.sin(t)) / np.pi  # noqa: E731 - the angle law of a uniform rotation
    assert stats.kstest(angle, haar_cdf).pvalue > 0.01
    axes = _scipy(q).as_rotvec() / angle[:, None]
    assert stats.kstest(axes[:, 2], stats.uniform(-1, 2).cdf).pvalue > 0.01  # axis z uniform on [-1, 1]
    o = parse_orbit("so3-random:50:3")
    assert isinstance(o, RandomSO3) and o.size == 50
    np.testing.assert_array_equal(o.quaternions, random_quaternions(50, 3))
    assert parse_orbit("so3:nero").spec() == NeroSO3().spec()
    with pytest.raises(SpecError, match="whole numbers"):
        parse_orbit("so3-random:many")


def test_orbit_minmax_is_per_sample_over_the_orbit() -> None:
    clouds, labels = _clouds()
    model = CountingMLP(clouds.shape[1]).eval()
    res = osc.evaluate(model, (clouds, labels), "octahedral", PointCloudClassification(store_logit=True)).result
    v = res.data["true_logit"].values
    want = (v - v.min(1, keepdims=True)) / (v.max(1, keepdims=True) - v.min(1, keepdims=True))
    np.testing.assert_allclose(orbit_minmax(res.data["true_logit"]).values, want, rtol=1e-6)
    import xarray as xr

    flat = xr.DataArray(np.ones((2, 5)), dims=("sample", "rotation"))
    np.testing.assert_array_equal(orbit_minmax(flat).values, 0.5)


def test_the_task_round_trips_and_refuses_images() -> None:
    t = PointCloudClassification(store_probabilities=True, store_logit=True)
    assert task_from_spec(t.spec()) == t and t.kind == "pointcloud" and t.input_kind == "points"
    images = torch.zeros(2, 1, 8, 8)
    with pytest.raises(Exception, match=r"\(B, N, 3\)"):
        osc.evaluate(nn.Flatten(), (images, torch.zeros(2, dtype=torch.long)), "octahedral", PointCloudClassification())
