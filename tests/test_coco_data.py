"""COCO-format import/export and NERO's key-object contexts, against plain loops."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

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


# ----------------------------------------------------------------------------------- issue 38: malformed COCO files

def _good_doc() -> dict:
    return {"images": [{"id": 1, "file_name": "a.png"}, {"id": 2, "file_name": "b.png"}],
            "categories": [{"id": 3, "name": "cup"}],
            "annotations": [{"id": 10, "image_id": 1, "category_id": 3, "bbox": [1, 2, 3, 4]},
                            {"id": 11, "image_id": 2, "category_id": 3, "bbox": [5, 6, 7, 8]}]}


def _edit(doc: dict, where: str, key: str, value: object = None, drop: bool = False) -> dict:
    section, index = where.split(":")
    entry = doc[section][int(index)]
    if drop:
        del entry[key]
    else:
        entry[key] = value
    return doc


# (edit of the good document, what the one-line message must hold besides the file name)
MALFORMED = {
    "image without id": (lambda d: _edit(d, "images:1", "id", drop=True), ["image 1 has no 'id'"]),
    "image without file_name": (lambda d: _edit(d, "images:0", "file_name", drop=True),
                                ["image 0 (id 1) has no 'file_name'"]),
    "category without id": (lambda d: _edit(d, "categories:0", "id", drop=True), ["category 0 has no 'id'"]),
    "annotation without bbox": (lambda d: _edit(d, "annotations:1", "bbox", drop=True),
                                ["annotation 1 (id 11) has no 'bbox'"]),
    "bbox null": (lambda d: _edit(d, "annotations:1", "bbox", None),
                  ["annotation 1 (id 11): 'bbox' must be [x, y, width, height]", "None"]),
    "bbox of three": (lambda d: _edit(d, "annotations:0", "bbox", [1, 2, 3]), ["annotation 0 (id 10): 'bbox'"]),
    "bbox of strings": (lambda d: _edit(d, "annotations:0", "bbox", ["1", 2, 3, 4]), ["annotation 0 (id 10): 'bbox'"]),
    "annotation without category_id": (lambda d: _edit(d, "annotations:0", "category_id", drop=True),
                                       ["annotation 0 (id 10) has no 'category_id'"]),
    "annotation without image_id": (lambda d: _edit(d, "annotations:1", "image_id", drop=True),
                                    ["annotation 1 (id 11) has no 'image_id'"]),
    "annotation without its own id": (lambda d: _edit(_edit(d, "annotations:1", "id", drop=True), "annotations:1",
                                                      "bbox", None), ["annotation 1: 'bbox'"]),
    "image id not an integer": (lambda d: _edit(d, "images:0", "id", {"x": [1] * 10_000}),
                                ["image 0", "'id' must be an integer"]),
    "image id 1.5": (lambda d: _edit(d, "images:0", "id", 1.5), ["image 0 (id 1.5): 'id' must be an integer"]),
    "category id beyond int64": (lambda d: _edit(d, "categories:0", "id", 2**70), ["'id' must be an integer"]),
    "annotation not an object": (lambda d: d["annotations"].__setitem__(0, [1, 2]) or d,
                                 ["annotation 0 of 'annotations' must be an object"]),
    "negative width": (lambda d: _edit(d, "annotations:0", "bbox", [1, 2, -3, 4]),
                       ["annotation 0 (id 10) of image 1 has a negative width or height"]),
    "unknown image": (lambda d: _edit(d, "annotations:0", "image_id", 99), ["refers to image 99, which is not listed"]),
    # defect 6: non-finite boxes (Python's json reads NaN and Infinity)
    "bbox NaN": (lambda d: _edit(d, "annotations:1", "bbox", [float("nan"), 30, 30, 30]),
                 ["annotation 1 (id 11): 'bbox' [nan, 30, 30, 30] is not finite"]),
    "bbox Infinity": (lambda d: _edit(d, "annotations:0", "bbox", [1, 2, float("inf"), 4]),
                      ["annotation 0 (id 10): 'bbox'", "is not finite"]),
    "bbox beyond float32": (lambda d: _edit(d, "annotations:0", "bbox", [1e39, 2, 3, 4]), ["is not finite"]),
    # the minors: duplicate image ids and annotations of categories that are not listed
    "duplicate image ids": (lambda d: _edit(d, "images:1", "id", 1), ["images 0 and 1 have the same id 1"]),
    "duplicate category ids": (lambda d: d["categories"].append({"id": 3, "name": "mug"}) or d,
                               ["categories 0 and 1 have the same id 3"]),
    "unknown category": (lambda d: _edit(_edit(d, "annotations:0", "category_id", 7), "annotations:1",
                                         "category_id", 8),
                         ["2 annotation(s) (the first: annotation 0) have category_id [7, 8], not listed in "
                          "'categories' (ids [3])"]),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_a_malformed_coco_file_is_one_data_error_naming_the_file_the_entry_and_the_field(tmp_path, case):
    edit, needles = MALFORMED[case]
    path = tmp_path / "ann.json"
    path.write_text(json.dumps(edit(_good_doc())))
    with pytest.raises(DataError) as err:
        read_coco(path)
    message = str(err.value)
    assert str(path) in message and "\n" not in message and len(message) < 600, message
    for needle in needles:
        assert needle in message, (needle, message)


def test_the_good_document_of_the_malformed_cases_loads(tmp_path):
    (tmp_path / "ann.json").write_text(json.dumps(_good_doc()))
    data = read_coco(tmp_path / "ann.json")
    np.testing.assert_array_equal(data.target(0)["boxes"], [[1, 2, 4, 6]])
    np.testing.assert_array_equal(data.target(1)["boxes"], [[5, 6, 12, 14]])
    assert data.categories == {3: "cup"}


@pytest.mark.parametrize("text, needle", [
    ("[]", "holds a JSON list, not an object"),
    ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
    ('{"images": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested too deeply"),
])
def test_coco_files_that_are_not_objects_or_nest_deeply_are_refused(tmp_path, text, needle):
    path = tmp_path / "deep.json"
    path.write_text(text)
    with pytest.raises(DataError, match=needle) as err:
        read_coco(path)
    assert str(path) in str(err.value)


def _cli(tmp_path, ann):
    args = ["evaluate", "--task", "detection", "--model", "orbitscope.models.classical_detectors:HOGPeople",
            "--data", f"coco:{ann}", "--orbit", "shift:-4:4:4", "--home", str(tmp_path / "home")]
    return subprocess.run([sys.executable, "-c", "from orbitscope.cli import app; app()", *args],
                          capture_output=True, text=True, timeout=300, env={**os.environ, "COLUMNS": "400"})


@pytest.mark.parametrize("case", ["bbox null", "deep", "bbox NaN"])
def test_the_issue_s_coco_files_through_the_cli_give_one_line(tmp_path, case):
    ann = tmp_path / "ann.json"
    if case == "deep":
        ann.write_text("[" * 100_000 + "]" * 100_000)
    else:
        ann.write_text(json.dumps(MALFORMED[case][0](_good_doc())))
    proc = _cli(tmp_path, ann)
    errors = [ln for ln in proc.stderr.splitlines() if "error" in ln.lower()]
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and len(errors) == 1 and errors[0].startswith("error: "), proc.stderr[-2000:]
    assert str(ann) in errors[0]


class NaNDetector(torch.nn.Module):
    """Returns one box per image whose coordinates (``what="boxes"``) or score (``"scores"``) is
    NaN or infinite from the given call on."""

    def __init__(self, what: str, value: float = float("nan"), rows: bool = False) -> None:
        super().__init__()
        self.what, self.value, self.rows = what, value, rows

    def forward(self, x):
        if self.rows:  # the (batch, n, 6) tensor form: x0, y0, x1, y1, score, label
            out = torch.tensor([4.0, 4.0, 20.0, 20.0, 0.8, 1.0]).repeat(len(x), 1, 1)
            out[:, 0, 2 if self.what == "boxes" else 4] = self.value
            return out
        out = []
        for _ in x:
            box, score = torch.tensor([[4.0, 4.0, 20.0, 20.0]]), torch.tensor([0.8])
            if self.what == "boxes":
                box[0, 2] = self.value
            else:
                score[0] = self.value
            out.append({"boxes": box, "scores": score, "labels": torch.tensor([1])})
        return out


@pytest.mark.parametrize("rows", [False, True])
@pytest.mark.parametrize("what, value", [("boxes", float("nan")), ("scores", float("nan")),
                                         ("boxes", float("inf")), ("scores", float("inf"))])
def test_a_detector_returning_non_finite_boxes_or_scores_is_a_model_error(tmp_path, what, value, rows):
    from orbitscope.errors import ModelError

    data = _photo_set(np.random.default_rng(5), n=2)
    with pytest.raises(ModelError, match=f"non-finite {what[:-1] if what == 'scores' else 'box'} for image 0"):
        osc.evaluate(NaNDetector(what, value, rows), data, "window-shift:-4:4:4", Detection(), view_size=(64, 64),
                     store=tmp_path)


def test_a_detector_may_pad_with_label_minus_one_or_score_minus_inf(tmp_path):
    """Padding rows stay padding (not an error): label -1 with anything, or score -inf."""
    from orbitscope.kinds.boxes import read_detections

    nan = float("nan")
    got = read_detections([{"boxes": torch.tensor([[1.0, 1, 5, 5], [nan, nan, nan, nan], [0, 0, 0, 0]]),
                            "scores": torch.tensor([0.7, nan, -float("inf")]), "labels": torch.tensor([2, -1, 3])}])
    assert int(got.valid.sum()) == 1
    np.testing.assert_array_equal(got.xyxy[got.valid].numpy(), [[1, 1, 5, 5]])
