"""Zoo builds on executors: the driver writes every file and row, and the rows do not depend on
where the members ran (a tiny family, as in test_zoo.py)."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from orbitscope.cli import app
from orbitscope.engine.executors import LocalExecutor, ProcessExecutor
from orbitscope.ml4ml import zoo
from orbitscope.ml4ml.modeldb import ModelDatabase
from orbitscope.models.loading import load_model
from orbitscope.models.reference import model_hash

#: A family small enough for CI: 200 training images, 1 epoch, 3 test images per class, ±2°.
TINY = dataclasses.replace(
    zoo.FAMILIES["mnist-small"], name="tiny", n_train=200, epochs_choices=(1,), little_data=100,
    images_per_class=3, test_orbit="rotation:-2:2:1", test_half_range=2.0, accuracy_floor=0.3)
#: Metrics that time the build (they differ from run to run).
TIMINGS = {"train_seconds", "build_seconds", "load_or_train_seconds"}


def timeless(metrics: dict, drop: frozenset = frozenset()) -> dict:
    """``metrics`` without the timings (and ``drop``)."""
    return {k: v for k, v in metrics.items() if k not in TIMINGS | drop}


def files(home) -> set[str]:
    return {os.path.relpath(os.path.join(d, f), home) for d, _, fs in os.walk(home) for f in fs}


def _build(tmp_path_factory, name: str, runner) -> Path:
    home = tmp_path_factory.mktemp(f"zoo-{name}")
    report = zoo.build_family(TINY, 2, store=home, executor=runner)
    assert sorted(report.built) == ["tiny-000", "tiny-001"] and not report.failed, report.failed
    return home


@pytest.fixture(scope="module")
def local_store(tmp_path_factory) -> Path:
    """Members 0 and 1 built in this process."""
    return _build(tmp_path_factory, "local", LocalExecutor())


@pytest.fixture(scope="module")
def process_store(tmp_path_factory) -> Path:
    """Members 0 and 1 built in a worker process: one process (a spawned one costs seconds of
    imports) on the process executor's pool, both jobs submitted at once, the results received
    and saved by this process as they complete, exactly as with more workers."""
    return _build(tmp_path_factory, "process", ProcessExecutor(1, threads=1))


@pytest.fixture(scope="module")
def stores(local_store, process_store) -> dict[str, Path]:
    return {"local": local_store, "process": process_store}


@pytest.mark.slow  # its fixture starts a worker process (imports torch and orbitscope, loads MNIST)
def test_rows_labels_and_matrices_do_not_depend_on_the_executor(stores) -> None:
    local, process = (ModelDatabase(stores[k]).models() for k in ("local", "process"))
    assert [m.model_id for m in local] == [m.model_id for m in process] == ["tiny-000", "tiny-001"]
    for a, b in zip(local, process):
        assert a.recipe == b.recipe and a.provenance == b.provenance and a.member == b.member
        assert timeless(a.metrics) == timeless(b.metrics) and a.metrics["trained_now"] is True
        assert [(lb.source, lb.label) for lb in a.labels] == [(lb.source, lb.label) for lb in b.labels]
        va, vb = a.load_matrices(), b.load_matrices()
        assert va.names == vb.names and va.attrs == vb.attrs
        for field in ("matrices", "signals", "correct", "levels", "samples"):
            assert np.array_equal(getattr(va, field), getattr(vb, field)), field
        wa, wb = load_model(a.weights), load_model(b.weights)  # the driver wrote the workers' weights
        assert model_hash(wa) == model_hash(wb)
    assert files(stores["local"]) == files(stores["process"])


def test_a_worker_writes_nothing_and_the_driver_saves_its_files(local_store, tmp_path) -> None:
    source = ModelDatabase(local_store).get("tiny-001")
    home = tmp_path / "store"
    cache = home / "models" / "zoo" / "tiny" / os.path.basename(source.weights)
    cache.parent.mkdir(parents=True)
    cache.write_bytes(Path(source.weights).read_bytes())  # the store already has the trained weights
    before = files(home)
    stamp = cache.stat().st_mtime_ns
    member = zoo.train_member(TINY, 1, home)
    assert files(home) == before  # read the cache, wrote nothing
    assert member.row["metrics"]["trained_now"] is False and member.weights == cache.read_bytes()
    assert member.row["weights"] == str(cache)
    row = zoo.save_member(member)
    assert cache.stat().st_mtime_ns == stamp  # a usable weights file is kept as it is
    saved = ModelDatabase.matrices_path_for(home, "tiny", "tiny-001")
    assert row["matrices"] == str(saved) and saved.is_file()
    np.testing.assert_array_equal(type(member.matrices).load(saved).matrices, source.load_matrices().matrices)

    cache.unlink()  # a missing weights file is written from the worker's bytes
    zoo.save_member(member)
    assert cache.read_bytes() == member.weights
    assert not [p for p in cache.parent.iterdir() if p.name.endswith(".tmp")]


@pytest.mark.slow  # the weights a worker process trained (the process_store fixture)
def test_build_member_still_saves_for_direct_callers(process_store, tmp_path) -> None:
    source = ModelDatabase(process_store).get("tiny-000")
    home = tmp_path / "direct"
    cache = home / "models" / "zoo" / "tiny" / os.path.basename(source.weights)
    cache.parent.mkdir(parents=True)
    cache.write_bytes(Path(source.weights).read_bytes())
    row = zoo.build_member(TINY, 0, home)
    assert os.path.isfile(row["matrices"]) and row["weights"] == str(cache)
    cached = frozenset({"trained_now"})  # loaded here, trained by the worker there
    assert timeless(row["metrics"], cached) == timeless(source.metrics, cached)


def test_cli_zoo_train_options(tmp_path) -> None:
    runner = CliRunner()
    base = ["zoo", "train", "--family", "mnist-small", "--n", "1", "--home", str(tmp_path)]
    res = runner.invoke(app, [*base, "--address", "auto"])
    assert res.exit_code == 2 and "--executor ray" in res.output
    res = runner.invoke(app, [*base, "--executor", "local", "--workers", "2"])
    assert res.exit_code == 2 and "--workers" in res.output
    res = runner.invoke(app, [*base, "--executor", "nope"])
    assert res.exit_code == 2 and "choose one of" in res.output
    res = runner.invoke(app, [*base, "--workers", "0"])
    assert res.exit_code == 2 and "--workers" in res.output
