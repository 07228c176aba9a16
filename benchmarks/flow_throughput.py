"""Flow-orbit throughput (NERO's PIV orbit, D4 × time reversal), measured side by side in one run.

Same pairs (64 × 64 grey image pairs with a known uniform flow: a smooth random texture and its
copy rolled by an integer shift) and the same model (our FlowCNN, seeded, untrained: timing
only) for every path:

  (a) ours: ``osc.evaluate(model, pairs, "d4xt", osc.Flow())``, in memory, defaults and with
      ``optimize=True`` (BatchNorm folded, channels_last);
  (b) the plain model forward alone on the 16 transformed pairs of every sample, prepared
      beforehand (not timed), batches of 256 pairs;
  (c) a naive NERO-style loop: per pair and element, numpy rot90 / flips of both frames and a
      frame swap for time reversal, a batch-1 forward, the estimate mapped back by the inverse
      element in numpy (grid and vectors), and the EPE against the truth in numpy.

Rounds are interleaved (a, a-optimize, b, c, a, ...); pairs/s is reported as the best round and
the spread. Once, untimed, the EPE of (a) and (c) are compared per pair and element. Note (c)
scores the estimate mapped back to the canonical frame against the canonical truth, (a) the
estimate against the moved truth: for D4 (an isometry of the grid) the two EPEs are equal.

Usage: python benchmarks/flow_throughput.py [--pairs 32] [--rounds 3] [--out benchmarks/results/flow_throughput.txt]
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch

import orbitscope as osc
from orbitscope.group.parse import parse_orbit
from orbitscope.kinds import get_kind
from orbitscope.models import FlowCNN

_lines: list[str] = []


def say(text: str = "") -> None:
    print(text, flush=True)
    _lines.append(text)


def make_pairs(n: int, size: int = 64, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    from scipy.ndimage import gaussian_filter

    rng = np.random.default_rng(seed)
    frames = np.zeros((n, 2, 1, size, size), np.float32)
    flows = np.zeros((n, 2, size, size), np.float32)
    for i in range(n):
        img = gaussian_filter(rng.random((size, size)), 1.5)
        img = ((img - img.min()) / np.ptp(img)).astype(np.float32)
        du, dv = rng.integers(-3, 4, size=2)
        frames[i, 0, 0], frames[i, 1, 0] = img, np.roll(img, (dv, du), axis=(0, 1))
        flows[i] = np.array([du, dv], np.float32)[:, None, None]
    return frames, flows


# NERO's D4 order on arrays displayed row 0 on top (seeds.md): the map of an image, and the linear
# map of a vector (u, v) (x right, y down) for each element d
def _d4_image(a: np.ndarray, d: int) -> np.ndarray:
    ops = [lambda x: x, lambda x: np.swapaxes(x[..., ::-1, ::-1], -1, -2), lambda x: np.rot90(x, 1, (-2, -1)),
           lambda x: x[..., :, ::-1], lambda x: np.rot90(x, 2, (-2, -1)), lambda x: np.swapaxes(x, -1, -2),
           lambda x: np.rot90(x, 3, (-2, -1)), lambda x: x[..., ::-1, :]]
    return np.ascontiguousarray(ops[d](a))


def naive(model: torch.nn.Module, frames: np.ndarray, flows: np.ndarray, linear: np.ndarray) -> tuple[float, np.ndarray]:
    """(c): pairs × elements per second, and the EPE per (pair, element)."""
    n = len(frames)
    epe = np.zeros((n, 16))
    t0 = time.perf_counter()
    with torch.inference_mode():
        for i in range(n):
            for e in range(16):
                reversed_, d = divmod(e, 8)
                pair = _d4_image(frames[i], d)
                if reversed_:
                    pair = pair[::-1]
                est = model(torch.from_numpy(np.ascontiguousarray(pair))[None])[0].numpy().astype(np.float64)
                # map back: inverse grid move, inverse vector map, undo time reversal's negation
                inv = {1: 1, 2: 6, 6: 2}.get(d, d)  # the D4 elements that are not their own inverse: rot90 <-> rot270
                back = _d4_image(est, inv)
                lin = np.linalg.inv(linear[e]) * (-1.0 if reversed_ else 1.0)
                back = np.einsum("ij,jyx->iyx", lin, back)
                diff = back - flows[i]
                epe[i, e] = np.sqrt(diff[0] ** 2 + diff[1] ** 2).mean()
    return n * 16 / (time.perf_counter() - t0), epe


def forward_only(model: torch.nn.Module, batches: list[torch.Tensor]) -> float:
    n = sum(len(b) for b in batches)
    with torch.inference_mode():
        t0 = time.perf_counter()
        for b in batches:
            model(b)
        return n / (time.perf_counter() - t0)


def ours(model: torch.nn.Module, frames: np.ndarray, flows: np.ndarray, optimize: bool) -> tuple[float, np.ndarray]:
    orbit = parse_orbit("d4xt")
    t0 = time.perf_counter()
    res = osc.evaluate(model, (frames, flows), orbit, osc.Flow(maps=()), optimize=optimize).result
    rate = len(frames) * 16 / (time.perf_counter() - t0)
    return rate, res.epe.values.reshape(len(frames), 16)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "flow_throughput.txt"))
    args = ap.parse_args()
    started = time.perf_counter()
    frames, flows = make_pairs(args.pairs)
    torch.manual_seed(0)
    model = FlowCNN().eval()
    t = parse_orbit("d4xt").transforms()
    linear = np.asarray(t.linear, dtype=np.float64)
    env = f"PYTHONPATH={os.environ['PYTHONPATH']} " if os.environ.get("PYTHONPATH") else ""
    say(f"# command: {env}python {' '.join(sys.argv)}")
    say(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads; python {platform.python_version()}; {os.cpu_count()} CPUs")
    say(f"# {args.pairs} pairs 64x64 grey x 16 elements (d4xt); FlowCNN(width 24), torch.manual_seed(0), untrained")
    moved = get_kind("frames").act(torch.from_numpy(frames), t, layout="orbit")  # (16, B, 2, 1, H, W)
    rows = moved.reshape(-1, *moved.shape[2:])
    batches = [rows[s:s + 256] for s in range(0, len(rows), 256)]
    ours(model, frames[:2], flows[:2], False)  # warm-up
    rates: dict[str, list[float]] = {"a": [], "a_opt": [], "b": [], "c": []}
    first: dict[str, np.ndarray] = {}
    for r in range(args.rounds):
        rate, epe = ours(model, frames, flows, False)
        rates["a"].append(rate)
        first.setdefault("a", epe)
        rates["a_opt"].append(ours(model, frames, flows, True)[0])
        rates["b"].append(forward_only(model, batches))
        rate, epe = naive(model, frames, flows, linear)
        rates["c"].append(rate)
        first.setdefault("c", epe)
        say(f"  round {r + 1}/{args.rounds}: " + "  ".join(f"{k}={v[-1]:.0f}" for k, v in rates.items()) + " pair-elements/s")
    names = {"a": "a: ours, osc.evaluate(Flow), defaults", "a_opt": "a: ours, optimize=True",
             "b": "b: model(batch) alone, pre-transformed, batch 256",
             "c": "c: naive loop, numpy D4 + batch-1 forward + numpy map-back and EPE"}
    best = {k: max(v) for k, v in rates.items()}
    say()
    say(f"{'path':70s} {'best/s':>8s} {'spread':>15s}")
    for k, name in names.items():
        say(f"{name:70s} {best[k]:8.0f} {min(rates[k]):7.0f}-{max(rates[k]):<7.0f}")
    say()
    say(f"ratio ours/forward = {best['a'] / best['b']:.2f}   ratio ours/naive = {best['a'] / best['c']:.2f}   "
        f"(optimize: {best['a_opt'] / best['b']:.2f}, {best['a_opt'] / best['c']:.2f})")
    diff = np.abs(first["a"] - first["c"])
    say(f"agreement (a) vs (c), EPE per pair and element: max |d| = {diff.max():.2e} px "
        f"({'OK' if diff.max() < 1e-4 else 'MISMATCH'}; mean EPE {first['a'].mean():.3f} px)")
    say(f"# total wall time {time.perf_counter() - started:.0f} s")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text("\n".join(_lines) + "\n")
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
