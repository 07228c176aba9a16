"""Detection-orbit throughput, measured side by side in one run.

NERO's detection orbit: a 128 × 128 field of view moved over a 256 × 256 key-object context so
that the object shifts by (tx, ty) in {-64, ..., 60} step 4 (32 × 32 = 1,024 windows per
context, ``window-shift:-64:60:4``). Same model and same contexts for every path:

  (a) ours: ``osc.evaluate(model, data, orbit, osc.Detection(), view_size=(128, 128))``, in memory
      (``store=None``) and, reported separately, into a fresh temporary store directory and with
      ``optimize=True`` (BatchNorm folded, channels_last);
  (b) the floor: the plain model forward alone, on the windows cropped beforehand (not timed), in
      batches composed and sized exactly as evaluate's model calls are (its default
      ``forward_batch`` capped by its default ``memory_budget_mb``; elements per warp call ×
      samples per chunk), outputs discarded; also in channels_last memory format;
  (c) a naive NERO-style loop: for each context and shift, numpy-slice the window out of the
      uint8 HWC image, convert it to a float tensor (ToTensor style), run the model on that one
      window (batch 1), take the top box and compute its IoU with the moved, clipped ground
      truth in plain Python; one model call per window.

Paths run in interleaved rounds (a, a-store, a-optimize, b, b-channels-last, c, a, ...); windows/s is reported
as the best round, the median and the spread (min-max) over rounds. Defaults (1 context, 5
rounds) are sized for a run of about 3-5 minutes on 2 shared CPU cores: one context-round is
1,024 windows per path, ~35 s for all four paths on quiet cores, several times that when other
processes load them; many short rounds give every path more chances at a quiet slot than a few
long ones. ``--samples 8 --rounds 3`` is the larger setting (about 8x the time per round).
Once, untimed, the top-box confidence and IoU of (a) and (c) are compared per context and shift
(tolerance 1e-4), from the first round's outputs.

Model: our CentreDetector (10 classes, width 32) with seeded random weights (torch.manual_seed),
untrained, eval mode; its size head's bias is set to log 12 cells (boxes of about 48 px) so that
the untrained model's top boxes overlap the ground truth often enough for the IoU comparison to
mean something (timing is unaffected). (b) and (c) run under torch.inference_mode (evaluate uses
it itself). Data: key-object contexts (view 128, max_shift 64, box 10-50 % of the view) of the
built-in digit scenes (test digits, scene seed 1, 300-px scenes, digits 51-96 px), as
orbitscope.training.detection builds them.

Usage: python benchmarks/detection_throughput.py [--samples 4] [--rounds 5] [--seed 0] [--threads N]
       [--out benchmarks/results/detection_throughput.txt]   (--out '' prints only)
"""

from __future__ import annotations

import argparse
import copy
import datetime as _dt
import math
import os
import platform
import shlex
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

import orbitscope as osc
from orbitscope.data import key_object_contexts
from orbitscope.data.coco import DetectionSet
from orbitscope.data.scenes import digit_scenes
from orbitscope.models.centre_detector import CentreDetector
from roofline import (Row, add_common_arguments, best_batch, conv_peak_gflops, describe_forward_batch, flops_per_input,
                      format_table, header, interleaved, round_progress, write_results, sync)

VIEW, MAX_SHIFT = 128, 64
ORBIT = "window-shift:-64:60:4"
SMOKE_ORBIT = "window-shift:-64:32:32"  # --smoke: 4 x 4 windows
FORWARD_SIZES = (16, 32, 64, 128, 256)  # batch sizes the forward alone is timed at; the best is kept

_lines: list[str] = []


def say(text: str = "") -> None:
    print(text, flush=True)
    _lines.append(text)


