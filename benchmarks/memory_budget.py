"""Peak memory of evaluate, aggregate, report and a cold interface page load at two sizes 10× apart.

Each measurement runs in a fresh process: the data and every library are loaded first and the
operation is warmed up on a tiny run of 8 samples × 2 elements (so imports and first-call caches
are not counted, but the buffers of a full chunk are), then the
peak-RSS counter is reset (``/proc/self/clear_refs``; Linux only) and the operation runs. "Added"
is the peak RSS during the operation minus the RSS just before it. Two families of sizes:

  samples   Fashion-MNIST training images ×  4 rotations: 6,000 vs 60,000 images;
  elements  1,000 MNIST digits × rotations:                73 vs 730 angles.

Operations, on the same stores:

  evaluate   ``osc.evaluate`` of a small CNN into a fresh store (inputs stored as uint8);
  aggregate  a cold ``Store.load`` + ``aggregate`` of ``correct``, ``confidence`` and
             ``correct`` by label + ``summary`` (the store's aggregate cache cleared first);
  report     ``write_report`` of the run (cache cleared first);
  interface  a cold page load: a fresh ``AppData`` and every callback the page triggers
             (``benchmarks/interface_latency.Session.load``), cache cleared first.

Rounds are interleaved (small, large, small, large, ...); the best (lowest) added memory of each
is kept and the spread over rounds printed. Each operation then runs a second time under
``tracemalloc``: its traced peak counts the Python and numpy allocations of the operation alone
(exact, not blurred by memory the allocator kept from earlier work; torch's own allocations, i.e.
the model's activations inside ``evaluate``, are not traced: RSS covers them). Also timed: loading one aggregate (accuracy per
element) of the 60,000-sample run from the store, cold (computed from the chunks) and cached.

Usage: python benchmarks/memory_budget.py [--repeats 2] [--ops evaluate aggregate report interface]
       [--families samples elements] [--out benchmarks/results/memory_budget.txt] [--smoke]
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH_DIR = Path(__file__).parent

_CHILD = r"""
import json, sys, time, tempfile, logging
import numpy as np, torch
from torch import nn
sys.path.insert(0, {bench_dir!r})
import orbitscope as osc
from orbitscope.data.datasets import fashion_mnist, mnist_subset
from orbitscope.viz.report import write_report
from interface_latency import Session
from orbitscope.app import AppData
import sklearn.decomposition, plotly.graph_objects  # noqa: F401  (imported before the measurement)
logging.disable(logging.WARNING)
torch.set_num_threads(1)
ops, family, size, home = sys.argv[1].split(","), sys.argv[2], int(sys.argv[3]), sys.argv[4]

def status(field):
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(field)

def model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(1, 8, 5, stride=2), nn.ReLU(), nn.Conv2d(8, 8, 3, stride=2), nn.ReLU(),
                         nn.Flatten(), nn.Linear(8 * 5 * 5, 10)).eval()

def job(n):
    if family == "samples":
        data = fashion_mnist("train")
        return (data.subset(range(n)) if n < len(data) else data), osc.Rotation([0, 90, 180, 270])
    return mnist_subset("all").stratified(100), osc.Rotation(np.linspace(0.0, 360.0, n))

def evaluate(home, data, orbit):
    return osc.evaluate(model(), data, orbit, store=home, name=f"{{family}}-{{size}}", batch_size=256)

def aggregate(store, run_id):
    res = store.load(run_id)
    res.aggregate("correct"); res.aggregate("confidence"); res.aggregate("correct", by="label"); res.summary()

def report(store, run_id, out):
    write_report([store.load(run_id)], out)

def interface(store, run_id):
    data = AppData(store)
    group = next(g for g in data.groups() if run_id in [r.run_id for r in g.runs])
    Session(data, group.key, [run_id]).load()

# per operation (one per process in a full run; --smoke runs them all in one process): a warm-up
# on a tiny run (imports, first-call caches), then the measurement
for op in ops:
    with tempfile.TemporaryDirectory() as tiny:
        d, o = job(size)
        warm = evaluate(tiny, d.subset(range(8)), osc.Rotation([0, 90]))  # 16 inputs: no chunk-sized buffers
        st = osc.Store(tiny)
        {{"aggregate": lambda: aggregate(st, warm.run_id), "report": lambda: report(st, warm.run_id, tiny + "/r.html"),
          "interface": lambda: interface(st, warm.run_id), "evaluate": lambda: None}}[op]()
    if op != "evaluate":
        store = osc.Store(home)
        run_id = store.runs()[0].run_id
    def measured():
        extra = {{}}
        t0 = time.perf_counter()
        if op == "evaluate":
            import shutil
            shutil.rmtree(home, ignore_errors=True)
            extra["n"] = evaluate(home, d, o).result.n_samples
        elif op == "aggregate":
            store.clear_cache(run_id)
            aggregate(store, run_id)
            extra["cold_s"] = time.perf_counter() - t0
            t1 = time.perf_counter()
            osc.Store(home).load(run_id).aggregate("correct")
            extra["cached_s"] = time.perf_counter() - t1
        elif op == "report":
            store.clear_cache(run_id)
            report(store, run_id, home + "/report.html")
        else:
            store.clear_cache(run_id)
            interface(store, run_id)
        extra["seconds"] = time.perf_counter() - t0
        return extra

    with open("/proc/self/clear_refs", "w") as fh:  # RSS: everything (torch too), peak reset here
        fh.write("5")
    before = status("VmRSS")
    row = measured()
    row.update(before_mb=before, peak_mb=status("VmHWM"))
    import gc, tracemalloc  # then the same again, traced: Python and numpy allocations only, exact
    gc.collect()
    tracemalloc.start()
    traced = measured()
    row["traced_peak_mb"] = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    row["op"] = op
    print(json.dumps(row))
