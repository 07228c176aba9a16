"""The engine's seams: executors, in-engine consensus, dataset-level metrics, variable metadata,
compatibility with stores written before Task v2, and clear errors for bad inputs."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from sklearn.metrics import balanced_accuracy_score
from torch import nn

import orbitscope as osc
from helpers import TinyNet, assert_matches_stored, fixture_linear_model
from orbitscope.data import mnist_subset
from orbitscope.errors import DataError, SpecError

FIXTURE = Path(__file__).parent / "data" / "store_format2"


@pytest.fixture(scope="module")
def digits():
    return mnist_subset("test").stratified(5)


def _model() -> nn.Module:
    torch.manual_seed(0)
    return TinyNet().eval()


def _arrays(res: osc.OrbitResult) -> dict[str, np.ndarray]:
    return {str(k): res.data[k].values for k in res.data.data_vars}


@pytest.mark.slow  # two process pools: every spawned worker spends seconds importing torch
def test_process_executor_gives_the_same_results_as_local(digits, tmp_path):
    orbit = osc.Rotation([0, 30, 90])
    local = osc.evaluate(_model(), digits, orbit, batch_size=16)
    # the in-memory run on one worker (each one costs seconds of start-up), the stored run on the
    # default pool (two workers here: chunks may come back out of order); both at this process's
    # torch thread count (the default), so that the floats compare exactly
    pool = osc.evaluate(_model(), digits, orbit, batch_size=16, executor=osc.ProcessExecutor(workers=1))
    stored = osc.evaluate(_model(), digits, orbit, batch_size=16, store=tmp_path, executor="process")
    assert local.run_id == pool.run_id == stored.run_id  # the executor is not part of what a run is
    for other in (pool.result, stored.result):
        a, b = _arrays(local.result), _arrays(other)
        assert a.keys() == b.keys()
        for k in a:
            np.testing.assert_array_equal(a[k], b[k], err_msg=k)


def test_in_engine_consensus_equals_the_consensus_of_stored_probabilities(digits):
    orbit = osc.Rotation(range(0, 361, 45))  # 0° and 360° both: the duplicate counts once
    run = osc.evaluate(_model(), digits, orbit, osc.Classification(store_probabilities=True), consensus=True)
    post = osc.with_consensus(osc.OrbitResult(run.result.data.drop_vars(["consensus_agreement", "consensus_confidence"])))
    for name in ("consensus_agreement", "consensus_confidence"):
        np.testing.assert_array_equal(run.result.data[name].values, post.data[name].values, err_msg=name)
        assert run.result.meta(name).needs_labels is False
    assert 0 < run.result.consensus_agreement.values.mean() < 1  # not trivially all or nothing
    with pytest.raises(SpecError, match="consensus"):
        from dataclasses import dataclass, field

        @dataclass(frozen=True)
        class NoConsensus(osc.Classification):
            kind: str = field(default="classification", init=False)
            supports_consensus = False

        osc.evaluate(_model(), digits, orbit, NoConsensus(), consensus=True)


def test_class_mean_accuracy_matches_sklearn(digits):
    res = osc.evaluate(_model(), digits, osc.Rotation([0, 90, 180])).result
    dm = osc.dataset_metrics(res)
    labels = res.label.values
    for j in range(3):
        expect = balanced_accuracy_score(labels, res.prediction.values[:, j])
        assert dm.class_accuracy.values[j] == pytest.approx(expect, abs=1e-12)
    assert dm.class_accuracy.attrs["kind"] == "probability"
    sub = osc.dataset_metrics(res, subset=labels < 5)
    assert sub.attrs["n"] == int((labels < 5).sum())


def test_results_carry_variable_metadata_through_the_store(digits, tmp_path):
    res = osc.evaluate(_model(), digits, osc.Rotation([0, 90]), store=tmp_path).result
    assert res.correct.attrs["kind"] == "binary" and res.entropy.attrs["unit"] == "nats"
    assert res.meta("entropy").lower_is_better and not res.meta("confidence").lower_is_better
    assert res.meta("confidence").needs_labels and not res.meta("top1_confidence").needs_labels
    assert res.meta("consensus_agreement").kind == "binary"  # declared by the task, computed on demand
    assert osc.aggregate(res, "correct").attrs["method"].startswith("Wilson")
    assert osc.aggregate(res, "entropy").attrs["method"].startswith("Student")
    with pytest.raises(ValueError, match="state"):
        osc.aggregate(res, "prediction")  # a class index has no meaningful mean


def test_a_store_written_before_task_v2_reads_and_is_reused(tmp_path, digits):
    """tests/data/store_format2 was written by the code before this reshaping (commit e7f1787):
    the same evaluation today finds those runs by id and returns their arrays unchanged. The stored
    floats were computed on another machine: a fresh evaluation here matches them within float32
    tolerance (helpers.assert_matches_stored), integers exactly."""
    home = tmp_path / "store"
    shutil.copytree(FIXTURE, home)
    model = fixture_linear_model()
    data = mnist_subset("test").stratified(2)
    old = osc.Store(home)
    runs = {r.name: r for r in old.runs()}
    again = osc.evaluate(model, data, osc.Rotation([0, 45, 90, 180]), osc.Classification(store_probabilities=True),
                         store=home, name="fixture-rotation", batch_size=8)
    assert again.reused and again.run_id == runs["fixture-rotation"].run_id == "187669ed8d01fce5"
    fresh = osc.evaluate(model, data, osc.Rotation([0, 45, 90, 180]), osc.Classification(store_probabilities=True),
                         batch_size=8)
    assert fresh.run_id == again.run_id
    for k, v in _arrays(fresh.result).items():
        assert_matches_stored(again.result.data[k].values, v, err_msg=k)
    shift = osc.evaluate(model, data, osc.Translation([-2, 0, 2]), store=home, name="fixture-shift", batch_size=8)
    assert shift.reused and shift.run_id == "36a508442ec8ca68"
    # old layouts hold no metadata: it comes from the stored task spec
    assert again.result.correct.attrs["kind"] == "binary"


# ------------------------------------------------------------------------- bad inputs
class _Dicts(torch.utils.data.Dataset):
    def __len__(self):
        return 4

    def __getitem__(self, i):
        return {"image": torch.zeros(1, 28, 28), "label": 1}


class _ColumnLabels(torch.utils.data.Dataset):
    def __len__(self):
        return 4

    def __getitem__(self, i):
        return torch.zeros(1, 28, 28), torch.tensor([1])


class _Huge(torch.utils.data.Dataset):
    def __len__(self):
        return 10**9

    def __getitem__(self, i):
        return torch.zeros(1, 28, 28), 0


def test_bad_inputs_are_clear_errors(digits):
    model = _model()
    with pytest.raises(DataError, match=r"dict.*\(input, target\) pairs.*item\['image'\]"):
        osc.evaluate(model, _Dicts(), osc.Rotation([0]))
    with pytest.raises(DataError, match=r"shape \(B,\); got shape \(4, 1\).*reshape\(-1\)"):
        osc.evaluate(model, _ColumnLabels(), osc.Rotation([0]))
    for bad in (-1, 0, float("nan")):
        with pytest.raises(SpecError, match="memory_budget_mb"):
            osc.evaluate(model, digits, osc.Rotation([0]), memory_budget_mb=bad)
    with pytest.raises(SpecError, match=r"1,000,000,000 samples × 360 orbit elements .* allow_large"):
        osc.evaluate(model, _Huge(), osc.Rotation(range(0, 360, 1)))
    with pytest.raises(DataError, match=r"1,000,000,000 samples .* GiB"):  # confirmed, but it cannot fit
        osc.evaluate(model, _Huge(), osc.Rotation(range(0, 360, 1)), allow_large=True)
    with pytest.raises(ValueError, match="channel"):
        osc.evaluate(model, digits, osc.Rotation([0]), normalize=([0.1, 0.2], [0.3, 0.3]))
    with pytest.raises(SpecError, match="3-D"):
        osc.evaluate(model, digits, osc.Octahedral())


def test_items_as_a_list_of_pairs(digits):
    items = [digits[i] for i in range(6)]
    a = osc.evaluate(_model(), items, osc.Rotation([0, 90])).result
    b = osc.evaluate(_model(), digits.subset(range(6)), osc.Rotation([0, 90])).result
    np.testing.assert_array_equal(a.confidence.values, b.confidence.values)


def test_torchvision_style_outputs_are_read_by_a_detection_task():
    from orbitscope.kinds import read_detections

    raw = [{"boxes": torch.tensor([[0.0, 0, 4, 4], [1, 1, 3, 3]]), "scores": torch.tensor([0.2, 0.9]),
            "labels": torch.tensor([1, 2])}, {"boxes": torch.zeros(0, 4), "scores": torch.zeros(0),
                                              "labels": torch.zeros(0, dtype=torch.long)}]
    det = read_detections(raw)
    assert det.xyxy.shape == (2, 2, 4) and det.valid.tolist() == [[True, True], [False, False]]
    assert det.scores[0].tolist() == pytest.approx([0.9, 0.2])  # sorted by confidence
    assert det.labels[0].tolist() == [2, 1] and det.xyxy[0, 0].tolist() == [1, 1, 3, 3]