# -- inputs ------------------------------------------------------------------------------------
def make_contexts(n: int, seed: int = 1) -> DetectionSet:
    """``n`` key-object contexts (256 × 256) of digit scenes; more scenes are drawn until enough qualify."""
    scenes = 25 * n + 50
    while True:
        data = digit_scenes(scenes, size=300, scale=(VIEW * 2 // 5, VIEW * 3 // 4), seed=seed, split="test")
        ctx = key_object_contexts(data, view=VIEW, max_shift=MAX_SHIFT, area=(0.10, 0.50), limit=n)
        if len(ctx) >= n:
            return ctx
        scenes *= 2


def make_model(seed: int) -> CentreDetector:
    torch.manual_seed(seed)
    model = CentreDetector(num_classes=10, width=32)
    with torch.no_grad():
        model.size.bias.fill_(math.log(12.0))  # boxes of ~12 cells = 48 px (see the module docstring)
    return model.eval()


# -- the paths ---------------------------------------------------------------------------------
def ours(model, data, orbit, store: bool, device: torch.device, **options):
    """(a): windows, seconds of evaluate end to end (in memory, or into a fresh store directory),
    the top-box confidence and IoU, and the run's attributes; ``options`` on top of the defaults
    (none: really the defaults, ``optimize="auto"`` included)."""
    with tempfile.TemporaryDirectory() as home:
        sync(device)
        t0 = time.perf_counter()
        run = osc.evaluate(model, data, orbit, osc.Detection(), view_size=(VIEW, VIEW), store=home if store else None,
                           device=device, **options)
        sync(device)
        elapsed = time.perf_counter() - t0
        res = run.result  # read the values while the store exists (untimed; a stored result is lazy)
        values = {name: np.asarray(res[name].values, np.float64) for name in ("confidence", "iou")}
        assert tuple(res["confidence"].dims[1:3]) == ("tx", "ty"), res["confidence"].dims
        attrs = dict(res.attrs)
    return res.n_samples * len(orbit.transforms()), elapsed, values, attrs


def precrop(data: DetectionSet, shifts: np.ndarray) -> torch.Tensor:
    """(b)'s inputs, untimed: every window of every context (element-major, as the engine lays its
    rows out), cropped exactly as the window kind does."""
    images = [torch.from_numpy(data.image(i).astype(np.float32) / 255.0) for i in range(len(data))]
    crops = []
    for tx, ty in shifts.tolist():
        x0, y0 = MAX_SHIFT - tx, MAX_SHIFT - ty
        crops.extend(img[:, y0:y0 + VIEW, x0:x0 + VIEW] for img in images)
    return torch.stack(crops)


def forward_floor(model, windows: torch.Tensor, batch: int, device: torch.device) -> tuple[int, float]:
    """(b): windows, seconds of ``model(batch)`` alone over ``windows`` (on the device), outputs
    discarded."""
    with torch.inference_mode():
        sync(device)
        t0 = time.perf_counter()
        for s in range(0, len(windows), batch):
            model(windows[s:s + batch])
        sync(device)
        return len(windows), time.perf_counter() - t0


def _iou(a: list[float], b: list[float]) -> float:
    iw = min(a[2], b[2]) - max(a[0], b[0])
    ih = min(a[3], b[3]) - max(a[1], b[1])
    inter = iw * ih if iw > 0 and ih > 0 else 0.0
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def naive(model, contexts_hwc: list[np.ndarray], gt_boxes: list[list[list[float]]], shifts: np.ndarray,
          device: torch.device = torch.device("cpu")):
    """(c): NERO-style loop, one batch-1 forward per window; returns windows, seconds, confidence, IoU."""
    n, k = len(contexts_hwc), len(shifts)
    conf = np.zeros((n, k))
    iou = np.zeros((n, k))
    t0 = time.perf_counter()
    with torch.inference_mode():
        for i, img in enumerate(contexts_hwc):
            for e, (tx, ty) in enumerate(shifts.tolist()):
                x0, y0 = MAX_SHIFT - tx, MAX_SHIFT - ty  # the content moves by +t: NERO's top-left = centre - 64 - t
                window = img[y0:y0 + VIEW, x0:x0 + VIEW]
                x = torch.from_numpy(np.ascontiguousarray(window.transpose(2, 0, 1))).float().div(255.0)[None]
                det = model(x.to(device))[0]
                scores = det["scores"].tolist()
                gt = []
                for b in gt_boxes[i]:
                    c = [min(max(b[0] - x0, 0.0), VIEW), min(max(b[1] - y0, 0.0), VIEW),
                         min(max(b[2] - x0, 0.0), VIEW), min(max(b[3] - y0, 0.0), VIEW)]
                    if c[2] > c[0] and c[3] > c[1]:
                        gt.append(c)
                if scores:
                    top = max(range(len(scores)), key=scores.__getitem__)
                    box = det["boxes"][top].tolist()
                    conf[i, e] = scores[top]
                    iou[i, e] = max((_iou(box, g) for g in gt), default=math.nan)
                else:
                    iou[i, e] = math.nan if not gt else 0.0
    return n * k, time.perf_counter() - t0, conf, iou


def _loadavg() -> str:
    try:
        return Path("/proc/loadavg").read_text().split()[0]
    except OSError:
        return "n/a"


# -- main --------------------------------------------------------------------------------------
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_arguments(ap, rounds=5)
    ap.add_argument("--samples", type=int, default=4, help="key-object contexts (each 1,024 windows; from 4 contexts, "
                    "4,096 windows, evaluate tunes its forward batch)")
    ap.add_argument("--seed", type=int, default=0, help="model initialisation seed")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "detection_throughput.txt"),
                    help="also write the output here ('' = print only)")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (default: as torch sets them)")
    args = ap.parse_args()
    started = time.perf_counter()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    load_before = _loadavg()
    orbit_spec = SMOKE_ORBIT if args.smoke else ORBIT
    rounds = 1 if args.smoke else args.rounds

    data = make_contexts(1 if args.smoke else args.samples)
    model = make_model(args.seed).to(device)
    orbit = osc.parse_orbit(orbit_spec)
    t = orbit.transforms()
    gx, gy = np.meshgrid(orbit.coords["tx"], orbit.coords["ty"], indexing="ij")  # Translation's element order
    shifts = np.stack([gx.ravel(), gy.ravel()], -1).astype(int)
    assert np.array_equal(shifts, np.asarray(t.shift)), "element order differs from Translation.transforms()"
    k = len(shifts)
    c, hc, wc = data.image(0).shape

    src = Path(osc.__file__).resolve().parent.parent
    env = f"PYTHONPATH={os.environ['PYTHONPATH']} " if os.environ.get("PYTHONPATH") else ""
    say(f"# command: {env}{shlex.join(sys.orig_argv)}")
    here = Path(__file__).resolve().parent.parent / "src"
    say(f"# {_dt.datetime.now(_dt.UTC):%Y-%m-%d %H:%M UTC}; orbitscope imported from {src}"
        + ("" if src == here else f" (a snapshot copy, not this checkout's {here})"))
    say(f"# torch {torch.__version__}, {torch.get_num_threads()} threads; numpy {np.__version__}; "
        f"python {platform.python_version()}; {os.cpu_count()} CPUs")
    say(f"# {len(data)} key-object contexts {hc}x{wc} (digit scenes, test digits, seed 1) x {k} windows "
        f"{VIEW}x{VIEW} ({orbit_spec}) = {len(data) * k} windows per path per round; {rounds} interleaved rounds"
        + (" (--smoke: tiny sizes, nothing written)" if args.smoke else ""))
    say(f"# model: CentreDetector(10 classes, width 32), torch.manual_seed({args.seed}), untrained, eval mode, "
        f"size-head bias log 12")

    peak = conv_peak_gflops(device, smoke=args.smoke)
    bf16_peak = conv_peak_gflops(device, torch.bfloat16, smoke=args.smoke) if args.bfloat16 else None
    flops = flops_per_input(model, torch.rand(2, c, VIEW, VIEW, device=device))
    for line in header(peak, flops, "window/s", device, bf16_peak):
        say(f"# {line}")

    windows = precrop(data, shifts).to(device)
    sizes = (4, 16) if args.smoke else FORWARD_SIZES
    best_b, by_size = best_batch(model, windows, sizes, device=device, rounds=1 if args.smoke else 2)
    say(f"# the model's forward alone by batch size (windows/s, pre-cropped): "
        + ", ".join(f"{b}: {r:,.0f}" for b, r in by_size.items()) + f"; best {best_b}")
    contexts_hwc = [np.ascontiguousarray(data.image(i).transpose(1, 2, 0)) for i in range(len(data))]
    gt_boxes = [data.target(i)["boxes"].astype(float).tolist() for i in range(len(data))]

    # warm-up (untimed): one context, a few shifts, every path
    warm = DetectionSet(data.items[:1], data.categories, data.data_id + ":warm-up")
    osc.evaluate(model, warm, osc.parse_orbit("window-shift:-4:4:4"), osc.Detection(), view_size=(VIEW, VIEW),
                 device=device)
    naive(model, contexts_hwc[:1], gt_boxes[:1], shifts[:8], device)

    first: dict[str, object] = {}
    attrs: dict[str, dict] = {}

    def ours_path(key: str, store: bool, **options):
        def run():
            n, seconds, values, run_attrs = ours(model, data, orbit, store, device, **options)
            first.setdefault(key, values)
            attrs.setdefault(key, run_attrs)
            return n, seconds
        return run

    def naive_path():
        n, seconds, conf, iou = naive(model, contexts_hwc, gt_boxes, shifts, device)
        first.setdefault("naive", (conf, iou))
        return n, seconds

    names = {"defaults": "evaluate, defaults, store=None (in memory)",
             "store": "evaluate, defaults, store=<temporary dir>",
             "off": "evaluate, optimize=False (the model as given)"}
    paths = {"defaults": ours_path("defaults", False), "store": ours_path("store", True),
             "off": ours_path("off", False, optimize=False)}
    if args.bfloat16:
        names["bf16"] = "evaluate, precision='bfloat16'"
        paths["bf16"] = ours_path("bf16", False, precision="bfloat16")
    names["forward"] = f"forward alone, pre-cropped, best batch {best_b}"
    paths["forward"] = lambda: forward_floor(model, windows, best_b, device)
    names["naive"] = "naive: numpy crop + batch-1 forward + Python IoU"
    paths["naive"] = naive_path
    rates = interleaved(paths, rounds, progress=round_progress(say, rounds, "windows/s"))

    say()
    rows = [Row(names[key], rates[key], flops) for key in paths]
    for line in format_table(rows, peak, "windows/s", reference=names["forward"], naive=names["naive"]).splitlines():
        say(line)
    say(f"evaluate's forward batch (defaults, first round): {describe_forward_batch(attrs['defaults'])}; "
        f"optimisation: {attrs['defaults'].get('optimization')}")

    # agreement (untimed), per context and shift, from the first round: the pipeline, (c) against
    # evaluate running the same model as given (optimize=False); then what optimisation changes
    def values(key: str) -> tuple[np.ndarray, np.ndarray]:
        return first[key]["confidence"].reshape(len(data), k), first[key]["iou"].reshape(len(data), k)

    o_conf, o_iou = values("off")
    a_conf, a_iou = values("defaults")
    c_conf, c_iou = first["naive"]
    nan_same = np.array_equal(np.isnan(o_iou), np.isnan(c_iou))
    d_conf = np.abs(o_conf - c_conf)
    d_iou = np.abs(np.nan_to_num(o_iou, nan=0.0) - np.nan_to_num(c_iou, nan=0.0))
    ok = bool(nan_same and d_conf.max() <= 1e-4 and d_iou.max() <= 1e-4)
    store_conf = first["store"]["confidence"].reshape(len(data), k)
    say()
    say(f"agreement (a, optimize=False) vs (c), {len(data)} contexts x {k} shifts, tolerance 1e-4: "
        f"{'OK' if ok else 'MISMATCH'}; max |d confidence| = {d_conf.max():.2e}, max |d IoU| = {d_iou.max():.2e}, "
        f"no-object-in-view (NaN IoU) pattern {'identical' if nan_same else 'DIFFERENT'} "
        f"({int(np.isnan(c_iou).sum())} windows); IoU > 0 in {int((np.nan_to_num(c_iou) > 0).sum())} windows, "
        f"mean IoU {np.nanmean(c_iou):.3f}, max {np.nanmax(c_iou):.3f}; (a) store vs in memory: max |d confidence| = "
        f"{np.abs(store_conf - a_conf).max():.2e}")
    if not ok:
        bad = np.argwhere((d_conf > 1e-4) | (d_iou > 1e-4))
        for i, e in bad[:5]:
            say(f"  context {i} shift {tuple(shifts[e])}: conf {o_conf[i, e]:.6f} vs {c_conf[i, e]:.6f}, "
                f"IoU {o_iou[i, e]:.6f} vs {c_iou[i, e]:.6f}")
    moved = np.abs(np.nan_to_num(a_iou, nan=0.0) - np.nan_to_num(o_iou, nan=0.0)) > 1e-4
    say(f"optimised (defaults) vs as given: max |d confidence| = {np.abs(a_conf - o_conf).max():.2e}; the top box "
        f"differs (|d IoU| > 1e-4) in {int(moved.sum())} of {moved.size} windows: where two boxes score equally to "
        "float rounding (this untrained detector scores every box near 0.10), folding BatchNorm may swap them")
    say(f"\n# total wall time {time.perf_counter() - started:.0f} s; load average (1 min) {load_before} before, "
        f"{_loadavg()} after (other processes share these cores)")

    write_results(args, _lines)
    if not ok:
        raise SystemExit("(a) and (c) disagree: see the agreement line")


if __name__ == "__main__":
    main()
