"""COCO-format import/export and NERO's key-object contexts, against plain loops."""

from __future__ import annotations

import json

import numpy as np
import pytest

import orbitscope as osc
from orbitscope.data import key_object_contexts, read_coco, write_coco
from orbitscope.data.coco import DetectionSet
from orbitscope.errors import DataError
from orbitscope.tasks import Detection

from test_detection_task import BrightBoxDetector


def _photo_set(rng: np.random.Generator, n: int = 3, size: int = 96) -> DetectionSet:
    images, targets = [], []
    for i in range(n):
        img = rng.integers(0, 70, size=(1, size, size), dtype=np.uint8)
        boxes, labels = [], []
        for k in range(2):
            w, h = rng.integers(6, 12, 2)
            x0, y0 = rng.integers(30, size - 30 - 12, 2) if k == 0 else rng.integers(0, size - 12, 2)
            img[0, y0:y0 + h, x0:x0 + w] = 230
            boxes.append([x0, y0, x0 + w, y0 + h])
            labels.append(1 + k)
        images.append(img)
        targets.append({"boxes": boxes, "labels": labels})
    return DetectionSet.from_arrays(images, targets, {1: "key", 2: "other"}, "test:photos",
                                    names=[f"img{i}.png" for i in range(n)])


def test_coco_round_trip_keeps_images_boxes_and_classes(tmp_path):
    data = _photo_set(np.random.default_rng(0))
    path = write_coco(data, tmp_path / "ann.json")
    doc = json.loads(path.read_text())
    assert doc["annotations"][0]["bbox"][2] == pytest.approx(float(data.items[0].boxes[0, 2] - data.items[0].boxes[0, 0]))
    back = read_coco(path)
    assert len(back) == len(data) and back.categories == {1: "key", 2: "other"}
    for i in range(len(data)):
        img, target = back[i]
        np.testing.assert_array_equal((img.numpy() * 255).round().astype(np.uint8), data.image(i))
        np.testing.assert_allclose(target["boxes"], data.items[i].boxes)
        np.testing.assert_array_equal(target["labels"], data.items[i].labels)
    only = read_coco(path, categories=["other"])
    assert all(set(only.target(i)["labels"].tolist()) <= {2} for i in range(len(only)))
    assert only.data_id != back.data_id


def test_crowd_annotations_are_left_out_and_bad_files_say_why(tmp_path):
    doc = {"images": [{"id": 1, "file_name": "a.png"}], "categories": [{"id": 3, "name": "cup"}],
           "annotations": [{"id": 1, "image_id": 1, "category_id": 3, "bbox": [1, 2, 3, 4], "iscrowd": 0},
                           {"id": 2, "image_id": 1, "category_id": 3, "bbox": [0, 0, 9, 9], "iscrowd": 1}]}
    (tmp_path / "a.json").write_text(json.dumps(doc))
    t = read_coco(tmp_path / "a.json").target(0)
    np.testing.assert_allclose(t["boxes"], [[1, 2, 4, 6]])  # xywh -> xyxy, the crowd box dropped
    (tmp_path / "b.json").write_text(json.dumps({"images": []}))
    with pytest.raises(DataError, match="not COCO-format"):
        read_coco(tmp_path / "b.json")
    with pytest.raises(DataError, match="not in"):
        read_coco(tmp_path / "a.json", categories=["bottle"])
    with pytest.raises(DataError, match="cannot read the image"):
        read_coco(tmp_path / "a.json")[0]
    assert isinstance(osc.data.parse_data_spec(f"coco:{tmp_path / 'a.json'}"), DetectionSet)


def test_key_object_contexts_against_a_plain_crop():
    data = _photo_set(np.random.default_rng(1), n=6)
    ctx = key_object_contexts(data, view=32, max_shift=8, area=(0.02, 0.5), categories=[1])
    assert len(ctx) >= 3
    size = 48
    for it in ctx.items:
        i = next(k for k, s in enumerate(data.items) if it.file_name.startswith(s.file_name[:-4] + "-object"))
        src = data.items[i]
        j = int(it.file_name.split("-object")[1].split(".")[0])
        box = src.boxes[j]
        cx, cy = int(round((box[0] + box[2]) / 2)), int(round((box[1] + box[3]) / 2))
        x0, y0 = cx - size // 2, cy - size // 2
        np.testing.assert_array_equal(it.image, data.image(i)[:, y0:y0 + size, x0:x0 + size])
        np.testing.assert_allclose(it.boxes[0], box - [x0, y0, x0, y0])  # the key object first
        assert it.labels[0] == 1 and (it.boxes >= 0).all() and (it.boxes <= size).all()
    with pytest.raises(DataError, match="no object qualifies"):
        key_object_contexts(data, view=32, max_shift=200)


def test_the_key_object_sits_at_the_view_centre_at_shift_zero_and_moves_by_t(tmp_path):
    data = key_object_contexts(_photo_set(np.random.default_rng(2), n=8), view=32, max_shift=8, area=(0.02, 0.5),
                               categories=[1])
    orbit = osc.parse_orbit("window-shift:-8:8:4")
    res = osc.evaluate(BrightBoxDetector(), data, orbit, Detection(), view_size=(32, 32), store=tmp_path).result
    zero = (orbit.coords["tx"] == 0).argmax(), (orbit.coords["ty"] == 0).argmax()
    for s, it in enumerate(data.items):
        b = it.boxes[0] - 8  # context -> view at shift 0
        assert abs((b[0] + b[2]) / 2 - 16) <= 1 and abs((b[1] + b[3]) / 2 - 16) <= 1
    # where only the key object is in view at shift 0, the analytic detector finds exactly its box
    iou = res.iou.values
    alone = [s for s, it in enumerate(data.items)
             if all(min(b[2] - 8, 32) <= max(b[0] - 8, 0) or min(b[3] - 8, 32) <= max(b[1] - 8, 0) for b in it.boxes[1:])]
    assert alone
    np.testing.assert_allclose(iou[alone, zero[0], zero[1]], 1.0, atol=1e-6)
    assert np.nanmax(iou) == pytest.approx(1.0) and iou.shape == (len(data), 5, 5)
    assert res.confidence.values[:, zero[0], zero[1]].min() == pytest.approx(0.9)


def test_a_coco_spec_with_a_sample_limit(tmp_path):
    from orbitscope.data.coco import write_coco
    from orbitscope.data.scenes import digit_scenes
    from orbitscope.data.specs import parse_data_spec

    write_coco(digit_scenes(4, size=128, seed=3), tmp_path / "ann.json", tmp_path / "images")
    data = parse_data_spec(f"coco:{tmp_path / 'ann.json'}:{tmp_path / 'images'}@2")
    assert len(data) == 2 and data.data_id.endswith("@2")
