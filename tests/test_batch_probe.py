"""The forward-batch probe: it keeps the fastest size by its own clock, the chosen size is recorded,
results and run identity do not depend on the size, and a resumed run keeps its size."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import orbitscope as osc

from helpers import interrupt_after
from orbitscope.engine import batch_probe
from orbitscope.engine.batch_probe import probe_candidates, probe_forward_batch, worth_probing
from orbitscope.engine.model_call import ModelCall


class _CostModel(torch.nn.Module):
    """Its forward records the size of every call (to fake a clock from)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 3)
        self.calls: list[int] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls.append(len(x))
        return self.lin(x)


def test_the_probe_keeps_the_size_whose_calls_its_clock_finds_fastest() -> None:
    """A fake clock charges each call 1 + |size − 64| / 16 time units per row: 64 must win, and
    every size processes all rows."""
    model = _CostModel()
    call = ModelCall(model, forward_batch=512)
    state = {"t": 0.0}

    def clock() -> float:
        # time moves by the cost of the calls made since the last reading
        state["t"] += sum((1 + abs(n - 64) / 16) * n for n in model.calls)
        model.calls.clear()
        return state["t"]

    rows = torch.randn(256, 4)
    best, rates = probe_forward_batch(call, rows, [16, 32, 64, 128, 256], clock=clock)
    assert best == 64 and set(rates) == {16, 32, 64, 128, 256}
    want = {n: 256 / ((1 + abs(n - 64) / 16) * 256) for n in rates}  # rows / time, all rows per size
    for n in rates:
        assert rates[n] == pytest.approx(want[n])


def test_candidates_respect_the_memory_cap_and_short_runs_are_not_probed() -> None:
    assert probe_candidates(torch.device("cpu"), 100) == [16, 32, 64]
    assert probe_candidates(torch.device("cpu"), 8) == [8]
    assert not worth_probing(10_000, [16, 32, 64, 128, 256])
    assert worth_probing(batch_probe.PROBE_MIN_ROWS, [16, 32, 64, 128, 256])
    assert not worth_probing(10**9, [64])


def test_results_and_identity_do_not_depend_on_the_batch_and_the_probe_is_recorded(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same evaluation with the probe (forced on a short run) and with fixed batches 16 and
    256: the same run id, predictions equal, values within 1e-5 relative; the attrs say which
    batch ran and what the probe measured."""
    monkeypatch.setattr(batch_probe, "PROBE_MIN_ROWS", 0)
    monkeypatch.setattr("orbitscope.engine.evaluation.worth_probing", lambda n, c: len(c) > 1)
    data = osc.mnist_subset("test").stratified(8)
    torch.manual_seed(0)
    model = osc.ReferenceCNN().eval()
    orbit = osc.Rotation(range(0, 360, 10))
    probed = osc.evaluate(model, data, orbit, osc.Classification())
    assert probed.result.attrs["forward_batch"] in (16, 32, 64, 128)
    rates = probed.result.attrs["forward_batch_probe"]
    rates = rates if isinstance(rates, dict) else json.loads(rates)
    assert set(rates) <= {"16", "32", "64", "128"} and len(rates) >= 2
    assert int(max(rates, key=rates.get)) == probed.result.attrs["forward_batch"]
    for fb in (16, 256):
        fixed = osc.evaluate(model, data, orbit, osc.Classification(), forward_batch=fb)
        assert fixed.run_id == probed.run_id and fixed.result.attrs["forward_batch"] == fb
        np.testing.assert_array_equal(fixed.result.data["prediction"].values, probed.result.data["prediction"].values)
        np.testing.assert_allclose(fixed.result.data["confidence"].values, probed.result.data["confidence"].values,
                                   rtol=1e-5, atol=1e-7)


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
