"""Orbit-evaluation throughput, side by side in one run, and peak memory.

For each model (our ReferenceCNN; NeroCNN, NERO's MNIST CNN layer for layer: 7×7/5×5 kernels,
24-48-48-96-96-64 channels, BatchNorm), on the same N MNIST digits × 72 rotation angles
(0…355° by 5°), CPU threads as torch sets them, BatchNorm statistics made non-trivial as after
training:

  eager      the bare eager forward of the model as given on inputs rotated beforehand (the
             model's own cost, nothing else), at its best batch size (timed first at 32…512);
             the table's reference ("/forward");
  fwd-opt    the bare forward of the optimised copy evaluate runs (BatchNorm folded,
             channels_last), at its own best batch size;
  defaults   orbitscope.evaluate end to end with default settings (first-batch check, warp,
             forward, scoring, store writes into a fresh store);
  every      evaluate with every optimisation: defaults + precision="bfloat16" (mixed precision,
             opt-in), + torch.compile with --compile (its compile time, measured by the run's
             first-batch check, is excluded from the rate and printed apart);
  off        evaluate with optimize=False (the engine before optimisation became the default);
  naive      NERO's reference pipeline: PIL rotation of each image for each angle and a
             batch-1 forward (on a subset of the digits; the rate is what is compared).

Rounds are interleaved (every path once per round), so machine noise hits all paths alike; the
best round of each path is reported with the spread (min–max over rounds), in the roofline table
of benchmarks/roofline.py (FLOPs per image by torch.utils.flop_counter, the float32 rate of a
large convolutions (the best of 3×3, 5×5, 7×7) measured in the same process, each path's fraction of it, ratios to the eager
forward and to the naive loop). Then peak memory
(peak RSS during evaluate in a fresh process, reset just before it via /proc/self/clear_refs;
Linux only) over 6,000 and all 60,000 Fashion-MNIST training images × 4 angles.

With --device cuda (a GPU machine), the same paths run on the GPU and a ResNet-18-sized
classifier on 224×224 RGB images is added (--resnet, needs torchvision).

Usage: python benchmarks/orbit_throughput.py [--digits 300] [--naive-digits 20] [--rounds 3]
       [--models reference,nero] [--compile] [--device cpu|cuda] [--resnet] [--skip-memory]
       [--forward-batches] [--bfloat16] [--smoke] [--out benchmarks/results/orbit_throughput.txt]
--smoke: 2 digits, 1 naive digit, NeroCNN only, one round, memory at 32 images, nothing written.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image

import orbitscope as osc
from orbitscope.data.datasets import mnist_subset
from orbitscope.engine.optimization import rewrite_model
from orbitscope.models import NeroCNN, ReferenceCNN

sys.path.insert(0, str(Path(__file__).resolve().parent))  # roofline.py, also when imported by the memory child
from roofline import (Row, add_common_arguments, best_batch, conv_peak_gflops, describe_forward_batch,  # noqa: E402
                      flops_per_input, format_table, interleaved, write_results, sync)

ANGLES = np.arange(0.0, 360.0, 5.0)  # 72 distinct angles, as in the measurement
FORWARD_SIZES = (32, 64, 128, 256, 512)  # batch sizes the forwards alone are timed at; the best is kept


def trained_like(model: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """``model`` in eval mode with non-trivial BatchNorm statistics, as after training."""
    torch.manual_seed(seed)
    for m in model.modules():
        if isinstance(m, (torch.nn.BatchNorm1d, torch.nn.BatchNorm2d)):
            m.running_mean.uniform_(-0.2, 0.2)
            m.running_var.uniform_(0.5, 2.0)
    return model.eval()


def make_model() -> torch.nn.Module:
    """The reference CNN as the memory child uses it."""
    torch.manual_seed(0)
    return trained_like(ReferenceCNN())


def resnet18_sized(num_classes: int = 10) -> torch.nn.Module:
    from torchvision.models import resnet18

    torch.manual_seed(0)
    return trained_like(resnet18(weights=None, num_classes=num_classes))


def bare_forward(model: torch.nn.Module, rotated: torch.Tensor, batch: int, device: torch.device,
                 channels_last: bool = False) -> tuple[int, float]:
    """Images, seconds of ``model`` alone on inputs rotated beforehand (already on ``device``)."""
    with torch.inference_mode():
        def call(x: torch.Tensor) -> None:
            model(x.contiguous(memory_format=torch.channels_last) if channels_last else x)
        call(rotated[:batch])  # warm-up
        sync(device)
        t0 = time.perf_counter()
        for s in range(0, len(rotated), batch):
            call(rotated[s : s + batch])
        sync(device)
        return len(rotated), time.perf_counter() - t0


def evaluate_path(model: torch.nn.Module, data, device: torch.device, **kwargs) -> tuple[int, float, dict, dict]:
    """Images, seconds of evaluate end to end into a fresh store (after an untimed warm-up run; a
    torch.compile's one-off cost, measured by the run's first-batch check, left out), the run's
    optimisation record and its attributes."""
    with tempfile.TemporaryDirectory() as home:
        osc.evaluate(model, data.subset(range(min(16, len(data)))), osc.Rotation(ANGLES[:4]), store=home, device=device,
                     **kwargs)
        sync(device)
        t0 = time.perf_counter()
        run = osc.evaluate(model, data, osc.Rotation(ANGLES), store=home, device=device, **kwargs)
        sync(device)
        elapsed = time.perf_counter() - t0
        attrs = dict(run.result.attrs)
    rec = attrs.get("optimization")
    rec = json.loads(rec) if isinstance(rec, str) else (rec or {})
    compiling = rec.get("compile_seconds") or 0.0  # torch.compile's one-off cost, reported apart
    return run.result.n_samples * len(ANGLES), elapsed - compiling, rec, attrs


def naive_path(model: torch.nn.Module, images: torch.Tensor, labels: torch.Tensor, n: int,
               device: torch.device) -> int:
    """NERO-style: PIL rotation per image and angle, batch-1 forward, one probability read;
    returns the number of images."""
    count = 0
    with torch.inference_mode():
        for i in range(n):
            arr = (images[i].permute(1, 2, 0).numpy() * 255).astype(np.uint8)
            pil = Image.fromarray(arr[..., 0] if arr.shape[-1] == 1 else arr)
            for angle in ANGLES:
                rot = np.asarray(pil.rotate(float(angle), resample=Image.BILINEAR), dtype=np.float32) / 255.0
                x = torch.from_numpy(rot)
                x = x[None, None] if x.ndim == 2 else x.permute(2, 0, 1)[None]
                out = model(x.to(device))
                torch.softmax(out, 1)[0, int(labels[i])].item()
                count += 1
    sync(device)
    return count


def measure(label: str, model: torch.nn.Module, data, images: torch.Tensor, labels: torch.Tensor,
            args: argparse.Namespace, device: torch.device, lines: list[str], peak: float) -> dict[str, float]:
    """Every path for one model, interleaved over ``args.rounds`` rounds; prints the roofline table
    and returns the best rates."""
    model = model.to(device)
    fast, _ = rewrite_model(model)
    fast = fast.to(device)
    rotated = osc.warp_images(images.to(device), osc.Rotation(ANGLES).transforms()).reshape(-1, *images.shape[1:])
    flops = flops_per_input(model, rotated[:2])
    sizes = (16, 64) if args.smoke else FORWARD_SIZES
    b_eager, eager_sizes = best_batch(model, rotated, sizes, device=device, rounds=1 if args.smoke else 2)
    b_fast, fast_sizes = best_batch(lambda x: fast(x.contiguous(memory_format=torch.channels_last)), rotated, sizes,
                                    device=device, rounds=1 if args.smoke else 2)
    every = dict(precision="bfloat16", compile=args.compile)
    recs: dict[str, tuple[dict, dict]] = {}

    def ours(key: str, **kwargs):
        def run():
            n, seconds, rec, attrs = evaluate_path(model, data, device, **kwargs)
            recs.setdefault(key, (rec, attrs))
            return n, seconds
        return run

    paths = {
        "eager": lambda: bare_forward(model, rotated, b_eager, device),
        "fwd-opt": lambda: bare_forward(fast, rotated, b_fast, device, channels_last=True),
        "defaults": ours("defaults"),
        "every": ours("every", **every),
        "off": ours("off", optimize=False),
        "naive": lambda: naive_path(model, images, labels, args.naive_digits, device),
    }
    names = {
        "eager": f"forward alone, model as given, pre-rotated, best batch {b_eager}",
        "fwd-opt": f"forward of the optimised copy (BN folded, channels_last), best batch {b_fast}",
        "defaults": "evaluate, defaults (optimize='auto')",
        "every": "evaluate, + bfloat16" + (" + torch.compile" if args.compile else ""),
        "off": "evaluate, optimize=False (the model as given)",
        "naive": f"naive: PIL rotate + batch-1 forward ({args.naive_digits} samples)",
    }
    rates = interleaved(paths, args.rounds, progress=lambda r, got: print(
        f"  {label} round {r + 1}/{args.rounds}: " + ", ".join(f"{k} {v[-1]:.0f}" for k, v in got.items()), flush=True))
    rec_default, attrs_default = recs["defaults"]
    rec_every = recs["every"][0]
    out = [f"\n{label}: {len(data)} samples × {len(ANGLES)} angles, device {device}, {args.rounds} interleaved rounds",
           f"model FLOPs per image (torch.utils.flop_counter, multiply-add = 2): {flops / 1e6:,.3f} MFLOP",
           "forward alone by batch size (img/s; model as given | optimised copy): "
           + ", ".join(f"{b}: {eager_sizes[b]:,.0f} | {fast_sizes[b]:,.0f}" for b in eager_sizes),
           format_table([Row(names[k], rates[k], flops) for k in paths], peak, "img/s", reference=names["eager"],
                        naive=names["naive"])]
    best = {k: max(v) for k, v in rates.items()}
    out.append(f"ratio defaults / fwd-opt   = {best['defaults'] / best['fwd-opt']:.2f}   (pipeline: warp, check, scoring, "
               "writes vs the optimised forward alone)")
    out.append(f"evaluate's forward batch (defaults, first round): {describe_forward_batch(attrs_default)}")
    out.append(f"defaults ran: {rec_default.get('ran')} {rec_default.get('rewrites')}, check "
               f"{rec_default.get('check', {}).get('max_difference')} (tolerance {rec_default.get('check', {}).get('tolerance')})")
    out.append(f"every ran: {rec_every.get('ran')} {rec_every.get('rewrites')} {rec_every.get('precision')}, check "
               f"{rec_every.get('check', {}).get('max_difference')} (tolerance {rec_every.get('check', {}).get('tolerance')})"
               + (f", reason: {rec_every['reason']}" if rec_every.get("reason") else "")
               + (f", compile {rec_every['compile_seconds']} s" if rec_every.get("compile_seconds") is not None else ""))
    for line in out:
        print(line, flush=True)
    lines.extend(out)
    return best


def forward_batches(model: torch.nn.Module, images: torch.Tensor, rounds: int, lines: list[str]) -> None:
    """The optimised forward's rate per batch size (the basis of the CPU default of 128)."""
    fast, _ = rewrite_model(model)
    rotated = osc.warp_images(images, osc.Rotation(ANGLES).transforms()).reshape(-1, *images.shape[1:])
    sizes = (32, 64, 128, 256, 512)
    rates = {b: [] for b in sizes}
    for _ in range(rounds):
        for b in sizes:
            n, seconds = bare_forward(fast, rotated, b, torch.device("cpu"), channels_last=True)
            rates[b].append(n / seconds)
    lines.append("\noptimised forward by batch size (img/s, best of rounds): "
                 + ", ".join(f"{b}: {max(v):.0f}" for b, v in rates.items()))
    print(lines[-1], flush=True)


