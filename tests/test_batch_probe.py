"""The forward-batch tuner: it follows a clock-independent plan over the run's first calls, keeps
the fastest size by its own clock, the chosen size is recorded, results and run identity do not
depend on the size, a resumed run keeps its size; and the first-batch check's share of a run."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import orbitscope as osc

from helpers import interrupt_after
from orbitscope.engine import batch_probe


class _CostModel(torch.nn.Module):
    """Its forward records the size of every call (to fake a clock from)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 3)
        self.calls: list[int] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls.append(len(x))
        return self.lin(x)


def _fake_clock(model: _CostModel, best: int = 64) -> "tuple[object, dict[str, float]]":
    """A clock that charges each call 1 + |size − best| / 16 time units per row."""
    state = {"t": 0.0}

    def clock() -> float:
        # time moves by the cost of the calls made since the last reading
        state["t"] += sum((1 + abs(n - best) / 16) * n for n in model.calls)
        model.calls.clear()
        return state["t"]

    return clock, state


def test_the_tuner_follows_its_plan_keeps_the_fastest_size_and_the_outputs_are_the_runs() -> None:
    """The sizes the model sees are the plan (a warm-up call per size, then two timed rounds of at
    least MEASURE_ROWS rows per size), whatever the clock says; then the size the fake clock finds
    fastest (64) is kept, with the rates it implies; the outputs equal one plain call's."""
    model = _CostModel()
    sizes = [16, 32, 64, 128, 256]
    tuner = batch_probe.BatchTuner(sizes, clock=_fake_clock(model)[0])
    seen: list[int] = []

    def forward(x: torch.Tensor) -> torch.Tensor:
        seen.append(len(x))
        return model(x)

    x = torch.randn(3000, 4)
    parts = tuner.run(forward, x)
    plan = sizes + 2 * [n for s in sizes for n in [s] * max(1, batch_probe.MEASURE_ROWS // s)]
    assert seen[:len(plan)] == plan and tuner.chosen == 64
    assert seen[len(plan):] == [64] * ((3000 - sum(plan)) // 64) + ([(3000 - sum(plan)) % 64] if (3000 - sum(plan)) % 64 else [])
    want = {s: 1 / (1 + abs(s - 64) / 16) for s in sizes}  # rows per time unit
    assert tuner.rates == pytest.approx(want)
    assert batch_probe.plan_rows(sizes) == sum(plan)
    with torch.inference_mode():
        torch.testing.assert_close(torch.cat(parts), model.lin(x), rtol=0, atol=0)


def test_a_call_smaller_than_a_size_drops_it_and_a_tuner_settles_across_calls() -> None:
    """Calls of 200 rows cannot time 256: it is dropped; the plan goes on over several calls."""
    model = _CostModel()
    tuner = batch_probe.BatchTuner([16, 32, 64, 128, 256], clock=_fake_clock(model, best=128)[0])
    calls = 0
    while tuner.chosen is None:
        tuner.run(model, torch.randn(200, 4))
        calls += 1
        assert calls < 50
    assert tuner.chosen == 128 and 256 not in tuner.rates and calls > 1
    assert tuner.describe() == {str(k): round(v, 1) for k, v in sorted(tuner.rates.items())}


def test_candidates_respect_the_memory_cap_and_short_runs_are_not_tuned() -> None:
    assert batch_probe.tuning_candidates("cpu", 100) == [16, 32, 64]
    assert batch_probe.tuning_candidates("cpu", 8) == [8]
    assert batch_probe.tuning_candidates("cuda", 10_000) == [256, 512, 1024, 2048, 4096]
    sizes = [16, 32, 64, 128, 256]
    assert not batch_probe.worth_tuning(batch_probe.TUNE_MIN_ROWS - 1, sizes)
    assert batch_probe.worth_tuning(max(batch_probe.TUNE_MIN_ROWS, 2 * batch_probe.plan_rows(sizes)), sizes)
    assert not batch_probe.worth_tuning(10**9, [64])


def test_the_first_batch_check_takes_a_sixty_fourth_of_a_short_run() -> None:
    from orbitscope.engine.optimization import CHECK_MIN_ROWS, CHECK_ROWS, check_rows

    assert check_rows(128, None) == 128 and check_rows(512, None) == CHECK_ROWS
    assert check_rows(128, 512) == CHECK_MIN_ROWS and check_rows(128, 64 * 100) == 100
    assert check_rows(128, 10**6) == 128 and check_rows(8, 10**6) == 8
    data = osc.mnist_subset("test").stratified(1)  # 10 digits x 36 angles = 360 rows: 16 checked -> 1 element
    torch.manual_seed(0)
    run = osc.evaluate(osc.ReferenceCNN().eval(), data, osc.Rotation(range(0, 360, 10)), osc.Classification())
    check = run.result.attrs["optimization"]
    check = (check if isinstance(check, dict) else json.loads(check))["check"]
    assert check["rows"] == 10 and check["passed"]
    # a chunk of more samples than the check takes: its first 128 samples under the first element
    data = osc.mnist_subset("test").stratified(30)  # 300 digits x 36 angles: 10,800 rows, 168 checked -> 128
    run = osc.evaluate(osc.ReferenceCNN().eval(), data, osc.Rotation(range(0, 360, 10)), osc.Classification())
    check = run.result.attrs["optimization"]
    check = (check if isinstance(check, dict) else json.loads(check))["check"]
    assert check["rows"] == 128 and check["passed"]


def test_results_and_identity_do_not_depend_on_the_batch_and_the_choice_is_recorded(tmp_path) -> None:
    """The same evaluation tuned (long enough to tune: 120 digits x 36 angles) and with fixed
    batches 16 and 256: the same run id, predictions equal, values within 1e-5 relative; the
    store's attrs say which batch ran and what the tuner measured."""
    data = osc.mnist_subset("test").stratified(12)
    torch.manual_seed(0)
    model = osc.ReferenceCNN().eval()
    orbit = osc.Rotation(range(0, 360, 10))
    assert batch_probe.worth_tuning(len(data) * 36, batch_probe.tuning_candidates("cpu", 256))
    tuned = osc.evaluate(model, data, orbit, osc.Classification(), store=tmp_path)
    attrs = osc.Store(tmp_path).get_run(tuned.run_id).attrs
    rates = attrs["forward_batch_probe"]
    assert set(rates) == {"16", "32", "64", "128"}
    assert int(max(rates, key=rates.get)) == attrs["forward_batch"] == tuned.result.attrs["forward_batch"]
    for fb in (16, 256):
        fixed = osc.evaluate(model, data, orbit, osc.Classification(), forward_batch=fb)
        assert fixed.run_id == tuned.run_id and fixed.result.attrs["forward_batch"] == fb
        assert "forward_batch_probe" not in fixed.result.attrs
        np.testing.assert_array_equal(fixed.result.data["prediction"].values, tuned.result.data["prediction"].values)
        np.testing.assert_allclose(fixed.result.data["confidence"].values, tuned.result.data["confidence"].values,
                                   rtol=1e-5, atol=1e-7)


def test_a_short_run_keeps_the_default_batch() -> None:
    data = osc.mnist_subset("test").stratified(1)
    torch.manual_seed(0)
    run = osc.evaluate(osc.ReferenceCNN().eval(), data, osc.Rotation(range(0, 360, 10)), osc.Classification())
    assert run.result.attrs["forward_batch"] == 128 and "forward_batch_probe" not in run.result.attrs


def test_a_resumed_run_keeps_the_batch_it_started_with(tmp_path) -> None:
    """Interrupted after two chunks with forward_batch=48, resumed without one: the run keeps 48."""
    data = osc.mnist_subset("test").stratified(4)
    torch.manual_seed(1)
    model = osc.ReferenceCNN().eval()
    orbit = osc.Rotation(range(0, 360, 30))
    with pytest.raises(KeyboardInterrupt):
        osc.evaluate(model, data, orbit, osc.Classification(), store=tmp_path, forward_batch=48, batch_size=10,
                     progress=interrupt_after(2))
    again = osc.evaluate(model, data, orbit, osc.Classification(), store=tmp_path, batch_size=10)
    assert again.result.attrs["forward_batch"] == 48


def test_a_plan_that_cannot_end_in_chunk_0_does_not_tune(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    """With CUDA's sizes (256 … 4096; emulated on the CPU) a chunk of 1,000 samples × 24 elements
    cannot hold the plan (its calls of 5,000 rows leave their remainders untimed): the run keeps
    the default and records no tuning, in the store as in memory."""
    from torch import nn

    monkeypatch.setattr(batch_probe, "CPU_CANDIDATES", batch_probe.CUDA_CANDIDATES)
    tuner = batch_probe.BatchTuner(batch_probe.CUDA_CANDIDATES)
    assert not tuner.settles_on([5000] * 4 + [4000]) and tuner.chosen is None  # the dry run leaves it as it was
    assert tuner.settles_on([5000] * 8)
    assert batch_probe.BatchTuner([16, 32, 64, 128]).settles_on([256] * 8)
    assert not batch_probe.BatchTuner([16, 32, 64, 128]).settles_on([200] * 3)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 2, 3, padding=1), nn.BatchNorm2d(2), nn.Flatten(), nn.Linear(128, 3)).eval()
    x, y = torch.rand(2000, 1, 8, 8), torch.randint(0, 3, (2000,))
    orbit = osc.Rotation(range(0, 360, 15))
    run = osc.evaluate(model, (x, y), orbit, store=tmp_path, batch_size=1000, memory_budget_mb=1e6)
    stored = osc.Store(tmp_path).get_run(run.run_id).attrs
    assert "forward_batch_probe" not in stored and stored["forward_batch"] == run.result.attrs["forward_batch"]


def test_the_tuner_waits_for_the_device_before_each_timed_slice() -> None:
    """Work queued before a slice (the copy, the warp) must not be charged to it: synchronize is
    called before the clock is read, for every slice."""
    events: list[str] = []
    tuner = batch_probe.BatchTuner([16, 32], clock=lambda: events.append("clock") or 0.0)
    tuner.run(lambda rows: events.append("forward"), range(64), synchronize=lambda: events.append("sync"))
    timed = [i for i, e in enumerate(events) if e == "forward"]
    assert all(events[i - 2:i] == ["sync", "clock"] for i in timed)
