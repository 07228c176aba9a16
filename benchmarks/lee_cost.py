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

Times are per sample; rounds are interleaved (a, b, c, d, a, ...), and the best round and the
spread (max/min over rounds) are printed, with the ratios (a)/(c), (b)/(c) and (b')/(c): how much
cheaper LEE is than one orbit of the same model, and (a)/(d): LEE in model forwards.

Usage: python benchmarks/lee_cost.py [--rounds 3] [--batch 64]
"""

from __future__ import annotations

import argparse
import platform
import time
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

_lines: list[str] = []


def say(text: str = "") -> None:
    print(text, flush=True)
    _lines.append(text)


def cases(batch: int) -> list[dict[str, Any]]:
    g = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    digits = torch.zeros(batch, 1, 28, 28)
    digits[:, :, 4:24, 6:22] = torch.rand(batch, 1, 20, 16, generator=g)
    pairs = torch.rand(batch, 2, 1, 64, 64, generator=g)
    clouds = torch.randn(batch, 1024, 3, generator=g)
    clouds = clouds / clouds.norm(dim=-1).amax(1, keepdim=True)[..., None]
    labels = torch.zeros(batch, dtype=torch.long)
    return [
        dict(name="mnist CNN", model=ReferenceCNN().eval(), x=digits, task=Classification(), generator="rotation",
             orbit=osc.Rotation(np.arange(0.0, 361.0, 5.0)), data=(digits, labels), probes=True),
        dict(name="flow CNN", model=FlowCNN().eval(), x=pairs, task=Flow(), generator="rotation",
             orbit=osc.parse_orbit("d4xt"), data=(pairs, torch.zeros(batch, 2, 64, 64)), probes=True),
        dict(name="PointNet", model=PointNet(10).eval(), x=clouds, task=PointCloudClassification(),
             generator="so3_z", orbit=osc.parse_orbit("so3:64"), data=(clouds, labels), probes=False),
    ]


def timed(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "lee_cost.txt"))
    args = ap.parse_args()
    torch.set_num_threads(max(1, torch.get_num_threads()))
    say(f"LEE cost vs one orbit: {platform.processor() or platform.machine()}, torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads, batch {args.batch}, {args.rounds} interleaved rounds")
    for case in cases(args.batch):
        m, x, task, gen = case["model"], case["x"], case["task"], case["generator"]
        paths = {
            "(a) LEE": lambda: lie_terms(m, task, x, gen),
            "(b) LEE + layers (exact)": lambda: lie_terms(m, task, x, gen, layers=True),
            "(b') LEE + layers (16 probes)": (lambda: lie_terms(m, task, x, gen, layers="probes", probes=16))
            if case["probes"] else (lambda: None),
            f"(c) orbit ({case['orbit'].size} elements)": lambda: osc.evaluate(m, case["data"], case["orbit"], task,
                                                                              batch_size=args.batch),
            "(d) forward alone": lambda: torch.no_grad()(m)(x),
        }
        for fn in paths.values():  # warm-up (first calls allocate and pick kernels)
            fn()
        times: dict[str, list[float]] = {k: [] for k in paths}
        for _ in range(args.rounds):
            for k, fn in paths.items():
                times[k].append(timed(fn) / len(x))
        best = {k: min(v) for k, v in times.items()}
        say(f"\n{case['name']} along {gen}:")
        for k, v in times.items():
            if k.startswith("(b')") and not case["probes"]:
                say(f"  {k:28s}       n/a (per-point layers fold the clouds into rows)")
                continue
            say(f"  {k:28s} {1e3 * best[k]:9.3f} ms/sample (spread {max(v) / min(v):.2f}×)")
        a, b, bp, c, d = (best[k] for k in paths)
        probed = f"{bp / c:.2f} (16 probes)" if case["probes"] else "n/a (16 probes)"
        say(f"  LEE / orbit = {a / c:.3f}   LEE+layers / orbit = {b / c:.2f} (exact), {probed}   "
            f"LEE / forward = {a / d:.1f}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text("\n".join(_lines) + "\n", encoding="utf-8")
    say(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
