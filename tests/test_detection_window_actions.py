"""Rotation and scale of the field of view: boxes move as their corners, then take the enclosing
box (exact for 90° turns and scales; larger than the object for other angles)."""

from __future__ import annotations

import numpy as np
import pytest

import orbitscope as osc
from orbitscope import Detection

from helpers import Pairs
from test_detection_task import BrightBoxDetector


def _contexts():
    rng = np.random.default_rng(7)
    images = rng.uniform(0, 0.3, size=(4, 1, 64, 64)).astype(np.float32)
    targets = []
    for i in range(4):
        x0, y0 = 26 + i, 27 - i
        w, h = 6 + i, 9 - i
        images[i, 0, y0:y0 + h, x0:x0 + w] = 0.9
        targets.append({"boxes": np.array([[x0, y0, x0 + w, y0 + h]], np.float32), "labels": np.array([1])})
    return images, targets


@pytest.mark.parametrize("orbit", [osc.Rotation([0, 90, 180, 270]), osc.Scale([1.0, 2.0])],
                         ids=["quarter-turns", "scales"])
def test_exact_turns_and_scales_of_the_view_keep_the_box_on_the_object(orbit):
    images, targets = _contexts()
    res = osc.evaluate(BrightBoxDetector(), Pairs(images, targets), orbit, Detection(), view_size=(32, 32)).result
    np.testing.assert_allclose(res.iou.values, 1.0, atol=1e-5)


def test_other_angles_enclose_the_turned_corners():
    images, targets = _contexts()
    angles = [0, 30, 45, 60]
    res = osc.evaluate(BrightBoxDetector(), Pairs(images, targets), osc.Rotation(angles), Detection(),
                       view_size=(32, 32)).result
    # the moved target is the enclosing box of the four turned corners: a w × h box turned by θ
    # encloses (w|cos θ| + h|sin θ|) × (w|sin θ| + h|cos θ|); check its area against the stored move
    from orbitscope.kinds import get_kind

    kind = get_kind("boxes")
    t = osc.Rotation(angles).transforms()
    boxes = osc.kinds.collate_boxes(targets)
    moved = kind.act(boxes, t, image_size=(64, 64), view_size=(32, 32), clip=False)
    for k, theta in enumerate(np.deg2rad(angles)):
        for i, tg in enumerate(targets):
            x0, y0, x1, y1 = tg["boxes"][0]
            w, h = x1 - x0, y1 - y0
            want = (w * abs(np.cos(theta)) + h * abs(np.sin(theta))) * (w * abs(np.sin(theta)) + h * abs(np.cos(theta)))
            got = moved.xyxy[k, i, 0]
            assert float((got[2] - got[0]) * (got[3] - got[1])) == pytest.approx(want, rel=1e-4)
    # the detector boxes the turned bright pixels, which lie inside the enclosing box: high but not 1
    iou = res.iou.values
    np.testing.assert_allclose(iou[:, 0], 1.0, atol=1e-5)
    assert (iou[:, 1:] > 0.5).all() and (iou[:, 1:] < 0.999).any()


def test_scaled_boxes_scale_about_the_context_centre():
    images, targets = _contexts()
    from orbitscope.kinds import collate_boxes, get_kind

    boxes = collate_boxes(targets)
    for s in (0.5, 1.5):
        moved = get_kind("boxes").act(boxes, osc.Scale([s]).transforms(), image_size=(64, 64), view_size=(32, 32),
                                      clip=False).xyxy[0, :, 0].numpy()
        # about the context centre (32, 32), then into the view, whose corner is at (16, 16)
        want = (np.stack([t["boxes"][0] for t in targets]) - 32) * s + 32 - 16
        np.testing.assert_allclose(moved, want, atol=1e-4)
