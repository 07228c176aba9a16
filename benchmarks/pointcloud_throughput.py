"""Point-cloud orbit throughput over NERO's SO(3) sample, measured side by side in one run, and
peak memory against the number of rotations.

Same clouds (seeded Gaussian blobs stretched per axis, 8 × 512 points) and the same model (our
PointNet, seeded, untrained: timing only) for every path, over NERO's sample (3 planes × 73 axis
angles × 13 rotation angles = 2,847 elements, 2,416 distinct rotations):

  (a) ours: ``osc.evaluate(model, (clouds, labels), NeroSO3(), PointCloudClassification())``, in
      memory, defaults (each distinct rotation is evaluated once and the rest indexed);
  (b) the plain model forward alone on all 2,847 rotated copies of every cloud, rotated
      beforehand (not timed), in batches of 64 clouds (ours' default slice for clouds) and of 512
      (the default for images: per-point networks run slower in such large batches on a CPU);
  (c) a naive NERO-style loop: per element of the 2,847, rotate every cloud with scipy's
      ``Rotation`` in numpy, one forward of the batch, softmax and the true-class confidence.

Rates are cloud-elements per second over the 2,847 elements (so (a) gains from skipping the
repeated rotations). Rounds are interleaved (a, b, c, a, ...); best round and spread. Once,
untimed, the confidences of (a) and (c) are compared.

Memory: for orbits of 24 (octahedral), 500 (super-Fibonacci) and 2,847 (NERO) rotations, a fresh
subprocess evaluates 32 clouds of 1,024 points and reports its peak resident memory during
``evaluate`` (``/proc/self/statm`` sampled every 2 ms) above what it held just before; the
engine works through the orbit a slice at a time, so this should stay flat while the number of
rotations grows ~120×.

Usage: python benchmarks/pointcloud_throughput.py [--clouds 8] [--points 512] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch
from scipy.spatial.transform import Rotation as R

import orbitscope as osc
from orbitscope.group.so3 import NeroSO3
from orbitscope.models.point_nets import PointNet
from orbitscope.tasks import PointCloudClassification

_lines: list[str] = []


def say(text: str = "") -> None:
    print(text, flush=True)
    _lines.append(text)


def make_clouds(n: int, points: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    clouds = rng.normal(size=(n, points, 3)) * rng.uniform(0.3, 1.0, size=(n, 1, 3))
    clouds -= clouds.mean(1, keepdims=True)
    clouds /= np.linalg.norm(clouds, axis=-1).max(1)[:, None, None]
    return clouds.astype(np.float32), (np.arange(n) % 4).astype(np.int64)


def ours(model: torch.nn.Module, clouds: np.ndarray, labels: np.ndarray) -> tuple[float, np.ndarray]:
    orbit = NeroSO3()
    t0 = time.perf_counter()
    res = osc.evaluate(model, (clouds, labels), orbit, PointCloudClassification()).result
    rate = len(clouds) * orbit.size / (time.perf_counter() - t0)
    return rate, res.data["confidence"].values.reshape(len(clouds), -1)


def forward_only(model: torch.nn.Module, batches: list[torch.Tensor]) -> float:
    n = sum(len(b) for b in batches)
    with torch.inference_mode():
        t0 = time.perf_counter()
        for b in batches:
            model(b)
        return n / (time.perf_counter() - t0)


def naive(model: torch.nn.Module, clouds: np.ndarray, labels: np.ndarray, quats: np.ndarray) -> tuple[float, np.ndarray]:
    conf = np.zeros((len(clouds), len(quats)), np.float32)
    t0 = time.perf_counter()
    with torch.inference_mode():
        for k, q in enumerate(quats):
            rot = R.from_quat([q[1], q[2], q[3], q[0]]).as_matrix()  # scipy is scalar-last
            moved = np.einsum("ij,bnj->bni", rot, clouds).astype(np.float32)
            p = torch.softmax(model(torch.from_numpy(moved)), -1).numpy()
            conf[:, k] = p[np.arange(len(clouds)), labels]
    return len(clouds) * len(quats) / (time.perf_counter() - t0), conf


MEMORY_CLOUDS, MEMORY_POINTS = 32, 1024  # the memory runs: all 2,847 rotated copies would be 1.1 GB
_MEMORY_CHILD = """
import json, os, sys, threading, time, numpy as np, torch
import orbitscope as osc
from orbitscope.group.parse import parse_orbit
from orbitscope.models.point_nets import PointNet
from orbitscope.tasks import PointCloudClassification
sys.path.insert(0, {here!r})
from pointcloud_throughput import make_clouds
page = os.sysconf("SC_PAGE_SIZE")
def rss():
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * page / 2**20
torch.manual_seed(0)
clouds, labels = make_clouds({n}, {points})
model = PointNet(4).eval()
orbit = parse_orbit({spec!r})
osc.evaluate(model, (clouds[:1], labels[:1]), parse_orbit("octahedral"), PointCloudClassification())  # warm-up
before, peak, done = rss(), [0.0], threading.Event()
def watch():
    while not done.is_set():
        peak[0] = max(peak[0], rss())
        time.sleep(0.002)
