"""OpenCV's and scikit-image's real detectors as models: their boxes agree with the libraries'
own calls, and over a moving field of view on a real photograph they are *not* shift-equivariant
(unlike an analytic detector, which gives IoU 1 wherever the object is in view)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import orbitscope as osc
from orbitscope.data import key_object_contexts
from orbitscope.data.coco import DetectionSet
from orbitscope.kinds import box_iou
from orbitscope.tasks import Detection

cv2 = pytest.importorskip("cv2")
skdata = pytest.importorskip("skimage.data")

from orbitscope.models.classical_detectors import HaarCascade, HOGPeople, LBPFace, haar_cascades  # noqa: E402


@pytest.fixture(scope="module")
def astronaut():
    img = skdata.astronaut()  # a real photograph, 512 × 512 RGB, shipped with scikit-image
    return img, torch.from_numpy(np.moveaxis(img, -1, 0).astype(np.float32) / 255.0)[None]


def test_haar_boxes_are_opencvs_own_in_xyxy(astronaut):
    img, x = astronaut
    out = HaarCascade("frontalface_default")(x)[0]
    grey = cv2.cvtColor(img, cv2.COLOR_RGB2GRAY)
    rects, _, _ = cv2.CascadeClassifier(cv2.data.haarcascades + "haarcascade_frontalface_default.xml").detectMultiScale3(
        grey, scaleFactor=1.1, minNeighbors=3, minSize=(24, 24), outputRejectLevels=True)
    ref = torch.as_tensor(np.concatenate([rects[:, :2], rects[:, :2] + rects[:, 2:]], 1), dtype=torch.float32)
    assert len(out["boxes"]) == len(ref) >= 1
    assert float(box_iou(out["boxes"], ref).max(1).values.min()) > 0.9  # luma rounding may move a box by a pixel
    assert ((out["scores"] > 0) & (out["scores"] < 1)).all() and (out["labels"] == 1).all()
    assert "frontalface_default" in haar_cascades() and "fullbody" in haar_cascades()
    with pytest.raises(osc.errors.SpecError, match="no Haar cascade"):
        HaarCascade("frontalface_typo")


def test_lbp_and_haar_find_the_same_face_and_hog_returns_people_boxes(astronaut):
    _, x = astronaut
    haar = HaarCascade()(x)[0]["boxes"]
    lbp = LBPFace()(x)[0]["boxes"]
    assert len(lbp) >= 1 and float(box_iou(lbp, haar).max()) > 0.5
    hog = HOGPeople()(x)[0]
    assert hog["boxes"].shape[1] == 4 and len(hog["boxes"]) == len(hog["scores"])
    assert HOGPeople()(torch.zeros(1, 1, 64, 32))[0]["boxes"].shape == (0, 4)  # smaller than a HOG window


def test_a_haar_face_detector_is_not_shift_equivariant_on_a_real_photo(astronaut, tmp_path):
    img, x = astronaut
    face = HaarCascade()(x)[0]["boxes"][0].numpy()  # the detector's own box at full view as the target
    photo = DetectionSet.from_arrays([np.moveaxis(img, -1, 0).copy()], [{"boxes": face[None], "labels": [1]}],
                                     {1: "face"}, "skimage:astronaut")
    data = key_object_contexts(photo, view=128, max_shift=16, area=(0.1, 0.9))
    orbit = osc.parse_orbit("window-shift:-16:16:4")
    res = osc.evaluate(HaarCascade(), data, orbit, Detection(), view_size=(128, 128), store=tmp_path).result
    iou = res.iou.values[0]
    assert np.isfinite(iou).all()  # the face stays in view at every shift
    # a shift-equivariant detector would find the same box at every shift (IoU constant); this one
    # changes its box as the face moves by a few pixels
    assert float(np.nanmax(iou) - np.nanmin(iou)) > 0.05
    assert float(res.confidence.values.std()) > 0
