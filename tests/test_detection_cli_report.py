"""Detection through the CLI, the HTML report, the demo's headline table and the real photos."""

from __future__ import annotations

import numpy as np
import pytest
from typer.testing import CliRunner

import orbitscope as osc
from orbitscope import Detection
from orbitscope.cli.commands import app
from orbitscope.data.coco import DetectionSet, key_object_contexts, write_coco
from orbitscope.data.photos import FACES, PEOPLE, PhotoContext, opencv_examples_available, photo_contexts
from orbitscope.data.scenes import digit_scenes
from orbitscope.demos.detection import headline_rows
from orbitscope.errors import DataError
from orbitscope.results.store import Store
from orbitscope.viz.report import write_report

from helpers import Pairs
from test_detection_task import BrightBoxDetector


def test_cli_evaluates_a_coco_folder_over_window_shifts_on_key_objects(tmp_path):
    scenes = digit_scenes(6, size=256, seed=5)
    write_coco(scenes, tmp_path / "ann.json", tmp_path / "images")
    home = tmp_path / "runs"
    args = ["evaluate", "--task", "detection", "--data", f"coco:{tmp_path / 'ann.json'}:{tmp_path / 'images'}",
            "--orbit", "window-shift:-32:28:8", "--view-size", "64", "--consensus", "--store-inputs",
            "--model", "orbitscope.models.classical_detectors:HOGPeople", "--home", str(home)]
    out = CliRunner().invoke(app, args)
    assert out.exit_code == 0, out.output
    assert "confidence × IoU" in out.output
    res = Store(home).load(Store(home).runs()[0].run_id)
    expected = key_object_contexts(osc.data.read_coco(tmp_path / "ann.json", tmp_path / "images"), view=64, max_shift=32)
    assert res.n_samples == len(expected)
    assert res.input.shape[-2:] == (128, 128)  # (view + 2·max_shift)² contexts
    assert res.conf_iou.shape == (len(expected), 8, 8)
    assert "consensus_conf_iou" in res.data and "consensus_boxes" in res.data
    bad = CliRunner().invoke(app, ["evaluate", "--data", "mnist-subset@10", "--orbit", "shift:-2:2:2",
                                   "--view-size", "16", "--model", "x.pt"])
    assert bad.exit_code != 0 and "--view-size is for --task detection" in bad.output


def _equivariant_run(tmp_path, n=6):
    rng = np.random.default_rng(1)
    images = rng.uniform(0, 0.3, size=(n, 1, 64, 64)).astype(np.float32)
    targets = []
    for i in range(n):
        w, h = rng.integers(5, 8, size=2)
        x0, y0 = rng.integers(28, 31, size=2)
        images[i, 0, y0:y0 + h, x0:x0 + w] = 0.9
        targets.append({"boxes": np.array([[x0, y0, x0 + w, y0 + h]], np.float32), "labels": np.array([1 + i % 2])})
    # the detector always says class 1: right for half the objects
    return osc.evaluate(BrightBoxDetector(), Pairs(images, targets), osc.Translation(range(-8, 9, 4)), Detection(),
                        view_size=(32, 32), consensus=True, store=tmp_path, name="bright")