watcher = threading.Thread(target=watch)
watcher.start()
osc.evaluate(model, (clouds, labels), orbit, PointCloudClassification())
done.set()
watcher.join()
print(json.dumps({{"size": orbit.size, "before_mb": before, "peak_mb": max(peak[0], rss())}}))
"""


def memory(spec: str, n: int, points: int) -> dict[str, float]:
    code = _MEMORY_CHILD.format(here=str(Path(__file__).parent), n=n, points=points, spec=spec)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clouds", type=int, default=8)
    ap.add_argument("--points", type=int, default=512)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "pointcloud_throughput.txt"))
    args = ap.parse_args()
    started = time.perf_counter()
    clouds, labels = make_clouds(args.clouds, args.points)
    torch.manual_seed(0)
    model = PointNet(4).eval()
    orbit = NeroSO3()
    env = f"PYTHONPATH={os.environ['PYTHONPATH']} " if os.environ.get("PYTHONPATH") else ""
    say(f"# command: {env}python {' '.join(sys.argv)}")
    say(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads; python {platform.python_version()}; {os.cpu_count()} CPUs")
    say(f"# {args.clouds} clouds x {args.points} points x {orbit.size} elements (NERO's SO(3) sample, "
        f"{len(np.unique(np.round(orbit.matrices.reshape(-1, 9), 9), axis=0))} distinct); PointNet(4 classes), "
        "torch.manual_seed(0), untrained")
    mats = torch.as_tensor(orbit.matrices, dtype=torch.float32)
    moved = torch.einsum("kij,bnj->kbni", mats, torch.from_numpy(clouds)).reshape(-1, args.points, 3)
    batches = [moved[s:s + 64] for s in range(0, len(moved), 64)]
    large = [moved[s:s + 512] for s in range(0, len(moved), 512)]
    ours(model, clouds[:1], labels[:1])  # warm-up
    rates: dict[str, list[float]] = {"a": [], "b": [], "b512": [], "c": []}
    first: dict[str, np.ndarray] = {}
    for r in range(args.rounds):
        rate, conf = ours(model, clouds, labels)
        rates["a"].append(rate)
        first.setdefault("a", conf)
        rates["b"].append(forward_only(model, batches))
        rates["b512"].append(forward_only(model, large))
        rate, conf = naive(model, clouds, labels, orbit.quaternions)
        rates["c"].append(rate)
        first.setdefault("c", conf)
        say(f"  round {r + 1}/{args.rounds}: " + "  ".join(f"{k}={v[-1]:.0f}" for k, v in rates.items())
            + " cloud-elements/s")
    names = {"a": "a: ours, osc.evaluate(PointCloudClassification), defaults",
             "b": "b: model(batch) alone, all 2,847 copies pre-rotated, batch 64",
             "b512": "b: the same, batch 512",
             "c": "c: naive loop, scipy rotation per element + forward of the batch"}
    best = {k: max(v) for k, v in rates.items()}
    say()
    say(f"{'path':66s} {'best/s':>8s} {'spread':>15s}")
    for k, name in names.items():
        say(f"{name:66s} {best[k]:8.0f} {min(rates[k]):7.0f}-{max(rates[k]):<7.0f}")
    say()
    say(f"ratio ours/forward = {best['a'] / best['b']:.2f}   ratio ours/naive = {best['a'] / best['c']:.2f}")
    diff = np.abs(first["a"] - first["c"])
    say(f"agreement (a) vs (c), true-class confidence per cloud and element: max |d| = {diff.max():.2e} "
        f"({'OK' if diff.max() < 1e-4 else 'MISMATCH'})")
    say()
    say("peak memory of evaluate (fresh process each; MB above what it held before evaluate; all rotated "
        f"copies at once would take {MEMORY_CLOUDS * MEMORY_POINTS * 3 * 4 * 1000 / 2**20:,.0f} MB per 1,000 rotations):")
    for spec in ("octahedral", "so3:500", "so3:nero"):
        m = memory(spec, MEMORY_CLOUDS, MEMORY_POINTS)
        say(f"  {spec:12s} {m['size']:5d} rotations: peak {m['peak_mb']:7.1f} MB, "
            f"+{m['peak_mb'] - m['before_mb']:6.1f} MB during evaluate")
    say(f"# total wall time {time.perf_counter() - started:.0f} s")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text("\n".join(_lines) + "\n")
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
