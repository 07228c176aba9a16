"""Point-cloud orbit throughput over NERO's SO(3) sample, measured side by side in one run, and
peak memory against the number of rotations.

Same clouds (seeded Gaussian blobs stretched per axis, 8 × 512 points) and the same model (our
PointNet, seeded, untrained: timing only) for every path, over NERO's sample (3 planes × 73 axis
angles × 13 rotation angles = 2,847 elements, 2,416 distinct rotations):

  (a) ours: ``osc.evaluate(model, (clouds, labels), NeroSO3(), PointCloudClassification())``, in
      memory, with its defaults (``optimize="auto"``; each distinct rotation is evaluated once and
      the rest indexed), and with ``optimize=False``; with --bfloat16 also ``precision="bfloat16"``;
  (b) the plain model forward alone on all 2,847 rotated copies of every cloud, rotated
      beforehand (not timed), at its best batch size (timed first at 32…512; the best is kept
      and printed);
  (c) a naive NERO-style loop: per element of the 2,847, rotate every cloud with scipy's
      ``Rotation`` in numpy, one forward of the batch, softmax and the true-class confidence.

Rates are cloud-elements per second over the 2,847 elements (so (a) gains from skipping the
repeated rotations). Rounds are interleaved (a, a-off, b, c, a, ...); best round and spread, with
the roofline columns (benchmarks/roofline.py: FLOPs per cloud by torch.utils.flop_counter, the
float32 rate of large convolutions (the best of 3×3, 5×5, 7×7) measured in the same process, each path's fraction of it,
ratios to (b) and (c)). Once,
untimed, the confidences of (a) and (c) are compared.

Memory: for orbits of 24 (octahedral), 500 (super-Fibonacci) and 2,847 (NERO) rotations, a fresh
subprocess evaluates 32 clouds of 1,024 points and reports its peak resident memory during
``evaluate`` (``/proc/self/statm`` sampled every 2 ms) above what it held just before; the
engine works through the orbit a slice at a time, so this should stay flat while the number of
rotations grows ~120×.

Usage: python benchmarks/pointcloud_throughput.py [--clouds 8] [--points 512] [--rounds 3] [--skip-memory]
       [--device cpu|cuda] [--bfloat16] [--smoke] [--out benchmarks/results/pointcloud_throughput.txt]
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
from roofline import (Row, add_common_arguments, best_batch, conv_peak_gflops, describe_forward_batch, flops_per_input,
                      format_table, header, interleaved, round_progress, write_results, sync)

FORWARD_SIZES = (32, 64, 128, 256, 512)  # batch sizes the forward alone is timed at; the best is kept
SMOKE_NAIVE = 200  # --smoke: the naive loop runs the first elements only (its rate is per element)

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


def ours(model: torch.nn.Module, clouds: np.ndarray, labels: np.ndarray, device: torch.device,
         **options) -> tuple[int, float, np.ndarray, dict]:
    """(a): cloud-elements, seconds, true-class confidences and the run's attributes of evaluate
    with its defaults (``optimize="auto"`` included) and ``options`` on top."""
    orbit = NeroSO3()
    sync(device)
    t0 = time.perf_counter()
    res = osc.evaluate(model, (clouds, labels), orbit, PointCloudClassification(), device=device, **options).result
    sync(device)
    return (len(clouds) * orbit.size, time.perf_counter() - t0, res.data["confidence"].values.reshape(len(clouds), -1),
            dict(res.attrs))


def forward_only(model: torch.nn.Module, moved: torch.Tensor, batch: int, device: torch.device) -> tuple[int, float]:
    """(b): cloud-elements, seconds of ``model`` alone over all rotated copies (on the device)."""
    with torch.inference_mode():
        sync(device)
        t0 = time.perf_counter()
        for s in range(0, len(moved), batch):
            model(moved[s:s + batch])
        sync(device)
        return len(moved), time.perf_counter() - t0


def naive(model: torch.nn.Module, clouds: np.ndarray, labels: np.ndarray, quats: np.ndarray,
          device: torch.device = torch.device("cpu")) -> tuple[int, float, np.ndarray]:
    """(c): cloud-elements, seconds and the true-class confidences of the per-element loop."""
    conf = np.zeros((len(clouds), len(quats)), np.float32)
    t0 = time.perf_counter()
    with torch.inference_mode():
        for k, q in enumerate(quats):
            rot = R.from_quat([q[1], q[2], q[3], q[0]]).as_matrix()  # scipy is scalar-last
            moved = np.einsum("ij,bnj->bni", rot, clouds).astype(np.float32)
            p = torch.softmax(model(torch.from_numpy(moved).to(device)), -1).cpu().numpy()
            conf[:, k] = p[np.arange(len(clouds)), labels]
    return len(clouds) * len(quats), time.perf_counter() - t0, conf


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
    add_common_arguments(ap, rounds=3)
    ap.add_argument("--clouds", type=int, default=8)
    ap.add_argument("--points", type=int, default=512)
    ap.add_argument("--skip-memory", action="store_true", help="leave out the peak-memory subprocesses")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "pointcloud_throughput.txt"),
                    help="also write the output here ('' = print only)")
    args = ap.parse_args()
    started = time.perf_counter()
    device = torch.device(args.device)
    n_clouds, n_points, rounds = (1, 32, 1) if args.smoke else (args.clouds, args.points, args.rounds)
    clouds, labels = make_clouds(n_clouds, n_points)
    torch.manual_seed(0)
    model = PointNet(4).eval().to(device)
    orbit = NeroSO3()
    env = f"PYTHONPATH={os.environ['PYTHONPATH']} " if os.environ.get("PYTHONPATH") else ""
    say(f"# command: {env}python {' '.join(sys.argv)}")
    say(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads; python {platform.python_version()}; {os.cpu_count()} CPUs")
    say(f"# {n_clouds} clouds x {n_points} points x {orbit.size} elements (NERO's SO(3) sample, "
        f"{len(np.unique(np.round(orbit.matrices.reshape(-1, 9), 9), axis=0))} distinct); PointNet(4 classes), "
        f"torch.manual_seed(0), untrained; {rounds} interleaved rounds"
        + (" (--smoke: tiny sizes, nothing written)" if args.smoke else ""))
    peak = conv_peak_gflops(device, smoke=args.smoke)
    bf16_peak = conv_peak_gflops(device, torch.bfloat16, smoke=args.smoke) if args.bfloat16 else None
    flops = flops_per_input(model, torch.rand(2, n_points, 3, device=device))
    for line in header(peak, flops, "cloud-element/s", device, bf16_peak):
        say(f"# {line}")
    mats = torch.as_tensor(orbit.matrices, dtype=torch.float32)
    moved = torch.einsum("kij,bnj->kbni", mats, torch.from_numpy(clouds)).reshape(-1, n_points, 3).to(device)
    best_b, by_size = best_batch(model, moved[:512] if args.smoke else moved, (64, 256) if args.smoke else FORWARD_SIZES, device=device,
                                 rounds=1 if args.smoke else 2)
    say("# the model's forward alone by batch size (cloud-elements/s, all copies pre-rotated): "
        + ", ".join(f"{b}: {r:,.0f}" for b, r in by_size.items()) + f"; best {best_b}")
    ours(model, clouds[:1], labels[:1], device)  # warm-up
    first: dict[str, np.ndarray] = {}
    attrs: dict[str, dict] = {}

    def ours_path(key: str, **options):
        def run():
            n, seconds, conf, run_attrs = ours(model, clouds, labels, device, **options)
            first.setdefault(key, conf)
            attrs.setdefault(key, run_attrs)
            return n, seconds
        return run

    quats = orbit.quaternions[:SMOKE_NAIVE] if args.smoke else orbit.quaternions  # --smoke: the first elements

    def naive_path():
        n, seconds, conf = naive(model, clouds, labels, quats, device)
        first.setdefault("naive", conf)
        return n, seconds

    names = {"defaults": "evaluate(PointCloudClassification), defaults",
             "off": "evaluate, optimize=False (the model as given)"}
    paths = {"defaults": ours_path("defaults"), "off": ours_path("off", optimize=False)}
    if args.bfloat16:
        names["bf16"] = "evaluate, precision='bfloat16'"
        paths["bf16"] = ours_path("bf16", precision="bfloat16")
    names["forward"] = f"forward alone, all {orbit.size:,} copies pre-rotated, best batch {best_b}"
    paths["forward"] = lambda: forward_only(model, moved, best_b, device)
    names["naive"] = "naive: scipy rotation per element + forward of the batch" + (
        f" (first {len(quats)} elements)" if len(quats) < orbit.size else "")
    paths["naive"] = naive_path
    rates = interleaved(paths, rounds, progress=round_progress(say, rounds, "cloud-elements/s"))
    say()
    table = format_table([Row(names[k], rates[k], flops) for k in paths], peak, "cloud-elements/s",
                         reference=names["forward"], naive=names["naive"])
    for line in table.splitlines():
        say(line)
    say(f"(rates over all {orbit.size:,} elements: evaluate runs each distinct rotation once and indexes the rest)")
    say(f"evaluate's forward batch (defaults, first round): {describe_forward_batch(attrs['defaults'])}; "
        f"optimisation: {attrs['defaults'].get('optimization')}")
    diff = np.abs(first["defaults"][:, :len(quats)] - first["naive"])
    ok = bool(diff.max() < 1e-4)
    say(f"agreement (a) vs (c), true-class confidence per cloud and element: max |d| = {diff.max():.2e} "
        f"({'OK' if ok else 'MISMATCH'})")
    if not args.skip_memory:
        say()
        m_clouds, m_points = (2, 64) if args.smoke else (MEMORY_CLOUDS, MEMORY_POINTS)
        say("peak memory of evaluate (fresh process each; MB above what it held before evaluate; all rotated "
            f"copies at once would take {m_clouds * m_points * 3 * 4 * 1000 / 2**20:,.0f} MB per 1,000 rotations):")
        for spec in ("octahedral",) if args.smoke else ("octahedral", "so3:500", "so3:nero"):
            m = memory(spec, m_clouds, m_points)
            say(f"  {spec:12s} {m['size']:5d} rotations: peak {m['peak_mb']:7.1f} MB, "
                f"+{m['peak_mb'] - m['before_mb']:6.1f} MB during evaluate")
    say(f"# total wall time {time.perf_counter() - started:.0f} s")
    write_results(args, _lines)
    if not ok:
        raise SystemExit("(a) and (c) disagree: see the agreement line")


if __name__ == "__main__":
    main()