def test_headline_rows_and_the_report_of_a_detection_run(tmp_path):
    run = _equivariant_run(tmp_path)
    row = headline_rows([run], ["bright"])[0]
    # score 0.9 × IoU 1 at every shift: the box always moves with the object
    assert row["conf_iou mean"] == pytest.approx(0.9, abs=1e-4)
    assert row["conf_iou worst"] == pytest.approx(0.9, abs=1e-4)
    # AP@0.5 needs the right class: objects alternate classes 1, 2, 1, … and every detection says 1 with
    # the same score, so in image order class 1 ranks TP, FP, TP, FP, TP, FP: COCO's 101-point envelope is
    # 1 up to recall 1/3 (34 points), 2/3 up to 2/3 (33), 3/5 up to 1 (34); class 2 has AP 0
    ap1 = (34 * 1 + 33 * 2 / 3 + 34 * 3 / 5) / 101
    assert row["AP@0.5 centre"] == pytest.approx(ap1 / 2, abs=1e-4)
    assert row["NERO mean(conf)·mean(IoU)"] == pytest.approx(0.9, abs=1e-4)
    cons = headline_rows([run], ["bright"], "consensus_conf_iou")[0]
    assert cons["consensus_AP@0.5 centre"] == pytest.approx(1.0)  # the consensus labels are the model's own
    html = write_report([run.result], tmp_path / "report.html", labels=["bright"]).read_text()
    for part in ("Per-class aggregate plots", "class 1", "class 2", "Dataset-level metrics", "AP@0.5",
                 "Against the consensus", "most orbit-sensitive samples"):
        assert part in html, part


def test_detection_set_subset_keeps_order_and_names_the_selection():
    scenes = digit_scenes(4, size=128, seed=2)
    sub = scenes.subset([2, 0])
    assert len(sub) == 2 and sub.data_id == f"{scenes.data_id}[2,0]"
    np.testing.assert_array_equal(sub.image(0), scenes.image(2))
    assert scenes.subset(range(1, 3)).data_id == f"{scenes.data_id}[1:3]"
    with pytest.raises(DataError, match="outside"):
        scenes.subset([9])


def test_photo_contexts_from_scikit_image_need_no_opencv_doc():
    data = photo_contexts([PhotoContext("skimage:astronaut", 192, 82, "face")], view=128, max_shift=16)
    assert isinstance(data, DetectionSet) and len(data) == 1
    img, target = data[0]
    assert img.shape == (3, 160, 160) and target["boxes"].shape == (0, 4)
    import skimage.data

    np.testing.assert_array_equal(data.image(0), skimage.data.astronaut()[2:162, 112:272].transpose(2, 0, 1))
    with pytest.raises(DataError, match="leaves"):
        photo_contexts([PhotoContext("skimage:astronaut", 10, 10, "corner")], view=128, max_shift=16)


@pytest.mark.skipif(not opencv_examples_available(), reason="Debian's opencv-doc is not installed (make test installs it)")
def test_the_demos_photo_contexts_read_from_opencv_doc():
    people = photo_contexts(PEOPLE, view=192, max_shift=32)
    faces = photo_contexts(FACES, view=128, max_shift=16)
    assert [people.image(i).shape for i in range(len(people))] == [(3, 256, 256)] * len(PEOPLE)
    assert [faces.image(i).shape for i in range(len(faces))] == [(3, 160, 160)] * len(FACES)
    assert people.image(0).std() > 10  # a real frame, not a blank


def test_cli_detection_options_for_crowded_images_and_moving_views(tmp_path):
    from orbitscope.tasks.setup import task_and_data as _task_and_data

    boxes = np.array([[4.0 * i, 4.0 * i, 4.0 * i + 3, 4.0 * i + 3] for i in range(17)], np.float32)
    crowded = DetectionSet.from_arrays([np.zeros((3, 200, 200), np.uint8)], [{"boxes": boxes, "labels": np.ones(17)}],
                                       {1: "thing"}, "crowded")
    task, _, _ = _task_and_data("detection", crowded, osc.parse_orbit("shift:-4:4:4"), None, True, 0.5, False)
    assert task.max_objects == 17  # the most crowded image fits
    scenes = digit_scenes(3, size=256, seed=5)
    with pytest.raises(ValueError, match="--margin"):
        _task_and_data("detection", scenes, osc.parse_orbit("rotation:0:90:45"), 64, True, 0.5, False)
    _, contexts, view = _task_and_data("detection", scenes, osc.parse_orbit("rotation:0:90:45"), 64, True, 0.5, False,
                                       margin=14)
    assert view == (64, 64) and contexts.image(0).shape[-2:] == (92, 92)
