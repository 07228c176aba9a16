"""torchvision's detection architectures as orbitscope models: each built at random init (nothing
downloaded) returns torchvision-style detections, and orbitscope's Detection scores over a moving
field of view equal a plain loop that cuts each window by hand, runs the model on it alone and
scores its top box against the hand-moved, hand-clipped ground truth with torchvision's own IoU."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch

import orbitscope as osc
from orbitscope.models import TORCHVISION_DETECTORS, build_model, list_models, torchvision_detector

from helpers import Pairs

pytest.importorskip("torchvision")
from torchvision.ops import box_iou as tv_box_iou  # noqa: E402

VIEW, CONTEXT = 64, 96
OFF = (CONTEXT - VIEW) // 2  # the centred view starts at context pixel (OFF, OFF)
SHIFTS = (-8, 0, 8)  # "window-shift:-8:8:8", the same grid for tx and ty
NUM_CLASSES = 11  # torchvision's count: background 0 and classes 1..10
#: scores closer than this to the top score count as tied with it (random-init heads tie a lot)
TIE = 1e-5


@pytest.fixture(scope="module")
def scenes():
    """Two 96 × 96 context images of dim noise with one bright rectangle each: one near the centre
    (in view at every shift) and one near the right edge (clipped at some shifts, out of view at
    tx = +8)."""
    rng = np.random.default_rng(0)
    images = rng.uniform(0.0, 0.3, size=(2, 3, CONTEXT, CONTEXT)).astype(np.float32)
    boxes = [np.array([[36, 40, 60, 58]], np.float32), np.array([[74, 30, 86, 50]], np.float32)]
    targets = []
    for i, b in enumerate(boxes):
        x0, y0, x1, y1 = b[0].astype(int)
        images[i, :, y0:y1, x0:x1] = 0.95
        targets.append({"boxes": b, "labels": np.array([3])})
    return images, targets


@pytest.fixture(scope="module", params=TORCHVISION_DETECTORS)
def model(request):
    return torchvision_detector(request.param, NUM_CLASSES, image_size=VIEW)


def test_a_batch_gives_torchvision_style_detections(model):
    assert not model.training
    prefix, arch = model.config["arch"].split(":", 1)
    assert prefix == "torchvision" and arch in TORCHVISION_DETECTORS and model.config["image_size"] == VIEW
    t = model.transform  # the internal resize is the view's size: a 64 × 64 view is not resampled
    assert t.min_size == (VIEW,) and t.max_size == VIEW
    x = torch.rand(3, 3, VIEW, VIEW, generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        out = model(x)
    assert isinstance(out, list) and len(out) == 3
    for d in out:
        assert isinstance(d, dict) and {"boxes", "scores", "labels"} <= set(d)
        n = len(d["scores"])
        assert 0 < n <= 100  # score_threshold 0 keeps candidates even at random init
        assert d["boxes"].shape == (n, 4) and d["boxes"].dtype == torch.float32 and d["labels"].shape == (n,)
        assert ((d["labels"] >= 0) & (d["labels"] < NUM_CLASSES)).all()
        if arch.startswith(("fasterrcnn", "ssdlite")):  # these drop the background column (label 0);
            assert (d["labels"] >= 1).all()  # FCOS / RetinaNet score slot 0 too and, untrained, emit it
        b = d["boxes"]
        assert (b[:, 2] >= b[:, 0]).all() and (b[:, 3] >= b[:, 1]).all()
        assert (b >= 0).all() and (b <= VIEW).all()  # in pixels of the 64 × 64 input
        assert ((d["scores"] > 0) & (d["scores"] <= 1)).all()


def _plain_loop(model, images, targets):
    """Per sample and shift (tx, ty): the view is the context cut at rows OFF − ty … and columns
    OFF − tx … (a window shift moves the content by (tx, ty) under a fixed view, so the view shows
    context pixel (u + OFF − tx, v + OFF − ty) at (u, v)); the ground truth moves by
    (tx − OFF, ty − OFF) into view coordinates and is clipped to [0, 64]."""
    conf = np.zeros((len(images), len(SHIFTS), len(SHIFTS)))
    iou = np.full_like(conf, np.nan)
    tied_ious: dict[tuple[int, int, int], np.ndarray] = {}
    for i, (context, target) in enumerate(zip(images, targets)):
        for a, tx in enumerate(SHIFTS):
            for b, ty in enumerate(SHIFTS):
                crop = torch.from_numpy(context[:, OFF - ty:OFF - ty + VIEW, OFF - tx:OFF - tx + VIEW].copy())
                with torch.inference_mode():
                    det = model(crop[None])[0]
                gt = torch.from_numpy(target["boxes"]) + torch.tensor([tx - OFF, ty - OFF, tx - OFF, ty - OFF])
                gt = gt.clamp(0, VIEW)
                gt = gt[(gt[:, 2] - gt[:, 0]) * (gt[:, 3] - gt[:, 1]) > 0]
                if len(det["scores"]) == 0:
                    iou[i, a, b] = 0.0 if len(gt) else np.nan  # no detection: confidence 0, IoU 0
                    continue
                order = torch.argsort(det["scores"], descending=True, stable=True)
                scores, boxes = det["scores"][order], det["boxes"][order]
                conf[i, a, b] = float(scores[0])
                if len(gt):
                    ious = tv_box_iou(boxes, gt).amax(1).numpy()
                    iou[i, a, b] = ious[0]
                    tied = (scores[0] - scores).numpy() <= TIE
                    if tied.sum() > 1:
                        tied_ious[i, a, b] = ious[tied]
    return conf, iou, tied_ious


def test_orbit_scores_equal_a_plain_loop_over_hand_cut_windows(model, scenes):
    images, targets = scenes
    run = osc.evaluate(model, Pairs(images, targets), osc.parse_orbit("window-shift:-8:8:8"), osc.Detection(),
                       view_size=(VIEW, VIEW))
    res = run.result
    assert res.iou.dims == ("sample", "tx", "ty")
    np.testing.assert_array_equal(res.iou.coords["tx"].values, SHIFTS)
    np.testing.assert_array_equal(res.iou.coords["ty"].values, SHIFTS)
    conf, iou, tied = _plain_loop(model, images, targets)
    got_conf, got_iou = res.confidence.values, res.iou.values
    np.testing.assert_allclose(got_conf, conf, atol=1e-4)
    assert (np.isnan(got_iou) == np.isnan(iou)).all()
    assert np.isnan(iou[1, SHIFTS.index(8)]).all() and not np.isnan(iou[0]).any()  # sample 1 leaves view at tx=+8
    for idx in np.ndindex(iou.shape):
        if np.isnan(iou[idx]):
            continue
        if idx in tied:
            # several detections share the top score (random-init heads): which one comes first
            # is torchvision's tie order, so the engine's IoU must be that of one of them
            assert np.isclose(tied[idx], got_iou[idx], atol=1e-4).any(), (idx, got_iou[idx], tied[idx])
        else:
            assert got_iou[idx] == pytest.approx(iou[idx], abs=1e-4), idx
    np.testing.assert_allclose(res.conf_iou.values, got_conf * got_iou, atol=1e-6)


def test_factory_contract():
    with pytest.raises(ValueError, match="ssdlite320_mobilenet_v3_large") as err:
        torchvision_detector("yolo")
    assert all(a in str(err.value) for a in TORCHVISION_DETECTORS)
    with pytest.raises(ValueError, match="background"):
        torchvision_detector("ssdlite320_mobilenet_v3_large", num_classes=1)
    before = torch.random.get_rng_state()
    a = torchvision_detector("ssdlite320_mobilenet_v3_large", 5, image_size=64, score_threshold=0.2, detections=7)
    assert torch.equal(torch.random.get_rng_state(), before)  # the seed is drawn inside fork_rng
    b = torchvision_detector("ssdlite320_mobilenet_v3_large", 5, image_size=64, score_threshold=0.2, detections=7)
    c = torchvision_detector("ssdlite320_mobilenet_v3_large", 5, image_size=64, seed=1)
    sa, sb, sc = a.state_dict(), b.state_dict(), c.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert any(not torch.equal(sa[k], sc[k]) for k in sa if sa[k].is_floating_point())
    assert a.score_thresh == 0.2 and a.detections_per_img == 7
    assert a.transform.fixed_size == (64, 64)  # not resized up to SSDlite's 320 × 320
    with torch.inference_mode():
        assert len(a(torch.rand(1, 3, 64, 64))[0]["scores"]) <= 7
    f = torchvision_detector("fasterrcnn_mobilenet_v3_large_fpn", image_size=96, score_threshold=0.3, detections=5)
    assert f.roi_heads.score_thresh == 0.3 and f.roi_heads.detections_per_img == 5
    assert f.transform.min_size == (96,) and f.transform.max_size == 96


def test_registered_as_torchvision_architectures(tmp_path):
    assert {f"torchvision:{a}" for a in TORCHVISION_DETECTORS} <= set(list_models())
    cfg = {"arch": "torchvision:ssdlite320_mobilenet_v3_large", "num_classes": 5, "image_size": 64, "seed": 3}
    built = build_model(cfg)
    direct = torchvision_detector("ssdlite320_mobilenet_v3_large", 5, image_size=64, seed=3)
    assert built.config == direct.config and not built.training
    sb, sd = built.state_dict(), direct.state_dict()
    assert all(torch.equal(sb[k], sd[k]) for k in sd)
    from orbitscope.models.loading import load_model, save_model

    path = tmp_path / "ssdlite.safetensors"
    save_model(built, path)
    loaded = load_model(path)
    sl = loaded.state_dict()
    assert loaded.config == built.config and all(torch.equal(sl[k], sd[k]) for k in sd)


def test_without_torchvision_a_spec_error_says_how_to_install(monkeypatch):
    for name in [m for m in sys.modules if m == "torchvision" or m.startswith("torchvision.")]:
        monkeypatch.setitem(sys.modules, name, None)
    with pytest.raises(osc.errors.SpecError, match="pip install torch==2.14.1 torchvision==0.29.1"):
        torchvision_detector("fcos_resnet50_fpn")


@pytest.mark.slow  # a fresh interpreter imports torch
def test_importing_orbitscope_models_does_not_import_torchvision():
    code = "import sys, orbitscope, orbitscope.models; assert 'torchvision' not in sys.modules, 'imported'"
    subprocess.run([sys.executable, "-c", code], check=True)
