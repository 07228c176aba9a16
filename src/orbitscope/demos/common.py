"""Pieces the case-study demos share: their result record, training what is not cached, and the
whole-orbit statistics of their headline contrasts."""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from ..engine.evaluation import Run
from ..engine.executors import Executor, LocalExecutor, ProcessExecutor
from ..stats.invariance import InvarianceTest
from .shipped import cache_ready

__all__ = ["CaseResult", "train_missing", "contrast_rows", "with_invariance"]


@dataclass
class CaseResult:
    """What a case-study demo produced: runs and summary rows per part, written files, seconds
    per step, and parts skipped with the reason."""

    runs: dict[str, list[Run]] = field(default_factory=dict)
    summaries: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    files: dict[str, Path] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)


def train_missing(recipes: Sequence[Any], job: Callable[[Any, str], str], cache_file: Callable[[Any, Path], Path],
                  cache: Path, what: str, say: Callable[[str], None], *, shipped: bool = True) -> float:
    """Train the ``recipes`` whose model file ``cache_file(recipe, cache)`` is missing (copied from
    the shipped weights instead when ``shipped``: :func:`~orbitscope.demos.shipped.cache_ready`),
    in the order given, by ``job(recipe, cache_dir) -> name`` (a module-level function, so that
    worker processes can run it), two at a time in separate processes with one torch thread each
    when there are several; returns the seconds spent."""
    missing = [r for r in recipes if not cache_ready(cache_file(r, cache), shipped=shipped)]
    if not missing:
        return 0.0
    t0 = time.perf_counter()
    say(f"training {len(missing)} {what}(s){', two at a time' if len(missing) > 1 else ''}: "
        f"{', '.join(r.name for r in missing)}")
    runner: Executor = LocalExecutor() if len(missing) == 1 else ProcessExecutor(workers=2, threads=1)
    for _, name in runner.map(job, list(missing), str(cache)):
        say(f"trained {name}")
    return time.perf_counter() - t0


def _invariance(result: Any, metric: str, cache: dict[tuple[int, str], InvarianceTest | str]) -> InvarianceTest | str:
    from ..viz.report import invariance_tests

    key = (id(result), metric)
    if key not in cache:
        cache[key] = invariance_tests([result], metric)[0]
    return cache[key]


def _p(test: InvarianceTest | str) -> float | str:
    return test.p_value if isinstance(test, InvarianceTest) else test


def with_invariance(rows: list[dict[str, Any]], runs: Sequence[Run], metric: str) -> list[dict[str, Any]]:
    """``rows`` (one per run, same order) with the test of invariance of ``metric`` added
    (:func:`orbitscope.stats.invariance_test`, sup-t bootstrap): its p-value and the largest drop
    from the identity with its simultaneous 95 % interval (placed before a ``run`` column)."""
    cache: dict[tuple[int, str], InvarianceTest | str] = {}
    out = []
    for row, run in zip(rows, runs):
        test = _invariance(run.result, metric, cache)
        extra: dict[str, Any] = {f"{metric} invariance p": _p(test)}
        if isinstance(test, InvarianceTest):
            lo, hi = test.max_drop_interval
            extra[f"{metric} max drop [95% interval]"] = f"{test.max_drop:.4f} [{lo:.4f}, {hi:.4f}]"
        run_id = {"run": row["run"]} if "run" in row else {}
        out.append({**{k: v for k, v in row.items() if k != "run"}, **extra, **run_id})
    return out


def contrast_rows(runs: Sequence[Run], names: Sequence[str], pairs: Sequence[tuple[str, str]],
                  metrics: Sequence[str], *, alpha: float = 0.05) -> list[dict[str, Any]]:
    """A case study's headline contrasts with the whole-orbit statistics, one row per pair
    (A, B) and metric: both models' orbit means, the paired t-test of the samples' orbit means
    (its p), the per-element paired tests (exact McNemar or paired t, Holm across the elements:
    where A is worse / better, the smallest adjusted p) and each model's test of invariance
    (sup-t bootstrap p-value), with :meth:`~orbitscope.stats.PairedComparison.verdict`."""
    from ..stats import compare_models, orbit_values

    def orbit_mean(result: Any, metric: str) -> float:  # the mean over samples of each sample's orbit mean
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            return float(np.nanmean(np.nanmean(orbit_values(result, metric).values, axis=1)))

    by_name = {n: r.result for n, r in zip(names, runs)}
    cache: dict[tuple[int, str], InvarianceTest | str] = {}
    rows = []
    for a, b in pairs:
        for metric in metrics:
            ra, rb = by_name[a], by_name[b]
            c = compare_models(ra, rb, metric, alpha=alpha, names=(a, b))
            rows.append({
                "a": a, "b": b, "metric": metric, "samples": c.n_samples, "elements": c.n_elements,
                "a orbit mean": round(orbit_mean(ra, metric), 4), "b orbit mean": round(orbit_mean(rb, metric), 4),
                "orbit-mean difference (a - b)": round(c.orbit_mean_difference, 4),
                "orbit-mean paired t p": c.orbit_mean_p,
                "a worse at": int(c.worse.sum()), "a better at": int(c.better.sum()),
                "smallest Holm-adjusted p": float(np.nanmin(c.p_adjusted)) if c.p_adjusted.size else float("nan"),
                "a invariance p": _p(_invariance(ra, metric, cache)),
                "b invariance p": _p(_invariance(rb, metric, cache)),
                "verdict": c.verdict(),
            })
    return rows
