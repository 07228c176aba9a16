"""The point-cloud demo's summary rows, against counts done here over NERO's sample."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

import orbitscope as osc
from orbitscope.demos.pointcloud import rotation_rows
from orbitscope.group.so3 import NeroSO3
from orbitscope.tasks import PointCloudClassification


class ZSign(nn.Module):
    """Class 1 when the cloud's mean z³ is positive, else class 0: right for upright clouds whose
    labels say so, wrong once they are turned upside down."""

    def forward(self, p: torch.Tensor) -> torch.Tensor:
        s = (p[..., 2] ** 3).mean(1) * 50
        return torch.stack([-s, s], 1)


class R:  # the Run interface rotation_rows reads
    def __init__(self, result, run_id):
        self.result, self.run_id = result, run_id


def test_rotation_rows_count_each_distinct_rotation_once():
    rng = np.random.default_rng(0)
    clouds = rng.normal(size=(6, 40, 3)).astype(np.float32)
    clouds[..., 2] = np.abs(clouds[..., 2]) * np.where(np.arange(6) % 2 == 0, 1, -1)[:, None]
    labels = (np.arange(6) % 2 == 0).astype(np.int64)
    orbit = NeroSO3(axis_step=45, angle_step=45)
    res = osc.evaluate(ZSign(), (clouds, labels), orbit, PointCloudClassification()).result
    row = rotation_rows([R(res, "x")], ["zsign"], orbit)[0]
    correct = res.data["correct"].values.reshape(6, -1).astype(float)
    mats = np.round(orbit.matrices.reshape(-1, 9), 8)
    _, first = np.unique(mats, axis=0, return_index=True)
    per_rotation = correct[:, np.sort(first)].mean(0)
    assert row["rotations"] == len(first)
    assert row["accuracy identity"] == 1.0  # upright clouds are all right
    assert row["accuracy mean"] == round(float(per_rotation.mean()), 4)
    assert row["accuracy worst"] == round(float(per_rotation.min()), 4) == 0.0  # upside down: all wrong
    # the first distinct rotation at that accuracy, in NERO's coordinates
    worst = np.sort(first)[int(np.argmin(per_rotation))]
    plane, phi, psi = np.unravel_index(worst, orbit.shape)
    assert row["worst rotation"] == (f"{('xy', 'xz', 'yz')[plane]} plane, axis {orbit.coords['axis_angle'][phi]:g}°, "
                                     f"turn {orbit.coords['rotation_angle'][psi]:g}°")


def test_cli_evaluates_built_in_meshes_over_nero_sample_with_a_saved_model(tmp_path):
    from typer.testing import CliRunner

    from orbitscope.cli.commands import app
    from orbitscope.data.meshes import MeshClouds
    from orbitscope.models.point_nets import PointNet
    from orbitscope.results.store import Store

    torch.manual_seed(0)
    model = PointNet(10, width=8).eval()
    osc.save_model(model, tmp_path / "pn.safetensors")
    home = tmp_path / "runs"
    out = CliRunner().invoke(app, ["evaluate", "--task", "pointcloud", "--data", "meshes:test,n=1,points=64",
                                   "--orbit", "so3-nero:90:90", "--probabilities", "--consensus",
                                   "--model", str(tmp_path / "pn.safetensors"), "--home", str(home)])
    assert out.exit_code == 0, out.output
    res = Store(home).load(Store(home).runs()[0].run_id)
    data = MeshClouds("test", n_per_class=1, points=64)
    assert res.task().kind == "pointcloud" and res.n_samples == len(data) == 10
    with torch.no_grad():
        at_identity = torch.softmax(model(torch.stack([data[i][0] for i in range(10)])), -1).numpy()
    np.testing.assert_allclose(res.data["probabilities"].values[:, 0, 0, 0], at_identity, atol=1e-5)
    np.testing.assert_array_equal(res.data["input_points"].values, data.clouds)
    bad = CliRunner().invoke(app, ["evaluate", "--task", "pointcloud", "--data", "meshes:test,n=1,points=64",
                                   "--orbit", "so3:8", "--view-size", "16", "--model", str(tmp_path / "pn.safetensors")])
    assert bad.exit_code != 0 and "--view-size is for --task detection" in bad.output


def test_the_demo_models_return_logits_so_its_runs_record_nero_score(tmp_path):
    """Every model of the demo (the shipped weights; nothing trains) returns logits, not
    probabilities, so the demo's task records NERO's individual score; at the identity it equals
    a plain loop (seeds.md §4: min–max over the classes of that one prediction) over the model's
    own outputs."""
    from orbitscope.data.meshes import MeshClouds
    from orbitscope.demos.pointcloud import DEMO_TASK, POINT_RECIPES, SYMMETRY_GROUP
    from orbitscope.demos.shipped import cache_ready
    from orbitscope.training.pointcloud import cached_point_model, point_cache_path

    assert DEMO_TASK.nero_score and "nero_score" in [v.name for v in DEMO_TASK.variables()]
    data = MeshClouds("test", n_per_class=1, points=64)
    clouds = torch.stack([data[i][0] for i in range(len(data))])
    labels = np.array([int(data[i][1]) for i in range(len(data))])
    models = {}
    for name, recipe in POINT_RECIPES.items():
        assert cache_ready(point_cache_path(recipe, tmp_path))
        models[name] = cached_point_model(recipe, tmp_path)[0].eval()
    models["symmetrized"] = osc.symmetrize(models["pointnet"], SYMMETRY_GROUP, input_kind="points")
    orbit = NeroSO3(axis_step=180, angle_step=180)  # ψ = 0 (the identity) and 180°
    for name, model in models.items():
        with torch.no_grad():
            logits = model(clouds).double().numpy()
        looks_like_probabilities = (logits >= 0).all() and np.allclose(logits.sum(1), 1, atol=1e-3)
        assert not looks_like_probabilities, name
        want = []
        for z, y in zip(logits, labels):
            lo, hi = min(z), max(z)
            want.append((z[y] - lo) / (hi - lo))
        res = osc.evaluate(model, data, orbit, DEMO_TASK).result
        got = res.data["nero_score"].sel(rotation_angle=0.0).values  # (sample, plane, axis_angle)
        np.testing.assert_allclose(got, np.broadcast_to(np.array(want)[:, None, None], got.shape), atol=1e-4,
                                   err_msg=name)