"""

FAMILIES = {"samples": (6000, 60000), "elements": (73, 730)}
OPS = ("evaluate", "aggregate", "report", "interface")


def child(ops: list[str], family: str, size: int, home: Path) -> dict[str, dict]:
    """The rows of ``ops`` measured one after the other in one fresh process."""
    code = _CHILD.format(bench_dir=str(BENCH_DIR))
    out = subprocess.run([sys.executable, "-c", code, ",".join(ops), family, str(size), str(home)],
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"{ops} {family} {size} failed:\n{out.stderr[-3000:]}")
    rows = {}
    for line in out.stdout.strip().splitlines()[-len(ops):]:
        row = json.loads(line)
        row["added_mb"] = row["peak_mb"] - row["before_mb"]
        rows[row["op"]] = row
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=2, help="interleaved rounds; the best of each is kept")
    ap.add_argument("--out", type=Path, default=BENCH_DIR / "results" / "memory_budget.txt")
    ap.add_argument("--ops", nargs="+", choices=OPS, default=list(OPS), help="operations to measure (default: all)")
    ap.add_argument("--families", nargs="+", choices=list(FAMILIES), default=list(FAMILIES))
    ap.add_argument("--smoke", action="store_true", help="1,000 digits x 2 and 3 angles only, one round, every "
                    "operation in one process per size, nothing written (the test suite runs this)")
    args = ap.parse_args()
    families = {"elements": (2, 3)} if args.smoke else FAMILIES
    if args.smoke:
        args.repeats, args.families, args.out = 1, ["elements"], None
    ops = [op for op in OPS if op in args.ops]
    if ops and ops[0] != "evaluate":
        ops = ["evaluate", *ops]  # the other operations read the store evaluate writes
    results: dict[tuple[str, str, int], list[dict]] = {}
    lines: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeats):
            for family, sizes in families.items():
                if family not in args.families:
                    continue
                for size in sizes:
                    home = Path(tmp) / f"{family}-{size}-{r}"
                    got = child(ops, family, size, home) if args.smoke else \
                        {op: child([op], family, size, home)[op] for op in ops}
                    for op, row in got.items():
                        results.setdefault((op, family, size), []).append(row)
                        print(f"round {r + 1}: {op:9s} {family:8s} {size:6d}: added {row['added_mb']:7.1f} MB "
                              f"in {row['seconds']:6.1f} s", flush=True)
    lines.append(f"# python benchmarks/memory_budget.py {' '.join(sys.argv[1:])}   ({time.strftime('%Y-%m-%d %H:%M')} UTC, "
                 f"python {platform.python_version()}, {args.repeats} interleaved rounds)")
    lines.append("# RSS+ = MiB of peak RSS added by the operation (best of rounds; spread = max - min); traced = MiB "
                 "traced peak (tracemalloc: Python + numpy allocations of the operation itself)")
    lines.append(f"{'operation':10s} {'family':9s} {'small':>6s} {'large':>6s} | {'RSS+ small':>10s} {'large':>7s} "
                 f"{'ratio':>6s} {'spread':>11s} | {'traced small':>12s} {'large':>7s} {'ratio':>6s} | "
                 f"{'s small':>7s} {'s large':>7s}")
    for op in ops:
        for family, (a, b) in families.items():
            if family not in args.families:
                continue
            ra, rb = results[(op, family, a)], results[(op, family, b)]
            ma, mb = min(x["added_mb"] for x in ra), min(x["added_mb"] for x in rb)
            spread = (max(x["added_mb"] for x in ra) - ma, max(x["added_mb"] for x in rb) - mb)
            ta, tb = min(x["traced_peak_mb"] for x in ra), min(x["traced_peak_mb"] for x in rb)
            lines.append(f"{op:10s} {family:9s} {a:6d} {b:6d} | {ma:10.1f} {mb:7.1f} {mb / max(ma, 0.1):6.2f} "
                         f"{spread[0]:5.1f}/{spread[1]:5.1f} | {ta:12.1f} {tb:7.1f} {tb / max(ta, 0.1):6.2f} | "
                         f"{min(x['seconds'] for x in ra):7.1f} {min(x['seconds'] for x in rb):7.1f}")
    agg = results.get(("aggregate", "samples", 60000))
    if agg:
        lines.append(f"one aggregate (accuracy per element) of the 60,000-sample run: cold (with correct, confidence, "
                     f"by label, summary) {min(x['cold_s'] for x in agg):.2f} s; cached "
                     f"{1000 * min(x['cached_s'] for x in agg):.1f} ms (open + read from the catalog)")
    text = "\n".join(lines)
    print("\n" + text)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
