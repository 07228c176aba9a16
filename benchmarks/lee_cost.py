"""What LEE costs next to a whole orbit, measured side by side in one run.

For each of the demo's model kinds (our MNIST CNN on 28×28 digits, the flow CNN on 64×64 pairs,
PointNet on 1,024-point clouds; seeded, untrained: timing only) and the same inputs:

  (a) LEE along one generator (``lie_terms``: one forward-mode pass plus two warps of the input);
  (b) LEE with the exact layer attribution (one forward-mode pass per leaf-module call);
  (b') LEE with the layer attribution estimated from 16 Gaussian probes (two passes, then one
      backward pass per probe; not for PointNet, whose per-point layers fold the clouds into rows);
  (c) the orbit evaluation the demo runs for that model (``osc.evaluate`` in memory, defaults:
      73 rotations for the CNN, D4 × time reversal's 16 elements for flow, 64 SO(3) rotations
      for the clouds);
  (d) the model's forward alone on the untransformed batch (the floor of any per-sample cost).

Rates are samples per second; rounds are interleaved (a, b, c, d, a, ...), and the roofline table
of benchmarks/roofline.py gives the best round, the spread, the FLOP rate of (c) and (d) (the
model's FLOPs per sample by torch.utils.flop_counter, times the orbit's elements for (c)) as a
fraction of the float32 rate of large convolutions (the best of 3×3, 5×5, 7×7) measured in the same process, and each path's
rate over (d)'s; then the ratios of times (a)/(c), (b)/(c) and (b')/(c): how much cheaper LEE is
than one orbit of the same model, and (a)/(d): LEE in model forwards.

Usage: python benchmarks/lee_cost.py [--rounds 3] [--batch 64] [--device cpu|cuda] [--smoke]
"""

from __future__ import annotations

import argparse
import platform
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

import orbitscope as osc
from orbitscope.lie import lie_terms
from orbitscope.models.flow_cnn import FlowCNN
from orbitscope.models.point_nets import PointNet
from orbitscope.models.reference import ReferenceCNN
from orbitscope.tasks import Classification, Flow, PointCloudClassification
from roofline import (Row, add_common_arguments, conv_peak_gflops, flops_per_input, format_table, interleaved, sync,
                      write_results)

_lines: list[str] = []


def say(text: str = "") -> None:
    print(text, flush=True)
    _lines.append(text)


def cases(batch: int, smoke: bool = False) -> list[dict[str, Any]]:
    """The three models with their inputs (``smoke``: 32×32 pairs and 128-point clouds)."""
    g = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    side, points = (32, 128) if smoke else (64, 1024)
    digits = torch.zeros(batch, 1, 28, 28)
    digits[:, :, 4:24, 6:22] = torch.rand(batch, 1, 20, 16, generator=g)
    pairs = torch.rand(batch, 2, 1, side, side, generator=g)
    clouds = torch.randn(batch, points, 3, generator=g)
    clouds = clouds / clouds.norm(dim=-1).amax(1, keepdim=True)[..., None]
    labels = torch.zeros(batch, dtype=torch.long)
    return [
        dict(name="mnist CNN", model=ReferenceCNN().eval(), x=digits, task=Classification(), generator="rotation",
             orbit=osc.Rotation(np.arange(0.0, 361.0, 5.0)), data=(digits, labels), probes=True),
        dict(name="flow CNN", model=FlowCNN().eval(), x=pairs, task=Flow(), generator="rotation",
             orbit=osc.parse_orbit("d4xt"), data=(pairs, torch.zeros(batch, 2, side, side)), probes=True),
        dict(name="PointNet", model=PointNet(10).eval(), x=clouds, task=PointCloudClassification(),
             generator="so3_z", orbit=osc.parse_orbit("so3:64"), data=(clouds, labels), probes=False),
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_arguments(ap, rounds=3)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "lee_cost.txt"),
                    help="also write the output here ('' = print only)")
    args = ap.parse_args()
    if args.smoke:
        args.batch, args.rounds = 2, 1
    device = torch.device(args.device)
    torch.set_num_threads(max(1, torch.get_num_threads()))
    peak = conv_peak_gflops(device, smoke=args.smoke)
    say(f"LEE cost vs one orbit: {platform.processor() or platform.machine()}, torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads, device {device}, batch {args.batch}, {args.rounds} interleaved rounds"
        + (" (--smoke: tiny sizes, nothing written)" if args.smoke else ""))
    for case in cases(args.batch, args.smoke):
        m, x, task, gen = case["model"].to(device), case["x"].to(device), case["task"], case["generator"]
        data = tuple(d.to(device) for d in case["data"])
        n = len(x)
        flops = flops_per_input(m, x[:2])
        elements = case["orbit"].size
        names = {"a": "(a) LEE", "b": "(b) LEE + layers (exact)", "bp": "(b') LEE + layers (16 probes)",
                 "c": f"(c) orbit, evaluate defaults ({elements} elements)", "d": "(d) forward alone"}

        def done(fn: Callable[[], Any]) -> Callable[[], int]:
            def run() -> int:
                fn()
                sync(device)
                return n
            return run

        paths = {
            "a": done(lambda: lie_terms(m, task, x, gen)),
            "b": done(lambda: lie_terms(m, task, x, gen, layers=True)),
            "bp": done(lambda: lie_terms(m, task, x, gen, layers="probes", probes=16)),
            "c": done(lambda: osc.evaluate(m, data, case["orbit"], task, batch_size=args.batch, device=device)),
            "d": done(lambda: torch.no_grad()(m)(x)),
        }
        if not case["probes"]:
            del paths["bp"]
        for fn in paths.values() if not args.smoke else ():  # warm-up (first calls allocate and pick kernels)
            fn()
        rates = interleaved(paths, args.rounds)
        # FLOPs per sample: the forward's for (d), the orbit's forwards for (c); LEE's passes are
        # not plain forwards (forward-mode AD, warps), so their rows show no rate
        per_sample = {"c": flops * elements, "d": flops}
        rows = [Row(names[k], rates[k], per_sample.get(k)) for k in paths]
        say(f"\n{case['name']} along {gen}: model FLOPs per sample {flops / 1e6:,.3f} MFLOP "
            "(torch.utils.flop_counter, multiply-add = 2)")
        for line in format_table(rows, peak, "samples/s", reference=names["d"]).splitlines():
            say(f"  {line}")
        if not case["probes"]:
            say(f"  {names['bp']}: n/a (per-point layers fold the clouds into rows)")
        best = {k: max(v) for k, v in rates.items()}
        probed = f"{best['c'] / best['bp']:.2f} (16 probes)" if case["probes"] else "n/a (16 probes)"
        say(f"  LEE / orbit = {best['c'] / best['a']:.3f}   LEE+layers / orbit = {best['c'] / best['b']:.2f} (exact), "
            f"{probed}   LEE / forward = {best['d'] / best['a']:.1f}   (ratios of times per sample)")
    write_results(args, _lines)


if __name__ == "__main__":
    main()
