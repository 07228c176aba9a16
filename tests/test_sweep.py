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
from orbitscope.engine.executors import LocalExecutor
from orbitscope.engine.sweep import SweepRun, sweep
from orbitscope.errors import JobError, SpecError
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
    ("data = ['mnist-subset:test@4']\norbits = ['rotation:0:x']\n[[models]]\nname = 'a'\npath = 'a.safetensors'\n",
     r"s\.toml: orbits entry 1 'rotation:0:x': orbit 'rotation:0:x': rotation needs START:STOP:STEP"),
    ("data = ['mnist-subset:test@4']\norbits = ['flip']\ntasks = [{ kind = 'classification', view_size = 64 }]\n"
     "[[models]]\nname = 'a'\npath = 'a.safetensors'\n", r"\(classification\): --view-size is for --task detection"),
    ("[[models]]\nname = 'a'\npath = 'a.safetensors'\n[[runs]]\nmodel = 'a'\ndata = ['x', 'y']\norbit = 'flip'\n",
     "must be one string each"),
    ("data = ['mnist-subset:test@4']\n[[models]]\nname = 'a'\npath = 'a.safetensors'\n[[runs]]\nmodel = 'a'\n"
     "data = 'mnist-subset:test@4'\norbit = 'flip'\n", "either \\[\\[runs\\]\\] entries or data"),
    ("data = ['mnist-subset:test@4']\norbits = ['flip']\n[executor_options]\naddress = 'auto'\n[[models]]\n"
     "name = 'a'\npath = 'a.safetensors'\n", "do not fit executor 'local'"),
    ("data = ['mnist-subset:test@4']\norbits = ['flip']\nexecutor = 'slurm'\n[[models]]\nname = 'a'\n"
     "path = 'a.safetensors'\n", "executor 'slurm' is unknown"),
    ("data = ['mnist-subset:test@4']\norbits = ['flip']\n[[models]]\nname = 3\npath = 'a.safetensors'\n",
     "model names are strings"),
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


def test_the_same_run_twice_is_computed_once(tmp_path: Path) -> None:
    data = parse_data_spec("mnist-subset:test@10")
    model = _model(0)
    runs = [SweepRun(model, data, "flip", options={"batch_size": 10}),
            SweepRun(model, data, "flip", options={"batch_size": 10})]
    result = sweep(runs, store=tmp_path / "runs")
    assert [o.status for o in result.outcomes] == ["done", "done"]
    assert result.outcomes[0].run_id == result.outcomes[1].run_id and not result.failed
    assert len(Store(tmp_path / "runs").runs()) == 1


def test_empty_data_and_a_dataloader_source(tmp_path: Path) -> None:
    images, labels = torch.rand(30, 1, 28, 28), torch.randint(0, 10, (30,))
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(images, labels), batch_size=8)
    empty = (torch.zeros(0, 1, 28, 28), torch.zeros(0, dtype=torch.long))
    runs = [SweepRun(_model(0), empty, "flip", model_name="empty"),
            SweepRun(_model(1), loader, "flip", model_name="loader")]
    result = sweep(runs, store=tmp_path / "runs")
    assert result.outcomes[0].status == "failed" and "empty" in result.outcomes[0].error
    assert result.outcomes[1].status == "done" and result.outcomes[1].samples == 30
    ref = osc.evaluate(_model(1), loader, "flip")
    for v in ref.result.data_vars:
        np.testing.assert_array_equal(result.outcomes[1].run.result[v].values, ref.result[v].values)


class FlakyExecutor(LocalExecutor):
    """Runs jobs in place, all submitted at once (as if in flight), but reports the first job of
    run ``bad`` as one it could not run (a worker that kept dying); with ``late``, that job fails
    on its worker instead and the run's next job, already in flight, then could not be run."""

    def __init__(self, bad: int, late: bool = False) -> None:
        self.bad, self.late, self.calls = bad, late, 0

    def map(self, fn, jobs, context=None):
        from orbitscope.engine.executor_base import JobFailure

        self.calls += 1
        pending = list(jobs)
        seen = 0
        for job in pending:
            if job[0] == self.bad and self.calls == 1:
                seen += 1
                if self.late and seen == 1:
                    yield job, JobFailure("ModelError", "it broke", "")
                    continue
                raise JobError("Ray could not run the job after 3 retries: worker died", job, None, "Ray")
            yield job, fn(job, context)


@pytest.mark.parametrize("late", [False, True])
def test_a_job_the_executor_cannot_run_fails_its_run_only(tmp_path: Path, late: bool) -> None:
    data = parse_data_spec("mnist-subset:test@20")
    runs = [SweepRun(_model(k), data, "flip", model_name=f"m{k}", options={"batch_size": 5}) for k in range(3)]
    result = sweep(runs, store=tmp_path / "runs", executor=FlakyExecutor(bad=1, late=late))
    assert [o.status for o in result.outcomes] == ["done", "failed", "done"]
    assert "chunk 0 (samples 0–4)" in result.outcomes[1].error
    assert ("it broke" if late else "worker died") in result.outcomes[1].error
    ref = osc.evaluate(_model(2), data, "flip", batch_size=5)
    for v in ref.result.data_vars:
        np.testing.assert_array_equal(result.outcomes[2].run.result[v].values, ref.result[v].values)


def test_sweep_needs_a_store() -> None:
    with pytest.raises(ValueError, match="needs a store"):
        sweep([], store=None)


def test_evaluate_names_run_and_chunk_when_a_worker_died(tmp_path: Path) -> None:
    class Dying(LocalExecutor):
        def map(self, fn, jobs, context=None):
            for job in jobs:
                raise JobError("Ray could not run the job after 3 retries: worker died", job, None, "Ray")
                yield  # pragma: no cover

    data = parse_data_spec("mnist-subset:test@20")
    with pytest.raises(JobError, match=r"run 'SmallCNN-flip' \([0-9a-f]{16}\), chunk 0 \(samples 0–9\), failed on "
                       r"Ray: Ray could not run the job after 3 retries: worker died") as info:
        osc.evaluate(_model(0), data, "flip", batch_size=10, executor=Dying(), store=tmp_path / "runs")
    assert isinstance(info.value.__cause__, JobError)
