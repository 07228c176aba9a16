"""Whole-orbit statistics and the gate on every task the engine serves: flow (a lower-is-better
error), detection (values undefined where the object leaves the view) and point clouds, with
models whose invariance is known by construction."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

import orbitscope as osc
from orbitscope import Flow
from orbitscope.group.parse import parse_orbit
from orbitscope.stats import check_result, compare_models, invariance_test, orbit_values, simultaneous_band
from orbitscope.tasks import Detection, PointCloudClassification

from helpers import Pairs
from test_detection_task import BrightBoxDetector, bright_box_scenes
from test_equivariance_by_construction import ShiftSearch


def _rightward_pairs(n: int, size: int = 16, seed: int = 0):
    """Pairs whose second frame is the first rolled right by 1 or 2 pixels (u > 0, v = 0)."""
    rng = np.random.default_rng(seed)
    frames = np.zeros((n, 2, 1, size, size), np.float32)
    flows = np.zeros((n, 2, size, size), np.float32)
    for i in range(n):
        img = rng.random((size, size)).astype(np.float32)
        du = int(rng.integers(1, 3))
        frames[i, 0, 0], frames[i, 1, 0] = img, np.roll(img, du, axis=1)
        flows[i, 0] = du
    return frames, flows


class RightwardOnly(ShiftSearch):
    """ShiftSearch that cannot see leftward motion (u clamped at 0): exact on rightward pairs,
    wrong wherever an element turns their motion to the left or vertical."""

    def forward(self, frames):
        flow = super().forward(frames)
        flow[:, 0].clamp_(min=0)
        return flow


def test_flow_gate_passes_an_exact_estimator_and_fails_one_that_misses_leftward_motion():
    frames, flows = _rightward_pairs(30)
    orbit = parse_orbit("d4xt")
    exact = osc.evaluate(ShiftSearch(), (frames, flows), orbit, Flow(), name="exact").result
    blind = osc.evaluate(RightwardOnly(), (frames, flows), orbit, Flow(), name="rightward").result
    ov = orbit_values(blind)
    assert ov.metric == "epe" and ov.lower_is_better and ov.n_elements == 16
    assert check_result(exact, max_drop=0.1).passed
    report = check_result(blind, max_drop=0.1)
    assert not report.passed
    worst = report.checks[0].details
    # a drop of a lower-is-better error is an *increase*: the worst element's mean EPE minus the identity's
    epe = blind.epe.values.reshape(30, 16).astype(np.float64)
    ident = orbit.identity_index()
    assert worst["drop"] == pytest.approx(float((epe - epe[:, [ident]]).mean(0).max()), rel=1e-9)
    assert worst["lower"] > 0.1
    # the paired comparison says the blind estimator is worse (higher EPE) wherever it is, never better
    c = compare_models(blind, exact)
    assert c.worse.sum() > 0 and c.better.sum() == 0
    assert np.all(np.asarray(c.difference)[c.worse] > 0)  # EPE higher where worse
    assert "not invariant" in invariance_test(blind).sentence()


def test_detection_statistics_use_every_defined_value_where_objects_leave_the_view(tmp_path):
    n = 12
    images, targets = bright_box_scenes(n)
    orbit = osc.Translation(range(-24, 25, 8))
    res = osc.evaluate(BrightBoxDetector(), Pairs(images, targets), orbit, Detection(), view_size=(32, 32),
                       store=tmp_path).result
    ov = orbit_values(res)
    assert ov.metric == "conf_iou" and np.isnan(ov.values).any()
    band = simultaneous_band(res)
    seen = ~np.isnan(ov.values)
    defined = seen.any(0)
    # the equivariant detector scores 0.9 × IoU 1 wherever the object is in view
    np.testing.assert_allclose(band["mean"].values.ravel()[defined], 0.9, atol=1e-6)
    # the default (sup-t) test uses every defined value; the classical ones need complete samples,
    # and here every object leaves the view at some shift, so they cannot run
    assert invariance_test(res).n_samples == n and invariance_test(res).p_value > 0.05
    assert not seen.all(1).any()
    classical = invariance_test(res, method="friedman")
    assert np.isnan(classical.p_value) and "no test" in classical.sentence()
    assert check_result(res, max_drop=0.02).passed


def test_point_cloud_gate_fails_a_model_that_reads_the_x_extent_and_passes_a_rotation_invariant_one():
    rng = np.random.default_rng(1)
    # every cloud is longest along x (class 0); the axis model predicts the axis of largest spread
    clouds = rng.normal(size=(40, 16, 3)).astype(np.float32) * np.array([3.0, 1.0, 0.3], np.float32)
    labels = np.zeros(40, dtype=np.int64)

    class Axis(nn.Module):
        def forward(self, p):
            return 4 * (p - p.mean(1, keepdim=True)).std(dim=1)

    class Radii(nn.Module):
        """Scores from the sorted distances to the centroid: invariant to every rotation."""

        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.fc = nn.Linear(16, 3)

        def forward(self, p):
            return self.fc((p - p.mean(1, keepdim=True)).norm(dim=-1).sort(dim=1).values)

    orbit = parse_orbit("octahedral")
    sensitive = osc.evaluate(Axis(), (clouds, labels), orbit, PointCloudClassification()).result
    invariant = osc.evaluate(Radii().eval(), (clouds, labels), orbit, PointCloudClassification()).result
    report = check_result(sensitive, max_drop=0.02)
    assert not report.passed
    # 16 of the 24 rotations move the x axis onto y or z: accuracy drops from 1 to 0 there
    correct = sensitive.correct.values.reshape(40, 24).astype(np.float64)
    assert report.checks[0].details["max_drop"] == pytest.approx(float((correct[:, [0]] - correct).mean(0).max()))
    gate = check_result(invariant, max_drop=0.02, metric="confidence")
    assert gate.passed
    assert abs(gate.checks[0].details["max_drop"]) < 1e-5
