"""Shared parts of the throughput benchmarks: the machine's measured float32 rate, a model's FLOPs
per input, interleaved timing rounds, and the table every benchmark prints.

The reference rate is measured in the same process as the paths it is compared with: the best of
oneDNN's 3×3, 5×5 and 7×7 convolutions on a large batch of feature maps (on CPU; cuDNN's on a GPU),
best of a few calls each.
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
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

__all__ = ["add_common_arguments", "write_results", "conv_rates", "conv_peak_gflops", "flops_per_input", "interleaved",
           "round_progress", "Row", "format_table", "sync", "best_batch", "engine_forward_batch", "describe_forward_batch",
           "results_path", "header"]


def add_common_arguments(ap: argparse.ArgumentParser, rounds: int = 3) -> None:
    """``--smoke`` (tiny sizes, seconds: what the test suite runs so the script cannot rot),
    ``--rounds`` and ``--device``."""
    ap.add_argument("--smoke", action="store_true", help="tiny sizes, a few seconds (the test suite runs this)")
    ap.add_argument("--rounds", type=int, default=rounds, help="interleaved rounds; best and spread are reported")
    ap.add_argument("--device", default="cpu", help="cpu or cuda")
    ap.add_argument("--bfloat16", action="store_true",
                    help="also time evaluate(precision='bfloat16') and print the bfloat16 conv rate")


def results_path(args: argparse.Namespace, default: str | Path | None) -> Path | None:
    """Where the full run writes its table: ``args.out`` if the script has one (``''`` = print
    only), else ``default``; never anything in ``--smoke`` mode (benchmarks/results/ holds full
    runs only)."""
    if getattr(args, "smoke", False):
        return None
    out = getattr(args, "out", default)
    return Path(out) if out else None


def write_results(args: argparse.Namespace, lines: Sequence[str]) -> Path | None:
    """Write ``lines`` to :func:`results_path` (nothing in ``--smoke`` mode or without ``--out``);
    the path written, or None."""
    out = results_path(args, None)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text("\n".join(lines) + "\n", encoding="utf-8")
        print(f"wrote {out}")
    return out


def header(peak_gflops: float, flops: float, unit: str, device: torch.device | str,
           bf16_peak_gflops: float | None = None) -> list[str]:
    """The lines above a table: the device, the measured rate(s) and the model's FLOPs per input."""
    device = torch.device(device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"{torch.get_num_threads()} CPU threads"
    lines = [f"device {device} ({name}); model FLOPs per {unit.split('/')[0]} (torch.utils.flop_counter, "
             f"multiply-add = 2): {flops / 1e6:,.3f} MFLOP"]
    if bf16_peak_gflops is not None:
        lines.append(f"measured bfloat16 rate (best large conv): {bf16_peak_gflops:.1f} GFLOP/s (the bfloat16 row's "
                     "'of peak' is still against float32)")
    return lines


def sync(device: torch.device | str) -> None:
    """Wait for the device's queued work (no-op on CPU)."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


#: the convolutions the reference rate is the best of: (kernel, channels, side) on a CPU; the
#: rate oneDNN reaches depends on the kernel size (a 5×5 or 7×7 kernel reuses each input more), so
#: models with large kernels (NERO's MNIST CNN: 7×7 and 5×5) are measured against the best of them
PEAK_CONVS_CPU = ((3, 128, 64), (5, 96, 48), (7, 64, 48))
PEAK_CONVS_CUDA = ((3, 256, 56), (5, 256, 56), (7, 128, 56))


def conv_rates(device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32, *, smoke: bool = False,
               repeats: int = 5) -> dict[str, float]:
    """GFLOP/s of large convolutions here, best of ``repeats`` calls each (a multiply-add counted
    as 2, as ``torch.utils.flop_counter`` counts the models): the 3×3, 5×5 and 7×7 kernels of
    :data:`PEAK_CONVS_CPU` / ``_CUDA`` in channels_last, and the 3×3 one in the default (NCHW)
    layout, the reference the issue's measurements used."""
    device = torch.device(device)
    shapes = ((3, 64, 32),) if smoke else (PEAK_CONVS_CUDA if device.type == "cuda" else PEAK_CONVS_CPU)
    n = 4 if smoke else (64 if device.type == "cuda" else 16)
    rates: dict[str, float] = {}
    for (k, c, hw), layout in [(shape, torch.channels_last) for shape in shapes] + [(shapes[0], torch.contiguous_format)]:
        x = torch.randn(n, c, hw, hw, device=device, dtype=dtype).contiguous(memory_format=layout)
        conv = torch.nn.Conv2d(c, c, k, padding=k // 2, bias=False).to(device=device, dtype=dtype).eval()
        conv = conv.to(memory_format=layout)
        flops = 2.0 * n * c * c * k * k * hw * hw
        best = float("inf")
        with torch.inference_mode():
            conv(x)  # warm-up: oneDNN picks its kernel
            sync(device)
            for _ in range(1 if smoke else repeats):
                t0 = time.perf_counter()
                conv(x)
                sync(device)
                best = min(best, time.perf_counter() - t0)
        name = f"{k}x{k}" + (" NCHW" if layout is torch.contiguous_format else "")
        rates[name] = flops / best / 1e9
    return rates


#: the rates behind the last float32 :func:`conv_peak_gflops` of this process (what the tables print
#: beside the peak)
PEAK_BREAKDOWN: dict[str, float] = {}


def conv_peak_gflops(device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32, *,
                     smoke: bool = False, repeats: int = 5) -> float:
    """The float rate (GFLOP/s) large convolutions reach here: the best of :func:`conv_rates`
    (for float32, the rates are kept in :data:`PEAK_BREAKDOWN`)."""
    rates = conv_rates(device, dtype, smoke=smoke, repeats=repeats)
    if dtype == torch.float32:
        PEAK_BREAKDOWN.clear()
        PEAK_BREAKDOWN.update(rates)
    return max(rates.values())


def flops_per_input(model: torch.nn.Module, example: Any) -> float:
    """FLOPs of one forward call on ``example`` divided by its batch size (the length of the first
    tensor in it); a multiply-add counts as 2."""
    from torch.utils.flop_counter import FlopCounterMode

    first = example if isinstance(example, torch.Tensor) else next(t for t in example if isinstance(t, torch.Tensor))
    counter = FlopCounterMode(display=False)
    with torch.inference_mode(), counter:
        model(*example) if isinstance(example, tuple) else model(example)
    return counter.get_total_flops() / max(len(first), 1)


def round_progress(say: Callable[[str], None], rounds: int, unit: str) -> Callable[[int, dict[str, list[float]]], None]:
    """An :func:`interleaved` ``progress`` callback that says each round's rates on one line
    (``  round 2/3: a=120  b=98 <unit>``)."""
    def progress(r: int, got: dict[str, list[float]]) -> None:
        say(f"  round {r + 1}/{rounds}: " + "  ".join(f"{k}={v[-1]:.0f}" for k, v in got.items()) + f" {unit}")
    return progress


def interleaved(paths: dict[str, Callable[[], Any]], rounds: int, *,
                progress: Callable[[int, dict[str, list[float]]], None] | None = None) -> dict[str, list[float]]:
    """Run every path once per round, in the same order each round: rates (items/s) per path.
    Each callable does its work and returns how many items it processed, or ``(items, seconds)``
    when it times itself (to leave out a warm-up or a compile). ``progress(round, rates)`` is
    called after each round."""
    rates: dict[str, list[float]] = {name: [] for name in paths}
    for r in range(max(rounds, 1)):
        for name, run in paths.items():
            t0 = time.perf_counter()
            got = run()
            elapsed = time.perf_counter() - t0
            if isinstance(got, tuple):
                got, elapsed = got
            rates[name].append(got / max(elapsed, 1e-12))
        if progress is not None:
            progress(r, rates)
    return rates


def best_batch(forward: Callable[[torch.Tensor], Any], inputs: torch.Tensor, sizes: Sequence[int], *,
               device: torch.device | str = "cpu", rounds: int = 2) -> tuple[int, dict[int, float]]:
    """The batch size at which ``forward`` alone runs fastest on ``inputs`` (transformed
    beforehand, on the device): each of ``sizes`` (capped at ``len(inputs)``) is timed over all of
    ``inputs`` in slices of that size, ``rounds`` interleaved rounds after one warm-up slice, best
    round kept. Returns (the best size, inputs/s per size)."""
    sizes = sorted({max(1, min(int(b), len(inputs))) for b in sizes})
    rates: dict[int, float] = {b: 0.0 for b in sizes}
    with torch.inference_mode():
        for b in sizes:  # warm-up: the first call of each shape picks its kernels
            forward(inputs[:b])
        sync(device)
        for _ in range(max(rounds, 1)):
            for b in sizes:
                t0 = time.perf_counter()
                for s in range(0, len(inputs), b):
                    forward(inputs[s:s + b])
                sync(device)
                rates[b] = max(rates[b], len(inputs) / (time.perf_counter() - t0))
    return max(rates, key=rates.__getitem__), rates


def engine_forward_batch(attrs: dict[str, Any]) -> int | None:
    """The forward batch a run's attributes record (``forward_batch`` at the top level or in the
    ``optimization`` record), or None when the engine does not record it."""
    import json

    rec = attrs.get("optimization")
    rec = json.loads(rec) if isinstance(rec, str) else (rec or {})
    for where in (attrs, rec):
        value = where.get("forward_batch")
        if value is not None:
            try:
                return int(value)
            except (TypeError, ValueError):
                return None
    return None


def describe_forward_batch(attrs: dict[str, Any]) -> str:
    """The forward batch a run used and how it was chosen: tuned on the run's first calls (with
    the rates each size measured, inputs/s) or the default (the run did not tune)."""
    import json

    fb = engine_forward_batch(attrs)
    if fb is None:
        return "not recorded in the run attrs"
    rates = attrs.get("forward_batch_probe")
    rates = json.loads(rates) if isinstance(rates, str) else rates
    if not rates:
        return f"{fb} (the default: this run did not tune)"
    return f"{fb} (tuned on the run's first calls; inputs/s by size: " + ", ".join(
        f"{k}: {float(v):,.0f}" for k, v in rates.items()) + ")"


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
    w = max([44, *(len(r.name) for r in rows)])
    head = (f"{'path':<{w}} {'best ' + unit:>16} {'spread':>21} {'GFLOP/s':>8} {'of peak':>8}"
            + (f" {'/forward':>9}" if reference else "") + (f" {'/naive':>7}" if naive else ""))
    breakdown = ", ".join(f"{k} {v:.0f}" for k, v in PEAK_BREAKDOWN.items())
    lines = [f"measured float32 peak (best large conv): {peak_gflops:.1f} GFLOP/s"
             + (f" (GFLOP/s by convolution: {breakdown})" if breakdown else ""), head, "-" * len(head)]
    for r in rows:
        gf = r.best * r.flops / 1e9 if r.flops else float("nan")
        spread = f"{min(r.rates):,.1f}–{max(r.rates):,.1f}"
        line = f"{r.name:<{w}} {r.best:>16,.1f} {spread:>21} {gf:>8.1f} {gf / peak_gflops:>8.1%}"
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
