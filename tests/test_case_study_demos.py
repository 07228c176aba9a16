"""The detection, PIV and point-cloud case studies end to end on miniature sizes with the shipped
weights (nothing trains): each writes its summary with the test of invariance and its contrast
table with the whole-orbit statistics, whose numbers are those of the runs it stored."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest

from orbitscope.stats import compare_models, invariance_test


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path) as fh:
        return list(csv.DictReader(fh))


def _check_contrast(path: Path, runs: dict) -> None:
    rows = _rows(path)
    assert rows, path
    for row in rows:
        a, b = runs[row["a"]].result, runs[row["b"]].result
        c = compare_models(a, b, row["metric"], names=(row["a"], row["b"]))
        assert float(row["orbit-mean paired t p"]) == pytest.approx(c.orbit_mean_p, rel=1e-3, nan_ok=True)  # 4 significant digits
        assert int(row["a worse at"]) == int(c.worse.sum()) and int(row["a better at"]) == int(c.better.sum())
        assert float(row["a invariance p"]) == pytest.approx(invariance_test(a, row["metric"]).p_value, rel=1e-3)


@pytest.mark.slow  # three case studies, each evaluated end to end (about a minute)
def test_case_studies_write_summaries_and_contrasts_without_training(tmp_path, monkeypatch):
    from orbitscope.demos import detection, piv, pointcloud

    monkeypatch.setattr(detection, "TEST_SCENES", 60)
    monkeypatch.setattr(detection, "SCENE_ORBIT", "window-shift:-16:16:16")
    monkeypatch.setattr(piv, "TEST_DATA", "piv-synthetic:n=16,size=64,seed=1")
    monkeypatch.setattr(piv, "real_pairs", lambda: ((np.zeros((0, 2, 1, 8, 8)), np.zeros((0, 2, 8, 8))), [], {}))
    monkeypatch.setattr(pointcloud, "NERO_TEST", "meshes:test,n=2,points=64")
    monkeypatch.setattr(pointcloud, "NERO_ORBIT", "so3-nero:90:90")
    monkeypatch.setattr(pointcloud, "GRID_TEST", "meshes:test,n=2,points=64")
    monkeypatch.setattr(pointcloud, "GRID_ORBIT", "so3:4")
    home, out = tmp_path / "home", tmp_path / "out"
    said: list[str] = []

    det = detection.run_detection_demo(home, out / "detection", n_objects=12, photos=False, pretrained=False,
                                       status=said.append)
    flow = piv.run_piv_demo(home, out / "piv", status=said.append)
    cloud = pointcloud.run_pointcloud_demo(home, out / "pointcloud", status=said.append)
    assert not [m for m in said if m.startswith("training")], said  # every model came from the shipped weights
    assert det.seconds["training"] == flow.seconds["training"] == cloud.seconds["training"] == 0.0

    named = lambda runs, names: dict(zip(names, runs))  # noqa: E731
    _check_contrast(out / "detection" / "scenes" / "contrast.csv", named(det.runs["scenes"], list(detection.DETECTORS)))
    summary = _rows(out / "detection" / "scenes" / "summary.csv")
    assert [r["model"] for r in summary] == list(detection.DETECTORS) and "conf_iou invariance p" in summary[0]
    _check_contrast(out / "piv" / "synthetic" / "contrast.csv",
                    named(flow.runs["synthetic"], ["farneback", *piv.FLOW_RECIPES]))
    assert "epe invariance p" in _rows(out / "piv" / "synthetic" / "summary.csv")[0]
    for part in ("nero", "uniform"):
        names = list(pointcloud.NERO_MODELS) if part == "nero" else [*pointcloud.POINT_RECIPES, "pointnet-octahedral"]
        _check_contrast(out / "pointcloud" / part / "contrast.csv", named(cloud.runs[part], names))
        assert "correct invariance p" in _rows(out / "pointcloud" / part / "summary.csv")[0]
