"""Pieces the case-study demos share: their result record and training what is not cached."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from ..engine.evaluation import Run
from ..engine.executors import Executor, LocalExecutor, ProcessExecutor
from .shipped import cache_ready

__all__ = ["CaseResult", "train_missing"]


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
