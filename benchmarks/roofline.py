"""Shared parts of the throughput benchmarks: the machine's measured float32 rate, a model's FLOPs
per input, interleaved timing rounds, and the table every benchmark prints.

The reference rate is measured in the same process as the paths it is compared with: oneDNN's
3×3 convolution on a large batch of feature maps (on CPU; cuDNN's on a GPU), best of a few calls.
MKL's GEMM is no reference on AMD CPUs, and a datasheet peak is not what PyTorch can reach. A
path's "fraction of peak" is (inputs/s × FLOPs per input) / that rate, with FLOPs counted by
``torch.utils.flop_counter`` (a multiply-add counts as 2).

Benchmarks import this module as a sibling (``python benchmarks/x.py`` puts ``benchmarks/`` on
the path).
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch

__all__ = ["add_common_arguments", "conv_peak_gflops", "flops_per_input", "interleaved", "Row", "format_table",
           "sync"]


def add_common_arguments(ap: argparse.ArgumentParser, rounds: int = 3) -> None:
    """``--smoke`` (tiny sizes, seconds: what the test suite runs so the script cannot rot),
    ``--rounds`` and ``--device``."""
    ap.add_argument("--smoke", action="store_true", help="tiny sizes, a few seconds (the test suite runs this)")
    ap.add_argument("--rounds", type=int, default=rounds, help="interleaved rounds; best and spread are reported")
    ap.add_argument("--device", default="cpu", help="cpu or cuda")


def sync(device: torch.device | str) -> None:
    """Wait for the device's queued work (no-op on CPU)."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def conv_peak_gflops(device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32, *,
                     smoke: bool = False, repeats: int = 5) -> float:
    """The float rate (GFLOP/s) a large 3×3 convolution reaches here: best of ``repeats`` calls."""
    device = torch.device(device)
    n, c, hw = (2, 32, 32) if smoke else ((64, 256, 56) if device.type == "cuda" else (16, 128, 64))
    x = torch.randn(n, c, hw, hw, device=device, dtype=dtype)
    conv = torch.nn.Conv2d(c, c, 3, padding=1, bias=False).to(device=device, dtype=dtype).eval()
    flops = 2.0 * n * c * c * 9 * hw * hw
    best = float("inf")
    with torch.inference_mode():
        conv(x)  # warm-up: oneDNN picks its kernel
        sync(device)
        for _ in range(1 if smoke else repeats):
            t0 = time.perf_counter()
            conv(x)
            sync(device)
            best = min(best, time.perf_counter() - t0)
    return flops / best / 1e9


def flops_per_input(model: torch.nn.Module, example: Any) -> float:
    """FLOPs of one forward call on ``example`` divided by its batch size (the length of the first
    tensor in it); a multiply-add counts as 2."""
    from torch.utils.flop_counter import FlopCounterMode

    first = example if isinstance(example, torch.Tensor) else next(t for t in example if isinstance(t, torch.Tensor))
    counter = FlopCounterMode(display=False)
    with torch.inference_mode(), counter:
        model(*example) if isinstance(example, tuple) else model(example)
    return counter.get_total_flops() / max(len(first), 1)


def interleaved(paths: dict[str, Callable[[], int]], rounds: int) -> dict[str, list[float]]:
    """Run every path once per round, in the same order each round: rates (items/s) per path.
    Each callable does its work and returns how many items it processed."""
    rates: dict[str, list[float]] = {name: [] for name in paths}
    for _ in range(max(rounds, 1)):
        for name, run in paths.items():
            t0 = time.perf_counter()
            items = run()
            rates[name].append(items / (time.perf_counter() - t0))
    return rates


@dataclass
class Row:
    """One path of a benchmark table: its rates over the rounds and its FLOPs per item."""

    name: str
    rates: Sequence[float]
    flops: float | None = None
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def best(self) -> float:
        return max(self.rates)


def format_table(rows: Sequence[Row], peak_gflops: float, unit: str, *, reference: str | None = None,
                 naive: str | None = None) -> str:
    """The table every throughput benchmark prints: best rate and spread over the rounds, the
    ratios to the ``reference`` row (the model's forward alone at its best batch) and the
    ``naive`` row, and the fraction of the measured peak."""
    by_name = {r.name: r for r in rows}
    head = (f"{'path':<44} {'best ' + unit:>16} {'spread':>21} {'GFLOP/s':>8} {'of peak':>8}"
            + (f" {'/forward':>9}" if reference else "") + (f" {'/naive':>7}" if naive else ""))
    lines = [f"measured float32 peak (3×3 conv): {peak_gflops:.1f} GFLOP/s", head, "-" * len(head)]
    for r in rows:
        gf = r.best * r.flops / 1e9 if r.flops else float("nan")
        spread = f"{min(r.rates):,.1f}–{max(r.rates):,.1f}"
        line = f"{r.name:<44} {r.best:>16,.1f} {spread:>21} {gf:>8.1f} {gf / peak_gflops:>8.1%}"
        if reference:
            line += f" {r.best / by_name[reference].best:>8.2f}×"
        if naive:
            line += f" {r.best / by_name[naive].best:>6.2f}×"
        lines.append(line + (f"  {r.note}" if r.note else ""))
    spreads = [max(r.rates) / min(r.rates) for r in rows if min(r.rates) > 0]
    if spreads:
        lines.append(f"(best of {len(rows[0].rates)} interleaved rounds; largest spread max/min "
                     f"{max(spreads):.2f}×, median {statistics.median(spreads):.2f}×)")
    return "\n".join(lines)
