"""Point-cloud classification over 3-D rotation samples, against plain loops with scipy's
rotations; uniform random rotations against the Haar measure; NERO's individual score (min–max
over the classes of one prediction, seeds.md §4) against a plain loop; the min–max over the orbit."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch
import xarray as xr
from scipy import stats
from scipy.spatial.transform import Rotation
from torch import nn

import orbitscope as osc
from orbitscope.errors import SpecError
from orbitscope.group.parse import parse_orbit
from orbitscope.group.so3 import NeroSO3, RandomSO3, random_quaternions
from orbitscope.tasks import PointCloudClassification, minmax_over_classes, minmax_over_orbit, orbit_minmax
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


def test_minmax_over_orbit_is_per_sample_over_the_orbit_and_the_old_name_warns() -> None:
    clouds, labels = _clouds()
    model = CountingMLP(clouds.shape[1]).eval()
    res = osc.evaluate(model, (clouds, labels), "octahedral", PointCloudClassification(store_logit=True)).result
    v = res.data["true_logit"].values
    want = (v - v.min(1, keepdims=True)) / (v.max(1, keepdims=True) - v.min(1, keepdims=True))
    got = minmax_over_orbit(res.data["true_logit"])
    np.testing.assert_allclose(got.values, want, rtol=1e-6)
    assert "not NERO" in got.attrs["description"] and "over the orbit" in got.attrs["label"]
    flat = xr.DataArray(np.ones((2, 5)), dims=("sample", "rotation"))
    np.testing.assert_array_equal(minmax_over_orbit(flat).values, 0.5)
    with pytest.warns(DeprecationWarning, match="minmax_over_orbit"):
        old = orbit_minmax(res.data["true_logit"])
    xr.testing.assert_identical(old, got)
    import orbitscope.tasks as tasks

    assert "orbit_minmax" in tasks.__all__ and "minmax_over_orbit" in tasks.__all__


# --------------------------------------------------------------------------- NERO's individual score


def seeds_nero_score(logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """seeds.md §4, written as a plain loop: per sample and rotation, ``lerp(pred, min(pred),
    max(pred), 0, 1)`` over the classes of that one prediction, then the true class's value.
    (NERO's lerp divides by zero when every class scores the same; orbitscope's 0.5 there.)"""
    n, k, c = logits.shape
    out = np.empty((n, k))
    for s in range(n):
        for e in range(k):
            pred = [float(logits[s, e, j]) for j in range(c)]
            lo, hi = pred[0], pred[0]
            for value in pred:
                lo, hi = min(lo, value), max(hi, value)
            lerped = [(value - lo) / (hi - lo) if hi > lo else 0.5 for value in pred]
            out[s, e] = lerped[int(labels[s])]
    return out


def _scipy_logits(model: CountingMLP, clouds: np.ndarray, quaternions: np.ndarray) -> np.ndarray:
    mats = _scipy(quaternions).as_matrix()
    with torch.no_grad():
        return np.stack([model.net(torch.from_numpy(np.einsum("ij,bnj->bni", m, clouds).astype(np.float32))).numpy()
                         for m in mats], 1).astype(np.float64)  # (n, elements, classes)


def test_nero_score_is_recorded_by_default_and_equals_a_plain_loop_over_samples_rotations_and_classes() -> None:
    clouds, labels = _clouds(n=6)
    model = CountingMLP(clouds.shape[1], classes=4).eval()
    orbit = NeroSO3(axis_step=45, angle_step=45)  # 3 × 9 × 5 elements
    res = osc.evaluate(model, (clouds, labels), orbit, PointCloudClassification()).result
    assert res.meta("nero_score").kind == "probability" and "NERO" in res.meta("nero_score").label
    got = res.data["nero_score"].values.reshape(len(clouds), -1).astype(np.float64)
    want = seeds_nero_score(_scipy_logits(model, clouds, orbit.quaternions), labels)
    assert want.min() < 0.2 and 0.1 < (want == 1).mean() < 0.9  # the test has both kinds of rows
    np.testing.assert_allclose(got, want, atol=1e-5)  # the rotation matrices differ in the last bits
    # 1 exactly where the run's own prediction is right, below 1 wherever it is wrong
    right = res.data["prediction"].values.reshape(len(clouds), -1) == labels[:, None]
    assert np.all(got[right] == 1.0) and np.all(got[~right] < 1.0) and np.all(got >= 0.0)
    # not the softmax confidence, and not a min–max over the orbit
    assert not np.allclose(got, res.data["confidence"].values.reshape(len(clouds), -1), atol=1e-2)


def test_minmax_over_classes_ties_near_ties_and_non_finite_rows() -> None:
    logits = torch.tensor([[2.0, 2.0, 2.0],                    # all tied: 0.5 (NERO's lerp: 0/0)
                           [3.0, 3.0, -1.0],                   # the true class tied for the top: 1
                           [-1e6, 1.0, float(np.nextafter(np.float32(1.0), np.float32(0.0)))],  # just below the top
                           [0.0, float("inf"), 1.0],           # non-finite: NaN
                           [-4.0, 0.0, 4.0]])
    labels = torch.tensor([1, 1, 2, 0, 1])
    got = minmax_over_classes(logits, labels).numpy()
    assert got.dtype == np.float32
    assert got[0] == 0.5 and got[1] == 1.0 and math.isnan(got[3]) and got[4] == 0.5
    # the float64 quotient (1 - 6e-14) would round to 1 in float32: kept just below 1, since the
    # prediction (class 1) is wrong
    assert got[2] < 1.0 and got[2] == np.nextafter(np.float32(1.0), np.float32(0.0))
    # a per-row shift and a positive scale leave it unchanged (so log-softmax outputs give the same)
    z = torch.randn(50, 7, generator=torch.Generator().manual_seed(3))
    y = torch.arange(50) % 7
    want = seeds_nero_score(z.double().numpy()[:, None], y.numpy())[:, 0]
    np.testing.assert_allclose(minmax_over_classes(z, y).numpy(), want, atol=1e-6)
    np.testing.assert_allclose(minmax_over_classes(torch.log_softmax(z, -1) * 3.0, y).numpy(), want, atol=1e-5)


def _nero_score_float32_loop(logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """seeds.md §4 per row in Python floats (IEEE double), with orbitscope's stated conventions
    (minmax_over_classes' docstring): NaN for a row with a non-finite logit, 0.5 for a row whose
    classes all tie, exactly 1 where the true class holds the largest logit, else the quotient
    kept in [0, the float32 just below 1]; then rounded to float32."""
    below_one = float(np.nextafter(np.float32(1.0), np.float32(0.0)))
    out = np.empty(len(logits), np.float32)
    for r, row in enumerate(logits.tolist()):
        if not all(math.isfinite(v) for v in row):
            out[r] = np.nan
            continue
        lo, hi, true = min(row), max(row), row[int(labels[r])]
        if hi == lo:
            out[r] = 0.5
        elif true >= hi:
            out[r] = 1.0
        else:
            out[r] = np.float32(min(max((true - lo) / (hi - lo), 0.0), below_one))
    return out


@pytest.mark.parametrize("rows", [64, 5000])
def test_minmax_over_classes_equals_a_plain_row_loop_bit_for_bit(rows: int) -> None:
    """The vectorised score (one min/max pass per batch of rows) against a per-row loop, bit for
    bit, on rows with ties, near ties, tied rows, huge spreads and non-finite logits; 5,000 rows
    reach the kernels' multi-threaded paths."""
    gen = np.random.default_rng(rows)
    z = gen.normal(size=(rows, 5)).astype(np.float32) * gen.choice([1e-3, 1.0, 1e4], size=(rows, 1)).astype(np.float32)
    z[::7] = np.round(z[::7])  # integer logits: ties, the true class among them
    z[3::11, 2] = np.nextafter(z[3::11, 1], np.float32(np.inf))  # near ties
    z[5::13] = 2.5  # every class tied
    z[6::17, 0], z[7::19, 3], z[8::23, 4] = np.inf, -np.inf, np.nan
    labels = gen.integers(0, 5, size=rows)
    labels[::7] = np.argmax(z[::7], 1)  # the true class holds the top (sometimes tied)
    got = minmax_over_classes(torch.from_numpy(z), torch.from_numpy(labels)).numpy()
    want = _nero_score_float32_loop(z, labels)
    assert got.dtype == np.float32 and np.isnan(want).sum() > 0 and (want == 1).sum() > 0 and (want == 0.5).sum() > 0
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


class SoftmaxOut(nn.Module):
    """Returns the softmax of fixed logits, (optionally) made to underflow for some rows."""

    def __init__(self, logits: torch.Tensor) -> None:
        super().__init__()
        self.logits = logits

    def forward(self, p: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.logits[p[:, 0, 0].long()], -1)


def test_nero_score_from_a_model_that_returns_probabilities() -> None:
    """``output="auto"`` reads a softmax batch as probabilities: the score comes from their logs
    (a per-row shift of the logits); rows holding an underflowed 0 give NaN. ``output=
    "probabilities"`` records no ``nero_score`` unless asked for."""
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(6, 5, generator=gen) * 3
    logits[5] = torch.tensor([0.0, 200.0, -300.0, 1.0, 2.0])  # softmax underflows to exactly 0 (class 2)
    clouds = np.zeros((6, 4, 3), dtype=np.float32)
    clouds[:, 0, 0] = np.arange(6)  # row index, unchanged by the identity
    labels = np.array([0, 1, 2, 3, 4, 1])
    res = osc.evaluate(SoftmaxOut(logits), (clouds, labels), osc.Rotation([0]), PointCloudClassification()).result
    got = res.data["nero_score"].values[:, 0].astype(np.float64)
    want = seeds_nero_score(logits.double().numpy()[:, None], labels)[:, 0]
    np.testing.assert_allclose(got[:5], want[:5], atol=1e-5)
    assert math.isnan(got[5])
    declared = PointCloudClassification(output="probabilities")
    assert not declared.nero_score and "nero_score" not in [v.name for v in declared.variables()]
    forced = PointCloudClassification(output="probabilities", nero_score=True)
    scored = forced.score(torch.softmax(logits[:5], -1), torch.as_tensor(labels[:5]))
    np.testing.assert_allclose(scored["nero_score"].numpy(), want[:5], atol=1e-5)


def test_nero_score_option_and_run_identity() -> None:
    default = PointCloudClassification()
    assert default.nero_score is True and "nero_score" in [v.name for v in default.variables()]
    assert default.spec()["nero_score"] is True and task_from_spec(default.spec()) == default
    off = PointCloudClassification(nero_score=False)
    assert "nero_score" not in [v.name for v in off.variables()]
    # a run stored before nero_score existed: the same spec as a task without it (identity kept),
    # and rebuilt without it (it did not record it)
    old = {"kind": "pointcloud", "output": "auto", "store_probabilities": False, "store_logit": False}
    assert off.spec() == old and task_from_spec(old) == off
    assert PointCloudClassification(output="logits").nero_score is True
    with pytest.raises(ValueError, match="nero_score must be"):
        PointCloudClassification(nero_score="yes")  # type: ignore[arg-type]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        minmax_over_orbit(xr.DataArray(np.ones((1, 2)), dims=("sample", "rotation")))  # the new name: no warning


def test_the_task_round_trips_and_refuses_images() -> None:
    t = PointCloudClassification(store_probabilities=True, store_logit=True)
    assert task_from_spec(t.spec()) == t and t.kind == "pointcloud" and t.input_kind == "points"
    images = torch.zeros(2, 1, 8, 8)
    with pytest.raises(Exception, match=r"\(B, N, 3\)"):
        osc.evaluate(nn.Flatten(), (images, torch.zeros(2, dtype=torch.long)), "octahedral", PointCloudClassification())
