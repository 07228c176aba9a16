"""The forward batch that suits this model, input size and device: a short timed probe.

How many transformed inputs one model call should take depends on the model, the input size and
the machine: on a 2-core CPU, FlowCNN on 64² pairs ran 193 pairs/s in calls of 64 and 122 in calls
of 256 (its activations spill the caches), while a small MNIST CNN is fastest near 128–512. So
when ``evaluate`` chooses the batch (no ``forward_batch`` given) and the run is long enough for a
probe to pay off (:data:`PROBE_MIN_ROWS` model inputs), it times the model on the first rows of
chunk 0 at a few candidate sizes (each size over the same rows, in rounds that alternate the
sizes, the best round kept) and keeps the fastest per input. The memory budget stays an upper bound: larger candidates are not tried.

The chosen size and the measured rates go into the run's attrs (``forward_batch``,
``forward_batch_probe``). They are not part of the run's identity: a row's output does not depend
on the other rows of its call, so the values agree across batch sizes to float rounding (the
convolution kernels block the batch differently; tested at 1e-5 relative), and a resumed run
reuses the size it was started with, so its chunks stay bit-identical.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Sequence

import torch

from .model_call import ModelCall

__all__ = ["CPU_CANDIDATES", "CUDA_CANDIDATES", "PROBE_MIN_ROWS", "probe_candidates", "probe_forward_batch",
           "worth_probing", "describe"]

#: forward batches tried on a CPU and on CUDA
CPU_CANDIDATES = (16, 32, 64, 128, 256)
CUDA_CANDIDATES = (256, 512, 1024, 2048, 4096)
#: a run probes only when it has at least this many model inputs (samples × distinct elements):
#: the probe (a warm-up call per size, then twice every size over the largest size's rows) then
#: costs at most about 5 % of the run
PROBE_MIN_ROWS = 20 * (sum(CPU_CANDIDATES) + 2 * len(CPU_CANDIDATES) * max(CPU_CANDIDATES))


def probe_candidates(device: torch.device, cap: int) -> list[int]:
    """The candidate sizes for ``device`` up to ``cap`` (the memory budget's bound), or ``[cap]``
    when even the smallest exceeds it."""
    pool = CUDA_CANDIDATES if device.type == "cuda" else CPU_CANDIDATES
    kept = [c for c in pool if c <= cap]
    return kept or [max(1, int(cap))]


def worth_probing(n_rows: int | None, candidates: Sequence[int]) -> bool:
    """Whether a run of ``n_rows`` model inputs is long enough to probe ``candidates`` (the
    probe's rows at most 5 % of the run's)."""
    cost = sum(candidates) + 2 * len(candidates) * max(candidates, default=0)
    return n_rows is not None and len(candidates) > 1 and n_rows >= max(PROBE_MIN_ROWS, 20 * cost)


def probe_forward_batch(call: ModelCall, rows: torch.Tensor, candidates: Sequence[int], *, repeats: int = 2,
                        clock: Callable[[], float] = time.perf_counter) -> tuple[int, dict[int, float]]:
    """Time ``call``'s model on ``rows`` (already transformed, not yet normalised) at each
    candidate size and return ``(fastest size, {size: inputs per second})``.

    Every size processes the same rows (all of ``rows``, in calls of that size), after one
    warm-up call of that size (kernel selection, allocation); ``repeats`` rounds go over the
    sizes in turn, and each size keeps its best round, so a burst of load on a shared machine
    does not decide. Ties go to the larger size. Torch's RNG state is left as it was."""
    sizes = sorted(set(int(c) for c in candidates if int(c) >= 1))
    if not sizes:
        raise ValueError("no candidate forward batch to probe")
    device = rows.device
    best = {size: float("inf") for size in sizes}
    with torch.random.fork_rng(devices=[]), call.evaluating(), torch.inference_mode():
        x = call.norm(rows if call.device is None else rows.to(call.device))
        for size in sizes:
            call.forward(x[:size])  # warm-up
        for _ in range(max(1, repeats)):
            for size in sizes:
                t0 = clock()
                for start in range(0, len(x), size):
                    call.forward(x[start:start + size])
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                best[size] = min(best[size], clock() - t0)
    rates = {size: len(x) / max(t, 1e-12) for size, t in best.items()}
    fastest = max(rates, key=lambda s: (rates[s], s))
    return fastest, rates


def describe(rates: dict[int, float]) -> dict[str, Any]:
    """The probe's rates as JSON-able run attrs (``{"16": inputs/s, ...}``)."""
    return {str(k): round(float(v), 1) for k, v in sorted(rates.items())}
