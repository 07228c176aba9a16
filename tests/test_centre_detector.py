"""The small centre detector: decoding against a hand-made head output, targets against the
boxes they encode, a short training run that learns, reproducibly, and NERO's jitter offsets."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("skimage")

from orbitscope.models import CentreDetector  # noqa: E402
from orbitscope.models.centre_detector import STRIDE, decode  # noqa: E402
from orbitscope.training.detection import (DetectorRecipe, centre_targets, jitter_offsets,  # noqa: E402
                                           train_detector)


def test_decoding_a_hand_made_head_output():
    heat = torch.full((1, 3, 8, 8), -10.0)
    heat[0, 2, 3, 5] = 2.0  # class 2 at cell (row 3, col 5)
    heat[0, 2, 3, 4] = 1.0  # a neighbour: suppressed by the 3 × 3 peak rule
    offset = torch.zeros(1, 2, 8, 8)
    offset[0, :, 3, 5] = torch.tensor([0.25, 0.5])
    size = torch.zeros(1, 2, 8, 8)
    size[0, :, 3, 5] = torch.log(torch.tensor([2.0, 3.0]))  # 2 × 3 cells
    (out,) = decode(heat, offset, size, max_detections=5)
    cx, cy, w, h = (5.25) * STRIDE, (3.5) * STRIDE, 2 * STRIDE, 3 * STRIDE
    assert out["labels"][0] == 2 and float(out["scores"][0]) == pytest.approx(float(torch.sigmoid(torch.tensor(2.0))))
    np.testing.assert_allclose(out["boxes"][0].numpy(), [cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], atol=1e-5)
    assert 1.0 not in [round(float(torch.logit(s)), 3) for s in out["scores"]]  # the neighbour is gone


def test_targets_encode_the_boxes_they_came_from():
    boxes = [np.array([[8.0, 12.0, 24.0, 36.0]], np.float32), np.zeros((0, 4), np.float32)]
    labels = [np.array([4]), np.zeros(0, np.int64)]
    heat, cells, off, logs = centre_targets(boxes, labels, 10, 64)
    i, j = divmod(int(cells[0, 0]), 16)
    assert heat[0, 4, i, j] == 1 and heat[0].sum() > 1 and heat[1].sum() == 0 and cells[1, 0] == -1
    cx, cy = (j + off[0, 0, 0]) * STRIDE, (i + off[0, 0, 1]) * STRIDE
    w, h = logs[0, 0].exp() * STRIDE
    np.testing.assert_allclose([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], boxes[0][0], atol=1e-4)


def test_jitter_offsets_follow_nero():
    g = torch.Generator().manual_seed(0)
    assert jitter_offsets(50, 0.0, 64, 32, g).abs().max() == 0
    t = jitter_offsets(4000, 1.0, 64, 32, g).float()
    assert t.min() >= -32 and t.max() <= 31 and t.dtype == torch.float32
    assert 12 < float(t.std()) < 16  # σ = 16 px truncated at ±2σ: std ≈ 0.88·σ ≈ 14


def test_a_short_training_run_learns_and_is_reproducible():
    recipe = DetectorRecipe(scenes=160, epochs=3, batch_size=16, width=16, jitter=1.0)
    a, info = train_detector(recipe)
    b, _ = train_detector(recipe)
    assert info["final_loss"] < info["first_loss"]
    for (ka, va), (kb, vb) in zip(a.state_dict().items(), b.state_dict().items()):
        assert ka == kb and torch.equal(va, vb), ka
    out = a(torch.rand(2, 3, 64, 64))
    assert len(out) == 2 and out[0]["boxes"].shape[1] == 4 and len(out[0]["scores"]) <= a.max_detections
    assert isinstance(CentreDetector(), torch.nn.Module)


def test_a_cached_detector_is_found_by_the_interface_for_live_re_evaluation(tmp_path):
    """The cache file records the model hash, so the interface can load the weights of a run."""
    import orbitscope as osc
    from orbitscope.app.data import AppData
    from orbitscope.results.store import Store
    from orbitscope.training.detection import cached_detector, detection_training_data

    recipe = DetectorRecipe(name="tiny", scenes=40, epochs=1, batch_size=16, width=8)
    model, info = cached_detector(recipe, tmp_path / "models")
    assert not info["from_cache"] and cached_detector(recipe, tmp_path / "models")[1]["from_cache"]
    data = detection_training_data(DetectorRecipe(scenes=40, seed=1), split="test").subset([0, 1])
    run = osc.evaluate(model, data, osc.parse_orbit("window-shift:-8:8:8"), osc.Detection(), view_size=(64, 64),
                       store=tmp_path, optimize=True)
    loaded = AppData(Store(tmp_path, create=False), ttl=0.0).model(run.run_id)
    assert loaded is not None
    x = torch.rand(1, 3, 64, 64)
    assert torch.equal(loaded.raw(x)[0], model.raw(x)[0])
