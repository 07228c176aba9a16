"""PaddleOCR's PP-OCRv4 text detector and 0°/180° classifier (orbitscope.models.ppocr) against
an independent reference: rapidocr-onnxruntime's own TextDetector / TextClassifier pipeline
(which needs pyclipper and shapely, installed by make test), on real text images; the rendered
text data (orbitscope.data.text_scenes); both models through the engine."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from orbitscope.data.photos import OPENCV_EXAMPLES
from orbitscope.data.text_scenes import default_font, render_word, text_contexts, text_lines
from orbitscope.errors import SpecError
from orbitscope.models import ppocr
from orbitscope.models.ppocr import (
    DETECTOR_FILE,
    ORIENTATION_FILE,
    PPOCROrientation,
    PPOCRTextDetector,
    db_resize_shape,
    ppocr_model_path,
)

if importlib.util.find_spec("rapidocr_onnxruntime") is None:
    pytest.skip("rapidocr-onnxruntime (the PP-OCR ONNX files) is not installed: "
                "pip install --no-deps rapidocr-onnxruntime==1.4.4", allow_module_level=True)
pytest.importorskip("onnxruntime")
cv2 = pytest.importorskip("cv2")
skdata = pytest.importorskip("skimage.data")

#: corners of our axis-aligned boxes vs the reference's quadrilaterals' hulls, in pixels: the
#: reference clips to [0, W − 1] and truncates, and offsets its rectangles with pyclipper on
#: integer-truncated corners; we grow the rectangle analytically and clip to [0, W]
BOX_TOLERANCE_PX = 1.0
OPENCV_TEXT = ("text_motion.jpg", "imageTextN.png", "imageTextR.png")


def _rgb(img: np.ndarray) -> np.ndarray:
    return np.repeat(img[..., None], 3, -1) if img.ndim == 2 else np.ascontiguousarray(img[..., :3])


def _images() -> dict[str, np.ndarray]:
    """Real text images, RGB uint8 (H, W, 3)."""
    out = {"skimage-text": _rgb(skdata.text()), "skimage-page": _rgb(skdata.page())}
    for name in OPENCV_TEXT:
        path = OPENCV_EXAMPLES / name
        if path.is_file():
            out[name] = np.ascontiguousarray(cv2.imread(str(path), cv2.IMREAD_COLOR)[..., ::-1])
    return out


def _tensor(rgb: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(rgb.astype(np.float32) / 255.0).permute(2, 0, 1)[None].contiguous()


@pytest.fixture(scope="module")
def reference() -> dict[str, object]:
    """rapidocr's own detector and classifier, configured by its shipped config.yaml."""
    pytest.importorskip("pyclipper")
    pytest.importorskip("shapely")
    yaml = pytest.importorskip("yaml")
    det_mod = pytest.importorskip("rapidocr_onnxruntime.ch_ppocr_det")
    cls_mod = pytest.importorskip("rapidocr_onnxruntime.ch_ppocr_cls")
    root = Path(importlib.util.find_spec("rapidocr_onnxruntime").submodule_search_locations[0])
    config = yaml.safe_load((root / "config.yaml").read_text())
    det = dict(config["Det"], model_path=str(ppocr_model_path(DETECTOR_FILE)))
    cls = dict(config["Cls"], model_path=str(ppocr_model_path(ORIENTATION_FILE)))
    return {"config": config, "det": det_mod.TextDetector(det), "cls": cls_mod.TextClassifier(cls)}


@pytest.fixture(scope="module")
def detector() -> PPOCRTextDetector:
    return PPOCRTextDetector()


@pytest.fixture(scope="module")
def orientation() -> PPOCROrientation:
    return PPOCROrientation()


