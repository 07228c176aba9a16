"""certify() on executors (orbitscope.robust.sharded): shards of inputs give the local result exactly.

The model is a small registered CNN with its biases zeroed, so that its predictions change under
Gaussian noise: the runs have robust, not-robust, undecided and (label mode) skipped inputs.
"""

from __future__ import annotations

import csv
import math

import numpy as np
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader
from typer.testing import CliRunner

from orbitscope.cli import app
from orbitscope.data.specs import parse_data_spec
from orbitscope.engine.executors import Executor, LocalExecutor, ProcessExecutor
from orbitscope.engine.shipping import DataRef, ModelRef
from orbitscope.errors import DataError, JobError, ModelError
from orbitscope.models.loading import save_model
from orbitscope.models.reference import model_hash
from orbitscope.models.registry import build_model
from orbitscope.robust import sharded
from orbitscope.robust.certify import PER_INPUT_FIELDS, CertificationResult, certify, certify_slice, \
    merge_certifications
from orbitscope.robust.sharded import ShardedCertify, run_shards, sampler_spec
from orbitscope.robust.samplers import parse_perturbation

N, SHARD = 37, 10  # shards 0–9, 10–19, 20–29, 30–36
SAMPLER = "gaussian:0.3"
OPTIONS = dict(test="sprt", kappa=0.1, alpha=0.05, budget=64, batch_size=64, seed=3)
ARCH = {"arch": "small_cnn", "in_channels": 1, "num_classes": 10, "widths": [8, 16, 32], "hidden": 64}


def small_cnn() -> nn.Module:
    torch.manual_seed(0)
    model = build_model(ARCH)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.zero_()
    return model.eval()


@pytest.fixture(scope="module")
def model() -> nn.Module:
    return small_cnn()


@pytest.fixture(scope="module")
def arrays(model: nn.Module) -> tuple[torch.Tensor, torch.Tensor]:
    """37 digits of every class; every third keeps its label (mostly misclassified: skipped), the
    others are labelled with the model's prediction (tested)."""
    ds = parse_data_spec("mnist-subset:test").stratified(4)
    x = torch.stack([ds[i][0] for i in range(N)])
    y = torch.tensor([int(ds[i][1]) for i in range(N)])
    with torch.no_grad():
        pred = model(x).argmax(1)
    return x, torch.where(torch.arange(N) % 3 == 0, y, pred)


def assert_same(a: CertificationResult, b: CertificationResult) -> None:
    for name in PER_INPUT_FIELDS:
        assert np.array_equal(getattr(a, name), getattr(b, name)), name
        assert getattr(a, name).dtype == getattr(b, name).dtype, name
    assert a.queries == b.queries
    for name in ("tower_m", "budget", "kappa", "alpha", "label_free", "seed", "test", "sampler", "perturbation"):
        assert getattr(a, name) == getattr(b, name), name
    assert a.dataset.keys() == b.dataset.keys()
    for key, value in a.dataset.items():
        other = b.dataset[key]
        assert value == other or (isinstance(value, float) and math.isnan(value) and math.isnan(other)), key
    if a.counterexamples is None:
        assert b.counterexamples is None
    else:
        assert torch.equal(a.counterexamples, b.counterexamples)


@pytest.mark.parametrize("label_free", [False, True], ids=["labels", "label-free"])
@pytest.mark.parametrize("kind", ["local", pytest.param("process", marks=pytest.mark.slow)])  # spawns 2 workers
def test_sharded_equals_local(model, arrays, kind: str, label_free: bool) -> None:
    opts = dict(OPTIONS, label_free=label_free, return_counterexamples=kind == "local")
    local = certify(model, arrays, SAMPLER, **opts)
    outcomes = set(local.outcome.tolist())
    assert outcomes == {-1, 0, 1}, outcomes  # every verdict occurs, so the comparison means something
    assert bool(local.skipped.any()) != label_free
    runner = LocalExecutor() if kind == "local" else ProcessExecutor(2)
    calls: list[tuple[int, int | None]] = []
    split = certify(model, arrays, SAMPLER, executor=runner, shard_size=SHARD, progress=lambda d, n: calls.append((d, n)),
                    **opts)
    assert_same(local, split)
    assert split.seconds > 0 and model.training is False
    done = [d for d, _ in calls]  # one call per shard, as shards return (in order here: 10, 20, 30, 37)
    assert len(calls) == 4 and done == sorted(done) and calls[-1] == (N, N)
    if kind == "local":
        assert done == [10, 20, 30, N]


def test_dataset_from_a_spec_and_one_shard_per_input(model) -> None:
    data = parse_data_spec("mnist-subset:test@12")
    opts = dict(OPTIONS, label_free=True)
    local = certify(model, data, SAMPLER, **opts)
    assert_same(local, certify(model, data, SAMPLER, executor=LocalExecutor(), shard_size=1, **opts))
    assert_same(local, certify(model, data, SAMPLER, executor=LocalExecutor(), shard_size=100, **opts))


def test_the_string_local_keeps_the_unsharded_path(model, arrays, monkeypatch) -> None:
    def refuse(*args, **kwargs):
        raise AssertionError("executor='local' must not shard")

    monkeypatch.setattr(sharded, "run_shards", refuse)
    local = certify(model, arrays, SAMPLER, **OPTIONS)
    assert_same(local, certify(model, arrays, SAMPLER, executor="local", **OPTIONS))


