"""Scale-out on Ray, measured side by side in one run: the same sweep on 1 and 2 Ray workers, the
overhead per chunk job, and how many chunk writes per second the single writer sustains.

The sweep: 2 small CNNs (seeded, untrained: timing only) × 2 orbits (rotation by 15°, 24
elements; shifts by 2 px, 81 elements) on 400 MNIST test digits in chunks of 50 = 4 runs, 32
chunk jobs. Every path uses one torch thread per job, so the 1- and 2-worker times differ only
by parallelism. Paths, in interleaved rounds (each into a fresh store):

  (a) local: ``osc.sweep(..., executor="local")`` in this process (the plain baseline: no
      shipping, no scheduling);
  (b) Ray, 1 worker: ``RayExecutor(num_cpus=1, in_flight=1)`` on a 2-CPU local Ray: one job at a
      time (each waits for the previous one's result, so every round trip is on the clock);
  (c) Ray, 2 workers: ``RayExecutor(num_cpus=1)``, two jobs at a time (up to 4 in flight).

Both Ray paths use the same kind of task, so they share the same two worker processes (a task
of another CPU count would start other workers, whose start-up lands inside the timing).

Speed-up = time(b) / time(c); overhead per chunk job = (time(b) − time(a)) / 32, i.e. what Ray
adds to each job (submission, shipping the result back, scheduling) over running it in place,
and, directly, the round trip of an empty job through ``RayExecutor.map`` (jobs/s).

The writer: ``Store.write_chunk`` of real chunk arrays (one chunk of run (a): 50 samples × 24
elements, 7 variables; and a NERO-sized one: 64 samples × 2,847 elements), N times in a row into
a fresh run: chunk writes per second and MB/s (every file is fsynced, as in a run). With the
rate at which one worker produces chunks, this says how many workers one writer can keep up
with (see docs/scaling.md).

Usage: python benchmarks/scale_out.py [--rounds 3] [--out benchmarks/results/scale_out.txt] [--smoke]
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

import orbitscope as osc
from orbitscope.data.specs import parse_data_spec
from orbitscope.engine.ray_executor import RayExecutor
from orbitscope.engine.sweep import SweepRun, sweep
from orbitscope.models.registry import build_model
from orbitscope.results.store import Store

SMALL = {"arch": "small_cnn", "in_channels": 1, "num_classes": 10, "widths": [8, 16, 32], "hidden": 64}
N_SAMPLES, CHUNK = 400, 50
ORBITS = ("rotation:0:360:15", "shift:-8:8:2")
_lines: list[str] = []


def say(text: str = "") -> None:
    print(text, flush=True)
    _lines.append(text)


def runs() -> list[SweepRun]:
    data = parse_data_spec(f"mnist-subset:test@{N_SAMPLES}")
    out = []
    for seed in (0, 1):
        torch.manual_seed(seed)
        model = build_model(SMALL)
        out += [SweepRun(model, data, orbit, model_name=f"cnn{seed}", options={"batch_size": CHUNK}) for orbit in ORBITS]
    return out


def n_jobs() -> int:
    return len(ORBITS) * 2 * (-(-N_SAMPLES // CHUNK))


def cpu_ticks() -> tuple[int, int]:
    """(all, steal) CPU ticks since boot (/proc/stat): the share a shared VM's host took back."""
    fields = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return sum(fields[:8]), fields[7]


def timed_sweep(executor: object, plan: list[SweepRun]) -> float:
    home = Path(tempfile.mkdtemp(prefix="scale-out-"))
    try:
        t0 = time.perf_counter()
        result = sweep(plan, store=home, executor=executor)
        seconds = time.perf_counter() - t0
        assert all(o.status == "done" for o in result.outcomes), [o.error for o in result.outcomes]
        return seconds
    finally:
        shutil.rmtree(home, ignore_errors=True)


def empty_job(job: int, context: object) -> int:
    return job


def empty_job_rate(executor: RayExecutor, n: int = 400) -> float:
    t0 = time.perf_counter()
    for _ in executor.map(empty_job, range(n), None):
        pass
    return n / (time.perf_counter() - t0)