_MEMORY_CHILD = """
import json, sys, tempfile, torch
import orbitscope as osc
from orbitscope.data.datasets import fashion_mnist
sys.path.insert(0, {bench_dir!r})
from orbit_throughput import make_model, _status_mb
n = int(sys.argv[1])
data = fashion_mnist("train")
data = data.subset(range(n)) if n < len(data) else data
model = make_model()
with open("/proc/self/clear_refs", "w") as fh:  # reset the peak (VmHWM) to the current RSS
    fh.write("5")
before = _status_mb("VmRSS")
with tempfile.TemporaryDirectory() as home:
    run = osc.evaluate(model, data, osc.Rotation([0, 90, 180, 270]), store=home)
print(json.dumps({{"n": run.result.n_samples, "rss_before_mb": before, "peak_rss_mb": _status_mb("VmHWM")}}))
"""


def _status_mb(field: str) -> float:
    """A memory field of /proc/self/status (Linux), in MiB."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"{field} not found in /proc/self/status")


def peak_memory(n: int) -> dict:
    code = _MEMORY_CHILD.format(bench_dir=str(Path(__file__).parent))
    out = subprocess.run([sys.executable, "-c", code, str(n)], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_arguments(ap, rounds=3)
    ap.add_argument("--digits", type=int, default=300)
    ap.add_argument("--naive-digits", type=int, default=20)
    ap.add_argument("--models", default="reference,nero", help="comma-separated: reference, nero")
    ap.add_argument("--compile", action="store_true", help="'every' also uses torch.compile")
    ap.add_argument("--resnet", action="store_true", help="also a ResNet-18-sized model on 224² RGB images")
    ap.add_argument("--resnet-images", type=int, default=64)
    ap.add_argument("--skip-memory", action="store_true")
    ap.add_argument("--forward-batches", action="store_true", help="also time the optimised forward per batch size")
    ap.add_argument("--out", type=Path, default=None, help="also write the table to this file")
    args = ap.parse_args()
    if args.smoke:  # tiny sizes, one round, NeroCNN only, nothing written
        args.digits, args.naive_digits, args.rounds, args.models, args.resnet = 2, 1, 1, "nero", False
    device = torch.device(args.device)

    data = mnist_subset("test").subset(range(args.digits))
    images = torch.stack([data[i][0] for i in range(len(data))])
    labels = torch.tensor([int(data[i][1]) for i in range(len(data))])
    lines = [f"torch {torch.__version__}, {torch.get_num_threads()} threads, device {device}"
             + (f" ({torch.cuda.get_device_name(device)})" if device.type == "cuda" else "")]
    print(lines[0])
    peak = conv_peak_gflops(device, smoke=args.smoke)
    lines.append(f"measured float32 rate (best large conv, this process): {peak:.1f} GFLOP/s")
    if args.bfloat16 or device.type == "cuda":
        lines.append(f"measured bfloat16 rate (best large conv): {conv_peak_gflops(device, torch.bfloat16, smoke=args.smoke):.1f} "
                     "GFLOP/s (the bfloat16 row's 'of peak' is against float32)")
    print("\n".join(lines[1:]))
    builders = {"reference": ("ReferenceCNN (ours)", lambda: trained_like(ReferenceCNN())),
                "nero": ("NeroCNN (NERO-shaped)", lambda: trained_like(NeroCNN()))}
    for key in args.models.split(","):
        label, build = builders[key.strip()]
        torch.manual_seed(0)
        measure(label, build(), data, images, labels, args, device, lines, peak)
    if args.resnet:
        g = torch.Generator().manual_seed(0)
        big = torch.randint(0, 256, (args.resnet_images, 3, 224, 224), dtype=torch.uint8, generator=g)
        big_labels = torch.randint(0, 10, (args.resnet_images,), generator=g)
        big_data = osc.data.ArrayDataset(big, big_labels, data_id="random-224")
        measure("ResNet-18-sized, 224² RGB", resnet18_sized(), big_data, big.float() / 255, big_labels,
                args, device, lines, peak)
    if args.forward_batches and device.type == "cpu":
        forward_batches(trained_like(NeroCNN()), images, args.rounds, lines)

    if not args.skip_memory:
        first_memory_line = len(lines)
        lines.append("\npeak memory of evaluate (defaults, fresh process each), Fashion-MNIST train × 4 angles"
                     + (" (--smoke: 32 images)" if args.smoke else "") + ":")
        sizes = (32,) if args.smoke else (6000, 60000)
        mem = [peak_memory(n) for n in sizes]
        for m in mem:
            lines.append(f"  {m['n']:6d} images: peak RSS {m['peak_rss_mb']:7.1f} MB (after loading data "
                         f"{m['rss_before_mb']:.1f} MB; evaluate added {m['peak_rss_mb'] - m['rss_before_mb']:.1f} MB)")
        added = [m["peak_rss_mb"] - m["rss_before_mb"] for m in mem]
        if len(mem) == 2:
            lines.append(f"  memory added by evaluate, {sizes[1]:,} vs {sizes[0]:,} images: ratio {added[1] / added[0]:.3f}")
        print("\n".join(lines[first_memory_line:]))
    write_results(args, lines)


if __name__ == "__main__":
    main()
