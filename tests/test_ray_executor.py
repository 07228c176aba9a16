"""The Ray executor on a real local Ray cluster (two worker CPUs, loopback only): the same results
as the local and process executors, models and data shipped by reference, and the faults — a
worker killed mid-task, a driver killed mid-run, a model that fails on a worker."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

import orbitscope as osc
from orbitscope.data.specs import parse_data_spec
from orbitscope.engine.executors import LocalExecutor, ProcessExecutor
from orbitscope.engine.ray_executor import RayExecutor
from orbitscope.engine.sweep import SweepRun, sweep
from orbitscope.errors import DataError, ModelError
from orbitscope.models.loading import load_user_model
from orbitscope.models.registry import build_model
from orbitscope.results.store import Store

import ray  # noqa: E402 - make test installs it (the orbitscope[ray] extra)

pytestmark = pytest.mark.slow  # a local Ray cluster and subprocesses

TESTS = Path(__file__).resolve().parent
SMALL = {"arch": "small_cnn", "in_channels": 1, "num_classes": 10, "widths": [8, 16, 32], "hidden": 64}


@pytest.fixture(scope="module")
def ray_address() -> str:
    """A local Ray cluster with two worker CPUs whose workers can import tests/ray_models.py."""
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join([str(TESTS)] + ([old] if old else []))
    if ray.is_initialized():
        ray.shutdown()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="WARNING")
    try:
        yield ray.get_runtime_context().gcs_address
    finally:
        ray.shutdown()
        if old is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old


def _model(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return build_model(SMALL)


def _same(a: osc.OrbitResult, b: osc.OrbitResult) -> None:
    assert sorted(a.data_vars) == sorted(b.data_vars)
    for v in a.data_vars:
        np.testing.assert_array_equal(a[v].values, b[v].values, err_msg=v)


def test_local_process_and_ray_give_identical_runs(ray_address: str, tmp_path: Path) -> None:
    data = parse_data_spec("mnist-subset:test@150")  # travels to the workers as its spec
    model = _model()
    kwargs = dict(batch_size=50, consensus=True, orbit="rotation:0:360:60")
    local = osc.evaluate(model, data, executor=LocalExecutor(), **kwargs)
    # one worker process (each spends seconds importing torch); test_engine_v2 runs a pool of two
    procs = osc.evaluate(model, data, executor=ProcessExecutor(1), **kwargs)
    remote = osc.evaluate(model, data, executor=RayExecutor(), store=tmp_path / "runs", **kwargs)
    assert local.run_id == procs.run_id == remote.run_id
    _same(local.result, procs.result)
    _same(local.result, remote.result)
    assert Store(tmp_path / "runs").get_run(remote.run_id).complete
    # BatchNorm folding happens on the worker too
    folded_local = osc.evaluate(model, data, optimize=True, **kwargs)
    folded_ray = osc.evaluate(model, data, optimize=True, executor="ray", **kwargs)
    _same(folded_local.result, folded_ray.result)


def test_factory_models_and_array_data_travel_by_reference(ray_address: str, tmp_path: Path) -> None:
    marker = tmp_path / "marks"
    marker.mkdir()
    (marker / "released").touch()
    model = load_user_model("ray_models:watched_cnn", factory_kwargs={"marker": str(marker), "delay": 0.0})
    images = torch.rand(40, 1, 28, 28)
    labels = torch.randint(0, 10, (40,))
    local = osc.evaluate(model, (images, labels), "shift:-4:4:4", batch_size=16)
    remote = osc.evaluate(model, (images, labels), "shift:-4:4:4", batch_size=16, executor="ray")
    _same(local.result, remote.result)
    pids = {p.name for p in marker.glob("pid-*")}
    assert f"pid-{os.getpid()}" in pids and len(pids) >= 2  # the Ray run ran in other processes


def test_models_and_data_that_cannot_travel_are_refused(ray_address: str) -> None:
    class Local(torch.nn.Module):  # defined in a function: workers cannot build it
        def __init__(self) -> None:
            super().__init__()
            self.fc = torch.nn.Linear(784, 10)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc(x.flatten(1))

    data = parse_data_spec("mnist-subset:test@20")
    with pytest.raises(ModelError, match="cannot be shipped.*ship_as"):
        osc.evaluate(Local(), data, "rotation:0:90:45", executor="ray")

    class Items(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return 4

        def __getitem__(self, i: int):
            return torch.rand(1, 28, 28), 0

    with pytest.raises(DataError, match="cannot be shipped"):
        osc.evaluate(_model(), Items(), "rotation:0:90:45", executor="ray")
    # marked with its factory, the same kind of model ships
    marked = osc.ship_as(_model(), "orbitscope.models.registry:build_model", config=SMALL)
    run = osc.evaluate(marked, data, "rotation:0:90:45", executor="ray")
    _same(run.result, osc.evaluate(marked, data, "rotation:0:90:45").result)


def test_a_killed_worker_is_retried_with_identical_results(ray_address: str, tmp_path: Path) -> None:
    marker = tmp_path / "marks"
    marker.mkdir()
    model = load_user_model("ray_models:watched_cnn", factory_kwargs={"marker": str(marker), "delay": 1.0})
    data = parse_data_spec("mnist-subset:test@80")
    killed: list[int] = []

    def kill_first_worker() -> None:
        deadline = time.time() + 60
        while time.time() < deadline:
            pids = [int(p.name[4:]) for p in marker.glob("pid-*") if int(p.name[4:]) != os.getpid()]
            if pids:
                os.kill(pids[0], signal.SIGKILL)  # a Ray worker process, mid-task (it sleeps in forward)
                killed.append(pids[0])
                killed_at.append(time.time())
                (marker / "released").touch()
                return
            time.sleep(0.05)

    killed_at: list[float] = []

    killer = threading.Thread(target=kill_first_worker)
    killer.start()
    remote = osc.evaluate(model, data, "rotation:0:360:90", batch_size=20, executor=RayExecutor(max_retries=3),
                          store=tmp_path / "runs")
    killer.join()
    assert killed, "no worker was seen running the model"
    with pytest.raises(ProcessLookupError):
        os.kill(killed[0], 0)  # it is gone
    after = [p for p in marker.glob("pid-*") if p.name != f"pid-{killed[0]}" and p.stat().st_mtime > killed_at[0]]
    assert after, "no other worker ran the model after the kill (Ray did not retry)"
    local = osc.evaluate(model, data, "rotation:0:360:90", batch_size=20)
    _same(local.result, remote.result)


def test_a_sweep_fails_only_the_run_whose_model_cannot_travel(ray_address: str, tmp_path: Path) -> None:
    class Local(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = torch.nn.Linear(784, 10)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc(x.flatten(1))

    data = parse_data_spec("mnist-subset:test@20")
    runs = [SweepRun(Local(), data, "flip", model_name="local"),
            SweepRun(_model(0), data, "flip", model_name="good", options={"batch_size": 10})]
    result = sweep(runs, store=tmp_path / "runs", executor="ray")
    assert [o.status for o in result.outcomes] == ["failed", "done"]
    assert "cannot be shipped" in result.outcomes[0].error


def test_a_model_failing_on_a_worker_names_run_and_chunk(ray_address: str) -> None:
    failing = load_user_model("ray_models:failing_cnn")
    data = parse_data_spec("mnist-subset:test@30")
    with pytest.raises(ModelError, match=r"run 'Failing-rotation' \([0-9a-f]{16}\), chunk \d+ \(samples \d+–\d+\), "
                       r"failed on a Ray worker.*deliberate failure"):
        osc.evaluate(failing, data, "rotation:0:90:45", batch_size=10, executor="ray")


def test_sweep_goes_on_past_a_failing_model(ray_address: str, tmp_path: Path) -> None:
    data = parse_data_spec("mnist-subset:test@40")
    runs = [SweepRun(_model(0), data, "rotation:0:360:90", model_name="good", options={"batch_size": 20}),
            SweepRun(load_user_model("ray_models:failing_cnn"), data, "rotation:0:360:90", model_name="bad",
                     options={"batch_size": 20}),
            SweepRun(_model(1), data, "shift:-4:4:4", model_name="other", options={"batch_size": 20})]
    result = sweep(runs, store=tmp_path / "runs", executor="ray")
    assert [o.status for o in result.outcomes] == ["done", "failed", "done"]
    assert re.search(r"run 'bad-rotation' \([0-9a-f]{16}\), chunk \d \(samples \d+–\d+\): ModelError: .*deliberate "
                     "failure", result.outcomes[1].error)
    store = Store(tmp_path / "runs")
    assert {r.run_id for r in store.runs() if r.complete} == {result.outcomes[0].run_id, result.outcomes[2].run_id}
    from orbitscope.app.data import AppData  # the interface lists sweep runs like any others

    shown = {r.run_id for g in AppData(store).groups() for r in g.runs}
    assert {result.outcomes[0].run_id, result.outcomes[2].run_id} <= shown
    _same(result.outcomes[0].run.result, osc.evaluate(_model(0), data, "rotation:0:360:90", batch_size=20).result)
    again = sweep(runs, store=tmp_path / "runs", executor="ray")
    assert [o.status for o in again.outcomes] == ["reused", "failed", "reused"]


def test_a_killed_driver_resumes_from_the_store(ray_address: str, tmp_path: Path) -> None:
    marker = tmp_path / "marks"
    marker.mkdir()
    home = tmp_path / "runs"
    script = tmp_path / "driver.py"
    script.write_text(textwrap.dedent(f"""
        import orbitscope as osc
        from orbitscope.data.specs import parse_data_spec
        from orbitscope.engine.ray_executor import RayExecutor
        from orbitscope.models.loading import load_user_model
        model = load_user_model("ray_models:watched_cnn", factory_kwargs={{"marker": {str(marker)!r}, "delay": 0.4}})
        osc.evaluate(model, parse_data_spec("mnist-subset:test@160"), "rotation:0:360:90", batch_size=10,
                     store={str(home)!r}, executor=RayExecutor(address={ray_address!r}, in_flight=1))
    """))  # one task at a time: the driver's job starts one Ray worker, not two (seconds of imports each)
    # OMP_NUM_THREADS as here (conftest): the chunks the driver writes are compared bit for bit
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.Popen([sys.executable, str(script)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.time() + 120
    written: set[int] = set()
    try:
        while time.time() < deadline and proc.poll() is None:
            runs = Store(home).runs() if home.exists() else []
            if runs:
                written = Store(home).done_chunks(runs[0].run_id)
                if len(written) >= 3:
                    break
            time.sleep(0.1)
    finally:
        proc.send_signal(signal.SIGKILL)
        out = proc.communicate()[0].decode(errors="replace")
    assert len(written) >= 3, f"the driver wrote {len(written)} chunks before the deadline:\n{out[-2000:]}"
    store = Store(home)
    (rec,) = store.runs()
    assert not rec.complete
    before = store.done_chunks(rec.run_id)
    assert len(before) < 16
    (marker / "released").touch()
    model = load_user_model("ray_models:watched_cnn", factory_kwargs={"marker": str(marker), "delay": 0.4})
    seen: list[int] = []
    run = osc.evaluate(model, parse_data_spec("mnist-subset:test@160"), "rotation:0:360:90", batch_size=10,
                       store=home, executor="ray", progress=lambda done, n: seen.append(done))
    assert run.run_id == rec.run_id and store.get_run(run.run_id).complete
    assert seen[0] == 10 * (len(before) + 1)  # it started from the chunks the killed driver wrote
    assert len(seen) == 16 - len(before)
    _same(run.result, osc.evaluate(model, parse_data_spec("mnist-subset:test@160"), "rotation:0:360:90",
                                   batch_size=10).result)


def test_cli_sweep_on_ray(ray_address: str, tmp_path: Path) -> None:
    from orbitscope.cli import app
    from orbitscope.models.loading import save_model

    save_model(_model(0), tmp_path / "a.safetensors")
    save_model(_model(1), tmp_path / "b.safetensors")
    (tmp_path / "sweep.toml").write_text(textwrap.dedent("""
        data = ["mnist-subset:test@30"]
        orbits = ["rotation:0:360:120", "flip"]
        [defaults]
        batch_size = 15
        [[models]]
        name = "a"
        path = "a.safetensors"
        [[models]]
        name = "b"
        path = "b.safetensors"
    """))
    runner = CliRunner()
    args = ["sweep", str(tmp_path / "sweep.toml"), "--home", str(tmp_path / "runs"), "--out", str(tmp_path / "out"),
            "--executor", "ray", "--address", ray_address]
    first = runner.invoke(app, args)
    assert first.exit_code == 0, first.output
    rows = (tmp_path / "out" / "summary.csv").read_text().splitlines()
    assert len(rows) == 5 and all(",done," in r for r in rows[1:])
    assert sorted(p.name for p in (tmp_path / "out").glob("report*.html")) == ["report-01.html", "report-02.html"]
    second = runner.invoke(app, args + ["--no-report"])
    assert second.exit_code == 0, second.output
    rows = (tmp_path / "out" / "summary.csv").read_text().splitlines()
    assert all(",reused," in r for r in rows[1:])


def test_certify_on_ray_equals_a_local_run_bit_for_bit(ray_address: str) -> None:
    from orbitscope.robust.certify import PER_INPUT_FIELDS, certify

    torch.manual_seed(0)
    model = build_model(SMALL)
    with torch.no_grad():  # zero biases: predictions change under noise, so every outcome occurs
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.zero_()
    data = parse_data_spec("mnist-subset:test").stratified(3)  # 30 digits, by value
    options = dict(test="sprt", kappa=0.1, alpha=0.05, budget=64, batch_size=64, seed=3, label_free=True)
    local = certify(model, data, "gaussian:0.3", **options)
    remote = certify(model, data, "gaussian:0.3", executor="ray", shard_size=7, **options)
    for name in PER_INPUT_FIELDS:
        np.testing.assert_array_equal(getattr(local, name), getattr(remote, name), err_msg=name)
    assert local.queries == remote.queries and local.dataset == remote.dataset
    assert len(set(local.outcome.tolist())) >= 2  # not a trivial comparison


def test_zoo_members_train_on_ray_and_the_driver_writes_them(ray_address: str, tmp_path: Path) -> None:
    import dataclasses

    from orbitscope.ml4ml import zoo
    from orbitscope.ml4ml.modeldb import ModelDatabase

    tiny = dataclasses.replace(zoo.FAMILIES["mnist-small"], name="tiny", n_train=200, epochs_choices=(1,),
                               little_data=100, images_per_class=3, test_orbit="rotation:-2:2:1",
                               test_half_range=2.0, accuracy_floor=0.3)
    on_ray = zoo.build_family(tiny, 2, store=tmp_path / "ray", executor=RayExecutor(threads=1))
    here = zoo.build_family(tiny, 2, store=tmp_path / "local", executor=LocalExecutor())
    assert sorted(on_ray.built) == sorted(here.built) == ["tiny-000", "tiny-001"]
    timings = {"train_seconds", "build_seconds", "load_or_train_seconds"}
    for a, b in zip(ModelDatabase(tmp_path / "ray").models(), ModelDatabase(tmp_path / "local").models()):
        assert {k: v for k, v in a.metrics.items() if k not in timings} == \
            {k: v for k, v in b.metrics.items() if k not in timings}
        np.testing.assert_array_equal(a.load_matrices().matrices, b.load_matrices().matrices)
