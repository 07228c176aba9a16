"""Sweeps without Ray: the cross product and listed runs of a sweep file (TOML and YAML), runs
identical to evaluate's, skipping and resuming through the store, one failing run among others."""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

import orbitscope as osc
from orbitscope.data.specs import parse_data_spec
from orbitscope.engine.sweep import SweepRun, sweep
from orbitscope.errors import SpecError
from orbitscope.models.loading import save_model
from orbitscope.models.registry import build_model
from orbitscope.results.store import Store

SMALL = {"arch": "small_cnn", "in_channels": 1, "num_classes": 10, "widths": [8, 16, 32], "hidden": 64}


def _model(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return build_model(SMALL)


class Broken(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise ValueError("this model is broken")


def _files(tmp: Path) -> None:
    save_model(_model(0), tmp / "a.safetensors")
    save_model(_model(1), tmp / "b.safetensors")


def test_sweep_file_cross_product_matches_evaluate(tmp_path: Path) -> None:
    _files(tmp_path)
    (tmp_path / "s.toml").write_text(textwrap.dedent("""
        data = ["mnist-subset:test@24"]
        orbits = ["rotation:0:360:90", "flip"]
        [defaults]
        batch_size = 10
        [[models]]
        name = "a"
        path = "a.safetensors"
        [[models]]
        name = "b"
        path = "b.safetensors"
    """))
    plan = osc.load_sweep(tmp_path / "s.toml")
    rot, flip = osc.parse_orbit("rotation:0:360:90").spec(), osc.parse_orbit("flip").spec()
    assert [(r.model_name, r.orbit.spec()) for r in plan.runs] == [("a", rot), ("a", flip), ("b", rot), ("b", flip)]
    result = plan.run(store=tmp_path / "runs")
    assert [o.status for o in result.outcomes] == ["done"] * 4
    data = parse_data_spec("mnist-subset:test@24")
    for o, seed, orbit in zip(result.outcomes, (0, 0, 1, 1), ("rotation:0:360:90", "flip") * 2):
        ref = osc.evaluate(_model(seed), data, orbit, batch_size=10, model_name=o.spec.model_name)
        assert o.run_id == ref.run_id
        for v in ref.result.data_vars:
            np.testing.assert_array_equal(o.run.result[v].values, ref.result[v].values)
    rows = result.rows()
    assert rows[0]["metric"] == "correct" and rows[0]["samples"] == 24
    again = plan.run(store=tmp_path / "runs")
    assert [o.status for o in again.outcomes] == ["reused"] * 4


def test_listed_runs_in_yaml(tmp_path: Path) -> None:
    _files(tmp_path)
    (tmp_path / "s.yaml").write_text(textwrap.dedent("""
        models:
          - {name: a, path: a.safetensors}
          - {name: b, path: b.safetensors}
        runs:
          - {model: b, data: "mnist-subset:test@12", orbit: "shift:-2:2:2", options: {batch_size: 6}}
          - {model: a, data: "mnist-subset:test@12", orbit: "rotation:0:180:90", task: classification}
    """))
    plan = osc.load_sweep(tmp_path / "s.yaml")
    assert [r.model_name for r in plan.runs] == ["b", "a"]
    assert plan.runs[0].options == {"batch_size": 6}
    result = plan.run(store=tmp_path / "runs")
    assert [o.status for o in result.outcomes] == ["done", "done"]
    assert result.outcomes[0].run.result.attrs["n_samples"] == 12


@pytest.mark.parametrize("text, match", [
    ("[[models]]\nname = 'a'\npath = 'a.safetensors'\ndata = ['x']\n", "plain keys such as data"),
    ("data = ['mnist-subset:test@4']\norbits = ['flip']\n", "no models"),
    ("data = ['mnist-subset:test@4']\norbits = ['flip']\n[[models]]\nname = 'a'\npath = 'a.safetensors'\n"
     "[[models]]\nname = 'a'\npath = 'b.safetensors'\n", "named twice"),
    ("data = ['mnist-subset:test@4']\norbits = ['flip']\ntasks = ['segmentation']\n[[models]]\nname = 'a'\n"
     "path = 'a.safetensors'\n", "task 'segmentation' is unknown"),
    ("[[models]]\nname = 'a'\npath = 'a.safetensors'\n[[runs]]\nmodel = 'c'\ndata = 'mnist-subset:test@4'\n"
     "orbit = 'flip'\n", "model 'c', which is not among"),
    ("[[models]]\nname = 'a'\npath = 'a.safetensors'\n[[runs]]\nmodel = 'a'\n", "missing data, orbit"),
    ("[[models]]\nname = 'a'\npath = 'a.safetensors'\nbatch = 3\n", "unknown key"),
    ("data = ['mnist-subset:test@4']\norbits = ['flip']\n[defaults]\nstore = 'x'\n[[models]]\nname = 'a'\n"
     "path = 'a.safetensors'\n", r"\[defaults\]: unknown key\(s\) store"),
    ("data = [", "not valid TOML"),
])
def test_sweep_file_errors_say_what_to_fix(tmp_path: Path, text: str, match: str) -> None:
    _files(tmp_path)
    (tmp_path / "s.toml").write_text(text)
    with pytest.raises(SpecError, match=match):
        osc.load_sweep(tmp_path / "s.toml")


def test_one_failing_run_does_not_stop_the_others(tmp_path: Path) -> None:
    data = parse_data_spec("mnist-subset:test@20")
    runs = [SweepRun(_model(0), data, "flip", model_name="good", options={"batch_size": 10}),
            SweepRun(Broken(), data, "flip", model_name="broken", options={"batch_size": 10}),
            SweepRun(_model(1), data, "not-an-orbit", model_name="typo"),
            SweepRun(_model(2), data, "flip", model_name="also-good", options={"batch_size": 10})]
    events: list[tuple[int, str]] = []
    result = sweep(runs, store=tmp_path / "runs", progress=lambda i, d, n, s: events.append((i, s)))
    assert [o.status for o in result.outcomes] == ["done", "failed", "failed", "done"]
    assert "'broken-flip'" in result.outcomes[1].error and "chunk 0 (samples 0–9)" in result.outcomes[1].error
    assert "this model is broken" in result.outcomes[1].error
    assert "not-an-orbit" in result.outcomes[2].error
    assert (1, "failed") in events and (3, "done") in events
    assert len(result.failed) == 2 and len(result.runs) == 2


def test_an_interrupted_sweep_resumes(tmp_path: Path) -> None:
    data = parse_data_spec("mnist-subset:test@40")
    runs = [SweepRun(_model(k), data, "rotation:0:360:90", model_name=f"m{k}", options={"batch_size": 10})
            for k in range(2)]

    class Stop(Exception):
        pass

    def stop_after_five(i: int, done: int, n: int | None, status: str) -> None:
        if status == "running" and i == 1 and done >= 10:
            raise Stop

    with pytest.raises(Stop):
        sweep(runs, store=tmp_path / "runs", progress=stop_after_five)
    store = Store(tmp_path / "runs")
    states = {r.name: (r.complete, len(store.done_chunks(r.run_id))) for r in store.runs()}
    assert states == {"m0-rotation": (True, 4), "m1-rotation": (False, 1)}
    seen: list[int] = []
    result = sweep(runs, store=tmp_path / "runs", progress=lambda i, d, n, s: seen.append(d) if i == 1 else None)
    assert [o.status for o in result.outcomes] == ["reused", "done"]
    assert seen[0] == 10 and seen[-1] == 40  # m1 went on from its one stored chunk
    ref = osc.evaluate(_model(1), data, "rotation:0:360:90", batch_size=10)
    for v in ref.result.data_vars:
        np.testing.assert_array_equal(result.outcomes[1].run.result[v].values, ref.result[v].values)


def test_the_same_run_twice_in_a_sweep_is_reported_not_deadlocked(tmp_path: Path) -> None:
    data = parse_data_spec("mnist-subset:test@10")
    model = _model(0)
    runs = [SweepRun(model, data, "flip", options={"batch_size": 10}),
            SweepRun(model, data, "flip", options={"batch_size": 10})]
    result = sweep(runs, store=tmp_path / "runs")
    assert result.outcomes[0].status == "done"
    assert result.outcomes[1].status == "failed" and "same run twice" in result.outcomes[1].error


def test_sweep_needs_a_store() -> None:
    with pytest.raises(ValueError, match="needs a store"):
        sweep([], store=None)
