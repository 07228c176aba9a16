"""The forward batch that suits this model, input size and device, chosen by timing the run's
own first model calls.

How many transformed inputs one model call should take depends on the model, the input size and
the machine: on a 2-core CPU, FlowCNN on 64² pairs ran 193 pairs/s in calls of 64 and 122 in calls
of 256 (its activations spill the caches), while a small MNIST CNN is fastest near 128–512. So
when ``evaluate`` chooses the batch (no ``forward_batch`` given), runs the optimised model in
this process, and the run has at least :data:`TUNE_MIN_ROWS` model inputs, a :class:`BatchTuner`
slices the run's first model calls by a fixed plan of candidate sizes: one warm-up call per size
(kernel selection, allocation), then :data:`ROUNDS` rounds that go over the sizes in turn, each
size timed over at least :data:`MEASURE_ROWS` inputs, and each size keeping its best round so a
burst of load on a shared machine does not decide. The outputs of those calls are the run's own,
so the probe costs only the time the slower sizes lose (no input is computed twice). After the
plan the fastest per input is kept for the rest of the run; the memory budget stays an upper
bound (larger candidates are not tried).

The chosen size and the measured rates go into the run's attrs (``forward_batch``,
``forward_batch_probe``). They are not part of the run's identity: a row's output does not depend
on the other rows of its call, so the values agree across batch sizes to float rounding (the
convolution kernels block the batch differently; tested at 1e-5 relative, predictions equal).
The plan's sizes do not depend on the clock, only the size kept afterwards does; a resumed run
uses the size recorded for it (its chunks agree with the first part's to float rounding, bit for
bit where a row's output does not depend on the size of its call, as measured on this project's
CPU for its CNNs and PointNet). Before tuning, a dry run of the plan over chunk 0's calls (no
model, no clock) makes sure the plan ends within chunk 0, so chunk 0's record carries the size.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Sequence

__all__ = ["CPU_CANDIDATES", "CUDA_CANDIDATES", "MEASURE_ROWS", "ROUNDS", "TUNE_MIN_ROWS", "BatchTuner",
           "tuning_candidates", "worth_tuning", "describe"]

#: forward batches tried on a CPU and on CUDA (on a 2-core CPU, 256 was never the fastest of the
#: five models of the throughput benchmarks and cost the plan most: FlowCNN ran half as fast there)
CPU_CANDIDATES = (16, 32, 64, 128)
CUDA_CANDIDATES = (256, 512, 1024, 2048, 4096)
#: each timed round of a size covers at least this many inputs (several calls of a small size)
MEASURE_ROWS = 128
#: timed rounds over the sizes (each size keeps its best)
ROUNDS = 2
#: a run tunes only when it has at least this many model inputs (samples × distinct elements): about
#: twice the CPU plan's inputs, so the plan ends in the first half of the run
TUNE_MIN_ROWS = 4096


def tuning_candidates(device_type: str, cap: int) -> list[int]:
    """The candidate sizes for a ``device_type`` (``"cpu"``, ``"cuda"``, …) up to ``cap`` (the
    memory budget's bound), or ``[cap]`` when even the smallest exceeds it."""
    pool = CUDA_CANDIDATES if device_type == "cuda" else CPU_CANDIDATES
    kept = [c for c in pool if c <= cap]
    return kept or [max(1, int(cap))]


def plan_rows(candidates: Sequence[int], rounds: int = ROUNDS, measure_rows: int = MEASURE_ROWS) -> int:
    """How many model inputs the tuning plan takes: one warm-up call per size, then ``rounds``
    timed passes of at least ``measure_rows`` inputs per size."""
    per_pass = sum(-(-measure_rows // c) * c for c in candidates)
    return sum(candidates) + rounds * per_pass


def worth_tuning(n_rows: int | None, candidates: Sequence[int]) -> bool:
    """Whether a run of ``n_rows`` model inputs tunes over ``candidates``: at least two sizes, and
    at least :data:`TUNE_MIN_ROWS` and twice the plan's inputs."""
    return (n_rows is not None and len(candidates) > 1
            and n_rows >= max(TUNE_MIN_ROWS, 2 * plan_rows(candidates)))


class BatchTuner:
    """Which size the next forward slice takes while tuning, and the size kept afterwards.

    Feed it through :meth:`size` (the size of the next slice) and :meth:`record` (what a slice of
    that size took). The plan: ``[warm-up of each size] + rounds × [each size over ≥ measure_rows
    inputs]``; :attr:`chosen` is set when the plan ends (ties go to the larger size).

    Args:
        candidates: the sizes to try (inputs per call).
        rounds: timed rounds over the sizes.
        measure_rows: inputs per size in one timed round (at least one call).
        clock: seconds, monotonic (tests pass a fake one).
    """

    def __init__(self, candidates: Sequence[int], *, rounds: int = ROUNDS, measure_rows: int = MEASURE_ROWS,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        sizes = sorted(set(int(c) for c in candidates if int(c) >= 1))
        if not sizes:
            raise ValueError("no candidate forward batch to tune over")
        self.clock = clock
        self.sizes, self.rounds = tuple(sizes), max(1, int(rounds))
        self.measure_rows = int(measure_rows)
        # (size, timed?) steps; a timed step lasts until measure_rows inputs went through it
        self.plan: list[tuple[int, bool]] = [(s, False) for s in sizes] + [(s, True) for _ in range(self.rounds)
                                                                            for s in sizes]
        self.step = 0
        self.step_rows = 0
        self.step_seconds = 0.0
        self.rates: dict[int, float] = {s: 0.0 for s in sizes}
        self.chosen: int | None = None if len(sizes) > 1 else sizes[0]

    def size(self) -> int:
        """The size of the next slice."""
        return self.chosen if self.chosen is not None else self.plan[self.step][0]

    def drop(self, size: int) -> None:
        """Remove ``size`` from the plan (a call had fewer inputs than it); settles when one size is left."""
        before = sum(p[0] != size for p in self.plan[:self.step])  # the steps already done stay done
        self.plan = [p for p in self.plan if p[0] != size]
        self.rates.pop(size, None)
        self.step, self.step_rows, self.step_seconds = before, 0, 0.0
        left = sorted(self.rates)
        if len(left) <= 1:
            self.chosen = left[0] if left else size
        elif self.step >= len(self.plan):
            self._settle()

    def record(self, size: int, rows: int, seconds: float) -> None:
        """A slice of ``rows`` inputs at ``size`` took ``seconds``; advance the plan."""
        if self.chosen is not None or size != self.plan[self.step][0]:
            return
        timed = self.plan[self.step][1]
        self.step_rows += rows
        self.step_seconds += seconds
        if timed and self.step_rows < self.measure_rows:
            return
        if timed:
            rate = self.step_rows / max(self.step_seconds, 1e-12)
            self.rates[size] = max(self.rates[size], rate)
        self.step, self.step_rows, self.step_seconds = self.step + 1, 0, 0.0
        if self.step >= len(self.plan):
            self._settle()

    def _settle(self) -> None:
        self.chosen = max(self.rates, key=lambda s: (self.rates[s], s))

    def run(self, forward: Callable[[Any], Any], x: Any, synchronize: Callable[[], None] | None = None) -> list[Any]:
        """``forward`` over all rows of ``x`` in slices of the sizes the plan asks for, timing each
        (``synchronize`` waits for the device before the clock is read); the outputs in order."""
        parts: list[Any] = []
        start, n = 0, len(x)
        while start < n:
            size = self.size()
            if self.chosen is None and n - start < size:
                if start == 0:  # this call has fewer inputs than the size: it cannot be timed here
                    self.drop(size)
                    continue
                parts.append(forward(x[start:]))  # the call's remainder: not timed
                break
            if synchronize is not None:  # work queued before (the copy, the warp) is not this slice's
                synchronize()
            t0 = self.clock()
            parts.append(forward(x[start:start + size]))
            if synchronize is not None:
                synchronize()
            self.record(size, min(size, n - start), self.clock() - t0)
            start += size
        return parts

    def settles_on(self, call_rows: Sequence[int]) -> bool:
        """Whether the plan would end within model calls of ``call_rows`` inputs each (a dry run:
        no model, no clock; this tuner is left as it was)."""
        dry = BatchTuner(self.sizes, rounds=self.rounds, measure_rows=self.measure_rows, clock=lambda: 0.0)
        for n in call_rows:
            if dry.chosen is not None:
                break
            dry.run(lambda rows: None, range(int(n)))
        return dry.chosen is not None

    def describe(self) -> dict[str, Any]:
        """The measured rates as JSON-able run attrs (``{"16": inputs/s, ...}``)."""
        return describe(self.rates)


def describe(rates: dict[int, float]) -> dict[str, Any]:
    """Rates by size as JSON-able run attrs (``{"16": inputs/s, ...}``)."""
    return {str(k): round(float(v), 1) for k, v in sorted(rates.items())}