def context(model: nn.Module, data, label_free: bool) -> ShardedCertify:
    """The context certify builds for its shards."""
    options = dict(OPTIONS, label_free=label_free, max_active=None, return_counterexamples=False)
    return ShardedCertify(model=model, data=data, sampler=sampler_spec(parse_perturbation(SAMPLER)), normalize=None,
                          device="cpu", options=options, run=certify_slice)


def test_shipped_context_lands_as_the_same_model_and_data(model, arrays) -> None:
    spec_data = parse_data_spec("mnist-subset:test@37")
    for data, label_free in ((arrays, False), (spec_data, True)):
        ctx = context(model, data, label_free)
        shipped = ctx.shipped()
        assert isinstance(shipped.model, ModelRef) and shipped.model.how == "config"
        if data is arrays:
            assert shipped.data is arrays  # tensors travel as they are
        else:
            assert isinstance(shipped.data, DataRef) and shipped.data.how == "spec"
        landed = shipped.landed(None)
        assert landed.model is not model and model_hash(landed.model) == model_hash(model)
        assert not landed.model.training and landed.device == "cpu"
        local = certify(model, data, SAMPLER, label_free=label_free, **OPTIONS)
        assert_same(local, merge_certifications(run_shards(landed, LocalExecutor(), shard_size=SHARD)))


def test_a_model_that_cannot_be_rebuilt_is_refused_when_shipped(arrays) -> None:
    class Local(nn.Module):  # defined in a function: workers could not build it
        def forward(self, x):
            return x.flatten(1)[:, :10]

    with pytest.raises(ModelError, match="cannot be shipped"):
        context(Local(), arrays, False).shipped()


def test_a_failing_shard_is_named(model, arrays) -> None:
    x, y = arrays
    bad = x.clone()
    bad[25] += 2.0  # outside [0, 1]: inputs 20–29 cannot be certified
    with pytest.raises(DataError) as local_error:
        certify(model, (bad, y), SAMPLER, **OPTIONS)
    with pytest.raises(DataError, match="inputs 20–29 \\(of 37\\)") as shard_error:
        certify(model, (bad, y), SAMPLER, executor=LocalExecutor(), shard_size=SHARD, **OPTIONS)
    assert str(local_error.value) in str(shard_error.value)
    assert any("traceback" in note for note in shard_error.value.__notes__)


class DyingWorkers(Executor):
    """Runs jobs here, but the second one "loses its worker", as a distributed executor reports it."""

    name = "dying"

    def map(self, fn, jobs, context=None):
        for k, job in enumerate(jobs):
            if k == 1:
                raise JobError("the worker died", job, None, "a test worker")
            yield job, fn(job, context)


def test_a_shard_the_executor_could_not_run_is_named(model, arrays) -> None:
    with pytest.raises(JobError, match="inputs 10–19 \\(of 37\\) failed on a test worker: the worker died") as info:
        certify(model, arrays, SAMPLER, executor=DyingWorkers(), shard_size=SHARD, **OPTIONS)
    assert info.value.job == (10, 20)


def test_argument_errors(model, arrays) -> None:
    x, y = arrays
    with pytest.raises(DataError, match="DataLoader"):
        certify(model, DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=8), SAMPLER,
                executor=LocalExecutor(), **OPTIONS)
    with pytest.raises(ValueError, match="shard_size"):
        certify(model, arrays, SAMPLER, executor=LocalExecutor(), shard_size=0, **OPTIONS)
    with pytest.raises(DataError, match="empty"):
        certify(model, (x[:0], y[:0]), SAMPLER, executor=LocalExecutor(), **OPTIONS)
    with pytest.raises(ValueError, match="batch_size must be >= 1"):  # the shard's own check, shard named
        certify(model, arrays, SAMPLER, executor=LocalExecutor(), **dict(OPTIONS, batch_size=0))
    with pytest.raises(ValueError, match="merge"):
        merge_certifications([])


# ----------------------------------------------------------------------------------- CLI


@pytest.mark.slow  # a process pool of its own: seconds of importing torch in each worker
def test_cli_certify_on_processes_writes_the_same_csv(model, tmp_path) -> None:
    path = tmp_path / "small.safetensors"
    save_model(model, path)
    runner = CliRunner()
    base = ["robust", "certify", "--model", str(path), "--data", "mnist-subset:test", "--n", "20", "--label-free",
            "-p", SAMPLER, "--test", "sprt", "--kappa", "0.1", "--alpha", "0.05", "--budget", "32"]
    tables = []
    for extra, name in (([], "local.csv"), (["--executor", "process", "--workers", "2", "--shard-size", "7"], "shards.csv")):
        res = runner.invoke(app, [*base, "--csv", str(tmp_path / name), *extra])
        assert res.exit_code == 0, res.output
        with (tmp_path / name).open() as fh:
            tables.append(list(csv.DictReader(fh)))
    assert len(tables[0]) == 20 and tables[0] == tables[1]
    assert len({row["outcome"] for row in tables[0]}) > 1

    res = runner.invoke(app, [*base, "--address", "auto"])
    assert res.exit_code == 2 and "--executor ray" in res.output
    res = runner.invoke(app, [*base, "--executor", "local", "--workers", "2"])
    assert res.exit_code == 2 and "--workers" in res.output
    res = runner.invoke(app, [*base, "--executor", "process", "--shard-size", "0"])
    assert res.exit_code == 2 and "--shard-size" in res.output
