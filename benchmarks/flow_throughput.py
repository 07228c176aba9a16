"""Flow-orbit throughput (NERO's PIV orbit, D4 × time reversal), measured side by side in one run.

Same pairs (64 × 64 grey image pairs with a known uniform flow: a smooth random texture and its
copy rolled by an integer shift) and the same model (our FlowCNN, seeded, untrained: timing
only) for every path:

  (a) ours: ``osc.evaluate(model, pairs, "d4xt", osc.Flow())``, in memory, with its defaults
      (``optimize="auto"``: BatchNorm folded, channels_last, after the first-batch check), and
      with ``optimize=False`` (the model as given); with --bfloat16 also ``precision="bfloat16"``;
  (b) the plain model forward alone on the 16 transformed pairs of every sample, prepared
      beforehand (not timed), at its best batch size (timed first at 16…256; the best is kept
      and printed);
  (c) a naive NERO-style loop: per pair and element, numpy rot90 / flips of both frames and a
      frame swap for time reversal, a batch-1 forward, the estimate mapped back by the inverse
      element in numpy (grid and vectors), and the EPE against the truth in numpy.

Rounds are interleaved (a, a-off, b, c, a, ...); pair-elements/s is reported as the best round
and the spread, with the roofline columns (benchmarks/roofline.py: FLOPs per pair-element by
torch.utils.flop_counter, the float32 rate of large convolutions (the best of 3×3, 5×5, 7×7) measured in the same process,
each path's fraction of it, ratios to (b) and (c)). Once, untimed, the EPE of (a) and (c) are compared per pair and element. Note (c)
scores the estimate mapped back to the canonical frame against the canonical truth, (a) the
estimate against the moved truth: for D4 (an isometry of the grid) the two EPEs are equal.

Usage: python benchmarks/flow_throughput.py [--pairs 256] [--rounds 3] [--device cpu|cuda] [--bfloat16] [--smoke]
       [--out benchmarks/results/flow_throughput.txt]
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
from roofline import (Row, add_common_arguments, best_batch, conv_peak_gflops, describe_forward_batch, flops_per_input,
                      format_table, header, interleaved, round_progress, write_results, sync)

FORWARD_SIZES = (16, 32, 64, 128, 256)  # batch sizes the forward alone is timed at; the best is kept

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


def naive(model: torch.nn.Module, frames: np.ndarray, flows: np.ndarray, linear: np.ndarray,
          device: torch.device = torch.device("cpu")) -> tuple[int, float, np.ndarray]:
    """(c): pair-elements, seconds, and the EPE per (pair, element)."""
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
                est = model(torch.from_numpy(np.ascontiguousarray(pair))[None].to(device))[0].cpu().numpy().astype(np.float64)
                # map back: inverse grid move, inverse vector map, undo time reversal's negation
                inv = {1: 1, 2: 6, 6: 2}.get(d, d)  # the D4 elements that are not their own inverse: rot90 <-> rot270
                back = _d4_image(est, inv)
                lin = np.linalg.inv(linear[e]) * (-1.0 if reversed_ else 1.0)
                back = np.einsum("ij,jyx->iyx", lin, back)
                diff = back - flows[i]
                epe[i, e] = np.sqrt(diff[0] ** 2 + diff[1] ** 2).mean()
    return n * 16, time.perf_counter() - t0, epe


def forward_only(model: torch.nn.Module, rows: torch.Tensor, batch: int, device: torch.device) -> tuple[int, float]:
    """(b): pair-elements, seconds of ``model`` alone over ``rows`` (transformed beforehand, on the device)."""
    with torch.inference_mode():
        sync(device)
        t0 = time.perf_counter()
        for s in range(0, len(rows), batch):
            model(rows[s:s + batch])
        sync(device)
        return len(rows), time.perf_counter() - t0


def ours(model: torch.nn.Module, frames: np.ndarray, flows: np.ndarray, device: torch.device,
         **options) -> tuple[int, float, np.ndarray, dict]:
    """(a): pair-elements, seconds, EPE per (pair, element) and the run's attributes of evaluate with
    its defaults (``optimize="auto"`` included) and ``options`` on top."""
    orbit = parse_orbit("d4xt")
    sync(device)
    t0 = time.perf_counter()
    res = osc.evaluate(model, (frames, flows), orbit, osc.Flow(maps=()), device=device, **options).result
    sync(device)
    return len(frames) * 16, time.perf_counter() - t0, res.epe.values.reshape(len(frames), 16), dict(res.attrs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_arguments(ap, rounds=3)
    ap.add_argument("--pairs", type=int, default=256,
                    help="image pairs (x 16 elements; at least 4,096 pair-elements lets evaluate tune its forward batch)")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "flow_throughput.txt"),
                    help="also write the output here ('' = print only)")
    args = ap.parse_args()
    started = time.perf_counter()
    device = torch.device(args.device)
    n_pairs, rounds, size = (1, 1, 32) if args.smoke else (args.pairs, args.rounds, 64)
    frames, flows = make_pairs(n_pairs, size)
    torch.manual_seed(0)
    model = FlowCNN().eval().to(device)
    t = parse_orbit("d4xt").transforms()
    linear = np.asarray(t.linear, dtype=np.float64)
    env = f"PYTHONPATH={os.environ['PYTHONPATH']} " if os.environ.get("PYTHONPATH") else ""
    say(f"# command: {env}python {' '.join(sys.argv)}")
    say(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads; python {platform.python_version()}; {os.cpu_count()} CPUs")
    say(f"# {n_pairs} pairs {size}x{size} grey x 16 elements (d4xt); FlowCNN(width 24), torch.manual_seed(0), untrained; "
        f"{rounds} interleaved rounds" + (" (--smoke: tiny sizes, nothing written)" if args.smoke else ""))
    peak = conv_peak_gflops(device, smoke=args.smoke)
    bf16_peak = conv_peak_gflops(device, torch.bfloat16, smoke=args.smoke) if args.bfloat16 else None
    flops = flops_per_input(model, torch.rand(2, 2, 1, size, size, device=device))
    for line in header(peak, flops, "pair-element/s", device, bf16_peak):
        say(f"# {line}")
    moved = get_kind("frames").act(torch.from_numpy(frames), t, layout="orbit")  # (16, B, 2, 1, H, W)
    rows = moved.reshape(-1, *moved.shape[2:]).contiguous().to(device)
    best_b, by_size = best_batch(model, rows, (4, 16) if args.smoke else FORWARD_SIZES, device=device,
                                 rounds=1 if args.smoke else 2)
    say("# the model's forward alone by batch size (pair-elements/s, pre-transformed): "
        + ", ".join(f"{b}: {r:,.0f}" for b, r in by_size.items()) + f"; best {best_b}")
    ours(model, frames[:1], flows[:1], device)  # warm-up
    first: dict[str, np.ndarray] = {}
    attrs: dict[str, dict] = {}

    def ours_path(key: str, **options):
        def run():
            n, seconds, epe, run_attrs = ours(model, frames, flows, device, **options)
            first.setdefault(key, epe)
            attrs.setdefault(key, run_attrs)
            return n, seconds
        return run

    def naive_path():
        n, seconds, epe = naive(model, frames, flows, linear, device)
        first.setdefault("naive", epe)
        return n, seconds

    names = {"defaults": "evaluate(Flow), defaults", "off": "evaluate, optimize=False (the model as given)"}
    paths = {"defaults": ours_path("defaults"), "off": ours_path("off", optimize=False)}
    if args.bfloat16:
        names["bf16"] = "evaluate, precision='bfloat16'"
        paths["bf16"] = ours_path("bf16", precision="bfloat16")
    names["forward"] = f"forward alone, pre-transformed, best batch {best_b}"
    paths["forward"] = lambda: forward_only(model, rows, best_b, device)
    names["naive"] = "naive: numpy D4 + batch-1 forward + numpy map-back, EPE"
    paths["naive"] = naive_path
    rates = interleaved(paths, rounds, progress=round_progress(say, rounds, "pair-elements/s"))
    say()
    table = format_table([Row(names[k], rates[k], flops) for k in paths], peak, "pair-elements/s",
                         reference=names["forward"], naive=names["naive"])
    for line in table.splitlines():
        say(line)
    say(f"evaluate's forward batch (defaults, first round): {describe_forward_batch(attrs['defaults'])}; "
        f"optimisation: {attrs['defaults'].get('optimization')}")
    diff = np.abs(first["defaults"] - first["naive"])
    ok = bool(diff.max() < 1e-4)
    say(f"agreement (a) vs (c), EPE per pair and element: max |d| = {diff.max():.2e} px "
        f"({'OK' if ok else 'MISMATCH'}; mean EPE {first['defaults'].mean():.3f} px)")
    say(f"# total wall time {time.perf_counter() - started:.0f} s")
    write_results(args, _lines)
    if not ok:
        raise SystemExit("(a) and (c) disagree: see the agreement line")


if __name__ == "__main__":
    main()
