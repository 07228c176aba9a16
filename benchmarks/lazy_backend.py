"""Lazy-array backends for stored results, side by side in one run: ours vs Zarr v3 vs dask.

The same synthetic run (``--samples`` × ``--elements`` float32 ``confidence`` values, seeded
``np.random.default_rng(0)``, chunks of 256 samples) is stored three ways (ours, two Zarr
arrays) and read back five ways:

* ``orbitscope``  ``osc.Store(home).load(run_id)``: memory-mapped ``.npy`` chunks
  (``RowChunkedArray``) behind xarray's lazy indexing; selections on ``.data["confidence"]``;
  the mean is ``osc.aggregate(result, "confidence")`` (one streaming pass, also variances and
  t intervals) after ``store.clear_cache(run_id)``, so it is computed, not served from the cache;
* ``zarr-raw``    a Zarr v3 array in a local directory, chunks (256, elements), ``compressors=None``;
* ``zarr-zstd``   the same with zarr's default compression (zstd); both read with zarr directly,
  the mean by iterating over the zarr chunks (float64 sums);
* ``dask-npy``    dask over our own chunk files: ``concatenate([from_array(np.load(f,
  mmap_mode="r"), chunks=-1) ...])``, threaded scheduler, ``.mean(axis=0)`` chunk-wise. Note that
  ``from_array`` copies its argument (``x.copy()``), so this reads every chunk into memory at
  ``open`` and the later operations work on memory, not on the files;
* ``dask-delayed`` a lazy dask over the same files: ``from_delayed(delayed(np.load)(f,
  mmap_mode="r"), ...)`` per chunk, so each task maps its file when it runs.

Operations: ``open``; one orbit element for all samples (``[:, elements // 2]``); a contiguous
range of 1,000 samples (from the middle); 100 scattered samples (sorted, seeded positions); the
mean over samples of every element; a full load into memory. Each (backend, operation) runs in a
fresh subprocess so its peak RSS is clean: the child imports numpy, xarray, zarr and dask (and
orbitscope, which pulls in torch, only where measured; with dask installed, xarray imports it
on the first lazy array it wraps, so importing it first keeps that out of ``open``), reads every file of the backend once (warm-up, so all backends are
measured with a warm page cache: dropping it needs root), opens the data (except for ``open``
itself), resets the peak with ``/proc/self/clear_refs``, then times the operation and reports
``VmHWM − VmRSS`` (peak RSS added; memory-mapped file pages that are touched count too).
Rounds are interleaved (round → backend → operation); the table gives the best time, the
spread (max − min) over rounds and the best peak added. Every child's answer is checked
against the in-memory array. orbitscope verifies each chunk's CRC-32 the first time a process
reads it, so its (first-read) times include that; the others verify nothing.

Usage: python benchmarks/lazy_backend.py [--repeats 3] [--samples 60000] [--elements 73] [--smoke]
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

RUN_ID, CHUNK = "ab12cd34ef56ab78", 256
BACKENDS = ["orbitscope", "zarr-raw", "zarr-zstd", "dask-npy", "dask-delayed"]
OPS = ["open", "column", "range", "scattered", "mean", "full"]
OP_LABEL = {"open": "open", "column": "one element, all samples", "range": "1,000 contiguous samples",
            "scattered": "100 scattered samples", "mean": "mean over samples", "full": "full load"}
CHILD_CODE = "import sys; sys.path.insert(0, sys.argv[1]); from lazy_backend import child; child(*sys.argv[2:])"


def positions(n: int) -> tuple[slice, np.ndarray]:
    """The contiguous range and the scattered samples every backend reads."""
    a = max(n // 2 - 500, 0)
    return slice(a, min(a + 1000, n)), np.sort(np.random.default_rng(1).choice(n, min(100, n), replace=False))


def data_dir(work: Path, backend: str) -> Path:
    if backend.startswith("dask"):
        return work / "store" / "runs" / RUN_ID / "confidence"
    return work / "store" if backend == "orbitscope" else work / backend


def backend_ops(backend: str, work: Path, n: int, e: int) -> tuple[Callable, dict[str, Callable]]:
    """``(open, {op: fn(handle)})`` for one backend (imports its libraries)."""
    rng, idx = positions(n)
    col = e // 2
    if backend == "orbitscope":
        import orbitscope as osc

        def open_():
            st = osc.Store(work / "store")
            return st, st.load(RUN_ID)

        def mean(h):
            return osc.aggregate(h[1], "confidence")["mean"].values

        v = lambda h: h[1].data["confidence"]
        return open_, {"column": lambda h: v(h)[:, col].values, "range": lambda h: v(h)[rng].values,
                       "scattered": lambda h: v(h).isel(sample=idx).values, "mean": mean, "full": lambda h: v(h).values}
    if backend.startswith("zarr"):
        import zarr

        def mean(z):
            total = np.zeros(z.shape[1])
            for a in range(0, z.shape[0], z.chunks[0]):
                total += z[a:a + z.chunks[0]].sum(axis=0, dtype=np.float64)
            return total / z.shape[0]

        return (lambda: zarr.open_array(work / backend, mode="r")), {
            "column": lambda z: z[:, col], "range": lambda z: z[rng], "scattered": lambda z: z.oindex[idx, :],
            "mean": mean, "full": lambda z: z[:]}
    import dask
    import dask.array as da

    def open_():
        files = sorted(data_dir(work, backend).glob("*.npy"))
        if backend == "dask-npy":
            return da.concatenate([da.from_array(np.load(f, mmap_mode="r"), chunks=-1) for f in files])
        load = dask.delayed(np.load, pure=True)
        return da.concatenate([da.from_delayed(load(f, mmap_mode="r"), (min(CHUNK, n - i * CHUNK), e), np.float32)
                               for i, f in enumerate(files)])

    return open_, {"column": lambda x: x[:, col].compute(), "range": lambda x: x[rng].compute(),
                   "scattered": lambda x: x[idx].compute(), "mean": lambda x: x.mean(axis=0, dtype="f8").compute(),
                   "full": lambda x: x.compute()}


def _status_kb(field: str) -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


def child(backend: str, op: str, work: str, n: str, e: str) -> None:
    """One measurement, in a fresh process: prints JSON (seconds, peak MiB added, a checksum)."""
    import dask.array  # noqa: F401  imported everywhere: xarray imports dask on its first lazy array if installed
    import xarray  # noqa: F401
    import zarr  # noqa: F401

    work_p = Path(work)
    open_, ops = backend_ops(backend, work_p, int(n), int(e))
    for f in sorted(p for p in data_dir(work_p, backend).rglob("*") if p.is_file()):  # warm the page cache
        with open(f, "rb") as fh:
            while fh.read(1 << 20):
                pass
    handle = None
    if op != "open":
        handle = open_()
        if backend == "orbitscope" and op == "mean":
            handle[0].clear_cache(RUN_ID)
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")  # reset VmHWM to the current RSS
    rss0 = _status_kb("VmRSS")
    t0 = time.perf_counter()
    out = open_() if op == "open" else ops[op](handle)
    dt = time.perf_counter() - t0
    peak = _status_kb("VmHWM") - rss0
    check = list(out[1].data["confidence"].shape if backend == "orbitscope" else out.shape) if op == "open" \
        else float(np.sum(np.asarray(out), dtype=np.float64))
    print(json.dumps({"s": dt, "mib": peak / 1024, "check": check}))


def build(work: Path, values: np.ndarray) -> None:
    """Store ``values`` as an orbitscope run and as two Zarr arrays."""
    import zarr

    import orbitscope as osc
    from orbitscope.tasks.variables import Variable

    n, e = values.shape
    angles = np.linspace(0, 360, e).tolist()
    meta = Variable("confidence", "float32", kind="probability").to_json()
    layout = {"orbit_dims": ["angle"], "orbit_shape": [e], "coords": {"angle": angles},
              "variables": {"confidence": {"dtype": "float32", "extra_dims": [], "extra_shape": [], "meta": meta}}}
    orbit = {"kind": "rotation", "angles": angles}
    st = osc.Store(work / "store")
    st.create_run(RUN_ID, name="bench", model_id="m", data_id="synthetic", orbit=orbit, task={"kind": "classification"},
                  layout=layout, attrs={"orbit_dims": ["angle"], "orbit": orbit}, n_samples=n, chunk_size=CHUNK)
    for i, start in enumerate(range(0, n, CHUNK)):
        st.write_chunk(RUN_ID, i, start, {"confidence": values[start:start + CHUNK]})
    st.finish_run(RUN_ID, n)
    for name, comp in [("zarr-raw", None), ("zarr-zstd", "auto")]:
        z = zarr.create_array(work / name, shape=values.shape, chunks=(CHUNK, e), dtype="float32", compressors=comp)
        z[:] = values


def expected(values: np.ndarray) -> dict[str, object]:
    rng, idx = positions(values.shape[0])
    s = lambda a: float(np.sum(a, dtype=np.float64))
    return {"open": list(values.shape), "column": s(values[:, values.shape[1] // 2]), "range": s(values[rng]),
            "scattered": s(values[idx]), "mean": s(values.mean(axis=0, dtype=np.float64)), "full": s(values)}


def disk_mib(path: Path) -> float:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 2**20


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--samples", type=int, default=60_000)
    ap.add_argument("--elements", type=int, default=73)
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "lazy_backend.txt")
    ap.add_argument("--smoke", action="store_true", help="600 x 5 values, one round, the mean only, nothing written "
                    "(the test suite runs this)")
    args = ap.parse_args()
    ops = ["mean"] if args.smoke else OPS
    if args.smoke:
        args.repeats, args.samples, args.elements, args.out = 1, 600, 5, None
    import dask
    import xarray
    import zarr

    started = time.perf_counter()
    values = np.random.default_rng(0).random((args.samples, args.elements), dtype=np.float32)
    want = expected(values)
    res: dict[tuple[str, str], list[dict]] = {(b, o): [] for b in BACKENDS for o in OPS}
    with tempfile.TemporaryDirectory(prefix="lazy-backend-") as tmp:
        work = Path(tmp)
        build(work, values)
        disk = {b: disk_mib(data_dir(work, b)) for b in BACKENDS}
        here = str(Path(__file__).resolve().parent)
        for r in range(args.repeats):
            for b in BACKENDS:
                for op in ops:
                    p = subprocess.run([sys.executable, "-c", CHILD_CODE, here, b, op, tmp, str(args.samples),
                                        str(args.elements)], check=False, capture_output=True, text=True)
                    if p.returncode != 0:
                        sys.exit(f"{b} {op} failed:\n{p.stderr}")
                    m = json.loads(p.stdout.strip().splitlines()[-1])
                    if not np.allclose(m["check"], want[op], rtol=1e-6):
                        sys.exit(f"{b} {op}: wrong answer {m['check']} (expected {want[op]})")
                    res[b, op].append(m)
            print(f"  round {r + 1}/{args.repeats} done ({time.perf_counter() - started:.0f} s)", file=sys.stderr)

    lines = [
        f"# {datetime.date.today().isoformat()}  command: python benchmarks/lazy_backend.py {' '.join(sys.argv[1:])}".rstrip(),
        (f"# python {platform.python_version()}, numpy {np.__version__}, zarr {zarr.__version__}, "
         f"dask {dask.__version__}, xarray {xarray.__version__}"),
        (f"# {args.samples:,} samples x {args.elements} elements float32 ({values.nbytes / 2**20:.1f} MiB), chunks of "
         f"{CHUNK} samples; {args.repeats} interleaved rounds, one fresh process per measurement, warm page cache"),
        "",
        "time: best ms (spread max-min over rounds)",
        f"{'operation':<26}" + "".join(f"{b:>15}" for b in BACKENDS),
    ]
    for op in ops:
        cells = []
        for b in BACKENDS:
            t = [m["s"] * 1e3 for m in res[b, op]]
            cells.append(f"{min(t):7.1f} ({max(t) - min(t):5.1f})")
        lines.append(f"{OP_LABEL[op]:<26}" + "".join(f"{c:>15}" for c in cells))
    lines += ["", "peak RSS added: best MiB", f"{'operation':<26}" + "".join(f"{b:>15}" for b in BACKENDS)]
    for op in ops:
        lines.append(f"{OP_LABEL[op]:<26}" + "".join(f"{min(m['mib'] for m in res[b, op]):15.1f}" for b in BACKENDS))
    lines += ["", f"{'on disk, MiB':<26}" + "".join(f"{disk[b]:15.2f}" for b in BACKENDS),
              "(orbitscope: chunk files + catalog.sqlite; dask-* read the same chunk files)",
              ("orbitscope times include the CRC-32 check of each chunk read (first read in a process); "
               "zarr and dask check nothing"),
              "dask-npy: from_array copies each memory map, so open reads everything into memory",
              "peak RSS counts the file pages a memory map touches (orbitscope, dask-delayed) like heap memory",
              f"total wall time {time.perf_counter() - started:.0f} s"]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)


if __name__ == "__main__":
    main()
