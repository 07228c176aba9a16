"""Where an evaluation's time goes, per task: the model's forward, reading its outputs, and the
work around the model (transforms, window cuts, box and flow actions, IoU, EPE, consensus,
writes), with the top costs from a profile.

For each task, on the inputs and model of its throughput benchmark (classification: NeroCNN on
MNIST digits × 72 rotations; detection: CentreDetector on key-object windows × 1,024 shifts; flow:
FlowCNN on 64² pairs × D4 × time reversal; point clouds: PointNet on clouds × NERO's SO(3) sample),
``osc.evaluate`` runs with its defaults, in memory, after a warm-up run:

1. timed, with ``ModelCall.forward`` wrapped to split the time spent inside the model from the
   time spent reading its outputs (``Task.read_outputs``: e.g. decoding detections), and the
   first-batch check's two forwards (from the run's attrs) apart; everything else is the work
   around the model. The share of the model is the number issue 35 asks about
   ("the work around the model together ≤ 10 % of the forward": the ``around/model`` column);
2. under ``cProfile``, printing the functions with the largest own time (``tottime``), the
   model's convolutions included, so the top costs around the model can be read off.

The profile's own overhead inflates Python-heavy code; the split of (1) is measured without it.
Run it on another checkout with ``PYTHONPATH=<that checkout>/src`` to compare before and after.

Usage: python benchmarks/profile_tasks.py [--tasks classification,detection,flow,pointcloud] [--top 8]
       [--smoke] [--out benchmarks/results/profile_tasks.txt]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import platform
import pstats
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

import orbitscope as osc
from orbitscope.engine.model_call import ModelCall

sys.path.insert(0, str(Path(__file__).resolve().parent))
from roofline import write_results  # noqa: E402

TASKS = ("classification", "detection", "flow", "pointcloud")
_lines: list[str] = []


def say(text: str = "") -> None:
    print(text, flush=True)
    _lines.append(text)


def classification_case(smoke: bool) -> tuple[str, Callable[[], Any], int]:
    from orbit_throughput import ANGLES, trained_like

    from orbitscope.data.datasets import mnist_subset
    from orbitscope.models import NeroCNN

    data = mnist_subset("test").stratified(1 if smoke else 20)
    model = trained_like(NeroCNN())
    orbit = osc.Rotation(ANGLES[:4] if smoke else ANGLES)
    return (f"classification: NeroCNN, {len(data)} MNIST digits x {orbit.size} rotations",
            lambda: osc.evaluate(model, data, orbit), len(data) * orbit.size)


def detection_case(smoke: bool) -> tuple[str, Callable[[], Any], int]:
    from detection_throughput import ORBIT, SMOKE_ORBIT, VIEW, make_contexts, make_model

    data = make_contexts(1 if smoke else 4)
    model = make_model(0)
    orbit = osc.parse_orbit(SMOKE_ORBIT if smoke else ORBIT)
    return (f"detection: CentreDetector, {len(data)} key-object contexts x {orbit.size} windows {VIEW}x{VIEW}",
            lambda: osc.evaluate(model, data, orbit, osc.Detection(), view_size=(VIEW, VIEW)),
            len(data) * orbit.size)


def flow_case(smoke: bool) -> tuple[str, Callable[[], Any], int]:
    from flow_throughput import make_pairs

    from orbitscope.models import FlowCNN

    n, size = (2, 32) if smoke else (256, 64)
    frames, flows = make_pairs(n, size)
    torch.manual_seed(0)
    model = FlowCNN().eval()
    return (f"flow: FlowCNN, {n} pairs {size}x{size} x 16 elements (d4xt)",
            lambda: osc.evaluate(model, (frames, flows), "d4xt", osc.Flow(maps=())), n * 16)


def pointcloud_case(smoke: bool) -> tuple[str, Callable[[], Any], int]:
    from pointcloud_throughput import make_clouds

    from orbitscope.group.parse import parse_orbit
    from orbitscope.models.point_nets import PointNet
    from orbitscope.tasks import PointCloudClassification

    clouds, labels = make_clouds(1 if smoke else 8, 32 if smoke else 512)
    torch.manual_seed(0)
    model = PointNet(4).eval()
    orbit = parse_orbit("octahedral" if smoke else "so3:nero")
    return (f"point clouds: PointNet, {len(clouds)} clouds x {clouds.shape[1]} points x {orbit.size} elements",
            lambda: osc.evaluate(model, (clouds, labels), orbit, PointCloudClassification()),
            len(clouds) * orbit.size)


CASES = {"classification": classification_case, "detection": detection_case, "flow": flow_case,
         "pointcloud": pointcloud_case}


class ForwardClock:
    """Wraps ``ModelCall.forward`` while active: seconds inside the model, and reading its outputs."""

    def __init__(self) -> None:
        self.model = self.read = 0.0
        self.original = ModelCall.forward

    def __enter__(self) -> "ForwardClock":
        original, clock = self.original, self

        def forward(call: ModelCall, x: torch.Tensor) -> Any:
            read = call.read
            call.read = lambda raw: raw
            try:
                t0 = time.perf_counter()
                raw = original(call, x)
                t1 = time.perf_counter()
            finally:
                call.read = read
            out = read(raw)
            clock.model += t1 - t0
            clock.read += time.perf_counter() - t1
            return out

        ModelCall.forward = forward  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: Any) -> None:
        ModelCall.forward = self.original  # type: ignore[method-assign]


def optimisation_check(attrs: dict[str, Any]) -> float:
    """Seconds of the first-batch check's two forwards recorded in a run's attrs (0 if none)."""
    import json

    record = attrs.get("optimization")
    record = json.loads(record) if isinstance(record, str) else (record or {})
    check = record.get("check") or {}
    return float(check.get("original_seconds") or 0.0) + float(check.get("optimized_seconds") or 0.0)


def top_costs(run: Callable[[], Any], top: int) -> list[str]:
    """The ``top`` functions by own time under cProfile, as lines (seconds, share, calls, where)."""
    profile = cProfile.Profile()
    profile.enable()
    run()
    profile.disable()
    stats = pstats.Stats(profile, stream=io.StringIO())
    total = sum(v[2] for v in stats.stats.values())  # type: ignore[attr-defined]
    rows = sorted(stats.stats.items(), key=lambda kv: kv[1][2], reverse=True)[:top]  # type: ignore[attr-defined]
    out = []
    for (path, line, name), (_cc, calls, own, _cum, _callers) in rows:
        where = name if path == "~" else f"{Path(path).name}:{line}:{name}"
        if "site-packages" in path or "/lib/python" in path:
            where = f"{Path(path).parent.name}/{where}"
        out.append(f"    {own:8.3f} s {100 * own / max(total, 1e-12):5.1f} %  {calls:>8,}  {where}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", default=",".join(TASKS), help="comma-separated: " + ", ".join(TASKS))
    ap.add_argument("--top", type=int, default=8, help="functions listed per task")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes, nothing written (the test suite runs this)")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "profile_tasks.txt"),
                    help="also write the output here ('' = print only)")
    args = ap.parse_args()
    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    unknown = sorted(set(tasks) - set(TASKS))
    if unknown:
        ap.error(f"unknown task(s) {', '.join(unknown)}; choose from {', '.join(TASKS)}")
    started = time.perf_counter()
    src = Path(osc.__file__).resolve().parent.parent
    say(f"# command: python {' '.join(sys.argv)}")
    say(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; orbitscope from {src}; torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads; python {platform.python_version()}; {os.cpu_count()} CPUs"
        + (" (--smoke: tiny sizes, nothing written)" if args.smoke else ""))
    say(f"{'task':<16}{'inputs':>9}{'total s':>9}{'check s':>9}{'model s':>9}{'read s':>8}{'around s':>10}"
        f"{'around/model':>14}{'inputs/s':>10}")
    details: list[str] = []
    for task in tasks:
        title, run, n_inputs = CASES[task](args.smoke)
        run()  # warm-up: kernel selection, allocation, lazily built tables
        with ForwardClock() as clock:
            t0 = time.perf_counter()
            result = run()
            total = time.perf_counter() - t0
        attrs = result.result.attrs
        check = optimisation_check(attrs)
        model = clock.model - check  # the check's two forwards (original and optimised model) apart
        around = total - check - model - clock.read
        fb = attrs.get("forward_batch")
        say(f"{task:<16}{n_inputs:>9,}{total:>9.2f}{check:>9.2f}{model:>9.2f}{clock.read:>8.2f}{around:>10.2f}"
            f"{100 * (around + clock.read) / max(model, 1e-12):>13.1f}%{n_inputs / total:>10,.0f}")
        details += ["", f"{title}; forward batch {fb}; top own times under cProfile:",
                    *top_costs(run, args.top)]
    say("(check: the first-batch check's two forwards, from the run's attrs; around/model: reading the outputs and "
        "everything around the model, as a share of the model's own time in the run)")
    for line in details:
        say(line)
    say(f"# total wall time {time.perf_counter() - started:.0f} s")
    write_results(args, _lines)


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