def _reference_detect(ref: object, bgr: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """rapidocr's detector step by step: (probability map, its raw boxes (n, 4, 2) and scores
    from the DB post-processing, its final filtered quadrilaterals)."""
    pre = ref.get_preprocess(max(bgr.shape[:2]))
    prob = ref.infer(pre(bgr))[0]
    raw, scores = ref.postprocess_op(prob, bgr.shape[:2])
    final, _ = ref(bgr)
    return prob, np.asarray(raw, np.float64).reshape(-1, 4, 2), np.asarray(scores), np.asarray(final).reshape(-1, 4, 2)


def _hull(quads: np.ndarray) -> np.ndarray:
    return np.concatenate([quads.min(1), quads.max(1)], 1) if len(quads) else np.zeros((0, 4))


def test_defaults_are_rapidocrs_config(reference: dict, detector: PPOCRTextDetector) -> None:
    det, cls = reference["config"]["Det"], reference["config"]["Cls"]
    assert (detector.limit_side_len, detector.limit_type) == (det["limit_side_len"], det["limit_type"])
    assert (detector.thresh, detector.box_thresh, detector.unclip_ratio) == (det["thresh"], det["box_thresh"],
                                                                             det["unclip_ratio"])
    assert detector.use_dilation == det["use_dilation"] and det["score_mode"] == "fast"
    assert det["mean"] == det["std"] == [0.5, 0.5, 0.5]
    assert list(ppocr.ORIENTATION_SHAPE) == cls["cls_image_shape"]
    assert list(ppocr.ORIENTATION_LABELS) == cls["label_list"] and ppocr.ORIENTATION_THRESHOLD == cls["cls_thresh"]


@pytest.mark.parametrize("name", ["skimage-text", "skimage-page", *OPENCV_TEXT])
def test_detector_matches_rapidocr(name: str, reference: dict, detector: PPOCRTextDetector) -> None:
    images = _images()
    if name not in images:
        pytest.skip(f"{OPENCV_EXAMPLES / name} is not installed (Debian opencv-doc)")
    rgb = images[name]
    prob, raw, raw_scores, final = _reference_detect(reference["det"], np.ascontiguousarray(rgb[..., ::-1]))
    x = _tensor(rgb)
    ours_prob = detector.probability_map(x).numpy()
    assert ours_prob.shape == prob.shape == (1, 1, *db_resize_shape(*rgb.shape[:2]))
    np.testing.assert_allclose(ours_prob, prob, atol=1e-4)  # same 8-bit resize, same graph (ORT settings differ)

    out = detector(x)[0]
    boxes, scores = out["boxes"].numpy(), out["scores"].numpy()
    assert (out["labels"] == 0).all()
    assert np.all(np.diff(scores) <= 0)  # sorted by score
    want = _hull(final)
    assert len(boxes) == len(want) <= len(raw), (name, len(boxes), len(want), len(raw))
    if name in ("skimage-page", "imageTextN.png", "imageTextR.png"):
        assert len(boxes) >= 5  # lines of printed text are found
    # one-to-one: each reference box has its own box of ours within the tolerance
    err = np.abs(boxes[:, None, :] - want[None, :, :]).max(-1)  # (ours, theirs)
    match = err.argmin(0)
    assert len(set(match.tolist())) == len(want)
    assert err[match, np.arange(len(want))].max(initial=0) <= BOX_TOLERANCE_PX
    # the scores are the reference's (the mean probability in the shrunk rectangle)
    raw_hull = _hull(raw)
    order = np.abs(boxes[:, None, :] - raw_hull[None]).max(-1).argmin(1)
    np.testing.assert_allclose(scores, raw_scores[order], atol=1e-5)


def test_unclip_is_the_offset_polygons_min_area_rect() -> None:
    """For a rectangle, the min-area rectangle of its round-joined offset polygon (pyclipper,
    as DB's reference does it) is the rectangle grown by D on each side."""
    pyclipper = pytest.importorskip("pyclipper")
    rng = np.random.default_rng(0)
    scale = 1000.0  # pyclipper works on integers: offset at 1/1000 px
    for _ in range(20):
        rect = ((float(rng.uniform(50, 150)), float(rng.uniform(50, 150))),
                (float(rng.uniform(5, 80)), float(rng.uniform(3, 30))), float(rng.uniform(-80, 80)))
        w, h = rect[1]
        d = w * h * 1.6 / (2 * (w + h))
        pco = pyclipper.PyclipperOffset()
        pco.AddPath((cv2.boxPoints(rect) * scale).astype(np.int64).tolist(), pyclipper.JT_ROUND,
                    pyclipper.ET_CLOSEDPOLYGON)
        poly = np.asarray(pco.Execute(d * scale)[0], np.float64) / scale
        (cx, cy), (gw, gh), _ = cv2.minAreaRect(poly.astype(np.float32))
        assert abs(cx - rect[0][0]) < 0.05 and abs(cy - rect[0][1]) < 0.05
        assert sorted([gw, gh]) == pytest.approx(sorted([w + 2 * d, h + 2 * d]), abs=0.05)


def test_resize_rule() -> None:
    assert db_resize_shape(172, 448) == (736, 1920)  # rapidocr: shorter side up to 736, then ×32
    assert db_resize_shape(160, 160, 960, "max") == (160, 160)  # small images keep their size
    assert db_resize_shape(176, 100, 960, "max") == (192, 96)  # round(5.5) = 6 (Python's rounding)
    assert db_resize_shape(2000, 1000, 960, "max") == (960, 480)
    with pytest.raises(ValueError, match="limit_type"):
        db_resize_shape(10, 10, 736, "mean")


def test_classifier_matches_rapidocr(reference: dict, orientation: PPOCROrientation) -> None:
    page = _rgb(skdata.page())
    _, _, _, quads = _reference_detect(reference["det"], np.ascontiguousarray(page[..., ::-1]))
    crops = []
    for q in quads:
        x0, y0 = q.min(0).astype(int)
        x1, y1 = q.max(0).astype(int)
        crops += [page[y0:y1, x0:x1], page[y0:y1, x0:x1][::-1, ::-1]]  # upright and upside down
    lines = text_lines(6)
    crops += [np.moveaxis(img, 0, -1) for img in lines.images]
    crops += [np.ascontiguousarray(c[:, :120]) for c in crops[:4]]  # narrower: resized, then padded
    assert len(crops) >= 14
    _, labels_scores, _ = reference["cls"]([np.ascontiguousarray(c[..., ::-1]) for c in crops])
    labels = []
    for crop, (label, score) in zip(crops, labels_scores):
        prob = orientation(_tensor(crop))[0].numpy()
        assert prob.shape == (2,) and prob.sum() == pytest.approx(1.0, abs=1e-5)
        assert ppocr.ORIENTATION_LABELS[int(prob.argmax())] == label
        assert float(prob.max()) == pytest.approx(float(score), abs=1e-5)
        labels.append(label)
    assert "0" in labels and "180" in labels  # both classes occur: the comparison is not vacuous


def test_orientation_input_is_resized_and_padded(orientation: PPOCROrientation) -> None:
    x = torch.rand(2, 3, 30, 60)  # aspect 2: 96 columns of 192, the rest zero (the padding)
    prepared = orientation.prepare(x)
    assert prepared.shape == (2, 3, 48, 192)
    assert orientation.resized_width(30, 60) == 96 and orientation.resized_width(10, 400) == 192
    assert np.all(prepared[..., 96:] == 0) and np.abs(prepared[..., :96]).max() > 0.5
    assert -1.0 <= prepared.min() and prepared.max() <= 1.0


def test_missing_onnx_files_say_how_to_install(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(ppocr.importlib.util, "find_spec", lambda name, *a: None)
    with pytest.raises(SpecError, match=r"pip install --no-deps rapidocr-onnxruntime==1\.4\.4"):
        ppocr_model_path(DETECTOR_FILE)
    with pytest.raises(SpecError, match="rapidocr-onnxruntime"):
        PPOCRTextDetector()
    with pytest.raises(SpecError, match="rapidocr-onnxruntime"):
        PPOCROrientation()

    class Spec:  # installed, but without its models folder
        submodule_search_locations = [str(tmp_path)]

    monkeypatch.setattr(ppocr.importlib.util, "find_spec", lambda name, *a: Spec())
    with pytest.raises(SpecError, match=f"{ORIENTATION_FILE}.*{tmp_path}.*pip install --no-deps"):
        ppocr_model_path(ORIENTATION_FILE)


def test_bad_arguments(detector: PPOCRTextDetector) -> None:
    with pytest.raises(SpecError, match="limit_type"):
        PPOCRTextDetector(limit_type="mean")
    with pytest.raises(ValueError, match=r"\(B, 3, H, W\)"):
        detector(torch.rand(1, 1, 64, 64))


@pytest.mark.slow
def test_runtime_needs_neither_rapidocr_nor_pyclipper_nor_shapely() -> None:
    code = ("import sys, torch\n"
            "from orbitscope.models.ppocr import PPOCRTextDetector, PPOCROrientation\n"
            "PPOCRTextDetector(limit_type='max')(torch.rand(1, 3, 64, 64)); PPOCROrientation()(torch.rand(1, 3, 48, 96))\n"
            "bad = [m for m in ('rapidocr_onnxruntime', 'pyclipper', 'shapely') if m in sys.modules]\n"
            "assert not bad, bad\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


def test_identity_and_config(detector: PPOCRTextDetector) -> None:
    from orbitscope.engine.optimization import ineligibility
    from orbitscope.models import build_model, model_hash

    other = PPOCRTextDetector(box_thresh=0.6)
    assert repr(other) != repr(detector)  # thresholds are part of the run identity
    assert model_hash(other) == model_hash(detector)  # the weights are the same file
    rebuilt = build_model(dict(detector.config))
    assert repr(rebuilt) == repr(detector) and model_hash(rebuilt) == model_hash(detector)
    assert "ONNX Runtime" in ineligibility(detector, recording_activations=False, precision="float32", compile=False)


# -- rendered text data ----------------------------------------------------------------------------

def test_render_word_is_cropped_to_its_ink() -> None:
    a = render_word("Harbour", 28)
    assert a.ndim == 2 and 0.0 <= a.min() and a.max() <= 1.0
    on = a > 0.1
    assert on[0].any() and on[-1].any() and on[:, 0].any() and on[:, -1].any()
    assert render_word("Harbour", 28, default_font()).shape == a.shape
    assert render_word("Harbour", 40).shape[1] > a.shape[1]


def test_text_contexts_boxes_and_determinism() -> None:
    view, shift = 160, 32
    a = text_contexts(12, view=view, max_shift=shift)
    b = text_contexts(12, view=view, max_shift=shift)
    side = view + 2 * shift
    assert a.data_id == b.data_id and a.categories == {0: "text"}
    assert a.data_id != text_contexts(12, view=view, max_shift=shift, seed=1).data_id
    assert a.data_id != text_contexts(2, view=view, max_shift=shift, backgrounds=("brick",)).data_id
    several = 0
    for i in range(len(a)):
        x, t = a[i]
        assert x.shape == (3, side, side) and torch.equal(x, b[i][0])
        boxes = t["boxes"]
        assert np.array_equal(boxes, b.target(i)["boxes"]) and (t["labels"] == 0).all()
        key = boxes[0]
        assert abs((key[0] + key[2]) / 2 - side / 2) <= 0.5 and abs((key[1] + key[3]) / 2 - side / 2) <= 0.5
        assert key[2] - key[0] <= view - 2 * shift - 8  # the key word stays in view at every shift
        assert (boxes >= 0).all() and (boxes <= side).all() and (boxes == np.round(boxes)).all()
        for j in range(1, len(boxes)):  # words apart: no two boxes overlap
            o = boxes[j]
            assert o[2] <= key[0] or key[2] <= o[0] or o[3] <= key[1] or key[3] <= o[1]
        several += len(boxes) > 1
    assert several > 0
    with pytest.raises(ValueError, match="backgrounds"):
        text_contexts(1, backgrounds=("moon",))
    with pytest.raises(ValueError, match="max_shift"):
        text_contexts(1, view=64, max_shift=30)


def test_text_contexts_box_is_the_ink(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a flat background the box is where the image differs from it (coverage above 0.1;
    within 1 px, as the ink colour, unknown here, scales the difference)."""
    from orbitscope.data import text_scenes

    flat = np.full((400, 400, 3), 200, np.uint8)
    monkeypatch.setattr(text_scenes, "_backgrounds", lambda: (flat,) * len(text_scenes.TEXT_BACKGROUNDS))
    data = text_contexts(6, view=128, max_shift=16, words=(1, 1))
    for i in range(len(data)):
        img = data.image(i).astype(int)
        ink = np.abs(img - 200).max(0) > 0.1 * (200 - 50)  # dark ink (≤ 50) on 200: coverage above 0.1
        rows, cols = np.flatnonzero(ink.any(1)), np.flatnonzero(ink.any(0))
        box = data.target(i)["boxes"][0]
        assert [cols[0], rows[0], cols[-1] + 1, rows[-1] + 1] == pytest.approx(box.tolist(), abs=1)


def test_text_lines() -> None:
    lines = text_lines(5, seed=3)
    assert lines.images.shape == (5, 3, 48, 192) and lines.images.dtype == np.uint8
    assert (lines.labels == 0).all() and lines.classes == ["0", "180"]
    assert np.array_equal(lines.images, text_lines(5, seed=3).images)
    assert not np.array_equal(lines.images, text_lines(5, seed=4).images)


# -- through the engine ----------------------------------------------------------------------------

def test_detector_through_the_engine(tmp_path: Path) -> None:
    from orbitscope import evaluate
    from orbitscope.results.result import dataset_metrics
    from orbitscope.tasks import Detection

    detector = PPOCRTextDetector(limit_type="max", limit_side_len=960)
    data = text_contexts(4, view=128, max_shift=16, backgrounds=("coffee", "rocket", "brick"))
    run = evaluate(detector, data, "window-shift:-16:16:16", Detection(), view_size=(128, 128), consensus=True,
                   store=tmp_path / "store", name="ppocr")
    res = run.result
    assert res.data["conf_iou"].shape == (4, 3, 3)
    # at the identity the engine's window is the context's centre: the model's own boxes
    view = torch.stack([data[i][0][:, 16:144, 16:144] for i in range(len(data))])
    direct = detector(view)
    top = np.asarray(res.data["top_boxes"].values)[:, 1, 1]
    for i, d in enumerate(direct):
        k = min(len(d["boxes"]), 3)
        np.testing.assert_array_equal(top[i, :k], d["boxes"][:k].numpy())
        assert np.isnan(top[i, k:]).all()
    assert float(res.data["iou"].values[:, 1, 1].max()) > 0.5  # the key word is found
    assert np.isfinite(dataset_metrics(res)["ap50"].values).all()
    assert "an ONNX Runtime model" in str(run.result.attrs["optimization"])


def test_orientation_through_the_engine() -> None:
    from orbitscope import evaluate
    from orbitscope.demos.text import expected_orientation
    from orbitscope.tasks import Classification

    model = PPOCROrientation()
    lines = text_lines(6)
    run = evaluate(model, lines, "rotation:0:180:90", Classification(store_probabilities=True))
    probs = np.asarray(run.result.data["probabilities"].values)  # (sample, angle, class)
    x = torch.from_numpy(lines.images.astype(np.float32) / 255.0)
    np.testing.assert_allclose(probs[:, 0], model(x).numpy(), atol=1e-6)
    np.testing.assert_allclose(probs[:, 2], model(torch.flip(x, (2, 3))).numpy(), atol=1e-6)  # 180° is exact
    assert expected_orientation(np.array([0, 45, 90, 135, 180, 269, 270, 300, 360, -170])).tolist() == \
        [0, 0, -1, 1, 1, 1, -1, 0, 0, 1]


@pytest.mark.slow
def test_text_demo_part(tmp_path: Path) -> None:
    from orbitscope.demos.text import FINE_SCENES, run_text_part
    from orbitscope.results.store import Store

    runs, names, rows, files = run_text_part(Store(tmp_path / "store"), tmp_path / "out", lambda m: None, None,
                                             n_scenes=FINE_SCENES)
    assert names == ["ppocr-det-scenes", "ppocr-det-fine", "ppocr-det-photos", "ppocr-orientation"]
    assert len(runs) == len(rows) == 4 and all(r["seconds"] > 0 for r in rows)
    assert all(p.is_file() for p in files.values())
    assert {"scenes", "fine", "photos", "orientation"} == {r["part"] for r in rows}
    assert rows[3]["accuracy 180°"] > 0.5 and rows[3]["accuracy 0°"] > 0.5


def test_grey_scikit_image_photos_become_rgb_contexts() -> None:
    from orbitscope.data.photos import PhotoContext, photo_contexts

    data = photo_contexts([PhotoContext("skimage:page", 96, 95, "page")], view=128, max_shift=16)
    x, t = data[0]
    assert x.shape == (3, 160, 160) and torch.equal(x[0], x[1]) and len(t["boxes"]) == 0