def writer_rate(arrays: dict[str, np.ndarray], n: int) -> tuple[float, float]:
    """Chunk writes per second and MB/s for ``n`` writes of ``arrays`` into a fresh store."""
    home = Path(tempfile.mkdtemp(prefix="scale-out-writer-"))
    try:
        store = Store(home)
        layout = {"orbit_dims": ["e"], "orbit_shape": [1], "coords": {"e": [0]}, "variables": {}}
        store.create_run("bench", name="bench", model_id="m", data_id="d", orbit={"kind": "x"}, task={"kind": "x"},
                         attrs={}, n_samples=None, chunk_size=len(next(iter(arrays.values()))), layout=layout)
        size = sum(a.nbytes for a in arrays.values())
        t0 = time.perf_counter()
        for i in range(n):
            store.write_chunk("bench", i, i * CHUNK, arrays)
        seconds = time.perf_counter() - t0
        return n / seconds, n * size / seconds / 1e6
    finally:
        shutil.rmtree(home, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default=None)
    ap.add_argument("--smoke", action="store_true", help="100 samples, one round, few writes, nothing written "
                    "(the test suite runs this)")
    args = ap.parse_args()
    global N_SAMPLES
    if args.smoke:
        N_SAMPLES, args.rounds, args.out = 100, 1, None
    started = time.perf_counter()
    torch.set_num_threads(1)
    import ray

    say(f"# scale_out.py — {platform.node()}, {os.cpu_count()} CPUs, python {platform.python_version()}, "
        f"torch {torch.__version__}, ray {ray.__version__}, orbitscope {osc.__version__}")
    say(f"# sweep: 2 models × {len(ORBITS)} orbits ({', '.join(ORBITS)}), {N_SAMPLES} samples in chunks of {CHUNK}: "
        f"{n_jobs()} chunk jobs; 1 torch thread per job")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="WARNING")
    plan = runs()
    paths = {"a": "local", "b": RayExecutor(num_cpus=1, threads=1, in_flight=1),
             "c": RayExecutor(num_cpus=1, threads=1)}
    timed_sweep(paths["c"], plan)  # warm-up: start the workers, land the contexts (not counted)
    times: dict[str, list[float]] = {k: [] for k in paths}
    ticks0 = cpu_ticks()
    for r in range(args.rounds):
        order = list(paths)[r % 3:] + list(paths)[: r % 3]
        for k in order:
            times[k].append(timed_sweep(paths[k], plan))
        say(f"round {r + 1}: " + ", ".join(f"{k} {times[k][-1]:.2f} s" for k in paths))
    ticks1 = cpu_ticks()
    steal = (ticks1[1] - ticks0[1]) / max(1, ticks1[0] - ticks0[0])
    rates = [empty_job_rate(paths["c"], 20 if args.smoke else 400) for _ in range(args.rounds)]
    best = {k: min(v) for k, v in times.items()}
    names = {"a": "a: local executor, in this process", "b": "b: Ray, 1 job at a time (in_flight=1)",
             "c": "c: Ray, 2 workers (num_cpus=1, 2 jobs at a time)"}
    say()
    say(f"{'path':50s} {'best s':>7s} {'spread s':>13s} {'jobs/s':>7s}")
    for k, name in names.items():
        say(f"{name:50s} {best[k]:7.2f} {min(times[k]):6.2f}-{max(times[k]):<6.2f} {n_jobs() / best[k]:7.1f}")
    say()
    say(f"CPU time taken by the host (steal) during the rounds: {100 * steal:.0f} %")
    say(f"speed-up 2 vs 1 Ray worker = {best['b'] / best['c']:.2f}   (median {statistics.median(times['b']) / statistics.median(times['c']):.2f})")
    say(f"ratio Ray 1 worker / local = {best['b'] / best['a']:.2f}   ratio Ray 2 workers / local = {best['c'] / best['a']:.2f}")
    say(f"overhead per chunk job (b − a) / {n_jobs()} = {(best['b'] - best['a']) / n_jobs() * 1000:.1f} ms "
        f"(a chunk job itself: {best['a'] / n_jobs() * 1000:.1f} ms in place); from medians "
        f"{(statistics.median(times['b']) - statistics.median(times['a'])) / n_jobs() * 1000:.1f} ms")
    say(f"empty job round trip through RayExecutor.map: best {max(rates):.0f} jobs/s, spread {min(rates):.0f}-{max(rates):.0f} "
        f"({1000 / max(rates):.1f} ms per job, 2 workers)")
    ray.shutdown()

    # the single writer
    data = parse_data_spec(f"mnist-subset:test@{CHUNK}")
    torch.manual_seed(0)
    real = osc.evaluate(build_model(SMALL), data, ORBITS[0], batch_size=CHUNK).result
    small = {v: np.ascontiguousarray(real[v].values) for v in real.data_vars}
    rng = np.random.default_rng(0)
    nero = {"confidence": rng.random((64, 2847), dtype=np.float32),
            "prediction": rng.integers(0, 10, (64, 2847)).astype(np.int64),
            "correct": rng.random((64, 2847)) < 0.5, "top1_confidence": rng.random((64, 2847), dtype=np.float32),
            "entropy": rng.random((64, 2847), dtype=np.float32), "label": rng.integers(0, 10, 64).astype(np.int64)}
    say()
    for name, arrays, n in (("classification chunk, 50 × 24 elements", small, 5 if args.smoke else 200),
                            ("NERO-sized chunk, 64 × 2,847 elements", nero, 3 if args.smoke else 60)):
        got = [writer_rate(arrays, n) for _ in range(args.rounds)]
        per_s = [g[0] for g in got]
        size = sum(a.nbytes for a in arrays.values()) / 1e6
        say(f"writer, {name} ({len(arrays)} arrays, {size:.2f} MB): best {max(per_s):.0f} chunk writes/s "
            f"(spread {min(per_s):.0f}-{max(per_s):.0f}), {max(g[1] for g in got):.1f} MB/s")
    say(f"# total wall time {time.perf_counter() - started:.0f} s")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text("\n".join(_lines) + "\n")
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
