"""Server-side latency of the web interface, per user interaction.

Each interaction runs the callback functions the page triggers for it (see
``orbitscope.app.server``: the selection update, then the aggregate plot, the scatters, the
individual plot and the detail panels) and serialises their answers to JSON as Dash does; the
browser's drawing time is not included. Three cache states:

  cold    a fresh ``AppData`` (nothing loaded: the store is read, consensus and embeddings computed);
  warm    data cached, but a sample / element / angle not visited yet (per-sample figures are new);
  cached  the same interaction repeated (everything is a cache lookup).

Store: ``--home DIR`` (an existing store, e.g. a *copy* of the demo's; its first group's first two
runs unless ``--runs``), or by default one built in a temporary folder: 500 real MNIST digits ×
73 rotations (0…360° by 5°) × 2 reference CNNs (weights cached in the store, so live
re-evaluation runs).

Usage: python benchmarks/interface_latency.py [--home DIR [--runs ID ID]] [--repeats 30]
       [--csv benchmarks/results/interface_latency.csv] [--smoke]
"""

from __future__ import annotations

import argparse
import csv
import logging
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
from plotly.io.json import to_json_plotly
from threadpoolctl import threadpool_limits

import orbitscope as osc
from orbitscope.app import AppData, Event
from orbitscope.app import callbacks as cb
from orbitscope.results.store import Store

ANGLES = np.arange(0.0, 361.0, 5.0)


def build_store(home: Path, per_class: int = 50) -> None:
    """``10 × per_class`` MNIST digits × the angles of ANGLES × 2 random reference CNNs (sharpened
    outputs), weights cached."""
    data = osc.mnist_subset("test").stratified(per_class)
    for seed in (0, 1):
        torch.manual_seed(seed)
        model = osc.ReferenceCNN().eval()
        with torch.no_grad():
            model.classifier[-1].weight.mul_(40.0)
        osc.save_model(model, home / "models" / f"cnn{seed}.safetensors",
                       metadata={"info": {"model_hash": osc.model_hash(model)}})
        osc.evaluate(model, data, osc.Rotation(ANGLES), osc.Classification(store_probabilities=True), store=home,
                     name=f"cnn{seed}", model_name=f"cnn{seed}", optimize=True)


class Session:
    """One browser's state, driven through the callback functions."""

    def __init__(self, data: AppData, group: str, runs: list[str]) -> None:
        self.data, self.group, self.runs = data, group, runs
        self.metric, self.method, self.label_free = "confidence", "pca", False
        self.selection: Any = None
        self.live: list[Any] = [None]

    def _controls(self) -> Any:
        return cb.parse_controls(self.group, self.runs, self.metric, "all", self.method, "mean", "worst",
                                 ["on"] if self.label_free else [])

    def _views(self) -> None:
        s = self.selection
        for out in (cb.aggregate_figure(self.data, s), cb.scatter_panels(self.data, s),
                    cb.individual_figure(self.data, s), cb.stored_detail(self.data, s),
                    cb.live_detail(self.data, s, self.live)):
            to_json_plotly(out)

    def event(self, event: Event) -> None:
        up = cb.update_selection(self.data, self.selection, self._controls(), event)
        to_json_plotly(up.selection)
        self.selection = up.selection
        self.live = [v if v is not None else old for v, old in zip(up.live, self.live + [None])][:1]
        self._views()

    def load(self) -> None:
        c = cb.group_controls(self.data, self.group)
        _, self.metric, _ = cb.metric_controls(self.data, self.group, self.runs, self.label_free, self.metric)
        to_json_plotly(c.model_options)
        self.event(Event("context"))

    def live_at(self, angle: float) -> None:
        self.live = [angle]
        to_json_plotly(cb.live_detail(self.data, self.selection, self.live))


