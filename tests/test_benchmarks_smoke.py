"""Every benchmark script runs in its ``--smoke`` mode (tiny sizes, seconds), so an API change that
breaks a benchmark fails the test suite instead of being found months later.

Each script runs as ``python benchmarks/X.py --smoke`` in a subprocess from the repository root,
two at a time (this machine has 2 cores); a test passes when its script exits with 0 and printed
its table (a line only the table has), and nothing was written under ``benchmarks/results/``.
Scripts that need something this environment lacks are skipped with the reason: ``lazy_backend``
(zarr and dask, the ``bench`` extra), ``scale_out`` (Ray), ``ml4ml_lee`` (a trained zoo and its LEE
features: ``make study`` and ``make study-lee``, about 70 minutes).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "benchmarks"
RESULTS = BENCH / "results"
TIMEOUT_S = 300  # per script; the smoke runs take seconds on a quiet machine
ZOO_HOME, ZOO_LEE = ROOT / "study-runs", ROOT / "study-runs" / "ml4ml_lee.npz"

#: script -> (a line only its table prints, extra arguments)
SCRIPTS: dict[str, tuple[str, list[str]]] = {
    "classification_fingerprint": ('"run_id"', []),
    "detection_counting": ("COCO-style precision / recall / F1", []),
    "detection_jitter": ("AP@0.5 centre", []),
    "detection_throughput": ("agreement (a, optimize=False) vs (c)", []),
    "flow_throughput": ("agreement (a) vs (c)", []),
    "interface_latency": ("median ms", []),
    "lazy_backend": ("time: best ms", []),
    "lee_cost": ("LEE / orbit =", []),
    "memory_budget": ("RSS+ small", []),
    "ml4ml_lee": ("assessors on ML4ML matrices vs LEE vs both", ["--home", str(ZOO_HOME), "--lee", str(ZOO_LEE)]),
    "orbit_throughput": ("evaluate, defaults (optimize='auto')", []),
    "pointcloud_throughput": ("agreement (a) vs (c)", []),
    "profile_tasks": ("around/model", []),
    "robust_queries": ("all targets met", []),
    "scale_out": ("chunk writes/s", []),
    "stats_validity": ("time per section", []),
}
#: the throughput benchmarks print the roofline table (benchmarks/roofline.py)
ROOFLINE = {"detection_throughput", "flow_throughput", "lee_cost", "orbit_throughput", "pointcloud_throughput"}


def missing(script: str) -> str | None:
    """Why ``script`` cannot run here, or None."""
    needs = {"lazy_backend": ("zarr", "dask"), "scale_out": ("ray",)}.get(script, ())
    absent = [m for m in needs if importlib.util.find_spec(m) is None]
    if absent:
        return f"benchmarks/{script}.py needs {', '.join(absent)} (pip install -e '.[bench]' / '.[ray]')"
    if script == "ml4ml_lee" and not ZOO_LEE.exists():
        return f"benchmarks/ml4ml_lee.py needs a trained zoo and its LEE features in {ZOO_HOME} (make study study-lee)"
    return None


def results_state() -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(RESULTS)): (p.stat().st_mtime_ns, p.stat().st_size)
            for p in RESULTS.rglob("*") if p.is_file()}


def run_script(script: str) -> tuple[subprocess.CompletedProcess[str] | None, float, str]:
    """Run one script's smoke mode: (the finished process or None on timeout, seconds, output)."""
    cmd = [sys.executable, str(BENCH / f"{script}.py"), "--smoke", *SCRIPTS[script][1]]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONWARNINGS": "ignore"}
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=TIMEOUT_S, env=env)
    except subprocess.TimeoutExpired as exc:
        out = (exc.stdout or b"").decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        return None, time.perf_counter() - t0, out
    return proc, time.perf_counter() - t0, proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def smoke_runs():
    """Every runnable script started once, two at a time; the results directory's state before."""
    before = results_state()
    pool = ThreadPoolExecutor(max_workers=2)
    futures: dict[str, Future] = {s: pool.submit(run_script, s) for s in SCRIPTS if missing(s) is None}
    yield futures, before
    pool.shutdown(wait=True)


def test_every_benchmark_has_a_smoke_test():
    scripts = {p.stem for p in BENCH.glob("*.py")} - {"roofline"}
    assert scripts == set(SCRIPTS), ("add the new benchmark to SCRIPTS (with a --smoke mode) or remove the stale "
                                     f"entry: {sorted(scripts ^ set(SCRIPTS))}")


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_benchmark_smoke(script, smoke_runs):
    reason = missing(script)
    if reason is not None:
        pytest.skip(reason)
    futures, _ = smoke_runs
    proc, seconds, out = futures[script].result()
    assert proc is not None, f"benchmarks/{script}.py --smoke ran past {TIMEOUT_S} s:\n{out[-3000:]}"
    assert proc.returncode == 0, f"benchmarks/{script}.py --smoke failed (rc {proc.returncode}):\n{out[-4000:]}"
    marker = SCRIPTS[script][0]
    assert marker in proc.stdout, f"benchmarks/{script}.py --smoke did not print its table ({marker!r}):\n{out[-3000:]}"
    if script in ROOFLINE:
        assert "measured float32 peak (best large conv)" in proc.stdout and "of peak" in proc.stdout, proc.stdout[-3000:]
        assert "/forward" in proc.stdout, proc.stdout[-3000:]


def test_smoke_runs_write_nothing_under_results(smoke_runs):
    futures, before = smoke_runs
    for f in futures.values():
        f.result()
    assert results_state() == before, "a --smoke run wrote under benchmarks/results/ (smoke runs must print only)"
