"""Read-ahead and write-behind of in-process evaluation: order, errors, nothing lost on interrupt."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
import torch
from torch import nn

import orbitscope as osc
from orbitscope.engine.pipeline import BackgroundWriter, prefetched, read_ahead
from orbitscope.results.store import Store

from helpers import interrupt_after


def test_prefetched_reads_ahead_in_order_and_raises_where_it_failed() -> None:
    loaded: list[int] = []

    def load(j: int) -> int:
        loaded.append(j)
        if j == 5:
            raise ValueError("chunk 5 is damaged")
        return j * 10

    it = prefetched(range(8), load, depth=2)
    assert next(it) == 0
    deadline = time.monotonic() + 5
    while len(loaded) < 3 and time.monotonic() < deadline:  # the reader runs ahead of the consumer
        time.sleep(0.01)
    assert loaded[:3] == [0, 1, 2] and len(loaded) <= 4  # at most depth (+ one in hand) ahead
    assert [next(it) for _ in range(4)] == [10, 20, 30, 40]
    with pytest.raises(ValueError, match="chunk 5"):
        next(it)
    assert list(prefetched(range(3), lambda j: j + 1, depth=0)) == [1, 2, 3]


def test_closing_a_prefetch_stops_its_thread() -> None:
    it = prefetched(iter(range(1000)), lambda j: j, depth=2)
    assert next(it) == 0
    it.close()
    assert not [t for t in threading.enumerate() if t.name == "orbitscope-prefetch" and t.is_alive()]


def test_background_writer_keeps_order_and_writes_everything_on_interrupt() -> None:
    written: list[int] = []

    def slow_write(i: int) -> None:
        time.sleep(0.02)
        written.append(i)

    with pytest.raises(KeyboardInterrupt):
        with BackgroundWriter(slow_write, depth=1) as w:
            for i in range(4):
                w.submit(i)
            raise KeyboardInterrupt
    assert written == [0, 1, 2, 3]  # every submitted chunk was written before the error went on

    def failing(i: int) -> None:
        if i == 1:
            raise OSError("disk full")
        written.append(i)

    written.clear()
    with pytest.raises(OSError, match="disk full"):
        with BackgroundWriter(failing, depth=1) as w:
            for i in range(5):
                w.submit(i)
                time.sleep(0.01)
    assert written == [0]  # nothing is written after a failed write


class _Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.body = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(),
                                  nn.Linear(4 * 8 * 8, 5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


def test_an_interrupted_evaluation_keeps_its_computed_chunks_and_resumes_identically(tmp_path) -> None:
    g = torch.Generator().manual_seed(1)
    data = (torch.rand(60, 1, 8, 8, generator=g), torch.randint(0, 5, (60,), generator=g))
    net = _Net().eval()
    orbit = osc.Rotation([0, 45, 90])
    with pytest.raises(KeyboardInterrupt):
        osc.evaluate(net, data, orbit, store=tmp_path / "a", batch_size=10, progress=interrupt_after(2))
    store = Store(tmp_path / "a", create=False)
    (rec,) = store.runs()
    assert len(store.done_chunks(rec.run_id)) == 2  # both computed chunks are in the store
    resumed = osc.evaluate(net, data, orbit, store=tmp_path / "a", batch_size=10)
    clean = osc.evaluate(net, data, orbit, store=tmp_path / "b", batch_size=10)
    assert resumed.run_id == clean.run_id
    for v in ("correct", "confidence"):
        np.testing.assert_array_equal(resumed.result[v].values, clean.result[v].values)


def test_read_ahead_uses_a_thread_for_plain_data_and_not_for_data_that_draws_random_numbers() -> None:
    seen_threads: list[str] = []

    def load(j: int) -> int:
        seen_threads.append(threading.current_thread().name)
        return j

    assert list(read_ahead(range(5), load)) == [0, 1, 2, 3, 4]
    assert seen_threads[0] == "MainThread" and set(seen_threads[1:]) == {"orbitscope-prefetch"}

    seen_threads.clear()

    def random_load(j: int) -> int:
        seen_threads.append(threading.current_thread().name)
        return j + int(torch.rand(()) * 0)  # draws from torch's global generator

    assert list(read_ahead(range(5), random_load)) == [0, 1, 2, 3, 4]
    assert set(seen_threads) == {"MainThread"}


class _Augmenting(torch.utils.data.Dataset):
    """Random noise added when an item is read (as a random augmentation would)."""

    def __init__(self) -> None:
        g = torch.Generator().manual_seed(3)
        self.images, self.labels = torch.rand(40, 1, 8, 8, generator=g) * 0.5, torch.randint(0, 5, (40,), generator=g)

    def __len__(self) -> int:
        return 40

    def __getitem__(self, i: int):  # noqa: ANN204
        return self.images[i] + 0.1 * torch.rand(1, 8, 8), int(self.labels[i])


class _Noisy(_Net):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x) + torch.randn(len(x), 5)  # seeded per chunk by the engine


def test_data_that_draws_random_numbers_gives_the_same_results_every_time() -> None:
    runs = []
    for _ in range(3):
        torch.manual_seed(11)  # the global state the dataset draws from
        run = osc.evaluate(_Noisy().eval(), _Augmenting(), osc.Rotation([0, 90]), batch_size=8, optimize=False)
        runs.append(run.result["confidence"].values)
    np.testing.assert_array_equal(runs[0], runs[1])
    np.testing.assert_array_equal(runs[0], runs[2])


class _MainThreadOnly(torch.utils.data.Dataset):
    """Data that can only be read by the thread that opened it (like a sqlite connection)."""

    def __init__(self) -> None:
        g = torch.Generator().manual_seed(5)
        self.images, self.labels = torch.rand(40, 1, 8, 8, generator=g), torch.randint(0, 5, (40,), generator=g)
        self.owner = threading.get_ident()

    def __len__(self) -> int:
        return 40

    def __getitem__(self, i: int):  # noqa: ANN204
        if threading.get_ident() != self.owner:
            raise RuntimeError("objects created in a thread can only be used in that same thread")
        return self.images[i], int(self.labels[i])


def test_data_bound_to_its_thread_is_read_in_order_instead(caplog) -> None:
    data = _MainThreadOnly()
    with caplog.at_level("WARNING", logger="orbitscope.engine.pipeline"):
        run = osc.evaluate(_Net().eval(), data, osc.Rotation([0, 90]), batch_size=8)
    assert any("without read-ahead" in r.message for r in caplog.records)
    plain = osc.evaluate(_Net().eval(), (data.images, data.labels), osc.Rotation([0, 90]), batch_size=8)
    np.testing.assert_array_equal(run.result["confidence"].values, plain.result["confidence"].values)

    def broken(j: int) -> int:
        raise OSError(f"chunk {j} is unreadable")

    with pytest.raises(OSError, match="chunk 0"):  # a real read error still raises
        list(read_ahead(range(3), broken))
    calls: list[int] = []

    def fails_late(j: int) -> int:
        calls.append(j)
        if j == 2:
            raise OSError("chunk 2 is unreadable")
        return j

    with pytest.raises(OSError, match="chunk 2"):
        list(read_ahead(range(5), fails_late))