def timed(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1000.0


def measure(home: Path, runs: list[str] | None, repeats: int) -> list[dict[str, Any]]:
    store = Store(home, create=False)
    fresh = lambda: AppData(store)  # noqa: E731
    group = fresh().groups()[0]
    runs = runs or [r.run_id for r in group.runs if r.complete][:2]
    rng = np.random.default_rng(0)
    rows: list[dict[str, Any]] = []

    def record(name: str, state: str, ms: list[float]) -> None:
        rows.append({"interaction": name, "state": state, "n": len(ms), "median_ms": float(np.median(ms)),
                     "p95_ms": float(np.percentile(ms, 95)), "max_ms": float(np.max(ms))})

    # cold: everything from the store (a fresh AppData per repeat; few repeats, it is slow)
    cold = []
    for _ in range(min(repeats, 3)):
        s = Session(fresh(), group.key, runs)
        cold.append(timed(s.load))
    record("page load", "cold", cold)
    s = Session(fresh(), group.key, runs)
    s.load()
    record("page load", "cached", [timed(s.load) for _ in range(repeats)])

    shown = s.data.context(cb.Selection.from_dict(s.selection)).shown
    samples = [int(x) for x in rng.choice(shown, min(repeats, len(shown)), replace=False)]
    for state in ("warm", "cached"):  # the second pass revisits the same samples: all cached
        record("click scatter point", state, [timed(lambda x=x: s.event(Event("sample", 0, x))) for x in samples])
    for state in ("warm", "cached"):
        s.event(Event("rank", 0, 1))
        record("next ▶ (slider step)", state, [timed(lambda: s.event(Event("step", 0, 1))) for _ in range(repeats)])
    ranks = [int(k) for k in rng.integers(1, min(400, len(shown)), repeats)]
    for state in ("warm", "cached"):
        record("move ranking slider", state, [timed(lambda k=k: s.event(Event("rank", 1, k))) for k in ranks])
    for state in ("warm", "cached"):
        record("select orbit element", state, [timed(lambda a=a: s.event(Event("element", None, {"angle": a})))
                                               for a in ANGLES[: min(repeats, len(ANGLES))]])
    angles = [float(a) for a in rng.uniform(0, 360, repeats).round(0)]
    for state in ("warm", "cached"):
        record("live angle (re-evaluate)", state, [timed(lambda a=a: s.live_at(a)) for a in angles])
    for metric in ("correct", "consensus_agreement"):
        s.metric = metric
        record(f"switch metric to {metric}", "cold", [timed(lambda: s.event(Event("context")))])
        s.metric = "confidence"
        s.event(Event("context"))
        s.metric = metric
        record(f"switch metric to {metric}", "cached", [timed(lambda: s.event(Event("context"))) for _ in range(5)])
        s.metric = "confidence"
    s.method = "tsne"
    record("switch method to t-SNE", "cold", [timed(lambda: s.event(Event("context")))])
    record("switch method to t-SNE", "cached", [timed(lambda: s.event(Event("context"))) for _ in range(5)])
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", type=Path, help="an existing store (use a copy: reading may add WAL files)")
    parser.add_argument("--runs", nargs="*", help="run ids to compare (default: the first two of the first group)")
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--csv", type=Path, help="also write the table as CSV")
    parser.add_argument("--smoke", action="store_true",
                        help="20 digits x 9 angles, 2 repeats, nothing written (the test suite runs this)")
    args = parser.parse_args()
    global ANGLES
    if args.smoke:
        ANGLES, args.repeats, args.csv, args.home = np.arange(0.0, 361.0, 45.0), 2, None, None
    logging.basicConfig(level=logging.WARNING)
    torch.set_num_threads(1)  # as `orbitscope serve` does
    threadpool_limits(1)
    tmp = None
    home = args.home
    if home is None:
        tmp = tempfile.TemporaryDirectory(prefix="orbitscope-latency-")
        home = Path(tmp.name)
        t0 = time.perf_counter()
        build_store(home, 2 if args.smoke else 50)
        print(f"built a {20 if args.smoke else 500}-sample, {len(ANGLES)}-element, 2-model store in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    rows = measure(home, args.runs, args.repeats)
    print(f"{'interaction':34s} {'state':7s} {'n':>3s} {'median ms':>10s} {'p95 ms':>8s} {'max ms':>8s}")
    for r in rows:
        print(f"{r['interaction']:34s} {r['state']:7s} {r['n']:3d} {r['median_ms']:10.1f} {r['p95_ms']:8.1f} "
              f"{r['max_ms']:8.1f}")
    if args.csv:
        args.csv.parent.mkdir(parents=True, exist_ok=True)
        with open(args.csv, "w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    if tmp is not None:
        tmp.cleanup()


if __name__ == "__main__":
    main()
